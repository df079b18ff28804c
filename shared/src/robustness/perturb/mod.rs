//! Text perturbations for robustness checks, shared by the native attack
//! ([`crate::robustness::attack`]) and the browser demo: pure Rust, no I/O, deterministic for a
//! given `u64` seed.
//!
//! - Word level: [`typo`] (TextBugger's character bugs), [`synonym`] (nearest neighbours in the
//!   model's own word embeddings, see [`crate::robustness::neighbours`]), [`delete_word`].
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

mod diff;
mod edit;
mod sentence;
mod substitution;
#[cfg(test)]
pub(crate) mod test_support;
mod typo;
mod words;

pub(crate) use edit::{apply, Replacement};
pub(crate) use sentence::{checklist_replacements, clause_insertion};
pub(crate) use substitution::deletion_range;

pub use diff::{diff_words, DiffOp, DiffSpan};
pub use edit::{Edit, EditKind, Perturbation};
pub use sentence::{
    checklist, checklist_template, distractor, negation_contrast, ChecklistKind, CONTRAST_CLAUSES,
    DISTRACTORS,
};
pub use substitution::{delete_word, synonym};
pub use typo::{typo, typo_word, TypoKind};
pub use words::{is_stop_word, is_substitutable, match_case, word_spans, WordSpan, STOP_WORDS};

#[cfg(test)]
mod tests {
    use super::edit::unchanged;
    use super::test_support::{check_edits, neighbours, NASTY};
    use super::*;

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
}
