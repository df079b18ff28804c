//! The messages between the page and the inference worker, and the worker's inbox rules.
//!
//! The page never runs a model: it posts [`ToWorker`] requests and the worker answers each with
//! one final [`FromWorker`] reply carrying the request's id, with progress events in between.
//! Messages travel as JSON (`{json}`), plus one `Float32Array` (`{rows}`) for the synonym index,
//! which is too large for text. Non-finite floats (a diverging solve at a large gamma) survive
//! the trip as strings, which JSON numbers cannot carry.
//!
//! The inbox rules ([`Plan::drain`]) are what keep the page live: of the analyses waiting, only
//! the newest runs (the page's inputs moved on), a cancel stops its search at the next batch, and
//! a new search replaces the running one.

use serde::{Deserialize, Serialize};
use shared::robustness::flip_search::{FlipOutcome, FlipProgress, FlipSearchConfig};
use shared::ConnectionSpec;

use crate::catalog::ModelIndex;
use crate::engine::{Analysis, Input};

/// A request from the page.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ToWorker {
    /// Pick the backend (`force_cpu`: the page's `?backend=cpu`) and take the site's model index;
    /// `base` is the URL of the directory holding `index.json`, ending in `/`.
    Start { id: u64, force_cpu: bool, base: String, index: ModelIndex },
    /// Analyse the pair with each part's model, downloading bundles as needed.
    Analyse { id: u64, parts: Vec<Part>, clean: Input, perturbed: Input },
    /// Search for the fewest edits of `text` that flip `part`'s model. `context`: the premise,
    /// for pair tasks (the search edits the hypothesis).
    Search { id: u64, part: Part, context: Option<String>, text: String, config: FlipSearchConfig },
    /// Stop search `id` at its next batch.
    Cancel { id: u64 },
}

impl ToWorker {
    pub fn id(&self) -> u64 {
        match self {
            ToWorker::Start { id, .. }
            | ToWorker::Analyse { id, .. }
            | ToWorker::Search { id, .. }
            | ToWorker::Cancel { id } => *id,
        }
    }
}

/// One part of the comparison: a bundle of the index and the connection it runs with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Part {
    pub model: usize,
    pub spec: ConnectionSpec,
}

/// A reply or an event from the worker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum FromWorker {
    /// The worker's wasm is up and listening: requests posted from now on are received.
    Ready,
    /// Answer to `Start`: the backend (`runtime`: `webgpu` or `cpu`), and why WebGPU was not
    /// used, if it was not.
    Started { id: u64, runtime: String, label: String, fallback: Option<String> },
    /// Bytes downloaded of the bundle being fetched.
    Download { got: u64, total: u64 },
    /// A bundle is on the device; `labels`: its class names.
    Loaded { model: usize, labels: Vec<String> },
    /// Where time went (`what`, in ms): the worker's start, the backend's set-up, each phase of a
    /// bundle's load. The page logs it (`make web-bench` prints it).
    Timing { what: String, millis: f64 },
    /// A task's synonym index; its rows (`[words, hidden]`, unit length) come as a
    /// `Float32Array` beside the JSON.
    Neighbours { task: String, words: Vec<String>, hidden: usize },
    /// One part of analysis `id` is done (`index` into its parts), before the answer: the page
    /// shows the first verdicts while slower parts (IM-BERT on a software GPU) still compute.
    PartAnalysed { id: u64, index: usize, analysis: Analysis, labels: Vec<String> },
    /// Answer to `Analyse`: one analysis per part, in order; `millis`: compute time in the worker.
    Analysed { id: u64, parts: Vec<Analysis>, labels: Vec<String>, millis: f64 },
    /// Answer to `Analyse` when a newer one arrived first.
    Superseded { id: u64 },
    /// The search's progress, after each batch.
    SearchProgress { id: u64, progress: FlipProgress },
    /// Answer to `Search` (cancelled ones included).
    Searched { id: u64, outcome: FlipOutcome },
    /// Answer to any request that failed.
    Failed { id: u64, error: String },
}

impl FromWorker {
    /// The request this answers, for final replies; `None` for events.
    pub fn answers(&self) -> Option<u64> {
        match self {
            FromWorker::Started { id, .. }
            | FromWorker::Analysed { id, .. }
            | FromWorker::Superseded { id }
            | FromWorker::Searched { id, .. }
            | FromWorker::Failed { id, .. } => Some(*id),
            FromWorker::Ready
            | FromWorker::Download { .. }
            | FromWorker::Loaded { .. }
            | FromWorker::Timing { .. }
            | FromWorker::Neighbours { .. }
            | FromWorker::PartAnalysed { .. }
            | FromWorker::SearchProgress { .. } => None,
        }
    }
}

/// What the worker does with the requests that arrived while it computed.
#[derive(Debug, Default, PartialEq)]
pub struct Plan {
    pub start: Option<ToWorker>,
    /// The newest analysis; older ones are in `superseded`.
    pub analyse: Option<ToWorker>,
    pub superseded: Vec<u64>,
    /// The newest search; older ones waiting are in `cancelled`.
    pub search: Option<ToWorker>,
    /// Searches to stop: cancelled by the page, or replaced by a newer one.
    pub cancelled: Vec<u64>,
}

impl Plan {
    /// Sorts the waiting requests, oldest first, into a plan.
    pub fn drain(inbox: impl IntoIterator<Item = ToWorker>) -> Plan {
        let mut plan = Plan::default();
        for request in inbox {
            match request {
                ToWorker::Start { .. } => plan.start = Some(request),
                ToWorker::Analyse { .. } => {
                    if let Some(older) = plan.analyse.replace(request) {
                        plan.superseded.push(older.id());
                    }
                }
                ToWorker::Search { .. } => {
                    if let Some(older) = plan.search.replace(request) {
                        plan.cancelled.push(older.id());
                    }
                }
                ToWorker::Cancel { id } => {
                    if plan.search.as_ref().is_some_and(|s| s.id() == id) {
                        plan.search = None;
                    }
                    plan.cancelled.push(id);
                }
            }
        }
        plan
    }

    /// Whether search `id`, running now, must stop: cancelled, or a newer search waits.
    pub fn stops(&self, id: u64) -> bool {
        self.search.is_some() || self.cancelled.contains(&id)
    }
}

/// Serde for float vectors that JSON numbers cannot carry whole: `NaN` and the infinities travel
/// as the strings Rust's float parser reads back.
pub mod floats {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize, Deserialize)]
    #[serde(untagged)]
    enum Float {
        Finite(f32),
        Other(String),
    }

    pub fn serialize<S: Serializer>(values: &[f32], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(values.iter().map(|&v| {
            if v.is_finite() {
                Float::Finite(v)
            } else {
                Float::Other(v.to_string())
            }
        }))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<f32>, D::Error> {
        Vec::<Float>::deserialize(d)?
            .into_iter()
            .map(|f| match f {
                Float::Finite(v) => Ok(v),
                Float::Other(s) => s.parse().map_err(serde::de::Error::custom),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{ResidualTrace, Verdict};

    fn analyse(id: u64) -> ToWorker {
        ToWorker::Analyse {
            id,
            parts: vec![Part { model: 0, spec: ConnectionSpec::parse("bert").unwrap() }],
            clean: Input::new("a fine film", None),
            perturbed: Input::new("a fine flim", None),
        }
    }

    fn search(id: u64) -> ToWorker {
        ToWorker::Search {
            id,
            part: Part { model: 2, spec: ConnectionSpec::parse("im:T=5,gamma=0.1").unwrap() },
            context: None,
            text: "a fine film".into(),
            config: FlipSearchConfig::default(),
        }
    }

    #[test]
    fn only_the_newest_analysis_runs() {
        let plan = Plan::drain([analyse(1), analyse(2), analyse(3)]);
        assert_eq!(plan.analyse.map(|a| a.id()), Some(3));
        assert_eq!(plan.superseded, [1, 2]);
    }

    #[test]
    fn a_new_search_replaces_a_waiting_one_and_stops_the_running_one() {
        let plan = Plan::drain([search(4), analyse(5), search(6)]);
        assert_eq!(plan.search.as_ref().map(ToWorker::id), Some(6));
        assert_eq!(plan.cancelled, [4]);
        assert_eq!(plan.analyse.as_ref().map(ToWorker::id), Some(5));
        assert!(plan.stops(1), "search 1, running, gives way to search 6");
    }

    #[test]
    fn a_cancel_stops_its_search_whether_running_or_waiting() {
        let running = Plan::drain([analyse(2), ToWorker::Cancel { id: 1 }]);
        assert!(running.stops(1));
        assert!(!running.stops(7), "another search is left alone");
        let waiting = Plan::drain([search(3), ToWorker::Cancel { id: 3 }]);
        assert_eq!(waiting.search, None);
        assert_eq!(waiting.cancelled, [3]);
    }

    #[test]
    fn analyses_survive_json_with_their_non_finite_values() {
        let analysis = Analysis {
            clean: Verdict { probs: vec![0.25, 0.75], tokens: 5, truncated: false },
            perturbed: Verdict { probs: vec![f32::NAN, 1.0], tokens: 6, truncated: true },
            cls_drift: vec![0.0, 0.125],
            mean_drift: vec![f32::INFINITY, 1.5e-7],
            residuals: vec![ResidualTrace {
                layer: 3,
                iterations: 2,
                steps_taken: [2, 1],
                clean: vec![1.0, f32::NEG_INFINITY],
                perturbed: vec![0.1, 0.2],
            }],
        };
        let reply =
            FromWorker::Analysed { id: 9, parts: vec![analysis], labels: vec![], millis: 1.0 };
        let json = serde_json::to_string(&reply).unwrap();
        let back: FromWorker = serde_json::from_str(&json).unwrap();
        let FromWorker::Analysed { parts, .. } = &back else { panic!("{back:?}") };
        let got = &parts[0];
        assert!(got.perturbed.probs[0].is_nan());
        assert_eq!(got.mean_drift, [f32::INFINITY, 1.5e-7]);
        assert_eq!(got.residuals[0].clean, [1.0, f32::NEG_INFINITY]);
        assert_eq!(got.clean, Verdict { probs: vec![0.25, 0.75], tokens: 5, truncated: false });
        assert_eq!(back.answers(), Some(9));
        // A part done early is an event: the analysis it belongs to still waits for its answer.
        let part =
            FromWorker::PartAnalysed { id: 9, index: 0, analysis: got.clone(), labels: vec![] };
        let back: FromWorker =
            serde_json::from_str(&serde_json::to_string(&part).unwrap()).unwrap();
        assert_eq!(back.answers(), None);
    }
}
