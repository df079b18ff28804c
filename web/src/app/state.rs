//! The page's state, typed and small: where the session stands, the task, the two texts and how
//! the perturbed one came about, and the solve's T and gamma. Everything else the page shows
//! (roles, model cards, the perturbed text, the request to analyse) is derived from these.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use leptos::prelude::*;
use shared::data::Task;
use shared::robustness::neighbours::WordNeighbours;

use super::ops::Op;
use crate::catalog::{self, Assignment, ModelIndex};
use crate::client::Inference;
use crate::engine::Input;

/// The page once started: the inference worker, the models' index and the backend the worker
/// runs them on.
#[derive(Clone)]
pub struct Started {
    pub inference: Rc<Inference>,
    pub index: Rc<ModelIndex>,
    /// `webgpu` or `cpu` (`#runtime[data-runtime]`), and for people.
    pub runtime: (String, String),
    /// Tasks the index has models for, in index order.
    pub tasks: Vec<Task>,
    /// Each task's synonym index, sent by the worker once the task's first bundle is loaded.
    pub neighbours: Rc<RefCell<HashMap<String, Rc<WordNeighbours>>>>,
}

impl Started {
    pub fn neighbours(&self, task: &str) -> Option<Rc<WordNeighbours>> {
        self.neighbours.borrow().get(task).cloned()
    }
}

/// What the status line says. [`Status::key`] is the `data-state` the end-to-end test waits on.
#[derive(Debug, Clone, PartialEq)]
pub enum Status {
    Loading(&'static str),
    Ready,
    Failed(String),
}

impl Status {
    pub fn key(&self) -> &'static str {
        match self {
            Status::Loading(_) => "loading",
            Status::Ready => "ready",
            Status::Failed(_) => "error",
        }
    }

    pub fn message(&self) -> String {
        match self {
            Status::Loading(message) => message.to_string(),
            Status::Ready => String::new(),
            Status::Failed(error) => error.clone(),
        }
    }
}

/// How the perturbed text came about.
#[derive(Debug, Clone, PartialEq)]
pub enum Perturbed {
    /// No perturbation picked yet: a copy of the clean text that follows it.
    Copy,
    /// A perturbation of the clean text, re-applied with the same seed when the clean text changes
    /// so that the two stay in step.
    Op { op: Op, seed: u64 },
    /// Text of its own (an AdvGLUE item's, or typed by the visitor) and where it came from.
    Fixed { text: String, origin: String },
}

/// The perturbed text as shown, with a line saying how it was made.
#[derive(Debug, Clone, PartialEq)]
pub struct PerturbedText {
    pub text: String,
    pub how: String,
}

/// One analysis to run: both inputs, the solve's settings and the bundle playing each part.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub clean: Input,
    pub perturbed: Input,
    pub t: usize,
    pub gamma: f64,
    pub roles: Vec<Assignment>,
}

/// The page's inputs; `Copy`, provided as context to every component.
#[derive(Clone, Copy)]
pub struct Demo {
    pub started: LocalResource<Result<Started, String>>,
    pub task: RwSignal<Task>,
    pub text_a: RwSignal<String>,
    pub text_b: RwSignal<String>,
    pub perturbed: RwSignal<Perturbed>,
    pub t: RwSignal<usize>,
    pub gamma: RwSignal<f64>,
    /// Bytes downloaded and expected of the bundle being fetched.
    pub download: RwSignal<(u64, u64)>,
    /// Bumped when a bundle finishes loading: the synonym index arrives with it.
    pub loaded_models: RwSignal<usize>,
    /// The perturbation buttons' seed, one more per click.
    pub seed: StoredValue<u64>,
}

impl Demo {
    /// `download` and `loaded_models` are the signals the worker's events update (see
    /// [`super::start`]).
    pub fn new(
        started: LocalResource<Result<Started, String>>,
        download: RwSignal<(u64, u64)>,
        loaded_models: RwSignal<usize>,
    ) -> Self {
        Self {
            started,
            task: RwSignal::new(Task::Sst2),
            text_a: RwSignal::new("a gripping, heartfelt film with a superb cast .".into()),
            text_b: RwSignal::new(String::new()),
            perturbed: RwSignal::new(Perturbed::Fixed {
                text: "a gripping, heartfelt flim with a superb cast .".into(),
                origin: "typo (word)".into(),
            }),
            t: RwSignal::new(5),
            gamma: RwSignal::new(0.1),
            download,
            loaded_models,
            seed: StoredValue::new(1),
        }
    }

    /// The started page, once it is (tracked).
    pub fn session(&self) -> Option<Started> {
        self.started.with(|s| s.as_ref().and_then(|r| r.as_ref().ok()).cloned())
    }

    /// The started page, without tracking it (inside the analysis).
    pub fn session_untracked(&self) -> Option<Started> {
        self.started.with_untracked(|s| s.as_ref().and_then(|r| r.as_ref().ok()).cloned())
    }

    pub fn is_pair(&self) -> bool {
        self.task.get().is_pair()
    }

    /// The text perturbations act on: the hypothesis for pair tasks.
    pub fn source(&self) -> String {
        if self.is_pair() {
            self.text_b.get()
        } else {
            self.text_a.get()
        }
    }

    /// The bundle playing each part for the current task; empty until the session starts.
    pub fn roles(&self) -> Result<Vec<Assignment>, String> {
        let task = self.task.get();
        match self.session() {
            Some(session) => catalog::assign(&session.index, task.name()),
            None => Ok(Vec::new()),
        }
    }

    pub fn perturbed_text(&self) -> PerturbedText {
        let source = self.source();
        match self.perturbed.get() {
            Perturbed::Copy => {
                PerturbedText { text: source, how: "none yet: pick a perturbation".into() }
            }
            Perturbed::Op { op, seed } => {
                self.loaded_models.track();
                let task = self.task.get_untracked();
                let neighbours = self.session().and_then(|s| s.neighbours(task.name()));
                match op.apply(&source, seed, neighbours.as_deref()) {
                    Some(p) => {
                        let what =
                            if p.edits.is_empty() { "nothing to change" } else { op.level() };
                        PerturbedText {
                            text: p.text,
                            how: format!("{} ({what}, seed {seed})", op.label()),
                        }
                    }
                    None => PerturbedText {
                        text: source,
                        how: "synonyms need the model's embeddings: still loading".into(),
                    },
                }
            }
            Perturbed::Fixed { text, origin } => PerturbedText { text, how: origin },
        }
    }

    /// What to analyse now, once the session has started and the task has its models.
    pub fn request(&self, perturbed: &PerturbedText) -> Option<Request> {
        let roles = self.roles().ok().filter(|r| !r.is_empty())?;
        let text_a = self.text_a.get();
        let (clean, perturbed) = if self.is_pair() {
            let hypothesis = self.text_b.get();
            (
                Input::new(text_a.clone(), Some(hypothesis)),
                Input::new(text_a, Some(perturbed.text.clone())),
            )
        } else {
            (Input::new(text_a, None), Input::new(perturbed.text.clone(), None))
        };
        Some(Request { clean, perturbed, t: self.t.get(), gamma: self.gamma.get(), roles })
    }

    /// A perturbation button was pressed: a fresh seed, so pressing again gives another edit.
    pub fn perturb(&self, op: Op) {
        let seed = self.seed.get_value() + 1;
        self.seed.set_value(seed);
        self.perturbed.set(Perturbed::Op { op, seed });
    }
}
