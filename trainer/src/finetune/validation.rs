//! Validation at the end of every epoch: loss and accuracy to `metrics.jsonl` and the log, and
//! `best/` (with its model card) whenever the validation loss is the lowest so far.

use std::io::Write;
use std::path::Path;

use anyhow::Result;
use burn::module::AutodiffModule;
use burn::tensor::backend::AutodiffBackend;
use shared::data::Example;
use shared::io::bundle::ModelCard;
use shared::io::checkpoint::save_classifier;
use shared::{BertClassifier, BertTokenizer};

use super::checkpoint::TrainState;
use super::logging::{log, warn_if_exploding};
use crate::evaluate;
use crate::grad_norms::GradNorms;
use crate::predict::predict;
use crate::run::{self, EpochMetrics, RunConfig};

/// Validation loss and accuracy; a new lowest loss saves `best/`.
#[allow(clippy::too_many_arguments)]
pub(super) fn validate<B: AutodiffBackend>(
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
        save_classifier(&inference, &run_dir.join("best"), Some(&config.resolve(&config.model)))?;
        write_model_card(
            &run_dir.join("best"),
            config,
            "best",
            Some(correct as f64 / val.len() as f64),
        )?;
    }
    let metrics = EpochMetrics {
        epoch: state.epoch + 1,
        step: state.step,
        train_loss: state.loss_sum / state.loss_count.max(1) as f64,
        val_loss: p.loss,
        val_accuracy: correct as f64 / val.len() as f64,
        val_majority_share: Some(evaluate::top_share(
            &val.iter().map(|e| e.label).collect::<Vec<_>>(),
        )),
        val_top_prediction_share: Some(evaluate::top_share(&p.predicted)),
        lr,
        examples_per_sec,
        elapsed_s: state.elapsed_s,
        best,
        grad_norms,
    };
    state.loss_sum = 0.0;
    state.loss_count = 0;
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(run_dir.join("metrics.jsonl"))?;
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
pub(super) fn write_model_card(
    dir: &Path,
    config: &RunConfig,
    which: &str,
    val_accuracy: Option<f64>,
) -> Result<()> {
    let task = config.task;
    let mut card = ModelCard::new(
        config.task.name(),
        task.label_names().iter().map(|s| s.to_string()).collect(),
        &config.connection,
    );
    card.checkpoint = Some(which.to_string());
    card.trained_from = config.model.clone();
    card.command = config.command.clone();
    card.config = serde_json::to_value(config)?;
    if let Some(accuracy) = val_accuracy {
        card.metrics.insert("validation".into(), accuracy);
    }
    run::write_json(&dir.join(shared::io::bundle::CARD_FILE), &card)
}
