//! Model cards and web bundles: a fine-tuned classifier packed for the browser.
//!
//! ```text
//! NAME/
//!   config.json              HF BertConfig
//!   tokenizer.json           HF tokenizers
//!   model.int8.safetensors   int8 weights (see [`crate::io::quantize`])
//!   imbert.json              ModelCard: task, labels, connection, provenance, metrics
//! ```
//!
//! [`WebBundle::from_bytes`] takes the four files as bytes, so the browser fetches them however
//! it likes and Rust never touches the network.

use std::collections::BTreeMap;
use std::path::Path;

use burn::tensor::backend::Backend;
use serde::{Deserialize, Serialize};

use crate::io::checkpoint::{self, LoadReport};
use crate::io::quantize::{dequantize_safetensors, WEB_WEIGHTS_FILE};
use crate::io::tensor_file::HostTensor;
use crate::model::config::Architecture;
use crate::{BertClassifier, BertConfig, BertTokenizer, ConnectionSpec, Error};

/// The model card's file name, next to the weights (finetune's `best/`, a bundle).
pub const CARD_FILE: &str = "imbert.json";

/// One model of the demo site's `models/index.json`: written by `trainer export --web --site`,
/// read by the web page. `labels`, `bytes` and `metrics` default, so older indexes still parse.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IndexEntry {
    pub id: String,
    /// The bundle's folder relative to the index, with a trailing slash.
    pub path: String,
    pub task: String,
    /// The connection it was trained with, as a spec (`bert`, `im:T=5,gamma=0.1,layers=3-5`).
    pub connection: String,
    /// The model family (`bert`, `roberta`), which names the page's parts (EX-RoBERTa); indexes
    /// written before it was recorded hold BERT models.
    #[serde(default)]
    pub architecture: Architecture,
    #[serde(default)]
    pub labels: Vec<String>,
    /// Total size of the bundle's files (what the browser downloads; the cache key).
    #[serde(default)]
    pub bytes: u64,
    /// Accuracies from the model card (`validation`, `glue_dev/TASK`, `advglue/TASK`, ...).
    #[serde(default)]
    pub metrics: BTreeMap<String, f64>,
    /// From the model card: near chance on clean data.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub did_not_learn: bool,
    /// From the model card: exported with a classifier head that was never trained.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub untrained: bool,
}

impl IndexEntry {
    /// The card's accuracies for people, clean ones first: a robustness number never appears
    /// without the clean accuracy beside it.
    pub fn metrics_summary(&self) -> String {
        let pct = |k: &str| self.metrics.get(k).map(|v| format!("{:.1}%", 100.0 * v));
        let task = &self.task;
        let mut parts = Vec::new();
        if let Some(v) = pct("validation") {
            parts.push(format!("validation {v}"));
        }
        if let Some(v) = pct(&format!("glue_dev/{task}")) {
            parts.push(format!("GLUE dev {v}"));
        }
        if let Some(v) = pct(&format!("advglue/{task}")) {
            let clean = pct(&format!("advglue/{task}/clean_original"))
                .map(|c| format!(" (their clean originals {c})"))
                .unwrap_or_default();
            parts.push(format!("AdvGLUE {v}{clean}"));
        }
        if parts.is_empty() {
            "no accuracy recorded".into()
        } else {
            parts.join(" · ")
        }
    }
}

/// `imbert.json`: what a model is and how it was made. Every field but `task` has a default, so
/// cards written by older versions still parse.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelCard {
    /// Short id (`bert-sst2`); empty in a run's own `best/`.
    #[serde(default)]
    pub name: String,
    /// GLUE task name (`sst2`, `mnli`, `rte`, ...).
    pub task: String,
    /// Label names in class order: logit `i` is `labels[i]`.
    #[serde(default)]
    pub labels: Vec<String>,
    /// Connection spec, as [`ConnectionSpec::to_spec_string`] writes it.
    #[serde(default = "default_connection")]
    pub connection: String,
    /// The pretrained model the run warm-started from.
    #[serde(default)]
    pub trained_from: String,
    /// The command line that trained it.
    #[serde(default)]
    pub command: String,
    /// Which checkpoint of the run (`best`: lowest validation loss, `final`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<String>,
    /// Named accuracies in [0, 1]. Keys: `validation` (the run's held-out split of GLUE train),
    /// `glue_dev/<split>` (clean), `advglue/<split>` (adversarial) and
    /// `advglue/<split>/clean_original` (the same items before perturbation).
    #[serde(default)]
    pub metrics: BTreeMap<String, f64>,
    /// True when `trainer eval` flagged the model as near chance on clean data: its AdvGLUE
    /// numbers are then no evidence of robustness.
    #[serde(default, skip_serializing_if = "is_false")]
    pub did_not_learn: bool,
    /// How the weights were compressed (bundles only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quantization: Option<Quantization>,
    /// The classifier head was never trained (exported with `--allow-untrained`): its outputs
    /// mean nothing.
    #[serde(default, skip_serializing_if = "is_false")]
    pub untrained: bool,
    /// The full run configuration (finetune's `RunConfig`), when known.
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub config: serde_json::Value,
}

fn default_connection() -> String {
    "bert".into()
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// The `quantization` block of a bundle's card.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Quantization {
    /// [`crate::io::quantize::SCHEME`].
    pub scheme: String,
    /// Size of `model.int8.safetensors`.
    pub bytes: u64,
    /// Size of the same weights in f32.
    #[serde(default)]
    pub f32_bytes: u64,
    /// Largest |w - dequantized w| over all weights.
    pub max_abs_error: f32,
}

impl ModelCard {
    /// A card for `task` with nothing else known.
    pub fn new(task: &str, labels: Vec<String>, connection: &ConnectionSpec) -> Self {
        Self {
            name: String::new(),
            task: task.to_string(),
            labels,
            connection: connection.to_spec_string(),
            trained_from: String::new(),
            command: String::new(),
            checkpoint: None,
            metrics: BTreeMap::new(),
            did_not_learn: false,
            quantization: None,
            untrained: false,
            config: serde_json::Value::Null,
        }
    }

    pub fn from_json_bytes(bytes: &[u8], origin: &str) -> Result<Self, Error> {
        serde_json::from_slice(bytes).map_err(|e| Error::Json {
            path: origin.into(),
            line: e.line(),
            message: e.to_string(),
        })
    }

    /// `DIR/imbert.json`, or `None` when there is none.
    pub fn read(dir: &Path) -> Result<Option<Self>, Error> {
        let path = dir.join(CARD_FILE);
        if !path.exists() {
            return Ok(None);
        }
        let bytes = std::fs::read(&path).map_err(|e| Error::Io { path: path.clone(), cause: e })?;
        Self::from_json_bytes(&bytes, &path.display().to_string()).map(Some)
    }

    pub fn to_json(&self) -> Result<String, Error> {
        serde_json::to_string_pretty(self).map_err(|e| Error::Input(e.to_string()))
    }

    /// The parsed connection.
    pub fn connection_spec(&self) -> Result<ConnectionSpec, Error> {
        ConnectionSpec::parse(&self.connection)
    }
}

/// A classifier ready for the browser: config, tokenizer, f32 weights (dequantized) and card.
pub struct WebBundle {
    pub config: BertConfig,
    pub tokenizer: BertTokenizer,
    /// HF names and layout, as [`checkpoint::load_from_tensors`] takes them.
    pub tensors: BTreeMap<String, HostTensor>,
    pub card: ModelCard,
}

impl WebBundle {
    /// A bundle from the bytes of its four files. Checks that they fit together (vocabulary,
    /// number of labels, connection layers) before any model is built.
    pub fn from_bytes(
        config_json: &[u8],
        tokenizer_json: &[u8],
        weights: &[u8],
        card_json: &[u8],
    ) -> Result<Self, Error> {
        let config: BertConfig = serde_json::from_slice(config_json).map_err(|e| Error::Json {
            path: "config.json".into(),
            line: e.line(),
            message: e.to_string(),
        })?;
        config
            .validate()
            .map_err(|message| Error::Config { path: "config.json".into(), message })?;
        let tokenizer = BertTokenizer::from_json_bytes(tokenizer_json).map_err(|e| match e {
            Error::Tokenizer(message) => Error::Tokenizer(format!("tokenizer.json: {message}")),
            other => other,
        })?;
        tokenizer.check_compatible(&config)?;
        let card = ModelCard::from_json_bytes(card_json, CARD_FILE)?;
        card.connection_spec()?.per_layer(config.num_hidden_layers)?;
        let tensors = dequantize_safetensors(weights, WEB_WEIGHTS_FILE)?;
        let head_weight = head_weight_name(&config);
        let head = tensors.get(&head_weight).map(|t| t.shape.first().copied().unwrap_or(0));
        match head {
            None => {
                return Err(Error::MissingTensor {
                    key: head_weight,
                    path: WEB_WEIGHTS_FILE.into(),
                });
            }
            Some(rows) if !card.labels.is_empty() && rows != card.labels.len() => {
                return Err(Error::Input(format!(
                    "{WEB_WEIGHTS_FILE}: the classifier has {rows} outputs \
                     but {CARD_FILE} names {} labels",
                    card.labels.len()
                )));
            }
            Some(_) => {}
        }
        Ok(Self { config, tokenizer, tensors, card })
    }

    /// A bundle directory on disk (native convenience; the browser uses `from_bytes`).
    pub fn from_dir(dir: &Path) -> Result<Self, Error> {
        let read = |name: &str| {
            let path = dir.join(name);
            std::fs::read(&path).map_err(|e| Error::Io { path, cause: e })
        };
        Self::from_bytes(
            &read("config.json")?,
            &read("tokenizer.json")?,
            &read(WEB_WEIGHTS_FILE)?,
            &read(CARD_FILE)?,
        )
    }

    /// Number of classes.
    pub fn num_labels(&self) -> usize {
        self.tensors.get(&head_weight_name(&self.config)).map_or(0, |t| t.shape[0])
    }

    /// The classifier with the card's connection. (Weights are copied, so the bundle can build
    /// models on several devices.)
    pub fn classifier<B: Backend>(&self, device: &B::Device) -> Result<BertClassifier<B>, Error> {
        let file = Path::new(WEB_WEIGHTS_FILE);
        let model = checkpoint::load_complete_from_tensors::<B>(
            &self.config,
            self.tensors.clone(),
            file,
            device,
        )?;
        model.with_connections(&self.card.connection_spec()?)
    }
}

/// The HF name of the classifier's output weight (`classifier.weight`, RoBERTa's
/// `classifier.out_proj.weight`).
fn head_weight_name(config: &BertConfig) -> String {
    format!("{}.weight", config.architecture().head_names().1)
}

/// Loads a model directory for evaluation: a web bundle (`model.int8.safetensors`, dequantized)
/// or an HF directory. `num_labels` as in [`checkpoint::load_classifier`].
pub fn load_model_dir<B: Backend>(
    dir: &Path,
    num_labels: Option<usize>,
    device: &B::Device,
) -> Result<(BertClassifier<B>, LoadReport), Error> {
    let int8 = dir.join(WEB_WEIGHTS_FILE);
    if !int8.exists() {
        return checkpoint::load_classifier(dir, num_labels, device);
    }
    let config = BertConfig::from_file(&dir.join("config.json"))?;
    let bytes = std::fs::read(&int8).map_err(|e| Error::Io { path: int8.clone(), cause: e })?;
    let tensors = dequantize_safetensors(&bytes, &int8.display().to_string())?;
    checkpoint::load_from_tensors(&config, tensors, num_labels, &int8, device)
}

/// Whether `dir` is a web bundle (has `model.int8.safetensors`).
pub fn is_bundle(dir: &Path) -> bool {
    dir.join(WEB_WEIGHTS_FILE).exists()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::quantize::quantize_to_safetensors;
    use burn::backend::NdArray;

    // In f64, as the other model tests of this binary: burn fixes one default dtype per device
    // for the whole process, and f32 and f64 share the CPU device.
    type B = NdArray<f64>;

    #[test]
    fn old_cards_still_parse() {
        let old = concat!(
            r#"{"task":"sst2","labels":["negative","positive"],"#,
            r#""connection":"im:T=5,gamma=0.1,layers=3-5","#,
            "\n            ",
            r#""checkpoint":"best","trained_from":"models/x","command":"trainer finetune","#,
            r#""config":{"seed":0}}"#,
        )
        .as_bytes();
        let card = ModelCard::from_json_bytes(old, "imbert.json").unwrap();
        assert_eq!(card.connection, "im:T=5,gamma=0.1,layers=3-5");
        assert_eq!(card.checkpoint.as_deref(), Some("best"));
        assert!(card.metrics.is_empty() && !card.untrained && card.quantization.is_none());
        let minimal = ModelCard::from_json_bytes(br#"{"task":"rte"}"#, "imbert.json").unwrap();
        assert_eq!(minimal.connection, "bert");
        // Written and read back unchanged; the old field names are still there.
        let json = card.to_json().unwrap();
        assert_eq!(ModelCard::from_json_bytes(json.as_bytes(), "x").unwrap(), card);
        let value: serde_json::Value = serde_json::from_str(&json).unwrap();
        for key in
            ["task", "labels", "connection", "checkpoint", "trained_from", "command", "config"]
        {
            assert!(value.get(key).is_some(), "{key} missing from {json}");
        }
        let err = ModelCard::from_json_bytes(b"{\"labels\":[]}", "bundle/imbert.json")
            .unwrap_err()
            .to_string();
        assert!(err.contains("bundle/imbert.json") && err.contains("task"), "{err}");
    }

    /// A bundle's four files and the model they hold.
    type BundleFiles = (Vec<u8>, Vec<u8>, Vec<u8>, Vec<u8>, BertClassifier<B>);

    /// A tiny random classifier as a bundle's four files.
    fn tiny_bundle_files(connection: &str, labels: usize) -> BundleFiles {
        let device = Default::default();
        let mut config = BertConfig::tiny();
        config.vocab_size = 16;
        let model = BertClassifier::<B>::new(&config, 3, &device);
        let tensors: BTreeMap<String, HostTensor> = checkpoint::hf_parameters(&model)
            .into_iter()
            .map(|p| (p.name.clone(), p.to_host(&p.tensor).unwrap()))
            .collect();
        let (weights, _) = quantize_to_safetensors(&tensors).unwrap();
        let vocab =
            ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "good", "bad", "film", "movie"];
        // One file per call: the tests run in parallel, and each removes its file.
        static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let vocab_path = std::env::temp_dir()
            .join(format!("imbert-bundle-vocab-{}-{call}.txt", std::process::id()));
        std::fs::write(&vocab_path, vocab.join("\n")).unwrap();
        let tokenizer = BertTokenizer::from_vocab_file(&vocab_path, true).unwrap();
        let _ = std::fs::remove_file(&vocab_path);
        let tokenizer_json = tokenizer.inner().to_string(false).unwrap().into_bytes();
        let spec = ConnectionSpec::parse(connection).unwrap();
        let card = ModelCard::new("mnli", (0..labels).map(|i| format!("l{i}")).collect(), &spec);
        let config_json = serde_json::to_vec(&config).unwrap();
        (config_json, tokenizer_json, weights, card.to_json().unwrap().into_bytes(), model)
    }

    #[test]
    fn a_bundle_builds_the_model_it_was_made_from() {
        let (config, tokenizer, weights, card, model) =
            tiny_bundle_files("im:T=2,gamma=0.1,layers=1-1", 3);
        let bundle = WebBundle::from_bytes(&config, &tokenizer, &weights, &card).unwrap();
        assert_eq!(bundle.num_labels(), 3);
        let device = Default::default();
        let loaded = bundle.classifier::<B>(&device).unwrap();
        assert_eq!(loaded.bert.encoder.connections[0], crate::Connection::Monotone);
        assert!(matches!(loaded.bert.encoder.connections[1], crate::Connection::Implicit(_)));
        let batch = bundle
            .tokenizer
            .encode(&[("a good film", None), ("bad movie", Some("a film"))], 16)
            .unwrap();
        let input = batch.to_input::<B>(&device);
        let model = model.with_connections(&bundle.card.connection_spec().unwrap()).unwrap();
        let expected = model.forward(&input, Default::default()).logits.unwrap();
        let got = loaded.forward(&input, Default::default()).logits.unwrap();
        let diff: f64 = (expected - got).abs().max().into_scalar();
        println!("max |logit difference|, full-precision model vs int8 bundle = {diff:.2e}");
        assert!(diff < 1e-2, "{diff}");
    }

    #[test]
    fn mismatched_files_are_refused() {
        let (config, tokenizer, weights, card, _) = tiny_bundle_files("bert", 2);
        let err =
            WebBundle::from_bytes(&config, &tokenizer, &weights, &card).err().unwrap().to_string();
        assert!(err.contains("3 outputs") && err.contains("2 labels"), "{err}");
        let (config, tokenizer, weights, card, _) = tiny_bundle_files("im:layers=0-7", 3);
        assert!(WebBundle::from_bytes(&config, &tokenizer, &weights, &card).is_err());
        let (config, _, weights, card, _) = tiny_bundle_files("bert", 3);
        assert!(WebBundle::from_bytes(&config, b"{}", &weights, &card).is_err());
    }
}
