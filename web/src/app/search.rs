//! "Find an edit that fools BERT" (or IM-BERT): `shared::robustness::flip_search` against one
//! part's model, run in the inference worker batch by batch; progress comes back after each
//! batch, and Cancel stops it at the next one. The edit found goes into the perturbed box, where
//! the analysis shows whether the other parts flip on it too.

use leptos::prelude::*;
use shared::robustness::flip_search::{FlipOutcome, FlipProgress, FlipSearchConfig, FlipStatus};

use super::state::{Demo, Perturbed};
use crate::catalog::{self, Role};
use crate::protocol::{FromWorker, Part, ToWorker};

/// The search's budget in the browser: each query is a forward pass on the visitor's machine.
/// Small batches: an analysis the visitor asks for meanwhile runs between two.
fn config() -> FlipSearchConfig {
    FlipSearchConfig { max_queries: 300, batch_size: 4, ..Default::default() }
}

/// Where the latest search stands; `key` is the `data-state` the end-to-end test waits on.
#[derive(Debug, Clone, PartialEq)]
enum SearchState {
    Idle,
    /// `name`: the part searched against (`BERT`, `IM-RoBERTa`).
    Running {
        name: String,
        progress: FlipProgress,
    },
    Finished {
        name: String,
        outcome: FlipOutcome,
    },
    Failed(String),
}

impl SearchState {
    fn key(&self) -> &'static str {
        match self {
            SearchState::Idle => "idle",
            SearchState::Running { .. } => "running",
            SearchState::Finished { outcome, .. } => match outcome.status {
                FlipStatus::Flipped => "found",
                FlipStatus::Cancelled => "cancelled",
                _ => "not-found",
            },
            SearchState::Failed(_) => "error",
        }
    }

    fn message(&self) -> String {
        match self {
            SearchState::Idle => String::new(),
            SearchState::Running { name, progress } => format!(
                "searching for an edit that flips {name}: {} of {} queries{}",
                progress.queries,
                progress.max_queries,
                match progress.edits {
                    0 => String::new(),
                    n => format!(", trying {n} edit(s)"),
                }
            ),
            SearchState::Finished { name, outcome } => {
                let q = outcome.queries;
                match (outcome.status, &outcome.best) {
                    (FlipStatus::Flipped, Some(best)) => format!(
                        "{} edit(s) flip {name} ({q} queries): loaded below; the verdicts show \
                         whether the other models flip too",
                        best.num_edits
                    ),
                    (FlipStatus::Cancelled, _) => format!("cancelled after {q} queries"),
                    (FlipStatus::NothingToEdit, _) => "nothing in this text can be edited".into(),
                    (_, Some(best)) => format!(
                        "no edit within the budget flips {name} ({q} queries); the closest \
                         ({} edit(s)) is loaded below",
                        best.num_edits
                    ),
                    (_, None) => format!("no edit flips {name} ({q} queries)"),
                }
            }
            SearchState::Failed(e) => format!("the search failed: {e}"),
        }
    }
}

/// The buttons, the progress line and Cancel.
#[component]
pub fn FlipSearchPanel() -> impl IntoView {
    let demo = expect_context::<Demo>();
    let state = RwSignal::new(SearchState::Idle);
    // The worker's id of the latest search: only it reports, even when cancelled.
    let latest = StoredValue::new(None::<u64>);
    // The part's name for the buttons and messages (IM-RoBERTa on a RoBERTa bundle).
    let name_of = move |role: Role| {
        let roles = demo.roles().unwrap_or_default();
        roles
            .iter()
            .find(|a| a.role == role)
            .map_or_else(|| role.name(Default::default()), |a| a.name())
    };
    let start = move |role: Role| {
        let Some(started) = demo.session_untracked() else { return };
        let name = untrack(|| name_of(role));
        let id = started.inference.new_id();
        latest.set_value(Some(id));
        // Running at once, so that Cancel is live before the first batch.
        let max_queries = config().max_queries;
        let progress = FlipProgress { queries: 0, max_queries, edits: 0, lowest_probability: None };
        state.set(SearchState::Running { name: name.clone(), progress });
        let watched = name.clone();
        started.inference.watch_search(id, move |progress| {
            if latest.get_value() == Some(id) {
                state.set(SearchState::Running { name: watched.clone(), progress });
            }
        });
        leptos::task::spawn_local(async move {
            let result = search(demo, id, role, name).await;
            if latest.get_value() == Some(id) {
                state.set(result.unwrap_or_else(SearchState::Failed));
            }
        });
    };
    let cancel = move |_| {
        if let (Some(started), Some(id)) = (demo.session_untracked(), latest.get_value()) {
            started.inference.send(&ToWorker::Cancel { id });
        }
    };
    let running = move || matches!(state.get(), SearchState::Running { .. });
    let ready = move || demo.roles().is_ok_and(|r| !r.is_empty());
    view! {
        <div class="search">
            <button data-search="bert" disabled=move || !ready() || running()
                on:click=move |_| start(Role::Bert)>
                {move || format!("Find an edit that fools {}", name_of(Role::Bert))}
            </button>
            <button data-search="im" disabled=move || !ready() || running()
                on:click=move |_| start(Role::Im)>
                {move || format!("…that fools {}", name_of(Role::Im))}
            </button>
            <button id="search-cancel" disabled=move || !running() on:click=cancel>"Cancel"</button>
            <p id="search-status" class="muted" data-state=move || state.get().key()>
                {move || state.get().message()}
            </p>
        </div>
    }
}

/// Runs search `id` in the worker against `role`'s model (`name`) with the page's T and gamma;
/// loads the edit found (or the closest) into the perturbed box.
async fn search(demo: Demo, id: u64, role: Role, name: String) -> Result<SearchState, String> {
    let started = demo.session_untracked().ok_or("the models are not loaded yet")?;
    let roles = demo.roles()?;
    let assigned = roles.iter().find(|a| a.role == role).ok_or("no model plays that part")?;
    let spec = catalog::with_iterations(
        &assigned.spec,
        demo.t.get_untracked(),
        demo.gamma.get_untracked(),
    );
    let part = Part { model: assigned.model, spec };
    let (context, text) = if demo.task.get_untracked().is_pair() {
        (Some(demo.text_a.get_untracked()), demo.text_b.get_untracked())
    } else {
        (None, demo.text_a.get_untracked())
    };
    let request = ToWorker::Search { id, part, context, text, config: config() };
    let outcome = match started.inference.request(request).await {
        FromWorker::Searched { outcome, .. } => outcome,
        FromWorker::Failed { error, .. } => return Err(error),
        other => return Err(format!("the worker answered a search with {other:?}")),
    };
    if let (true, Some(best)) = (outcome.status != FlipStatus::Cancelled, &outcome.best) {
        let origin = match outcome.status {
            FlipStatus::Flipped => format!("found by the search: flips {name}"),
            _ => format!("the search's closest try (does not flip {name})"),
        };
        demo.perturbed.set(Perturbed::Fixed { text: best.perturbation.text.clone(), origin });
    }
    Ok(SearchState::Finished { name, outcome })
}
