//! The page's handle on the inference worker ([`crate::worker`]): it spawns the worker, posts
//! requests and resolves each one's future when its final reply arrives; progress events go to
//! the callbacks the page registered. If the worker dies (a panic in its wasm), every waiting
//! request fails with the browser's error message instead of hanging.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::{Rc, Weak};

use js_sys::{Float32Array, Function, Promise, Reflect};
use shared::robustness::flip_search::FlipProgress;
use shared::robustness::neighbours::WordNeighbours;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;
use web_sys::{ErrorEvent, MessageEvent, Worker};

use crate::engine::Analysis;
use crate::protocol::{FromWorker, ToWorker};

/// The worker's script, which loads one of the `inference` binary's two builds (see
/// `web/inference_loader.js`); it is given the page's query (`?simd=plain` picks the SIMD128 one).
const WORKER_URL: &str = "./inference_loader.js";

/// What the worker reports besides answers.
pub enum Event {
    Download {
        got: u64,
        total: u64,
    },
    Loaded {
        model: usize,
    },
    /// A task's synonym index, rebuilt on the page (the perturbation buttons use it).
    Neighbours {
        task: String,
        index: WordNeighbours,
    },
}

type ProgressHandlers = RefCell<HashMap<u64, Box<dyn Fn(FlipProgress)>>>;
type PartHandlers = RefCell<HashMap<u64, Box<dyn Fn(usize, Analysis, Vec<String>)>>>;
type Handler<E> = RefCell<Option<Closure<dyn FnMut(E)>>>;

pub struct Inference {
    worker: Worker,
    next_id: Cell<u64>,
    /// Resolve functions of the requests waiting for their answer, by id (0: the `Ready`).
    waiting: RefCell<HashMap<u64, Function>>,
    answers: RefCell<HashMap<u64, FromWorker>>,
    progress: ProgressHandlers,
    parts: PartHandlers,
    on_event: Box<dyn Fn(Event)>,
    /// Set once the worker has died: why.
    dead: RefCell<Option<String>>,
    // The handlers must live as long as the worker.
    _on_message: Handler<MessageEvent>,
    _on_error: Handler<ErrorEvent>,
}

impl Inference {
    /// Spawns the worker; it starts loading at once, while the caller does other work (the page
    /// fetches its model index meanwhile). [`Inference::ready`] waits until it listens.
    pub fn spawn(on_event: impl Fn(Event) + 'static) -> Result<Rc<Self>, String> {
        let query = web_sys::window().and_then(|w| w.location().search().ok()).unwrap_or_default();
        let worker = Worker::new(&format!("{WORKER_URL}{query}"))
            .map_err(|e| format!("could not start the inference worker: {e:?}"))?;
        let inference = Rc::new(Self {
            worker,
            next_id: Cell::new(1),
            waiting: RefCell::default(),
            answers: RefCell::default(),
            progress: RefCell::default(),
            parts: RefCell::default(),
            on_event: Box::new(on_event),
            dead: RefCell::new(None),
            _on_message: RefCell::new(None),
            _on_error: RefCell::new(None),
        });
        let weak = Rc::downgrade(&inference);
        let on_message = Closure::<dyn FnMut(MessageEvent)>::new(move |e: MessageEvent| {
            if let Some(inference) = Weak::upgrade(&weak) {
                inference.receive(e);
            }
        });
        let weak = Rc::downgrade(&inference);
        let on_error = Closure::<dyn FnMut(ErrorEvent)>::new(move |e: ErrorEvent| {
            if let Some(inference) = Weak::upgrade(&weak) {
                inference.die(format!("the inference worker failed: {}", e.message()));
            }
        });
        inference.worker.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
        inference.worker.set_onerror(Some(on_error.as_ref().unchecked_ref()));
        *inference._on_message.borrow_mut() = Some(on_message);
        *inference._on_error.borrow_mut() = Some(on_error);
        Ok(inference)
    }

    /// Waits until the worker listens (its `Ready`, which may have come already).
    pub async fn ready(&self) -> Result<(), String> {
        match self.wait(0).await {
            FromWorker::Ready => {
                let at = crate::js::now_ms();
                leptos::logging::log!("timing: page: inference worker ready at {at:.0} ms");
                Ok(())
            }
            FromWorker::Failed { error, .. } => Err(error),
            other => Err(format!("the inference worker said {other:?} before it was ready")),
        }
    }

    /// A fresh request id.
    pub fn new_id(&self) -> u64 {
        let id = self.next_id.get();
        self.next_id.set(id + 1);
        id
    }

    /// Posts `request` and waits for its final reply.
    pub async fn request(&self, request: ToWorker) -> FromWorker {
        let id = request.id();
        self.send(&request);
        self.wait(id).await
    }

    /// Posts `request` without waiting (a cancel: the search it stops answers).
    pub fn send(&self, request: &ToWorker) {
        let json = serde_json::to_string(request).unwrap_or_default();
        if let Err(e) = self.worker.post_message(&json.into()) {
            self.die(format!("could not reach the inference worker: {e:?}"));
        }
    }

    /// Calls `on_progress` with search `id`'s progress until it is answered.
    pub fn watch_search(&self, id: u64, on_progress: impl Fn(FlipProgress) + 'static) {
        self.progress.borrow_mut().insert(id, Box::new(on_progress));
    }

    /// Calls `on_part` with each part of analysis `id` as it is done, until it is answered.
    pub fn watch_parts(&self, id: u64, on_part: impl Fn(usize, Analysis, Vec<String>) + 'static) {
        self.parts.borrow_mut().insert(id, Box::new(on_part));
    }

    async fn wait(&self, id: u64) -> FromWorker {
        if let Some(answer) = self.answers.borrow_mut().remove(&id) {
            return answer;
        }
        if let Some(error) = self.dead.borrow().clone() {
            return FromWorker::Failed { id, error };
        }
        let promise = Promise::new(&mut |resolve, _| {
            self.waiting.borrow_mut().insert(id, resolve);
        });
        let _ = JsFuture::from(promise).await;
        self.answers.borrow_mut().remove(&id).unwrap_or_else(|| FromWorker::Failed {
            id,
            error: self.dead.borrow().clone().unwrap_or_else(|| "no answer".into()),
        })
    }

    /// Hands `answer` to request `id`'s waiter, or keeps it for [`Inference::wait`] when nobody
    /// waits yet (the `Ready` can arrive before the page asks for it).
    fn resolve(&self, id: u64, answer: Option<FromWorker>) {
        if let Some(answer) = answer {
            self.answers.borrow_mut().insert(id, answer);
        }
        let waiter = self.waiting.borrow_mut().remove(&id);
        if let Some(resolve) = waiter {
            let _ = resolve.call0(&JsValue::NULL);
        }
    }

    fn receive(&self, event: MessageEvent) {
        let data = event.data();
        let json = Reflect::get(&data, &"json".into()).ok().and_then(|j| j.as_string());
        let message = match json.as_deref().map(serde_json::from_str::<FromWorker>) {
            Some(Ok(message)) => message,
            Some(Err(e)) => return self.die(format!("unreadable reply from the worker: {e}")),
            None => return self.die("a reply from the worker without JSON".into()),
        };
        if let Some(id) = message.answers() {
            self.progress.borrow_mut().remove(&id);
            self.parts.borrow_mut().remove(&id);
            return self.resolve(id, Some(message));
        }
        match message {
            FromWorker::Ready => self.resolve(0, Some(FromWorker::Ready)),
            FromWorker::Download { got, total } => (self.on_event)(Event::Download { got, total }),
            FromWorker::Loaded { model, .. } => (self.on_event)(Event::Loaded { model }),
            FromWorker::Timing { what, millis } => {
                leptos::logging::log!("timing: {what}: {millis:.0} ms")
            }
            FromWorker::PartAnalysed { id, index, analysis, labels } => {
                if let Some(on_part) = self.parts.borrow().get(&id) {
                    on_part(index, analysis, labels);
                }
            }
            FromWorker::SearchProgress { id, progress } => {
                if let Some(on_progress) = self.progress.borrow().get(&id) {
                    on_progress(progress);
                }
            }
            FromWorker::Neighbours { task, words, hidden } => {
                let rows = Reflect::get(&data, &"rows".into())
                    .ok()
                    .and_then(|r| r.dyn_into::<Float32Array>().ok())
                    .map(|r| r.to_vec())
                    .unwrap_or_default();
                match WordNeighbours::from_parts(words, rows, hidden) {
                    Ok(index) => (self.on_event)(Event::Neighbours { task, index }),
                    Err(e) => leptos::logging::warn!("synonym index of {task}: {e}"),
                }
            }
            // Final replies were handled above.
            _ => {}
        }
    }

    /// Fails every waiting request with `error`, and every later one.
    fn die(&self, error: String) {
        leptos::logging::error!("{error}");
        self.dead.borrow_mut().get_or_insert(error);
        let ids: Vec<u64> = self.waiting.borrow().keys().copied().collect();
        for id in ids {
            self.resolve(id, None);
        }
    }
}

impl Drop for Inference {
    fn drop(&mut self) {
        self.worker.terminate();
    }
}
