//! Text perturbations for robustness checks, shared by the native attack ([`crate::attack`]) and
//! the browser demo: pure Rust, no I/O, deterministic for a given `u64` seed.
//!
//! - Word level: [`typo`] (TextBugger's character bugs), [`synonym`] (nearest neighbours in the
//!   model's own word embeddings, see [`crate::neighbours`]), [`delete_word`].
//! - Sentence level: [`distractor`] (StressTest's tautologies), [`negation_contrast`] (a
//!   contrast clause), [`checklist_template`] (CheckList's invariance rewrites).
//! - [`diff_words`]: a word diff (LCS over whitespace tokens) for highlighting free edits.
//!
//! A *word* is a whitespace-separated token; its *core* is the token without leading and
//! trailing non-alphanumeric characters (`"film,"` -> `film`). Word-level edits touch the core
//! only, so punctuation stays put. Every function returns the text unchanged, with no edits, when
//! nothing in it qualifies (empty input, only stop words, only emoji, ...).
//!
//! Offsets in [`Edit`] count Unicode scalar values (Rust `char`s, JavaScript's
//! `Array.from(text)`), not bytes, so a UI can slice the text directly.

use std::ops::Range;

use serde::{Deserialize, Serialize};

use crate::data::SplitMix64;
use crate::neighbours::WordNeighbours;

/// Common English function words (~150): never perturbed, never attacked. Negations (`not`,
/// `no`, `nor`) are here on purpose: swapping them changes the meaning, not the surface.
pub const STOP_WORDS: &[&str] = &[
    "a", "about", "above", "after", "again", "against", "all", "am", "an", "and", "any", "are",
    "as", "at", "be", "because", "been", "before", "being", "below", "between", "both", "but",
    "by", "can", "could", "did", "do", "does", "doing", "down", "during", "each", "either", "else",
    "even", "ever", "every", "few", "for", "from", "further", "had", "has", "have", "having", "he",
    "her", "here", "hers", "herself", "him", "himself", "his", "how", "however", "i", "if", "in",
    "into", "is", "it", "its", "itself", "just", "me", "might", "more", "most", "must", "my",
    "myself", "neither", "no", "nor", "not", "now", "of", "off", "on", "once", "only", "or",
    "other", "our", "ours", "ourselves", "out", "over", "own", "same", "shall", "she", "should",
    "so", "some", "such", "than", "that", "the", "their", "theirs", "them", "themselves", "then",
    "there", "these", "they", "this", "those", "though", "through", "to", "too", "under", "until",
    "up", "upon", "us", "very", "was", "we", "were", "what", "when", "where", "whether", "which",
    "while", "who", "whom", "whose", "why", "will", "with", "within", "without", "would", "yet",
    "you", "your", "yours", "yourself", "yourselves", "also", "although", "among", "another",
    "anyone", "anything", "whatever", "whenever", "wherever",
];

/// Whether `word` is in [`STOP_WORDS`] (case-insensitive).
pub fn is_stop_word(word: &str) -> bool {
    STOP_WORDS.iter().any(|s| s.eq_ignore_ascii_case(word))
}

// ---------------------------------------------------------------------------------------------
// Results
// ---------------------------------------------------------------------------------------------

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

/// TextBugger's character-level bugs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TypoKind {
    /// Swap two adjacent inner characters (`film` -> `flim`).
    Swap,
    /// Delete an inner character (`great` -> `grat`).
    Delete,
    /// Insert a keyboard neighbour of a character next to it (`bad` -> `bsad`).
    Insert,
    /// Replace an inner character by a keyboard neighbour (`good` -> `giod`).
    Keyboard,
    /// Replace a character by a visually similar one (`cool` -> `c0ol`, `film` -> `fi1m`).
    Visual,
}

impl TypoKind {
    pub const ALL: [TypoKind; 5] =
        [TypoKind::Swap, TypoKind::Delete, TypoKind::Insert, TypoKind::Keyboard, TypoKind::Visual];
}

/// CheckList's label-preserving rewrites.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChecklistKind {
    /// Prefix an opinion frame: `I think that ...`.
    OpinionPrefix,
    /// Swap the tense of the copula: `is` <-> `was`, `are` <-> `were`.
    Tense,
    /// Append a neutral sentence with a person and a place.
    NamedEntity,
}

impl ChecklistKind {
    pub const ALL: [ChecklistKind; 3] =
        [ChecklistKind::OpinionPrefix, ChecklistKind::Tense, ChecklistKind::NamedEntity];
}

// ---------------------------------------------------------------------------------------------
// Words
// ---------------------------------------------------------------------------------------------

/// A whitespace-separated word, as byte ranges into its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WordSpan {
    /// The whole token, punctuation included.
    pub token: Range<usize>,
    /// The token without leading and trailing non-alphanumeric characters; empty (at
    /// `token.start`) when the token has no letter or digit.
    pub core: Range<usize>,
}

/// The words of `text`, in order.
pub fn word_spans(text: &str) -> Vec<WordSpan> {
    let mut spans = Vec::new();
    let mut start = None;
    for (i, c) in text.char_indices().chain(std::iter::once((text.len(), ' '))) {
        match (c.is_whitespace(), start) {
            (true, Some(s)) => {
                spans.push(WordSpan { token: s..i, core: core_of(text, s..i) });
                start = None;
            }
            (false, None) => start = Some(i),
            _ => {}
        }
    }
    spans
}

fn core_of(text: &str, token: Range<usize>) -> Range<usize> {
    let t = &text[token.clone()];
    let first = t.char_indices().find(|(_, c)| c.is_alphanumeric());
    let last = t.char_indices().rev().find(|(_, c)| c.is_alphanumeric());
    match (first, last) {
        (Some((a, _)), Some((b, c))) => token.start + a..token.start + b + c.len_utf8(),
        _ => token.start..token.start,
    }
}

/// Whether a word core may be replaced: at least two letters, letters only, not a stop word.
pub fn is_substitutable(core: &str) -> bool {
    core.chars().nth(1).is_some() && core.chars().all(char::is_alphabetic) && !is_stop_word(core)
}

/// `replacement` in the case pattern of `original`: `GOOD` -> `GREAT`, `Good` -> `Great`.
pub fn match_case(original: &str, replacement: &str) -> String {
    let letters = || original.chars().filter(|c| c.is_alphabetic());
    if letters().count() > 1 && letters().all(char::is_uppercase) {
        return replacement.to_uppercase();
    }
    match original.chars().next() {
        Some(c) if c.is_uppercase() => {
            let mut chars = replacement.chars();
            chars.next().map_or_else(String::new, |f| f.to_uppercase().chain(chars).collect())
        }
        _ => replacement.to_string(),
    }
}

/// A change to the clean text, by byte range; turned into an [`Edit`] by [`apply`].
struct Replacement {
    range: Range<usize>,
    after: String,
    word: usize,
    kind: EditKind,
}

/// Applies non-overlapping replacements (an overlap, possible only between the whitespace two
/// deletions both claim, is given to the first).
fn apply(text: &str, mut replacements: Vec<Replacement>) -> Perturbation {
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

fn unchanged(text: &str) -> Perturbation {
    Perturbation { text: text.to_string(), edits: Vec::new() }
}

/// `n` distinct items of `items` drawn with `rng`, in their original order.
fn choose<T: Copy + Ord>(rng: &mut SplitMix64, items: &[T], n: usize) -> Vec<T> {
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

fn pick<'a>(rng: &mut SplitMix64, items: &[&'a str]) -> &'a str {
    items[rng.below(items.len())]
}

// ---------------------------------------------------------------------------------------------
// Word level
// ---------------------------------------------------------------------------------------------

/// QWERTY neighbours of each lower-case letter.
const KEYBOARD: [&str; 26] = [
    "qwsz", "ghvn", "dfxv", "erfsxc", "wrsd", "rtdgcv", "tyfhvb", "yugjbn", "uojk", "uihknm", "iojlm",
    "opk", "jkn", "hjbm", "ipkl", "ol", "wa", "etdf", "weadzx", "ryfg", "yihj", "fgcb", "qeas", "sdzc",
    "tugh", "asx",
];

/// Visually similar replacements (TextBugger's "sub-C").
const VISUAL: [(char, char); 10] = [
    ('o', '0'), ('l', '1'), ('i', '1'), ('e', '3'), ('a', '@'), ('s', '$'), ('t', '7'), ('b', '8'),
    ('g', '9'), ('z', '2'),
];

fn keyboard_neighbours(c: char) -> Option<&'static str> {
    let lower = c.to_ascii_lowercase();
    lower.is_ascii_lowercase().then(|| KEYBOARD[(lower as u8 - b'a') as usize])
}

/// A keyboard neighbour of `c`, in `c`'s case.
fn neighbour_key(rng: &mut SplitMix64, c: char) -> Option<char> {
    let keys = keyboard_neighbours(c)?;
    let k = keys.as_bytes()[rng.below(keys.len())] as char;
    Some(if c.is_uppercase() { k.to_ascii_uppercase() } else { k })
}

/// One typo of kind `kind` in `word`, or `None` when the word does not allow it (too short, no
/// ASCII letter for a keyboard bug, no look-alike character, ...). The first and last
/// characters are kept by the swap, delete and keyboard bugs so the word stays readable.
pub fn typo_word(word: &str, kind: TypoKind, seed: u64) -> Option<String> {
    typo_word_with(word, kind, &mut SplitMix64::new(seed))
}

fn typo_word_with(word: &str, kind: TypoKind, rng: &mut SplitMix64) -> Option<String> {
    let mut chars: Vec<char> = word.chars().collect();
    let n = chars.len();
    let positions: Vec<usize> = match kind {
        TypoKind::Swap if n >= 4 => (1..n - 2).filter(|&i| chars[i] != chars[i + 1]).collect(),
        TypoKind::Delete if n >= 3 => (1..n - 1).collect(),
        TypoKind::Insert => (0..n).filter(|&i| keyboard_neighbours(chars[i]).is_some()).collect(),
        TypoKind::Keyboard if n >= 3 => (1..n - 1).filter(|&i| keyboard_neighbours(chars[i]).is_some()).collect(),
        TypoKind::Visual => (0..n).filter(|&i| visual(chars[i]).is_some()).collect(),
        _ => Vec::new(),
    };
    if positions.is_empty() {
        return None;
    }
    let i = positions[rng.below(positions.len())];
    match kind {
        TypoKind::Swap => chars.swap(i, i + 1),
        TypoKind::Delete => {
            chars.remove(i);
        }
        TypoKind::Insert => chars.insert(i + 1, neighbour_key(rng, chars[i])?),
        TypoKind::Keyboard => chars[i] = neighbour_key(rng, chars[i])?,
        TypoKind::Visual => chars[i] = visual(chars[i])?,
    }
    let out: String = chars.into_iter().collect();
    (out != word).then_some(out)
}

fn visual(c: char) -> Option<char> {
    VISUAL.iter().find(|(from, _)| *from == c.to_ascii_lowercase()).map(|&(_, to)| to)
}

/// TextBugger-like typos in up to `n` content words (letters only, three or more, not stop
/// words), one bug each, of a kind drawn from those the word allows.
pub fn typo(text: &str, n: usize, seed: u64) -> Perturbation {
    let mut rng = SplitMix64::new(seed);
    let spans = word_spans(text);
    let eligible: Vec<usize> = (0..spans.len())
        .filter(|&i| {
            let core = &text[spans[i].core.clone()];
            core.chars().nth(2).is_some() && is_substitutable(core)
        })
        .collect();
    let mut replacements = Vec::new();
    for i in choose(&mut rng, &eligible, n) {
        let core = &text[spans[i].core.clone()];
        let mut kinds = TypoKind::ALL;
        crate::data::shuffle(&mut kinds, rng.next_u64());
        // Every eligible word allows at least Delete, so this always finds one.
        if let Some((kind, after)) = kinds.iter().find_map(|&k| typo_word_with(core, k, &mut rng).map(|w| (k, w))) {
            replacements.push(Replacement { range: spans[i].core.clone(), after, word: i, kind: EditKind::Typo(kind) });
        }
    }
    apply(text, replacements)
}

/// Replaces up to `n` content words by one of their `k` nearest neighbours in the model's word
/// embeddings with cosine >= `min_cosine` (drawn uniformly), in the original word's case.
/// Words that are not a single whole-word vocabulary entry have no neighbours and stay.
pub fn synonym(text: &str, index: &WordNeighbours, n: usize, k: usize, min_cosine: f32, seed: u64) -> Perturbation {
    let mut rng = SplitMix64::new(seed);
    let spans = word_spans(text);
    let mut order: Vec<usize> =
        (0..spans.len()).filter(|&i| is_substitutable(&text[spans[i].core.clone()])).collect();
    crate::data::shuffle(&mut order, rng.next_u64());
    let mut replacements = Vec::new();
    // Lazily, in random order: a neighbour query scans the whole vocabulary.
    for i in order {
        if replacements.len() >= n {
            break;
        }
        let core = &text[spans[i].core.clone()];
        let candidates: Vec<String> = index
            .neighbours(core, k)
            .into_iter()
            .filter(|(_, cos)| *cos >= min_cosine)
            .map(|(w, _)| w)
            .collect();
        if candidates.is_empty() {
            continue;
        }
        let after = match_case(core, &candidates[rng.below(candidates.len())]);
        replacements.push(Replacement { range: spans[i].core.clone(), after, word: i, kind: EditKind::Synonym });
    }
    apply(text, replacements)
}

/// Deletes up to `n` content words (not stop words, two or more characters), never all of them.
/// A word's punctuation stays (`film,` -> `,`); a bare word goes with one side's whitespace.
pub fn delete_word(text: &str, n: usize, seed: u64) -> Perturbation {
    let mut rng = SplitMix64::new(seed);
    let spans = word_spans(text);
    let with_core = spans.iter().filter(|s| !s.core.is_empty()).count();
    let eligible: Vec<usize> = (0..spans.len())
        .filter(|&i| {
            let core = &text[spans[i].core.clone()];
            core.chars().nth(1).is_some() && !is_stop_word(core)
        })
        .collect();
    let n = n.min(with_core.saturating_sub(1));
    let replacements = choose(&mut rng, &eligible, n)
        .into_iter()
        .map(|i| Replacement { range: deletion_range(text, &spans, i), after: String::new(), word: i, kind: EditKind::DeleteWord })
        .collect();
    apply(text, replacements)
}

/// The bytes that deleting word `i` removes: its core, or when the token is nothing but its
/// core, the token and the whitespace before it (after it, for the first word).
fn deletion_range(text: &str, spans: &[WordSpan], i: usize) -> Range<usize> {
    let s = &spans[i];
    if s.core != s.token {
        return s.core.clone();
    }
    match (i.checked_sub(1).map(|p| &spans[p]), spans.get(i + 1)) {
        (Some(prev), _) => prev.token.end..s.token.end,
        (None, Some(next)) => s.token.start..next.token.start,
        (None, None) => s.token.start..text.len(),
    }
}

// ---------------------------------------------------------------------------------------------
// Sentence level
// ---------------------------------------------------------------------------------------------

/// StressTest's distractors (Naik et al. 2018): word overlap, negation, length mismatch.
pub const DISTRACTORS: &[&str] = &[
    " and true is true",
    " and false is not true",
    " and true is true and true is true and true is true and true is true and true is true",
];

/// Contrast clauses that leave the sentiment ambiguous rather than flip it.
pub const CONTRAST_CLAUSES: &[&str] = &[
    ", but it was not bad at all",
    ", but it was not great either",
    ", although it is not terrible",
    ", but I would not call it boring",
    ", though it is not a masterpiece",
];

const OPINION_PREFIXES: &[&str] = &["I think that ", "I believe that ", "It seems that "];
const NAMES: &[&str] = &["Maria", "John", "Aisha", "Wei", "Carlos", "Priya", "Olga", "Kwame"];
const CITIES: &[&str] = &["Chicago", "Paris", "Lagos", "Mumbai", "Toronto", "Osaka", "Berlin", "Lima"];
const TENSE_PAIRS: &[(&str, &str)] = &[("is", "was"), ("was", "is"), ("are", "were"), ("were", "are")];

fn has_word(text: &str) -> bool {
    text.chars().any(char::is_alphanumeric)
}

/// Where a clause joins the sentence: after the last word, before the final `.`/`!`/`?` and
/// trailing whitespace (`"slow . "` -> `"slow| . "`).
fn clause_point(text: &str) -> usize {
    text.trim_end().trim_end_matches(['.', '!', '?']).trim_end().len()
}

fn insert_clause(text: &str, clause: &str, kind: EditKind) -> Perturbation {
    if !has_word(text) {
        return unchanged(text);
    }
    let at = clause_point(text);
    let word = word_spans(&text[..at]).len();
    apply(text, vec![Replacement { range: at..at, after: clause.to_string(), word, kind }])
}

/// Appends one of StressTest's [`DISTRACTORS`] (`"it 's slow ."` -> `"it 's slow and true is
/// true ."`), before the final punctuation.
pub fn distractor(text: &str, seed: u64) -> Perturbation {
    insert_clause(text, pick(&mut SplitMix64::new(seed), DISTRACTORS), EditKind::Distractor)
}

/// Appends one of the [`CONTRAST_CLAUSES`] before the final punctuation.
pub fn negation_contrast(text: &str, seed: u64) -> Perturbation {
    insert_clause(text, pick(&mut SplitMix64::new(seed), CONTRAST_CLAUSES), EditKind::NegationContrast)
}

/// A CheckList rewrite of kind `kind`, or `None` when it does not apply (no word; no `is`,
/// `was`, `are` or `were` for [`ChecklistKind::Tense`]).
pub fn checklist(text: &str, kind: ChecklistKind, seed: u64) -> Option<Perturbation> {
    let mut rng = SplitMix64::new(seed);
    let spans = word_spans(text);
    let first = spans.iter().position(|s| !s.core.is_empty())?;
    let edit_kind = EditKind::Checklist(kind);
    let replacements = match kind {
        ChecklistKind::OpinionPrefix => {
            let prefix = pick(&mut rng, OPINION_PREFIXES);
            let at = spans[first].token.start;
            let word = &text[spans[first].core.clone()];
            // "The film ..." -> "I think that the film ...": lower-case a sentence-initial
            // capital, but not "I" or an acronym ("NASA"). Names ("Nolan") lose theirs too: a
            // heuristic, the model sees lower-cased text anyway when its tokenizer is uncased.
            let mut chars = word.chars();
            let lower_first = match (chars.next(), chars.next()) {
                (Some(c), Some(d)) => c.is_uppercase() && d.is_lowercase(),
                _ => false,
            };
            let core_at = spans[first].core.start;
            let (range, after) = match text[core_at..].chars().next() {
                Some(c) if lower_first && core_at == at => {
                    (at..at + c.len_utf8(), format!("{prefix}{}", c.to_lowercase()))
                }
                _ => (at..at, prefix.to_string()),
            };
            vec![Replacement { range, after, word: first, kind: edit_kind }]
        }
        ChecklistKind::Tense => {
            let replacements: Vec<Replacement> = spans
                .iter()
                .enumerate()
                .filter_map(|(i, s)| {
                    let core = &text[s.core.clone()];
                    let (_, to) = TENSE_PAIRS.iter().find(|(from, _)| from.eq_ignore_ascii_case(core))?;
                    Some(Replacement { range: s.core.clone(), after: match_case(core, to), word: i, kind: edit_kind })
                })
                .collect();
            if replacements.is_empty() {
                return None;
            }
            replacements
        }
        ChecklistKind::NamedEntity => {
            let (name, city) = (pick(&mut rng, NAMES), pick(&mut rng, CITIES));
            let sentence = if rng.below(2) == 0 {
                format!(" I watched it with {name} in {city}.")
            } else {
                format!(" {name} saw it in {city} last week.")
            };
            let at = text.trim_end().len();
            vec![Replacement { range: at..at, after: sentence, word: spans.len(), kind: edit_kind }]
        }
    };
    Some(apply(text, replacements))
}

/// A CheckList-style rewrite (opinion prefix, tense swap or a named-entity sentence), drawn
/// among those that apply to `text`.
pub fn checklist_template(text: &str, seed: u64) -> Perturbation {
    let mut rng = SplitMix64::new(seed);
    let mut kinds = ChecklistKind::ALL;
    crate::data::shuffle(&mut kinds, rng.next_u64());
    let seed = rng.next_u64();
    kinds.iter().find_map(|&k| checklist(text, k, seed)).unwrap_or_else(|| unchanged(text))
}

// ---------------------------------------------------------------------------------------------
// Word diff
// ---------------------------------------------------------------------------------------------

/// What a [`DiffSpan`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DiffOp {
    /// In both texts.
    Equal,
    /// Only in the clean text.
    Delete,
    /// Only in the perturbed text.
    Insert,
}

/// A run of words with the same [`DiffOp`], joined by single spaces.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiffSpan {
    pub op: DiffOp,
    pub text: String,
}

/// Above this many LCS cells the changed middle is reported as one replacement: a diff of two
/// unrelated long texts is not worth 4 bytes a cell (in the browser too).
const MAX_LCS_CELLS: usize = 1 << 20;

/// A word diff of `clean` and `perturbed` (longest common subsequence over whitespace tokens).
/// Within a changed region the deletions come before the insertions.
pub fn diff_words(clean: &str, perturbed: &str) -> Vec<DiffSpan> {
    let a: Vec<&str> = clean.split_whitespace().collect();
    let b: Vec<&str> = perturbed.split_whitespace().collect();
    // Edits are usually local: strip the common prefix and suffix before the quadratic part.
    let prefix = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let suffix = a[prefix..].iter().rev().zip(b[prefix..].iter().rev()).take_while(|(x, y)| x == y).count();
    let (ma, mb) = (&a[prefix..a.len() - suffix], &b[prefix..b.len() - suffix]);

    let mut ops: Vec<(DiffOp, &str)> = a[..prefix].iter().map(|w| (DiffOp::Equal, *w)).collect();
    if ma.len().saturating_mul(mb.len()) > MAX_LCS_CELLS {
        ops.extend(ma.iter().map(|w| (DiffOp::Delete, *w)));
        ops.extend(mb.iter().map(|w| (DiffOp::Insert, *w)));
    } else {
        // lcs[i * w + j] = LCS length of ma[i..] and mb[j..].
        let w = mb.len() + 1;
        let mut lcs = vec![0u32; (ma.len() + 1) * w];
        for i in (0..ma.len()).rev() {
            for j in (0..mb.len()).rev() {
                lcs[i * w + j] = if ma[i] == mb[j] {
                    lcs[(i + 1) * w + j + 1] + 1
                } else {
                    lcs[(i + 1) * w + j].max(lcs[i * w + j + 1])
                };
            }
        }
        let (mut i, mut j) = (0, 0);
        while i < ma.len() || j < mb.len() {
            if i < ma.len() && j < mb.len() && ma[i] == mb[j] {
                ops.push((DiffOp::Equal, ma[i]));
                i += 1;
                j += 1;
            } else if j == mb.len() || (i < ma.len() && lcs[(i + 1) * w + j] >= lcs[i * w + j + 1]) {
                ops.push((DiffOp::Delete, ma[i]));
                i += 1;
            } else {
                ops.push((DiffOp::Insert, mb[j]));
                j += 1;
            }
        }
    }
    ops.extend(a[a.len() - suffix..].iter().map(|w| (DiffOp::Equal, *w)));

    // Group: each run between equal words becomes one Delete then one Insert span.
    let mut spans: Vec<DiffSpan> = Vec::new();
    let mut pending: [Vec<&str>; 2] = [Vec::new(), Vec::new()];
    let push = |spans: &mut Vec<DiffSpan>, op: DiffOp, words: &[&str]| {
        if words.is_empty() {
            return;
        }
        match spans.last_mut() {
            Some(last) if last.op == op => {
                last.text.push(' ');
                last.text.push_str(&words.join(" "));
            }
            _ => spans.push(DiffSpan { op, text: words.join(" ") }),
        }
    };
    for (op, word) in ops {
        match op {
            DiffOp::Delete => pending[0].push(word),
            DiffOp::Insert => pending[1].push(word),
            DiffOp::Equal => {
                push(&mut spans, DiffOp::Delete, &std::mem::take(&mut pending[0]));
                push(&mut spans, DiffOp::Insert, &std::mem::take(&mut pending[1]));
                push(&mut spans, DiffOp::Equal, &[word]);
            }
        }
    }
    push(&mut spans, DiffOp::Delete, &pending[0]);
    push(&mut spans, DiffOp::Insert, &pending[1]);
    spans
}

#[cfg(test)]
mod tests {
    use super::*;

    const SST: &str = "it 's a charming and often affecting journey . ";
    const NASTY: &[&str] = &[
        "",
        "   ",
        "😀 🎬😀 👍",
        "هذا الفيلم رائع جدا",
        "<b>great</b> movie, <i>really</i> <br/> wonderful",
        "Ünïcödé wörds everywhere, naïve café",
        ". , ! ?",
        "a",
    ];

    /// Rebuilds the clean text from the perturbed one and the edits: edits are exact.
    fn undo(p: &Perturbation) -> String {
        let mut chars: Vec<char> = p.text.chars().collect();
        for e in p.edits.iter().rev() {
            chars.splice(e.span.clone(), e.before.chars());
        }
        chars.into_iter().collect()
    }

    fn check_edits(clean: &str, p: &Perturbation) {
        let out: Vec<char> = p.text.chars().collect();
        let inp: Vec<char> = clean.chars().collect();
        for e in &p.edits {
            assert_eq!(out[e.span.clone()].iter().collect::<String>(), e.after, "{e:?}");
            assert_eq!(inp[e.clean_span.clone()].iter().collect::<String>(), e.before, "{e:?}");
        }
        assert_eq!(undo(p), clean);
    }

    fn neighbours() -> WordNeighbours {
        // Two tight clusters: {good, great, fine} and {bad, awful}, plus an unrelated word.
        let words = ["[PAD]", "good", "great", "fine", "bad", "awful", "table", "##s"];
        let rows: [[f32; 3]; 8] = [
            [0.0, 0.0, 1.0],
            [1.0, 0.1, 0.0],
            [0.9, 0.2, 0.0],
            [0.8, 0.0, 0.3],
            [-1.0, 0.1, 0.0],
            [-0.9, 0.0, 0.1],
            [0.0, 1.0, 0.0],
            [0.9, 0.1, 0.0],
        ];
        let vocab = words.iter().enumerate().map(|(i, w)| (w.to_string(), i as u32)).collect();
        WordNeighbours::new(&rows.concat(), 3, &vocab).unwrap()
    }

    #[test]
    fn words_and_cores() {
        let text = " \"Great\" film, (really)  ";
        let spans = word_spans(text);
        let cores: Vec<&str> = spans.iter().map(|s| &text[s.core.clone()]).collect();
        let tokens: Vec<&str> = spans.iter().map(|s| &text[s.token.clone()]).collect();
        assert_eq!(tokens, ["\"Great\"", "film,", "(really)"]);
        assert_eq!(cores, ["Great", "film", "really"]);
        assert!(is_substitutable("film") && !is_substitutable("The") && !is_substitutable("b2b"));
        assert_eq!(match_case("Good", "great"), "Great");
        assert_eq!(match_case("GOOD", "great"), "GREAT");
        assert_eq!(match_case("good", "great"), "great");
    }

    #[test]
    fn typo_changes_content_words_only_and_is_seeded() {
        let p = typo(SST, 2, 7);
        check_edits(SST, &p);
        assert_eq!(p.edits.len(), 2);
        for e in &p.edits {
            assert!(matches!(e.kind, EditKind::Typo(_)));
            assert_ne!(e.before, e.after);
            assert!(!is_stop_word(&e.before), "{e:?}");
        }
        assert_eq!(typo(SST, 2, 7), p);
        let outputs: std::collections::BTreeSet<String> = (0..20).map(|s| typo(SST, 1, s).text).collect();
        assert!(outputs.len() > 3, "{outputs:?}");
    }

    #[test]
    fn each_typo_kind_does_what_it_says() {
        for seed in 0..20 {
            let swap = typo_word("charming", TypoKind::Swap, seed).unwrap();
            let mut a: Vec<char> = swap.chars().collect();
            let mut b: Vec<char> = "charming".chars().collect();
            assert_eq!((a[0], a[7]), ('c', 'g'));
            a.sort();
            b.sort();
            assert_eq!(a, b, "a swap keeps the letters");
            assert_eq!(typo_word("charming", TypoKind::Delete, seed).unwrap().len(), 7);
            let ins = typo_word("Bad", TypoKind::Insert, seed).unwrap();
            assert_eq!(ins.chars().count(), 4);
            let sub = typo_word("good", TypoKind::Keyboard, seed).unwrap();
            let diff: Vec<(char, char)> = "good".chars().zip(sub.chars()).filter(|(x, y)| x != y).collect();
            assert_eq!(diff.len(), 1);
            assert!(keyboard_neighbours(diff[0].0).unwrap().contains(diff[0].1), "{sub}");
            let vis = typo_word("moon", TypoKind::Visual, seed).unwrap();
            assert!(vis.contains('0'), "{vis}");
        }
        assert_eq!(typo_word("oo", TypoKind::Swap, 0), None);
        assert_eq!(typo_word("xyw", TypoKind::Visual, 0), None);
        assert_eq!(typo_word("ab", TypoKind::Delete, 0), None);
    }

    #[test]
    fn synonym_uses_embedding_neighbours_in_the_original_case() {
        let index = neighbours();
        let text = "A Good movie, truly bad.";
        let p = synonym(text, &index, 5, 2, 0.5, 3);
        check_edits(text, &p);
        assert_eq!(p.edits.len(), 2, "{p:?}");
        let good = &p.edits[0];
        assert_eq!(good.before, "Good");
        assert!(["Great", "Fine"].contains(&good.after.as_str()), "{good:?}");
        assert_eq!(p.edits[1].after, "awful");
        // "movie", "truly" are not in the vocabulary; "A" is a stop word.
        assert!(p.text.contains("movie, truly"));
        let texts: std::collections::BTreeSet<String> =
            (0..16).map(|s| synonym("good", &index, 1, 2, 0.5, s).text).collect();
        assert_eq!(texts.len(), 2, "two neighbours to draw from: {texts:?}");
        // A high cosine threshold leaves nothing to substitute.
        assert!(synonym(text, &index, 5, 2, 0.9999, 3).edits.is_empty());
    }

    #[test]
    fn delete_word_removes_words_but_never_all() {
        let p = delete_word(SST, 2, 1);
        check_edits(SST, &p);
        assert_eq!(p.edits.len(), 2);
        assert_eq!(p.text.split_whitespace().count(), SST.split_whitespace().count() - 2);
        let text = "Great film, honestly";
        let p = delete_word(text, 10, 0);
        check_edits(text, &p);
        assert_eq!(p.edits.len(), 2);
        assert!(has_word(&p.text), "{p:?}");
        let q = delete_word("film, honestly", 1, 4);
        assert!(q.text == ", honestly" || q.text == "film,", "{q:?}");
        assert_eq!(delete_word("the film", 1, 0).text, "the");
    }

    #[test]
    fn sentence_level_edits_go_before_the_final_punctuation() {
        for seed in 0..6 {
            let p = distractor(SST, seed);
            check_edits(SST, &p);
            assert_eq!(p.edits.len(), 1);
            assert!(DISTRACTORS.contains(&p.edits[0].after.as_str()));
            assert!(p.text.starts_with("it 's a charming and often affecting journey and "), "{}", p.text);
            assert!(p.text.ends_with(" . "));
            let q = negation_contrast("A fine film!", seed);
            check_edits("A fine film!", &q);
            assert!(q.text.starts_with("A fine film, ") && q.text.ends_with('!'), "{}", q.text);
            assert_eq!(q.edits[0].word, 3);
        }
        let seen: std::collections::BTreeSet<String> = (0..30).map(|s| negation_contrast(SST, s).text).collect();
        assert!(seen.len() > 1);
    }

    #[test]
    fn checklist_rewrites() {
        let text = "The film is long but the songs were great.";
        let p = checklist(text, ChecklistKind::OpinionPrefix, 0).unwrap();
        check_edits(text, &p);
        assert!(OPINION_PREFIXES.iter().any(|pre| p.text == format!("{pre}the film is long but the songs were great.")), "{}", p.text);
        let p = checklist("I loved it", ChecklistKind::OpinionPrefix, 0).unwrap();
        assert!(p.text.ends_with(" I loved it"), "{}", p.text);

        let p = checklist(text, ChecklistKind::Tense, 0).unwrap();
        check_edits(text, &p);
        assert_eq!(p.text, "The film was long but the songs are great.");
        assert_eq!(checklist("Is it good?", ChecklistKind::Tense, 0).unwrap().text, "Was it good?");
        assert_eq!(checklist("no copula here", ChecklistKind::Tense, 0), None);

        let p = checklist(text, ChecklistKind::NamedEntity, 5).unwrap();
        check_edits(text, &p);
        assert!(p.text.starts_with(text) && NAMES.iter().any(|n| p.edits[0].after.contains(n)));

        let kinds: std::collections::BTreeSet<String> =
            (0..30).map(|s| format!("{:?}", checklist_template(text, s).edits[0].kind)).collect();
        assert_eq!(kinds.len(), 3, "every template gets drawn: {kinds:?}");
        assert_eq!(checklist_template(text, 9), checklist_template(text, 9));
    }

    #[test]
    fn odd_input_never_panics() {
        let index = neighbours();
        for text in NASTY {
            for seed in 0..8 {
                let all = [
                    typo(text, 3, seed),
                    synonym(text, &index, 3, 5, 0.1, seed),
                    delete_word(text, 3, seed),
                    distractor(text, seed),
                    negation_contrast(text, seed),
                    checklist_template(text, seed),
                ];
                for p in &all {
                    check_edits(text, p);
                    let _ = diff_words(text, &p.text);
                }
            }
        }
        assert_eq!(distractor("", 0), unchanged(""));
        assert_eq!(typo("😀😀", 2, 0), unchanged("😀😀"));
        // Arabic words get the bugs that need no keyboard map.
        let p = typo("هذا الفيلم رائع جدا", 1, 0);
        assert_eq!(p.edits.len(), 1);
    }

    #[test]
    fn diff_finds_the_changed_words() {
        let d = diff_words("the film is great fun", "the movie is great fun indeed");
        let ops: Vec<(DiffOp, &str)> = d.iter().map(|s| (s.op, s.text.as_str())).collect();
        assert_eq!(
            ops,
            [
                (DiffOp::Equal, "the"),
                (DiffOp::Delete, "film"),
                (DiffOp::Insert, "movie"),
                (DiffOp::Equal, "is great fun"),
                (DiffOp::Insert, "indeed"),
            ]
        );
        let d = diff_words("a b c d", "a c b d");
        let clean: Vec<&str> = d.iter().filter(|s| s.op != DiffOp::Insert).map(|s| s.text.as_str()).collect();
        let pert: Vec<&str> = d.iter().filter(|s| s.op != DiffOp::Delete).map(|s| s.text.as_str()).collect();
        assert_eq!(clean.join(" "), "a b c d");
        assert_eq!(pert.join(" "), "a c b d");
        assert_eq!(diff_words("", ""), []);
        assert_eq!(diff_words("same", "same"), [DiffSpan { op: DiffOp::Equal, text: "same".into() }]);
        // Past the cell limit the middle is one replacement, still exact.
        let long_a = (0..1500).map(|i| format!("a{i}")).collect::<Vec<_>>().join(" ");
        let long_b = (0..1500).map(|i| format!("b{i}")).collect::<Vec<_>>().join(" ");
        let d = diff_words(&long_a, &long_b);
        assert_eq!(d.len(), 2);
        assert_eq!(d[0].text, long_a);
    }
}
