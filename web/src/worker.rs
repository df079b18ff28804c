//! The inference worker: a dedicated Web Worker that owns the models and runs every forward
//! pass, so the page's thread only draws and takes input.
//!
//! Requests queue in an inbox while the worker computes; it yields to its event loop between
//! model calls (between the parts of an analysis, between the batches of a search), then sorts
//! what arrived by [`Plan::drain`]: the newest analysis runs and older ones are answered
//! `Superseded`; a cancel or a newer search stops the running search at the next batch. An
//! analysis waiting runs before the next search batch, so the verdicts follow the visitor's
//! typing even while a search goes on.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;

use js_sys::{Float32Array, Object, Reflect};
use shared::robustness::flip_search::{FlipOutcome, FlipSearch, FlipStatus};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use web_sys::{DedicatedWorkerGlobalScope, MessageEvent};

use crate::engine::Input;
use crate::js;
use crate::protocol::{FromWorker, Part, Plan, ToWorker};
use crate::runtime;
use crate::session::{self, Session, Shared};

/// Installs the message handler and tells the page the worker is listening. Called by the
/// worker binary's `main`.
pub fn run() {
    let scope: DedicatedWorkerGlobalScope = js_sys::global().unchecked_into();
    let worker = Rc::new(Worker {
        scope: scope.clone(),
        inbox: RefCell::default(),
        busy: Cell::new(false),
        session: RefCell::new(None),
        timed: RefCell::default(),
    });
    let receiver = worker.clone();
    let on_message =
        Closure::<dyn FnMut(MessageEvent)>::new(move |e: MessageEvent| receiver.receive(e));
    scope.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
    // The handler lives as long as the worker.
    on_message.forget();
    // performance.now() in a worker counts from the worker's creation.
    worker.timing("inference worker: wasm running", js::now_ms());
    worker.post(&FromWorker::Ready, None);
}

struct Worker {
    scope: DedicatedWorkerGlobalScope,
    inbox: RefCell<VecDeque<ToWorker>>,
    /// Whether `serve` is running (it empties the inbox, then stops).
    busy: Cell<bool>,
    session: RefCell<Option<Shared>>,
    /// The connections whose first run was timed: a first run includes the backend's one-off
    /// costs (WebGPU's shader compilation), reported once per connection for `make web-bench`.
    timed: RefCell<Vec<String>>,
}

impl Worker {
    fn receive(self: &Rc<Self>, event: MessageEvent) {
        let text = event.data().as_string().unwrap_or_default();
        match serde_json::from_str::<ToWorker>(&text) {
            Ok(request) => self.inbox.borrow_mut().push_back(request),
            Err(e) => {
                // The page and the worker come from one build, so this is a bug, not input.
                let error = format!("the worker could not read a request ({e}): {text:.200}");
                self.post(&FromWorker::Failed { id: 0, error }, None);
                return;
            }
        }
        if !self.busy.replace(true) {
            let worker = self.clone();
            wasm_bindgen_futures::spawn_local(async move {
                worker.serve().await;
                worker.busy.set(false);
            });
        }
    }

    fn timing(&self, what: impl Into<String>, millis: f64) {
        self.post(&FromWorker::Timing { what: what.into(), millis }, None);
    }

    /// Posts `message` as `{json}`, with `rows` as `{rows}` when given.
    fn post(&self, message: &FromWorker, rows: Option<&Float32Array>) {
        let json = serde_json::to_string(message).unwrap_or_else(|e| {
            let error = format!("the worker could not write a reply: {e}");
            let id = message.answers().unwrap_or(0);
            serde_json::to_string(&FromWorker::Failed { id, error }).unwrap_or_default()
        });
        let envelope = Object::new();
        let _ = Reflect::set(&envelope, &"json".into(), &json.into());
        if let Some(rows) = rows {
            let _ = Reflect::set(&envelope, &"rows".into(), rows);
        }
        let _ = self.scope.post_message(&envelope);
    }

    /// Runs requests until the inbox is empty.
    async fn serve(self: &Rc<Self>) {
        loop {
            // Let the messages posted meanwhile arrive.
            js::sleep(0).await;
            let plan = self.take_plan();
            if plan == Plan::default() {
                return;
            }
            let search = self.answer_waiting(plan, None).await;
            if let Some(ToWorker::Search { id, part, context, text, config }) = search {
                let outcome = self.search(id, &part, context, &text, config).await;
                self.post(
                    &reply(id, outcome.map(|outcome| FromWorker::Searched { id, outcome })),
                    None,
                );
            }
        }
    }

    fn take_plan(&self) -> Plan {
        Plan::drain(self.inbox.borrow_mut().drain(..))
    }

    /// Starts the session, answers superseded analyses and cancelled searches that are not
    /// `running`, and runs the newest analysis. Returns the search waiting, if any.
    async fn answer_waiting(self: &Rc<Self>, plan: Plan, running: Option<u64>) -> Option<ToWorker> {
        if let Some(ToWorker::Start { id, force_cpu, base, index }) = plan.start {
            let clock = js::now_ms();
            let (runtime, fallback) = runtime::select(force_cpu).await;
            self.timing(format!("backend set-up ({})", runtime.id()), js::now_ms() - clock);
            let (name, label) = (runtime.id().to_string(), runtime.label().to_string());
            let session = Session::new(runtime, index, base);
            *self.session.borrow_mut() = Some(Rc::new(RefCell::new(session)));
            self.post(&FromWorker::Started { id, runtime: name, label, fallback }, None);
        }
        for id in plan.superseded {
            self.post(&FromWorker::Superseded { id }, None);
        }
        for id in plan.cancelled.iter().filter(|&&id| Some(id) != running) {
            // A search cancelled before it started (or already answered: the page ignores that).
            let outcome = FlipOutcome {
                status: FlipStatus::Cancelled,
                clean_label: None,
                clean_probabilities: Vec::new(),
                best: None,
                queries: 0,
            };
            self.post(&FromWorker::Searched { id: *id, outcome }, None);
        }
        if let Some(ToWorker::Analyse { id, parts, clean, perturbed }) = plan.analyse {
            let answer = self.analyse(id, &parts, &clean, &perturbed).await;
            self.post(&reply(id, answer), None);
        }
        plan.search
    }

    fn session(&self) -> Result<Shared, String> {
        self.session.borrow().clone().ok_or_else(|| "the worker was not started".into())
    }

    /// The bundle of `model`, downloaded and put on the device on first use; announces it and,
    /// the first time for its task, the task's synonym index.
    async fn load(&self, model: usize) -> Result<Rc<session::LoadedModel>, String> {
        let session = self.session()?;
        if let Some(loaded) = session.borrow().loaded(model) {
            return Ok(loaded);
        }
        let progress = |got, total| self.post(&FromWorker::Download { got, total }, None);
        let loaded = session::load(&session, model, progress).await?;
        for (phase, millis) in &loaded.timings {
            self.timing(format!("model {}: {phase}", loaded.entry.id), *millis);
        }
        self.post(&FromWorker::Loaded { model, labels: loaded.labels() }, None);
        let task = loaded.entry.task.clone();
        if let Some(neighbours) = session.borrow().neighbours(&task) {
            let (words, rows, hidden) = neighbours.parts();
            let rows = Float32Array::from(rows);
            let words = words.to_vec();
            self.post(&FromWorker::Neighbours { task, words, hidden }, Some(&rows));
        }
        Ok(loaded)
    }

    /// Each part on the pair; `Superseded` as soon as a newer analysis waits.
    async fn analyse(
        &self,
        id: u64,
        parts: &[Part],
        clean: &Input,
        perturbed: &Input,
    ) -> Result<FromWorker, String> {
        let session = self.session()?;
        let start = js::now_ms();
        let mut analyses = Vec::with_capacity(parts.len());
        let mut labels = Vec::new();
        for part in parts {
            let model = self.load(part.model).await?;
            if !analyses.is_empty() {
                js::sleep(0).await;
            }
            if self.newer_analysis_waits() {
                return Ok(FromWorker::Superseded { id });
            }
            labels = model.labels();
            let began = js::now_ms();
            let analysis = session::analyse(&session, &model, &part.spec, clean, perturbed).await?;
            if parts.len() > 1 {
                let (index, labels) = (analyses.len(), labels.clone());
                let analysis = (*analysis).clone();
                self.post(&FromWorker::PartAnalysed { id, index, analysis, labels }, None);
            }
            analyses.push(analysis);
            let spec = part.spec.to_string();
            if !self.timed.borrow().contains(&spec) {
                self.timing(format!("first analysis with {spec}"), js::now_ms() - began);
                self.timed.borrow_mut().push(spec);
            }
        }
        let parts = analyses.iter().map(|a| (**a).clone()).collect();
        Ok(FromWorker::Analysed { id, parts, labels, millis: js::now_ms() - start })
    }

    fn newer_analysis_waits(&self) -> bool {
        self.inbox.borrow().iter().any(|r| matches!(r, ToWorker::Analyse { .. }))
    }

    /// The flip search against `part`'s model, batch by batch; between batches, waiting
    /// requests are answered and analyses run, and a cancel (or a newer search) stops it.
    async fn search(
        self: &Rc<Self>,
        id: u64,
        part: &Part,
        context: Option<String>,
        text: &str,
        config: shared::robustness::flip_search::FlipSearchConfig,
    ) -> Result<FlipOutcome, String> {
        let session = self.session()?;
        let model = self.load(part.model).await?;
        let neighbours = session.borrow().neighbours(&model.entry.task);
        // Words past the model's maximum length are never edited: it would not read the edit.
        let item = context.as_deref().map_or((text, None), |premise| (premise, Some(text)));
        let visible =
            model.tokenizer.visible_len(item, session::MAX_TOKENS).map_err(|e| e.to_string())?;
        let mut search = FlipSearch::with_visible(text, visible, neighbours.as_deref(), config)
            .map_err(|e| e.to_string())?;
        while let Some(batch) = search.next_batch() {
            self.post(&FromWorker::SearchProgress { id, progress: search.progress() }, None);
            js::sleep(0).await;
            let plan = self.take_plan();
            if plan.stops(id) {
                search.cancel();
            }
            if let Some(newer) = self.answer_waiting(plan, Some(id)).await {
                // The outer loop runs it once this search has answered.
                self.inbox.borrow_mut().push_front(newer);
            }
            if search.outcome().is_some() {
                break;
            }
            let items: Vec<Input> = batch
                .into_iter()
                .map(|t| match &context {
                    Some(premise) => Input::new(premise.clone(), Some(t)),
                    None => Input::new(t, None),
                })
                .collect();
            let probabilities = session::probabilities(&model, &part.spec, &items).await?;
            search.feed(&probabilities).map_err(|e| e.to_string())?;
        }
        search.outcome().ok_or_else(|| "the search did not finish".into())
    }
}

/// The final reply to request `id`: the answer, or why it failed.
fn reply(id: u64, answer: Result<FromWorker, String>) -> FromWorker {
    answer.unwrap_or_else(|error| FromWorker::Failed { id, error })
}
