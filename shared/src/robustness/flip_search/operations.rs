//! The one-edit operations the search combines: word edits (deletion, TextBugger's typos,
//! embedding-neighbour synonyms) and sentence-level rewrites (distractors, contrast clauses,
//! CheckList), each as replacements on the clean text.

use std::collections::HashSet;

use super::FlipSearchConfig;
use crate::robustness::neighbours::WordNeighbours;
use crate::robustness::perturb::{
    apply, checklist_replacements, clause_insertion, deletion_range, is_stop_word,
    is_substitutable, match_case, typo_word, word_spans, ChecklistKind, EditKind, Perturbation,
    Replacement, TypoKind, WordSpan, CONTRAST_CLAUSES, DISTRACTORS,
};

/// One edit: the replacements it makes on the clean text (a tense rewrite may make several).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Operation {
    pub(super) replacements: Vec<Replacement>,
    /// The clean text's word it edits; `None` for a sentence-level rewrite.
    pub(super) word: Option<usize>,
}

impl Operation {
    fn word_edit(
        word: usize,
        range: std::ops::Range<usize>,
        after: String,
        kind: EditKind,
    ) -> Self {
        Self { replacements: vec![Replacement { range, after, word, kind }], word: Some(word) }
    }

    /// Whether the two can be applied together: different words, at most one sentence-level
    /// rewrite, and no replacements that collide.
    pub(super) fn compatible(&self, other: &Operation) -> bool {
        let distinct = match (self.word, other.word) {
            (Some(a), Some(b)) => a != b,
            (None, None) => false,
            _ => true,
        };
        distinct
            && self.replacements.iter().all(|a| other.replacements.iter().all(|b| a.compatible(b)))
    }
}

/// The clean text and its words, with what the operations are drawn from.
pub(super) struct Text<'a> {
    pub(super) clean: &'a str,
    pub(super) spans: Vec<WordSpan>,
}

impl<'a> Text<'a> {
    pub(super) fn new(clean: &'a str) -> Self {
        Self { clean, spans: word_spans(clean) }
    }

    fn core(&self, i: usize) -> &'a str {
        &self.clean[self.spans[i].core.clone()]
    }

    /// The clean text with `ops` applied (they must be pairwise compatible).
    pub(super) fn apply(&self, ops: &[&Operation]) -> Perturbation {
        let replacements = ops.iter().flat_map(|op| op.replacements.iter().cloned()).collect();
        apply(self.clean, replacements)
    }

    /// One deletion per content word (two or more characters, not a stop word), as
    /// `delete_word` chooses them; none when the text has a single word, which must stay.
    pub(super) fn deletions(&self) -> Vec<Operation> {
        let with_core = self.spans.iter().filter(|s| !s.core.is_empty()).count();
        if with_core < 2 {
            return Vec::new();
        }
        (0..self.spans.len())
            .filter(|&i| {
                let core = self.core(i);
                core.chars().nth(1).is_some() && !is_stop_word(core)
            })
            .map(|i| {
                let range = deletion_range(self.clean, &self.spans, i);
                Operation::word_edit(i, range, String::new(), EditKind::DeleteWord)
            })
            .collect()
    }

    /// The words typos and synonyms may touch, most important first, at most `config.words`.
    /// `importance` holds the known scores (the drop of `P_y` when the word is deleted);
    /// unscored words come after the scored ones, in text order.
    pub(super) fn words_to_edit(
        &self,
        importance: &[(usize, f32)],
        config: &FlipSearchConfig,
    ) -> Vec<usize> {
        let eligible = |i: usize| is_substitutable(self.core(i));
        let mut ranked: Vec<(usize, f32)> =
            importance.iter().copied().filter(|&(i, _)| eligible(i)).collect();
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        let scored: HashSet<usize> = ranked.iter().map(|&(i, _)| i).collect();
        let rest = (0..self.spans.len()).filter(|&i| eligible(i) && !scored.contains(&i));
        ranked.into_iter().map(|(i, _)| i).chain(rest).take(config.words).collect()
    }

    /// Word `i`'s typos (one per kind the word allows) and its nearest embedding neighbours.
    pub(super) fn word_edits(
        &self,
        i: usize,
        neighbours: Option<&WordNeighbours>,
        config: &FlipSearchConfig,
    ) -> Vec<Operation> {
        let core = self.core(i);
        let range = self.spans[i].core.clone();
        let typos = TypoKind::ALL.into_iter().filter_map(|kind| {
            // Seeded by the word's position: the same text always gets the same typos.
            let after = typo_word(core, kind, i as u64)?;
            Some((after, EditKind::Typo(kind)))
        });
        let synonyms = neighbours
            .map(|n| n.neighbours(core, config.synonyms))
            .unwrap_or_default()
            .into_iter()
            .filter(|(_, cosine)| *cosine >= config.min_cosine)
            .map(|(w, _)| (match_case(core, &w), EditKind::Synonym));
        typos
            .chain(synonyms)
            .filter(|(after, _)| after != core)
            .map(|(after, kind)| Operation::word_edit(i, range.clone(), after, kind))
            .collect()
    }

    /// Every sentence-level rewrite that applies: each distractor, each contrast clause, each
    /// CheckList kind.
    pub(super) fn sentence_edits(&self) -> Vec<Operation> {
        let clauses = DISTRACTORS
            .iter()
            .map(|c| (c, EditKind::Distractor))
            .chain(CONTRAST_CLAUSES.iter().map(|c| (c, EditKind::NegationContrast)))
            .filter_map(|(clause, kind)| clause_insertion(self.clean, clause, kind))
            .map(|r| vec![r]);
        let checklists = ChecklistKind::ALL
            .into_iter()
            .filter_map(|kind| checklist_replacements(self.clean, kind, 0));
        clauses
            .chain(checklists)
            .map(|replacements| Operation { replacements, word: None })
            .collect()
    }
}
