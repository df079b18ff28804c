//! The training loop: the model and data a run starts from, one optimizer step after another,
//! validation at every epoch's end, checkpoints along the way.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use burn::module::AutodiffModule;
use burn::optim::{GradientsAccumulator, GradientsParams, Optimizer};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{ElementConversion, Int, Tensor, TensorData};
use shared::data::{self, Example, Task};
use shared::io::checkpoint::{load_for_task, save_classifier};
use shared::{BertClassifier, BertTokenizer};

use super::adversarial::training_loss;
use super::checkpoint::{
    check_state, find_checkpoint, refuse_lost_progress, restore_checkpoint, save_checkpoint,
    TrainState,
};
use super::diagnostics::{check_im_residuals, diagnose_non_finite};
use super::logging::{log, warn_if_exploding, Progress};
use super::validation::{validate, write_model_card};
use super::{learning_rate, summary, RunOptions, TrainSummary};
use crate::grad_norms::{clip_global_norm, grad_norms, GradNorms};
use crate::run::{self, EpochMetrics, RunConfig};

/// What a run trains on besides the model: its tokenizer, data and schedule.
struct Setup {
    model_dir: PathBuf,
    tokenizer: BertTokenizer,
    /// Weights the warm start lacked (the task head), initialised fresh.
    initialized_fresh: Vec<String>,
    max_len: usize,
    train: Vec<Example>,
    val: Vec<Example>,
    steps_per_epoch: usize,
    total_steps: usize,
}

/// Fine-tunes `config` in `run_dir` with `optim`, from scratch or from its last checkpoint.
pub(super) fn train_with<B: AutodiffBackend, O: Optimizer<BertClassifier<B>, B>>(
    config: &RunConfig,
    run_dir: &Path,
    options: &RunOptions,
    device: &B::Device,
    optim: O,
) -> Result<TrainSummary> {
    let (setup, model) = prepare::<B>(config, device)?;
    let (state, model, optim) =
        start_or_resume(config, run_dir, options, &setup, model, optim, device)?;
    if state.finished {
        log(run_dir, &format!("run already finished at step {}", state.step))?;
        return Ok(summary(run_dir, &state));
    }
    let mut trainer = Trainer {
        progress: Progress::new(setup.total_steps, state.step, options.progress_every),
        elapsed_before: state.elapsed_s,
        session_start: Instant::now(),
        examples_seen: 0,
        config,
        run_dir,
        options,
        setup,
        device,
        optim,
        state,
    };
    let model = trainer.run_epochs(model)?;
    trainer.finish(model)
}

/// Loads the warm start with the run's dropout and connections, and splits the data.
fn prepare<B: Backend>(
    config: &RunConfig,
    device: &B::Device,
) -> Result<(Setup, BertClassifier<B>)> {
    let (tokenizer, model, initialized_fresh) = warm_start::<B>(config, device)?;
    let max_len = model.max_len(config.max_len);
    let (train, val) = split_data(config, config.task)?;
    let steps_per_epoch = train.len().div_ceil(config.batch_size * config.grad_accum);
    let total_steps = (steps_per_epoch * config.epochs).min(config.max_steps.unwrap_or(usize::MAX));
    let setup = Setup {
        model_dir: config.resolve(&config.model),
        tokenizer,
        initialized_fresh,
        max_len,
        train,
        val,
        steps_per_epoch,
        total_steps,
    };
    Ok((setup, model))
}

/// The run's tokenizer and its warm start: the pretrained model with the run's dropout and
/// connections and the task's head, seeded by the run's seed where the head is drawn fresh
/// (also the names of the weights drawn fresh).
pub(crate) fn warm_start<B: Backend>(
    config: &RunConfig,
    device: &B::Device,
) -> Result<(BertTokenizer, BertClassifier<B>, Vec<String>)> {
    let task = config.task;
    let model_dir = config.resolve(&config.model);
    let tokenizer = BertTokenizer::from_dir(&model_dir).context("loading the tokenizer")?;
    // A fresh head is drawn from the backend's RNG: seed it, so every run (and a resumed one)
    // starts from the same weights.
    B::seed(device, config.seed);
    let (mut model, report) = load_for_task::<B>(&model_dir, task.num_labels(), device)
        .with_context(|| format!("loading {}", model_dir.display()))?;
    model.config.id2label = Some(
        task.label_names()
            .iter()
            .enumerate()
            .map(|(i, n)| (i.to_string(), n.to_string()))
            .collect(),
    );
    if let Some(p) = config.dropout {
        model.config.hidden_dropout_prob = p;
        model.config.attention_probs_dropout_prob = p;
        model.config.classifier_dropout = Some(p);
    }
    let model = model.with_connections(&config.connection)?;
    tokenizer.check_compatible(&model.config)?;
    Ok((tokenizer, model, report.initialized_fresh))
}

/// The seeded 8:2 split of the training file, or the low-resource subsample.
pub(crate) fn split_data(config: &RunConfig, task: Task) -> Result<(Vec<Example>, Vec<Example>)> {
    let path = config.resolve(&config.train_file);
    let all = data::load(&path, task)?;
    let n_all = all.len();
    let (train, val) = match config.train_samples {
        Some(n) => {
            data::low_resource_split(all, n, config.val_samples.unwrap_or(n / 2), config.seed)
        }
        None => {
            let (t, v) =
                data::split_train_validation(all, data::DEFAULT_TRAIN_FRACTION, config.seed);
            match config.val_samples {
                Some(n) => (t, v.into_iter().take(n).collect()),
                None => (t, v),
            }
        }
    };
    if train.is_empty() || val.is_empty() {
        bail!(
            "{}: {} for a train and a validation split ({} + {} drawn)",
            path.display(),
            if n_all == 0 {
                "no examples (only a header?)".to_string()
            } else {
                format!("{n_all} examples are not enough")
            },
            train.len(),
            val.len()
        );
    }
    Ok((train, val))
}

/// A resumed run restores its checkpoint (if it wrote one). A new run writes its config, its
/// exact split and its first log lines, and checks the IM residuals before any step.
fn start_or_resume<B: AutodiffBackend, O: Optimizer<BertClassifier<B>, B>>(
    config: &RunConfig,
    run_dir: &Path,
    options: &RunOptions,
    setup: &Setup,
    model: BertClassifier<B>,
    optim: O,
    device: &B::Device,
) -> Result<(TrainState, BertClassifier<B>, O)> {
    std::fs::create_dir_all(run_dir).with_context(|| format!("creating {}", run_dir.display()))?;
    if options.resume {
        let (state, model, optim) = match find_checkpoint(run_dir)? {
            Some(dir) => {
                let metrics = run_dir.join("metrics.jsonl");
                let (state, model, optim) =
                    restore_checkpoint(&dir, &metrics, model, optim, device)?;
                check_state(&state, setup.steps_per_epoch, setup.total_steps)
                    .with_context(|| format!("{}", dir.join("state.json").display()))?;
                (state, model, optim)
            }
            None => {
                refuse_lost_progress(run_dir)?;
                log(run_dir, "no checkpoint yet: training from step 0")?;
                (TrainState::default(), model, optim)
            }
        };
        if !state.finished {
            log(run_dir, &format!("resuming at step {} (epoch {})", state.step, state.epoch + 1))?;
        }
        return Ok((state, model, optim));
    }
    if run_dir.join("config.json").exists() {
        bail!("{} already holds a run; use --resume {0} or another --out", run_dir.display());
    }
    run::write_json(&run_dir.join("config.json"), config)?;
    // The exact examples of each side, so other frameworks can replay the run.
    let idx = |v: &[Example]| v.iter().map(|e| e.idx).collect::<Vec<_>>();
    let split = serde_json::json!({"train_idx": idx(&setup.train), "val_idx": idx(&setup.val)});
    run::write_json(&run_dir.join("split.json"), &split)?;
    log(run_dir, &config.command)?;
    log(
        run_dir,
        &format!(
            "{}: {} train / {} validation examples, {} steps ({} per epoch), connection {}",
            config.task,
            setup.train.len(),
            setup.val.len(),
            setup.total_steps,
            setup.steps_per_epoch,
            config.connection
        ),
    )?;
    for name in &setup.initialized_fresh {
        log(run_dir, &format!("{name} initialised fresh"))?;
    }
    for note in config.connection.notes() {
        log(run_dir, &note)?;
    }
    check_im_residuals(
        &model.valid(),
        &setup.tokenizer,
        &setup.val,
        setup.max_len,
        run_dir,
        device,
    )?;
    Ok((TrainState::default(), model, optim))
}

/// A run in progress: everything a step needs but the model, which each step consumes and
/// returns (the optimizer updates it in place only when it holds the only reference).
struct Trainer<'a, B: AutodiffBackend, O> {
    config: &'a RunConfig,
    run_dir: &'a Path,
    options: &'a RunOptions,
    setup: Setup,
    device: &'a B::Device,
    optim: O,
    state: TrainState,
    progress: Progress,
    /// Training time of earlier sessions of a resumed run.
    elapsed_before: f64,
    session_start: Instant,
    /// Examples trained on in this session.
    examples_seen: usize,
}

impl<B: AutodiffBackend, O: Optimizer<BertClassifier<B>, B>> Trainer<'_, B, O> {
    /// Steps until the schedule ends; the data order depends only on (seed, epoch), so a
    /// resumed run continues the epoch it was in.
    fn run_epochs(&mut self, mut model: BertClassifier<B>) -> Result<BertClassifier<B>> {
        let crash_at = super::checkpoint::crash_hook("IMBERT_CRASH_AFTER_STEP");
        let per_step = self.config.batch_size * self.config.grad_accum;
        let total_steps = self.setup.total_steps;
        while self.state.step < total_steps {
            let epoch = self.state.epoch;
            let mut order: Vec<usize> = (0..self.setup.train.len()).collect();
            if self.config.shuffle {
                data::shuffle(&mut order, self.config.seed.wrapping_add(epoch as u64));
            }
            // `after_step` moves the state to the next epoch at this one's last step; the next
            // epoch then draws its own order. (Until 2026-12-04 this loop tested only the step
            // within the epoch, which `after_step` had just reset, so every epoch repeated the
            // first one's order, and a run resumed in a later epoch did not.)
            while self.state.epoch == epoch && self.state.step < total_steps {
                B::seed(self.device, step_seed(self.config.seed, self.state.step));
                let start = self.state.step_in_epoch * per_step;
                let (next, lr, norms) =
                    self.optimizer_step(model, &order[start..(start + per_step).min(order.len())])?;
                model = next;
                self.after_step(&model, lr, norms)?;
                if crash_at == Some(self.state.step) {
                    // Test hook: die like kill -9 (no unwinding, no flushing).
                    std::process::abort();
                }
            }
        }
        Ok(model)
    }

    /// One optimizer step over the training examples `batch`: its micro-batches accumulate
    /// their gradients (each loss divided by `grad_accum`), which are clipped if asked and
    /// applied at the scheduled learning rate. Returns the model, the rate and the norms.
    fn optimizer_step(
        &mut self,
        model: BertClassifier<B>,
        batch: &[usize],
    ) -> Result<(BertClassifier<B>, f64, GradNorms)> {
        let mut accumulator = GradientsAccumulator::<BertClassifier<B>>::new();
        for micro in batch.chunks(self.config.batch_size) {
            let examples: Vec<&Example> = micro.iter().map(|&i| &self.setup.train[i]).collect();
            let (loss, value) = self.micro_batch_loss(&model, &examples)?;
            self.state.loss_sum += value;
            self.state.loss_count += 1;
            self.examples_seen += examples.len();
            let loss = loss.div_scalar(self.config.grad_accum as f64);
            let grads = GradientsParams::from_grads(loss.backward(), &model);
            accumulator.accumulate(&model, grads);
        }
        let lr = learning_rate(self.config, self.state.step, self.setup.total_steps);
        let mut grads = accumulator.grads();
        let norms = grad_norms(&model, &grads);
        if self.state.step == 0 {
            // Before hours are spent: say where the gradient stands after one batch.
            log(self.run_dir, &format!("gradient norms at the first step: {}", norms.summary()))?;
            warn_if_exploding(self.run_dir, &norms, self.state.step + 1)?;
        }
        if let Some(max_norm) = self.config.max_grad_norm {
            clip_global_norm(&model, &mut grads, norms.total, max_norm);
        }
        let model = self.optim.step(lr, model, grads);
        self.state.step += 1;
        self.state.step_in_epoch += 1;
        Ok((model, lr, norms))
    }

    /// The loss of one micro-batch, plain or adversarial, as a tensor and a number; a
    /// non-finite loss ends the run with where it came from.
    fn micro_batch_loss(
        &self,
        model: &BertClassifier<B>,
        examples: &[&Example],
    ) -> Result<(Tensor<B, 1>, f64)> {
        let (input, labels) =
            to_batch::<B>(&self.setup.tokenizer, examples, self.setup.max_len, self.device)?;
        let loss = training_loss(model, &input, labels, self.config)?;
        let value: f64 = loss.clone().into_scalar().elem();
        if !value.is_finite() {
            bail!("{}", diagnose_non_finite(model, &input, self.state.step));
        }
        Ok((loss, value))
    }

    /// Progress after every step; validation at an epoch's end; a checkpoint then and every
    /// `checkpoint_every` steps.
    fn after_step(&mut self, model: &BertClassifier<B>, lr: f64, norms: GradNorms) -> Result<()> {
        let secs = self.session_start.elapsed().as_secs_f64();
        let speed = self.examples_seen as f64 / secs.max(1e-9);
        let train_loss = self.state.loss_sum / self.state.loss_count.max(1) as f64;
        self.progress.update(self.state.step, self.state.epoch + 1, train_loss, lr, speed);
        let epoch_done = self.state.step_in_epoch == self.setup.steps_per_epoch
            || self.state.step == self.setup.total_steps;
        if epoch_done {
            self.state.elapsed_s = self.elapsed_before + secs;
            let setup = &self.setup;
            let (config, run_dir, state) = (self.config, self.run_dir, &mut self.state);
            validate(
                model,
                &setup.tokenizer,
                &setup.val,
                config,
                run_dir,
                state,
                lr,
                speed,
                Some(norms),
                self.device,
            )?;
            if self.state.step_in_epoch == self.setup.steps_per_epoch {
                self.state.epoch += 1;
                self.state.step_in_epoch = 0;
            }
        }
        if epoch_done || self.state.step.is_multiple_of(self.options.checkpoint_every) {
            self.state.elapsed_s = self.elapsed_before + secs;
            save_checkpoint(model, &self.optim, &self.state, &self.run_dir.join("checkpoint"))?;
        }
        Ok(())
    }

    /// The last checkpoint (marked finished), `final/` if asked, `done`, and the summary.
    fn finish(mut self, model: BertClassifier<B>) -> Result<TrainSummary> {
        let run_dir = self.run_dir;
        self.progress.finish();
        self.state.finished = true;
        save_checkpoint(&model, &self.optim, &self.state, &run_dir.join("checkpoint"))?;
        if self.config.save_final {
            save_classifier(&model, &run_dir.join("final"), Some(&self.setup.model_dir))?;
            // The last validation measured these weights only if it ran at the last step.
            let metrics_path = run_dir.join("metrics.jsonl");
            let last = if metrics_path.exists() {
                run::read_jsonl::<EpochMetrics>(&metrics_path)?.pop()
            } else {
                None
            };
            let accuracy = last.filter(|m| m.step == self.state.step).map(|m| m.val_accuracy);
            write_model_card(&run_dir.join("final"), self.config, "final", accuracy)?;
        }
        std::fs::write(run_dir.join("done"), format!("{}\n", self.state.step))
            .context("writing done")?;
        let best = self.state.best_val_loss.unwrap_or(f64::NAN);
        log(
            run_dir,
            &format!("finished: {} steps, best validation loss {best:.4}", self.state.step),
        )?;
        Ok(summary(run_dir, &self.state))
    }
}

/// A batch of examples on the device.
pub(crate) fn to_batch<B: Backend>(
    tokenizer: &BertTokenizer,
    examples: &[&Example],
    max_len: usize,
    device: &B::Device,
) -> Result<(shared::BertInput<B>, Tensor<B, 1, Int>)> {
    let items: Vec<(&str, Option<&str>)> =
        examples.iter().map(|e| (e.text_a.as_str(), e.text_b.as_deref())).collect();
    let batch = tokenizer.encode(&items, max_len)?;
    let labels: Vec<i64> = examples.iter().map(|e| e.label as i64).collect();
    let labels = Tensor::from_data(TensorData::new(labels, [examples.len()]), device);
    Ok((batch.to_input(device), labels))
}

/// Mixes the run seed and the step into one dropout seed.
fn step_seed(seed: u64, step: usize) -> u64 {
    shared::rng::SplitMix64::new(seed ^ (step as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15))
        .next_u64()
}
