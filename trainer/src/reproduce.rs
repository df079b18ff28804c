//! `trainer reproduce --preset <name>`: a whole experiment grid (tasks x connections x seeds),
//! each cell fine-tuned, evaluated and finally reported. An interrupted grid resumes where it
//! stopped: finished cells are skipped, a half-trained one continues from its checkpoint.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use burn::tensor::backend::Backend;
use clap::{Args, Parser, ValueEnum};
use shared::data::Task;

use crate::backend::BackendKind;
use crate::datasets;
use crate::evaluate::{self, EvalArgs, EvalTarget};
use crate::finetune::{self, FinetuneArgs, RunOptions};
use crate::report::{self, GroupKey, ReportArgs};
use crate::run::{self, RunConfig};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Preset {
    /// A minute-long grid (SST-2, BERT vs IM, tiny budgets) that exercises the whole pipeline.
    Smoke,
    /// Table 1: all tasks, BERT / EX-BERT / IM-BERT, full training data.
    Table1,
    /// Table 2: low-resource (1000 train + 500 validation), 3 seeds; BERT, EX-BERT, the paper's
    /// IM-BERT and IM-BERT in the recommended configuration (`shared::RECOMMENDED_IM`).
    LowResource,
    /// Table 3: the recommended IM on one third of the layers at a time (low-resource, 3 seeds).
    LayerGroups,
    /// IM with T = 1, 5, 10, 15 on SST-2 (low-resource, 3 seeds).
    TSweep,
    /// Adversarial-training baselines: CreAT and PGD (low-resource, 3 seeds).
    Creat,
    /// IM on all layers, each training-gradient choice (exact, detached, frozen) with the paper's
    /// fixed step and with backtracking (SST-2 low-resource, seed 0; docs/numerics.md).
    GradientStudy,
}

#[derive(Args, Debug, Clone)]
pub struct ReproduceArgs {
    #[arg(long, value_enum)]
    pub preset: Preset,
    /// Pretrained HF BERT directory (the paper: bert-base-uncased).
    #[arg(long, default_value = "models/all-minilm-l6-v2")]
    pub model: PathBuf,
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Grid directory (default: runs/<preset>).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Restrict the tasks (comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub tasks: Option<Vec<String>>,
    /// Replace the preset's seeds (comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub seeds: Option<Vec<u64>>,
    /// Replace the preset's connections (repeat the flag; specs contain commas).
    #[arg(long = "connection")]
    pub connections: Vec<String>,
    #[arg(long, default_value_t = 3)]
    pub epochs: usize,
    #[arg(long)]
    pub max_steps: Option<usize>,
    #[arg(long, default_value_t = 2e-5)]
    pub lr: f64,
    /// Evaluate at most this many examples per split.
    #[arg(long)]
    pub eval_limit: Option<usize>,
    #[arg(long, value_enum, default_value = "ndarray")]
    pub backend: BackendKind,
    /// Clip the gradient's global norm (0: no clipping), as `finetune --max-grad-norm`.
    #[arg(long, default_value_t = 0.0)]
    pub max_grad_norm: f64,
    /// Where each finished cell's summary goes (`<results>/<grid>/<cell>.json`, meant to be
    /// committed): a cell whose summary exists is skipped, so a grid resumes from the repository.
    #[arg(long, default_value = "results/runs")]
    pub results: PathBuf,
    /// Print the grid and exit.
    #[arg(long)]
    pub dry_run: bool,
}

/// One cell of a grid.
#[derive(Debug, Clone, PartialEq)]
pub struct Cell {
    pub task: Task,
    pub connection: String,
    pub adv: &'static str,
    pub seed: u64,
    pub train_samples: Option<usize>,
    pub val_samples: Option<usize>,
}

impl Cell {
    fn dir_name(&self) -> String {
        let conn: String = self
            .connection
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() || c == '.' { c } else { '_' })
            .collect();
        format!("{}-{}-{}-s{}", self.task.name(), conn, self.adv, self.seed)
    }
}

/// What a preset varies: every combination of its tasks, connections, adversarial modes and
/// seeds is one cell, all at the same train/validation sizes.
struct Axes {
    tasks: Vec<Task>,
    connections: Vec<String>,
    advs: Vec<&'static str>,
    seeds: Vec<u64>,
    samples: (Option<usize>, Option<usize>),
}

impl Axes {
    fn of(preset: Preset, num_layers: usize) -> Axes {
        let all_tasks = vec![Task::Sst2, Task::Qqp, Task::Qnli, Task::Mnli, Task::Rte];
        let three = vec!["bert".to_string(), "ex".to_string(), "im:T=5,gamma=0.1".to_string()];
        // The low-resource grid puts the configuration chosen on validation data
        // (docs/numerics.md) beside the paper's literal IM.
        let four = [three.clone(), vec![shared::RECOMMENDED_IM.to_string()]].concat();
        let low = (Some(1000), Some(500));
        let axes = |tasks, connections, advs, seeds, samples| Axes {
            tasks,
            connections,
            advs,
            seeds,
            samples,
        };
        match preset {
            Preset::Smoke => axes(
                vec![Task::Sst2],
                vec!["bert".into(), "im:T=2,gamma=0.1".into()],
                vec!["none"],
                vec![0],
                (Some(32), Some(16)),
            ),
            Preset::Table1 => axes(all_tasks, three, vec!["none"], vec![42], (None, None)),
            Preset::LowResource => axes(all_tasks, four, vec!["none"], vec![0, 1, 2], low),
            Preset::LayerGroups => {
                // The paper's Table 3 groups (thirds of the depth), in the recommended
                // configuration: the paper's literal IM does not train (docs/numerics.md).
                let third = (num_layers / 3).max(1);
                let groups = (0..num_layers).step_by(third).map(|a| {
                    let last = (a + third - 1).min(num_layers - 1);
                    format!("{},layers={a}-{last}", shared::RECOMMENDED_IM)
                });
                axes(all_tasks, groups.collect(), vec!["none"], vec![0, 1, 2], low)
            }
            Preset::TSweep => axes(
                vec![Task::Sst2],
                [1, 5, 10, 15].iter().map(|t| format!("im:T={t},gamma=0.1")).collect(),
                vec!["none"],
                vec![0, 1, 2],
                low,
            ),
            Preset::Creat => {
                axes(all_tasks, vec!["bert".into()], vec!["creat", "pgd"], vec![0, 1, 2], low)
            }
            Preset::GradientStudy => {
                // Cheapest first; the exact gradient at the fixed step (known to stay at chance,
                // docs/numerics.md) last.
                let specs = [
                    ",grad=frozen",
                    ",grad=detached",
                    ",grad=frozen,step=backtrack",
                    ",grad=detached,step=backtrack",
                    ",step=backtrack",
                    "",
                ]
                .iter()
                .map(|g| format!("im:T=5,gamma=0.1{g}"))
                .collect();
                axes(vec![Task::Sst2], specs, vec!["none"], vec![0], low)
            }
        }
    }
}

/// The cells of a preset for a model with `num_layers` layers.
pub fn grid(
    preset: Preset,
    num_layers: usize,
    tasks: Option<&[Task]>,
    seeds: Option<&[u64]>,
) -> Vec<Cell> {
    let axes = Axes::of(preset, num_layers);
    let task_list: Vec<Task> = match tasks {
        Some(t) => axes.tasks.into_iter().filter(|x| t.contains(x)).collect(),
        None => axes.tasks,
    };
    let seed_list = seeds.map(<[u64]>::to_vec).unwrap_or(axes.seeds);
    let mut cells = Vec::new();
    for &task in &task_list {
        for connection in &axes.connections {
            for &adv in &axes.advs {
                for &seed in &seed_list {
                    cells.push(Cell {
                        task,
                        connection: connection.clone(),
                        adv,
                        seed,
                        train_samples: axes.samples.0,
                        val_samples: axes.samples.1,
                    });
                }
            }
        }
    }
    cells
}

pub fn run(args: ReproduceArgs) -> Result<()> {
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("runs").join(format!("{:?}", args.preset).to_lowercase()));
    let cells = selected_cells(&args)?;
    println!("{} cells in {}", cells.len(), out.display());
    if args.dry_run {
        for c in &cells {
            println!("  {}", c.dir_name());
        }
        return Ok(());
    }
    std::fs::create_dir_all(&out)?;
    let data_dir = args.data_dir.clone().unwrap_or_else(datasets::default_data_dir);
    let grid_name =
        out.file_name().map_or_else(|| "grid".to_string(), |n| n.to_string_lossy().into_owned());
    let results = args.results.join(&grid_name);
    for (i, cell) in cells.iter().enumerate() {
        let progress = format!("[{}/{}] {}", i + 1, cells.len(), cell.dir_name());
        let dir = out.join(cell.dir_name());
        let summary_path = results.join(format!("{}.json", cell.dir_name()));
        if summary_path.exists() {
            println!("{progress}: summary in {}", summary_path.display());
            continue;
        }
        if !(dir.join("done").exists() && dir.join("eval.json").exists()) {
            println!("{progress}");
            crate::with_backend!(args.backend, |B, device| run_cell::<B>(
                &args, cell, &dir, &data_dir, &device
            ))
            .with_context(|| format!("grid cell {}", cell.dir_name()))?;
        }
        std::fs::create_dir_all(&results)?;
        run::write_json(&summary_path, &run::RunSummary::read(&dir)?)?;
        println!("{progress}: summary written to {}", summary_path.display());
    }
    if report::find_run_dirs(&out)?.is_empty() {
        // A fresh clone: every cell's summary is committed, no run directory is here.
        println!(
            "no run directories in {}: the results are the summaries in {}",
            out.display(),
            results.display()
        );
        return Ok(());
    }
    report::run(ReportArgs {
        runs: vec![out.clone()],
        out: out.join("report"),
        group_by: vec![GroupKey::Task, GroupKey::Connection, GroupKey::Adv],
        font: None,
    })
}

/// The preset's cells for the model's depth, narrowed to `--tasks` and `--seeds`; with
/// `--connection`, each (task, adversarial mode, seed) once per given connection instead.
fn selected_cells(args: &ReproduceArgs) -> Result<Vec<Cell>> {
    let config = shared::BertConfig::from_file(&args.model.join("config.json"))?;
    let tasks: Option<Vec<Task>> = args
        .tasks
        .as_ref()
        .map(|t| t.iter().map(|s| s.parse()).collect::<Result<_, _>>())
        .transpose()?;
    let cells =
        grid(args.preset, config.num_hidden_layers, tasks.as_deref(), args.seeds.as_deref());
    if args.connections.is_empty() {
        return Ok(cells);
    }
    // Canonical specs, so that a cell's name does not depend on how its spec was typed.
    let specs: Vec<String> = args
        .connections
        .iter()
        .map(|s| {
            Ok(shared::ConnectionSpec::parse(s)
                .with_context(|| format!("--connection {s}"))?
                .to_spec_string())
        })
        .collect::<Result<_>>()?;
    let mut seen = std::collections::BTreeSet::new();
    Ok(cells
        .iter()
        .filter(|c| seen.insert((c.task, c.adv, c.seed)))
        .flat_map(|c| specs.iter().map(move |s| Cell { connection: s.clone(), ..c.clone() }))
        .collect())
}

fn run_cell<B: Backend>(
    args: &ReproduceArgs,
    cell: &Cell,
    dir: &Path,
    data_dir: &Path,
    device: &B::Device,
) -> Result<()> {
    let resume = dir.join("config.json").exists();
    let config = if resume {
        let config: RunConfig = run::read_json(&dir.join("config.json"))?;
        config.check().with_context(|| format!("{}", dir.join("config.json").display()))?;
        config
    } else {
        cell_config(args, cell, data_dir)?
    };
    let options = RunOptions { checkpoint_every: 50, progress_every: 50, resume };
    finetune::train::<burn::backend::Autodiff<B>>(&config, dir, &options, device)?;
    let target = EvalTarget {
        model_dir: dir.join("best"),
        task: cell.task,
        connection: config.connection.clone(),
    };
    let eval_args = EvalArgs {
        run: Some(dir.to_path_buf()),
        model: None,
        task: None,
        connection: None,
        data_dir: Some(data_dir.to_path_buf()),
        limit: args.eval_limit,
        batch_size: 32,
        max_len: config.max_len,
        out: None,
        backend: args.backend,
    };
    let report = evaluate::evaluate::<B>(&target, data_dir, &eval_args, device)?;
    run::write_json(&dir.join("eval.json"), &report)?;
    shared::io::atomic::write_atomic(&dir.join("eval.md"), evaluate::markdown(&report).as_bytes())?;
    Ok(())
}

/// A new cell's run configuration: the `finetune` flags the cell stands for, parsed as the
/// command line would be, so that a cell and a hand-typed run agree on every default.
fn cell_config(args: &ReproduceArgs, cell: &Cell, data_dir: &Path) -> Result<RunConfig> {
    let mut flags: Vec<String> = vec![
        "finetune".into(),
        "--task".into(),
        cell.task.name().into(),
        "--model".into(),
        args.model.display().to_string(),
        "--connection".into(),
        cell.connection.clone(),
        "--adv".into(),
        cell.adv.into(),
        "--seed".into(),
        cell.seed.to_string(),
        "--epochs".into(),
        args.epochs.to_string(),
        "--lr".into(),
        args.lr.to_string(),
        "--data-dir".into(),
        data_dir.display().to_string(),
        "--max-grad-norm".into(),
        args.max_grad_norm.to_string(),
        "--backend".into(),
        format!("{:?}", args.backend).to_lowercase(),
    ];
    let optional = [
        ("--train-samples", cell.train_samples),
        ("--val-samples", cell.val_samples),
        ("--max-steps", args.max_steps),
    ];
    for (flag, value) in optional {
        if let Some(v) = value {
            flags.extend([flag.to_string(), v.to_string()]);
        }
    }
    #[derive(Parser)]
    struct Wrapper {
        #[command(flatten)]
        inner: FinetuneArgs,
    }
    let mut config = Wrapper::try_parse_from(&flags)?.inner.to_config()?;
    let preset = args
        .preset
        .to_possible_value()
        .map_or_else(|| format!("{:?}", args.preset), |v| v.get_name().to_string());
    config.command = format!("trainer reproduce --preset {preset} (cell {})", cell.dir_name());
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_have_the_paper_shapes() {
        assert_eq!(grid(Preset::Table1, 12, None, None).len(), 5 * 3);
        assert_eq!(grid(Preset::LowResource, 12, None, None).len(), 5 * 4 * 3);
        let groups = grid(Preset::LayerGroups, 12, Some(&[Task::Sst2]), Some(&[0]));
        let specs: Vec<&str> = groups.iter().map(|c| c.connection.as_str()).collect();
        assert_eq!(
            specs,
            [
                "im:T=5,gamma=0.1,grad=detached,step=backtrack,layers=0-3",
                "im:T=5,gamma=0.1,grad=detached,step=backtrack,layers=4-7",
                "im:T=5,gamma=0.1,grad=detached,step=backtrack,layers=8-11"
            ]
        );
        let minilm = grid(Preset::LayerGroups, 6, Some(&[Task::Sst2]), Some(&[0]));
        let minilm: Vec<&str> = minilm.iter().map(|c| c.connection.as_str()).collect();
        assert_eq!(
            minilm,
            [0, 2, 4].map(|a| format!("{},layers={a}-{}", shared::RECOMMENDED_IM, a + 1))
        );
        let study = grid(Preset::GradientStudy, 6, None, None);
        assert_eq!(study.len(), 6);
        for c in &study {
            let spec = shared::ConnectionSpec::parse(&c.connection).unwrap();
            assert_eq!(
                spec.to_spec_string(),
                c.connection,
                "the cell's name is its canonical spec"
            );
        }
        let sweep = grid(Preset::TSweep, 6, None, Some(&[7]));
        assert_eq!(sweep.len(), 4);
        assert!(sweep.iter().all(|c| c.seed == 7 && c.train_samples == Some(1000)));
        let mut named = grid(Preset::LowResource, 6, None, None);
        named.extend(grid(Preset::LayerGroups, 6, None, None));
        for c in named {
            let canonical = shared::ConnectionSpec::parse(&c.connection).unwrap().to_spec_string();
            assert_eq!(canonical, c.connection, "the cell's name is its canonical spec");
        }
    }
}
