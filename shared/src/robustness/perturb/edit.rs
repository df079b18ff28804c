//! What a perturbation returns ([`Perturbation`], [`Edit`]) and how the perturbations build it:
//! byte-range replacements applied to the clean text, and seeded draws.

use std::ops::Range;

use serde::{Deserialize, Serialize};

use super::{ChecklistKind, TypoKind};
use crate::rng::SplitMix64;

/// A perturbed text and what changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Perturbation {
    pub text: String,
    /// In text order; they never overlap.
    pub edits: Vec<Edit>,
}

/// One change. Exact: replacing `span` of the perturbed text by `before` gives back the clean
/// text, so a UI can render either side.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Edit {
    pub kind: EditKind,
    /// Index of the word of the clean text that changed; for an insertion, the word it precedes
    /// (the clean text's word count when appended at the end).
    pub word: usize,
    /// Clean text that was replaced (empty for an insertion).
    pub before: String,
    /// Text that replaced it (empty for a deletion).
    pub after: String,
    /// Where `before` was in the clean text, in chars.
    pub clean_span: Range<usize>,
    /// Where `after` is in the perturbed text, in chars.
    pub span: Range<usize>,
}

/// Which perturbation made an edit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EditKind {
    Typo(TypoKind),
    Synonym,
    DeleteWord,
    Distractor,
    NegationContrast,
    Checklist(ChecklistKind),
}

/// A change to the clean text, by byte range; turned into an [`Edit`] by [`apply`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Replacement {
    pub(crate) range: Range<usize>,
    pub(crate) after: String,
    pub(crate) word: usize,
    pub(crate) kind: EditKind,
}

impl Replacement {
    /// Whether two replacements may be applied together: their ranges do not overlap, and
    /// they do not insert at the same point (whose text would then come first is arbitrary).
    pub(crate) fn compatible(&self, other: &Replacement) -> bool {
        let (a, b) = (&self.range, &other.range);
        let overlap = a.start < b.end && b.start < a.end;
        let same_insertion = a.is_empty() && b.is_empty() && a.start == b.start;
        !overlap && !same_insertion
    }
}

/// Applies non-overlapping replacements (an overlap, possible only between the whitespace two
/// deletions both claim, is given to the first).
pub(crate) fn apply(text: &str, mut replacements: Vec<Replacement>) -> Perturbation {
    replacements.sort_by_key(|r| (r.range.start, r.range.end));
    let mut out = String::with_capacity(text.len() + 64);
    let mut edits = Vec::with_capacity(replacements.len());
    let (mut last, mut clean_chars, mut out_chars) = (0, 0, 0);
    for r in replacements {
        let start = r.range.start.max(last);
        let end = r.range.end.max(start);
        let gap = text[last..start].chars().count();
        out.push_str(&text[last..start]);
        clean_chars += gap;
        out_chars += gap;
        let before = &text[start..end];
        let (n_before, n_after) = (before.chars().count(), r.after.chars().count());
        edits.push(Edit {
            kind: r.kind,
            word: r.word,
            before: before.to_string(),
            after: r.after.clone(),
            clean_span: clean_chars..clean_chars + n_before,
            span: out_chars..out_chars + n_after,
        });
        out.push_str(&r.after);
        clean_chars += n_before;
        out_chars += n_after;
        last = end;
    }
    out.push_str(&text[last..]);
    Perturbation { text: out, edits }
}

pub(super) fn unchanged(text: &str) -> Perturbation {
    Perturbation { text: text.to_string(), edits: Vec::new() }
}

/// `n` distinct items of `items` drawn with `rng`, in their original order.
pub(super) fn choose<T: Copy + Ord>(rng: &mut SplitMix64, items: &[T], n: usize) -> Vec<T> {
    let mut pool = items.to_vec();
    let n = n.min(pool.len());
    // Partial Fisher-Yates: the first n slots end up a uniform sample.
    for i in 0..n {
        let j = i + rng.below(pool.len() - i);
        pool.swap(i, j);
    }
    pool.truncate(n);
    pool.sort();
    pool
}

pub(super) fn pick<'a>(rng: &mut SplitMix64, items: &[&'a str]) -> &'a str {
    items[rng.below(items.len())]
}
