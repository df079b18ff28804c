//! TextFooler (Jin et al., "Is BERT Really Robust?", AAAI 2020): a greedy, black-box
//! word-substitution attack, with TextAttack's bookkeeping (query counts, skipped examples,
//! summary metrics) so the numbers compare with the papers' tables.
//!
//! For each example the model classifies correctly:
//! 1. Word importance by deletion: `I(w_i) = P_y(x) - P_y(x without w_i)` (one query per
//!    candidate word). Stop words and words with no neighbours are not scored (they could
//!    never be replaced, so scoring them would only spend queries).
//! 2. In decreasing importance, the candidates of `w_i` are its `k` nearest neighbours in the
//!    model's own word embeddings with cosine >= `min_cosine` ([`WordNeighbours`]; TextFooler
//!    uses counter-fitted GloVe, a POS check and a USE similarity check, which we do not have).
//!    All candidates of a word are scored in one batch.
//! 3. If some candidates flip the prediction, keep the one closest to `w_i` (highest cosine:
//!    our stand-in for TextFooler's USE similarity) and stop. Else keep the candidate that
//!    lowers `P_y` most, if it lowers it at all, and go on.
//! 4. Stop at the query budget (every text the model scores counts, the clean one included,
//!    as in TextAttack) or when `ceil(max_perturb_ratio * words)` words are replaced.
//!
//! Pairs: only one text is attacked, by default the second (`text_b`: the NLI hypothesis, QQP's
//! question2, QNLI's sentence), as TextAttack's recipes do for NLI; [`PairField::TextA`] attacks
//! the first instead.
//!
//! The model must be in inference mode: run on a non-autodiff backend, or pass `model.valid()`,
//! or dropout makes the predictions random.

use burn::tensor::backend::Backend;
use serde::{Deserialize, Serialize};

use crate::data::Example;
use crate::model::{BertClassifier, ForwardOptions};
use crate::neighbours::WordNeighbours;
use crate::perturb::{is_substitutable, match_case, word_spans, WordSpan};
use crate::tokenizer::{BertTokenizer, DEFAULT_MAX_LEN};
use crate::Error;

/// Which text of a pair the attack perturbs. Single sentences are always `TextA`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PairField {
    TextA,
    TextB,
}

/// The attack's knobs; the defaults follow TextAttack's TextFooler recipe where we can.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttackConfig {
    /// Neighbours considered per word (TextFooler uses 50).
    pub k: usize,
    /// Lowest cosine similarity a candidate may have.
    pub min_cosine: f32,
    /// Model queries per example, the clean prediction included.
    pub max_queries: usize,
    /// Largest share of the words that may be replaced (rounded up).
    pub max_perturb_ratio: f64,
    /// Tokens per input, special tokens included; capped at the model's
    /// `max_position_embeddings` (longer inputs have no position embedding).
    pub max_len: usize,
    /// Texts per forward pass.
    pub batch_size: usize,
    /// The text of a pair to attack.
    pub pair_field: PairField,
}

impl Default for AttackConfig {
    fn default() -> Self {
        Self {
            k: 30,
            min_cosine: 0.5,
            max_queries: 500,
            max_perturb_ratio: 0.3,
            max_len: DEFAULT_MAX_LEN,
            batch_size: 32,
            pair_field: PairField::TextB,
        }
    }
}

impl AttackConfig {
    fn validate(&self) -> Result<(), Error> {
        let bad = |m: String| Err(Error::Input(format!("attack config: {m}")));
        if self.k == 0 {
            return bad("k must be at least 1".into());
        }
        if self.max_queries == 0 {
            return bad("the query budget must be at least 1".into());
        }
        if !(self.max_perturb_ratio > 0.0 && self.max_perturb_ratio <= 1.0) {
            return bad(format!("max_perturb_ratio {} is not in (0, 1]", self.max_perturb_ratio));
        }
        if self.min_cosine.is_nan() {
            return bad("min_cosine is NaN".into());
        }
        if self.batch_size == 0 {
            return bad("batch_size must be at least 1".into());
        }
        Ok(())
    }
}

/// How an attack on one example ended (TextAttack's result classes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttackStatus {
    /// The prediction was flipped.
    Succeeded,
    /// Budget or candidates ran out with the prediction still right.
    Failed,
    /// The model was already wrong: nothing to attack.
    Skipped,
}

/// One replaced word.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Substitution {
    /// Index of the whitespace-separated word in the attacked text.
    pub word: usize,
    pub before: String,
    pub after: String,
    /// Cosine similarity of the two words' embeddings.
    pub cosine: f32,
}

/// The attack on one example.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttackResult {
    /// The example's `idx`.
    pub idx: i64,
    pub label: usize,
    pub status: AttackStatus,
    /// Which text was attacked.
    pub field: PairField,
    /// The attacked text before the attack.
    pub original: String,
    /// The attacked text after it (the best attempt for a failed attack; the original when
    /// skipped).
    pub adversarial: String,
    /// The other text of a pair, unchanged.
    pub context: Option<String>,
    pub original_prediction: usize,
    pub adversarial_prediction: usize,
    pub original_probabilities: Vec<f32>,
    pub adversarial_probabilities: Vec<f32>,
    pub substitutions: Vec<Substitution>,
    /// Words (with a letter or digit) in the attacked text.
    pub num_words: usize,
    /// Model queries spent on this example.
    pub queries: usize,
}

impl AttackResult {
    /// Share of the words replaced, in percent (0 for a text without words).
    pub fn perturbed_word_pct(&self) -> f64 {
        if self.num_words == 0 {
            0.0
        } else {
            100.0 * self.substitutions.len() as f64 / self.num_words as f64
        }
    }
}

/// TextAttack's attack summary. Ratios are percentages, `None` when their denominator is 0.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttackSummary {
    pub total: usize,
    pub succeeded: usize,
    pub failed: usize,
    pub skipped: usize,
    /// Correct before the attack: `(total - skipped) / total`.
    pub original_accuracy: Option<f64>,
    /// Still correct after it: `failed / total`.
    pub accuracy_under_attack: Option<f64>,
    /// `succeeded / (succeeded + failed)`.
    pub attack_success_rate: Option<f64>,
    /// Mean share of words replaced, over successful attacks (as TextAttack computes it).
    pub avg_perturbed_word_pct: Option<f64>,
    /// Mean words per attacked text, over all examples.
    pub avg_num_words: Option<f64>,
    /// Mean queries, over attacked (not skipped) examples.
    pub avg_queries: Option<f64>,
}

impl AttackSummary {
    pub fn from_results(results: &[AttackResult]) -> Self {
        let count = |s: AttackStatus| results.iter().filter(|r| r.status == s).count();
        let (succeeded, failed, skipped) =
            (count(AttackStatus::Succeeded), count(AttackStatus::Failed), count(AttackStatus::Skipped));
        let total = results.len();
        let pct = |num: usize, den: usize| (den > 0).then(|| 100.0 * num as f64 / den as f64);
        let mean = |xs: Vec<f64>| (!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64);
        let of = |keep: fn(&AttackResult) -> bool, f: fn(&AttackResult) -> f64| {
            mean(results.iter().filter(|r| keep(r)).map(f).collect())
        };
        Self {
            total,
            succeeded,
            failed,
            skipped,
            original_accuracy: pct(total - skipped, total),
            accuracy_under_attack: pct(failed, total),
            attack_success_rate: pct(succeeded, succeeded + failed),
            avg_perturbed_word_pct: of(|r| r.status == AttackStatus::Succeeded, AttackResult::perturbed_word_pct),
            avg_num_words: of(|_| true, |r| r.num_words as f64),
            avg_queries: of(|r| r.status != AttackStatus::Skipped, |r| r.queries as f64),
        }
    }
}

/// The attack, bound to a model, its tokenizer and its embedding neighbours.
pub struct TextFooler<'a, B: Backend> {
    model: &'a BertClassifier<B>,
    tokenizer: &'a BertTokenizer,
    neighbours: &'a WordNeighbours,
    config: AttackConfig,
    device: B::Device,
}

impl<'a, B: Backend> TextFooler<'a, B> {
    /// Fails on an invalid config or a model without a classifier.
    pub fn new(
        model: &'a BertClassifier<B>,
        tokenizer: &'a BertTokenizer,
        neighbours: &'a WordNeighbours,
        mut config: AttackConfig,
    ) -> Result<Self, Error> {
        config.validate()?;
        config.max_len = config.max_len.min(model.config.max_position_embeddings);
        if model.num_labels() == 0 {
            return Err(Error::Input("the model has no classifier to attack".into()));
        }
        // An id past the embedding table would panic inside the backend.
        if tokenizer.vocab_size() > model.config.vocab_size {
            return Err(Error::Input(format!(
                "the tokenizer has {} tokens but the model embeds only {}",
                tokenizer.vocab_size(),
                model.config.vocab_size
            )));
        }
        let device = model.bert.embeddings.word_embeddings.weight.device();
        Ok(Self { model, tokenizer, neighbours, config, device })
    }

    pub fn config(&self) -> &AttackConfig {
        &self.config
    }

    /// Attacks every example in turn; `progress` sees each result as it is done.
    pub fn attack_all(
        &self,
        examples: &[Example],
        mut progress: impl FnMut(usize, &AttackResult),
    ) -> Result<Vec<AttackResult>, Error> {
        let mut results = Vec::with_capacity(examples.len());
        for (i, example) in examples.iter().enumerate() {
            let result = self.attack(example)?;
            progress(i, &result);
            results.push(result);
        }
        Ok(results)
    }

    /// Attacks one example.
    pub fn attack(&self, example: &Example) -> Result<AttackResult, Error> {
        let label = example.label;
        let num_labels = self.model.num_labels();
        if label >= num_labels {
            return Err(Error::Input(format!(
                "example {}: label {label} is out of range for a model with {num_labels} classes",
                example.idx
            )));
        }
        let field = match (&example.text_b, self.config.pair_field) {
            (Some(_), PairField::TextB) => PairField::TextB,
            _ => PairField::TextA,
        };
        let (text, context) = match (field, &example.text_b) {
            (PairField::TextB, Some(b)) => (b.as_str(), Some(example.text_a.as_str())),
            _ => (example.text_a.as_str(), example.text_b.as_deref()),
        };
        // The model input for a version of the attacked text.
        let item = |attacked: &'_ str| match field {
            PairField::TextA => (attacked.to_string(), context.map(str::to_string)),
            PairField::TextB => (example.text_a.clone(), Some(attacked.to_string())),
        };

        let spans = word_spans(text);
        let mut words: Vec<String> = spans.iter().map(|s| text[s.core.clone()].to_string()).collect();
        let num_words = words.iter().filter(|w| !w.is_empty()).count();
        let mut queries = 1;
        let original_probabilities = self.probabilities(&[item(text)])?.remove(0);
        let original_prediction = argmax(&original_probabilities);
        let mut result = AttackResult {
            idx: example.idx,
            label,
            status: AttackStatus::Skipped,
            field,
            original: text.to_string(),
            adversarial: text.to_string(),
            context: context.map(str::to_string),
            original_prediction,
            adversarial_prediction: original_prediction,
            original_probabilities: original_probabilities.clone(),
            adversarial_probabilities: original_probabilities.clone(),
            substitutions: Vec::new(),
            num_words,
            queries,
        };
        if original_prediction != label {
            return Ok(result);
        }
        let budget = |queries: usize| self.config.max_queries.saturating_sub(queries);

        // 1. Importance by deletion, of the words that have candidates at all.
        let mut scored: Vec<usize> = (0..words.len())
            .filter(|&i| is_substitutable(&words[i]) && self.neighbours.contains(&words[i]))
            .collect();
        scored.truncate(budget(queries));
        let deleted: Vec<(String, Option<String>)> = scored
            .iter()
            .map(|&i| {
                let mut w = words.clone();
                w[i].clear();
                item(&render(text, &spans, &w))
            })
            .collect();
        let probs = self.probabilities(&deleted)?;
        queries += deleted.len();
        let p_clean = original_probabilities[label];
        let mut order: Vec<(f32, usize)> = scored.iter().zip(&probs).map(|(&i, p)| (p_clean - p[label], i)).collect();
        order.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));

        // 2-4. Greedy substitution.
        let max_words = (self.config.max_perturb_ratio * num_words as f64).ceil() as usize;
        let mut current = original_probabilities;
        for (_, i) in order {
            if result.substitutions.len() >= max_words || budget(queries) == 0 {
                break;
            }
            let before = words[i].clone();
            let mut candidates: Vec<(String, f32)> = self
                .neighbours
                .neighbours(&before, self.config.k)
                .into_iter()
                .filter(|(_, cos)| *cos >= self.config.min_cosine)
                .map(|(w, cos)| (match_case(&before, &w), cos))
                .collect();
            // Best-first, so a cut keeps the closest candidates.
            candidates.truncate(budget(queries));
            if candidates.is_empty() {
                continue;
            }
            let texts: Vec<String> = candidates
                .iter()
                .map(|(c, _)| {
                    let mut w = words.clone();
                    w[i] = c.clone();
                    render(text, &spans, &w)
                })
                .collect();
            let items: Vec<_> = texts.iter().map(|t| item(t)).collect();
            let probs = self.probabilities(&items)?;
            queries += items.len();
            let flip = probs.iter().position(|p| argmax(p) != label);
            let pick = flip.or_else(|| {
                let (j, p) = probs.iter().enumerate().min_by(|a, b| a.1[label].total_cmp(&b.1[label]))?;
                (p[label] < current[label]).then_some(j)
            });
            if let Some(j) = pick {
                let (after, cosine) = candidates[j].clone();
                words[i] = after.clone();
                result.substitutions.push(Substitution { word: i, before, after, cosine });
                current = probs[j].clone();
                result.adversarial = texts[j].clone();
            }
            if flip.is_some() {
                break;
            }
        }

        result.adversarial_prediction = argmax(&current);
        result.status =
            if result.adversarial_prediction != label { AttackStatus::Succeeded } else { AttackStatus::Failed };
        result.adversarial_probabilities = current;
        result.queries = queries;
        Ok(result)
    }

    /// Class probabilities of each input, in batches of `batch_size`.
    pub fn probabilities(&self, items: &[(String, Option<String>)]) -> Result<Vec<Vec<f32>>, Error> {
        let mut out = Vec::with_capacity(items.len());
        for chunk in items.chunks(self.config.batch_size) {
            let refs: Vec<(&str, Option<&str>)> = chunk.iter().map(|(a, b)| (a.as_str(), b.as_deref())).collect();
            let batch = self.tokenizer.encode(&refs, self.config.max_len)?;
            let logits = self
                .model
                .forward(&batch.to_input::<B>(&self.device), ForwardOptions::default())
                .logits
                .ok_or_else(|| Error::Input("the model has no classifier".into()))?;
            let n = logits.dims()[1];
            let values = logits
                .into_data()
                .convert::<f32>()
                .into_vec::<f32>()
                .map_err(|e| Error::Input(format!("reading logits: {e:?}")))?;
            out.extend(values.chunks_exact(n).map(softmax));
        }
        Ok(out)
    }
}

/// `text` with each word's core replaced by `words[i]` (punctuation and spacing kept).
fn render(text: &str, spans: &[WordSpan], words: &[String]) -> String {
    let mut out = String::with_capacity(text.len() + 16);
    let mut last = 0;
    for (span, word) in spans.iter().zip(words) {
        out.push_str(&text[last..span.core.start]);
        out.push_str(word);
        last = span.core.end;
    }
    out.push_str(&text[last..]);
    out
}

fn softmax(logits: &[f32]) -> Vec<f32> {
    let mut p = logits.to_vec();
    crate::kernels::softmax_row(&mut p);
    p
}

/// Index of the largest value (the first of equals).
fn argmax(p: &[f32]) -> usize {
    p.iter().enumerate().fold(0, |best, (i, x)| if *x > p[best] { i } else { best })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::SplitMix64;
    use crate::BertConfig;
    use burn::backend::NdArray;
    use burn::module::{Module, ModuleMapper, Param};
    use burn::tensor::{Tensor, TensorData};

    type B = NdArray<f64>;

    const WORDS: &[&str] = &[
        "the", "a", "film", "movie", "picture", "story", "plot", "acting", "cast", "music", "is",
        "was", "good", "great", "fine", "nice", "superb", "bad", "awful", "poor", "terrible",
        "dull", "boring", "fun", "charming", "funny", "sad", "long", "short", "slow", "quick",
        "really", "truly", "quite", "very", "and", "but", "not", "it", ".", ",",
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
            Param::from_mapped_value(id, Tensor::from_data(TensorData::new(values, dims), &tensor.device()), mapper)
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
        let model = BertClassifier::<B>::new(&config, 2, &Default::default()).map(&mut Reinit(SplitMix64::new(11), 0.5));
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
        let items: Vec<(String, Option<String>)> = SENTENCES.iter().map(|s| (s.to_string(), None)).collect();
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
        assert!(close(s.attack_success_rate, 100.0 * s.succeeded as f64 / (s.succeeded + s.failed) as f64));

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
                        assert!(!crate::perturb::is_stop_word(&sub.before));
                    }
                }
                AttackStatus::Failed => assert_eq!(r.adversarial_prediction, r.label),
            }
        }
        let pcts: Vec<f64> = results.iter().filter(|r| r.status == AttackStatus::Succeeded).map(|r| r.perturbed_word_pct()).collect();
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
            let p = attacker.probabilities(&[(premise.into(), Some(hypothesis.into()))]).unwrap().remove(0);
            let example = Example { idx: 7, text_a: premise.into(), text_b: Some(hypothesis.into()), label: argmax(&p) };
            let r = attacker.attack(&example).unwrap();
            assert_eq!(r.field, field);
            assert_ne!(r.status, AttackStatus::Skipped);
            let (attacked, other) = if field == PairField::TextA { (premise, hypothesis) } else { (hypothesis, premise) };
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
            let r = attacker.attack(&Example { idx: 0, text_a: text.into(), text_b: None, label: argmax(&p) }).unwrap();
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
        let r = attacker.attack(&Example { idx: 0, text_a: long, text_b: None, label: argmax(&p) }).unwrap();
        assert_ne!(r.status, AttackStatus::Skipped);
    }

    #[test]
    fn summary_of_nothing_has_no_ratios() {
        let s = AttackSummary::from_results(&[]);
        assert_eq!((s.total, s.original_accuracy, s.attack_success_rate, s.avg_queries), (0, None, None, None));
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
}
