//! `trainer report`: the paper's tables and plots over many run directories.
//!
//! Runs are found by their `config.json` (a [`RunConfig`]), grouped (by default by task and
//! connection) across seeds, and each number is shown as mean ± sample standard deviation over
//! the group's runs, with the number of runs. Outputs, under `--out`:
//! - `report.md`: the tables, clean accuracy always beside every robustness number (project rule),
//!   runs whose `eval.json` says `did_not_learn` flagged "⚠ did not learn";
//! - `report.csv`: one row per group and evaluation split, accuracies as fractions as in
//!   `eval.json`;
//! - `report.json`: the groups and every run's config and evaluation;
//! - `plots/*.svg` always, `plots/*.png` when a font for their text is found: accuracy vs IM's `T`,
//!   accuracy per IM layer range, accuracy per attack level.

mod charts;
mod csv;
mod draw;
mod glyph_bitmap;
mod load;
mod markdown;
mod render;
mod stats;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use serde::Serialize;

use crate::run::RunConfig;

pub use charts::{charts, BarChart, BarSeriesData, Chart, LineChart, LineSeriesData};
pub use csv::{csv, CSV_COLUMNS};
pub use load::{find_run_dirs, load_run, load_runs, FlopsSource, RunRecord};
pub use markdown::markdown;
pub(crate) use markdown::plain;
pub use render::{find_font, render_chart};
pub use stats::{summarise, GroupSummary, Report, SplitSummary, Stat};

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
            GroupKey::Task => config.task.to_string(),
            GroupKey::Connection => config.connection.to_spec_string(),
            GroupKey::Model => config.model.clone(),
            GroupKey::Adv => config.adv.name().to_string(),
            GroupKey::TrainSamples => config.train_samples.map_or("full".into(), |n| n.to_string()),
        }
    }
}

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
    std::fs::create_dir_all(&plots_dir)
        .with_context(|| format!("creating {}", plots_dir.display()))?;
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
    if let [dir] = args.runs.as_slice() {
        if crate::reproduce::is_attack_dir(dir) {
            // Block 4's attacks (`reproduce --preset attack`) have tables of their own.
            return crate::reproduce::write_attack_report(dir, &args.out);
        }
    }
    let runs = load_runs(&args.runs)?;
    let mut report = summarise(runs, &args.group_by);
    for dir in args.runs.iter().filter(|p| p.is_dir()) {
        if let Some(speed) = crate::speed::read_speed(dir)? {
            report.speed = Some(speed);
            break;
        }
    }
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
            "note: no font found for PNG text, so only SVG plots were written; \
             pass --font FILE.ttf or install one (apt-get install fonts-dejavu-core)"
        ),
    }
    Ok(())
}
