//! Which model plays which part. The site's `models/index.json` lists exported bundles; for the
//! chosen task the page needs a BERT, an EX-BERT and an IM-BERT. A bundle trained with that
//! connection is preferred; otherwise another bundle of the task runs with the connection swapped
//! in at inference, and the page says so (that model was not trained that way).

use serde::{Deserialize, Serialize};
pub use shared::io::bundle::IndexEntry;
use shared::model::config::Architecture;
use shared::{Connection, ConnectionSpec, ImplicitEuler};

/// `models/index.json`, written by `trainer export --web --site DIR`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelIndex {
    pub models: Vec<IndexEntry>,
}

/// The three parts of the comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    Bert,
    Ex,
    Im,
}

impl Role {
    pub const ALL: [Role; 3] = [Role::Bert, Role::Ex, Role::Im];

    /// The part's name in `family`: `EX-BERT`, `IM-RoBERTa`.
    pub fn name(self, family: Architecture) -> String {
        let prefix = match self {
            Role::Bert => "",
            Role::Ex => "EX-",
            Role::Im => "IM-",
        };
        format!("{prefix}{}", family.family())
    }

    /// CSS class and DOM key.
    pub fn key(self) -> &'static str {
        match self {
            Role::Bert => "bert",
            Role::Ex => "ex",
            Role::Im => "im",
        }
    }

    fn matches(self, connection: &Connection) -> bool {
        matches!(
            (self, connection),
            (Role::Bert, Connection::Monotone)
                | (Role::Ex, Connection::Explicit)
                | (Role::Im, Connection::Implicit(_))
        )
    }
}

/// A part and the bundle that plays it.
#[derive(Debug, Clone, PartialEq)]
pub struct Assignment {
    pub role: Role,
    /// Index into the index's `models`.
    pub model: usize,
    /// The connection it runs with (IM's T and gamma are then set by the page's controls).
    pub spec: ConnectionSpec,
    /// Set when the bundle was trained with another connection.
    pub borrowed_from: Option<String>,
    /// The bundle's model family, which names the part.
    pub family: Architecture,
}

impl Assignment {
    /// `IM-BERT`, or `IM-RoBERTa` when a RoBERTa bundle plays the part.
    pub fn name(&self) -> String {
        self.role.name(self.family)
    }
}

/// Tasks that have at least one model, in index order.
pub fn tasks(index: &ModelIndex) -> Vec<String> {
    let mut tasks: Vec<String> = Vec::new();
    for m in &index.models {
        if !tasks.contains(&m.task) {
            tasks.push(m.task.clone());
        }
    }
    tasks
}

/// Picks the bundle for each role of `task`.
pub fn assign(index: &ModelIndex, task: &str) -> Result<Vec<Assignment>, String> {
    let candidates: Vec<(usize, ConnectionSpec)> = index
        .models
        .iter()
        .enumerate()
        .filter(|(_, m)| m.task == task)
        .map(|(i, m)| {
            ConnectionSpec::parse(&m.connection)
                .map(|s| (i, s))
                .map_err(|e| format!("model {}: {e}", m.id))
        })
        .collect::<Result<_, _>>()?;
    let Some(first) = candidates.first().cloned() else {
        return Err(format!("no model for task {task}"));
    };
    // Borrowed weights come from the plain-BERT bundle when there is one.
    let fallback = candidates
        .iter()
        .find(|(_, s)| Role::Bert.matches(&s.connection))
        .cloned()
        .unwrap_or(first);
    Ok(Role::ALL
        .into_iter()
        .map(|role| match candidates.iter().find(|(_, s)| role.matches(&s.connection)) {
            Some((i, spec)) => Assignment {
                role,
                model: *i,
                spec: spec.clone(),
                borrowed_from: None,
                family: index.models[*i].architecture,
            },
            None => {
                let connection = match role {
                    Role::Bert => Connection::Monotone,
                    Role::Ex => Connection::Explicit,
                    Role::Im => Connection::Implicit(ImplicitEuler::default()),
                };
                Assignment {
                    role,
                    model: fallback.0,
                    spec: ConnectionSpec { connection, layers: None },
                    borrowed_from: Some(index.models[fallback.0].id.clone()),
                    family: index.models[fallback.0].architecture,
                }
            }
        })
        .collect())
}

/// `spec` with the page's T and gamma (layers and gradient mode kept); other connections as is.
pub fn with_iterations(spec: &ConnectionSpec, t: usize, gamma: f64) -> ConnectionSpec {
    let mut spec = spec.clone();
    if let Connection::Implicit(im) = &mut spec.connection {
        im.iterations = t;
        im.gamma = gamma;
    }
    spec
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn index(entries: &[(&str, &str, &str)]) -> ModelIndex {
        ModelIndex {
            models: entries
                .iter()
                .map(|(id, task, connection)| IndexEntry {
                    id: id.to_string(),
                    path: format!("{id}/"),
                    task: task.to_string(),
                    connection: connection.to_string(),
                    architecture: Architecture::Bert,
                    labels: vec![],
                    bytes: 0,
                    metrics: BTreeMap::new(),
                    did_not_learn: false,
                    untrained: false,
                })
                .collect(),
        }
    }

    #[test]
    fn trained_bundles_play_their_own_parts() {
        let idx = index(&[
            ("b", "sst2", "bert"),
            ("i", "sst2", "im:T=5,gamma=0.1,layers=3-5"),
            ("r", "rte", "bert"),
        ]);
        let roles = assign(&idx, "sst2").unwrap();
        assert_eq!(roles[0].model, 0);
        assert_eq!(roles[2].model, 1);
        assert_eq!(roles[2].spec.layers, Some((3, 5)));
        assert!(roles[2].borrowed_from.is_none());
        // No EX bundle: BERT's weights with the explicit connection, and the page is told.
        assert_eq!(roles[1].model, 0);
        assert_eq!(roles[1].spec.connection, Connection::Explicit);
        assert_eq!(roles[1].borrowed_from.as_deref(), Some("b"));
        assert_eq!(tasks(&idx), ["sst2", "rte"]);
    }

    /// A RoBERTa bundle's parts are RoBERTa, EX-RoBERTa and IM-RoBERTa, also when it lends
    /// its weights; an index written before the field holds BERT models.
    #[test]
    fn parts_are_named_after_their_bundles_family() {
        let mut idx = index(&[("r", "sst2", "bert"), ("i", "sst2", "im")]);
        idx.models[0].architecture = Architecture::Roberta;
        let names: Vec<String> = assign(&idx, "sst2").unwrap().iter().map(|a| a.name()).collect();
        assert_eq!(names, ["RoBERTa", "EX-RoBERTa", "IM-BERT"]);
        let old: ModelIndex = serde_json::from_str(
            r#"{"models": [{"id": "b", "path": "b/", "task": "sst2", "connection": "bert"}]}"#,
        )
        .unwrap();
        assert_eq!(old.models[0].architecture, Architecture::Bert);
        let written = serde_json::to_string(&idx).unwrap();
        assert!(written.contains(r#""architecture":"roberta""#), "{written}");
    }

    #[test]
    fn a_single_bundle_plays_every_part_and_missing_tasks_are_errors() {
        let idx = index(&[("r", "rte", "bert")]);
        let roles = assign(&idx, "rte").unwrap();
        assert!(roles.iter().all(|a| a.model == 0));
        assert!(matches!(roles[2].spec.connection, Connection::Implicit(_)));
        assert!(assign(&idx, "sst2").is_err());
        assert!(assign(&index(&[("x", "rte", "nonsense")]), "rte")
            .unwrap_err()
            .contains("model x"));
    }

    #[test]
    fn metrics_show_clean_accuracy_beside_robustness() {
        let mut idx = index(&[("b", "sst2", "bert")]);
        assert_eq!(idx.models[0].metrics_summary(), "no accuracy recorded");
        idx.models[0].metrics = [
            ("validation", 0.836),
            ("glue_dev/sst2", 0.821),
            ("advglue/sst2", 0.405),
            ("advglue/sst2/clean_original", 0.786),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        assert_eq!(
            idx.models[0].metrics_summary(),
            "validation 83.6% · GLUE dev 82.1% · AdvGLUE 40.5% (their clean originals 78.6%)"
        );
    }

    #[test]
    fn the_slider_sets_t_and_gamma_only() {
        let spec = ConnectionSpec::parse("im:T=5,gamma=0.1,layers=2-3,grad=detached").unwrap();
        let s = with_iterations(&spec, 0, 0.25);
        assert_eq!(s.to_spec_string(), "im:T=0,gamma=0.25,grad=detached,layers=2-3");
        assert_eq!(with_iterations(&ConnectionSpec::default(), 9, 0.5), ConnectionSpec::default());
    }
}
