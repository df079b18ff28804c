//! "Find an edit that fools BERT" (or IM-BERT): `shared::robustness::flip_search` against one
//! part's model, batch by batch, yielding to the browser between batches so that the page keeps
//! answering and Cancel (or a newer search) stops it at the next batch. The edit found goes into
//! the perturbed box, where the analysis shows whether the other parts flip on it too.

use leptos::prelude::*;
use shared::robustness::flip_search::{
    FlipOutcome, FlipProgress, FlipSearch, FlipSearchConfig, FlipStatus,
};

use super::analysis::sleep;
use super::state::{Demo, Perturbed};
use crate::catalog::{self, Role};
use crate::engine::Input;
use crate::session;

/// The search's budget in the browser: each query is a forward pass on the visitor's machine.
/// Small batches: the page answers input only between two (inference is on the page's thread).
fn config() -> FlipSearchConfig {
    FlipSearchConfig { max_queries: 300, batch_size: 4, ..Default::default() }
}

/// Where the latest search stands; `key` is the `data-state` the end-to-end test waits on.
#[derive(Debug, Clone, PartialEq)]
enum SearchState {
    Idle,
    Running { role: Role, progress: FlipProgress },
    Finished { role: Role, outcome: FlipOutcome },
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
            SearchState::Running { role, progress } => format!(
                "searching for an edit that flips {}: {} of {} queries{}",
                role.name(),
                progress.queries,
                progress.max_queries,
                match progress.edits {
                    0 => String::new(),
                    n => format!(", trying {n} edit(s)"),
                }
            ),
            SearchState::Finished { role, outcome } => {
                let (role, q) = (role.name(), outcome.queries);
                match (outcome.status, &outcome.best) {
                    (FlipStatus::Flipped, Some(best)) => format!(
                        "{} edit(s) flip {role} ({q} queries): loaded below; the verdicts show \
                         whether the other models flip too",
                        best.num_edits
                    ),
                    (FlipStatus::Cancelled, _) => format!("cancelled after {q} queries"),
                    (FlipStatus::NothingToEdit, _) => "nothing in this text can be edited".into(),
                    (_, Some(best)) => format!(
                        "no edit within the budget flips {role} ({q} queries); the closest \
                         ({} edit(s)) is loaded below",
                        best.num_edits
                    ),
                    (_, None) => format!("no edit flips {role} ({q} queries)"),
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
    // Each search and each cancel takes a new generation: a search stops at its next batch once
    // it is not the latest. Only the latest search started reports, even when cancelled.
    let generation = StoredValue::new(0u64);
    let latest = StoredValue::new(0u64);
    let start = move |role: Role| {
        let id = generation.get_value() + 1;
        generation.set_value(id);
        latest.set_value(id);
        // Running at once, so that Cancel is live before the first batch.
        let max_queries = config().max_queries;
        let progress = FlipProgress { queries: 0, max_queries, edits: 0, lowest_probability: None };
        state.set(SearchState::Running { role, progress });
        leptos::task::spawn_local(async move {
            let result = search(demo, role, state, move || generation.get_value() == id).await;
            if latest.get_value() == id {
                state.set(result.unwrap_or_else(SearchState::Failed));
            }
        });
    };
    let cancel = move |_| generation.update_value(|g| *g += 1);
    let running = move || matches!(state.get(), SearchState::Running { .. });
    let ready = move || demo.roles().is_ok_and(|r| !r.is_empty());
    view! {
        <div class="search">
            <button data-search="bert" disabled=move || !ready() || running()
                on:click=move |_| start(Role::Bert)>"Find an edit that fools BERT"</button>
            <button data-search="im" disabled=move || !ready() || running()
                on:click=move |_| start(Role::Im)>"…that fools IM-BERT"</button>
            <button id="search-cancel" disabled=move || !running() on:click=cancel>"Cancel"</button>
            <p id="search-status" class="muted" data-state=move || state.get().key()>
                {move || state.get().message()}
            </p>
        </div>
    }
}

/// Runs one search against `role`'s model with the page's T and gamma; loads the edit found
/// (or the closest) into the perturbed box.
async fn search(
    demo: Demo,
    role: Role,
    state: RwSignal<SearchState>,
    current: impl Fn() -> bool,
) -> Result<SearchState, String> {
    let session = demo.session_untracked().ok_or("the models are not loaded yet")?;
    let roles = demo.roles()?;
    let part = roles.iter().find(|a| a.role == role).ok_or("no model plays that part")?;
    let model = session::load(&session, part.model, |_, _| {}).await?;
    let spec =
        catalog::with_iterations(&part.spec, demo.t.get_untracked(), demo.gamma.get_untracked());
    let task = demo.task.get_untracked();
    let neighbours = session.borrow().neighbours(task.name());
    let (context, text) = if task.is_pair() {
        (Some(demo.text_a.get_untracked()), demo.text_b.get_untracked())
    } else {
        (None, demo.text_a.get_untracked())
    };
    let mut search =
        FlipSearch::new(&text, neighbours.as_deref(), config()).map_err(|e| e.to_string())?;
    while let Some(batch) = search.next_batch() {
        if !current() {
            search.cancel();
            break;
        }
        state.set(SearchState::Running { role, progress: search.progress() });
        // Let the page paint and take input before the batch occupies the thread.
        sleep(0).await;
        let items: Vec<Input> = batch
            .into_iter()
            .map(|t| match &context {
                Some(a) => Input::new(a.clone(), Some(t)),
                None => Input::new(t, None),
            })
            .collect();
        let probabilities = session::probabilities(&model, &spec, &items).await?;
        search.feed(&probabilities).map_err(|e| e.to_string())?;
    }
    let outcome = search.outcome().ok_or("the search did not finish")?;
    if let (true, Some(best)) = (outcome.status != FlipStatus::Cancelled, &outcome.best) {
        let origin = match outcome.status {
            FlipStatus::Flipped => format!("found by the search: flips {}", role.name()),
            _ => format!("the search's closest try (does not flip {})", role.name()),
        };
        demo.perturbed.set(Perturbed::Fixed { text: best.perturbation.text.clone(), origin });
    }
    Ok(SearchState::Finished { role, outcome })
}
