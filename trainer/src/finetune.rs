//! `trainer finetune`: the paper's protocol. Warm-start from a pretrained BERT, AdamW at 2e-5
//! with linear warm-up and decay, batch 16, GLUE train split 8:2 into train/validation, and the
//! model with the lowest validation loss kept. CreAT and PGD adversarial training are options.
//!
//! Runs are resumable and exact: the data order depends only on (seed, epoch), dropout is
//! re-seeded from (seed, step) before every step, and checkpoints hold the model, the optimizer
//! state and the loop counters. A run killed at any moment and resumed ends with the same weights
//! as one never interrupted.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use burn::module::AutodiffModule;
use burn::nn::loss::CrossEntropyLossConfig;
use burn::optim::{GradientsAccumulator, GradientsParams, Optimizer, SgdConfig};
use burn::record::{FullPrecisionSettings, NamedMpkFileRecorder, Recorder};
use burn::module::Module;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Distribution, ElementConversion, Int, Tensor, TensorData};
use clap::{Args, ValueEnum};
use serde::{Deserialize, Serialize};
use shared::bundle::ModelCard;
use shared::checkpoint::{load_for_task, save_classifier};
use shared::data::{self, Example, Task};
use shared::{BertClassifier, BertTokenizer, ConnectionSpec, ForwardOptions};

use crate::adamw::AdamW;
use crate::backend::BackendKind;
use crate::datasets;
use crate::evaluate::{self, predict};
use crate::grad_norms::{clip_global_norm, grad_norms, GradNorms, EXPLODING_RATIO};
use crate::run::{self, EpochMetrics, ImResidualCheck, LayerResidualCheck, RunConfig};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OptimizerKind {
    Adamw,
    Sgd,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AdvKind {
    /// Plain fine-tuning.
    None,
    /// CreAT: PGD on the word embeddings against the task loss minus tau * cosine similarity of
    /// the final encoder states (ICLR 2023).
    Creat,
    /// Vanilla PGD adversarial training: CreAT with tau = 0.
    Pgd,
}

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
    #[arg(long, default_value_t = shared::tokenizer::DEFAULT_MAX_LEN)]
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
    /// Resume the run in this directory from its last checkpoint.
    #[arg(long)]
    pub resume: Option<PathBuf>,
    /// Also write the last step's weights as an HF directory (RUN_DIR/final).
    #[arg(long)]
    pub save_final: bool,
    /// Write a resumable checkpoint every this many optimizer steps (and at every epoch end).
    #[arg(long, default_value_t = 50)]
    pub checkpoint_every: usize,
}

impl FinetuneArgs {
    fn connection_spec(&self) -> Result<ConnectionSpec> {
        let mut spec = ConnectionSpec::parse(&self.connection)?;
        if let shared::Connection::Implicit(im) = &mut spec.connection {
            if let Some(t) = self.iterations {
                im.iterations = t;
            }
            if let Some(g) = self.gamma {
                im.gamma = g;
            }
        } else if self.iterations.is_some() || self.gamma.is_some() {
            bail!("--T and --gamma apply to --connection im only");
        }
        if let Some(layers) = &self.im_layers {
            spec.layers = ConnectionSpec::parse(&format!("bert:layers={layers}"))?.layers;
        }
        Ok(spec)
    }

    /// The run's full configuration from the flags.
    pub fn to_config(&self) -> Result<RunConfig> {
        let task: Task = self.task.as_deref().context("--task is required")?.parse()?;
        let data_dir = self.data_dir.clone().unwrap_or_else(datasets::default_data_dir);
        let train_file = match &self.train_file {
            Some(f) => f.clone(),
            None => datasets::train_file(&data_dir, task)?,
        };
        if self.batch_size == 0 || self.grad_accum == 0 || self.epochs == 0 {
            bail!("--batch-size, --grad-accum and --epochs must be positive");
        }
        if !(self.max_grad_norm >= 0.0 && self.max_grad_norm.is_finite()) {
            bail!("--max-grad-norm {} must be a finite number >= 0 (0: no clipping)", self.max_grad_norm);
        }
        if let Some(p) = self.dropout {
            if !(0.0..1.0).contains(&p) {
                bail!("--dropout {p} is outside [0, 1)");
            }
        }
        Ok(RunConfig {
            task: task.name().to_string(),
            model: self.model.display().to_string(),
            connection: self.connection_spec()?.to_spec_string(),
            train_file: train_file.display().to_string(),
            seed: self.seed,
            epochs: self.epochs,
            max_steps: self.max_steps,
            train_samples: self.train_samples,
            val_samples: self.val_samples,
            batch_size: self.batch_size,
            grad_accum: self.grad_accum,
            max_len: self.max_len,
            optimizer: format!("{:?}", self.optimizer).to_lowercase(),
            lr: self.lr,
            weight_decay: self.weight_decay,
            adam_eps: self.adam_eps,
            adam_beta1: self.adam_beta1,
            adam_beta2: self.adam_beta2,
            warmup_ratio: self.warmup_ratio,
            max_grad_norm: (self.max_grad_norm > 0.0).then_some(self.max_grad_norm),
            shuffle: !self.no_shuffle,
            dropout: self.dropout,
            adv: format!("{:?}", self.adv).to_lowercase(),
            adv_epsilon: self.adv_epsilon,
            adv_alpha: self.adv_alpha,
            adv_steps: self.adv_steps,
            adv_tau: if self.adv == AdvKind::Pgd { 0.0 } else { self.adv_tau },
            adv_lambda: self.adv_lambda,
            backend: format!("{:?}", self.backend).to_lowercase(),
            command: std::env::args().collect::<Vec<_>>().join(" "),
        })
    }
}

/// Loop counters saved in every checkpoint (`checkpoint/state.json`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct TrainState {
    /// Optimizer steps taken.
    pub step: usize,
    pub epoch: usize,
    /// Optimizer steps already taken in `epoch`.
    pub step_in_epoch: usize,
    pub best_val_loss: Option<f64>,
    /// Sum and count of the training loss since the last validation.
    pub loss_sum: f64,
    pub loss_count: usize,
    pub elapsed_s: f64,
    pub finished: bool,
}

/// What a finished run reports back (used by `reproduce`).
#[derive(Debug, Clone)]
pub struct TrainSummary {
    pub run_dir: PathBuf,
    pub steps: usize,
    pub best_val_loss: f64,
}

pub fn run(args: FinetuneArgs) -> Result<()> {
    let (config, run_dir, resume) = match &args.resume {
        Some(dir) => (run::read_json::<RunConfig>(&dir.join("config.json"))?, dir.clone(), true),
        None => {
            let config = args.to_config()?;
            let dir = args.out.clone().unwrap_or_else(|| default_run_dir(&config));
            (config, dir, false)
        }
    };
    let kind: BackendKind = serde_json::from_value(serde_json::Value::String(config.backend.clone()))
        .context("backend in config.json")?;
    let options = RunOptions { save_final: args.save_final, checkpoint_every: args.checkpoint_every.max(1), resume };
    let summary = crate::with_backend!(kind, |B, device| {
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
    let conn: String = config.connection.chars().map(|c| if c.is_ascii_alphanumeric() || c == '.' { c } else { '_' }).collect();
    PathBuf::from("runs").join(format!("{}-{}-s{}", config.task, conn, config.seed))
}

/// Settings of one invocation that are not part of the run's definition.
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub save_final: bool,
    pub checkpoint_every: usize,
    pub resume: bool,
}

/// Fine-tunes according to `config`, in `run_dir`.
pub fn train<B: AutodiffBackend>(
    config: &RunConfig,
    run_dir: &Path,
    options: &RunOptions,
    device: &B::Device,
) -> Result<TrainSummary> {
    match config.optimizer.as_str() {
        "adamw" => {
            let optim = AdamW::new(config.adam_beta1 as f32, config.adam_beta2 as f32, config.adam_eps as f32, config.weight_decay as f32)
                .init::<B, BertClassifier<B>>();
            train_with(config, run_dir, options, device, optim)
        }
        "sgd" => train_with(config, run_dir, options, device, SgdConfig::new().init::<B, BertClassifier<B>>()),
        other => bail!("unknown optimizer {other:?}"),
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

/// A batch of examples on the device.
fn to_batch<B: Backend>(
    tokenizer: &BertTokenizer,
    examples: &[&Example],
    max_len: usize,
    device: &B::Device,
) -> Result<(shared::BertInput<B>, Tensor<B, 1, Int>)> {
    let items: Vec<(&str, Option<&str>)> = examples.iter().map(|e| (e.text_a.as_str(), e.text_b.as_deref())).collect();
    let batch = tokenizer.encode(&items, max_len)?;
    let labels: Vec<i64> = examples.iter().map(|e| e.label as i64).collect();
    let labels = Tensor::from_data(TensorData::new(labels, [examples.len()]), device);
    Ok((batch.to_input(device), labels))
}

/// Mixes the run seed and the step into one dropout seed.
fn step_seed(seed: u64, step: usize) -> u64 {
    data::SplitMix64::new(seed ^ (step as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)).next_u64()
}

fn train_with<B: AutodiffBackend, O: Optimizer<BertClassifier<B>, B>>(
    config: &RunConfig,
    run_dir: &Path,
    options: &RunOptions,
    device: &B::Device,
    mut optim: O,
) -> Result<TrainSummary> {
    let task: Task = config.task.parse()?;
    let model_dir = PathBuf::from(&config.model);
    let tokenizer = BertTokenizer::from_dir(&model_dir).context("loading the tokenizer")?;
    // A fresh head is drawn from the backend's RNG: seed it, so every run (and a resumed one)
    // starts from the same weights.
    B::seed(device, config.seed);
    let (mut model, report) = load_for_task::<B>(&model_dir, task.num_labels(), device)
        .with_context(|| format!("loading {}", model_dir.display()))?;
    model.config.id2label =
        Some(task.label_names().iter().enumerate().map(|(i, n)| (i.to_string(), n.to_string())).collect());
    if let Some(p) = config.dropout {
        model.config.hidden_dropout_prob = p;
        model.config.attention_probs_dropout_prob = p;
        model.config.classifier_dropout = Some(p);
    }
    let spec = ConnectionSpec::parse(&config.connection)?;
    let mut model = model.with_connections(&spec)?;
    tokenizer.check_compatible(&model.config)?;
    let max_len = model.max_len(config.max_len);

    // Data: seeded 8:2 split of the training file (or the low-resource subsample).
    let all = data::load(&config.train_file, task).with_context(|| format!("reading {}", config.train_file))?;
    let (train, val) = match config.train_samples {
        Some(n) => data::low_resource_split(all, n, config.val_samples.unwrap_or(n / 2), config.seed),
        None => {
            let (t, v) = data::split_train_validation(all, data::DEFAULT_TRAIN_FRACTION, config.seed);
            match config.val_samples {
                Some(n) => (t, v.into_iter().take(n).collect()),
                None => (t, v),
            }
        }
    };
    if train.is_empty() || val.is_empty() {
        bail!("{}: not enough examples for a train/validation split", config.train_file);
    }
    let per_step = config.batch_size * config.grad_accum;
    let steps_per_epoch = train.len().div_ceil(per_step);
    let total_steps = (steps_per_epoch * config.epochs).min(config.max_steps.unwrap_or(usize::MAX));

    std::fs::create_dir_all(run_dir).with_context(|| format!("creating {}", run_dir.display()))?;
    let checkpoint_dir = run_dir.join("checkpoint");
    let mut state = TrainState::default();
    if options.resume {
        if checkpoint_dir.join("state.json").exists() {
            state = run::read_json(&checkpoint_dir.join("state.json"))?;
            let recorder = NamedMpkFileRecorder::<FullPrecisionSettings>::new();
            model = model
                .load_file(checkpoint_dir.join("model"), &recorder, device)
                .context("loading the checkpointed model")?;
            let record = recorder.load(checkpoint_dir.join("optim"), device).context("loading the optimizer state")?;
            optim = optim.load_record(record);
            truncate_metrics(&run_dir.join("metrics.jsonl"), state.step)?;
        }
        if state.finished {
            log(run_dir, &format!("run already finished at step {}", state.step))?;
            return Ok(summary(run_dir, &state));
        }
        log(run_dir, &format!("resuming at step {} (epoch {})", state.step, state.epoch + 1))?;
    } else {
        if run_dir.join("config.json").exists() {
            bail!("{} already holds a run; use --resume {0} or another --out", run_dir.display());
        }
        run::write_json(&run_dir.join("config.json"), config)?;
        // The exact examples of each side, so other frameworks can replay the run.
        let idx = |v: &[Example]| v.iter().map(|e| e.idx).collect::<Vec<_>>();
        run::write_json(&run_dir.join("split.json"), &serde_json::json!({"train_idx": idx(&train), "val_idx": idx(&val)}))?;
        log(run_dir, &config.command)?;
        log(
            run_dir,
            &format!(
                "{}: {} train / {} validation examples, {} steps ({} per epoch), connection {}",
                task,
                train.len(),
                val.len(),
                total_steps,
                steps_per_epoch,
                config.connection
            ),
        )?;
        for name in &report.initialized_fresh {
            log(run_dir, &format!("{name} initialised fresh"))?;
        }
        check_im_residuals(&model.valid(), &tokenizer, &val, max_len, run_dir, device)?;
    }

    let ce = CrossEntropyLossConfig::new().init(device);
    let progress = indicatif::ProgressBar::new(total_steps as u64).with_position(state.step as u64);
    progress.set_style(
        indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} steps  {msg}  ETA {eta}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let session_start = Instant::now();
    let elapsed_before = state.elapsed_s;
    let mut examples_seen = 0usize;
    let crash_at: Option<usize> = std::env::var("IMBERT_CRASH_AFTER_STEP").ok().and_then(|s| s.parse().ok());

    while state.step < total_steps {
        let mut order: Vec<usize> = (0..train.len()).collect();
        if config.shuffle {
            data::shuffle(&mut order, config.seed.wrapping_add(state.epoch as u64));
        }
        while state.step_in_epoch < steps_per_epoch && state.step < total_steps {
            B::seed(device, step_seed(config.seed, state.step));
            let start = state.step_in_epoch * per_step;
            let mut accumulator = GradientsAccumulator::<BertClassifier<B>>::new();
            for micro in order[start..(start + per_step).min(order.len())].chunks(config.batch_size) {
                let examples: Vec<&Example> = micro.iter().map(|&i| &train[i]).collect();
                let (input, labels) = to_batch::<B>(&tokenizer, &examples, max_len, device)?;
                let loss = if config.adv == "none" {
                    let logits = model.forward(&input, ForwardOptions::default()).logits.context("no classifier")?;
                    ce.forward(logits, labels.clone())
                } else {
                    adversarial_loss(&model, &input, labels.clone(), config)?
                };
                let value: f64 = loss.clone().into_scalar().elem();
                if !value.is_finite() {
                    bail!("{}", diagnose_non_finite(&model, &input, state.step));
                }
                state.loss_sum += value;
                state.loss_count += 1;
                examples_seen += examples.len();
                let loss = loss.div_scalar(config.grad_accum as f64);
                let grads = GradientsParams::from_grads(loss.backward(), &model);
                accumulator.accumulate(&model, grads);
            }
            let lr = learning_rate(config, state.step, total_steps);
            let mut grads = accumulator.grads();
            let norms = grad_norms(&model, &grads);
            if state.step == 0 {
                // Before hours are spent: say where the gradient stands after one batch.
                log(run_dir, &format!("gradient norms at the first step: {}", norms.summary()))?;
                warn_if_exploding(run_dir, &norms, state.step + 1)?;
            }
            if let Some(max_norm) = config.max_grad_norm {
                clip_global_norm(&model, &mut grads, norms.total, max_norm);
            }
            model = optim.step(lr, model, grads);
            state.step += 1;
            state.step_in_epoch += 1;
            let secs = session_start.elapsed().as_secs_f64();
            progress.set_position(state.step as u64);
            progress.set_message(format!(
                "epoch {} loss {:.4} lr {:.2e} {:.1} ex/s",
                state.epoch + 1,
                state.loss_sum / state.loss_count.max(1) as f64,
                lr,
                examples_seen as f64 / secs.max(1e-9)
            ));
            let epoch_done = state.step_in_epoch == steps_per_epoch || state.step == total_steps;
            if epoch_done {
                state.elapsed_s = elapsed_before + secs;
                let speed = examples_seen as f64 / secs.max(1e-9);
                validate(&model, &tokenizer, &val, config, run_dir, &mut state, lr, speed, Some(norms), device)?;
                if state.step_in_epoch == steps_per_epoch {
                    state.epoch += 1;
                    state.step_in_epoch = 0;
                }
            }
            if epoch_done || state.step % options.checkpoint_every == 0 {
                state.elapsed_s = elapsed_before + secs;
                save_checkpoint(&model, &optim, &state, &checkpoint_dir)?;
            }
            if crash_at == Some(state.step) {
                // Test hook: die like kill -9 (no unwinding, no flushing).
                std::process::abort();
            }
        }
    }
    progress.finish_and_clear();
    state.finished = true;
    save_checkpoint(&model, &optim, &state, &checkpoint_dir)?;
    if options.save_final {
        save_classifier(&model, &run_dir.join("final"), Some(&model_dir))?;
        // The last validation measured these weights only if it ran at the last step.
        let metrics_path = run_dir.join("metrics.jsonl");
        let last = if metrics_path.exists() { run::read_jsonl::<EpochMetrics>(&metrics_path)?.pop() } else { None };
        let accuracy = last.filter(|m| m.step == state.step).map(|m| m.val_accuracy);
        write_model_card(&run_dir.join("final"), config, "final", accuracy)?;
    }
    std::fs::write(run_dir.join("done"), format!("{}\n", state.step)).context("writing done")?;
    log(run_dir, &format!("finished: {} steps, best validation loss {:.4}", state.step, state.best_val_loss.unwrap_or(f64::NAN)))?;
    Ok(summary(run_dir, &state))
}

fn summary(run_dir: &Path, state: &TrainState) -> TrainSummary {
    TrainSummary { run_dir: run_dir.to_path_buf(), steps: state.step, best_val_loss: state.best_val_loss.unwrap_or(f64::NAN) }
}

/// Validation loss and accuracy; a new lowest loss saves `best/`.
#[allow(clippy::too_many_arguments)]
fn validate<B: AutodiffBackend>(
    model: &BertClassifier<B>,
    tokenizer: &BertTokenizer,
    val: &[Example],
    config: &RunConfig,
    run_dir: &Path,
    state: &mut TrainState,
    lr: f64,
    examples_per_sec: f64,
    grad_norms: Option<GradNorms>,
    device: &B::Device,
) -> Result<()> {
    if let Some(norms) = &grad_norms {
        log(run_dir, &format!("gradient norms at step {}: {}", state.step, norms.summary()))?;
        warn_if_exploding(run_dir, norms, state.step)?;
    }
    let inference = model.valid();
    let refs: Vec<&Example> = val.iter().collect();
    let p = predict(&inference, tokenizer, &refs, 32, model.max_len(config.max_len), device)?;
    let correct = p.predicted.iter().zip(val).filter(|(p, e)| **p == e.label).count();
    let best = state.best_val_loss.is_none_or(|b| p.loss < b);
    if best {
        state.best_val_loss = Some(p.loss);
        save_classifier(&inference, &run_dir.join("best"), Some(Path::new(&config.model)))?;
        write_model_card(&run_dir.join("best"), config, "best", Some(correct as f64 / val.len() as f64))?;
    }
    let metrics = EpochMetrics {
        epoch: state.epoch + 1,
        step: state.step,
        train_loss: state.loss_sum / state.loss_count.max(1) as f64,
        val_loss: p.loss,
        val_accuracy: correct as f64 / val.len() as f64,
        val_majority_share: Some(evaluate::top_share(&val.iter().map(|e| e.label).collect::<Vec<_>>())),
        val_top_prediction_share: Some(evaluate::top_share(&p.predicted)),
        lr,
        examples_per_sec,
        elapsed_s: state.elapsed_s,
        best,
        grad_norms,
    };
    state.loss_sum = 0.0;
    state.loss_count = 0;
    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(run_dir.join("metrics.jsonl"))?;
    writeln!(file, "{}", serde_json::to_string(&metrics)?)?;
    log(
        run_dir,
        &format!(
            "epoch {} step {}: train loss {:.4}, validation loss {:.4}, accuracy {:.2}%{}",
            metrics.epoch,
            metrics.step,
            metrics.train_loss,
            metrics.val_loss,
            100.0 * metrics.val_accuracy,
            if best { " (best)" } else { "" }
        ),
    )
}

/// The model card next to a saved model: what it is, how it was made, and its accuracy on the
/// run's validation split.
fn write_model_card(dir: &Path, config: &RunConfig, which: &str, val_accuracy: Option<f64>) -> Result<()> {
    let task: Task = config.task.parse()?;
    let mut card = ModelCard::new(
        &config.task,
        task.label_names().iter().map(|s| s.to_string()).collect(),
        &ConnectionSpec::parse(&config.connection)?,
    );
    card.checkpoint = Some(which.to_string());
    card.trained_from = config.model.clone();
    card.command = config.command.clone();
    card.config = serde_json::to_value(config)?;
    if let Some(accuracy) = val_accuracy {
        card.metrics.insert("validation".into(), accuracy);
    }
    run::write_json(&dir.join(shared::bundle::CARD_FILE), &card)
}

fn save_checkpoint<B: AutodiffBackend, O: Optimizer<BertClassifier<B>, B>>(
    model: &BertClassifier<B>,
    optim: &O,
    state: &TrainState,
    dir: &Path,
) -> Result<()> {
    let tmp = dir.with_file_name(format!(".checkpoint.tmp-{}", std::process::id()));
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp)?;
    }
    std::fs::create_dir_all(&tmp)?;
    let recorder = NamedMpkFileRecorder::<FullPrecisionSettings>::new();
    model.clone().save_file(tmp.join("model"), &recorder).context("saving the model checkpoint")?;
    recorder.record(optim.to_record(), tmp.join("optim")).context("saving the optimizer state")?;
    run::write_json(&tmp.join("state.json"), state)?;
    shared::checkpoint::replace_dir(&tmp, dir)?;
    Ok(())
}

/// Drops metric lines written after the checkpoint a resumed run restarts from.
fn truncate_metrics(path: &Path, step: usize) -> Result<()> {
    if !path.exists() {
        return Ok(());
    }
    let kept: Vec<EpochMetrics> = run::read_jsonl::<EpochMetrics>(path)?.into_iter().filter(|m| m.step <= step).collect();
    let text: String = kept.iter().map(|m| serde_json::to_string(m).map(|s| s + "\n")).collect::<Result<_, _>>()?;
    shared::checkpoint::write_atomic(path, text.as_bytes())?;
    Ok(())
}

/// Warns when some part's gradient is `EXPLODING_RATIO` times the head's or more.
fn warn_if_exploding(run_dir: &Path, norms: &GradNorms, step: usize) -> Result<()> {
    let parts = norms.exploding();
    if parts.is_empty() {
        return Ok(());
    }
    warn(
        run_dir,
        &format!(
            "step {step}: the gradient of {} is over {EXPLODING_RATIO}x the head's ({:.2e}): it is exploding through \
             the IM iterations, and in f32 it is rounding noise (docs/numerics.md); grad=detached or grad=frozen \
             in the connection spec keeps it bounded",
            parts.join(", "),
            norms.head
        ),
    )
}

fn log(run_dir: &Path, line: &str) -> Result<()> {
    tracing::info!("{line}");
    append_log(run_dir, line)
}

fn warn(run_dir: &Path, line: &str) -> Result<()> {
    tracing::warn!("{line}");
    append_log(run_dir, &format!("warning: {line}"))
}

fn append_log(run_dir: &Path, line: &str) -> Result<()> {
    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(run_dir.join("log.txt"))?;
    writeln!(file, "{line}")?;
    Ok(())
}

/// What the IM iteration does on the warm-start weights, before any step: each IM layer's
/// `||r||^2` over the iterations, summed over the first validation batch, logged and written to
/// `im_residuals.json`. Where it rises, gamma is too large for that layer (the solve does not
/// converge and amplifies f32 rounding, docs/numerics.md): a warning says so before hours of
/// training rather than after.
fn check_im_residuals<B: Backend>(
    model: &BertClassifier<B>,
    tokenizer: &BertTokenizer,
    val: &[Example],
    max_len: usize,
    run_dir: &Path,
    device: &B::Device,
) -> Result<()> {
    let connections = &model.bert.encoder.connections;
    if !connections.iter().any(|c| matches!(c, shared::Connection::Implicit(_))) {
        return Ok(());
    }
    let examples: Vec<&Example> = val.iter().take(16).collect();
    let (input, _) = to_batch::<B>(tokenizer, &examples, max_len, device)?;
    let out = model.forward(&input, ForwardOptions { im_residuals: true, ..Default::default() });
    let mut layers = Vec::new();
    for (layer, residuals) in &out.im_residuals {
        let shared::Connection::Implicit(im) = connections[*layer] else { continue };
        let norms: Vec<f64> = residuals.iter().map(|r| r.clone().sum().into_scalar().elem()).collect();
        let rises = shared::residual_rises(&norms);
        let trace: Vec<String> = norms.iter().map(|x| format!("{x:.4e}")).collect();
        log(run_dir, &format!("IM layer {layer}: ||r||^2 on {} validation examples: {}", examples.len(), trace.join(" -> ")))?;
        if !rises.is_empty() {
            let after: Vec<String> = rises.iter().map(usize::to_string).collect();
            warn(
                run_dir,
                &format!(
                    "IM layer {layer}: ||r||^2 rose in iteration{} {} of {}: gamma = {} overshoots on this layer, \
                     so the solve does not converge and f32 results depend on rounding (docs/numerics.md); \
                     step=backtrack in the connection spec (or a smaller gamma) descends",
                    if after.len() > 1 { "s" } else { "" },
                    after.join(", "),
                    norms.len() - 1,
                    im.gamma
                ),
            )?;
        }
        layers.push(LayerResidualCheck { layer: *layer, gamma: im.gamma, squared_norms: norms, rises_after_iteration: rises });
    }
    run::write_json(&run_dir.join(run::IM_RESIDUALS_FILE), &ImResidualCheck { examples: examples.len(), layers })
}

/// Finds where a non-finite loss came from: the first layer whose output or IM residual is not
/// finite.
fn diagnose_non_finite<B: Backend>(model: &BertClassifier<B>, input: &shared::BertInput<B>, step: usize) -> String {
    let out = model.forward(input, ForwardOptions { hidden_states: true, im_residuals: true, ..Default::default() });
    let finite = |v: Vec<f32>| v.iter().all(|x| x.is_finite());
    let host = |t: Tensor<B, 1>| t.into_data().convert::<f32>().into_vec::<f32>().unwrap_or_default();
    for (layer, residuals) in &out.im_residuals {
        for (i, r) in residuals.iter().enumerate() {
            if !finite(host(r.clone())) {
                return format!("non-finite IM residual at step {step}: layer {layer}, iteration {i}");
            }
        }
    }
    for (i, h) in out.hidden_states.iter().enumerate() {
        if !finite(host(h.clone().flatten(0, 2))) {
            let what = if i == 0 { "the embeddings".to_string() } else { format!("layer {}", i - 1) };
            return format!("non-finite loss at step {step}: first non-finite hidden state in {what}");
        }
    }
    format!("non-finite loss at step {step} (all hidden states finite: the head or the loss overflowed)")
}

/// CreAT / PGD: one or more ascent steps on a word-embedding perturbation `delta`, maximising the
/// task loss minus `tau` times the cosine similarity of the final encoder states to the clean
/// ones, each step normalised per example and projected onto `||delta||_F <= epsilon`; then
/// `lambda L(x) + (1 - lambda) L(x + delta)`.
fn adversarial_loss<B: AutodiffBackend>(
    model: &BertClassifier<B>,
    input: &shared::BertInput<B>,
    labels: Tensor<B, 1, Int>,
    config: &RunConfig,
) -> Result<Tensor<B, 1>> {
    let device = labels.device();
    let ce = CrossEntropyLossConfig::new().init(&device);
    let clean = model.forward(input, ForwardOptions::default());
    let loss_clean = ce.forward(clean.logits.context("no classifier")?, labels.clone());
    let [batch, seq, hidden] = clean.last_hidden_state.dims();
    let mask = input.attention_mask.clone().float().reshape([batch, seq, 1]); // [b, s, 1]
    let states_clean = clean.last_hidden_state.detach();

    // delta lives outside the graph between steps; CreAT starts from small Gaussian noise.
    let inner_mask = mask.clone().inner();
    let mut delta = Tensor::<B::InnerBackend, 3>::random([batch, seq, hidden], Distribution::Normal(0.0, 1e-5), &device)
        * inner_mask.clone();
    for _ in 0..config.adv_steps {
        let d = Tensor::<B, 3>::from_inner(delta.clone()).require_grad();
        let out = model.forward_perturbed(input, Some(d.clone()), ForwardOptions::default());
        let task_loss = ce.forward(out.logits.context("no classifier")?, labels.clone());
        let cos = token_cosine(out.last_hidden_state, states_clean.clone(), mask.clone());
        let objective = task_loss - cos.mul_scalar(config.adv_tau);
        let grads = objective.backward();
        let g = d.grad(&grads).context("no gradient reached the perturbation")?;
        let g_norm = g.clone().powi_scalar(2).sum_dims(&[1, 2]).sqrt().clamp_min(1e-8); // [b, 1, 1]
        delta = delta + (g / g_norm).mul_scalar(config.adv_alpha);
        let d_norm = delta.clone().powi_scalar(2).sum_dims(&[1, 2]).sqrt().clamp_min(1e-12);
        delta = delta * (d_norm.recip().mul_scalar(config.adv_epsilon)).clamp_max(1.0) * inner_mask.clone();
    }
    let adv = model.forward_perturbed(input, Some(Tensor::from_inner(delta)), ForwardOptions::default());
    let loss_adv = ce.forward(adv.logits.context("no classifier")?, labels);
    Ok(loss_clean.mul_scalar(config.adv_lambda) + loss_adv.mul_scalar(1.0 - config.adv_lambda))
}

/// Mean over real tokens of the cosine similarity of two `[batch, seq, hidden]` states.
fn token_cosine<B: Backend>(a: Tensor<B, 3>, b: Tensor<B, 3>, mask: Tensor<B, 3>) -> Tensor<B, 1> {
    let dot = (a.clone() * b.clone()).sum_dim(2);
    let norms = a.powi_scalar(2).sum_dim(2).sqrt() * b.powi_scalar(2).sum_dim(2).sqrt();
    let cos = dot / norms.clamp_min(1e-8) * mask.clone(); // [b, s, 1]
    cos.sum() / mask.sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(warmup_ratio: f64) -> RunConfig {
        let args = FinetuneArgs::try_parse_from_args(&["--task", "sst2", "--train-file", "x.jsonl"]);
        RunConfig { warmup_ratio, ..args.to_config().unwrap() }
    }

    impl FinetuneArgs {
        fn try_parse_from_args(args: &[&str]) -> Self {
            use clap::Parser;
            #[derive(Parser)]
            struct Wrapper {
                #[command(flatten)]
                inner: FinetuneArgs,
            }
            Wrapper::parse_from(std::iter::once("finetune").chain(args.iter().copied())).inner
        }
    }

    #[test]
    fn defaults_are_the_paper_protocol() {
        let c = config(0.1);
        assert_eq!((c.lr, c.batch_size, c.max_len, c.epochs), (2e-5, 16, 128, 3));
        assert_eq!((c.adam_eps, c.weight_decay, c.optimizer.as_str()), (1e-8, 0.0, "adamw"));
        assert_eq!((c.adv_epsilon, c.adv_alpha, c.adv_steps, c.adv_lambda), (0.1, 0.1, 1, 0.5));
    }

    #[test]
    fn schedule_warms_up_then_decays_like_hf() {
        let c = config(0.1);
        assert_eq!(learning_rate(&c, 0, 100), 0.0);
        assert!((learning_rate(&c, 5, 100) - 1e-5).abs() < 1e-15);
        assert!((learning_rate(&c, 10, 100) - 2e-5).abs() < 1e-15);
        assert!((learning_rate(&c, 55, 100) - 1e-5).abs() < 1e-15);
        assert_eq!(learning_rate(&c, 100, 100), 0.0);
        let flat = config(0.0);
        assert_eq!(learning_rate(&flat, 0, 10), 2e-5);
    }

    #[test]
    fn connection_flags_build_a_spec() {
        let a = FinetuneArgs::try_parse_from_args(&[
            "--task", "rte", "--train-file", "x", "--connection", "im", "--T", "3", "--gamma", "0.2", "--im-layers", "1-2",
        ]);
        assert_eq!(a.to_config().unwrap().connection, "im:T=3,gamma=0.2,layers=1-2");
        let bad = FinetuneArgs::try_parse_from_args(&["--task", "rte", "--train-file", "x", "--T", "3"]);
        assert!(bad.to_config().is_err());
    }
}
