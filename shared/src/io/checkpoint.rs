//! HF checkpoints in and out: `config.json` + `model.safetensors` (or `pytorch_model.bin`) +
//! tokenizer files.
//!
//! Our module paths mirror HF's, so the name map is short: optional `bert.` (`roberta.`) prefix,
//! HF's `LayerNorm` (old checkpoints: `gamma`/`beta`), RoBERTa's head names
//! (`config::Architecture::head_names`), and PyTorch's `[out, in]` Linear weights, which burn
//! stores as `[in, out]`. A directory we write loads in transformers as
//! `BertForSequenceClassification` (or `RobertaForSequenceClassification`), and the reverse.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use burn::module::Param;
use burn::nn::{Embedding, LayerNorm, Linear};
use burn::tensor::backend::Backend;
use burn::tensor::Tensor;

use crate::io::atomic::{replace_dir, sibling};
use crate::io::tensor_file::{read_pytorch_bin, read_safetensors, write_safetensors, HostTensor};
use crate::model::bert::hf_init_linear;
use crate::model::config::{BertConfig, MAX_LABELS};
use crate::model::BertClassifier;
use crate::Error;

/// Files copied next to the weights when saving, so the directory is a complete HF model.
pub const TOKENIZER_FILES: [&str; 6] = [
    "tokenizer.json",
    "vocab.txt",
    "vocab.json",
    "merges.txt",
    "tokenizer_config.json",
    "special_tokens_map.json",
];

/// What loading did beyond a one-to-one copy.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LoadReport {
    /// Parameters absent from the checkpoint and initialised fresh (e.g. a new classifier).
    pub initialized_fresh: Vec<String>,
    /// Checkpoint tensors the model does not use (e.g. an MLM head).
    pub unused: Vec<String>,
    /// The weights file that was read.
    pub weights_file: PathBuf,
}

/// The weights file of an HF directory: `model.safetensors`, else `pytorch_model.bin`.
pub fn weights_file(dir: &Path) -> Result<PathBuf, Error> {
    check_model_dir(dir)?;
    ["model.safetensors", "pytorch_model.bin"]
        .iter()
        .map(|f| dir.join(f))
        .find(|p| p.exists())
        .ok_or_else(|| Error::Checkpoint {
            path: dir.into(),
            message: "neither model.safetensors nor pytorch_model.bin found".into(),
        })
}

/// Loads an HF BERT directory. `num_labels`: the head to build (`None`: the checkpoint's own head,
/// or none). A missing classifier or pooler is initialised fresh and reported.
pub fn load_classifier<B: Backend>(
    dir: &Path,
    num_labels: Option<usize>,
    device: &B::Device,
) -> Result<(BertClassifier<B>, LoadReport), Error> {
    let (config, tensors, file) = read_dir(dir)?;
    load_from_tensors(&config, tensors, num_labels, &file, device)
}

/// Loads an HF BERT directory as the warm start of a `num_labels`-class task: a checkpoint head
/// of another size is dropped and initialised fresh (reported), like transformers'
/// `ignore_mismatched_sizes=True`.
pub fn load_for_task<B: Backend>(
    dir: &Path,
    num_labels: usize,
    device: &B::Device,
) -> Result<(BertClassifier<B>, LoadReport), Error> {
    let (config, mut tensors, file) = read_dir(dir)?;
    let (_, out) = config.architecture().head_names();
    let head = [format!("{out}.weight"), format!("{out}.bias")];
    if tensors.get(&head[0]).is_some_and(|t| t.shape.first() != Some(&num_labels)) {
        for k in &head {
            tensors.remove(k);
        }
    }
    load_from_tensors(&config, tensors, Some(num_labels), &file, device)
}

/// Fails unless `dir` is a directory: a missing or mistyped model path is reported as such, not
/// as the first file found missing inside it.
pub fn check_model_dir(dir: &Path) -> Result<(), Error> {
    let message = if !dir.exists() {
        "model directory not found"
    } else if !dir.is_dir() {
        "is a file; a model is a directory (config.json, model.safetensors, vocab.txt)"
    } else {
        return Ok(());
    };
    Err(Error::Checkpoint { path: dir.into(), message: message.into() })
}

fn read_dir(dir: &Path) -> Result<(BertConfig, BTreeMap<String, HostTensor>, PathBuf), Error> {
    check_model_dir(dir)?;
    let config = BertConfig::from_file(&dir.join("config.json"))?;
    let file = weights_file(dir)?;
    let tensors = if file.extension().is_some_and(|e| e == "safetensors") {
        read_safetensors(&file)?
    } else {
        read_pytorch_bin(&file)?
    };
    Ok((config, tensors, file))
}

/// Builds a model from named host tensors in HF layout. What the tensors lack is initialised
/// fresh (HF's init) and listed in the report.
pub fn load_from_tensors<B: Backend>(
    config: &BertConfig,
    tensors: BTreeMap<String, HostTensor>,
    num_labels: Option<usize>,
    file: &Path,
    device: &B::Device,
) -> Result<(BertClassifier<B>, LoadReport), Error> {
    load_into(config, tensors, num_labels, file, device, BertClassifier::new)
}

/// Builds a model from host tensors that hold every parameter, head included (a web bundle);
/// a missing one is an error. No initial value is drawn for the tensors to replace.
pub fn load_complete_from_tensors<B: Backend>(
    config: &BertConfig,
    tensors: BTreeMap<String, HostTensor>,
    file: &Path,
    device: &B::Device,
) -> Result<BertClassifier<B>, Error> {
    let (model, report) = load_into(config, tensors, None, file, device, BertClassifier::unloaded)?;
    match report.initialized_fresh.first() {
        Some(fresh) => {
            Err(Error::MissingTensor { key: format!("{fresh}.weight"), path: file.into() })
        }
        None => Ok(model),
    }
}

fn load_into<B: Backend>(
    config: &BertConfig,
    tensors: BTreeMap<String, HostTensor>,
    num_labels: Option<usize>,
    file: &Path,
    device: &B::Device,
    build: fn(&BertConfig, usize, &B::Device) -> BertClassifier<B>,
) -> Result<(BertClassifier<B>, LoadReport), Error> {
    let architecture = config.architecture();
    let prefix = architecture.prefix();
    let mut source = Source { tensors, used: BTreeSet::new(), file: file.into(), prefix };
    let head_weight = format!("{}.weight", architecture.head_names().1);
    let head_rows = source.find(&head_weight).map(|(_, t)| t.shape[0]);
    let num_labels = num_labels.or(head_rows).or(config.num_labels()).unwrap_or(0);
    if let (Some(rows), true) = (head_rows, num_labels > 0) {
        if rows != num_labels {
            return Err(Error::Shape {
                key: head_weight,
                expected: vec![num_labels, config.hidden_size],
                found: vec![rows, config.hidden_size],
            });
        }
    }
    check_sizes(config, &source)?;
    if num_labels > MAX_LABELS {
        return Err(Error::Config {
            path: file.into(),
            message: format!("{num_labels} labels asked for; a head has at most {MAX_LABELS}"),
        });
    }
    let mut model = build(config, num_labels, device);
    let mut report = LoadReport { weights_file: file.into(), ..LoadReport::default() };
    for (name, slot) in slots(&mut model) {
        let fresh = match slot {
            Slot::Embedding(e) => source.load_embedding(&name, e, device)?,
            Slot::LayerNorm(ln) => source.load_layer_norm(&name, ln, device)?,
            Slot::Linear(lin, optional) => {
                source.load_linear(&name, lin, optional, config.initializer_range, device)?
            }
        };
        if fresh {
            report.initialized_fresh.push(name);
        }
    }
    report.unused = source
        .tensors
        .keys()
        // Buffers, not parameters: HF saves them, and recomputes them on load.
        .filter(|k| !source.used.contains(*k))
        .filter(|k| !k.ends_with("position_ids") && !k.ends_with("embeddings.token_type_ids"))
        .cloned()
        .collect();
    Ok((model, report))
}

/// Saves `model` as an HF `BertForSequenceClassification` (`RobertaForSequenceClassification`)
/// directory, atomically: everything is written to a temporary sibling directory that is renamed
/// into place at the end. Tokenizer files are copied from `tokenizer_dir` when given.
pub fn save_classifier<B: Backend>(
    model: &BertClassifier<B>,
    dir: &Path,
    tokenizer_dir: Option<&Path>,
) -> Result<(), Error> {
    let tmp = sibling(dir, "tmp");
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).map_err(|e| Error::io(&tmp, e))?;
    }
    std::fs::create_dir_all(&tmp).map_err(|e| Error::io(&tmp, e))?;

    let mut config = model.config.clone();
    let num_labels = model.num_labels();
    config.architectures = vec![config.architecture().class_name(num_labels > 0).to_string()];
    if num_labels > 0 {
        let names = config.label_names(num_labels);
        config.id2label =
            Some(names.iter().enumerate().map(|(i, n)| (i.to_string(), n.clone())).collect());
        config.extra.insert(
            "label2id".into(),
            names
                .iter()
                .enumerate()
                .map(|(i, n)| (n.clone(), serde_json::Value::from(i)))
                .collect(),
        );
    }
    let config_path = tmp.join("config.json");
    let json = serde_json::to_string_pretty(&config).map_err(|e| Error::Input(e.to_string()))?;
    std::fs::write(&config_path, json).map_err(|e| Error::io(&config_path, e))?;

    let named = hf_parameters(model)
        .into_iter()
        .map(|p| Ok((p.name.clone(), p.to_host(&p.tensor)?)))
        .collect::<Result<Vec<_>, Error>>()?;
    let weights_path = tmp.join("model.safetensors");
    write_safetensors(&weights_path, &named)?;

    if let Some(src) = tokenizer_dir {
        for f in TOKENIZER_FILES {
            let from = src.join(f);
            if from.exists() {
                std::fs::copy(&from, tmp.join(f)).map_err(|e| Error::io(&from, e))?;
            }
        }
    }
    replace_dir(&tmp, dir)
}

/// A parameter tensor of rank 1 or 2.
#[derive(Debug, Clone)]
pub enum ParamTensor<B: Backend> {
    Vector(Tensor<B, 1>),
    Matrix(Tensor<B, 2>),
}

/// One parameter under its HF name (`bert.encoder.layer.0.attention.self.query.weight`).
#[derive(Debug, Clone)]
pub struct HfParameter<B: Backend> {
    pub name: String,
    /// The model's own tensor (tracked on autodiff backends, so `grad` works on it).
    pub tensor: ParamTensor<B>,
    /// Whether HF stores the transpose (Linear weights: PyTorch `[out, in]`, burn `[in, out]`).
    pub transposed: bool,
}

impl<B: Backend> HfParameter<B> {
    /// `value` (this parameter's tensor, or its gradient) on the host in HF layout.
    pub fn to_host(&self, value: &ParamTensor<B>) -> Result<HostTensor, Error> {
        match value {
            ParamTensor::Vector(t) => HostTensor::from_tensor(t),
            ParamTensor::Matrix(t) if self.transposed => {
                Ok(HostTensor::from_tensor(t)?.transposed())
            }
            ParamTensor::Matrix(t) => HostTensor::from_tensor(t),
        }
    }
}

/// Every parameter of `model` by HF name, in `BertForSequenceClassification` order.
pub fn hf_parameters<B: Backend>(model: &BertClassifier<B>) -> Vec<HfParameter<B>> {
    let mut model = model.clone();
    let mut out = Vec::new();
    let mut push =
        |name: String, tensor, transposed| out.push(HfParameter { name, tensor, transposed });
    for (name, slot) in slots(&mut model) {
        match slot {
            Slot::Embedding(e) => {
                push(format!("{name}.weight"), ParamTensor::Matrix(e.weight.val()), false)
            }
            Slot::LayerNorm(ln) => {
                push(format!("{name}.weight"), ParamTensor::Vector(ln.gamma.val()), false);
                if let Some(beta) = &ln.beta {
                    push(format!("{name}.bias"), ParamTensor::Vector(beta.val()), false);
                }
            }
            Slot::Linear(lin, _) => {
                push(format!("{name}.weight"), ParamTensor::Matrix(lin.weight.val()), true);
                if let Some(bias) = &lin.bias {
                    push(format!("{name}.bias"), ParamTensor::Vector(bias.val()), false);
                }
            }
        }
    }
    out
}

/// Compares config.json's sizes with the weights' shapes before the model is allocated: a
/// config that does not describe these weights is an error naming the field, not an abort.
fn check_sizes(config: &BertConfig, source: &Source) -> Result<(), Error> {
    let h = config.hidden_size;
    let p = source.prefix;
    let tables = [
        ("vocab_size", "embeddings.word_embeddings.weight", config.vocab_size),
        (
            "max_position_embeddings",
            "embeddings.position_embeddings.weight",
            config.max_position_embeddings,
        ),
        ("type_vocab_size", "embeddings.token_type_embeddings.weight", config.type_vocab_size),
        (
            "intermediate_size",
            "encoder.layer.0.intermediate.dense.weight",
            config.intermediate_size,
        ),
    ];
    let mismatch = |message: String| Error::Checkpoint { path: source.file.clone(), message };
    for (field, name, rows) in tables {
        if let Some((key, t)) = source.find(&format!("{p}.{name}")) {
            if t.shape != [rows, h] {
                return Err(mismatch(format!(
                    "config.json's {field} = {rows} and hidden_size = {h} expect `{key}` \
                     shaped {:?}; it is {:?} here",
                    [rows, h],
                    t.shape
                )));
            }
        }
    }
    let layers = (0..config.num_hidden_layers)
        .take_while(|i| {
            source.find(&format!("{p}.encoder.layer.{i}.output.dense.weight")).is_some()
        })
        .count();
    if layers > 0 && layers < config.num_hidden_layers {
        return Err(mismatch(format!(
            "config.json's num_hidden_layers = {} but the weights hold {layers} layers",
            config.num_hidden_layers
        )));
    }
    Ok(())
}

/// A parameter-holding module of the model and its HF name.
enum Slot<'a, B: Backend> {
    Embedding(&'a mut Embedding<B>),
    LayerNorm(&'a mut LayerNorm<B>),
    /// The flag says whether the checkpoint may lack it (pooler, classifier).
    Linear(&'a mut Linear<B>, bool),
}

/// Every module with parameters, by HF name (`BertForSequenceClassification` layout, or
/// `RobertaForSequenceClassification`'s).
fn slots<B: Backend>(model: &mut BertClassifier<B>) -> Vec<(String, Slot<'_, B>)> {
    let architecture = model.config.architecture();
    let prefix = architecture.prefix();
    let (dense_name, out_name) = architecture.head_names();
    let bert = &mut model.bert;
    let e = &mut bert.embeddings;
    let mut out: Vec<(String, Slot<'_, B>)> = vec![
        (format!("{prefix}.embeddings.word_embeddings"), Slot::Embedding(&mut e.word_embeddings)),
        (
            format!("{prefix}.embeddings.position_embeddings"),
            Slot::Embedding(&mut e.position_embeddings),
        ),
        (
            format!("{prefix}.embeddings.token_type_embeddings"),
            Slot::Embedding(&mut e.token_type_embeddings),
        ),
        (format!("{prefix}.embeddings.LayerNorm"), Slot::LayerNorm(&mut e.layer_norm)),
    ];
    for (i, layer) in bert.encoder.layer.iter_mut().enumerate() {
        let p = format!("{prefix}.encoder.layer.{i}");
        let sa = &mut layer.attention.self_attention;
        out.push((format!("{p}.attention.self.query"), Slot::Linear(&mut sa.query, false)));
        out.push((format!("{p}.attention.self.key"), Slot::Linear(&mut sa.key, false)));
        out.push((format!("{p}.attention.self.value"), Slot::Linear(&mut sa.value, false)));
        let ao = &mut layer.attention.output;
        out.push((format!("{p}.attention.output.dense"), Slot::Linear(&mut ao.dense, false)));
        out.push((format!("{p}.attention.output.LayerNorm"), Slot::LayerNorm(&mut ao.layer_norm)));
        out.push((
            format!("{p}.intermediate.dense"),
            Slot::Linear(&mut layer.intermediate.dense, false),
        ));
        out.push((format!("{p}.output.dense"), Slot::Linear(&mut layer.output.dense, false)));
        out.push((format!("{p}.output.LayerNorm"), Slot::LayerNorm(&mut layer.output.layer_norm)));
    }
    out.push((dense_name.into(), Slot::Linear(&mut bert.pooler.dense, true)));
    if let Some(c) = model.classifier.as_mut() {
        out.push((out_name.into(), Slot::Linear(c, true)));
    }
    out
}

/// The checkpoint's tensors, with the names the model asked for.
struct Source {
    tensors: BTreeMap<String, HostTensor>,
    used: BTreeSet<String>,
    file: PathBuf,
    /// The encoder's HF prefix (`bert`, `roberta`).
    prefix: &'static str,
}

impl Source {
    /// Finds `name` as written, without its `bert.` / `roberta.` prefix (a `BertModel`
    /// checkpoint), or with the pre-2019 LayerNorm names.
    fn find(&self, name: &str) -> Option<(String, &HostTensor)> {
        let prefix = self.prefix;
        let bare = name.strip_prefix(prefix).and_then(|n| n.strip_prefix('.')).unwrap_or(name);
        let old = bare
            .replace("LayerNorm.weight", "LayerNorm.gamma")
            .replace("LayerNorm.bias", "LayerNorm.beta");
        [name.to_string(), bare.to_string(), format!("{prefix}.{old}"), old]
            .into_iter()
            .find_map(|k| self.tensors.get(&k).map(|t| (k, t)))
    }

    fn take(&mut self, name: &str, expected: &[usize]) -> Result<Option<HostTensor>, Error> {
        let Some((key, t)) = self.find(name) else { return Ok(None) };
        if t.shape != expected {
            return Err(Error::Shape { key, expected: expected.to_vec(), found: t.shape.clone() });
        }
        // Moved out, not copied: a bundle's tensors are most of its memory.
        let t = self.tensors.remove(&key);
        self.used.insert(key);
        Ok(t)
    }

    fn require(&mut self, name: &str, expected: &[usize]) -> Result<HostTensor, Error> {
        self.take(name, expected)?
            .ok_or_else(|| Error::MissingTensor { key: name.to_string(), path: self.file.clone() })
    }

    fn load_embedding<B: Backend>(
        &mut self,
        name: &str,
        e: &mut Embedding<B>,
        device: &B::Device,
    ) -> Result<bool, Error> {
        let t = self.require(&format!("{name}.weight"), &e.weight.lazy_shape().dims::<2>())?;
        e.weight = Param::from_tensor(t.to_tensor(device));
        Ok(false)
    }

    fn load_layer_norm<B: Backend>(
        &mut self,
        name: &str,
        ln: &mut LayerNorm<B>,
        device: &B::Device,
    ) -> Result<bool, Error> {
        let dims = ln.gamma.lazy_shape().dims::<1>();
        ln.gamma =
            Param::from_tensor(self.require(&format!("{name}.weight"), &dims)?.to_tensor(device));
        if ln.beta.is_some() {
            ln.beta = Some(Param::from_tensor(
                self.require(&format!("{name}.bias"), &dims)?.to_tensor(device),
            ));
        }
        Ok(false)
    }

    /// Returns whether the Linear was initialised fresh because the checkpoint lacks it.
    fn load_linear<B: Backend>(
        &mut self,
        name: &str,
        lin: &mut Linear<B>,
        optional: bool,
        init_std: f64,
        device: &B::Device,
    ) -> Result<bool, Error> {
        // `lazy_shape`: the shape without drawing the initial values the loaded tensor replaces.
        let [d_in, d_out] = lin.weight.lazy_shape().dims();
        let weight = if optional {
            self.take(&format!("{name}.weight"), &[d_out, d_in])?
        } else {
            Some(self.require(&format!("{name}.weight"), &[d_out, d_in])?)
        };
        let Some(weight) = weight else {
            *lin = hf_init_linear(lin.clone(), init_std);
            return Ok(true);
        };
        lin.weight = Param::from_tensor(weight.transposed().to_tensor(device));
        if lin.bias.is_some() {
            let bias = self.require(&format!("{name}.bias"), &[d_out])?;
            lin.bias = Some(Param::from_tensor(bias.to_tensor(device)));
        }
        Ok(false)
    }
}
