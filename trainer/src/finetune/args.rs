//! The `trainer finetune` flags and the run configuration they make.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use shared::data::Task;
use shared::ConnectionSpec;

use crate::backend::BackendKind;
use crate::datasets;
use crate::run::{AdvKind, OptimizerKind, RunConfig};

/// The flags that define a run (everything but --resume, --save-final and the checkpoint and
/// progress intervals): `--resume` takes them from the run's config.json instead.
pub(super) const RUN_SETTINGS: &[&str] = &[
    "task",
    "model",
    "connection",
    "iterations",
    "gamma",
    "im_layers",
    "train_file",
    "data_dir",
    "train_samples",
    "val_samples",
    "seed",
    "epochs",
    "max_steps",
    "batch_size",
    "grad_accum",
    "max_len",
    "optimizer",
    "lr",
    "weight_decay",
    "adam_eps",
    "adam_beta1",
    "adam_beta2",
    "max_grad_norm",
    "warmup_ratio",
    "no_shuffle",
    "dropout",
    "adv",
    "adv_epsilon",
    "adv_alpha",
    "adv_steps",
    "adv_tau",
    "adv_lambda",
    "backend",
    "out",
];

#[derive(Args, Debug, Clone)]
pub struct FinetuneArgs {
    /// GLUE task: sst2, qqp, qnli, mnli, rte.
    #[arg(long, required_unless_present = "resume")]
    pub task: Option<String>,
    /// Pretrained HF BERT directory to warm-start from.
    #[arg(long, default_value = "models/all-minilm-l6-v2")]
    pub model: PathBuf,
    /// Connection: bert, ex or im (with --T, --gamma, --im-layers), or a full spec such as
    /// `im:T=5,gamma=0.1,layers=3-5`.
    #[arg(long, default_value = "bert")]
    pub connection: String,
    #[arg(long = "T")]
    pub iterations: Option<usize>,
    #[arg(long)]
    pub gamma: Option<f64>,
    #[arg(long = "im-layers", alias = "layers")]
    pub im_layers: Option<String>,
    /// Training file (default: the task's file in --data-dir).
    #[arg(long)]
    pub train_file: Option<PathBuf>,
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Low-resource setting: training examples kept (the paper: 1000).
    #[arg(long)]
    pub train_samples: Option<usize>,
    /// Low-resource setting: validation examples kept (the paper: 500).
    #[arg(long)]
    pub val_samples: Option<usize>,
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    #[arg(long, default_value_t = 3)]
    pub epochs: usize,
    #[arg(long)]
    pub max_steps: Option<usize>,
    #[arg(long, default_value_t = 16)]
    pub batch_size: usize,
    #[arg(long, default_value_t = 1)]
    pub grad_accum: usize,
    #[arg(long, default_value_t = shared::io::tokenizer::DEFAULT_MAX_LEN)]
    pub max_len: usize,
    #[arg(long, value_enum, default_value = "adamw")]
    pub optimizer: OptimizerKind,
    #[arg(long, default_value_t = 2e-5)]
    pub lr: f64,
    /// AdamW decoupled weight decay (PyTorch's AdamW default is 0.01; the paper's setting is 0).
    #[arg(long, default_value_t = 0.0)]
    pub weight_decay: f64,
    #[arg(long, default_value_t = 1e-8)]
    pub adam_eps: f64,
    #[arg(long, default_value_t = 0.9)]
    pub adam_beta1: f64,
    #[arg(long, default_value_t = 0.999)]
    pub adam_beta2: f64,
    /// Clip the gradient's global L2 norm to this value before each step (HF Trainer's
    /// `max_grad_norm`); 0 turns clipping off.
    #[arg(long, default_value_t = 0.0)]
    pub max_grad_norm: f64,
    /// Fraction of all steps used for linear warm-up.
    #[arg(long, default_value_t = 0.1)]
    pub warmup_ratio: f64,
    /// Keep the file order (no shuffling).
    #[arg(long)]
    pub no_shuffle: bool,
    /// Override the model's dropout probabilities (0 for exact comparisons).
    #[arg(long)]
    pub dropout: Option<f64>,
    #[arg(long, value_enum, default_value = "none")]
    pub adv: AdvKind,
    /// Perturbation norm bound (Frobenius, per example).
    #[arg(long, default_value_t = 0.1)]
    pub adv_epsilon: f64,
    /// Ascent step size.
    #[arg(long, default_value_t = 0.1)]
    pub adv_alpha: f64,
    /// Ascent steps k.
    #[arg(long, default_value_t = 1)]
    pub adv_steps: usize,
    /// Weight of the cosine-similarity term (CreAT); forced to 0 by --adv pgd.
    #[arg(long, default_value_t = 1.0)]
    pub adv_tau: f64,
    /// Weight of the clean loss: lambda L(x) + (1 - lambda) L(x + delta).
    #[arg(long, default_value_t = 0.5)]
    pub adv_lambda: f64,
    #[arg(long, value_enum, default_value = "ndarray")]
    pub backend: BackendKind,
    /// Run directory to create (default: runs/<task>-<connection>-s<seed>).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Resume the run in this directory from its last checkpoint. The run's settings are its
    /// config.json's: a flag that would change one is refused.
    #[arg(long, conflicts_with_all = RUN_SETTINGS)]
    pub resume: Option<PathBuf>,
    /// Also write the last step's weights as an HF directory (RUN_DIR/final); stored in the
    /// run's config, so a resumed run writes it too (and `--resume DIR --save-final` adds it).
    #[arg(long)]
    pub save_final: bool,
    /// Write a resumable checkpoint every this many optimizer steps (and at every epoch end).
    #[arg(long, default_value_t = 50)]
    pub checkpoint_every: usize,
    /// When the output is not a terminal (a file, a pipe), log a progress line every this many
    /// optimizer steps, and at least every 30 s.
    #[arg(long, default_value_t = 50)]
    pub progress_every: usize,
}

impl FinetuneArgs {
    fn connection_spec(&self) -> Result<ConnectionSpec> {
        let spec = ConnectionSpec::parse(&self.connection)?;
        Ok(spec.with_flags(self.iterations, self.gamma, self.im_layers.as_deref())?)
    }

    /// The run's full configuration from the flags.
    pub fn to_config(&self) -> Result<RunConfig> {
        let task: Task = self.task.as_deref().context("--task is required")?.parse()?;
        let data_dir = self.data_dir.clone().unwrap_or_else(datasets::default_data_dir);
        let train_file = match &self.train_file {
            Some(f) => f.clone(),
            None => datasets::train_file(&data_dir, task)?,
        };
        if !(self.max_grad_norm >= 0.0 && self.max_grad_norm.is_finite()) {
            bail!(
                "--max-grad-norm {} must be a finite number >= 0 (0: no clipping)",
                self.max_grad_norm
            );
        }
        let config = RunConfig {
            task,
            model: self.model.display().to_string(),
            connection: self.connection_spec()?,
            train_file: train_file.display().to_string(),
            seed: self.seed,
            epochs: self.epochs,
            max_steps: self.max_steps,
            train_samples: self.train_samples,
            val_samples: self.val_samples,
            batch_size: self.batch_size,
            grad_accum: self.grad_accum,
            max_len: self.max_len,
            optimizer: self.optimizer,
            lr: self.lr,
            weight_decay: self.weight_decay,
            adam_eps: self.adam_eps,
            adam_beta1: self.adam_beta1,
            adam_beta2: self.adam_beta2,
            warmup_ratio: self.warmup_ratio,
            max_grad_norm: (self.max_grad_norm > 0.0).then_some(self.max_grad_norm),
            shuffle: !self.no_shuffle,
            dropout: self.dropout,
            adv: self.adv,
            adv_epsilon: self.adv_epsilon,
            adv_alpha: self.adv_alpha,
            adv_steps: self.adv_steps,
            adv_tau: if self.adv == AdvKind::Pgd { 0.0 } else { self.adv_tau },
            adv_lambda: self.adv_lambda,
            backend: self.backend,
            command: std::env::args().collect::<Vec<_>>().join(" "),
            save_final: self.save_final,
            started_in: std::env::current_dir().ok(),
        };
        config.check()?;
        Ok(config)
    }
}
