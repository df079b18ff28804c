//! Finding run directories and reading each one (config, evaluation, FLOPs, IM residuals).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::Serialize;
use shared::BertConfig;

use crate::probe::ProbeReport;
use crate::run::{
    read_json, read_jsonl, EpochMetrics, EvalReport, ImResidualCheck, RunConfig, RunSummary,
    IM_RESIDUALS_FILE, PROBE_FILE,
};

/// Where a run's FLOPs per example come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FlopsSource {
    /// `eval.json`, at the evaluation's mean sequence length.
    Eval,
    /// `shared::model::flops` on the run's connection and model config, at `max_len` (an upper
    /// bound).
    ComputedAtMaxLen,
    /// Neither an `eval.json` nor a readable model config.
    Unavailable,
}

/// One run as the report sees it: a run directory, or the summary `reproduce` committed of one.
#[derive(Debug, Clone, Serialize)]
pub struct RunRecord {
    /// The run directory or summary file.
    pub dir: PathBuf,
    /// Its `config.json`.
    pub config: RunConfig,
    /// `None`: the run has not been evaluated (no `eval.json`).
    pub eval: Option<EvalReport>,
    /// Forward FLOPs per example.
    pub flops: Option<f64>,
    pub flops_source: FlopsSource,
    /// `im_residuals.json`: absent for runs without IM layers and runs from before the check.
    pub im_residuals: Option<ImResidualCheck>,
    /// The stability probe of the run's best model (`probe/probe.json`), when it was run.
    pub probe: Option<ProbeReport>,
    /// Training throughput: the mean over its validations of the examples per second the
    /// training loop measured.
    pub train_examples_per_sec: Option<f64>,
}

/// The mean training throughput the validations recorded.
fn train_throughput(metrics: &[EpochMetrics]) -> Option<f64> {
    let rates: Vec<f64> =
        metrics.iter().map(|m| m.examples_per_sec).filter(|r| r.is_finite() && *r > 0.0).collect();
    (!rates.is_empty()).then(|| rates.iter().sum::<f64>() / rates.len() as f64)
}

impl RunRecord {
    /// Whether `eval.json` says the model is near chance on clean data.
    pub fn did_not_learn(&self) -> bool {
        self.eval.as_ref().is_some_and(|e| e.did_not_learn)
    }
}

/// Run directories at or below `root`: folders whose `config.json` is a [`RunConfig`]. The
/// search does not descend into a run (its `best/` and `final/` hold HF configs), and skips other
/// `config.json` files, such as a pretrained model's.
pub fn find_run_dirs(root: &Path) -> Result<Vec<PathBuf>> {
    let meta = std::fs::metadata(root).with_context(|| format!("reading {}", root.display()))?;
    if !meta.is_dir() {
        bail!("{} is not a directory", root.display());
    }
    let mut found = Vec::new();
    collect_run_dirs(root, &mut found)?;
    Ok(found)
}

fn collect_run_dirs(dir: &Path, found: &mut Vec<PathBuf>) -> Result<()> {
    if is_run_dir(dir)? {
        found.push(dir.to_path_buf());
        return Ok(());
    }
    let mut children = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let entry = entry.with_context(|| format!("listing {}", dir.display()))?;
        // Symlinked folders are not followed, so a link loop cannot trap the search.
        if entry
            .file_type()
            .with_context(|| format!("reading {}", entry.path().display()))?
            .is_dir()
        {
            children.push(entry.path());
        }
    }
    children.sort();
    for child in children {
        collect_run_dirs(&child, found)?;
    }
    Ok(())
}

/// A `config.json` names a run when it has the run config's `task` and `connection` keys.
fn is_run_dir(dir: &Path) -> Result<bool> {
    let path = dir.join("config.json");
    if !path.is_file() {
        return Ok(false);
    }
    let value: serde_json::Value = read_json(&path)?;
    Ok(value.get("task").is_some() && value.get("connection").is_some())
}

/// Reads one run: `config.json`, `eval.json` when present, and its FLOPs.
pub fn load_run(dir: &Path) -> Result<RunRecord> {
    let config: RunConfig = read_json(&dir.join("config.json"))?;
    let eval_path = dir.join("eval.json");
    let eval: Option<EvalReport> =
        if eval_path.is_file() { Some(read_json(&eval_path)?) } else { None };
    let (flops, flops_source) = match &eval {
        Some(e) if e.flops_per_example.is_finite() && e.flops_per_example > 0.0 => {
            (Some(e.flops_per_example), FlopsSource::Eval)
        }
        _ => match computed_flops(dir, &config) {
            Some(f) => (Some(f), FlopsSource::ComputedAtMaxLen),
            None => (None, FlopsSource::Unavailable),
        },
    };
    let residuals_path = dir.join(IM_RESIDUALS_FILE);
    let im_residuals =
        if residuals_path.is_file() { Some(read_json(&residuals_path)?) } else { None };
    let probe_path = dir.join(PROBE_FILE);
    let probe = if probe_path.is_file() { Some(read_json(&probe_path)?) } else { None };
    let metrics_path = dir.join("metrics.jsonl");
    let metrics: Vec<EpochMetrics> =
        if metrics_path.is_file() { read_jsonl(&metrics_path)? } else { Vec::new() };
    Ok(RunRecord {
        dir: dir.to_path_buf(),
        config,
        eval,
        flops,
        flops_source,
        im_residuals,
        probe,
        train_examples_per_sec: train_throughput(&metrics),
    })
}

/// Forward FLOPs at `max_len` from the model config the run saved (`best/`, `final/`) or started
/// from. `None` when no config is readable or the connection does not fit it: the report then
/// shows no FLOPs rather than failing on a number it only adds for convenience.
fn computed_flops(dir: &Path, config: &RunConfig) -> Option<f64> {
    let model = Path::new(&config.model);
    let candidates = [
        dir.join("best/config.json"),
        dir.join("final/config.json"),
        model.join("config.json"),
        dir.join(model).join("config.json"),
    ];
    let bert = candidates.iter().find_map(|p| BertConfig::from_file(p).ok())?;
    let connections = config.connection.per_layer(bert.num_hidden_layers).ok()?;
    Some(shared::model::flops::forward_flops(&bert, &connections, config.max_len, true))
}

/// A committed run summary (`RunSummary`, as `reproduce` writes into results/runs/<grid>/).
pub fn load_summary(path: &Path) -> Result<RunRecord> {
    let summary: RunSummary = read_json(path)?;
    let eval: EvalReport = serde_json::from_value(summary.eval)
        .with_context(|| format!("{}: `eval` is not an evaluation report", path.display()))?;
    let flops = (eval.flops_per_example.is_finite() && eval.flops_per_example > 0.0)
        .then_some(eval.flops_per_example);
    Ok(RunRecord {
        dir: path.to_path_buf(),
        config: summary.config,
        flops_source: if flops.is_some() { FlopsSource::Eval } else { FlopsSource::Unavailable },
        flops,
        eval: Some(eval),
        im_residuals: summary.im_residuals,
        probe: summary.probe,
        train_examples_per_sec: train_throughput(&summary.metrics),
    })
}

/// The run summaries directly in `dir` (not its subfolders: a grid keeps its learning-rate
/// trials in `lr-search/`, and they are not the grid's cells): JSON files with `config` and
/// `eval`.
fn summary_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let path = entry.with_context(|| format!("listing {}", dir.display()))?.path();
        if !(path.is_file() && path.extension().is_some_and(|e| e == "json")) {
            continue;
        }
        let value: serde_json::Value = read_json(&path)?;
        if value.get("config").is_some() && value.get("eval").is_some() {
            found.push(path);
        }
    }
    Ok(found)
}

/// Every run under `paths`, sorted by path: run directories found recursively, summary files
/// given by name or lying directly in a given folder. A path that holds no run is an error, so a
/// typo does not silently shrink a table.
pub fn load_runs(paths: &[PathBuf]) -> Result<Vec<RunRecord>> {
    let mut dirs = BTreeSet::new();
    let mut summaries = BTreeSet::new();
    for path in paths {
        if path.is_file() {
            summaries.insert(path.clone());
            continue;
        }
        let found = find_run_dirs(path)?;
        let files = summary_files(path)?;
        if found.is_empty() && files.is_empty() {
            bail!(
                "no run directory (a config.json with `task` and `connection`) or run summary \
                 (a JSON file with `config` and `eval`) under {}",
                path.display()
            );
        }
        dirs.extend(found);
        summaries.extend(files);
    }
    let mut runs: Vec<RunRecord> = dirs
        .iter()
        .map(|d| load_run(d).with_context(|| format!("loading run {}", d.display())))
        .collect::<Result<_>>()?;
    for path in &summaries {
        runs.push(load_summary(path).with_context(|| format!("loading {}", path.display()))?);
    }
    runs.sort_by(|a, b| a.dir.cmp(&b.dir));
    Ok(runs)
}
