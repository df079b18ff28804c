//! The TextFooler search itself, bound to a model, its tokenizer and its word neighbours.

use burn::tensor::backend::Backend;

use super::{AttackConfig, AttackResult, AttackStatus, PairField, Substitution};
use crate::data::Example;
use crate::io::tokenizer::BertTokenizer;
use crate::model::BertClassifier;
use crate::robustness::classify::{self, argmax};
use crate::robustness::neighbours::WordNeighbours;
use crate::robustness::perturb::{is_substitutable, match_case, word_spans, WordSpan};
use crate::Error;

/// The attack, bound to a model, its tokenizer and its embedding neighbours.
pub struct TextFooler<'a, B: Backend> {
    model: &'a BertClassifier<B>,
    tokenizer: &'a BertTokenizer,
    neighbours: &'a WordNeighbours,
    config: AttackConfig,
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
        config.max_len = model.max_len(config.max_len);
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
        Ok(Self { model, tokenizer, neighbours, config })
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
        let target = Target::new(example, self.config.pair_field);
        let words: Vec<String> =
            target.spans.iter().map(|s| target.text[s.core.clone()].to_string()).collect();
        let num_words = words.iter().filter(|w| !w.is_empty()).count();
        let original_probabilities = self.probabilities(&[target.item(target.text)])?.remove(0);
        let original_prediction = argmax(&original_probabilities);
        let mut result = AttackResult {
            idx: example.idx,
            label,
            status: AttackStatus::Skipped,
            field: target.field,
            original: target.text.to_string(),
            adversarial: target.text.to_string(),
            context: target.context.map(str::to_string),
            original_prediction,
            adversarial_prediction: original_prediction,
            original_probabilities: original_probabilities.clone(),
            adversarial_probabilities: original_probabilities,
            substitutions: Vec::new(),
            num_words,
            queries: 1,
        };
        if original_prediction != label {
            return Ok(result);
        }
        let order = self.rank_by_importance(&target, &words, &mut result)?;
        self.substitute_greedily(&target, words, order, &mut result)?;
        Ok(result)
    }

    /// Query budget left after `queries`.
    fn budget(&self, queries: usize) -> usize {
        self.config.max_queries.saturating_sub(queries)
    }

    /// Bytes of the attacked text that the model reads at `max_len` tokens. A word past them
    /// cannot move the prediction, so querying it would only spend the budget (most of an IMDB
    /// review lies past 128 tokens). `visible_len` measures a pair's second text, so the first
    /// text of a pair counts as read whole.
    fn visible_end(&self, target: &Target) -> Result<usize, Error> {
        if target.field == PairField::TextA && target.context.is_some() {
            return Ok(target.text.len());
        }
        let (a, b) = target.item(target.text);
        self.tokenizer.visible_len((&a, b.as_deref()), self.config.max_len)
    }

    /// Step 1: the words the model reads that have candidates at all, most important first,
    /// importance being the drop of `P_label` when the word is deleted (one query per word,
    /// within the budget).
    fn rank_by_importance(
        &self,
        target: &Target,
        words: &[String],
        result: &mut AttackResult,
    ) -> Result<Vec<usize>, Error> {
        let label = result.label;
        let visible = self.visible_end(target)?;
        let mut scored: Vec<usize> = (0..words.len())
            .filter(|&i| target.spans[i].core.start < visible)
            .filter(|&i| is_substitutable(&words[i]) && self.neighbours.contains(&words[i]))
            .collect();
        scored.truncate(self.budget(result.queries));
        let deleted: Vec<(String, Option<String>)> = scored
            .iter()
            .map(|&i| {
                let mut w = words.to_vec();
                w[i].clear();
                target.item(&render(target.text, &target.spans, &w))
            })
            .collect();
        let probs = self.probabilities(&deleted)?;
        result.queries += deleted.len();
        let p_clean = result.original_probabilities[label];
        let mut order: Vec<(f32, usize)> =
            scored.iter().zip(&probs).map(|(&i, p)| (p_clean - p[label], i)).collect();
        order.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        Ok(order.into_iter().map(|(_, i)| i).collect())
    }

    /// Steps 2-4: in `order`, replace each word by the candidate that flips the prediction (then
    /// stop) or else lowers `P_label` most, until the word or query budget runs out.
    fn substitute_greedily(
        &self,
        target: &Target,
        mut words: Vec<String>,
        order: Vec<usize>,
        result: &mut AttackResult,
    ) -> Result<(), Error> {
        let label = result.label;
        let max_words = (self.config.max_perturb_ratio * result.num_words as f64).ceil() as usize;
        let mut current = result.original_probabilities.clone();
        for i in order {
            if result.substitutions.len() >= max_words || self.budget(result.queries) == 0 {
                break;
            }
            let before = words[i].clone();
            let mut candidates = self.candidates(&before);
            // Best-first, so a cut keeps the closest candidates.
            candidates.truncate(self.budget(result.queries));
            if candidates.is_empty() {
                continue;
            }
            let texts: Vec<String> = candidates
                .iter()
                .map(|(c, _)| {
                    let mut w = words.clone();
                    w[i] = c.clone();
                    render(target.text, &target.spans, &w)
                })
                .collect();
            let items: Vec<_> = texts.iter().map(|t| target.item(t)).collect();
            let probs = self.probabilities(&items)?;
            result.queries += items.len();
            let flip = probs.iter().position(|p| argmax(p) != label);
            let pick = flip.or_else(|| {
                let (j, p) =
                    probs.iter().enumerate().min_by(|a, b| a.1[label].total_cmp(&b.1[label]))?;
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
        result.status = if result.adversarial_prediction != label {
            AttackStatus::Succeeded
        } else {
            AttackStatus::Failed
        };
        result.adversarial_probabilities = current;
        Ok(())
    }

    /// The `k` nearest neighbours of `word` with cosine >= `min_cosine`, closest first, in
    /// `word`'s case.
    fn candidates(&self, word: &str) -> Vec<(String, f32)> {
        self.neighbours
            .neighbours(word, self.config.k)
            .into_iter()
            .filter(|(_, cos)| *cos >= self.config.min_cosine)
            .map(|(w, cos)| (match_case(word, &w), cos))
            .collect()
    }

    /// Class probabilities of each input, in batches of `batch_size`.
    pub fn probabilities(
        &self,
        items: &[(String, Option<String>)],
    ) -> Result<Vec<Vec<f32>>, Error> {
        classify::probabilities(
            self.model,
            self.tokenizer,
            items,
            self.config.max_len,
            self.config.batch_size,
        )
    }
}

/// The text an attack perturbs, its words, and the other text of a pair.
struct Target<'e> {
    example: &'e Example,
    field: PairField,
    text: &'e str,
    context: Option<&'e str>,
    spans: Vec<WordSpan>,
}

impl<'e> Target<'e> {
    /// A single sentence's text; of a pair, the text `pair_field` names.
    fn new(example: &'e Example, pair_field: PairField) -> Self {
        let field = match (&example.text_b, pair_field) {
            (Some(_), PairField::TextB) => PairField::TextB,
            _ => PairField::TextA,
        };
        let (text, context) = match (field, &example.text_b) {
            (PairField::TextB, Some(b)) => (b.as_str(), Some(example.text_a.as_str())),
            _ => (example.text_a.as_str(), example.text_b.as_deref()),
        };
        Self { example, field, text, context, spans: word_spans(text) }
    }

    /// The model input for a version of the attacked text.
    fn item(&self, attacked: &str) -> (String, Option<String>) {
        match self.field {
            PairField::TextA => (attacked.to_string(), self.context.map(str::to_string)),
            PairField::TextB => (self.example.text_a.clone(), Some(attacked.to_string())),
        }
    }
}

/// `text` with each word's core replaced by `words[i]` (punctuation and spacing kept).
pub(super) fn render(text: &str, spans: &[WordSpan], words: &[String]) -> String {
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
