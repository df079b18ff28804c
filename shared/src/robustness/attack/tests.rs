//! TextFooler on a small random model: metrics, determinism, budgets, pairs, bad input.

use super::textfooler::render;
use super::*;
use crate::data::Example;
use crate::io::tokenizer::BertTokenizer;
use crate::rng::SplitMix64;
use crate::robustness::classify::{argmax, softmax};
use crate::robustness::neighbours::WordNeighbours;
use crate::robustness::perturb::word_spans;
use crate::{BertClassifier, BertConfig};
use burn::backend::NdArray;
use burn::module::{Module, ModuleMapper, Param};
use burn::tensor::{Tensor, TensorData};

type B = NdArray<f64>;

const WORDS: &[&str] = &[
    "the", "a", "film", "movie", "picture", "story", "plot", "acting", "cast", "music", "is",
    "was", "good", "great", "fine", "nice", "superb", "bad", "awful", "poor", "terrible", "dull",
    "boring", "fun", "charming", "funny", "sad", "long", "short", "slow", "quick", "really",
    "truly", "quite", "very", "and", "but", "not", "it", ".", ",",
];

/// Re-draws every weight matrix from SplitMix64, uniform in `[-scale, scale]`: a random
/// model that is the same on every run (burn's initialiser is not seeded per model). Biases
/// stay 0 and LayerNorms 1/0, so the input, not a bias, decides the class.
struct Reinit(SplitMix64, f64);

impl ModuleMapper<B> for Reinit {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        let (id, tensor, mapper) = param.consume();
        if D < 2 {
            return Param::from_mapped_value(id, tensor, mapper);
        }
        let dims = tensor.dims();
        let values: Vec<f64> = (0..dims.iter().product::<usize>())
            .map(|_| (self.0.next_u64() as f64 / u64::MAX as f64 * 2.0 - 1.0) * self.1)
            .collect();
        Param::from_mapped_value(
            id,
            Tensor::from_data(TensorData::new(values, dims), &tensor.device()),
            mapper,
        )
    }
}

struct Fixture {
    model: BertClassifier<B>,
    tokenizer: BertTokenizer,
    neighbours: WordNeighbours,
}

fn fixture(name: &str) -> Fixture {
    let dir = std::env::temp_dir().join(format!("imbert-attack-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"];
    let vocab: Vec<&str> = specials.iter().chain(WORDS).copied().collect();
    std::fs::write(dir.join("vocab.txt"), vocab.join("\n")).unwrap();
    let tokenizer = BertTokenizer::from_dir(&dir).unwrap();
    let config = BertConfig::tiny();
    assert!(vocab.len() <= config.vocab_size);
    let model = BertClassifier::<B>::new(&config, 2, &Default::default())
        .map(&mut Reinit(SplitMix64::new(11), 0.5));
    let neighbours = WordNeighbours::from_model(&model, &tokenizer).unwrap();
    Fixture { model, tokenizer, neighbours }
}

/// Random 16-d embeddings are far apart: accept every neighbour.
fn config() -> AttackConfig {
    AttackConfig { k: 6, min_cosine: -1.0, max_queries: 60, ..AttackConfig::default() }
}

const SENTENCES: &[&str] = &[
    "the film is good and the acting is superb .",
    "a boring , slow movie but the music was nice",
    "really awful plot , terrible cast",
    "the story is charming and funny",
    "quite a long picture , not very fun",
    "the acting was poor but the music is great .",
    "a short , quick and truly charming film",
    "dull story , bad acting , sad music",
];

/// Half the examples labelled as the model predicts them (attacked), half against it
/// (skipped).
fn examples(attacker: &TextFooler<B>) -> Vec<Example> {
    let items: Vec<(String, Option<String>)> =
        SENTENCES.iter().map(|s| (s.to_string(), None)).collect();
    let probs = attacker.probabilities(&items).unwrap();
    assert_eq!(probs.len(), SENTENCES.len());
    SENTENCES
        .iter()
        .zip(probs)
        .enumerate()
        .map(|(i, (s, p))| Example {
            idx: i as i64,
            text_a: s.to_string(),
            text_b: None,
            label: if i % 4 == 3 { 1 - argmax(&p) } else { argmax(&p) },
        })
        .collect()
}

#[test]
fn metrics_are_consistent_and_the_attack_is_deterministic() {
    let f = fixture("metrics");
    let attacker = TextFooler::new(&f.model, &f.tokenizer, &f.neighbours, config()).unwrap();
    let examples = examples(&attacker);
    let results = attacker.attack_all(&examples, |_, _| {}).unwrap();
    assert_eq!(results, attacker.attack_all(&examples, |_, _| {}).unwrap(), "deterministic");

    let s = AttackSummary::from_results(&results);
    println!("{s:#?}");
    assert_eq!(s.total, examples.len());
    assert_eq!(s.succeeded + s.failed + s.skipped, s.total);
    assert_eq!(s.skipped, 2, "the two mislabelled examples");
    assert!(s.succeeded > 0, "some attack succeeds on a random model: {results:#?}");
    let close = |a: Option<f64>, b: f64| (a.unwrap() - b).abs() < 1e-9;
    assert!(close(s.original_accuracy, 100.0 * 6.0 / 8.0));
    assert!(close(s.accuracy_under_attack, 100.0 * s.failed as f64 / 8.0));
    assert!(close(
        s.attack_success_rate,
        100.0 * s.succeeded as f64 / (s.succeeded + s.failed) as f64
    ));

    for r in &results {
        assert!(r.queries <= 60, "{r:?}");
        let max_words = (0.3 * r.num_words as f64).ceil() as usize;
        assert!(r.substitutions.len() <= max_words, "{r:?}");
        // The reported prediction is what the model says about the reported text.
        let p = attacker.probabilities(&[(r.adversarial.clone(), None)]).unwrap().remove(0);
        assert_eq!(argmax(&p), r.adversarial_prediction, "{r:?}");
        match r.status {
            AttackStatus::Skipped => {
                assert_ne!(r.original_prediction, r.label);
                assert_eq!((r.queries, r.adversarial.as_str()), (1, r.original.as_str()));
            }
            AttackStatus::Succeeded => {
                assert_ne!(r.adversarial_prediction, r.label);
                assert!(!r.substitutions.is_empty() && r.adversarial != r.original);
                for sub in &r.substitutions {
                    let words: Vec<&str> = r.adversarial.split_whitespace().collect();
                    assert!(words[sub.word].contains(&sub.after), "{sub:?} in {}", r.adversarial);
                    assert!(!crate::robustness::perturb::is_stop_word(&sub.before));
                }
            }
            AttackStatus::Failed => assert_eq!(r.adversarial_prediction, r.label),
        }
    }
    let pcts: Vec<f64> = results
        .iter()
        .filter(|r| r.status == AttackStatus::Succeeded)
        .map(|r| r.perturbed_word_pct())
        .collect();
    assert!(close(s.avg_perturbed_word_pct, pcts.iter().sum::<f64>() / pcts.len() as f64));
}

#[test]
fn the_query_budget_is_respected() {
    let f = fixture("budget");
    for budget in [1, 2, 5, 13] {
        let config = AttackConfig { max_queries: budget, ..config() };
        let attacker = TextFooler::new(&f.model, &f.tokenizer, &f.neighbours, config).unwrap();
        let examples = examples(&attacker);
        let results = attacker.attack_all(&examples, |_, _| {}).unwrap();
        for r in &results {
            assert!(r.queries <= budget, "budget {budget}: {r:?}");
            if budget == 1 && r.status != AttackStatus::Skipped {
                assert_eq!(r.status, AttackStatus::Failed, "one query only checks the clean text");
            }
        }
        // A larger budget is used when there is something to spend it on.
        if budget == 13 {
            assert!(results.iter().any(|r| r.queries > 5), "{results:#?}");
        }
    }
}

#[test]
fn pairs_attack_the_chosen_text() {
    let f = fixture("pairs");
    let premise = "the film is good and the acting is superb .";
    let hypothesis = "the movie was boring and the music poor";
    for field in [PairField::TextA, PairField::TextB] {
        let config = AttackConfig { pair_field: field, ..config() };
        let attacker = TextFooler::new(&f.model, &f.tokenizer, &f.neighbours, config).unwrap();
        let p =
            attacker.probabilities(&[(premise.into(), Some(hypothesis.into()))]).unwrap().remove(0);
        let example = Example {
            idx: 7,
            text_a: premise.into(),
            text_b: Some(hypothesis.into()),
            label: argmax(&p),
        };
        let r = attacker.attack(&example).unwrap();
        assert_eq!(r.field, field);
        assert_ne!(r.status, AttackStatus::Skipped);
        let (attacked, other) =
            if field == PairField::TextA { (premise, hypothesis) } else { (hypothesis, premise) };
        assert_eq!((r.original.as_str(), r.context.as_deref()), (attacked, Some(other)));
        assert!(!r.substitutions.is_empty(), "{r:?}");
        assert_eq!(r.adversarial.split_whitespace().count(), attacked.split_whitespace().count());
    }
    // A single sentence is always text_a, whatever the config says.
    let attacker = TextFooler::new(&f.model, &f.tokenizer, &f.neighbours, config()).unwrap();
    let single = Example { idx: 0, text_a: premise.into(), text_b: None, label: 0 };
    assert_eq!(attacker.attack(&single).unwrap().field, PairField::TextA);
}

#[test]
fn bad_input_is_an_error_not_a_panic() {
    let f = fixture("errors");
    let attacker = TextFooler::new(&f.model, &f.tokenizer, &f.neighbours, config()).unwrap();
    let example = Example { idx: 3, text_a: "good".into(), text_b: None, label: 2 };
    assert!(attacker.attack(&example).unwrap_err().to_string().contains("out of range"));
    for config in [
        AttackConfig { k: 0, ..config() },
        AttackConfig { max_queries: 0, ..config() },
        AttackConfig { max_perturb_ratio: 0.0, ..config() },
        AttackConfig { max_perturb_ratio: f64::NAN, ..config() },
        AttackConfig { batch_size: 0, ..config() },
    ] {
        assert!(TextFooler::new(&f.model, &f.tokenizer, &f.neighbours, config).is_err());
    }
    let small = BertConfig { vocab_size: 20, ..BertConfig::tiny() };
    let too_small = BertClassifier::<B>::new(&small, 2, &Default::default());
    assert!(TextFooler::new(&too_small, &f.tokenizer, &f.neighbours, config()).is_err());
    let headless = BertClassifier::<B>::new(&BertConfig::tiny(), 0, &Default::default());
    assert!(TextFooler::new(&headless, &f.tokenizer, &f.neighbours, config()).is_err());
    // Texts without attackable words fail gracefully.
    for text in ["", "😀 !!", "the a and"] {
        let p = attacker.probabilities(&[(text.into(), None)]).unwrap().remove(0);
        let r = attacker
            .attack(&Example { idx: 0, text_a: text.into(), text_b: None, label: argmax(&p) })
            .unwrap();
        assert_eq!((r.status, r.queries), (AttackStatus::Failed, 1), "{text:?}");
    }
}

#[test]
fn long_inputs_are_cut_to_the_position_embeddings() {
    let f = fixture("long");
    let config = AttackConfig { max_len: 512, ..config() };
    let attacker = TextFooler::new(&f.model, &f.tokenizer, &f.neighbours, config).unwrap();
    assert_eq!(attacker.config().max_len, BertConfig::tiny().max_position_embeddings);
    let long = SENTENCES.join(" ");
    assert!(long.split_whitespace().count() > 40);
    let p = attacker.probabilities(&[(long.clone(), None)]).unwrap().remove(0);
    let r = attacker
        .attack(&Example { idx: 0, text_a: long, text_b: None, label: argmax(&p) })
        .unwrap();
    assert_ne!(r.status, AttackStatus::Skipped);
}

/// Words past the model's window are neither queried nor replaced: two texts that differ only
/// there get the same attack, query for query.
#[test]
fn words_past_the_window_are_not_attacked() {
    let f = fixture("window");
    let config = AttackConfig { max_len: 11, max_queries: 400, max_perturb_ratio: 1.0, ..config() };
    let attacker = TextFooler::new(&f.model, &f.tokenizer, &f.neighbours, config).unwrap();
    // Nine words, one token each: [CLS], these and [SEP] fill the 11 positions.
    let seen = "the film is good and the acting is superb";
    let attack = |tail: &str| {
        let text = format!("{seen} {tail}");
        let p = attacker.probabilities(&[(text.clone(), None)]).unwrap().remove(0);
        attacker.attack(&Example { idx: 0, text_a: text, text_b: None, label: argmax(&p) }).unwrap()
    };
    let short = attack("dull story");
    let long = attack("dull story , bad acting , sad music , a boring and slow plot");
    assert_ne!(short.status, AttackStatus::Skipped);
    assert_eq!(short.queries, long.queries, "{short:?}\n{long:?}");
    assert_eq!(short.substitutions, long.substitutions);
    let seen_words = seen.split_whitespace().count();
    assert!(long.substitutions.iter().all(|s| s.word < seen_words), "{long:?}");
}

#[test]
fn summary_of_nothing_has_no_ratios() {
    let s = AttackSummary::from_results(&[]);
    assert_eq!(
        (s.total, s.original_accuracy, s.attack_success_rate, s.avg_queries),
        (0, None, None, None)
    );
}

#[test]
fn render_keeps_punctuation() {
    let text = "\"Good\" film,  truly.";
    let spans = word_spans(text);
    let words = vec!["Great".to_string(), String::new(), "really".to_string()];
    assert_eq!(render(text, &spans, &words), "\"Great\" ,  really.");
    assert_eq!(argmax(&softmax(&[0.1, 2.0, -1.0])), 1);
    assert!((softmax(&[1000.0, 1000.0])[0] - 0.5).abs() < 1e-6);
}
