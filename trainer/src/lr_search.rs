//! `trainer lr-search`: fine-tune the same run at several learning rates and pick one on the
//! validation split only (lowest validation loss, as the paper keeps its best model).
//!
//! Warm-started EX- and IM-BERT often sit at chance with the paper's 2e-5 on small models, where
//! plain BERT learns fine; this makes finding a rate that works a single resumable command. GLUE
//! dev and AdvGLUE are never read: they are the test sets.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Args;
use serde::{Deserialize, Serialize};

use crate::evaluate;
use crate::finetune::{self, FinetuneArgs};
use crate::run::{self, EpochMetrics};

#[derive(Args, Debug, Clone)]
pub struct LrSearchArgs {
    /// Learning rates to try (comma-separated); each gets its own run `OUT/lr-<rate>-<settings>`,
    /// where `<settings>` is a hash of every other setting.
    #[arg(long, value_delimiter = ',', default_value = "2e-5,5e-5,1e-4,2e-4")]
    pub lrs: Vec<f64>,
    /// Every `finetune` flag except `--lr`, `--resume` and `--save-final`; `--out` is the search
    /// directory (required).
    #[command(flatten)]
    pub finetune: FinetuneArgs,
}

/// One learning rate's outcome on the validation split.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Trial {
    pub lr: f64,
    pub run_dir: PathBuf,
    /// The epoch with the lowest validation loss, and what it scored.
    pub best_epoch: usize,
    pub val_loss: f64,
    pub val_accuracy: f64,
    pub val_majority_share: Option<f64>,
    pub val_top_prediction_share: Option<f64>,
    /// Why this run counts as not having learned (the `eval` rule), if it does.
    pub near_chance: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Search {
    pub trials: Vec<Trial>,
    /// The learning rate with the lowest validation loss.
    pub chosen_lr: f64,
}

pub fn run(args: LrSearchArgs) -> Result<()> {
    let base = &args.finetune;
    if base.resume.is_some() || base.save_final {
        bail!(
            "lr-search resumes by itself: run the same command again (no --resume / --save-final)"
        );
    }
    if base.lr != 2e-5 {
        bail!("lr-search takes its rates from --lrs, not --lr");
    }
    if args.lrs.iter().any(|lr| !(lr.is_finite() && *lr > 0.0)) {
        bail!("--lrs must be positive numbers, got {:?}", args.lrs);
    }
    let out = base.out.clone().context("lr-search needs --out DIR (the search directory)")?;
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;

    let mut trials = Vec::new();
    for (i, &lr) in args.lrs.iter().enumerate() {
        let mut flags = base.clone();
        flags.lr = lr;
        let dir = out.join(run_name(&flags)?);
        println!("[{}/{}] lr {lr:e} -> {}", i + 1, args.lrs.len(), dir.display());
        if !dir.join("done").exists() {
            flags.out = Some(dir.clone());
            // A run with a config.json was started before: continue it from its checkpoint.
            if dir.join("config.json").exists() {
                flags.resume = Some(dir.clone());
            }
            finetune::run(flags).with_context(|| format!("learning rate {lr:e}"))?;
        }
        trials.push(trial(lr, &dir)?);
    }
    let search = choose(trials)?;
    run::write_json(&out.join("search.json"), &search)?;
    let table = markdown(&search);
    shared::io::atomic::write_atomic(&out.join("search.md"), table.as_bytes())?;
    println!("\n{table}");
    Ok(())
}

/// `lr-<rate>-<settings>`: `<settings>` is 8 hex digits of a hash of the run's whole
/// configuration (but the command line and the directory it ran in), so that a search re-run
/// with another seed, step budget, model or any other setting trains new runs instead of
/// reporting the old ones, while the same command finds and resumes its own.
fn run_name(flags: &FinetuneArgs) -> Result<String> {
    let mut config = serde_json::to_value(flags.to_config()?)?;
    if let Some(fields) = config.as_object_mut() {
        fields.remove("command");
        fields.remove("started_in");
    }
    let mut hasher = fnv::FnvHasher::default();
    std::hash::Hasher::write(&mut hasher, config.to_string().as_bytes());
    let settings = std::hash::Hasher::finish(&hasher) as u32;
    Ok(format!("lr-{:e}-{settings:08x}", flags.lr))
}

/// Reads one finished run's validation history.
fn trial(lr: f64, dir: &Path) -> Result<Trial> {
    let path = dir.join("metrics.jsonl");
    let metrics: Vec<EpochMetrics> = run::read_jsonl(&path)?;
    Trial::from_metrics(lr, dir, &metrics)
        .with_context(|| format!("{}: no validation recorded", path.display()))
}

impl Trial {
    /// The trial of a run at `lr` whose validations are `metrics`; `source` is its run directory
    /// or committed summary. `None` when nothing was validated.
    pub fn from_metrics(lr: f64, source: &Path, metrics: &[EpochMetrics]) -> Option<Trial> {
        let best = metrics.iter().min_by(|a, b| a.val_loss.total_cmp(&b.val_loss))?;
        let near_chance = match (best.val_majority_share, best.val_top_prediction_share) {
            (Some(majority), Some(top)) => evaluate::near_chance(best.val_accuracy, majority, top),
            _ => None,
        };
        Some(Trial {
            lr,
            run_dir: source.to_path_buf(),
            best_epoch: best.epoch,
            val_loss: best.val_loss,
            val_accuracy: best.val_accuracy,
            val_majority_share: best.val_majority_share,
            val_top_prediction_share: best.val_top_prediction_share,
            near_chance,
        })
    }
}

/// Picks the lowest validation loss.
pub fn choose(trials: Vec<Trial>) -> Result<Search> {
    let chosen_lr = trials
        .iter()
        .filter(|t| t.val_loss.is_finite())
        .min_by(|a, b| a.val_loss.total_cmp(&b.val_loss))
        .context("no learning rate gave a finite validation loss")?
        .lr;
    Ok(Search { trials, chosen_lr })
}

pub fn markdown(search: &Search) -> String {
    let pct = |x: Option<f64>| x.map_or("n/a".to_string(), |v| format!("{:.1}%", 100.0 * v));
    let mut s = String::from(
        "| lr | best epoch | val loss | val accuracy | majority label | top prediction | |\n\
         |---|---|---|---|---|---|---|\n",
    );
    for t in &search.trials {
        let chosen = (t.lr == search.chosen_lr).then_some("chosen".to_string());
        let chance = t.near_chance.as_ref().map(|why| format!("did not learn: {why}"));
        let note = [chosen, chance].into_iter().flatten().collect::<Vec<_>>().join("; ");
        s.push_str(&format!(
            "| {:e} | {} | {:.4} | {:.1}% | {} | {} | {} |\n",
            t.lr,
            t.best_epoch,
            t.val_loss,
            100.0 * t.val_accuracy,
            pct(t.val_majority_share),
            pct(t.val_top_prediction_share),
            note
        ));
    }
    s.push_str(&format!(
        "\nChosen on the validation split (lowest loss): lr {:e}.\n",
        search.chosen_lr
    ));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(lr: f64, loss: f64, acc: f64) -> Trial {
        Trial {
            lr,
            run_dir: PathBuf::new(),
            best_epoch: 1,
            val_loss: loss,
            val_accuracy: acc,
            val_majority_share: Some(0.52),
            val_top_prediction_share: Some(0.6),
            near_chance: evaluate::near_chance(acc, 0.52, 0.6),
        }
    }

    #[test]
    fn lowest_finite_validation_loss_wins_and_chance_runs_are_marked() {
        let search =
            choose(vec![t(2e-5, 0.69, 0.53), t(1e-4, 0.41, 0.84), t(2e-4, f64::NAN, 0.5)]).unwrap();
        assert_eq!(search.chosen_lr, 1e-4);
        let md = markdown(&search);
        assert!(md.contains("| 2e-5 | 1 | 0.6900 | 53.0% | 52.0% | 60.0% | did not learn"), "{md}");
        assert!(md.contains("| 1e-4 | 1 | 0.4100 | 84.0% | 52.0% | 60.0% | chosen |"), "{md}");
        assert!(choose(vec![t(1e-4, f64::NAN, 0.5)]).is_err());
    }
}
