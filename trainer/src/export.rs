//! `trainer export --web`: a fine-tuned classifier as a browser bundle.
//!
//! ```text
//! SITE/
//!   index.json        {"models": [{"id", "path", "task", "connection", "labels", "bytes",
//!                                  "metrics", ...}]}
//!   NAME/             config.json, tokenizer.json, model.int8.safetensors, imbert.json
//! ```
//!
//! The bundle is written into a temporary directory, reloaded and compared with the f32 model,
//! and only then renamed into place; `index.json` is replaced atomically. A model whose head was
//! never trained is refused unless `--allow-untrained` marks it as such in its card.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, ensure, Context, Result};
use clap::Args;
use serde::{Deserialize, Serialize};
use shared::data::Task;
pub use shared::io::bundle::IndexEntry;
use shared::io::bundle::{ModelCard, Quantization, WebBundle, CARD_FILE};
use shared::io::checkpoint;
use shared::io::quantize::{quantize_to_safetensors, SCHEME, WEB_WEIGHTS_FILE};
use shared::io::tensor_file::{self, HostTensor};
use shared::{BertClassifier, BertConfig, BertTokenizer, ConnectionSpec, ForwardOptions};

use crate::backend::Cpu;
use crate::run::{self, EpochMetrics, EvalReport};

/// The site's list of models.
pub const INDEX_FILE: &str = "index.json";

#[derive(Args, Debug, Clone)]
pub struct ExportArgs {
    /// Write a web bundle (int8 weights) for the browser demo; the only format so far.
    #[arg(long)]
    pub web: bool,
    /// HF model directory with a fine-tuned classifier, e.g. a run's `best/`.
    #[arg(long)]
    pub model: PathBuf,
    /// The site directory: the bundle goes to SITE/NAME/ and is listed in SITE/index.json.
    #[arg(long)]
    pub site: PathBuf,
    /// Bundle id and directory name (letters, digits, `-`, `_`, `.`), e.g. `imbert-sst2`.
    #[arg(long)]
    pub name: String,
    /// GLUE task (default: the model's imbert.json; required without one).
    #[arg(long)]
    pub task: Option<String>,
    /// Connection spec (default: the model's imbert.json, else bert).
    #[arg(long)]
    pub connection: Option<String>,
    /// `trainer eval` report whose GLUE dev / AdvGLUE accuracies go into the card (default:
    /// RUN_DIR/eval.json when --model is a run's best/).
    #[arg(long)]
    pub eval: Option<PathBuf>,
    /// Export even when the classifier head was never trained; the card then says
    /// `"untrained": true`.
    #[arg(long)]
    pub allow_untrained: bool,
    /// Replace an existing bundle of the same name (without it, an existing SITE/NAME is an
    /// error). The new bundle is checked before it replaces the old one.
    #[arg(long)]
    pub force: bool,
}

/// `index.json`. Unknown fields of the file are kept.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SiteIndex {
    pub models: Vec<IndexEntry>,
    #[serde(flatten)]
    pub extra: BTreeMap<String, serde_json::Value>,
}

impl SiteIndex {
    /// Replaces the entry with the same id, or appends.
    pub fn upsert(&mut self, entry: IndexEntry) {
        match self.models.iter_mut().find(|m| m.id == entry.id) {
            Some(slot) => *slot = entry,
            None => self.models.push(entry),
        }
    }
}

pub fn run(args: ExportArgs) -> Result<()> {
    ensure!(args.web, "only web bundles can be exported so far: pass --web");
    check_name(&args.name)?;
    let bundle_dir = args.site.join(&args.name);
    if bundle_dir.exists() && !args.force {
        bail!(
            "{} exists: pass --force to replace it, or choose another --name",
            bundle_dir.display()
        );
    }
    let (card, bytes) = export_web(&args, &bundle_dir)?;
    let architecture =
        shared::BertConfig::from_file(&bundle_dir.join("config.json"))?.architecture();
    let index_path = args.site.join(INDEX_FILE);
    let mut index: SiteIndex = if index_path.exists() {
        run::read_json(&index_path)
            .context("the existing index is not a site index; fix or remove it")?
    } else {
        SiteIndex::default()
    };
    index.upsert(IndexEntry {
        id: args.name.clone(),
        path: format!("{}/", args.name),
        task: card.task.clone(),
        connection: card.connection.clone(),
        architecture,
        labels: card.labels.clone(),
        bytes,
        metrics: card.metrics.clone(),
        did_not_learn: card.did_not_learn,
        untrained: card.untrained,
    });
    run::write_json(&index_path, &index)?;
    println!("wrote {} ({bytes} bytes) and {}", bundle_dir.display(), index_path.display());
    Ok(())
}

/// Names become directory names and URL paths: keep them plain.
fn check_name(name: &str) -> Result<()> {
    let plain = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    ensure!(
        !name.is_empty() && !name.starts_with('.') && name.chars().all(plain),
        "--name {name:?}: use letters, digits, `-`, `_` and `.` (not first)"
    );
    Ok(())
}

/// Writes the bundle and returns its card and total size in bytes.
fn export_web(args: &ExportArgs, bundle_dir: &Path) -> Result<(ModelCard, u64)> {
    let source = &args.model;
    shared::io::checkpoint::check_model_dir(source)?;
    let source_card = ModelCard::read(source)
        .with_context(|| format!("reading {}", source.join(CARD_FILE).display()))?;
    let (task, connection) = task_and_connection(args, source_card.as_ref())?;
    let (model, untrained) = load_model(source, task, &connection, source_card.as_ref())?;
    if untrained.is_some() && !args.allow_untrained {
        bail!(
            "{} has no trained classifier ({}): fine-tune it first, or pass --allow-untrained \
             to export it marked as untrained",
            source.display(),
            untrained.unwrap_or_default()
        );
    }
    if source_card.is_none() {
        tracing::warn!(
            "{} has no {CARD_FILE}: the card will say nothing about how it was trained",
            source.display()
        );
    }

    let mut card = bundle_card(args, source_card, task, &connection, untrained.is_some())?;
    let (int8, quantization) = quantize(&model)?;
    card.quantization = Some(quantization);
    let files: [(&str, Vec<u8>); 4] = [
        ("config.json", serde_json::to_vec_pretty(&hf_config(&model, &card.labels))?),
        ("tokenizer.json", tokenizer_json(source)?),
        (WEB_WEIGHTS_FILE, int8),
        (CARD_FILE, card.to_json()?.into_bytes()),
    ];
    let total = write_checked(&files, bundle_dir, &args.name, &model)?;
    Ok((card, total))
}

/// The task and connection: the flags where given, else the source's card. A flag that
/// contradicts the card's task is an error; a different connection is the point of the flag.
fn task_and_connection(
    args: &ExportArgs,
    source_card: Option<&ModelCard>,
) -> Result<(Task, ConnectionSpec)> {
    let source = &args.model;
    let task: Task = match (&args.task, source_card) {
        (Some(flag), Some(card)) if flag.parse::<Task>()?.name() != card.task => {
            bail!(
                "--task {flag} contradicts {} (task {})",
                source.join(CARD_FILE).display(),
                card.task
            )
        }
        (Some(flag), _) => flag.parse()?,
        (None, Some(card)) => card.task.parse()?,
        (None, None) => bail!("--task is required: {} has no {CARD_FILE}", source.display()),
    };
    let connection = match (&args.connection, source_card) {
        (Some(spec), _) => ConnectionSpec::parse(spec).context("parsing --connection")?,
        (None, Some(card)) => card
            .connection_spec()
            .with_context(|| format!("{}: field `connection`", source.display()))?,
        (None, None) => ConnectionSpec::default(),
    };
    Ok((task, connection))
}

/// Loads the classifier with `connection`. The second value says why it counts as untrained
/// (a head initialised fresh, or a card that says so), or is None for a trained one.
///
/// Building the model normalises the checkpoint's names (`bert.` prefix, old LayerNorm names)
/// and drops unused heads, so the bundle's weights come from the model, not the file.
fn load_model(
    source: &Path,
    task: Task,
    connection: &ConnectionSpec,
    source_card: Option<&ModelCard>,
) -> Result<(BertClassifier<Cpu>, Option<String>)> {
    let device = Default::default();
    let config = BertConfig::from_file(&source.join("config.json"))?;
    let weights = checkpoint::weights_file(source)?;
    let tensors = if weights.extension().is_some_and(|e| e == "safetensors") {
        tensor_file::read_safetensors(&weights)?
    } else {
        tensor_file::read_pytorch_bin(&weights)?
    };
    let (model, report) = checkpoint::load_from_tensors::<Cpu>(
        &config,
        tensors,
        Some(task.num_labels()),
        &weights,
        &device,
    )
    .with_context(|| format!("loading {} as a {task} classifier", source.display()))?;
    let model = model.with_connections(connection)?;
    let untrained = if !report.initialized_fresh.is_empty() {
        Some(format!("{} initialised fresh", report.initialized_fresh.join(", ")))
    } else if source_card.is_some_and(|c| c.untrained) {
        Some("its card says untrained".to_string())
    } else {
        None
    };
    Ok((model, untrained))
}

/// The bundle's card: the source's card (or a new one) under the bundle's name, task and
/// connection, with the run's metrics added.
fn bundle_card(
    args: &ExportArgs,
    source_card: Option<ModelCard>,
    task: Task,
    connection: &ConnectionSpec,
    untrained: bool,
) -> Result<ModelCard> {
    let had_card = source_card.is_some();
    let mut card =
        source_card.unwrap_or_else(|| ModelCard::new(task.name(), Vec::new(), connection));
    card.name = args.name.clone();
    card.task = task.name().to_string();
    card.connection = connection.to_spec_string();
    if card.labels.len() != task.num_labels() {
        card.labels = task.label_names().iter().map(|s| s.to_string()).collect();
    }
    if card.trained_from.is_empty() && !had_card {
        card.trained_from = args.model.display().to_string();
    }
    card.untrained = untrained;
    add_run_metrics(&mut card, &args.model, args.eval.as_deref())?;
    Ok(card)
}

/// The model's weights as int8 safetensors bytes, and what the quantisation cost.
fn quantize(model: &BertClassifier<Cpu>) -> Result<(Vec<u8>, Quantization)> {
    let named: BTreeMap<String, HostTensor> = checkpoint::hf_parameters(model)
        .into_iter()
        .map(|p| Ok((p.name.clone(), p.to_host(&p.tensor)?)))
        .collect::<Result<_, shared::Error>>()?;
    let (int8, stats) = quantize_to_safetensors(&named)?;
    eprintln!(
        "quantized {} matrices to int8: {} -> {} bytes, max |w - w'| = {:.3e} (in {})",
        stats.int8_tensors,
        stats.f32_bytes,
        stats.bytes,
        stats.max_abs_error,
        stats.max_abs_error_key
    );
    let quantization = Quantization {
        scheme: SCHEME.to_string(),
        bytes: stats.bytes as u64,
        f32_bytes: stats.f32_bytes as u64,
        max_abs_error: stats.max_abs_error,
    };
    Ok((int8, quantization))
}

/// The source's tokenizer.json; with only a vocab.txt (or RoBERTa's vocab.json + merges.txt),
/// the same pipeline serialised.
fn tokenizer_json(source: &Path) -> Result<Vec<u8>> {
    match std::fs::read(source.join("tokenizer.json")) {
        Ok(bytes) => Ok(bytes),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let tokenizer = BertTokenizer::from_dir(source)?;
            let json = tokenizer
                .inner()
                .to_string(false)
                .map_err(|e| anyhow::anyhow!("serialising the tokenizer: {e}"))?;
            Ok(json.into_bytes())
        }
        Err(e) => {
            Err(e).with_context(|| format!("reading {}", source.join("tokenizer.json").display()))
        }
    }
}

/// The bundle's config.json: the model's config as a sequence classifier with its labels.
fn hf_config(model: &BertClassifier<Cpu>, labels: &[String]) -> BertConfig {
    let mut config = model.config.clone();
    config.architectures = vec![config.architecture().class_name(true).into()];
    config.id2label =
        Some(labels.iter().enumerate().map(|(i, l)| (i.to_string(), l.clone())).collect());
    config.extra.insert(
        "label2id".into(),
        labels.iter().enumerate().map(|(i, l)| (l.clone(), serde_json::Value::from(i))).collect(),
    );
    config
}

/// Writes `files` into a temporary directory beside `bundle_dir`, reloads them as the browser
/// will and compares with `model`, and only then renames the directory into place. Returns the
/// bytes written.
fn write_checked(
    files: &[(&str, Vec<u8>)],
    bundle_dir: &Path,
    name: &str,
    model: &BertClassifier<Cpu>,
) -> Result<u64> {
    let parent =
        bundle_dir.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    let tmp = parent.join(format!(".{name}.export-{}", std::process::id()));
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp)?;
    }
    std::fs::create_dir_all(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    let mut total = 0u64;
    for (name, bytes) in files {
        std::fs::write(tmp.join(name), bytes)
            .with_context(|| format!("writing {}", tmp.join(name).display()))?;
        total += bytes.len() as u64;
    }
    let check = verify(&tmp, model)
        .with_context(|| format!("checking the new bundle in {}", tmp.display()));
    let diff = match check {
        Ok(diff) => diff,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&tmp);
            return Err(e);
        }
    };
    eprintln!(
        "reloaded bundle vs f32 model: max |logit difference| = {diff:.3e} on {} probe inputs",
        PROBES.len()
    );
    shared::io::atomic::replace_dir(&tmp, bundle_dir)?;
    Ok(total)
}

/// Inputs the freshly written bundle is checked on (a pair among them, for pair tasks).
const PROBES: [(&str, Option<&str>); 3] = [
    ("a gripping, heartfelt film", None),
    ("the premise is thin and the jokes fall flat .", None),
    ("A man is playing a guitar.", Some("Someone plays music.")),
];

/// Reloads the bundle as the browser will and returns the largest logit difference to the f32
/// model.
fn verify(dir: &Path, model: &BertClassifier<Cpu>) -> Result<f32> {
    let bundle = WebBundle::from_dir(dir)?;
    let device = Default::default();
    let loaded = bundle.classifier::<Cpu>(&device)?;
    let batch = bundle.tokenizer.encode(&PROBES, model.max_len(64))?;
    let input = batch.to_input::<Cpu>(&device);
    let logits = |m: &BertClassifier<Cpu>| {
        m.forward(&input, ForwardOptions::default()).logits.context("no classifier")
    };
    let diff: f32 = (logits(model)? - logits(&loaded)?).abs().max().into_scalar();
    ensure!(diff.is_finite(), "the bundle's logits are not finite");
    Ok(diff)
}

/// Validation accuracy (from the run's metrics.jsonl when the card lacks it) and GLUE dev /
/// AdvGLUE accuracies from an eval report, when `source` is a run's `best/`.
fn add_run_metrics(card: &mut ModelCard, source: &Path, eval: Option<&Path>) -> Result<()> {
    let run_dir = (source.file_name().is_some_and(|n| n == "best"))
        .then(|| source.parent())
        .flatten()
        .filter(|d| d.join("config.json").exists());
    if let Some(run_dir) = run_dir {
        let metrics = run_dir.join("metrics.jsonl");
        if !card.metrics.contains_key("validation") && metrics.exists() {
            let best = run::read_jsonl::<EpochMetrics>(&metrics)?.into_iter().rfind(|m| m.best);
            if let Some(m) = best {
                card.metrics.insert("validation".into(), m.val_accuracy);
            }
        }
    }
    let eval_path = match (eval, run_dir) {
        (Some(path), _) => Some(path.to_path_buf()),
        (None, Some(dir)) => Some(dir.join("eval.json")).filter(|p| p.exists()),
        (None, None) => None,
    };
    let Some(eval_path) = eval_path else { return Ok(()) };
    let report: EvalReport = run::read_json(&eval_path)?;
    ensure!(
        report.task == card.task,
        "{}: an evaluation of task {}, not {}",
        eval_path.display(),
        report.task,
        card.task
    );
    if report.connection != card.connection {
        tracing::warn!(
            "{} evaluated connection {}, the bundle uses {}: its accuracies are left out",
            eval_path.display(),
            report.connection,
            card.connection
        );
        return Ok(());
    }
    for clean in &report.clean {
        card.metrics.insert(format!("glue_dev/{}", clean.split), clean.score.accuracy);
    }
    for adv in &report.advglue {
        card.metrics.insert(format!("advglue/{}", adv.split), adv.adversarial.accuracy);
        card.metrics
            .insert(format!("advglue/{}/clean_original", adv.split), adv.clean_original.accuracy);
    }
    card.did_not_learn = report.did_not_learn;
    Ok(())
}
