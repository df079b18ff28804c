//! `BertConfig`: the HF `config.json` of a BERT or RoBERTa model, as data.
//!
//! Field names and meanings follow transformers' `BertConfig` (RoBERTa's `config.json` has the
//! same fields); `Default` is bert-base-uncased, so a `config.json` that leaves a field out gets
//! the value HF would use. `model_type` picks the [`Architecture`].

use serde::{Deserialize, Serialize};
use std::path::Path;

use crate::Error;

/// Bounds on `config.json`'s sizes, far above any BERT (bert-large: vocabulary 30522, width
/// 1024, 24 layers; multilingual vocabularies reach 250k).
const MAX_VOCAB: usize = 1 << 22;
const MAX_WIDTH: usize = 1 << 14;
const MAX_LAYERS: usize = 256;
const MAX_POSITIONS: usize = 1 << 20;
const MAX_TYPES: usize = 1 << 10;
/// The most classes a classification head may have (also bounds `--num-labels`).
pub const MAX_LABELS: usize = 1 << 16;

/// The two model families with BERT's layer: they differ only in the embeddings' position ids,
/// the classification head and the HF weight names, so one model type serves both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Architecture {
    /// HF `BertForSequenceClassification`: pooler (dense + tanh on [CLS]), then the classifier.
    #[default]
    Bert,
    /// HF `RobertaForSequenceClassification`: position ids count from `pad_token_id + 1` and
    /// skip padding; one token type; the head is dense + tanh + out_proj on `<s>`, no pooler.
    Roberta,
}

impl Architecture {
    /// The family's name for people: `BERT`, `RoBERTa` (the demo's EX-RoBERTa and IM-RoBERTa).
    pub fn family(self) -> &'static str {
        match self {
            Self::Bert => "BERT",
            Self::Roberta => "RoBERTa",
        }
    }

    /// The prefix of the encoder's HF weight names.
    pub fn prefix(self) -> &'static str {
        match self {
            Self::Bert => "bert",
            Self::Roberta => "roberta",
        }
    }

    /// HF names of the head's two Linears: the dense layer before tanh, and the output layer.
    pub fn head_names(self) -> (&'static str, &'static str) {
        match self {
            Self::Bert => ("bert.pooler.dense", "classifier"),
            Self::Roberta => ("classifier.dense", "classifier.out_proj"),
        }
    }

    /// HF's class name for the model, with or without a classification head.
    pub fn class_name(self, with_head: bool) -> &'static str {
        match (self, with_head) {
            (Self::Bert, true) => "BertForSequenceClassification",
            (Self::Bert, false) => "BertModel",
            (Self::Roberta, true) => "RobertaForSequenceClassification",
            (Self::Roberta, false) => "RobertaModel",
        }
    }

    /// How many positions come before the first token's: RoBERTa numbers tokens from
    /// `pad_token_id + 1` (HF's `create_position_ids_from_input_ids`), BERT from 0.
    pub fn position_offset(self, pad_token_id: usize) -> usize {
        match self {
            Self::Bert => 0,
            Self::Roberta => pad_token_id + 1,
        }
    }
}

/// Hyper-parameters of a BERT encoder and its classification head, read from `config.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct BertConfig {
    /// Size of the WordPiece vocabulary.
    pub vocab_size: usize,
    /// Width of every hidden state (`H`).
    pub hidden_size: usize,
    /// Number of encoder layers (`L`), each one a `phi_t`.
    pub num_hidden_layers: usize,
    /// Attention heads per layer; `hidden_size` must be a multiple of it.
    pub num_attention_heads: usize,
    /// Width of the feed-forward block.
    pub intermediate_size: usize,
    /// Activation of the feed-forward block; only the exact (erf) GELU is supported.
    pub hidden_act: String,
    /// Dropout on embeddings, attention output, feed-forward output and the classifier input.
    pub hidden_dropout_prob: f64,
    /// Dropout on the attention probabilities.
    pub attention_probs_dropout_prob: f64,
    /// Longest sequence the position embeddings cover.
    pub max_position_embeddings: usize,
    /// Number of segment (token type) embeddings.
    pub type_vocab_size: usize,
    /// Standard deviation of the truncated-normal initialiser for fresh weights.
    pub initializer_range: f64,
    /// Epsilon of every LayerNorm.
    pub layer_norm_eps: f64,
    /// Id of the padding token.
    pub pad_token_id: usize,
    /// Dropout before the classifier; `None` means `hidden_dropout_prob` (HF's rule).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub classifier_dropout: Option<f64>,
    /// Label names by class index; its length is the number of classes of the head.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id2label: Option<std::collections::BTreeMap<String, String>>,
    /// HF model type: "bert" or "roberta" (see [`Architecture`]).
    pub model_type: String,
    /// HF architectures list; we write `BertForSequenceClassification` when a head exists.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub architectures: Vec<String>,
    /// Everything else in `config.json`, kept so that a saved config round-trips.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

impl Default for BertConfig {
    fn default() -> Self {
        Self {
            vocab_size: 30522,
            hidden_size: 768,
            num_hidden_layers: 12,
            num_attention_heads: 12,
            intermediate_size: 3072,
            hidden_act: "gelu".into(),
            hidden_dropout_prob: 0.1,
            attention_probs_dropout_prob: 0.1,
            max_position_embeddings: 512,
            type_vocab_size: 2,
            initializer_range: 0.02,
            layer_norm_eps: 1e-12,
            pad_token_id: 0,
            classifier_dropout: None,
            id2label: None,
            model_type: "bert".into(),
            architectures: Vec::new(),
            extra: serde_json::Map::new(),
        }
    }
}

impl BertConfig {
    /// Reads and validates `config.json`.
    pub fn from_file(path: &Path) -> Result<Self, Error> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        let config: Self = serde_json::from_str(&text).map_err(|e| Error::Json {
            path: path.into(),
            line: e.line(),
            message: e.to_string(),
        })?;
        config.validate().map_err(|message| Error::Config { path: path.into(), message })?;
        Ok(config)
    }

    /// Checks the invariants the model relies on, and every size against bounds no BERT comes
    /// near, before anything is allocated for it (a `vocab_size` of 1e12 would otherwise abort
    /// the process asking for petabytes).
    pub fn validate(&self) -> Result<(), String> {
        self.try_architecture()?;
        for (name, value, max) in [
            ("vocab_size", self.vocab_size, MAX_VOCAB),
            ("hidden_size", self.hidden_size, MAX_WIDTH),
            ("num_hidden_layers", self.num_hidden_layers, MAX_LAYERS),
            ("num_attention_heads", self.num_attention_heads, MAX_WIDTH),
            ("intermediate_size", self.intermediate_size, 4 * MAX_WIDTH),
            ("max_position_embeddings", self.max_position_embeddings, MAX_POSITIONS),
            ("type_vocab_size", self.type_vocab_size, MAX_TYPES),
        ] {
            if !(1..=max).contains(&value) {
                return Err(format!("{name} = {value} is outside 1..={max}"));
            }
        }
        if self.pad_token_id >= self.vocab_size {
            return Err(format!(
                "pad_token_id = {} is not below vocab_size = {}",
                self.pad_token_id, self.vocab_size
            ));
        }
        let offset = self.architecture().position_offset(self.pad_token_id);
        if offset >= self.max_position_embeddings {
            return Err(format!(
                "max_position_embeddings = {} leaves no position after the first {offset} \
                 (RoBERTa numbers tokens from pad_token_id + 1)",
                self.max_position_embeddings
            ));
        }
        if let Some(labels) = &self.id2label {
            if labels.len() > MAX_LABELS {
                return Err(format!(
                    "id2label has {} labels, more than {MAX_LABELS}",
                    labels.len()
                ));
            }
        }
        for (name, value) in
            [("layer_norm_eps", self.layer_norm_eps), ("initializer_range", self.initializer_range)]
        {
            if !(value.is_finite() && value > 0.0) {
                return Err(format!("{name} = {value} must be a finite number > 0"));
            }
        }
        if !self.hidden_size.is_multiple_of(self.num_attention_heads) {
            return Err(format!(
                "hidden_size {} is not a multiple of num_attention_heads {}",
                self.hidden_size, self.num_attention_heads
            ));
        }
        if !matches!(self.hidden_act.as_str(), "gelu" | "gelu_python") {
            return Err(format!(
                "hidden_act {:?} is not supported (only the exact erf GELU, \"gelu\")",
                self.hidden_act
            ));
        }
        for (name, p) in [
            ("hidden_dropout_prob", self.hidden_dropout_prob),
            ("attention_probs_dropout_prob", self.attention_probs_dropout_prob),
            ("classifier_dropout", self.classifier_dropout.unwrap_or(0.0)),
        ] {
            if !(0.0..1.0).contains(&p) {
                return Err(format!("{name} = {p} is outside [0, 1)"));
            }
        }
        Ok(())
    }

    /// The family `model_type` names. Call on a validated config (`from_file` validates).
    pub fn architecture(&self) -> Architecture {
        self.try_architecture().unwrap_or(Architecture::Bert)
    }

    fn try_architecture(&self) -> Result<Architecture, String> {
        match self.model_type.as_str() {
            "bert" => Ok(Architecture::Bert),
            "roberta" => Ok(Architecture::Roberta),
            other => {
                Err(format!("model_type {other:?} is not supported (\"bert\" or \"roberta\")"))
            }
        }
    }

    /// Width of one attention head.
    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.num_attention_heads
    }

    /// Dropout applied to the pooled output before the classifier.
    pub fn classifier_dropout_prob(&self) -> f64 {
        self.classifier_dropout.unwrap_or(self.hidden_dropout_prob)
    }

    /// Number of classes named in `id2label`, if any.
    pub fn num_labels(&self) -> Option<usize> {
        self.id2label.as_ref().map(|m| m.len())
    }

    /// Label names in class order (`LABEL_i` where `id2label` has a gap).
    pub fn label_names(&self, num_labels: usize) -> Vec<String> {
        (0..num_labels)
            .map(|i| {
                self.id2label
                    .as_ref()
                    .and_then(|m| m.get(&i.to_string()).cloned())
                    .unwrap_or_else(|| format!("LABEL_{i}"))
            })
            .collect()
    }

    /// A small configuration for tests and examples: same structure, tiny sizes.
    pub fn tiny() -> Self {
        Self {
            vocab_size: 100,
            hidden_size: 16,
            num_hidden_layers: 2,
            num_attention_heads: 2,
            intermediate_size: 32,
            max_position_embeddings: 32,
            ..Self::default()
        }
    }

    /// `tiny()` as RoBERTa: positions offset past `<pad>` (id 1), one token type.
    pub fn tiny_roberta() -> Self {
        Self {
            model_type: "roberta".into(),
            pad_token_id: 1,
            type_vocab_size: 1,
            max_position_embeddings: 34,
            layer_norm_eps: 1e-5,
            ..Self::tiny()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_bert_base() {
        let c = BertConfig::default();
        assert_eq!((c.hidden_size, c.num_hidden_layers, c.num_attention_heads), (768, 12, 12));
        assert_eq!(c.head_dim(), 64);
    }

    #[test]
    fn missing_fields_take_defaults_and_extras_round_trip() {
        let c: BertConfig =
            serde_json::from_str(r#"{"hidden_size": 384, "num_attention_heads": 12, "foo": 1}"#)
                .unwrap();
        assert_eq!(c.intermediate_size, 3072);
        assert_eq!(c.extra["foo"], 1);
        let back: serde_json::Value = serde_json::to_value(&c).unwrap();
        assert_eq!(back["foo"], 1);
    }

    #[test]
    fn sizes_no_bert_has_are_refused_by_name() {
        let cases = [
            (BertConfig { intermediate_size: 0, ..BertConfig::tiny() }, "intermediate_size = 0"),
            (BertConfig { vocab_size: 1_000_000_000_000, ..BertConfig::tiny() }, "vocab_size"),
            (BertConfig { num_hidden_layers: 0, ..BertConfig::tiny() }, "num_hidden_layers = 0"),
            (BertConfig { pad_token_id: 100, ..BertConfig::tiny() }, "pad_token_id"),
            (BertConfig { layer_norm_eps: f64::NAN, ..BertConfig::tiny() }, "layer_norm_eps"),
            (
                BertConfig { classifier_dropout: Some(1.0), ..BertConfig::tiny() },
                "classifier_dropout",
            ),
            (BertConfig { model_type: "gpt2".into(), ..BertConfig::tiny() }, "model_type \"gpt2\""),
            (
                BertConfig { max_position_embeddings: 2, ..BertConfig::tiny_roberta() },
                "max_position_embeddings = 2",
            ),
        ];
        for (config, needle) in cases {
            let message = config.validate().unwrap_err();
            assert!(message.contains(needle), "{needle}: {message}");
        }
        assert!(BertConfig::tiny().validate().is_ok());
        assert!(BertConfig::tiny_roberta().validate().is_ok());
        assert!(BertConfig::default().validate().is_ok());
    }

    #[test]
    fn bad_head_count_is_rejected() {
        let c = BertConfig { hidden_size: 10, num_attention_heads: 3, ..BertConfig::default() };
        assert!(c.validate().unwrap_err().contains("multiple"));
    }
}
