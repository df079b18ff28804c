//! `trainer report`: the paper's tables and plots over many run directories.
//!
//! Runs are found by their `config.json` (a [`RunConfig`]), grouped (by default by task and
//! connection) across seeds, and each number is shown as mean ± sample standard deviation over
//! the group's runs, with the number of runs. Outputs, under `--out`:
//! - `report.md`: the tables, clean accuracy always beside every robustness number (project rule),
//!   runs whose `eval.json` says `did_not_learn` flagged "⚠ did not learn";
//! - `report.csv`: one row per group and evaluation split, accuracies as fractions as in `eval.json`;
//! - `report.json`: the groups and every run's config and evaluation;
//! - `plots/*.svg` always, `plots/*.png` when a font for their text is found: accuracy vs IM's `T`,
//!   accuracy per IM layer range, accuracy per attack level.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, ValueEnum};
use serde::Serialize;
use shared::data::{AttackLevel, Task};
use shared::{BertConfig, Connection, ConnectionSpec};

use crate::run::{read_json, EvalReport, ImResidualCheck, RunConfig, IM_RESIDUALS_FILE};

#[derive(Args, Debug)]
pub struct ReportArgs {
    /// Run directories, or folders searched recursively for them (any folder whose config.json
    /// is a run config).
    #[arg(required = true, value_name = "RUN_DIR")]
    pub runs: Vec<PathBuf>,
    /// Folder for report.md, report.csv, report.json and plots/.
    #[arg(long, default_value = "report")]
    pub out: PathBuf,
    /// What makes runs one group; a group's runs (its seeds) are averaged.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "task,connection")]
    pub group_by: Vec<GroupKey>,
    /// TrueType/OpenType font for the text of the PNG plots (default: common system fonts).
    #[arg(long)]
    pub font: Option<PathBuf>,
}

/// A run setting that can define groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum GroupKey {
    /// The GLUE task (`sst2`, `mnli`, ...).
    Task,
    /// The connection spec, canonicalised (`im:T=5,gamma=0.1,layers=3-5`).
    Connection,
    /// The pretrained model the run started from.
    Model,
    /// Adversarial training (`none`, `creat`, `pgd`).
    Adv,
    /// Low-resource training size (`full` when the whole split was used).
    TrainSamples,
}

impl GroupKey {
    /// Column name in the tables.
    pub fn name(self) -> &'static str {
        match self {
            GroupKey::Task => "task",
            GroupKey::Connection => "connection",
            GroupKey::Model => "model",
            GroupKey::Adv => "adv",
            GroupKey::TrainSamples => "train_samples",
        }
    }

    /// This key's value for one run.
    pub fn value(self, config: &RunConfig) -> String {
        match self {
            GroupKey::Task => config.task.clone(),
            GroupKey::Connection => canonical_connection(&config.connection),
            GroupKey::Model => config.model.clone(),
            GroupKey::Adv => config.adv.clone(),
            GroupKey::TrainSamples => config.train_samples.map_or("full".into(), |n| n.to_string()),
        }
    }
}

/// The spec as `ConnectionSpec` writes it, so that `im:gamma=0.1,T=5` and `im:T=5,gamma=0.1`
/// land in one group; an unparsable spec is kept as written.
fn canonical_connection(spec: &str) -> String {
    ConnectionSpec::parse(spec).map_or_else(|_| spec.to_string(), |s| s.to_spec_string())
}

// ---------------------------------------------------------------------------------------------
// Loading runs
// ---------------------------------------------------------------------------------------------

/// Where a run's FLOPs per example come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FlopsSource {
    /// `eval.json`, at the evaluation's mean sequence length.
    Eval,
    /// `shared::flops` on the run's connection and model config, at `max_len` (an upper bound).
    ComputedAtMaxLen,
    /// Neither an `eval.json` nor a readable model config.
    Unavailable,
}

/// One run directory as the report sees it.
#[derive(Debug, Clone, Serialize)]
pub struct RunRecord {
    /// The run directory.
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
        if entry.file_type().with_context(|| format!("reading {}", entry.path().display()))?.is_dir() {
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
    let eval: Option<EvalReport> = if eval_path.is_file() { Some(read_json(&eval_path)?) } else { None };
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
    let im_residuals = if residuals_path.is_file() { Some(read_json(&residuals_path)?) } else { None };
    Ok(RunRecord { dir: dir.to_path_buf(), config, eval, flops, flops_source, im_residuals })
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
    let connections = ConnectionSpec::parse(&config.connection).ok()?.per_layer(bert.num_hidden_layers).ok()?;
    Some(shared::flops::forward_flops(&bert, &connections, config.max_len, true))
}

/// Every run under `paths`, sorted by directory. A path that holds no run is an error, so a typo
/// does not silently shrink a table.
pub fn load_runs(paths: &[PathBuf]) -> Result<Vec<RunRecord>> {
    let mut dirs = BTreeSet::new();
    for path in paths {
        let found = find_run_dirs(path)?;
        if found.is_empty() {
            bail!("no run directory (a config.json with `task` and `connection`) under {}", path.display());
        }
        dirs.extend(found);
    }
    dirs.iter().map(|d| load_run(d).with_context(|| format!("loading run {}", d.display()))).collect()
}

// ---------------------------------------------------------------------------------------------
// Statistics and groups
// ---------------------------------------------------------------------------------------------

/// Mean and sample standard deviation (`n - 1` in the denominator) over a group's runs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Stat {
    pub mean: f64,
    /// `None` for a single run.
    pub std: Option<f64>,
    /// Number of runs the statistic is over.
    pub n: usize,
}

impl Stat {
    /// `None` for no values.
    pub fn of(values: &[f64]) -> Option<Stat> {
        let n = values.len();
        if n == 0 {
            return None;
        }
        let mean = values.iter().sum::<f64>() / n as f64;
        let std = (n > 1).then(|| {
            let ss: f64 = values.iter().map(|v| (v - mean).powi(2)).sum();
            (ss / (n - 1) as f64).sqrt()
        });
        Some(Stat { mean, std, n })
    }

    fn scaled(self, factor: f64) -> Stat {
        Stat { mean: self.mean * factor, std: self.std.map(|s| s * factor), ..self }
    }
}

/// One evaluation split of a group (`sst2`; MNLI has `mnli` and `mnli-mm`).
#[derive(Debug, Clone, Serialize)]
pub struct SplitSummary {
    /// `sst2`, `mnli` (matched), `mnli-mm` (mismatched), ...
    pub split: String,
    /// GLUE dev accuracy.
    pub clean: Option<Stat>,
    /// AdvGLUE accuracy on every adversarial item.
    pub adversarial: Option<Stat>,
    /// Accuracy on the clean originals of the adversarial items.
    pub clean_original: Option<Stat>,
    /// Adversarial accuracy on the items that have an original.
    pub adversarial_paired: Option<Stat>,
    /// `clean_original - adversarial_paired`, per run.
    pub drop: Option<Stat>,
    /// Adversarial accuracy per attack level (`word`, `sentence`, `human`).
    pub levels: BTreeMap<String, Stat>,
}

/// Runs that share the group keys' values.
#[derive(Debug, Clone, Serialize)]
pub struct GroupSummary {
    /// One value per key of [`Report::group_by`].
    pub values: Vec<String>,
    /// The task and canonical connection all runs share, `None` where they differ.
    pub task: Option<String>,
    pub connection: Option<String>,
    /// The group's run directories and their seeds, in the same order.
    pub runs: Vec<PathBuf>,
    pub seeds: Vec<u64>,
    /// Runs with an `eval.json`.
    pub evaluated: usize,
    /// Runs whose `eval.json` says `did_not_learn`.
    pub did_not_learn: usize,
    /// Per evaluation split, in AdvGLUE's task order.
    pub splits: Vec<SplitSummary>,
    /// Forward FLOPs per example.
    pub flops: Option<Stat>,
    /// Some run's FLOPs were computed at `max_len` instead of read from `eval.json`.
    pub flops_computed: bool,
    /// Measured evaluation throughput.
    pub examples_per_sec: Option<Stat>,
}

impl GroupSummary {
    /// Whether any run of the group did not learn: its robustness numbers must not be read as
    /// robustness.
    pub fn flagged(&self) -> bool {
        self.did_not_learn > 0
    }

    /// The summary of one evaluation split.
    pub fn split(&self, name: &str) -> Option<&SplitSummary> {
        self.splits.iter().find(|s| s.split == name)
    }

    /// `"⚠ did not learn (1/3)"`, `"not evaluated"`, `"ok"`, or several joined by `"; "`.
    pub fn status(&self) -> String {
        let mut parts = Vec::new();
        if self.flagged() {
            parts.push(format!("⚠ did not learn ({}/{})", self.did_not_learn, self.evaluated));
        }
        let not_evaluated = self.runs.len() - self.evaluated;
        if not_evaluated > 0 {
            parts.push(if self.evaluated == 0 {
                "not evaluated".to_string()
            } else {
                format!("{not_evaluated} not evaluated")
            });
        }
        if parts.is_empty() {
            "ok".into()
        } else {
            parts.join("; ")
        }
    }
}

/// Everything the outputs are made from.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The keys that define a group, in column order.
    pub group_by: Vec<GroupKey>,
    /// Groups in the paper's order.
    pub groups: Vec<GroupSummary>,
    /// Every run, sorted by directory.
    pub runs: Vec<RunRecord>,
}

/// Groups runs by `group_by` and computes each group's statistics. Groups come in the paper's
/// order: task (AdvGLUE order), then BERT, EX, IM by `T` and layers.
pub fn summarise(runs: Vec<RunRecord>, group_by: &[GroupKey]) -> Report {
    let mut buckets: BTreeMap<Vec<String>, Vec<&RunRecord>> = BTreeMap::new();
    for run in &runs {
        let values = group_by.iter().map(|k| k.value(&run.config)).collect();
        buckets.entry(values).or_default().push(run);
    }
    let mut groups: Vec<GroupSummary> =
        buckets.into_iter().map(|(values, members)| summarise_group(values, &members)).collect();
    groups.sort_by_key(group_order);
    Report { group_by: group_by.to_vec(), groups, runs }
}

fn summarise_group(values: Vec<String>, runs: &[&RunRecord]) -> GroupSummary {
    let shared_value = |f: &dyn Fn(&RunRecord) -> String| {
        let first = f(runs[0]);
        runs.iter().all(|r| f(r) == first).then_some(first)
    };
    let evals: Vec<&EvalReport> = runs.iter().filter_map(|r| r.eval.as_ref()).collect();

    let mut split_names: Vec<String> = evals
        .iter()
        .flat_map(|e| e.clean.iter().map(|c| c.split.clone()).chain(e.advglue.iter().map(|a| a.split.clone())))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    split_names.sort_by_key(|s| split_order(s));

    let splits = split_names
        .into_iter()
        .map(|split| {
            // Per run, then across runs: a run that lacks a number simply does not count for it.
            let per_run = |f: &dyn Fn(&EvalReport) -> Option<f64>| -> Option<Stat> {
                Stat::of(&evals.iter().filter_map(|e| f(e)).collect::<Vec<_>>())
            };
            let adv = |e: &EvalReport| e.advglue.iter().find(|a| a.split == split).cloned();
            let nonempty = |s: &crate::run::Score| (s.n > 0).then_some(s.accuracy);
            let levels = AttackLevel::ALL
                .iter()
                .filter_map(|level| {
                    let stat = per_run(&|e| {
                        adv(e).and_then(|a| a.by_level.get(level.name()).and_then(|l| nonempty(&l.adversarial)))
                    })?;
                    Some((level.name().to_string(), stat))
                })
                .collect();
            SplitSummary {
                clean: per_run(&|e| e.clean.iter().find(|c| c.split == split).map(|c| c.score.accuracy)),
                adversarial: per_run(&|e| adv(e).and_then(|a| nonempty(&a.adversarial))),
                clean_original: per_run(&|e| adv(e).and_then(|a| nonempty(&a.clean_original))),
                adversarial_paired: per_run(&|e| adv(e).and_then(|a| nonempty(&a.adversarial_paired))),
                drop: per_run(&|e| {
                    adv(e).and_then(|a| Some(nonempty(&a.clean_original)? - nonempty(&a.adversarial_paired)?))
                }),
                levels,
                split,
            }
        })
        .collect();

    let flops: Vec<f64> = runs.iter().filter_map(|r| r.flops).collect();
    let throughput: Vec<f64> = evals.iter().map(|e| e.examples_per_sec).filter(|v| v.is_finite() && *v > 0.0).collect();
    GroupSummary {
        values,
        task: shared_value(&|r| r.config.task.clone()),
        connection: shared_value(&|r| canonical_connection(&r.config.connection)),
        runs: runs.iter().map(|r| r.dir.clone()).collect(),
        seeds: runs.iter().map(|r| r.config.seed).collect(),
        evaluated: evals.len(),
        did_not_learn: runs.iter().filter(|r| r.did_not_learn()).count(),
        splits,
        flops: Stat::of(&flops),
        flops_computed: runs.iter().any(|r| r.flops_source == FlopsSource::ComputedAtMaxLen),
        examples_per_sec: Stat::of(&throughput),
    }
}

/// AdvGLUE's task order; unknown names after, alphabetically.
fn split_order(split: &str) -> (usize, String) {
    let rank = split.parse::<Task>().ok().and_then(|t| Task::ALL.iter().position(|&a| a == t));
    (rank.unwrap_or(Task::ALL.len()), split.to_string())
}

/// Sort key of a connection: BERT, EX, then IM by T; all layers before a layer range.
type ConnectionOrder = (usize, usize, Option<(usize, usize)>, String);

/// BERT, EX, then IM by T and layers; unparsable specs last.
fn connection_order(spec: &str) -> ConnectionOrder {
    match ConnectionSpec::parse(spec) {
        Ok(s) => match s.connection {
            Connection::Monotone => (0, 0, s.layers, spec.into()),
            Connection::Explicit => (1, 0, s.layers, spec.into()),
            Connection::Implicit(im) => (2, im.iterations, s.layers, spec.into()),
        },
        Err(_) => (3, 0, None, spec.into()),
    }
}

fn group_order(g: &GroupSummary) -> ((usize, String), ConnectionOrder, Vec<String>) {
    let task = g.task.as_deref().map_or((usize::MAX, String::new()), split_order);
    let connection = g.connection.as_deref().map_or((usize::MAX, 0, None, String::new()), connection_order);
    (task, connection, g.values.clone())
}

// ---------------------------------------------------------------------------------------------
// Markdown and CSV
// ---------------------------------------------------------------------------------------------

/// `"91.2 ± 0.4"` in percent; `(n=k)` when fewer runs than the group's evaluated ones had it.
fn pct(stat: Option<Stat>, expected_n: usize) -> String {
    let Some(s) = stat.map(|s| s.scaled(100.0)) else { return "–".into() };
    let mut text = match s.std {
        Some(std) => format!("{:.1} ± {:.1}", s.mean, std),
        None => format!("{:.1}", s.mean),
    };
    if s.n != expected_n {
        write!(text, " (n={})", s.n).ok();
    }
    text
}

fn plain(stat: Option<Stat>, scale: f64, decimals: usize) -> String {
    match stat.map(|s| s.scaled(scale)) {
        Some(Stat { mean, std: Some(std), .. }) => format!("{mean:.decimals$} ± {std:.decimals$}"),
        Some(Stat { mean, .. }) => format!("{mean:.decimals$}"),
        None => "–".into(),
    }
}

/// A robustness cell: flagged groups carry the warning on the number itself.
fn robust(stat: Option<Stat>, expected_n: usize, flagged: bool) -> String {
    let text = pct(stat, expected_n);
    if flagged && stat.is_some() {
        format!("⚠ {text}")
    } else {
        text
    }
}

fn md_escape(text: &str) -> String {
    text.replace('|', "\\|")
}

/// `report.md`: the main table (one row per group and split), AdvGLUE by task with its average,
/// every run, and the plots.
pub fn markdown(report: &Report, plots: &[String]) -> String {
    let mut md = String::new();
    let n_runs = report.runs.len();
    let n_flagged = report.runs.iter().filter(|r| r.did_not_learn()).count();
    writeln!(md, "# IM-BERT report\n").ok();
    writeln!(
        md,
        "{n_runs} runs in {} groups (grouped by {}). Accuracies in %, mean ± sample std over a group's \
         runs (seeds); `n` is the number of evaluated runs, `(n=k)` marks a number fewer runs had.\n",
        report.groups.len(),
        report.group_by.iter().map(|k| k.name()).collect::<Vec<_>>().join(", ")
    )
    .ok();
    if n_flagged > 0 {
        writeln!(
            md,
            "**⚠ {n_flagged} run(s) did not learn** (near chance on clean data, per `eval.json`). Their \
             AdvGLUE numbers measure nothing about robustness; rows that include them are marked ⚠ \
             and must be read with their clean accuracy.\n"
        )
        .ok();
    }

    // Main table.
    writeln!(md, "## Clean and AdvGLUE accuracy\n").ok();
    writeln!(
        md,
        "Clean: GLUE dev. AdvGLUE: AdvGLUE dev. Drop: accuracy on the clean originals minus the \
         adversarial accuracy on the same items. Word / sentence / human: AdvGLUE accuracy per \
         attack level. GFLOPs: analytic forward matmul FLOPs per example (`shared::flops`).\n"
    )
    .ok();
    let keys: Vec<&str> = report.group_by.iter().map(|k| k.name()).collect();
    let mut header: Vec<&str> = keys.clone();
    header.extend([
        "split",
        "n",
        "clean (GLUE dev)",
        "AdvGLUE",
        "drop",
        "word",
        "sentence",
        "human",
        "GFLOPs/ex",
        "ex/s",
        "status",
    ]);
    table_header(&mut md, &header);
    let mut any_computed_flops = false;
    for g in &report.groups {
        let mut flops = plain(g.flops, 1e-9, 2);
        if g.flops_computed && g.flops.is_some() {
            flops.push('*');
            any_computed_flops = true;
        }
        let n = if g.evaluated == g.runs.len() {
            g.evaluated.to_string()
        } else {
            format!("{} (+{} not evaluated)", g.evaluated, g.runs.len() - g.evaluated)
        };
        let mut prefix: Vec<String> = g.values.iter().map(|v| md_escape(v)).collect();
        if g.splits.is_empty() {
            prefix.extend([
                "–".into(),
                n,
                "–".into(),
                "–".into(),
                "–".into(),
                "–".into(),
                "–".into(),
                "–".into(),
                flops,
                "–".into(),
                g.status(),
            ]);
            table_row(&mut md, &prefix);
            continue;
        }
        for s in &g.splits {
            let mut row = prefix.clone();
            let flag = g.flagged();
            row.extend([
                s.split.clone(),
                n.clone(),
                pct(s.clean, g.evaluated),
                robust(s.adversarial, g.evaluated, flag),
                robust(s.drop, g.evaluated, flag),
            ]);
            for level in AttackLevel::ALL {
                row.push(robust(s.levels.get(level.name()).copied(), g.evaluated, flag));
            }
            row.extend([flops.clone(), plain(g.examples_per_sec, 1.0, 1), g.status()]);
            table_row(&mut md, &row);
        }
    }
    if any_computed_flops {
        writeln!(md, "\n\\* computed from the run's config at `max_len` (an upper bound): the run has no `eval.json`.")
            .ok();
    }

    pivot_by_task(&mut md, report);
    per_run_table(&mut md, report);

    if !plots.is_empty() {
        writeln!(md, "\n## Plots\n").ok();
        for stem in plots {
            writeln!(md, "![{stem}](plots/{stem}.svg)").ok();
        }
    }
    md
}

/// AdvGLUE accuracy per task (columns) for each setting (rows), clean accuracy beside each, and
/// the paper's average over tasks. Needs `task` among the group keys.
fn pivot_by_task(md: &mut String, report: &Report) {
    let Some(task_index) = report.group_by.iter().position(|&k| k == GroupKey::Task) else { return };
    let mut splits: Vec<String> = report
        .groups
        .iter()
        .flat_map(|g| g.splits.iter().filter(|s| s.adversarial.is_some()).map(|s| s.split.clone()))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    if splits.is_empty() {
        return;
    }
    splits.sort_by_key(|s| split_order(s));

    // Rows: the other keys' values, in the groups' order.
    let mut rows: Vec<(Vec<String>, Vec<&GroupSummary>)> = Vec::new();
    for g in &report.groups {
        let mut key = g.values.clone();
        key.remove(task_index);
        match rows.iter_mut().find(|(k, _)| *k == key) {
            Some((_, members)) => members.push(g),
            None => rows.push((key, vec![g])),
        }
    }

    writeln!(md, "\n## AdvGLUE accuracy by task\n").ok();
    writeln!(md, "Each cell: AdvGLUE accuracy, then (clean GLUE dev accuracy). Avg: the mean over the tasks shown.\n")
        .ok();
    let mut header: Vec<&str> = report.group_by.iter().filter(|&&k| k != GroupKey::Task).map(|k| k.name()).collect();
    header.extend(splits.iter().map(String::as_str));
    header.push("Avg");
    table_header(md, &header);
    for (key, members) in rows {
        let mut row: Vec<String> = key.iter().map(|v| md_escape(v)).collect();
        let (mut adv_means, mut clean_means, mut flagged) = (Vec::new(), Vec::new(), false);
        for split in &splits {
            let found = members.iter().find_map(|g| g.split(split).map(|s| (g, s)));
            let cell = match found {
                Some((g, s)) if s.adversarial.is_some() => {
                    adv_means.extend(s.adversarial.map(|a| a.mean));
                    clean_means.extend(s.clean.map(|c| c.mean));
                    flagged |= g.flagged();
                    format!("{} ({})", robust(s.adversarial, g.evaluated, g.flagged()), pct(s.clean, g.evaluated))
                }
                _ => "–".into(),
            };
            row.push(cell);
        }
        let mean = |v: &[f64]| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
        let avg = match (mean(&adv_means), mean(&clean_means)) {
            (Some(a), c) => {
                let clean = c.map_or("–".into(), |c| format!("{:.1}", 100.0 * c));
                let partial = if adv_means.len() < splits.len() {
                    format!(" [{}/{} tasks]", adv_means.len(), splits.len())
                } else {
                    String::new()
                };
                format!("{}{:.1} ({clean}){partial}", if flagged { "⚠ " } else { "" }, 100.0 * a)
            }
            (None, _) => "–".into(),
        };
        row.push(avg);
        table_row(md, &row);
    }
}

/// Every run with its own numbers, so a group's mean can be traced to its seeds.
fn per_run_table(md: &mut String, report: &Report) {
    writeln!(md, "\n## Runs\n").ok();
    table_header(md, &["run", "task", "connection", "seed", "clean (GLUE dev)", "AdvGLUE", "status"]);
    let mut any_overshooting = false;
    for run in &report.runs {
        let (clean, adv, status) = match &run.eval {
            None => ("–".to_string(), "–".to_string(), "not evaluated".to_string()),
            Some(e) => {
                let clean = e
                    .clean
                    .iter()
                    .map(|c| format!("{} {:.1}", c.split, 100.0 * c.score.accuracy))
                    .collect::<Vec<_>>()
                    .join(", ");
                let flag = if e.did_not_learn { "⚠ " } else { "" };
                let adv = e
                    .advglue
                    .iter()
                    .map(|a| format!("{flag}{} {:.1}", a.split, 100.0 * a.adversarial.accuracy))
                    .collect::<Vec<_>>()
                    .join(", ");
                let status = if e.did_not_learn {
                    match &e.did_not_learn_reason {
                        Some(reason) => format!("⚠ did not learn: {reason}"),
                        None => "⚠ did not learn".into(),
                    }
                } else {
                    "ok".into()
                };
                (clean, adv, status)
            }
        };
        // A rising residual at the start means gamma overshoots: the IM result is not the
        // implicit step the spec names (docs/numerics.md).
        let overshooting = run.im_residuals.as_ref().map(ImResidualCheck::overshooting_layers).unwrap_or_default();
        let status = if overshooting.is_empty() {
            status
        } else {
            any_overshooting = true;
            let layers: Vec<String> = overshooting.iter().map(usize::to_string).collect();
            let s = if layers.len() > 1 { "s" } else { "" };
            format!("{status}; ⚠ IM residual rose at the start in layer{s} {}", layers.join(", "))
        };
        let row = [
            run.dir.display().to_string(),
            run.config.task.clone(),
            canonical_connection(&run.config.connection),
            run.config.seed.to_string(),
            clean,
            adv,
            status,
        ];
        table_row(md, &row.map(|c| md_escape(&c)));
    }
    if any_overshooting {
        writeln!(
            md,
            "\n\"IM residual rose\": before training, `||r||^2` grew in some iteration of those IM layers \
             (`im_residuals.json`): gamma overshoots there, so the IM step is not solved and f32 results \
             depend on rounding (docs/numerics.md)."
        )
        .ok();
    }
}

fn table_header(md: &mut String, header: &[&str]) {
    writeln!(md, "| {} |", header.join(" | ")).ok();
    writeln!(md, "|{}", "---|".repeat(header.len())).ok();
}

fn table_row(md: &mut String, row: &[String]) {
    writeln!(md, "| {} |", row.join(" | ")).ok();
}

/// The columns of `report.csv` after the group keys.
pub const CSV_COLUMNS: &[&str] = &[
    "split",
    "runs",
    "evaluated",
    "did_not_learn_runs",
    "did_not_learn",
    "clean_acc_mean",
    "clean_acc_std",
    "clean_acc_n",
    "advglue_acc_mean",
    "advglue_acc_std",
    "advglue_acc_n",
    "clean_original_acc_mean",
    "clean_original_acc_std",
    "clean_original_acc_n",
    "adversarial_paired_acc_mean",
    "adversarial_paired_acc_std",
    "adversarial_paired_acc_n",
    "drop_mean",
    "drop_std",
    "drop_n",
    "word_acc_mean",
    "word_acc_std",
    "word_acc_n",
    "sentence_acc_mean",
    "sentence_acc_std",
    "sentence_acc_n",
    "human_acc_mean",
    "human_acc_std",
    "human_acc_n",
    "flops_per_example_mean",
    "flops_per_example_std",
    "flops_computed_at_max_len",
    "examples_per_sec_mean",
    "examples_per_sec_std",
    "status",
];

/// `report.csv`: one row per group and split (one row with an empty split for a group that has no
/// evaluation); accuracies as fractions, empty cells where a number is missing.
pub fn csv(report: &Report) -> String {
    let mut out = String::new();
    let header: Vec<&str> = report.group_by.iter().map(|k| k.name()).chain(CSV_COLUMNS.iter().copied()).collect();
    writeln!(out, "{}", header.join(",")).ok();
    let num = |v: Option<f64>| v.map_or(String::new(), |v| v.to_string());
    let stat = |s: Option<Stat>| {
        [num(s.map(|s| s.mean)), num(s.and_then(|s| s.std)), s.map_or(String::new(), |s| s.n.to_string())]
    };
    for g in &report.groups {
        let empty = SplitSummary {
            split: String::new(),
            clean: None,
            adversarial: None,
            clean_original: None,
            adversarial_paired: None,
            drop: None,
            levels: BTreeMap::new(),
        };
        let splits: Vec<&SplitSummary> = if g.splits.is_empty() { vec![&empty] } else { g.splits.iter().collect() };
        for s in splits {
            let mut row: Vec<String> = g.values.clone();
            row.extend([
                s.split.clone(),
                g.runs.len().to_string(),
                g.evaluated.to_string(),
                g.did_not_learn.to_string(),
                g.flagged().to_string(),
            ]);
            for st in [s.clean, s.adversarial, s.clean_original, s.adversarial_paired, s.drop] {
                row.extend(stat(st));
            }
            for level in AttackLevel::ALL {
                row.extend(stat(s.levels.get(level.name()).copied()));
            }
            row.extend([num(g.flops.map(|f| f.mean)), num(g.flops.and_then(|f| f.std)), g.flops_computed.to_string()]);
            row.extend([
                num(g.examples_per_sec.map(|f| f.mean)),
                num(g.examples_per_sec.and_then(|f| f.std)),
                g.status(),
            ]);
            writeln!(out, "{}", row.iter().map(|c| csv_field(c)).collect::<Vec<_>>().join(",")).ok();
        }
    }
    out
}

/// RFC 4180 quoting: connection specs contain commas.
fn csv_field(text: &str) -> String {
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_string()
    }
}

// ---------------------------------------------------------------------------------------------
// Plots: data first (testable), then drawing
// ---------------------------------------------------------------------------------------------

/// A plot, as data: what `draw_chart` renders to SVG and PNG.
#[derive(Debug, Clone, PartialEq)]
pub enum Chart {
    /// Accuracy against a number (IM's `T`).
    Lines(LineChart),
    /// Accuracy per category (layer range, attack level).
    Bars(BarChart),
}

/// Lines over a numeric x axis; accuracies in %.
#[derive(Debug, Clone, PartialEq)]
pub struct LineChart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub series: Vec<LineSeriesData>,
    /// Top of the y axis; `None`: 100 (accuracies).
    pub y_max: Option<f64>,
}

/// One line of a [`LineChart`].
#[derive(Debug, Clone, PartialEq)]
pub struct LineSeriesData {
    /// Legend text.
    pub label: String,
    /// Series that share a colour share a setting (clean and AdvGLUE of one configuration).
    pub color: usize,
    /// Clean accuracy is drawn thin, AdvGLUE thick.
    pub clean: bool,
    /// `(x, mean, std)`.
    pub points: Vec<(f64, f64, Option<f64>)>,
}

/// Grouped bars: one group of bars per category, one bar per series.
#[derive(Debug, Clone, PartialEq)]
pub struct BarChart {
    pub title: String,
    pub y_label: String,
    pub categories: Vec<String>,
    pub series: Vec<BarSeriesData>,
}

/// One bar per category of a [`BarChart`].
#[derive(Debug, Clone, PartialEq)]
pub struct BarSeriesData {
    /// Legend text.
    pub label: String,
    /// Per category: `(mean, std)`, `None` for no bar.
    pub values: Vec<Option<(f64, Option<f64>)>>,
}

const CLEAN_LABEL: &str = "clean (GLUE dev)";
const DNL_SUFFIX: &str = " (did not learn)";

/// The IM settings of a group that has a single, implicit connection.
fn implicit_spec(g: &GroupSummary) -> Option<(ConnectionSpec, shared::ImplicitEuler)> {
    let spec = ConnectionSpec::parse(g.connection.as_deref()?).ok()?;
    let Connection::Implicit(im) = spec.connection else { return None };
    Some((spec, im))
}

/// Group values other than task and connection (model, adv, ...), to keep distinct settings apart.
fn other_values(report: &Report, g: &GroupSummary) -> String {
    report
        .group_by
        .iter()
        .zip(&g.values)
        .filter(|(k, _)| !matches!(k, GroupKey::Task | GroupKey::Connection))
        .map(|(k, v)| format!("{}={v}", k.name()))
        .collect::<Vec<_>>()
        .join(" ")
}

fn layers_label(spec: &ConnectionSpec) -> String {
    spec.layers.map_or("all layers".into(), |(a, b)| format!("layers {a}-{b}"))
}

fn with_flag(label: String, flagged: bool) -> String {
    if flagged {
        label + DNL_SUFFIX
    } else {
        label
    }
}

fn pct_point(stat: Stat) -> (f64, Option<f64>) {
    let s = stat.scaled(100.0);
    (s.mean, s.std)
}

/// All plots of a report, by file stem, per evaluation split: accuracy vs `T`, accuracy per IM
/// layer range, accuracy per attack level. Clean accuracy is in every plot beside AdvGLUE.
pub fn charts(report: &Report) -> Vec<(String, Chart)> {
    let mut splits: Vec<String> = report
        .groups
        .iter()
        .flat_map(|g| g.splits.iter().map(|s| s.split.clone()))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    splits.sort_by_key(|s| split_order(s));
    let mut out = Vec::new();
    for split in &splits {
        let stem = split.replace(|c: char| !c.is_ascii_alphanumeric() && c != '-', "_");
        if let Some(c) = accuracy_vs_t(report, split) {
            out.push((format!("accuracy_vs_T_{stem}"), Chart::Lines(c)));
        }
        if let Some(c) = accuracy_by_layers(report, split) {
            out.push((format!("accuracy_by_layers_{stem}"), Chart::Bars(c)));
        }
        if let Some(c) = accuracy_by_attack_level(report, split) {
            out.push((format!("attack_levels_{stem}"), Chart::Bars(c)));
        }
    }
    out
}

/// `(T, clean, AdvGLUE, did not learn)` of one IM group.
type PointAtT = (usize, Option<Stat>, Option<Stat>, bool);

/// IM groups with the same settings but `T`, joined into one clean and one AdvGLUE line each.
fn accuracy_vs_t(report: &Report, split: &str) -> Option<LineChart> {
    // Setting (every IM parameter but T, plus other group keys) -> its points.
    let mut settings: BTreeMap<String, Vec<PointAtT>> = BTreeMap::new();
    for g in &report.groups {
        let (Some((spec, im)), Some(s)) = (implicit_spec(g), g.split(split)) else { continue };
        let mut grad = String::new();
        if im.gradient != shared::InnerGradient::Exact {
            grad += &format!(", {}", im.gradient.name());
        }
        if im.step_rule == shared::StepRule::Backtrack {
            grad += ", backtrack";
        }
        if let Some(tol) = im.tolerance {
            grad += &format!(", tol {tol}");
        }
        let key = format!("γ={} {}{grad} {}", im.gamma, layers_label(&spec), other_values(report, g));
        settings.entry(key.trim().to_string()).or_default().push((im.iterations, s.clean, s.adversarial, g.flagged()));
    }
    let mut series = Vec::new();
    for (color, (setting, mut points)) in settings.into_iter().enumerate() {
        points.sort_by_key(|p| p.0);
        let flagged = points.iter().any(|p| p.3);
        let line = |clean: bool| {
            let pts: Vec<_> = points
                .iter()
                .filter_map(|&(t, c, a, _)| {
                    let (mean, std) = pct_point(if clean { c } else { a }?);
                    Some((t as f64, mean, std))
                })
                .collect();
            let name = if clean { CLEAN_LABEL } else { "AdvGLUE" };
            (!pts.is_empty()).then(|| LineSeriesData {
                label: with_flag(format!("{name}, {setting}"), flagged),
                color,
                clean,
                points: pts,
            })
        };
        series.extend(line(true));
        series.extend(line(false));
    }
    (!series.is_empty()).then(|| LineChart {
        title: format!("{split}: accuracy vs T (IM-BERT)"),
        x_label: "T (IM iterations)".into(),
        y_label: "accuracy (%)".into(),
        series,
        y_max: None,
    })
}

/// One category per IM group (its layer range), bars for clean and AdvGLUE accuracy.
fn accuracy_by_layers(report: &Report, split: &str) -> Option<BarChart> {
    let members: Vec<(&GroupSummary, ConnectionSpec, shared::ImplicitEuler, &SplitSummary)> = report
        .groups
        .iter()
        .filter_map(|g| {
            let (spec, im) = implicit_spec(g)?;
            Some((g, spec, im, g.split(split)?))
        })
        .collect();
    if members.is_empty() {
        return None;
    }
    // Name T and gamma only where the groups differ in them.
    let settings: BTreeSet<String> =
        members.iter().map(|(_, _, im, _)| format!("T={} γ={}", im.iterations, im.gamma)).collect();
    let mut rows: Vec<_> = members
        .iter()
        .map(|(g, spec, im, s)| {
            let mut label = layers_label(spec);
            if settings.len() > 1 {
                write!(label, " T={} γ={}", im.iterations, im.gamma).ok();
            }
            let other = other_values(report, g);
            if !other.is_empty() {
                write!(label, " {other}").ok();
            }
            let order = (spec.layers, im.iterations); // all layers first, then by range
            (order, with_flag(label, g.flagged()), s)
        })
        .collect();
    rows.sort_by_key(|r| r.0);
    Some(BarChart {
        title: format!("{split}: accuracy per IM layer range"),
        y_label: "accuracy (%)".into(),
        categories: rows.iter().map(|r| r.1.clone()).collect(),
        series: vec![
            BarSeriesData {
                label: CLEAN_LABEL.into(),
                values: rows.iter().map(|r| r.2.clean.map(pct_point)).collect(),
            },
            BarSeriesData {
                label: "AdvGLUE".into(),
                values: rows.iter().map(|r| r.2.adversarial.map(pct_point)).collect(),
            },
        ],
    })
}

/// Categories clean, word, sentence, human; one bar per group (connection).
fn accuracy_by_attack_level(report: &Report, split: &str) -> Option<BarChart> {
    let mut categories = vec![CLEAN_LABEL.to_string()];
    categories.extend(AttackLevel::ALL.iter().map(|l| format!("{} (AdvGLUE)", l.name())));
    let series: Vec<BarSeriesData> = report
        .groups
        .iter()
        .filter_map(|g| {
            let s = g.split(split)?;
            if s.levels.is_empty() {
                return None;
            }
            let mut values = vec![s.clean.map(pct_point)];
            values.extend(AttackLevel::ALL.iter().map(|l| s.levels.get(l.name()).copied().map(pct_point)));
            let mut label = g.connection.clone().unwrap_or_else(|| g.values.join(" "));
            let other = other_values(report, g);
            if !other.is_empty() {
                write!(label, " {other}").ok();
            }
            Some(BarSeriesData { label: with_flag(label, g.flagged()), values })
        })
        .collect();
    (!series.is_empty()).then(|| BarChart {
        title: format!("{split}: accuracy per attack level"),
        y_label: "accuracy (%)".into(),
        categories,
        series,
    })
}

/// Pixel size of every plot.
const PLOT_SIZE: (u32, u32) = (1000, 600);

mod draw {
    //! Rendering [`Chart`]s with plotters, generic over the backend so that SVG and PNG come from
    //! one drawing routine.

    use super::{BarChart, Chart, LineChart};
    use plotters::coord::Shift;
    use plotters::prelude::*;
    use plotters::style::text_anchor::{HPos, Pos, VPos};

    type DrawResult<DB> = Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

    /// Draws `chart` over the whole of `root`.
    pub fn draw_chart<DB: DrawingBackend>(chart: &Chart, root: &DrawingArea<DB, Shift>) -> DrawResult<DB> {
        root.fill(&WHITE)?;
        match chart {
            Chart::Lines(c) => draw_lines(c, root),
            Chart::Bars(c) => draw_bars(c, root),
        }
    }

    fn draw_lines<DB: DrawingBackend>(c: &LineChart, root: &DrawingArea<DB, Shift>) -> DrawResult<DB> {
        let x_max = c.series.iter().flat_map(|s| s.points.iter().map(|p| p.0)).fold(1.0f64, f64::max);
        let mut chart = ChartBuilder::on(root)
            .caption(&c.title, ("sans-serif", 24))
            .margin(16)
            .x_label_area_size(48)
            .y_label_area_size(64)
            .build_cartesian_2d(-0.5..x_max + 0.5, 0.0..c.y_max.unwrap_or(100.0))?;
        chart
            .configure_mesh()
            .x_desc(c.x_label.as_str())
            .y_desc(c.y_label.as_str())
            .label_style(("sans-serif", 16))
            .axis_desc_style(("sans-serif", 18))
            // T is an integer: label whole numbers only.
            .x_label_formatter(&|x| if x.fract().abs() < 1e-9 { format!("{x:.0}") } else { String::new() })
            .y_label_formatter(&|y| if c.y_max.is_some_and(|m| m < 10.0) { format!("{y:.2}") } else { format!("{y:.0}") })
            .draw()?;
        for s in &c.series {
            let color = Palette99::pick(s.color).to_rgba();
            let style = color.stroke_width(if s.clean { 1 } else { 3 });
            chart
                .draw_series(LineSeries::new(s.points.iter().map(|&(x, y, _)| (x, y)), style))?
                .label(s.label.as_str())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
            let marker = |(x, y): (f64, f64)| {
                if s.clean {
                    Circle::new((x, y), 4, color.stroke_width(1))
                } else {
                    Circle::new((x, y), 4, color.filled())
                }
            };
            chart.draw_series(s.points.iter().map(|&(x, y, _)| marker((x, y))))?;
            // Whiskers: ± one standard deviation over seeds.
            chart.draw_series(
                s.points
                    .iter()
                    .filter_map(|&(x, y, sd)| sd.map(|sd| PathElement::new(vec![(x, y - sd), (x, y + sd)], color))),
            )?;
        }
        // Accuracies fall to the right less often than they rise; other measures (drift) may not.
        let legend = if c.y_max.is_some() { SeriesLabelPosition::UpperLeft } else { SeriesLabelPosition::LowerRight };
        chart
            .configure_series_labels()
            .position(legend)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 14))
            .draw()?;
        Ok(())
    }

    fn draw_bars<DB: DrawingBackend>(c: &BarChart, root: &DrawingArea<DB, Shift>) -> DrawResult<DB> {
        let bars = c.series.len().max(1);
        let slot = (bars + 1) as f64; // one bar's width of gap between categories
        let x_max = c.categories.len() as f64 * slot;
        let mut chart = ChartBuilder::on(root)
            .caption(&c.title, ("sans-serif", 24))
            .margin(16)
            .x_label_area_size(56)
            .y_label_area_size(64)
            .build_cartesian_2d(0.0..x_max, 0.0..100.0)?;
        // Category names are drawn below the axis by hand: numeric ticks would not land on them.
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(0)
            .y_desc(c.y_label.as_str())
            .label_style(("sans-serif", 16))
            .axis_desc_style(("sans-serif", 18))
            .y_label_formatter(&|y| format!("{y:.0}"))
            .draw()?;
        for (b, s) in c.series.iter().enumerate() {
            let color = Palette99::pick(b).to_rgba();
            let left = |cat: usize| cat as f64 * slot + 0.5 + b as f64;
            chart
                .draw_series(s.values.iter().enumerate().filter_map(|(cat, v)| {
                    v.map(|(mean, _)| Rectangle::new([(left(cat), 0.0), (left(cat) + 1.0, mean)], color.filled()))
                }))?
                .label(s.label.as_str())
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
            chart.draw_series(s.values.iter().enumerate().filter_map(|(cat, v)| {
                let (mean, sd) = (*v)?;
                let x = left(cat) + 0.5;
                sd.map(|sd| PathElement::new(vec![(x, mean - sd), (x, mean + sd)], BLACK))
            }))?;
        }
        let label_style = TextStyle::from(("sans-serif", 15).into_font()).pos(Pos::new(HPos::Center, VPos::Top));
        for (cat, name) in c.categories.iter().enumerate() {
            let center = cat as f64 * slot + 0.5 + bars as f64 / 2.0;
            let (x, y) = chart.backend_coord(&(center, 0.0));
            root.draw(&Text::new(name.clone(), (x, y + 8), label_style.clone()))?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 14))
            .draw()?;
        Ok(())
    }
}

mod glyph_bitmap {
    //! A bitmap backend whose text is drawn with `ab_glyph` from a font file read at run time.
    //! plotters' own bitmap text needs either system font discovery (`ttf`: font-kit and
    //! fontconfig) or a `&'static` font registered globally (`ab_glyph`), which would also make
    //! the SVG output fail on machines without the font. Wrapping the backend keeps SVG
    //! font-free and lets a missing font cost only the PNGs.

    use ab_glyph::{point, Font, FontVec, PxScale, ScaleFont};
    use plotters::backend::BitMapBackend;
    use plotters_backend::text_anchor::{HPos, VPos};
    use plotters_backend::{
        BackendColor, BackendCoord, BackendStyle, BackendTextStyle, DrawingBackend, DrawingErrorKind,
    };

    /// An RGB [`BitMapBackend`] plus the font its text is drawn with.
    pub struct GlyphBitmap<'a> {
        pub inner: BitMapBackend<'a>,
        pub font: &'a FontVec,
    }

    type Error<'a> = DrawingErrorKind<<BitMapBackend<'a> as DrawingBackend>::ErrorType>;

    impl GlyphBitmap<'_> {
        /// plotters' SVG writes `font-size = size / 1.24`; the same pixel height here keeps the
        /// two outputs alike.
        fn scale(size: f64) -> PxScale {
            PxScale::from((size / 1.24) as f32)
        }

        /// Width and height of `text` on one line.
        fn measure(&self, text: &str, size: f64) -> (f32, f32) {
            let font = self.font.as_scaled(Self::scale(size));
            let mut width = 0.0;
            let mut prev = None;
            for c in text.chars() {
                let id = font.glyph_id(c);
                if let Some(p) = prev {
                    width += font.kern(p, id);
                }
                width += font.h_advance(id);
                prev = Some(id);
            }
            (width, font.ascent() - font.descent())
        }
    }

    impl<'a> DrawingBackend for GlyphBitmap<'a> {
        type ErrorType = <BitMapBackend<'a> as DrawingBackend>::ErrorType;

        fn get_size(&self) -> (u32, u32) {
            self.inner.get_size()
        }
        fn ensure_prepared(&mut self) -> Result<(), Error<'a>> {
            self.inner.ensure_prepared()
        }
        fn present(&mut self) -> Result<(), Error<'a>> {
            self.inner.present()
        }
        fn draw_pixel(&mut self, point: BackendCoord, color: BackendColor) -> Result<(), Error<'a>> {
            self.inner.draw_pixel(point, color)
        }
        fn draw_line<S: BackendStyle>(
            &mut self,
            from: BackendCoord,
            to: BackendCoord,
            style: &S,
        ) -> Result<(), Error<'a>> {
            self.inner.draw_line(from, to, style)
        }
        fn draw_rect<S: BackendStyle>(
            &mut self,
            ul: BackendCoord,
            br: BackendCoord,
            style: &S,
            fill: bool,
        ) -> Result<(), Error<'a>> {
            self.inner.draw_rect(ul, br, style, fill)
        }
        fn draw_path<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
            &mut self,
            path: I,
            style: &S,
        ) -> Result<(), Error<'a>> {
            self.inner.draw_path(path, style)
        }
        fn draw_circle<S: BackendStyle>(
            &mut self,
            center: BackendCoord,
            radius: u32,
            style: &S,
            fill: bool,
        ) -> Result<(), Error<'a>> {
            self.inner.draw_circle(center, radius, style, fill)
        }
        fn fill_polygon<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
            &mut self,
            vert: I,
            style: &S,
        ) -> Result<(), Error<'a>> {
            self.inner.fill_polygon(vert, style)
        }

        fn estimate_text_size<S: BackendTextStyle>(&self, text: &str, style: &S) -> Result<(u32, u32), Error<'a>> {
            let (w, h) = self.measure(text, style.size());
            Ok((w.ceil() as u32, h.ceil() as u32))
        }

        fn draw_text<S: BackendTextStyle>(
            &mut self,
            text: &str,
            style: &S,
            pos: BackendCoord,
        ) -> Result<(), Error<'a>> {
            let color = style.color();
            if color.alpha == 0.0 {
                return Ok(());
            }
            let scale = Self::scale(style.size());
            let (width, height) = self.measure(text, style.size());
            // Anchor offsets, as plotters' default `draw_text` computes them.
            let dx = match style.anchor().h_pos {
                HPos::Left => 0.0,
                HPos::Center => -width / 2.0,
                HPos::Right => -width,
            };
            let dy = match style.anchor().v_pos {
                VPos::Top => 0.0,
                VPos::Center => -height / 2.0,
                VPos::Bottom => -height,
            };
            let transform = style.transform();
            let font = self.font.as_scaled(scale);
            // Rasterise first: the coverage callback cannot return the backend's errors.
            let mut pixels: Vec<(BackendCoord, f32)> = Vec::new();
            let (mut caret, mut prev) = (0.0f32, None);
            for c in text.chars() {
                let id = font.glyph_id(c);
                if let Some(p) = prev {
                    caret += font.kern(p, id);
                }
                prev = Some(id);
                let glyph = id.with_scale_and_position(scale, point(caret + dx, font.ascent() + dy));
                caret += font.h_advance(id);
                if let Some(outline) = self.font.outline_glyph(glyph) {
                    let bounds = outline.px_bounds();
                    outline.draw(|gx, gy, coverage| {
                        let (x, y) =
                            transform.transform(bounds.min.x as i32 + gx as i32, bounds.min.y as i32 + gy as i32);
                        pixels.push(((pos.0 + x, pos.1 + y), coverage));
                    });
                }
            }
            for (point, coverage) in pixels {
                if coverage > 0.0 {
                    let alpha = color.alpha * f64::from(coverage.min(1.0));
                    self.inner.draw_pixel(point, BackendColor { alpha, rgb: color.rgb })?;
                }
            }
            Ok(())
        }
    }
}

/// Where to look for a font when `--font` is not given: DejaVu and Liberation on Linux
/// (`apt-get install fonts-dejavu-core`), Arial on macOS and Windows.
const FONT_CANDIDATES: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu-sans-fonts/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/liberation-sans/LiberationSans-Regular.ttf",
    "/System/Library/Fonts/Supplemental/Arial.ttf",
    "/Library/Fonts/Arial.ttf",
    "C:\\Windows\\Fonts\\arial.ttf",
];

/// The font for PNG text: `explicit` (an error if it cannot be read), else the first usable
/// candidate, else `None`.
pub fn find_font(explicit: Option<&Path>) -> Result<Option<(PathBuf, ab_glyph::FontVec)>> {
    let load = |path: &Path| -> Result<ab_glyph::FontVec> {
        let bytes = std::fs::read(path).with_context(|| format!("reading font {}", path.display()))?;
        ab_glyph::FontVec::try_from_vec(bytes)
            .map_err(|e| anyhow!("{}: not a TrueType/OpenType font ({e})", path.display()))
    };
    if let Some(path) = explicit {
        return Ok(Some((path.to_path_buf(), load(path)?)));
    }
    Ok(FONT_CANDIDATES.iter().map(Path::new).find_map(|p| load(p).ok().map(|f| (p.to_path_buf(), f))))
}

/// Writes `chart` as `<stem>.svg`, and as `<stem>.png` when `font` is given.
pub fn render_chart(chart: &Chart, dir: &Path, stem: &str, font: Option<&ab_glyph::FontVec>) -> Result<Vec<PathBuf>> {
    use plotters::prelude::{IntoDrawingArea, SVGBackend};
    let mut written = Vec::new();
    let svg = dir.join(format!("{stem}.svg"));
    {
        let root = SVGBackend::new(&svg, PLOT_SIZE).into_drawing_area();
        draw::draw_chart(chart, &root).map_err(|e| anyhow!("drawing {}: {e}", svg.display()))?;
        root.present().map_err(|e| anyhow!("writing {}: {e}", svg.display()))?;
    }
    written.push(svg);
    if let Some(font) = font {
        let png = dir.join(format!("{stem}.png"));
        let (w, h) = PLOT_SIZE;
        let mut rgb = vec![255u8; (w * h * 3) as usize];
        {
            let backend = glyph_bitmap::GlyphBitmap {
                inner: plotters::backend::BitMapBackend::with_buffer(&mut rgb, PLOT_SIZE),
                font,
            };
            let root = backend.into_drawing_area();
            draw::draw_chart(chart, &root).map_err(|e| anyhow!("drawing {}: {e}", png.display()))?;
            root.present().map_err(|e| anyhow!("drawing {}: {e}", png.display()))?;
        }
        write_png(&png, &rgb, PLOT_SIZE)?;
        written.push(png);
    }
    Ok(written)
}

fn write_png(path: &Path, rgb: &[u8], (w, h): (u32, u32)) -> Result<()> {
    let file = std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut encoder = png::Encoder::new(std::io::BufWriter::new(file), w, h);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder.write_header().with_context(|| format!("writing {}", path.display()))?;
    writer.write_image_data(rgb).with_context(|| format!("writing {}", path.display()))?;
    writer.finish().with_context(|| format!("writing {}", path.display()))
}

// ---------------------------------------------------------------------------------------------
// The command
// ---------------------------------------------------------------------------------------------

/// What [`write_report`] produced.
#[derive(Debug, Clone)]
pub struct Written {
    /// Every file written.
    pub files: Vec<PathBuf>,
    /// The font the PNGs used; `None` when no PNG was drawn.
    pub font: Option<PathBuf>,
}

/// Writes report.md, report.csv, report.json and the plots into `out`.
pub fn write_report(report: &Report, out: &Path, font: Option<&Path>) -> Result<Written> {
    let plots_dir = out.join("plots");
    std::fs::create_dir_all(&plots_dir).with_context(|| format!("creating {}", plots_dir.display()))?;
    let font = find_font(font)?;
    let charts = charts(report);
    let mut files = Vec::new();
    for (stem, chart) in &charts {
        files.extend(render_chart(chart, &plots_dir, stem, font.as_ref().map(|f| &f.1))?);
    }
    let stems: Vec<String> = charts.into_iter().map(|(s, _)| s).collect();
    let text_files = [
        ("report.md", markdown(report, &stems)),
        ("report.csv", csv(report)),
        ("report.json", serde_json::to_string_pretty(report).context("serialising the report")?),
    ];
    for (name, text) in text_files {
        let path = out.join(name);
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        files.push(path);
    }
    Ok(Written { files, font: font.map(|f| f.0) })
}

/// `trainer report`.
pub fn run(args: ReportArgs) -> Result<()> {
    if args.group_by.is_empty() {
        bail!("--group-by needs at least one key");
    }
    let runs = load_runs(&args.runs)?;
    let report = summarise(runs, &args.group_by);
    let written = write_report(&report, &args.out, args.font.as_deref())?;
    let flagged = report.runs.iter().filter(|r| r.did_not_learn()).count();
    let not_evaluated = report.runs.iter().filter(|r| r.eval.is_none()).count();
    println!(
        "{} runs, {} groups ({flagged} did not learn, {not_evaluated} not evaluated)",
        report.runs.len(),
        report.groups.len()
    );
    for file in &written.files {
        println!("wrote {}", file.display());
    }
    match &written.font {
        Some(font) => println!("PNG text font: {}", font.display()),
        None => println!(
            "note: no font found for PNG text, so only SVG plots were written; pass --font FILE.ttf \
             or install one (apt-get install fonts-dejavu-core)"
        ),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::{write_json, AdvResult, CleanResult, LevelResult, Score};

    fn run_config(task: &str, connection: &str, seed: u64) -> RunConfig {
        RunConfig {
            task: task.into(),
            model: "models/none".into(),
            connection: connection.into(),
            train_file: "train.tsv".into(),
            seed,
            epochs: 3,
            max_steps: None,
            train_samples: None,
            val_samples: None,
            batch_size: 32,
            grad_accum: 1,
            max_len: 16,
            optimizer: "adamw".into(),
            lr: 2e-5,
            weight_decay: 0.01,
            adam_eps: 1e-8,
            adam_beta1: 0.9,
            adam_beta2: 0.999,
            warmup_ratio: 0.1,
            max_grad_norm: None,
            shuffle: true,
            dropout: None,
            adv: "none".into(),
            adv_epsilon: 0.0,
            adv_alpha: 0.0,
            adv_steps: 0,
            adv_tau: 0.0,
            adv_lambda: 0.0,
            backend: "ndarray".into(),
            command: "trainer finetune".into(),
        }
    }

    fn score(accuracy: f64) -> Score {
        Score { n: 100, accuracy, f1: None }
    }

    /// One split's results: clean, AdvGLUE, clean originals, paired adversarial, word level.
    struct Split {
        name: &'static str,
        clean: f64,
        adv: f64,
        original: f64,
        paired: f64,
        word: f64,
    }

    fn eval(config: &RunConfig, splits: &[Split], did_not_learn: bool) -> EvalReport {
        EvalReport {
            task: config.task.clone(),
            model: "best".into(),
            connection: config.connection.clone(),
            clean: splits
                .iter()
                .map(|s| CleanResult {
                    split: s.name.into(),
                    score: score(s.clean),
                    majority_share: 0.5,
                    top_prediction_share: 0.5,
                })
                .collect(),
            advglue: splits
                .iter()
                .map(|s| AdvResult {
                    split: s.name.into(),
                    adversarial: score(s.adv),
                    clean_original: score(s.original),
                    adversarial_paired: score(s.paired),
                    top_prediction_share: 0.5,
                    by_level: [("word".to_string(), LevelResult { adversarial: score(s.word), clean_original: None })]
                        .into(),
                    by_method: BTreeMap::new(),
                })
                .collect(),
            did_not_learn,
            did_not_learn_reason: did_not_learn.then(|| "clean accuracy 51.0% is at chance".to_string()),
            flops_per_example: 1.5e9,
            examples_per_sec: 100.0 + config.seed as f64,
        }
    }

    fn sst2(clean: f64, adv: f64) -> Split {
        Split { name: "sst2", clean, adv, original: clean, paired: adv - 0.05, word: adv - 0.1 }
    }

    fn write_run(root: &Path, name: &str, config: &RunConfig, eval: Option<&EvalReport>) -> PathBuf {
        let dir = root.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        write_json(&dir.join("config.json"), config).unwrap();
        if let Some(e) = eval {
            write_json(&dir.join("eval.json"), e).unwrap();
        }
        dir
    }

    /// Three BERT seeds, two IM seeds (one of which did not learn), one IM run not evaluated,
    /// an MNLI run, and a pretrained model folder that must not count as a run.
    fn fixture(root: &Path) {
        for (seed, (clean, adv)) in [(1, (0.90, 0.40)), (2, (0.92, 0.42)), (3, (0.94, 0.44))] {
            let c = run_config("sst2", "bert", seed);
            write_run(root, &format!("sst2/bert-{seed}"), &c, Some(&eval(&c, &[sst2(clean, adv)], false)));
        }
        let c = run_config("sst2", "im:gamma=0.1,T=5", 1);
        write_run(root, "sst2/im5-1", &c, Some(&eval(&c, &[sst2(0.91, 0.56)], false)));
        let c = run_config("sst2", "im:T=5,gamma=0.1", 2);
        write_run(root, "sst2/im5-2", &c, Some(&eval(&c, &[sst2(0.51, 0.60)], true)));
        let c = run_config("sst2", "im:T=2,gamma=0.1", 1);
        let dir = write_run(root, "sst2/im2-1", &c, Some(&eval(&c, &[sst2(0.90, 0.50)], false)));
        let layer = |layer, squared_norms: Vec<f64>, rises_after_iteration| crate::run::LayerResidualCheck {
            layer,
            gamma: 0.1,
            squared_norms,
            rises_after_iteration,
        };
        let check = ImResidualCheck {
            examples: 16,
            layers: vec![layer(0, vec![9.0, 5.0, 4.0], vec![]), layer(1, vec![3.0, 7.0, 6.0], vec![1])],
        };
        write_json(&dir.join(IM_RESIDUALS_FILE), &check).unwrap();
        let c = run_config("sst2", "im:T=3,gamma=0.1,layers=0-0", 1);
        write_run(root, "sst2/im3-pending", &c, None);
        let c = run_config("mnli", "bert", 1);
        let m = Split { name: "mnli", clean: 0.84, adv: 0.30, original: 0.8, paired: 0.3, word: 0.2 };
        let mm = Split { name: "mnli-mm", clean: 0.85, adv: 0.31, original: 0.8, paired: 0.31, word: 0.21 };
        write_run(root, "mnli/bert-1", &c, Some(&eval(&c, &[m, mm], false)));
        let model = root.join("models/bert-tiny");
        std::fs::create_dir_all(&model).unwrap();
        std::fs::write(model.join("config.json"), serde_json::to_string(&BertConfig::tiny()).unwrap()).unwrap();
    }

    fn default_report(root: &Path) -> Report {
        let runs = load_runs(&[root.to_path_buf()]).unwrap();
        summarise(runs, &[GroupKey::Task, GroupKey::Connection])
    }

    fn group<'a>(report: &'a Report, task: &str, connection: &str) -> &'a GroupSummary {
        report
            .groups
            .iter()
            .find(|g| g.task.as_deref() == Some(task) && g.connection.as_deref() == Some(connection))
            .unwrap_or_else(|| panic!("no group {task} {connection}"))
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    #[test]
    fn mean_and_sample_std() {
        let s = Stat::of(&[0.8, 0.9, 1.0]).unwrap();
        assert!(close(s.mean, 0.9) && close(s.std.unwrap(), 0.1) && s.n == 3, "{s:?}");
        let one = Stat::of(&[0.7]).unwrap();
        assert_eq!((one.std, one.n), (None, 1));
        assert!(Stat::of(&[]).is_none());
    }

    #[test]
    fn finds_runs_and_skips_model_folders() {
        let tmp = tempfile::tempdir().unwrap();
        fixture(tmp.path());
        // A run's own best/ holds an HF config: neither it nor models/ are runs.
        let best = tmp.path().join("sst2/bert-1/best");
        std::fs::create_dir_all(&best).unwrap();
        std::fs::write(best.join("config.json"), serde_json::to_string(&BertConfig::tiny()).unwrap()).unwrap();
        let dirs = find_run_dirs(tmp.path()).unwrap();
        assert_eq!(dirs.len(), 8, "{dirs:?}");
        assert!(dirs.iter().all(|d| !d.starts_with(tmp.path().join("models"))));
        assert!(load_runs(&[tmp.path().join("models")]).is_err(), "a folder without runs is an error");
        assert!(load_runs(&[tmp.path().join("missing")]).is_err());
    }

    #[test]
    fn groups_across_seeds_with_mean_and_std() {
        let tmp = tempfile::tempdir().unwrap();
        fixture(tmp.path());
        let report = default_report(tmp.path());
        // sst2: bert, im T=2, im T=3 (layers 0-0), im T=5 (two spellings, one group); mnli: bert.
        assert_eq!(report.groups.len(), 5, "{:?}", report.groups.iter().map(|g| &g.values).collect::<Vec<_>>());
        let bert = group(&report, "sst2", "bert");
        assert_eq!((bert.runs.len(), bert.evaluated, bert.did_not_learn), (3, 3, 0));
        let s = bert.split("sst2").unwrap();
        let clean = s.clean.unwrap();
        assert!(close(clean.mean, 0.92) && close(clean.std.unwrap(), 0.02), "{clean:?}");
        assert!(close(s.adversarial.unwrap().mean, 0.42));
        // drop = clean original - paired adversarial = clean - (adv - 0.05) per run.
        assert!(close(s.drop.unwrap().mean, 0.92 - 0.37), "{:?}", s.drop);
        assert!(close(s.levels["word"].mean, 0.32));
        assert!(close(bert.examples_per_sec.unwrap().mean, 102.0));
        assert!(close(bert.flops.unwrap().mean, 1.5e9));

        let im5 = group(&report, "sst2", "im:T=5,gamma=0.1");
        assert_eq!((im5.runs.len(), im5.did_not_learn), (2, 1));
        assert!(im5.flagged());
        // Order: bert before im by T.
        let order: Vec<_> = report.groups.iter().map(|g| g.connection.clone().unwrap()).collect();
        assert_eq!(order[..4], ["bert", "im:T=2,gamma=0.1", "im:T=3,gamma=0.1,layers=0-0", "im:T=5,gamma=0.1"]);

        // MNLI keeps matched and mismatched apart.
        let mnli = group(&report, "mnli", "bert");
        let names: Vec<_> = mnli.splits.iter().map(|s| s.split.as_str()).collect();
        assert_eq!(names, ["mnli", "mnli-mm"]);

        // Grouping by task alone pools every sst2 run.
        let by_task = summarise(load_runs(&[tmp.path().to_path_buf()]).unwrap(), &[GroupKey::Task]);
        assert_eq!(by_task.groups.len(), 2);
        assert_eq!(by_task.groups[0].runs.len(), 7);
        assert_eq!(by_task.groups[0].connection, None);
    }

    #[test]
    fn markdown_flags_did_not_learn_beside_clean_accuracy() {
        let tmp = tempfile::tempdir().unwrap();
        fixture(tmp.path());
        let report = default_report(tmp.path());
        let md = markdown(&report, &[]);
        println!("{md}");
        assert!(md.contains("⚠ did not learn (1/2)"), "group flag missing");
        assert!(md.contains("⚠ did not learn: clean accuracy 51.0% is at chance"), "run flag missing");
        assert!(md.contains("not evaluated"));
        // A run whose IM residual rose before training says which layer overshot.
        let im2_run = md.lines().find(|l| l.contains("im2-1 |")).expect("im2-1 run row");
        assert!(im2_run.ends_with("| ok; ⚠ IM residual rose at the start in layer 1 |"), "{im2_run}");
        let im5_run = md.lines().find(|l| l.contains("im5-1 |")).expect("im5-1 run row");
        assert!(im5_run.ends_with("| ok |"), "{im5_run}");
        assert!(md.contains("\"IM residual rose\": before training"), "the flag is explained");
        // Every table row with an AdvGLUE number also shows a clean accuracy.
        let im5_row = md.lines().find(|l| l.contains("| im:T=5,gamma=0.1 | sst2 |")).expect("im T=5 row");
        assert!(im5_row.contains("71.0 ± 28.3"), "clean mean ± std beside robustness: {im5_row}");
        assert!(im5_row.contains("⚠ 58.0 ± 2.8"), "flagged AdvGLUE cell: {im5_row}");
        let bert_row = md.lines().find(|l| l.starts_with("| sst2 | bert | sst2 |")).expect("bert row");
        assert!(
            bert_row.contains("92.0 ± 2.0") && bert_row.contains("42.0 ± 2.0") && !bert_row.contains('⚠'),
            "{bert_row}"
        );
        // The by-task table puts clean accuracy in parentheses and averages the tasks.
        let pivot = md.lines().find(|l| l.starts_with("| bert |")).expect("pivot row");
        assert!(
            pivot.contains("42.0 ± 2.0 (92.0 ± 2.0)") && pivot.contains("30.0 (84.0)") && pivot.contains("31.0 (85.0)"),
            "{pivot}"
        );
        let avg = (42.0 + 30.0 + 31.0) / 3.0;
        assert!(pivot.ends_with(&format!("{avg:.1} ({:.1}) |", (92.0 + 84.0 + 85.0) / 3.0)), "{pivot}");
    }

    #[test]
    fn csv_has_one_row_per_group_and_split() {
        let tmp = tempfile::tempdir().unwrap();
        fixture(tmp.path());
        let report = default_report(tmp.path());
        let text = csv(&report);
        let mut lines = text.lines();
        let header: Vec<&str> = lines.next().unwrap().split(',').collect();
        let mut expected = vec!["task", "connection"];
        expected.extend(CSV_COLUMNS);
        assert_eq!(header, expected);
        let rows: Vec<&str> = lines.collect();
        // sst2: 4 groups x 1 split (the unevaluated group gets an empty split); mnli: 2 splits.
        assert_eq!(rows.len(), 6, "{text}");
        let im5 = rows.iter().find(|r| r.starts_with("sst2,\"im:T=5,gamma=0.1\",sst2,")).expect("quoted spec");
        assert!(im5.contains(",2,2,1,true,"), "{im5}");
        let pending = rows.iter().find(|r| r.contains("layers=0-0")).unwrap();
        assert!(pending.ends_with(",not evaluated"), "{pending}");
        // Same number of fields in every row (the quoted spec holds commas).
        let fields = |r: &str| {
            r.replace("\"im:T=5,gamma=0.1\"", "x")
                .replace("\"im:T=2,gamma=0.1\"", "x")
                .replace("\"im:T=3,gamma=0.1,layers=0-0\"", "x")
                .split(',')
                .count()
        };
        assert!(rows.iter().all(|r| fields(r) == header.len()), "{text}");
    }

    #[test]
    fn flops_are_computed_when_not_evaluated() {
        let tmp = tempfile::tempdir().unwrap();
        let mut c = run_config("sst2", "im:T=3,layers=1-1", 1);
        let model = tmp.path().join("models/tiny");
        std::fs::create_dir_all(&model).unwrap();
        std::fs::write(model.join("config.json"), serde_json::to_string(&BertConfig::tiny()).unwrap()).unwrap();
        c.model = model.display().to_string();
        let dir = write_run(tmp.path(), "runs/a", &c, None);
        let run = load_run(&dir).unwrap();
        let tiny = BertConfig::tiny();
        let conns = ConnectionSpec::parse("im:T=3,layers=1-1").unwrap().per_layer(2).unwrap();
        assert_eq!(run.flops, Some(shared::flops::forward_flops(&tiny, &conns, c.max_len, true)));
        assert_eq!(run.flops_source, FlopsSource::ComputedAtMaxLen);
        let report = summarise(vec![run], &[GroupKey::Task, GroupKey::Connection]);
        assert!(markdown(&report, &[]).contains("computed from the run's config at `max_len`"));
    }

    #[test]
    fn plots_are_written_with_their_labels() {
        let tmp = tempfile::tempdir().unwrap();
        fixture(tmp.path());
        let report = default_report(tmp.path());
        let stems: Vec<String> = charts(&report).into_iter().map(|(s, _)| s).collect();
        for stem in ["accuracy_vs_T_sst2", "accuracy_by_layers_sst2", "attack_levels_sst2", "attack_levels_mnli-mm"] {
            assert!(stems.iter().any(|s| s == stem), "{stem} missing from {stems:?}");
        }
        assert!(!stems.iter().any(|s| s.starts_with("accuracy_vs_T_mnli")), "no IM runs on mnli");

        let out = tmp.path().join("out");
        let written = write_report(&report, &out, None).unwrap();
        for name in ["report.md", "report.csv", "report.json"] {
            assert!(out.join(name).is_file(), "{name}");
        }
        let svg = std::fs::read_to_string(out.join("plots/accuracy_vs_T_sst2.svg")).unwrap();
        assert!(
            svg.contains("T (IM iterations)") && svg.contains("AdvGLUE") && svg.contains("(did not learn)"),
            "labels missing"
        );
        let bars = std::fs::read_to_string(out.join("plots/attack_levels_sst2.svg")).unwrap();
        assert!(bars.contains("word (AdvGLUE)") && bars.contains(CLEAN_LABEL) && bars.contains("bert"));
        let png = out.join("plots/attack_levels_sst2.png");
        match &written.font {
            Some(font) => {
                let bytes = std::fs::read(&png).unwrap();
                assert!(bytes.starts_with(b"\x89PNG"), "not a PNG");
                println!("PNG plots drawn with {}", font.display());
            }
            None => {
                assert!(!png.exists());
                println!("no system font: SVG only (as designed)");
            }
        }
        let md = std::fs::read_to_string(out.join("report.md")).unwrap();
        assert!(md.contains("(plots/accuracy_vs_T_sst2.svg)"));
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
        assert_eq!(json["runs"].as_array().unwrap().len(), 8);
    }

    #[test]
    fn command_line_defaults_and_group_keys() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            args: ReportArgs,
        }
        let cli = Cli::try_parse_from(["report", "runs/"]).unwrap();
        assert_eq!(cli.args.group_by, [GroupKey::Task, GroupKey::Connection]);
        assert_eq!(cli.args.out, PathBuf::from("report"));
        let cli =
            Cli::try_parse_from(["report", "a", "b", "--group-by", "task,adv,train-samples", "--out", "o"]).unwrap();
        assert_eq!(cli.args.runs.len(), 2);
        assert_eq!(cli.args.group_by, [GroupKey::Task, GroupKey::Adv, GroupKey::TrainSamples]);
        assert!(Cli::try_parse_from(["report"]).is_err(), "a run directory is required");
        assert!(Cli::try_parse_from(["report", "a", "--group-by", "seed"]).is_err());
    }

    /// A given --font that is not a font is the user's error, not a silent SVG-only run.
    #[test]
    fn bad_font_is_an_error() {
        let tmp = tempfile::tempdir().unwrap();
        let bogus = tmp.path().join("font.ttf");
        std::fs::write(&bogus, b"not a font").unwrap();
        assert!(find_font(Some(&bogus)).is_err());
        assert!(find_font(Some(&tmp.path().join("missing.ttf"))).is_err());
    }
}
