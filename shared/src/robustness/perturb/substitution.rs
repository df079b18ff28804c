//! Word substitutions and deletions: embedding neighbours ([`synonym`]) and [`delete_word`].

use std::ops::Range;

use super::edit::{apply, choose, Replacement};
use super::{
    is_stop_word, is_substitutable, match_case, word_spans, EditKind, Perturbation, WordSpan,
};
use crate::rng::SplitMix64;
use crate::robustness::neighbours::WordNeighbours;

/// Replaces up to `n` content words by one of their `k` nearest neighbours in the model's word
/// embeddings with cosine >= `min_cosine` (drawn uniformly), in the original word's case.
/// Words that are not a single whole-word vocabulary entry have no neighbours and stay.
pub fn synonym(
    text: &str,
    index: &WordNeighbours,
    n: usize,
    k: usize,
    min_cosine: f32,
    seed: u64,
) -> Perturbation {
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
        replacements.push(Replacement {
            range: spans[i].core.clone(),
            after,
            word: i,
            kind: EditKind::Synonym,
        });
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
        .map(|i| Replacement {
            range: deletion_range(text, &spans, i),
            after: String::new(),
            word: i,
            kind: EditKind::DeleteWord,
        })
        .collect();
    apply(text, replacements)
}

/// The bytes that deleting word `i` removes: its core, or when the token is nothing but its
/// core, the token and the whitespace before it (after it, for the first word).
pub(crate) fn deletion_range(text: &str, spans: &[WordSpan], i: usize) -> Range<usize> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::robustness::perturb::sentence::has_word;
    use crate::robustness::perturb::test_support::{check_edits, neighbours, SST};

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
}
