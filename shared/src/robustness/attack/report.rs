//! What an attack reports: each example's result and TextAttack's summary of them.

use serde::{Deserialize, Serialize};

use super::PairField;

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
        let (succeeded, failed, skipped) = (
            count(AttackStatus::Succeeded),
            count(AttackStatus::Failed),
            count(AttackStatus::Skipped),
        );
        let total = results.len();
        let pct = |num: usize, den: usize| (den > 0).then(|| 100.0 * num as f64 / den as f64);
        let mean =
            |xs: Vec<f64>| (!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64);
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
            avg_perturbed_word_pct: of(
                |r| r.status == AttackStatus::Succeeded,
                AttackResult::perturbed_word_pct,
            ),
            avg_num_words: of(|_| true, |r| r.num_words as f64),
            avg_queries: of(|r| r.status != AttackStatus::Skipped, |r| r.queries as f64),
        }
    }
}
