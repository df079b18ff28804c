//! The attack's settings: its knobs and which text of a pair it perturbs.

use serde::{Deserialize, Serialize};

use crate::io::tokenizer::DEFAULT_MAX_LEN;
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
    /// Checks every setting; the messages name the field and the `trainer attack` flag.
    pub fn validate(&self) -> Result<(), Error> {
        let bad = |m: String| Err(Error::Input(format!("attack config: {m}")));
        if self.k == 0 {
            return bad("k (--k) must be at least 1".into());
        }
        if self.max_queries == 0 {
            return bad("the query budget (--queries) must be at least 1".into());
        }
        if !(self.max_perturb_ratio > 0.0 && self.max_perturb_ratio <= 1.0) {
            return bad(format!(
                "max_perturb_ratio (--max-ratio) {} is not in (0, 1]",
                self.max_perturb_ratio
            ));
        }
        if !(-1.0..=1.0).contains(&self.min_cosine) {
            return bad(format!("min_cosine (--min-cos) {} is not in [-1, 1]", self.min_cosine));
        }
        if self.batch_size == 0 || self.max_len == 0 {
            return bad(
                "batch_size (--batch-size) and max_len (--max-len) must be at least 1".into()
            );
        }
        Ok(())
    }
}
