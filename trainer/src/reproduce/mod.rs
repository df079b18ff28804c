//! `trainer reproduce --preset <name>`: a whole experiment grid (tasks x arms x seeds), each
//! cell fine-tuned, evaluated, summarised into a file meant to be committed, and finally
//! reported from those summaries.
//!
//! Grids that search the learning rate train the first seed at each rate, keep the rate with the
//! lowest validation loss (validation split only, the same rates for every arm), and train the
//! other seeds at it. A grid resumes from what exists: a cell whose summary is there is skipped
//! (so a fresh clone resumes from the repository), a half-trained one continues from its
//! checkpoint.

mod attack_block;
mod attack_report;
mod cell;
mod presets;

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Args;
use shared::data::Task;

pub use attack_report::{is_attack_dir, write as write_attack_report};
pub use cell::{config_of, Cell, Shared};
pub use presets::{layer_thirds, Arm, Grid, Preset, LOW_RESOURCE, SEARCHED_LRS};

use crate::backend::BackendKind;
use crate::datasets;
use crate::lr_search::{self, Search, Trial};
use crate::report::{self, GroupKey, ReportArgs};
use crate::run::{self, AdvKind, RunSummary};

#[derive(Args, Debug, Clone)]
pub struct ReproduceArgs {
    #[arg(long, value_enum)]
    pub preset: Preset,
    /// The same grid at smoke budgets (32 train / 16 validation examples, 2 steps, 2 seeds,
    /// 16 evaluation and probe examples per split, no f64 probe) to check the whole path in
    /// minutes. Its summaries and report stay under the grid directory, never in `--results`.
    #[arg(long)]
    pub smoke: bool,
    /// Pretrained HF BERT directory (the paper: bert-base-uncased).
    #[arg(long, default_value = "models/all-minilm-l6-v2")]
    pub model: PathBuf,
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Grid directory for the run directories (default: runs/<preset>, runs/<preset>-smoke).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Restrict the tasks (comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub tasks: Option<Vec<String>>,
    /// Replace the preset's seeds (comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub seeds: Option<Vec<u64>>,
    /// Replace the preset's arms by these connections without adversarial training (repeat the
    /// flag; specs contain commas).
    #[arg(long = "connection")]
    pub connections: Vec<String>,
    /// `attack`: block 1's grid directory, whose models are attacked (default: runs/sst2, or
    /// runs/sst2-smoke with --smoke); its summaries are read from `--results` as for block 1.
    #[arg(long)]
    pub victims: Option<PathBuf>,
    /// The T sweep's layer range (`t-sweep`: the best layer group of the sst2 grid; default all).
    #[arg(long = "im-layers")]
    pub im_layers: Option<String>,
    /// Learning rates (comma-separated): one, or several to search on the first seed (default:
    /// the preset's, 2e-5,1e-4 for the low-resource grids).
    #[arg(long, value_delimiter = ',')]
    pub lrs: Option<Vec<f64>>,
    /// Epochs per run (default: the preset's, 2 for the low-resource grids).
    #[arg(long)]
    pub epochs: Option<usize>,
    #[arg(long)]
    pub max_steps: Option<usize>,
    /// Evaluate at most this many examples per split.
    #[arg(long)]
    pub eval_limit: Option<usize>,
    #[arg(long, value_enum, default_value = "ndarray")]
    pub backend: BackendKind,
    /// Clip the gradient's global norm (0: no clipping), as `finetune --max-grad-norm`.
    #[arg(long, default_value_t = 0.0)]
    pub max_grad_norm: f64,
    /// Where each finished cell's summary goes (`<results>/<grid>/<cell>.json`, meant to be
    /// committed; the learning-rate trials in `<results>/<grid>/lr-search/`).
    #[arg(long, default_value = "results/runs")]
    pub results: PathBuf,
    /// Where the report over the summaries goes (`<report>/<grid>/`).
    #[arg(long, default_value = "results/report")]
    pub report: PathBuf,
    /// Print the grid and exit.
    #[arg(long)]
    pub dry_run: bool,
}

/// Where one grid's files go.
struct Layout {
    /// Run directories.
    runs: PathBuf,
    /// Committed summaries of the grid's cells.
    summaries: PathBuf,
    /// Summaries of every learning-rate trial and each search's outcome.
    searches: PathBuf,
    report: PathBuf,
}

impl Layout {
    fn of(args: &ReproduceArgs) -> Layout {
        let suffix = if args.smoke { "-smoke" } else { "" };
        let runs = args.out.clone().unwrap_or_else(|| {
            PathBuf::from("runs").join(format!("{}{suffix}", args.preset.name()))
        });
        let grid =
            runs.file_name().map_or_else(|| "grid".into(), |n| n.to_string_lossy().into_owned());
        let (summaries, report) = if args.smoke {
            (runs.join("summaries"), runs.join("report"))
        } else {
            (args.results.join(&grid), args.report.join(&grid))
        };
        Layout { searches: summaries.join("lr-search"), runs, summaries, report }
    }
}

pub fn run(args: ReproduceArgs) -> Result<()> {
    let layout = Layout::of(&args);
    if args.preset == Preset::Attack {
        return attack_block::run(&args, &layout);
    }
    let grid = grid_of(&args)?;
    let shared = Shared {
        model: args.model.clone(),
        data_dir: args.data_dir.clone().unwrap_or_else(datasets::default_data_dir),
        samples: grid.samples,
        epochs: grid.epochs,
        max_steps: args.max_steps.or(args.smoke.then_some(2)),
        max_grad_norm: args.max_grad_norm,
        eval_limit: args.eval_limit.or(args.smoke.then_some(16)),
        clean_sample: grid.clean_sample,
        backend: args.backend,
        command: format!(
            "trainer reproduce --preset {}{}",
            args.preset.name(),
            if args.smoke { " --smoke" } else { "" }
        ),
        lr_in_name: grid.searches_lr(),
        smoke: args.smoke,
    };
    let lines = grid.tasks.len() * grid.arms.len();
    let cells = lines * (grid.seeds.len() + grid.lrs.len() - 1);
    println!(
        "{cells} cells ({} tasks x {} arms x {} seeds{}) in {}",
        grid.tasks.len(),
        grid.arms.len(),
        grid.seeds.len(),
        if grid.searches_lr() {
            format!("; the first seed at each lr of {:?}", grid.lrs)
        } else {
            format!(" at lr {:e}", grid.lrs[0])
        },
        layout.runs.display()
    );
    if args.dry_run {
        return dry_run(&grid, &shared, &layout);
    }
    std::fs::create_dir_all(&layout.runs)
        .with_context(|| format!("creating {}", layout.runs.display()))?;
    let mut progress = Progress { done: 0, total: cells };
    for &task in &grid.tasks {
        for arm in &grid.arms {
            run_line(&grid, &shared, &layout, task, arm, &mut progress)?;
        }
    }
    let mut inputs = vec![layout.summaries.clone()];
    if args.preset == Preset::TSweep && !args.smoke {
        inputs.extend(block1_references(&args.results.join(Preset::Sst2.name()))?);
    }
    report::run(ReportArgs {
        runs: inputs,
        out: layout.report.clone(),
        group_by: vec![GroupKey::Task, GroupKey::Connection, GroupKey::Adv],
        font: None,
    })
}

/// Block 1's committed BERT and EX-BERT summaries (no adversarial training), which the T
/// sweep's report shows beside it: EX-BERT is the sweep's `T = 0` and BERT its reference. Same
/// task, data sizes, seeds and learning-rate search; none when block 1 has not run.
fn block1_references(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    if !dir.is_dir() {
        return Ok(found);
    }
    for entry in std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let path = entry.with_context(|| format!("listing {}", dir.display()))?.path();
        if path.extension().is_none_or(|e| e != "json") || !path.is_file() {
            continue;
        }
        let value: serde_json::Value = run::read_json(&path)?;
        if value.get("config").is_none() || value.get("eval").is_none() {
            continue; // not a cell's summary (`speed.json`)
        }
        let summary: RunSummary = serde_json::from_value(value)
            .with_context(|| format!("{}: not a run summary", path.display()))?;
        let connection = summary.config.connection.to_spec_string();
        if summary.config.adv == AdvKind::None && (connection == "bert" || connection == "ex") {
            found.push(path);
        }
    }
    found.sort();
    Ok(found)
}

/// Counts the cells as they are reached: `[3/36] name`.
struct Progress {
    done: usize,
    total: usize,
}

impl Progress {
    fn next(&mut self, cell: &Cell, lr_in_name: bool) -> String {
        self.done += 1;
        format!("[{}/{}] {}", self.done, self.total, cell.name(lr_in_name))
    }
}

/// One (task, arm) line of the grid: the first seed (at each learning rate, when the grid
/// searches it), then the other seeds at the chosen rate.
fn run_line(
    grid: &Grid,
    shared: &Shared,
    layout: &Layout,
    task: Task,
    arm: &Arm,
    progress: &mut Progress,
) -> Result<()> {
    let cell = |seed, lr| Cell { task, arm: arm.clone(), seed, lr };
    let (&first, rest) = grid.seeds.split_first().context("the grid has no seed")?;
    let lr = if grid.searches_lr() {
        let mut trials = Vec::new();
        for &lr in &grid.lrs {
            let trial_cell = cell(first, lr);
            let label = progress.next(&trial_cell, true);
            let path = layout.searches.join(format!("{}.json", trial_cell.name(true)));
            let summary = cell::ensure(shared, &trial_cell, &layout.runs, &path, &label)?;
            trials.push(trial(&trial_cell, &path, &summary)?);
        }
        let search = lr_search::choose(trials)?;
        record_search(layout, &cell(first, search.chosen_lr), &search)?;
        search.chosen_lr
    } else {
        grid.lrs[0]
    };
    // Without a search the first seed is a cell like the others.
    let seeds = if grid.searches_lr() { rest } else { &grid.seeds[..] };
    for &seed in seeds {
        let c = cell(seed, lr);
        let label = progress.next(&c, shared.lr_in_name);
        let path = layout.summaries.join(format!("{}.json", c.name(shared.lr_in_name)));
        cell::ensure(shared, &c, &layout.runs, &path, &label)?;
    }
    Ok(())
}

/// The preset's grid for the model's depth, with the command line's replacements.
fn grid_of(args: &ReproduceArgs) -> Result<Grid> {
    let config = shared::BertConfig::from_file(&args.model.join("config.json"))?;
    let layers = config.num_hidden_layers;
    if args.im_layers.is_some() && args.preset != Preset::TSweep {
        bail!("--im-layers applies to the t-sweep preset only (use --connection for others)");
    }
    let mut grid = Grid::of(args.preset, layers, args.im_layers.as_deref()).with_context(|| {
        match &args.im_layers {
            Some(layers) => format!("--preset {} --im-layers {layers}", args.preset.name()),
            None => format!("--preset {}", args.preset.name()),
        }
    })?;
    if let Some(names) = &args.tasks {
        let wanted: Vec<Task> =
            names.iter().map(|s| s.parse()).collect::<Result<_, _>>().context("--tasks")?;
        grid.tasks.retain(|t| wanted.contains(t));
        if grid.tasks.is_empty() {
            bail!("--tasks {}: none is in the {} grid", names.join(","), args.preset.name());
        }
    }
    if !args.connections.is_empty() {
        grid.arms = args
            .connections
            .iter()
            .map(|s| {
                let spec = shared::ConnectionSpec::parse(s)
                    .with_context(|| format!("--connection {s}"))?;
                spec.per_layer(layers).with_context(|| format!("--connection {s}"))?;
                Ok(Arm { connection: spec.to_spec_string(), adv: "none" })
            })
            .collect::<Result<_>>()?;
    }
    if args.smoke {
        grid = grid.smoke();
    }
    if let Some(seeds) = &args.seeds {
        if seeds.is_empty() {
            bail!("--seeds needs at least one seed");
        }
        grid.seeds = seeds.clone();
    }
    if let Some(lrs) = &args.lrs {
        if lrs.is_empty() || lrs.iter().any(|lr| !(lr.is_finite() && *lr > 0.0)) {
            bail!("--lrs must be positive numbers, got {lrs:?}");
        }
        grid.lrs = lrs.clone();
    }
    if let Some(epochs) = args.epochs {
        grid.epochs = epochs;
    }
    Ok(grid)
}

/// A trial of the learning-rate search, from its cell's summary.
fn trial(cell: &Cell, path: &Path, summary: &RunSummary) -> Result<Trial> {
    Trial::from_metrics(cell.lr, path, &summary.metrics)
        .with_context(|| format!("{}: no validation recorded", path.display()))
}

/// Writes the search's outcome beside its trials, and the chosen trial's summary into the grid's
/// summaries as the first seed's cell.
fn record_search(layout: &Layout, chosen: &Cell, search: &Search) -> Result<()> {
    let name = chosen.name(true);
    let stem = chosen.name(false);
    run::write_json(&layout.searches.join(format!("{stem}.search.json")), search)?;
    let target = layout.summaries.join(format!("{name}.json"));
    if !target.exists() {
        let trial = layout.searches.join(format!("{name}.json"));
        let summary: RunSummary = run::read_json(&trial)?;
        run::write_json(&target, &summary)?;
    }
    println!("{stem}: lr {:e} chosen on the validation split", search.chosen_lr);
    Ok(())
}

/// Lists the cells, each marked done when its summary exists; later seeds of a searching grid
/// show the chosen rate once the search is recorded.
fn dry_run(grid: &Grid, shared: &Shared, layout: &Layout) -> Result<()> {
    let status = |path: PathBuf| if path.exists() { " (done)" } else { "" };
    for &task in &grid.tasks {
        for arm in &grid.arms {
            let cell = |seed, lr| Cell { task, arm: arm.clone(), seed, lr };
            let (&first, rest) = grid.seeds.split_first().context("the grid has no seed")?;
            if !grid.searches_lr() {
                for &seed in &grid.seeds {
                    let name = cell(seed, grid.lrs[0]).name(false);
                    println!("  {name}{}", status(layout.summaries.join(format!("{name}.json"))));
                }
                continue;
            }
            for &lr in &grid.lrs {
                let name = cell(first, lr).name(true);
                let done = status(layout.searches.join(format!("{name}.json")));
                println!("  {name} (lr trial){done}");
            }
            let search =
                layout.searches.join(format!("{}.search.json", cell(first, 0.0).name(false)));
            let chosen = search
                .exists()
                .then(|| run::read_json::<Search>(&search))
                .transpose()?
                .map(|s| s.chosen_lr);
            for &seed in rest {
                match chosen {
                    Some(lr) => {
                        let name = cell(seed, lr).name(shared.lr_in_name);
                        let done = status(layout.summaries.join(format!("{name}.json")));
                        println!("  {name}{done}");
                    }
                    None => println!(
                        "  {}, at the lr seed {first} chooses",
                        cell(seed, grid.lrs[0]).name(false)
                    ),
                }
            }
        }
    }
    println!("summaries: {}; report: {}", layout.summaries.display(), layout.report.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The T sweep's report takes block 1's plain BERT and EX-BERT cells, not its adversarially
    /// trained or IM ones, nor files that are not cells.
    #[test]
    fn block1_references_are_its_bert_and_ex_cells() {
        let template = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../results/runs/sst2/sst2-bert-none-lr1e-4-s0.json");
        let summary: serde_json::Value = run::read_json(&template).unwrap();
        let tmp = tempfile::tempdir().unwrap();
        assert!(block1_references(&tmp.path().join("absent")).unwrap().is_empty());
        let write = |name: &str, connection: &str, adv: &str| {
            let mut s = summary.clone();
            s["config"]["connection"] = connection.into();
            s["config"]["adv"] = adv.into();
            let path = tmp.path().join(name);
            std::fs::write(&path, serde_json::to_string(&s).unwrap()).unwrap();
            path
        };
        let bert = write("a-bert.json", "bert", "none");
        let ex = write("b-ex.json", "ex", "none");
        write("c-creat.json", "bert", "creat");
        write("d-im.json", "im:T=5,gamma=0.1", "none");
        std::fs::write(tmp.path().join("speed.json"), r#"{"cpu": "x", "arms": []}"#).unwrap();
        std::fs::write(tmp.path().join("notes.txt"), "not a summary").unwrap();
        std::fs::create_dir(tmp.path().join("lr-search")).unwrap();
        assert_eq!(block1_references(tmp.path()).unwrap(), [bert, ex]);
    }
}
