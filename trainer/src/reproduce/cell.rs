//! One cell of a grid: a (task, arm, seed, learning rate) fine-tuned, evaluated and summarised.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use burn::tensor::backend::Backend;
use clap::Parser;
use shared::data::Task;

use super::presets::Arm;
use crate::backend::BackendKind;
use crate::evaluate::{self, EvalArgs, EvalTarget};
use crate::finetune::{self, FinetuneArgs, RunOptions};
use crate::run::{self, RunConfig, RunSummary};

/// Settings every cell of one grid shares.
#[derive(Debug, Clone)]
pub struct Shared {
    pub model: PathBuf,
    pub data_dir: PathBuf,
    pub samples: (Option<usize>, Option<usize>),
    pub epochs: usize,
    pub max_steps: Option<usize>,
    pub max_grad_norm: f64,
    pub eval_limit: Option<usize>,
    pub clean_sample: Option<usize>,
    pub backend: BackendKind,
    /// `trainer reproduce --preset NAME`, recorded in each run's config.
    pub command: String,
    /// Whether cell names carry their learning rate (grids that search it).
    pub lr_in_name: bool,
    /// Smoke budgets (`--smoke`).
    pub smoke: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Cell {
    pub task: Task,
    pub arm: Arm,
    pub seed: u64,
    pub lr: f64,
}

impl Cell {
    /// `sst2-im_T_5_gamma_0.1-none-s0`, with `-lr1e-4` before the seed in grids that search the
    /// learning rate.
    pub fn name(&self, lr_in_name: bool) -> String {
        let conn: String = self
            .arm
            .connection
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() || c == '.' { c } else { '_' })
            .collect();
        let lr = if lr_in_name { format!("-lr{:e}", self.lr) } else { String::new() };
        format!("{}-{conn}-{}{lr}-s{}", self.task.name(), self.arm.adv, self.seed)
    }
}

/// The cell's summary: read from `summary_path` when it exists (committed by an earlier run of
/// the grid), else trained (or resumed) in `runs/<name>`, evaluated, and written there.
pub fn ensure(
    shared: &Shared,
    cell: &Cell,
    runs: &Path,
    summary_path: &Path,
    progress: &str,
) -> Result<RunSummary> {
    if summary_path.exists() {
        println!("{progress}: summary in {}", summary_path.display());
        return run::read_json(summary_path);
    }
    if let Some((from, summary)) = identical_elsewhere(shared, cell, summary_path)? {
        run::write_json(summary_path, &summary)?;
        println!("{progress}: the same run as {}: its summary is reused", from.display());
        return Ok(summary);
    }
    let dir = runs.join(cell.name(shared.lr_in_name));
    let context = || format!("grid cell {}", cell.name(shared.lr_in_name));
    if !(dir.join("done").exists() && dir.join("eval.json").exists()) {
        println!("{progress}");
        crate::with_backend!(shared.backend, |B, device| train_and_evaluate::<B>(
            shared, cell, &dir, &device
        ))
        .with_context(context)?;
    }
    if cell.task == Task::Sst2 && !dir.join(run::PROBE_FILE).exists() {
        probe(shared, &dir).with_context(context)?;
    }
    let summary = RunSummary::read(&dir)?;
    if let Some(parent) = summary_path.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    run::write_json(summary_path, &summary)?;
    println!("{progress}: summary written to {}", summary_path.display());
    Ok(summary)
}

/// The summary another grid committed of this very run (block 2's T = 5 is block 1's
/// recommended IM on all layers): the same file name under `<results>/<other grid>/`, whose
/// config equals the one this cell would train, apart from the command and the directory that
/// started it.
fn identical_elsewhere(
    shared: &Shared,
    cell: &Cell,
    summary_path: &Path,
) -> Result<Option<(PathBuf, RunSummary)>> {
    // <results>/<grid>/[lr-search/]<cell>.json
    let (Some(file), Some(mut grid)) = (summary_path.file_name(), summary_path.parent()) else {
        return Ok(None);
    };
    let mut relative = PathBuf::from(file);
    if grid.file_name().is_some_and(|n| n == "lr-search") {
        relative = Path::new("lr-search").join(file);
        grid = grid.parent().unwrap_or(grid);
    }
    let (Some(results), Some(grid_name)) = (grid.parent(), grid.file_name()) else {
        return Ok(None);
    };
    let Ok(entries) = std::fs::read_dir(results) else { return Ok(None) };
    let mut others: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.file_name() != Some(grid_name))
        .map(|p| p.join(&relative))
        .filter(|p| p.is_file())
        .collect();
    others.sort();
    let normalised =
        |c: &RunConfig| RunConfig { command: String::new(), started_in: None, ..c.clone() };
    let wanted = normalised(&config_of(shared, cell)?);
    for path in others {
        let summary: RunSummary = run::read_json(&path)?;
        if normalised(&summary.config) == wanted {
            return Ok(Some((path, summary)));
        }
    }
    Ok(None)
}

fn train_and_evaluate<B: Backend>(
    shared: &Shared,
    cell: &Cell,
    dir: &Path,
    device: &B::Device,
) -> Result<()> {
    let resume = dir.join("config.json").exists();
    let config = if resume {
        let config: RunConfig = run::read_json(&dir.join("config.json"))?;
        config.check().with_context(|| format!("{}", dir.join("config.json").display()))?;
        config
    } else {
        config_of(shared, cell)?
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
        data_dir: Some(shared.data_dir.clone()),
        limit: shared.eval_limit,
        clean_sample: shared.clean_sample,
        batch_size: 32,
        max_len: config.max_len,
        out: None,
        backend: shared.backend,
    };
    let report = evaluate::evaluate::<B>(&target, &shared.data_dir, &eval_args, device)?;
    run::write_json(&dir.join("eval.json"), &report)?;
    shared::io::atomic::write_atomic(&dir.join("eval.md"), evaluate::markdown(&report).as_bytes())?;
    Ok(())
}

/// The stability probe on the cell's best model: per layer, how far AdvGLUE SST-2 items drift
/// from their clean originals (`trainer probe --run`), written to `probe/` and carried into the
/// summary beside the accuracy.
fn probe(shared: &Shared, dir: &Path) -> Result<()> {
    let mut flags: Vec<String> = [
        "probe",
        "--run",
        &dir.display().to_string(),
        "--data-dir",
        &shared.data_dir.display().to_string(),
        "--out",
        &dir.join("probe").display().to_string(),
    ]
    .map(String::from)
    .to_vec();
    if let Some(limit) = shared.eval_limit {
        flags.extend(["--limit".to_string(), limit.to_string()]);
    }
    if shared.smoke {
        // f32 against f64 reruns every model in f64 (slow IM solves); the probe's own tests
        // cover it.
        flags.push("--no-f64".to_string());
    }
    crate::probe::run(parse_as_cli(&flags)?)
}

/// A new cell's run configuration: the `finetune` flags the cell stands for, parsed as the
/// command line would be, so that a cell and a hand-typed run agree on every default.
pub fn config_of(shared: &Shared, cell: &Cell) -> Result<RunConfig> {
    let mut flags: Vec<String> = [
        "finetune",
        "--task",
        cell.task.name(),
        "--model",
        &shared.model.display().to_string(),
        "--connection",
        &cell.arm.connection,
        "--adv",
        cell.arm.adv,
        "--seed",
        &cell.seed.to_string(),
        "--epochs",
        &shared.epochs.to_string(),
        "--lr",
        &cell.lr.to_string(),
        "--data-dir",
        &shared.data_dir.display().to_string(),
        "--max-grad-norm",
        &shared.max_grad_norm.to_string(),
        "--backend",
        &format!("{:?}", shared.backend).to_lowercase(),
    ]
    .map(String::from)
    .to_vec();
    let optional = [
        ("--train-samples", shared.samples.0),
        ("--val-samples", shared.samples.1),
        ("--max-steps", shared.max_steps),
    ];
    for (flag, value) in optional {
        if let Some(v) = value {
            flags.extend([flag.to_string(), v.to_string()]);
        }
    }
    let mut config = parse_as_cli::<FinetuneArgs>(&flags)?.to_config()?;
    config.command = format!("{} (cell {})", shared.command, cell.name(shared.lr_in_name));
    Ok(config)
}

/// A subcommand's arguments parsed from `flags` (the first is the subcommand's name) as the
/// command line would be, so that a cell and a hand-typed command agree on every default.
fn parse_as_cli<A: clap::Args + clap::FromArgMatches>(flags: &[String]) -> Result<A> {
    #[derive(Parser)]
    struct Wrapper<A: clap::Args> {
        #[command(flatten)]
        inner: A,
    }
    Ok(Wrapper::<A>::try_parse_from(flags)?.inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run another grid committed is reused only when its config is this cell's.
    #[test]
    fn a_cell_reuses_only_an_identical_run_of_another_grid() {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let shared = Shared {
            model: repo.join("tests/fixtures/tiny-bert"),
            data_dir: shared::data::test_data::fixtures_dir(),
            samples: (Some(32), Some(16)),
            epochs: 1,
            max_steps: Some(2),
            max_grad_norm: 0.0,
            eval_limit: None,
            clean_sample: None,
            backend: BackendKind::Ndarray,
            command: "trainer reproduce --preset t-sweep".into(),
            lr_in_name: true,
            smoke: false,
        };
        let arm = Arm { connection: "im:T=1,gamma=0.1".into(), adv: "none" };
        let cell = Cell { task: Task::Sst2, arm, seed: 0, lr: 1e-4 };
        let results = repo.join("target/test-artifacts/trainer/reuse-identical");
        let _ = std::fs::remove_dir_all(&results);
        let name = format!("{}.json", cell.name(true));
        let committed = |path: &Path, config: RunConfig| {
            let summary = RunSummary {
                name: cell.name(true),
                config,
                metrics: Vec::new(),
                train_seconds: 1.0,
                im_residuals: None,
                eval: serde_json::Value::Null,
                probe: None,
            };
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            run::write_json(path, &summary).unwrap();
        };
        let mut config = config_of(&shared, &cell).unwrap();
        config.command = "trainer reproduce --preset sst2 (cell ...)".into();
        config.started_in = Some("/elsewhere".into());
        for relative in [name.clone(), format!("lr-search/{name}")] {
            let other = results.join("sst2").join(&relative);
            committed(&other, config.clone());
            let here = results.join("t-sweep").join(&relative);
            let found = identical_elsewhere(&shared, &cell, &here).unwrap();
            assert_eq!(found.map(|(p, _)| p), Some(other.clone()), "{relative}");
            // Another setting (here the seed of the data split) is another run.
            committed(&other, RunConfig { seed: 1, ..config.clone() });
            assert!(identical_elsewhere(&shared, &cell, &here).unwrap().is_none());
        }
    }
}
