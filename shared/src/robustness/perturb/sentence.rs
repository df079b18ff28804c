//! Sentence-level edits: StressTest's distractors, contrast clauses and CheckList's rewrites.

use serde::{Deserialize, Serialize};

use super::edit::{apply, pick, unchanged, Replacement};
use super::{match_case, word_spans, EditKind, Perturbation};
use crate::rng::SplitMix64;

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
const CITIES: &[&str] =
    &["Chicago", "Paris", "Lagos", "Mumbai", "Toronto", "Osaka", "Berlin", "Lima"];
const TENSE_PAIRS: &[(&str, &str)] =
    &[("is", "was"), ("was", "is"), ("are", "were"), ("were", "are")];

pub(super) fn has_word(text: &str) -> bool {
    text.chars().any(char::is_alphanumeric)
}

/// Where a clause joins the sentence: after the last word, before the final `.`/`!`/`?` and
/// trailing whitespace (`"slow . "` -> `"slow| . "`).
fn clause_point(text: &str) -> usize {
    text.trim_end().trim_end_matches(['.', '!', '?']).trim_end().len()
}

fn insert_clause(text: &str, clause: &str, kind: EditKind) -> Perturbation {
    match clause_insertion(text, clause, kind) {
        Some(r) => apply(text, vec![r]),
        None => unchanged(text),
    }
}

/// `clause` inserted after the last word (see [`clause_point`]); `None` when `text` has no word.
pub(crate) fn clause_insertion(text: &str, clause: &str, kind: EditKind) -> Option<Replacement> {
    if !has_word(text) {
        return None;
    }
    let at = clause_point(text);
    let word = word_spans(&text[..at]).len();
    Some(Replacement { range: at..at, after: clause.to_string(), word, kind })
}

/// Appends one of StressTest's [`DISTRACTORS`] (`"it 's slow ."` -> `"it 's slow and true is
/// true ."`), before the final punctuation.
pub fn distractor(text: &str, seed: u64) -> Perturbation {
    insert_clause(text, pick(&mut SplitMix64::new(seed), DISTRACTORS), EditKind::Distractor)
}

/// Appends one of the [`CONTRAST_CLAUSES`] before the final punctuation.
pub fn negation_contrast(text: &str, seed: u64) -> Perturbation {
    insert_clause(
        text,
        pick(&mut SplitMix64::new(seed), CONTRAST_CLAUSES),
        EditKind::NegationContrast,
    )
}

/// A CheckList rewrite of kind `kind`, or `None` when it does not apply (no word; no `is`,
/// `was`, `are` or `were` for [`ChecklistKind::Tense`]).
pub fn checklist(text: &str, kind: ChecklistKind, seed: u64) -> Option<Perturbation> {
    checklist_replacements(text, kind, seed).map(|r| apply(text, r))
}

/// The replacements of [`checklist`], not yet applied.
pub(crate) fn checklist_replacements(
    text: &str,
    kind: ChecklistKind,
    seed: u64,
) -> Option<Vec<Replacement>> {
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
                    let (_, to) =
                        TENSE_PAIRS.iter().find(|(from, _)| from.eq_ignore_ascii_case(core))?;
                    Some(Replacement {
                        range: s.core.clone(),
                        after: match_case(core, to),
                        word: i,
                        kind: edit_kind,
                    })
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
    Some(replacements)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::robustness::perturb::test_support::{check_edits, SST};

    #[test]
    fn sentence_level_edits_go_before_the_final_punctuation() {
        for seed in 0..6 {
            let p = distractor(SST, seed);
            check_edits(SST, &p);
            assert_eq!(p.edits.len(), 1);
            assert!(DISTRACTORS.contains(&p.edits[0].after.as_str()));
            assert!(
                p.text.starts_with("it 's a charming and often affecting journey and "),
                "{}",
                p.text
            );
            assert!(p.text.ends_with(" . "));
            let q = negation_contrast("A fine film!", seed);
            check_edits("A fine film!", &q);
            assert!(q.text.starts_with("A fine film, ") && q.text.ends_with('!'), "{}", q.text);
            assert_eq!(q.edits[0].word, 3);
        }
        let seen: std::collections::BTreeSet<String> =
            (0..30).map(|s| negation_contrast(SST, s).text).collect();
        assert!(seen.len() > 1);
    }

    #[test]
    fn checklist_rewrites() {
        let text = "The film is long but the songs were great.";
        let p = checklist(text, ChecklistKind::OpinionPrefix, 0).unwrap();
        check_edits(text, &p);
        assert!(
            OPINION_PREFIXES
                .iter()
                .any(|pre| p.text == format!("{pre}the film is long but the songs were great.")),
            "{}",
            p.text
        );
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
}
