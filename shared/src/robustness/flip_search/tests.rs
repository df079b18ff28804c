//! The search against small lexical classifiers whose flips are known by construction: which
//! edit flips, and how many are needed.

use super::*;
use crate::robustness::perturb::test_support::{check_edits, neighbours};
use crate::robustness::perturb::EditKind;

/// `[P(negative), P(positive)]` from a word-count score: `bias + sum of weights`.
fn lexicon(bias: f32, weights: &'static [(&'static str, f32)]) -> impl Fn(&str) -> Vec<f32> {
    move |text| {
        let score: f32 = bias
            + text
                .split(|c: char| !c.is_alphanumeric())
                .filter_map(|w| weights.iter().find(|(k, _)| *k == w).map(|(_, v)| v))
                .sum::<f32>();
        let p = 1.0 / (1.0 + (-score).exp());
        vec![1.0 - p, p]
    }
}

/// Runs a search, checking on the way that no text is scored twice.
fn search(
    text: &str,
    index: Option<&WordNeighbours>,
    config: FlipSearchConfig,
    model: impl Fn(&str) -> Vec<f32>,
) -> FlipOutcome {
    let mut scored = HashSet::new();
    FlipSearch::new(text, index, config)
        .unwrap()
        .run(|batch: &[String]| {
            for t in batch {
                assert!(scored.insert(t.clone()), "scored twice: {t:?}");
            }
            Ok::<_, Error>(batch.iter().map(|t| model(t)).collect())
        })
        .unwrap()
}

fn found(outcome: &FlipOutcome) -> &FlipCandidate {
    assert_eq!(outcome.status, FlipStatus::Flipped, "{outcome:?}");
    outcome.best.as_ref().unwrap()
}

#[test]
fn one_deletion_flips_when_one_word_carries_the_verdict() {
    let text = "the plot is terrible , sadly";
    let outcome = search(text, None, Default::default(), lexicon(0.5, &[("terrible", -3.0)]));
    let best = found(&outcome);
    assert_eq!(outcome.clean_label, Some(0));
    assert_eq!((best.num_edits, best.label), (1, 1));
    let edit = &best.perturbation.edits[0];
    // A bare word goes with the space before it.
    assert_eq!((edit.kind, edit.before.as_str()), (EditKind::DeleteWord, " terrible"));
    check_edits(text, &best.perturbation);
    // The clean text, then one deletion per content word until the flip: nothing more.
    assert!(outcome.queries <= 1 + 3, "{}", outcome.queries);
}

#[test]
fn two_edits_when_no_single_edit_flips() {
    // Each "bad" is -1: one edit leaves -0.5, two leave +0.5.
    let model = lexicon(1.5, &[("bad", -1.0)]);
    let text = "bad acting , bad plot , bad music";
    let outcome = search(text, None, Default::default(), &model);
    let best = found(&outcome);
    assert_eq!(best.num_edits, 2);
    let words: HashSet<usize> = best.perturbation.edits.iter().map(|e| e.word).collect();
    assert_eq!(words.len(), 2, "two different words: {:?}", best.perturbation.edits);
    assert!(best.perturbation.edits.iter().all(|e| e.before.trim() == "bad"), "{best:?}");
    check_edits(text, &best.perturbation);
    assert_eq!(model(&best.perturbation.text), best.probabilities);

    // Three are needed when each counts -2 against +1; two edits are not allowed.
    let config = FlipSearchConfig { max_edits: 2, ..Default::default() };
    let outcome = search(text, None, config, lexicon(1.0, &[("bad", -2.0)]));
    assert_eq!(outcome.status, FlipStatus::MaxEdits);
    let closest = outcome.best.unwrap();
    assert_eq!((closest.num_edits, closest.label), (2, 0));
}

#[test]
fn sentence_rewrites_are_tried_when_no_word_edit_helps() {
    let model = |t: &str| if t.contains("true is true") { vec![0.2, 0.8] } else { vec![0.9, 0.1] };
    let text = "A slow , dull film .";
    let best = search(text, None, Default::default(), model);
    let edit = &found(&best).perturbation.edits[0];
    assert_eq!(edit.kind, EditKind::Distractor);
    assert_eq!(found(&best).perturbation.text, "A slow , dull film and true is true .");
    let config = FlipSearchConfig { sentence_edits: false, ..Default::default() };
    assert_eq!(search(text, None, config, model).status, FlipStatus::MaxEdits);
}

#[test]
fn synonyms_come_from_the_embedding_neighbours() {
    let model = |t: &str| if t.contains("awful") { vec![0.1, 0.9] } else { vec![0.7, 0.3] };
    let index = neighbours();
    let text = "a bad day";
    let best = search(text, Some(&index), Default::default(), model);
    let edit = &found(&best).perturbation.edits[0];
    assert_eq!((edit.kind, edit.after.as_str()), (EditKind::Synonym, "awful"));
    // Without the index, or with a cosine no neighbour reaches, nothing flips.
    assert_ne!(search(text, None, Default::default(), model).status, FlipStatus::Flipped);
    let strict = FlipSearchConfig { min_cosine: 0.9999, ..Default::default() };
    assert_ne!(search(text, Some(&index), strict, model).status, FlipStatus::Flipped);
}

#[test]
fn the_query_budget_and_cancel_stop_it() {
    let never = |_: &str| vec![0.8, 0.2];
    let text = "an unremarkable , forgettable and overlong film";
    let free = search(text, None, Default::default(), never);
    assert_eq!(free.status, FlipStatus::MaxEdits);
    assert!(free.queries > 20, "{}", free.queries);
    let tight = FlipSearchConfig { max_queries: 20, ..Default::default() };
    let outcome = search(text, None, tight, never);
    assert_eq!((outcome.status, outcome.queries), (FlipStatus::MaxQueries, 20));

    let config = FlipSearchConfig { batch_size: 3, ..Default::default() };
    let mut s = FlipSearch::new(text, None, config).unwrap();
    for _ in 0..2 {
        let batch = s.next_batch().unwrap();
        assert_eq!(s.next_batch().unwrap(), batch, "unfed batches are handed out again");
        s.feed(&batch.iter().map(|t| never(t)).collect::<Vec<_>>()).unwrap();
    }
    assert_eq!(s.progress().queries, 1 + 3);
    s.cancel();
    assert!(s.next_batch().is_none());
    let outcome = s.outcome().unwrap();
    assert_eq!((outcome.status, outcome.queries), (FlipStatus::Cancelled, 4));
    assert_eq!(outcome.clean_label, Some(0));
}

#[test]
fn texts_without_anything_to_edit_end_at_once() {
    for text in ["", "   ", "😀 👍", ". , !"] {
        let outcome = search(text, None, Default::default(), |_| vec![0.6, 0.4]);
        assert_eq!((outcome.status, outcome.queries), (FlipStatus::NothingToEdit, 1), "{text:?}");
        assert!(outcome.best.is_none());
    }
}

#[test]
fn bad_scores_and_settings_are_errors() {
    let mut s = FlipSearch::new("a good film", None, Default::default()).unwrap();
    assert!(s.feed(&[vec![0.5, 0.5]]).is_err(), "nothing was handed out");
    s.next_batch().unwrap();
    assert!(s.feed(&[]).is_err());
    assert!(s.feed(&[vec![1.0]]).is_err());
    assert!(s.feed(&[vec![f32::NAN, 0.5]]).is_err());
    s.feed(&[vec![0.3, 0.7]]).unwrap();
    let batch = s.next_batch().unwrap();
    assert!(s.feed(&vec![vec![0.3, 0.3, 0.4]; batch.len()]).is_err(), "class count changed");
    for config in [
        FlipSearchConfig { batch_size: 0, ..Default::default() },
        FlipSearchConfig { max_queries: 0, ..Default::default() },
        FlipSearchConfig { min_cosine: 2.0, ..Default::default() },
    ] {
        assert!(FlipSearch::new("a good film", None, config).is_err());
    }
}

#[test]
fn one_sentence_rewrite_per_text_at_most() {
    // Each of the two rewrites brings the verdict closer (so both lead the beam), but only the
    // two together would flip it: that pair is never tried.
    let model = |t: &str| {
        let p = 0.1
            + 0.3 * f32::from(u8::from(t.contains("and true is true .")))
            + 0.3 * f32::from(u8::from(t.contains(" that A slow")));
        vec![1.0 - p, p]
    };
    let outcome = search("A slow film .", None, Default::default(), model);
    assert_eq!(outcome.status, FlipStatus::MaxEdits, "{outcome:?}");
}

#[test]
fn only_the_words_the_model_reads_are_edited() {
    // The model reads "the plot is terrible and awful ," (it is cut there); the rest lies beyond.
    // Both words must go for the verdict to flip: two edits, every one of them in the head.
    let text = "the plot is terrible and awful , the ending drags on and on";
    let tail = " , the ending drags on and on";
    let visible = "the plot is terrible and aw".len(); // mid-word: the word is kept whole
    let model = lexicon(2.0, &[("terrible", -3.0), ("awful", -3.0)]);
    let read = |t: &str| model(t.split(" , ").next().unwrap());
    let mut scored = Vec::new();
    let outcome = FlipSearch::with_visible(text, visible, None, Default::default())
        .unwrap()
        .run(|batch: &[String]| {
            scored.extend(batch.iter().cloned());
            Ok::<_, Error>(batch.iter().map(|t| read(t)).collect())
        })
        .unwrap();
    let best = found(&outcome);
    assert_eq!(best.num_edits, 2);
    assert!(best.perturbation.text.ends_with(tail), "{best:?}");
    check_edits(text, &best.perturbation);
    for t in &scored {
        assert!(t.ends_with(tail), "the unread tail was edited: {t:?}");
    }
}
