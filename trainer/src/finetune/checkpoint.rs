//! Resumable checkpoints: the model, the optimizer state and the loop counters.

use std::path::{Path, PathBuf};

use anyhow::{bail, ensure, Context, Result};
use burn::module::Module;
use burn::optim::Optimizer;
use burn::record::{FullPrecisionSettings, NamedMpkFileRecorder, Recorder};
use burn::tensor::backend::AutodiffBackend;
use serde::{Deserialize, Serialize};
use shared::BertClassifier;

use crate::run::{self, EpochMetrics};

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

/// Loads the checkpoint in `dir` into `model` and `optim`, and drops the metric lines written
/// after it.
pub(super) fn restore_checkpoint<B: AutodiffBackend, O: Optimizer<BertClassifier<B>, B>>(
    dir: &Path,
    metrics_path: &Path,
    model: BertClassifier<B>,
    optim: O,
    device: &B::Device,
) -> Result<(TrainState, BertClassifier<B>, O)> {
    let state: TrainState = run::read_json(&dir.join("state.json"))?;
    let recorder = NamedMpkFileRecorder::<FullPrecisionSettings>::new();
    let model = model
        .load_file(dir.join("model"), &recorder, device)
        .map_err(|e| damaged(&dir.join("model.mpk"), e))?;
    let record =
        recorder.load(dir.join("optim"), device).map_err(|e| damaged(&dir.join("optim.mpk"), e))?;
    let optim = optim.load_record(record);
    truncate_metrics(metrics_path, state.step)?;
    Ok((state, model, optim))
}

/// A checkpoint file burn could not read. Checkpoints are replaced whole (written aside, then
/// renamed), so a file that does not load was cut or changed after it was written: say that,
/// rather than burn's guess that its format changed.
fn damaged(path: &Path, error: burn::record::RecorderError) -> anyhow::Error {
    let detail = match std::fs::metadata(path) {
        Err(_) => "it is missing".to_string(),
        Ok(m) => format!("{} bytes, truncated or not a checkpoint this trainer wrote", m.len()),
    };
    let first_line = error.to_string().lines().next().unwrap_or_default().to_string();
    anyhow::anyhow!(
        "cannot read {} ({detail}; burn: {first_line}): restore it, or start the run again with \
         another --out",
        path.display()
    )
}

pub(super) fn save_checkpoint<B: AutodiffBackend, O: Optimizer<BertClassifier<B>, B>>(
    model: &BertClassifier<B>,
    optim: &O,
    state: &TrainState,
    dir: &Path,
) -> Result<()> {
    let tmp = shared::io::atomic::sibling(dir, "tmp");
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp)?;
    }
    std::fs::create_dir_all(&tmp)?;
    let recorder = NamedMpkFileRecorder::<FullPrecisionSettings>::new();
    model.clone().save_file(tmp.join("model"), &recorder).context("saving the model checkpoint")?;
    if crash_hook("IMBERT_CRASH_IN_CHECKPOINT_AT_STEP") == Some(state.step) {
        // Test hook: die half-way through writing a checkpoint.
        std::process::abort();
    }
    recorder.record(optim.to_record(), tmp.join("optim")).context("saving the optimizer state")?;
    run::write_json(&tmp.join("state.json"), state)?;
    shared::io::atomic::replace_dir(&tmp, dir)?;
    Ok(())
}

/// The step a test hook in `name` asks the run to die at.
pub(super) fn crash_hook(name: &str) -> Option<usize> {
    std::env::var(name).ok().and_then(|s| s.parse().ok())
}

/// The checkpoint a resumed run continues from: `checkpoint/`, or the previous one when a kill
/// landed between the two renames that replace it (the previous one moved aside, the new one
/// not yet in place). Leftovers of killed writes are removed. `None` if the run never wrote one.
pub(super) fn find_checkpoint(run_dir: &Path) -> Result<Option<PathBuf>> {
    let dir = run_dir.join("checkpoint");
    shared::io::atomic::recover_dir(&dir)?;
    if dir.exists() {
        ensure!(
            dir.join("state.json").is_file(),
            "{} has no state.json: the checkpoint is damaged; start the run again with another \
             --out",
            dir.display()
        );
    }
    Ok(dir.exists().then_some(dir))
}

/// Refuses a run whose checkpoint is gone although it trained (it validated, or finished):
/// starting it over would silently replace what it had.
pub(super) fn refuse_lost_progress(run_dir: &Path) -> Result<()> {
    let metrics = run_dir.join("metrics.jsonl");
    let validated = std::fs::read_to_string(&metrics).is_ok_and(|t| !t.trim().is_empty());
    if validated || run_dir.join("done").exists() {
        bail!(
            "{} has trained (see {}) but holds no checkpoint/: it was removed, so the run cannot \
             resume; restore checkpoint/, or start the run again with another --out",
            run_dir.display(),
            metrics.display()
        );
    }
    Ok(())
}

/// Checks that a checkpoint's counters fit the run's schedule (a `state.json` edited or copied
/// from another run would otherwise resume past the end, or mid-way into the wrong epoch).
pub(super) fn check_state(
    state: &TrainState,
    steps_per_epoch: usize,
    total_steps: usize,
) -> Result<()> {
    let fits = state.step <= total_steps
        && state.step_in_epoch < steps_per_epoch
        && state.step == state.epoch * steps_per_epoch + state.step_in_epoch
        && (!state.finished || state.step == total_steps)
        && state.best_val_loss.is_none_or(f64::is_finite);
    ensure!(
        fits,
        "step {} (epoch {}, step {} in it, finished: {}) does not fit this run's schedule of {} \
         steps, {} per epoch: the checkpoint belongs to another run or was edited",
        state.step,
        state.epoch + 1,
        state.step_in_epoch,
        state.finished,
        total_steps,
        steps_per_epoch
    );
    Ok(())
}

/// Drops metric lines written after the checkpoint a resumed run restarts from.
pub(super) fn truncate_metrics(path: &Path, step: usize) -> Result<()> {
    if !path.exists() {
        return Ok(());
    }
    let kept: Vec<EpochMetrics> =
        run::read_jsonl::<EpochMetrics>(path)?.into_iter().filter(|m| m.step <= step).collect();
    let text: String = kept
        .iter()
        .map(|m| serde_json::to_string(m).map(|s| s + "\n"))
        .collect::<Result<_, _>>()?;
    shared::io::atomic::write_atomic(path, text.as_bytes())?;
    Ok(())
}
