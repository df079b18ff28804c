//! `trainer finetune`: the paper's protocol. Warm-start from a pretrained BERT, AdamW at 2e-5
//! with linear warm-up and decay, batch 16, GLUE train split 8:2 into train/validation, and the
//! model with the lowest validation loss kept. CreAT and PGD adversarial training are options.
//!
//! Runs are resumable and exact: the data order depends only on (seed, epoch), dropout is
//! re-seeded from (seed, step) before every step, and checkpoints hold the model, the optimizer
//! state and the loop counters. A run killed at any moment and resumed ends with the same weights
//! as one never interrupted.

mod adversarial;
mod args;
mod checkpoint;
mod diagnostics;
mod logging;
#[cfg(test)]
mod tests;
mod train_loop;
mod validation;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use burn::optim::SgdConfig;
use burn::tensor::backend::AutodiffBackend;
use shared::BertClassifier;

use crate::adamw::AdamW;
use crate::run::{self, RunConfig};

pub use crate::run::{AdvKind, OptimizerKind};
pub(crate) use adversarial::training_loss;
pub use args::FinetuneArgs;
pub use checkpoint::TrainState;
pub(crate) use train_loop::{split_data, to_batch, warm_start};

/// What a finished run reports back (used by `reproduce`).
#[derive(Debug, Clone)]
pub struct TrainSummary {
    pub run_dir: PathBuf,
    pub steps: usize,
    pub best_val_loss: f64,
}

pub fn run(args: FinetuneArgs) -> Result<()> {
    let (config, run_dir, resume) = match &args.resume {
        Some(dir) => {
            let path = dir.join("config.json");
            let mut config = run::read_json::<RunConfig>(&path)?;
            config.check().with_context(|| format!("{}", path.display()))?;
            if args.save_final && !config.save_final {
                // Stored, so that a later resume of this run writes final/ too.
                config.save_final = true;
                run::write_json(&path, &config)?;
            }
            (config, dir.clone(), true)
        }
        None => {
            let config = args.to_config()?;
            let dir = args.out.clone().unwrap_or_else(|| default_run_dir(&config));
            (config, dir, false)
        }
    };
    let options = RunOptions {
        checkpoint_every: args.checkpoint_every.max(1),
        progress_every: args.progress_every.max(1),
        resume,
    };
    let summary = crate::with_backend!(config.backend, |B, device| {
        train::<burn::backend::Autodiff<B>>(&config, &run_dir, &options, &device)
    })?;
    println!(
        "done: {} steps, best validation loss {:.4}; best model in {}",
        summary.steps,
        summary.best_val_loss,
        summary.run_dir.join("best").display()
    );
    Ok(())
}

/// `runs/<task>-<connection>-s<seed>`, with the spec's punctuation made path-friendly.
pub fn default_run_dir(config: &RunConfig) -> PathBuf {
    let conn: String = config
        .connection
        .to_spec_string()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '.' { c } else { '_' })
        .collect();
    PathBuf::from("runs").join(format!("{}-{}-s{}", config.task, conn, config.seed))
}

/// Settings of one invocation that are not part of the run's definition.
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub checkpoint_every: usize,
    /// Off a terminal, a progress line every this many optimizer steps (and every 30 s).
    pub progress_every: usize,
    pub resume: bool,
}

/// Fine-tunes according to `config`, in `run_dir`.
pub fn train<B: AutodiffBackend>(
    config: &RunConfig,
    run_dir: &Path,
    options: &RunOptions,
    device: &B::Device,
) -> Result<TrainSummary> {
    match config.optimizer {
        OptimizerKind::Adamw => {
            let optim = AdamW::new(
                config.adam_beta1 as f32,
                config.adam_beta2 as f32,
                config.adam_eps as f32,
                config.weight_decay as f32,
            )
            .init::<B, BertClassifier<B>>();
            train_loop::train_with(config, run_dir, options, device, optim)
        }
        OptimizerKind::Sgd => train_loop::train_with(
            config,
            run_dir,
            options,
            device,
            SgdConfig::new().init::<B, BertClassifier<B>>(),
        ),
    }
}

/// Learning rate at optimizer step `step` (0-based) of `total`: HF's linear schedule with
/// warm-up (0 at step 0 when there is warm-up, peak after it, 0 at the end).
pub fn learning_rate(config: &RunConfig, step: usize, total: usize) -> f64 {
    let warmup = (config.warmup_ratio * total as f64).round() as usize;
    let factor = if step < warmup {
        step as f64 / warmup.max(1) as f64
    } else {
        (total.saturating_sub(step)) as f64 / (total.saturating_sub(warmup)).max(1) as f64
    };
    config.lr * factor.max(0.0)
}

fn summary(run_dir: &Path, state: &TrainState) -> TrainSummary {
    TrainSummary {
        run_dir: run_dir.to_path_buf(),
        steps: state.step,
        best_val_loss: state.best_val_loss.unwrap_or(f64::NAN),
    }
}
