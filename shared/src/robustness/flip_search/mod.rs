//! "Find an edit that fools the model": the fewest word- and sentence-level edits that change a
//! classifier's verdict on one text.
//!
//! The search never calls a model itself. It hands out batches of texts to score
//! ([`FlipSearch::next_batch`]) and takes their class probabilities back ([`FlipSearch::feed`]).
//! So one search runs natively ([`FlipSearch::run`]), in a Web Worker between two messages
//! (where a cancel or a newer request can arrive), or against any model and connection.
//!
//! Level by level, a level being a number of edits, so the first flip found has the fewest:
//! 1. The clean text (one query): the verdict `y` to flip.
//! 2. Each content word deleted (one query each). This scores the words' importance (the drop
//!    of `P_y`, as TextFooler ranks words), and each deletion is a one-edit candidate.
//! 3. One edit: on the `words` most important words, TextBugger's five typos and the
//!    `synonyms` nearest embedding neighbours; and every sentence-level rewrite (StressTest's
//!    distractors, the contrast clauses, CheckList's rewrites).
//! 4. n + 1 edits: each of the `beam` texts of level n with the lowest `P_y`, combined with each
//!    of the `pool` best single edits it does not collide with.
//!
//! The first batch that holds a flip ends the search, keeping its flip with the lowest `P_y`.
//! Otherwise the search ends after `max_edits` levels or `max_queries` scored texts.

mod operations;
#[cfg(test)]
mod tests;

use std::collections::{HashSet, VecDeque};

use serde::{Deserialize, Serialize};

use crate::robustness::classify::argmax;
use crate::robustness::neighbours::WordNeighbours;
use crate::robustness::perturb::Perturbation;
use crate::Error;
use operations::{Operation, Text};

/// The search's knobs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct FlipSearchConfig {
    /// Most edits in one text.
    pub max_edits: usize,
    /// Most texts scored, the clean one included.
    pub max_queries: usize,
    /// Words that get typos and synonyms, the most important first.
    pub words: usize,
    /// Embedding neighbours tried per word.
    pub synonyms: usize,
    /// Lowest cosine similarity a synonym may have.
    pub min_cosine: f32,
    /// Texts of one level that the next level extends.
    pub beam: usize,
    /// Single edits (the best of level one) that extend them.
    pub pool: usize,
    /// Texts per batch.
    pub batch_size: usize,
    /// Whether sentence-level rewrites take part.
    pub sentence_edits: bool,
}

impl Default for FlipSearchConfig {
    fn default() -> Self {
        Self {
            max_edits: 3,
            max_queries: 400,
            words: 8,
            synonyms: 8,
            min_cosine: 0.5,
            beam: 4,
            pool: 16,
            batch_size: 16,
            sentence_edits: true,
        }
    }
}

impl FlipSearchConfig {
    pub fn validate(&self) -> Result<(), Error> {
        let positive = [
            ("max_edits", self.max_edits),
            ("max_queries", self.max_queries),
            ("beam", self.beam),
            ("pool", self.pool),
            ("batch_size", self.batch_size),
        ];
        if let Some((name, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return Err(Error::Input(format!("flip search: {name} must be at least 1")));
        }
        if !(-1.0..=1.0).contains(&self.min_cosine) {
            return Err(Error::Input(format!(
                "flip search: min_cosine {} is not a cosine (-1 to 1)",
                self.min_cosine
            )));
        }
        Ok(())
    }
}

/// How a search ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FlipStatus {
    /// An edit changed the verdict.
    Flipped,
    /// Every level up to `max_edits` was tried.
    MaxEdits,
    /// `max_queries` texts were scored.
    MaxQueries,
    /// No edit applies to the text (no content word, nothing to rewrite).
    NothingToEdit,
    Cancelled,
}

/// An edited text and the model's verdict on it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlipCandidate {
    /// The text and its exact edits (a tense rewrite is one edit that may change several words).
    pub perturbation: Perturbation,
    /// How many edits made it.
    pub num_edits: usize,
    pub probabilities: Vec<f32>,
    pub label: usize,
}

/// What a search found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlipOutcome {
    pub status: FlipStatus,
    /// The verdict on the clean text (`None` when cancelled before it was scored).
    pub clean_label: Option<usize>,
    pub clean_probabilities: Vec<f32>,
    /// The flip; when none was found, the edited text that came closest (lowest `P_y`).
    pub best: Option<FlipCandidate>,
    /// Texts scored, the clean one included.
    pub queries: usize,
}

/// Where a running search is, for a progress bar.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlipProgress {
    pub queries: usize,
    pub max_queries: usize,
    /// The number of edits being tried (0 while the clean text is scored).
    pub edits: usize,
    /// The lowest `P_y` seen so far.
    pub lowest_probability: Option<f32>,
}

/// A text to score: the operations that made it.
struct Candidate {
    ops: Vec<usize>,
    text: String,
}

/// A scored candidate.
#[derive(Clone)]
struct Scored {
    ops: Vec<usize>,
    probabilities: Vec<f32>,
}

/// `at`, moved forward to a char boundary and then to the end of the word it falls in.
fn word_end(text: &str, at: usize) -> usize {
    let mut end = at.min(text.len());
    while !text.is_char_boundary(end) {
        end += 1;
    }
    text[end..].find(char::is_whitespace).map_or(text.len(), |n| end + n)
}

enum Phase {
    Clean,
    /// Each content word deleted.
    Importance,
    /// `n` edits.
    Level(usize),
    Done(FlipStatus),
}

/// One search, driven by its caller: `next_batch`, score, `feed`, until `next_batch` is `None`.
pub struct FlipSearch<'a> {
    /// The part of the text the search edits: all of it, or what the model reads.
    text: Text<'a>,
    /// The rest, which the model never reads (cut at its maximum length): kept as is.
    tail: &'a str,
    neighbours: Option<&'a WordNeighbours>,
    config: FlipSearchConfig,
    /// Every operation met so far; candidates name them by index.
    ops: Vec<Operation>,
    phase: Phase,
    queue: VecDeque<Candidate>,
    in_flight: Vec<Candidate>,
    /// Texts already queued, so that no text is scored twice.
    seen: HashSet<String>,
    queries: usize,
    clean: Option<(usize, Vec<f32>)>,
    /// The one-edit candidates, scored (deletions, then level one).
    singles: Vec<Scored>,
    /// The current level's candidates, scored.
    level: Vec<Scored>,
    best: Option<Scored>,
}

impl<'a> FlipSearch<'a> {
    /// A search on `text`; `neighbours` (the model's word embeddings) supplies synonyms, and
    /// without it only typos, deletions and sentence rewrites are tried.
    pub fn new(
        text: &'a str,
        neighbours: Option<&'a WordNeighbours>,
        config: FlipSearchConfig,
    ) -> Result<Self, Error> {
        Self::with_visible(text, text.len(), neighbours, config)
    }

    /// As [`Self::new`], for a model that reads only the first `visible` bytes of `text` (see
    /// [`crate::BertTokenizer::visible_len`]): only words there are edited, and the rest is
    /// kept, unedited, at the end of every text scored. On a long text, edits past the model's
    /// maximum length would cost a query each and could never flip it.
    pub fn with_visible(
        text: &'a str,
        visible: usize,
        neighbours: Option<&'a WordNeighbours>,
        config: FlipSearchConfig,
    ) -> Result<Self, Error> {
        config.validate()?;
        let (head, tail) = text.split_at(word_end(text, visible));
        let mut search = Self {
            text: Text::new(head),
            tail,
            neighbours,
            config,
            ops: Vec::new(),
            phase: Phase::Clean,
            queue: VecDeque::new(),
            in_flight: Vec::new(),
            seen: HashSet::new(),
            queries: 0,
            clean: None,
            singles: Vec::new(),
            level: Vec::new(),
            best: None,
        };
        search.enqueue(Vec::new());
        Ok(search)
    }

    /// Drives the search to its end with `score`, which returns each text's class
    /// probabilities.
    pub fn run<E: From<Error>>(
        mut self,
        mut score: impl FnMut(&[String]) -> Result<Vec<Vec<f32>>, E>,
    ) -> Result<FlipOutcome, E> {
        while let Some(batch) = self.next_batch() {
            let probabilities = score(&batch)?;
            self.feed(&probabilities)?;
        }
        Ok(self.outcome().expect("the search ended"))
    }

    /// The texts to score next, or `None` once the search is over. Until they are fed back,
    /// the same batch is returned again.
    pub fn next_batch(&mut self) -> Option<Vec<String>> {
        if matches!(self.phase, Phase::Done(_)) {
            return None;
        }
        if self.in_flight.is_empty() {
            let room = self.config.max_queries.saturating_sub(self.queries);
            if room == 0 {
                self.phase = Phase::Done(FlipStatus::MaxQueries);
                return None;
            }
            let n = self.config.batch_size.min(room).min(self.queue.len());
            self.in_flight = self.queue.drain(..n).collect();
        }
        Some(self.in_flight.iter().map(|c| c.text.clone()).collect())
    }

    /// The class probabilities of the last batch, in its order.
    pub fn feed(&mut self, probabilities: &[Vec<f32>]) -> Result<(), Error> {
        if self.in_flight.is_empty() {
            return Err(Error::Input("flip search: no batch is waiting for its scores".into()));
        }
        if probabilities.len() != self.in_flight.len() {
            return Err(Error::Input(format!(
                "flip search: {} probability rows for a batch of {} texts",
                probabilities.len(),
                self.in_flight.len()
            )));
        }
        let classes = self.clean.as_ref().map_or(probabilities[0].len(), |(_, p)| p.len());
        if classes < 2 || probabilities.iter().any(|p| p.len() != classes) {
            return Err(Error::Input(format!(
                "flip search: every row needs the same number (2 or more) of classes, got {:?}",
                probabilities.iter().map(Vec::len).collect::<Vec<_>>()
            )));
        }
        if probabilities.iter().flatten().any(|p| !p.is_finite()) {
            return Err(Error::Input("flip search: a probability is not finite".into()));
        }
        self.queries += probabilities.len();
        let batch = std::mem::take(&mut self.in_flight);
        if matches!(self.phase, Phase::Clean) {
            let p = probabilities[0].clone();
            self.clean = Some((argmax(&p), p));
            self.start_importance();
            return Ok(());
        }
        let y = self.clean.as_ref().map_or(0, |(y, _)| *y);
        let mut flip: Option<Scored> = None;
        for (candidate, p) in batch.into_iter().zip(probabilities) {
            let scored = Scored { ops: candidate.ops, probabilities: p.clone() };
            if self.best.as_ref().is_none_or(|b| p[y] < b.probabilities[y]) {
                self.best = Some(scored.clone());
            }
            if argmax(p) != y && flip.as_ref().is_none_or(|f| p[y] < f.probabilities[y]) {
                flip = Some(scored.clone());
            }
            if scored.ops.len() == 1 {
                self.singles.push(scored.clone());
            }
            self.level.push(scored);
        }
        if let Some(flip) = flip {
            self.best = Some(flip);
            self.phase = Phase::Done(FlipStatus::Flipped);
        } else if self.queue.is_empty() {
            self.next_level();
        }
        Ok(())
    }

    /// Stops the search; [`Self::outcome`] then reports what it found so far.
    pub fn cancel(&mut self) {
        if !matches!(self.phase, Phase::Done(_)) {
            self.phase = Phase::Done(FlipStatus::Cancelled);
        }
    }

    pub fn progress(&self) -> FlipProgress {
        let y = self.clean.as_ref().map(|(y, _)| *y);
        FlipProgress {
            queries: self.queries,
            max_queries: self.config.max_queries,
            edits: match self.phase {
                Phase::Clean => 0,
                Phase::Importance => 1,
                Phase::Level(n) => n,
                Phase::Done(_) => self.best.as_ref().map_or(0, |b| b.ops.len()),
            },
            lowest_probability: self.best.as_ref().zip(y).map(|(b, y)| b.probabilities[y]),
        }
    }

    /// The result, once the search is over (`None` before).
    pub fn outcome(&self) -> Option<FlipOutcome> {
        let Phase::Done(status) = self.phase else { return None };
        let best = self.best.as_ref().map(|b| {
            let ops: Vec<&Operation> = b.ops.iter().map(|&i| &self.ops[i]).collect();
            FlipCandidate {
                perturbation: {
                    let mut edited = self.text.apply(&ops);
                    edited.text.push_str(self.tail);
                    edited
                },
                num_edits: b.ops.len(),
                label: argmax(&b.probabilities),
                probabilities: b.probabilities.clone(),
            }
        });
        Some(FlipOutcome {
            status,
            clean_label: self.clean.as_ref().map(|(y, _)| *y),
            clean_probabilities: self.clean.as_ref().map(|(_, p)| p.clone()).unwrap_or_default(),
            best,
            queries: self.queries,
        })
    }

    /// Queues the text `ops` make, unless it was queued before; true when queued.
    fn enqueue(&mut self, mut ops: Vec<usize>) -> bool {
        ops.sort_unstable();
        let applied: Vec<&Operation> = ops.iter().map(|&i| &self.ops[i]).collect();
        let text = self.text.apply(&applied).text + self.tail;
        // Never delete every word.
        if !text.chars().any(char::is_alphanumeric) && !ops.is_empty() {
            return false;
        }
        if !self.seen.insert(text.clone()) {
            return false;
        }
        self.queue.push_back(Candidate { ops, text });
        true
    }

    /// Queues a new single operation.
    fn enqueue_single(&mut self, op: Operation) {
        self.ops.push(op);
        let id = self.ops.len() - 1;
        self.enqueue(vec![id]);
    }

    fn start_importance(&mut self) {
        for op in self.text.deletions() {
            self.enqueue_single(op);
        }
        self.phase = Phase::Importance;
        if self.queue.is_empty() {
            self.next_level();
        }
    }

    /// Queues the next level's candidates, or ends the search when there are none.
    fn next_level(&mut self) {
        let edits = match self.phase {
            Phase::Importance => 1,
            Phase::Level(n) if n < self.config.max_edits => n + 1,
            Phase::Level(_) => {
                self.phase = Phase::Done(FlipStatus::MaxEdits);
                return;
            }
            Phase::Clean | Phase::Done(_) => return,
        };
        let previous = std::mem::take(&mut self.level);
        if edits == 1 {
            self.queue_single_edits();
        } else {
            self.queue_combinations(previous);
        }
        self.phase = if self.queue.is_empty() {
            Phase::Done(match edits {
                1 if self.singles.is_empty() => FlipStatus::NothingToEdit,
                _ => FlipStatus::MaxEdits,
            })
        } else {
            Phase::Level(edits)
        };
        // The deletions scored during the importance pass belong to level one.
        if edits == 1 {
            self.level = self.singles.clone();
        }
    }

    /// Level one: typos and synonyms on the most important words, and sentence rewrites.
    fn queue_single_edits(&mut self) {
        let y = self.clean.as_ref().map_or(0, |(y, _)| *y);
        let p_clean = self.clean.as_ref().map_or(0.0, |(_, p)| p[y]);
        let importance: Vec<(usize, f32)> = self
            .singles
            .iter()
            .filter_map(|s| Some((self.ops[s.ops[0]].word?, p_clean - s.probabilities[y])))
            .collect();
        let words = self.text.words_to_edit(&importance, &self.config);
        let mut ops: Vec<Operation> = words
            .into_iter()
            .flat_map(|i| self.text.word_edits(i, self.neighbours, &self.config))
            .collect();
        if self.config.sentence_edits {
            ops.extend(self.text.sentence_edits());
        }
        for op in ops {
            self.enqueue_single(op);
        }
    }

    /// Level n + 1: the best texts of level n, each extended by one of the best single edits.
    fn queue_combinations(&mut self, mut previous: Vec<Scored>) {
        let y = self.clean.as_ref().map_or(0, |(y, _)| *y);
        let by_p = |a: &Scored, b: &Scored| a.probabilities[y].total_cmp(&b.probabilities[y]);
        previous.sort_by(by_p);
        let mut singles: Vec<&Scored> = self.singles.iter().collect();
        singles.sort_by(|a, b| by_p(a, b));
        let pool: Vec<usize> = singles.iter().take(self.config.pool).map(|s| s.ops[0]).collect();
        for base in previous.iter().take(self.config.beam) {
            for &extra in &pool {
                let fits = base
                    .ops
                    .iter()
                    .all(|&o| o != extra && self.ops[o].compatible(&self.ops[extra]));
                if fits {
                    let mut ops = base.ops.clone();
                    ops.push(extra);
                    self.enqueue(ops);
                }
            }
        }
    }
}
