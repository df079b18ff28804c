//! Resumable checkpoints: the model, the optimizer state and the loop counters.

use std::path::Path;

use anyhow::{Context, Result};
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
        .context("loading the checkpointed model")?;
    let record = recorder.load(dir.join("optim"), device).context("loading the optimizer state")?;
    let optim = optim.load_record(record);
    truncate_metrics(metrics_path, state.step)?;
    Ok((state, model, optim))
}

pub(super) fn save_checkpoint<B: AutodiffBackend, O: Optimizer<BertClassifier<B>, B>>(
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
    shared::io::checkpoint::replace_dir(&tmp, dir)?;
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
    shared::io::checkpoint::write_atomic(path, text.as_bytes())?;
    Ok(())
}
