//! The run directory: what `finetune` writes and `eval`, `report` and `reproduce` read.
//!
//! ```text
//! RUN_DIR/
//!   config.json      RunConfig: every setting of the run, and the command line
//!   log.txt          human-readable log
//!   metrics.jsonl    one EpochMetrics per line
//!   im_residuals.json  ImResidualCheck: each IM layer's ||r||^2 before the first step (IM runs)
//!   checkpoint/      latest resumable state (model, optimizer, TrainState); replaced atomically
//!   best/            HF directory of the lowest-validation-loss model (+ imbert.json)
//!   final/           HF directory of the last step's weights (with --save-final)
//!   eval.json        EvalReport, written by `trainer eval`
//!   done             present once training finished
//! ```

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::ValueEnum;
use serde::{Deserialize, Serialize};

use shared::data::Task;
use shared::ConnectionSpec;

use crate::backend::BackendKind;

/// The optimizer, written in `config.json` as `adamw` or `sgd`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OptimizerKind {
    Adamw,
    Sgd,
}

/// Adversarial training, written in `config.json` as `none`, `creat` or `pgd`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AdvKind {
    /// Plain fine-tuning.
    None,
    /// CreAT: PGD on the word embeddings against the task loss minus tau * cosine similarity of
    /// the final encoder states (ICLR 2023).
    Creat,
    /// Vanilla PGD adversarial training: CreAT with tau = 0.
    Pgd,
}

impl AdvKind {
    /// The name in `config.json`, run names and report groups.
    pub fn name(self) -> &'static str {
        match self {
            AdvKind::None => "none",
            AdvKind::Creat => "creat",
            AdvKind::Pgd => "pgd",
        }
    }
}

/// serde_json writes a non-finite `f64` as `null`. These read it back as NaN (a loss) or as
/// +inf (a gradient norm that overflowed, as the exact IM gradient's does), so that the files of
/// a run that blew up still load and say so.
pub(crate) mod non_finite {
    use serde::{Deserialize, Deserializer};

    pub fn nan<'de, D: Deserializer<'de>>(deserializer: D) -> Result<f64, D::Error> {
        Ok(Option::<f64>::deserialize(deserializer)?.unwrap_or(f64::NAN))
    }

    pub fn inf<'de, D: Deserializer<'de>>(deserializer: D) -> Result<f64, D::Error> {
        Ok(Option::<f64>::deserialize(deserializer)?.unwrap_or(f64::INFINITY))
    }

    pub fn inf_each<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<f64>, D::Error> {
        let values = Vec::<Option<f64>>::deserialize(deserializer)?;
        Ok(values.into_iter().map(|v| v.unwrap_or(f64::INFINITY)).collect())
    }
}

/// A connection in `config.json`: its canonical spec text, which run names are made from.
mod spec_text {
    use serde::{Deserialize, Deserializer, Serializer};
    use shared::ConnectionSpec;

    pub fn serialize<S: Serializer>(
        spec: &ConnectionSpec,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&spec.to_spec_string())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<ConnectionSpec, D::Error> {
        let text = String::deserialize(deserializer)?;
        ConnectionSpec::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// Everything that defines a fine-tuning run. Defaults follow the paper's protocol.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunConfig {
    /// GLUE task, written as its name (`sst2`, `qqp`, `qnli`, `mnli`, `rte`).
    pub task: Task,
    /// Pretrained HF BERT directory the run warm-starts from.
    pub model: String,
    /// The connection, written as its canonical spec (`bert`, `ex`, `im:T=5,gamma=0.1,layers=3-5`).
    #[serde(with = "spec_text")]
    pub connection: ConnectionSpec,
    /// Training file (GLUE train, or a train subset); split 8:2 into train/validation.
    pub train_file: String,
    pub seed: u64,
    pub epochs: usize,
    /// Stop after this many optimizer steps (None: run all epochs).
    pub max_steps: Option<usize>,
    /// Low-resource setting: examples kept for training and validation (None: the whole 8:2 split).
    pub train_samples: Option<usize>,
    pub val_samples: Option<usize>,
    pub batch_size: usize,
    pub grad_accum: usize,
    pub max_len: usize,
    pub optimizer: OptimizerKind,
    pub lr: f64,
    pub weight_decay: f64,
    pub adam_eps: f64,
    pub adam_beta1: f64,
    pub adam_beta2: f64,
    /// Fraction of the steps spent on linear warm-up (then linear decay to 0).
    pub warmup_ratio: f64,
    /// Global L2 norm the gradient is clipped to before each step (None: no clipping).
    #[serde(default)]
    pub max_grad_norm: Option<f64>,
    pub shuffle: bool,
    /// Overrides both dropout probabilities of the model when set.
    pub dropout: Option<f64>,
    pub adv: AdvKind,
    pub adv_epsilon: f64,
    pub adv_alpha: f64,
    pub adv_steps: usize,
    pub adv_tau: f64,
    pub adv_lambda: f64,
    pub backend: BackendKind,
    /// The command line that started the run.
    pub command: String,
    /// Also write the last step's weights to RUN_DIR/final (`--save-final`), on every resume too.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub save_final: bool,
    /// The directory the run was started in: a relative `model` or `train_file` is relative to
    /// it, so that `--resume` works from anywhere (absent in runs started before 2026-12-04).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_in: Option<PathBuf>,
}

impl RunConfig {
    /// `path` (the model or the training file) as seen from the current directory.
    pub fn resolve(&self, path: &str) -> PathBuf {
        match &self.started_in {
            Some(dir) if Path::new(path).is_relative() => dir.join(path),
            _ => PathBuf::from(path),
        }
    }

    /// Refuses settings no run can train with, naming the flag, so that nothing is written for
    /// them (a NaN learning rate would otherwise land in config.json as `null`, which no later
    /// command can read).
    pub fn check(&self) -> Result<()> {
        let positive = [
            ("--batch-size", self.batch_size),
            ("--grad-accum", self.grad_accum),
            ("--epochs", self.epochs),
            ("--max-len", self.max_len),
            ("--max-steps", self.max_steps.unwrap_or(1)),
            ("--train-samples", self.train_samples.unwrap_or(1)),
            ("--val-samples", self.val_samples.unwrap_or(1)),
            ("--adv-steps", self.adv_steps),
        ];
        for (flag, value) in positive {
            anyhow::ensure!(value > 0, "{flag} {value}: must be at least 1");
        }
        use Bounds::*;
        let numbers = [
            ("--lr", self.lr, Positive),
            ("--weight-decay", self.weight_decay, NonNegative),
            ("--adam-eps", self.adam_eps, Positive),
            ("--adam-beta1", self.adam_beta1, BelowOne),
            ("--adam-beta2", self.adam_beta2, BelowOne),
            ("--warmup-ratio", self.warmup_ratio, UpToOne),
            ("--max-grad-norm", self.max_grad_norm.unwrap_or(1.0), Positive),
            ("--dropout", self.dropout.unwrap_or(0.0), BelowOne),
            ("--adv-epsilon", self.adv_epsilon, NonNegative),
            ("--adv-alpha", self.adv_alpha, NonNegative),
            ("--adv-tau", self.adv_tau, NonNegative),
            ("--adv-lambda", self.adv_lambda, UpToOne),
        ];
        for (flag, value, bounds) in numbers {
            let ok = value.is_finite()
                && match bounds {
                    Positive => value > 0.0,
                    NonNegative => value >= 0.0,
                    BelowOne => (0.0..1.0).contains(&value),
                    UpToOne => (0.0..=1.0).contains(&value),
                };
            anyhow::ensure!(ok, "{flag} {value}: must be {}", bounds.describe());
        }
        Ok(())
    }
}

/// What a numeric setting may be.
#[derive(Clone, Copy)]
enum Bounds {
    Positive,
    NonNegative,
    BelowOne,
    UpToOne,
}

impl Bounds {
    fn describe(self) -> &'static str {
        match self {
            Bounds::Positive => "a finite number > 0",
            Bounds::NonNegative => "a finite number >= 0",
            Bounds::BelowOne => "in [0, 1)",
            Bounds::UpToOne => "in [0, 1]",
        }
    }
}

/// One line of `metrics.jsonl`, written after every validation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EpochMetrics {
    pub epoch: usize,
    pub step: usize,
    #[serde(deserialize_with = "non_finite::nan")]
    pub train_loss: f64,
    #[serde(deserialize_with = "non_finite::nan")]
    pub val_loss: f64,
    pub val_accuracy: f64,
    /// Share of the validation examples with the most common label (what always guessing it
    /// scores) and share of the most-predicted label: beside the accuracy, they tell a model that
    /// learned from one stuck on a class. Absent in runs written before they were recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub val_majority_share: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub val_top_prediction_share: Option<f64>,
    pub lr: f64,
    pub examples_per_sec: f64,
    pub elapsed_s: f64,
    /// Whether this validation produced a new best model.
    pub best: bool,
    /// The gradient norms of the last step before this validation (before clipping), per part.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grad_norms: Option<crate::grad_norms::GradNorms>,
}

/// The file name of [`ImResidualCheck`] in a run directory.
pub const IM_RESIDUALS_FILE: &str = "im_residuals.json";

/// `im_residuals.json`: what the IM iteration did on the warm-start weights, before any step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImResidualCheck {
    /// Validation examples the squared norms are summed over.
    pub examples: usize,
    pub layers: Vec<LayerResidualCheck>,
}

/// One IM layer's `||r||^2`, summed over the examples, before each iteration and after the last.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LayerResidualCheck {
    pub layer: usize,
    pub gamma: f64,
    pub squared_norms: Vec<f64>,
    /// 1-based iterations after which `||r||^2` was larger than before: gamma overshoots.
    pub rises_after_iteration: Vec<usize>,
}

impl ImResidualCheck {
    /// The IM layers whose residual rose in some iteration.
    pub fn overshooting_layers(&self) -> Vec<usize> {
        self.layers
            .iter()
            .filter(|l| !l.rises_after_iteration.is_empty())
            .map(|l| l.layer)
            .collect()
    }
}

/// Accuracy on one evaluation set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Score {
    pub n: usize,
    pub accuracy: f64,
    /// F1 of the positive class (QQP reports it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub f1: Option<f64>,
}

/// Clean (GLUE dev) results on one split.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CleanResult {
    /// `sst2`, `mnli` (matched), `mnli-mm` (mismatched), ...
    pub split: String,
    pub score: Score,
    /// Share of the most frequent true label (the accuracy of always guessing it).
    pub majority_share: f64,
    /// Share of the most frequently *predicted* label: near 1 means a constant classifier.
    pub top_prediction_share: f64,
    /// The split's size when the accuracy is over a fixed sample of it (`eval --clean-sample`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampled_from: Option<usize>,
    /// What the examples are when they are not GLUE dev (`datasets::DevFile::held_out`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_out: Option<String>,
}

/// AdvGLUE dev results on one task's items.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AdvResult {
    /// AdvGLUE task key: `sst2`, `qqp`, `qnli`, `mnli`, `mnli-mm`, `rte`.
    pub split: String,
    /// Accuracy on the adversarial items.
    pub adversarial: Score,
    /// Accuracy on the clean originals of the items that have one (`original_*`).
    pub clean_original: Score,
    /// Adversarial accuracy on those same items (so that drop = clean - adversarial is paired).
    pub adversarial_paired: Score,
    pub top_prediction_share: f64,
    /// `word`, `sentence`, `human` -> scores.
    pub by_level: std::collections::BTreeMap<String, LevelResult>,
    /// Attack method -> adversarial score.
    pub by_method: std::collections::BTreeMap<String, Score>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LevelResult {
    pub adversarial: Score,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clean_original: Option<Score>,
}

/// `eval.json`: everything `trainer eval` measured for one model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalReport {
    pub task: String,
    pub model: String,
    pub connection: String,
    pub clean: Vec<CleanResult>,
    pub advglue: Vec<AdvResult>,
    /// True when the model is near chance on clean data: its AdvGLUE numbers mean nothing.
    pub did_not_learn: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub did_not_learn_reason: Option<String>,
    /// Analytic forward FLOPs per example at the evaluation's mean sequence length.
    pub flops_per_example: f64,
    /// Measured inference throughput of the evaluation.
    pub examples_per_sec: f64,
}

pub fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<T> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

/// Writes JSON through a temporary file and a rename.
pub fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<()> {
    let text = serde_json::to_string_pretty(value)?;
    shared::io::atomic::write_atomic(path, text.as_bytes())
        .with_context(|| format!("writing {}", path.display()))
}

/// Checks, before any work, that an output file named by `flag` can be written: its directory
/// exists and the path is not a directory (rather than failing after an hour of work).
pub fn check_output_path(flag: &str, path: &Path) -> Result<()> {
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if path.is_dir() {
        anyhow::bail!("{flag} {}: is a directory; name a file", path.display());
    }
    if !parent.is_dir() {
        anyhow::bail!(
            "{flag} {}: {} is not an existing directory",
            path.display(),
            parent.display()
        );
    }
    Ok(())
}

/// `--num-labels`, when given, within what a classification head may have.
pub fn check_num_labels(num_labels: Option<usize>) -> Result<()> {
    let max = shared::model::config::MAX_LABELS;
    match num_labels {
        Some(n) if !(1..=max).contains(&n) => {
            anyhow::bail!("--num-labels {n}: must be in 1..={max}")
        }
        _ => Ok(()),
    }
}

/// All lines of a jsonl file.
pub fn read_jsonl<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<Vec<T>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l).with_context(|| format!("{}:{}", path.display(), i + 1))
        })
        .collect()
}

/// What a finished run is, in one file small enough to commit: its settings, every validation,
/// the IM residual check, the evaluation and the wall time (`reproduce` writes one per grid cell
/// into `results/runs/`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunSummary {
    pub name: String,
    pub config: RunConfig,
    pub metrics: Vec<EpochMetrics>,
    /// Training wall time in seconds (resumed sessions added up).
    pub train_seconds: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub im_residuals: Option<ImResidualCheck>,
    /// `eval.json` as written by `trainer eval`.
    pub eval: serde_json::Value,
    /// The stability probe of the run's best model (`reproduce` probes its SST-2 cells).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe: Option<crate::probe::ProbeReport>,
}

/// Where a run keeps the stability probe of its best model.
pub const PROBE_FILE: &str = "probe/probe.json";

impl RunSummary {
    /// Reads a finished, evaluated run directory.
    pub fn read(dir: &Path) -> Result<Self> {
        let config: RunConfig = read_json(&dir.join("config.json"))?;
        let metrics: Vec<EpochMetrics> = read_jsonl(&dir.join("metrics.jsonl"))?;
        let residuals_path = dir.join(IM_RESIDUALS_FILE);
        let im_residuals =
            if residuals_path.exists() { Some(read_json(&residuals_path)?) } else { None };
        let eval = read_json(&dir.join("eval.json"))?;
        let probe_path = dir.join(PROBE_FILE);
        let probe = if probe_path.exists() { Some(read_json(&probe_path)?) } else { None };
        let name = dir.file_name().map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        let train_seconds = metrics.last().map_or(0.0, |m| m.elapsed_s);
        Ok(Self { name, config, metrics, train_seconds, im_residuals, eval, probe })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every committed summary still loads, its config serialises back to the very JSON that was
    /// committed, and the adversarial setting still spells the run's name (`reproduce` skips a
    /// cell by that name).
    #[test]
    fn committed_summaries_load_and_round_trip() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../results/runs");
        let mut checked = 0;
        // Each grid's cells, and the learning-rate trials in its lr-search/ (beside each
        // search's outcome, `*.search.json`).
        let mut folders: Vec<PathBuf> = Vec::new();
        for grid in std::fs::read_dir(&root).unwrap() {
            let grid = grid.unwrap().path();
            if grid.file_name().is_some_and(|n| n == "attack") {
                // Block 4 commits attacks, not runs (reproduce/attack_report.rs checks them).
                continue;
            }
            folders.extend([grid.join("lr-search"), grid].into_iter().filter(|d| d.is_dir()));
        }
        for folder in folders {
            for file in std::fs::read_dir(folder).unwrap() {
                let path = file.unwrap().path();
                let name = path.file_name().unwrap().to_string_lossy();
                if !name.ends_with(".json") || name.ends_with(".search.json") {
                    continue;
                }
                if name == crate::speed::SPEED_FILE {
                    // `trainer speed`'s measurement of the grid's arms, not a run.
                    let speed: crate::speed::SpeedReport = read_json(&path).unwrap();
                    assert!(speed.arms.iter().all(|a| a.train_examples_per_sec > 0.0));
                    continue;
                }
                let raw: serde_json::Value = read_json(&path).unwrap();
                let summary: RunSummary = read_json(&path).unwrap();
                let config = &summary.config;
                assert_eq!(
                    serde_json::to_value(config).unwrap(),
                    raw["config"],
                    "{}",
                    path.display()
                );
                // Grids that search the learning rate name it before the seed.
                let suffix = format!("-{}-s{}", config.adv.name(), config.seed);
                let with_lr = format!("-{}-lr{:e}-s{}", config.adv.name(), config.lr, config.seed);
                assert!(
                    summary.name.ends_with(&suffix) || summary.name.ends_with(&with_lr),
                    "{} vs {suffix} or {with_lr}",
                    summary.name
                );
                checked += 1;
            }
        }
        assert!(checked > 0, "no committed summary under {}", root.display());
    }
}
