//! Running the three parts on a request, as a leptos action: each change of the request
//! dispatches one; it waits a moment first, so typing does not queue a computation per key. The
//! worker runs it, and answers `Superseded` at the next model boundary once a newer request
//! reached it. Cached parts (the worker keeps every analysis) return at once, so moving the T
//! slider re-runs IM-BERT only.

use std::sync::Arc;

use leptos::prelude::*;

use super::state::{Demo, Request};
use crate::catalog::{self, Assignment};
use crate::engine::Analysis;
use crate::js;
use crate::protocol::{FromWorker, Part, ToWorker};

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
    /// The parts done so far of the latest request, as they come; the page shows them until its
    /// first results (on a software GPU, BERT's verdict comes a minute before IM-BERT's). Their
    /// `key` is empty.
    pub parts_so_far: RwSignal<Option<Arc<Results>>>,
}

impl Analyses {
    /// The action for `demo`, dispatched whenever `request` changes.
    pub fn new(demo: Demo, request: Memo<Option<Request>>) -> Self {
        let parts_so_far = RwSignal::new(None);
        let action = Action::new_local(move |wanted: &Request| {
            let wanted = wanted.clone();
            async move {
                let current =
                    move |r: &Request| request.with_untracked(|now| now.as_ref() == Some(r));
                match run(demo, &wanted, current, parts_so_far).await {
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
        Self { action, shown, parts_so_far }
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

/// Asks the worker to analyse the pair with each part (it downloads the bundles it lacks);
/// `Ok(None)` once `current` says the request is no longer the page's, or the worker answered
/// that a newer one superseded it. The parts done so far go to `partial` as they come.
async fn run(
    demo: Demo,
    wanted: &Request,
    current: impl Fn(&Request) -> bool + Copy + 'static,
    partial: RwSignal<Option<Arc<Results>>>,
) -> Result<Option<Results>, String> {
    js::sleep(SETTLE_MS).await;
    let Some(started) = demo.session_untracked() else { return Ok(None) };
    if !current(wanted) {
        return Ok(None);
    }
    let assignments: Vec<Assignment> = wanted
        .roles
        .iter()
        .map(|a| Assignment {
            spec: catalog::with_iterations(&a.spec, wanted.t, wanted.gamma),
            ..a.clone()
        })
        .collect();
    let parts = assignments.iter().map(|a| Part { model: a.model, spec: a.spec.clone() }).collect();
    let id = started.inference.new_id();
    let (clean, perturbed) = (wanted.clean.clone(), wanted.perturbed.clone());
    let (watched, assignments_seen) = (wanted.clone(), assignments.clone());
    let done = std::cell::RefCell::new(Vec::new());
    started.inference.watch_parts(id, move |index, analysis, labels| {
        let mut done = done.borrow_mut();
        if index != done.len() || !current(&watched) {
            return;
        }
        done.push((assignments_seen[index].clone(), Arc::new(analysis)));
        let parts = done.clone();
        partial.set(Some(Arc::new(Results { key: String::new(), parts, labels, millis: 0.0 })));
    });
    let request = ToWorker::Analyse { id, parts, clean, perturbed };
    let (analyses, labels, millis) = match started.inference.request(request).await {
        FromWorker::Analysed { parts, labels, millis, .. } => (parts, labels, millis),
        FromWorker::Superseded { .. } => return Ok(None),
        FromWorker::Failed { error, .. } => return Err(error),
        other => return Err(format!("the worker answered an analysis with {other:?}")),
    };
    if !current(wanted) {
        return Ok(None);
    }
    let parts = assignments.into_iter().zip(analyses.into_iter().map(Arc::new)).collect();
    let key = format!(
        "{}|{}|{}|{}",
        wanted.t,
        wanted.gamma,
        fnv1a(&format!("{:?}", wanted.clean)),
        fnv1a(&format!("{:?}", wanted.perturbed))
    );
    Ok(Some(Results { key, parts, labels, millis }))
}

/// FNV-1a: a short, stable key for the DOM.
fn fnv1a(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3))
}
