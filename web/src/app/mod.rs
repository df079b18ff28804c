//! The page: input and perturbations on the left, verdicts and charts on the right.
//!
//! - [`state`]: the page's typed inputs ([`state::Demo`], provided as context) and what derives
//!   from them;
//! - [`analysis`]: the analysis action, dispatched on every change of the request;
//! - [`inputs`], [`results`], [`chart`]: the components; [`presets`] and [`ops`]: example
//!   inputs and the perturbation buttons; [`search`]: the search for an edit that flips a model.
//!
//! The page starts as a local resource (the model index, then the inference worker, which picks
//! the backend); the bundles download in the worker on the first analysis, with progress. Every
//! model call runs in the worker ([`crate::client`]), so the page answers input meanwhile.

mod analysis;
mod chart;
mod inputs;
mod ops;
mod presets;
mod results;
mod search;
mod state;

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use leptos::prelude::*;
use shared::data::Task;

use crate::catalog::{self, ModelIndex};
use crate::client::{Event, Inference};
use crate::loader;
use crate::protocol::{FromWorker, ToWorker};
use analysis::Analyses;
use inputs::{
    CleanText, ModelCards, PerturbButtons, PerturbedBox, PresetPicker, SolveControls, TaskPicker,
};
use results::ResultsPanel;
use search::FlipSearchPanel;
use state::{Demo, Started, Status};

/// Where the site keeps its models (see `trainer export --web --site`).
const MODELS: &str = "models/";
/// AdvGLUE's annotated dev set, copied next to the models by `make demo` (optional).
const PRESETS: &str = "data/dev_ann.json";

#[component]
pub fn App() -> impl IntoView {
    let download = RwSignal::new((0, 0));
    let loaded_models = RwSignal::new(0);
    let started = LocalResource::new(move || start(download, loaded_models));
    let demo = Demo::new(started, download, loaded_models);
    provide_context(demo);
    let advglue = LocalResource::new(|| async {
        match loader::fetch_text(PRESETS, true).await {
            Ok(Some(json)) => presets::advglue(PRESETS, &json),
            _ => Vec::new(),
        }
    });
    let presets = Signal::derive(move || {
        let mut all = presets::hand_written();
        all.extend(advglue.get().unwrap_or_default());
        all
    });
    let perturbed = Memo::new(move |_| demo.perturbed_text());
    let request = Memo::new(move |_| perturbed.with(|p| demo.request(p)));
    let analyses = Analyses::new(demo, request);
    let status = Signal::derive(move || status(demo, analyses));

    view! {
        <Header status />
        <main>
            <section class="inputs">
                <TaskPicker presets />
                <PresetPicker presets />
                <CleanText />
                <PerturbButtons />
                <FlipSearchPanel />
                <PerturbedBox perturbed />
                <SolveControls shown=analyses.shown />
                <ModelCards />
            </section>
            <ResultsPanel analyses />
        </main>
        <footer class="muted">
            "Models run in your browser (burn on WebGPU, or burn-ndarray on the CPU). "
            "Accuracy beside every robustness claim: see the model cards. "
            <a href="https://aclanthology.org/2024.emnlp-main.907/">"IM-BERT (EMNLP 2024)"</a>
        </footer>
    }
}

/// Reads the model index and starts the inference worker, which picks the backend. The worker's
/// events update `download` and, once a bundle is loaded, `loaded_models` (the synonym index
/// arrives with a task's first bundle).
async fn start(
    download: RwSignal<(u64, u64)>,
    loaded_models: RwSignal<usize>,
) -> Result<Started, String> {
    let force_cpu = query_param("backend").as_deref() == Some("cpu");
    crate::js::log_timing("page: wasm running");
    // The worker loads its wasm while the page reads the index.
    let neighbours = Rc::new(RefCell::new(HashMap::new()));
    let received = neighbours.clone();
    let inference = Inference::spawn(move |event| match event {
        Event::Download { got, total } => download.set((got, total)),
        Event::Loaded { .. } => loaded_models.update(|n| *n += 1),
        Event::Neighbours { task, index } => {
            received.borrow_mut().insert(task, Rc::new(index));
            loaded_models.update(|n| *n += 1);
        }
    })?;
    let index_json = loader::fetch_text(&format!("{MODELS}index.json"), true).await?.ok_or(
        "no models/index.json: export a model with `trainer export --web --site dist/models` \
         (see README)",
    )?;
    let index: ModelIndex =
        serde_json::from_str(&index_json).map_err(|e| format!("{MODELS}index.json: {e}"))?;
    let tasks: Vec<Task> = catalog::tasks(&index).iter().filter_map(|t| t.parse().ok()).collect();
    if tasks.is_empty() {
        return Err(format!("{MODELS}index.json lists no models of a known task"));
    }
    crate::js::log_timing("page: model index read");
    inference.ready().await?;
    let id = inference.new_id();
    let base = MODELS.to_string();
    let request = ToWorker::Start { id, force_cpu, base, index: index.clone() };
    let runtime = match inference.request(request).await {
        FromWorker::Started { runtime, label, fallback, .. } => {
            if let Some(reason) = fallback {
                leptos::logging::log!("CPU fallback: {reason}");
            }
            (runtime, label)
        }
        FromWorker::Failed { error, .. } => return Err(error),
        other => return Err(format!("the worker answered the start with {other:?}")),
    };
    Ok(Started { inference, index: Rc::new(index), runtime, tasks, neighbours })
}

/// Where the page stands: starting, failed (the first error wins), waiting for the first
/// verdict, or ready.
fn status(demo: Demo, analyses: Analyses) -> Status {
    let started =
        demo.started.with(|s| s.as_ref().map(|r| r.as_ref().map(|_| ()).map_err(Clone::clone)));
    match started {
        None => Status::Loading("setting up the backend…"),
        Some(Err(e)) => Status::Failed(e),
        Some(Ok(())) => match (demo.roles(), analyses.error()) {
            (Err(e), _) | (_, Some(e)) => Status::Failed(e),
            _ if analyses.shown.with(Option::is_none) => {
                // Waiting for the first verdict.
                Status::Loading("downloading the models…")
            }
            _ => Status::Ready,
        },
    }
}

#[component]
fn Header(status: Signal<Status>) -> impl IntoView {
    let demo = expect_context::<Demo>();
    let runtime = move |pick: fn(&(String, String)) -> &String| {
        demo.session().map_or("…".to_string(), |s| pick(&s.runtime).clone())
    };
    let download = move || {
        let (got, total) = demo.download.get();
        (total > 0 && got < total).then_some((got as f64, total as f64))
    };
    view! {
        <header>
            <h1>"IM-BERT, live"</h1>
            <p class="lede">
                "BERT stacks layers as h" <sub>"t"</sub> " = φ" <sub>"t"</sub>
                "(h" <sub>"t-1"</sub> "). IM-BERT solves the implicit Euler step h" <sub>"t"</sub>
                " = h" <sub>"t-1"</sub> " + φ" <sub>"t"</sub> "(h" <sub>"t"</sub>
                ") with T gradient steps; the paper says this damps how far a small change in the "
                "input can push the hidden states. EX-BERT, h"
                <sub>"t"</sub> " = h" <sub>"t-1"</sub> " + φ" <sub>"t"</sub> "(h" <sub>"t-1"</sub>
                "), has the skip connection without the solve. "
                "Perturb a sentence and see which models hold their verdict."
            </p>
            <div class="status-line">
                <span id="runtime" data-runtime=move || runtime(|r| &r.0)>
                    "backend: " {move || runtime(|r| &r.1)}
                </span>
                <span id="status" data-state=move || status.get().key()>
                    {move || status.get().message()}
                </span>
                {move || download().map(|(got, total)| view! {
                    <progress max=total value=got></progress>
                    <span class="muted">{format!("{:.1} / {:.1} MB", got / 1e6, total / 1e6)}</span>
                })}
            </div>
        </header>
    }
}

fn query_param(name: &str) -> Option<String> {
    let search = web_sys::window()?.location().search().ok()?;
    search.trim_start_matches('?').split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        (k == name).then(|| v.to_string())
    })
}
