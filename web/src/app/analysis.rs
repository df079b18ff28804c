//! Running the three parts on a request, as a leptos action: each change of the request
//! dispatches one; it waits a moment first, so typing does not queue a computation per key, and
//! gives up at the next model boundary once a newer request exists. Cached parts (the session
//! keeps every analysis) return at once, so moving the T slider re-runs IM-BERT only.

use std::sync::Arc;

use leptos::prelude::*;
use wasm_bindgen_futures::JsFuture;

use super::state::{Demo, Request};
use crate::catalog::{self, Assignment};
use crate::engine::Analysis;
use crate::session;

/// How long the inputs must stay still before a computation starts.
const SETTLE_MS: i32 = 200;

/// The three parts on one (clean, perturbed) pair.
#[derive(Debug, Clone, PartialEq)]
pub struct Results {
    /// A short, stable key of the inputs: the `data-key` the end-to-end test waits on.
    pub key: String,
    pub parts: Vec<(Assignment, Arc<Analysis>)>,
    /// Class names, from the bundles.
    pub labels: Vec<String>,
    pub millis: f64,
}

/// How one dispatched request ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Done(Arc<Results>),
    /// A newer request arrived first.
    Superseded,
    Failed(String),
}

/// The analysis action and what the page shows of it.
#[derive(Clone, Copy)]
pub struct Analyses {
    pub action: Action<Request, Outcome>,
    /// The latest finished results, kept on screen while newer ones compute.
    pub shown: Memo<Option<Arc<Results>>>,
}

impl Analyses {
    /// The action for `demo`, dispatched whenever `request` changes.
    pub fn new(demo: Demo, request: Memo<Option<Request>>) -> Self {
        let action = Action::new_local(move |wanted: &Request| {
            let wanted = wanted.clone();
            async move {
                let current =
                    move |r: &Request| request.with_untracked(|now| now.as_ref() == Some(r));
                match run(demo, &wanted, current).await {
                    Ok(Some(results)) => Outcome::Done(Arc::new(results)),
                    Ok(None) => Outcome::Superseded,
                    Err(e) => Outcome::Failed(e),
                }
            }
        });
        Effect::new(move |_| {
            if let Some(wanted) = request.get() {
                action.dispatch_local(wanted);
            }
        });
        let shown =
            Memo::new(move |previous: Option<&Option<Arc<Results>>>| match action.value().get() {
                Some(Outcome::Done(results)) => Some(results),
                _ => previous.cloned().flatten(),
            });
        Self { action, shown }
    }

    pub fn busy(&self) -> bool {
        self.action.pending().get()
    }

    /// The latest request's error, if it failed.
    pub fn error(&self) -> Option<String> {
        match self.action.value().get() {
            Some(Outcome::Failed(e)) => Some(e),
            _ => None,
        }
    }
}

/// Loads each part's bundle and analyses the pair with it; `Ok(None)` once `current` says the
/// request is no longer the page's.
async fn run(
    demo: Demo,
    wanted: &Request,
    current: impl Fn(&Request) -> bool,
) -> Result<Option<Results>, String> {
    sleep(SETTLE_MS).await;
    let Some(session) = demo.session_untracked() else { return Ok(None) };
    if !current(wanted) {
        return Ok(None);
    }
    let start = now_ms();
    let mut parts = Vec::new();
    let mut labels = Vec::new();
    for part in &wanted.roles {
        let fresh = session.borrow().loaded(part.model).is_none();
        let model =
            session::load(&session, part.model, |got, total| demo.download.set((got, total)))
                .await?;
        if fresh {
            demo.loaded_models.update(|n| *n += 1);
        }
        if !current(wanted) {
            return Ok(None);
        }
        labels = if model.entry.labels.is_empty() {
            model.card.labels.clone()
        } else {
            model.entry.labels.clone()
        };
        let spec = catalog::with_iterations(&part.spec, wanted.t, wanted.gamma);
        let analysis =
            session::analyse(&session, &model, &spec, &wanted.clean, &wanted.perturbed).await?;
        parts.push((Assignment { spec, ..part.clone() }, analysis));
    }
    if !current(wanted) {
        return Ok(None);
    }
    let key = format!(
        "{}|{}|{}|{}",
        wanted.t,
        wanted.gamma,
        fnv1a(&format!("{:?}", wanted.clean)),
        fnv1a(&format!("{:?}", wanted.perturbed))
    );
    Ok(Some(Results { key, parts, labels, millis: now_ms() - start }))
}

/// FNV-1a: a short, stable key for the DOM.
fn fnv1a(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3))
}

/// Yields to the browser for `ms`: lets the page paint before the CPU fallback blocks the thread.
pub async fn sleep(ms: i32) {
    let promise = js_sys::Promise::new(&mut |resolve, _| {
        if let Some(w) = web_sys::window() {
            let _ = w.set_timeout_with_callback_and_timeout_and_arguments_0(&resolve, ms);
        }
    });
    let _ = JsFuture::from(promise).await;
}

fn now_ms() -> f64 {
    web_sys::window().and_then(|w| w.performance()).map_or(0.0, |p| p.now())
}
