//! `trainer speed`: how many examples per second each arm of a grid trains and predicts, timed
//! back to back in one process on the grid's own data, beside BERT timed in the same run (the
//! throughput column of the paper's Table 4).
//!
//! A grid's cells record the throughput of whatever shared the cores with them (builds, CI,
//! benchmarks), so the report takes examples/s from here instead, measured with nothing else
//! running. The 1-minute load average before and after is recorded so that a reader can check
//! that; BERT is timed first and last, so a machine whose speed changed in between shows as two
//! different BERT rows.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use burn::optim::{GradientsParams, Optimizer};
use burn::tensor::backend::AutodiffBackend;
use clap::Args;
use serde::{Deserialize, Serialize};
use shared::data::Example;
use shared::io::checkpoint::load_for_task;
use shared::{BertClassifier, BertTokenizer};

use crate::adamw::AdamW;
use crate::backend::BackendKind;
use crate::datasets;
use crate::finetune::{split_data, to_batch, training_loss, warm_start};
use crate::lr_search::Search;
use crate::predict::predict;
use crate::reproduce::{config_of, Arm, Cell, Grid, Preset, Shared};
use crate::run::{self, RunConfig};

/// The file `trainer report` reads beside a grid's summaries.
pub const SPEED_FILE: &str = "speed.json";

#[derive(Args, Debug)]
pub struct SpeedArgs {
    /// The grid whose arms are timed (BERT is always timed too, first and last, as the
    /// reference).
    #[arg(long, value_enum)]
    pub preset: Preset,
    /// The T sweep's layer range, as `reproduce --im-layers`.
    #[arg(long = "im-layers")]
    pub im_layers: Option<String>,
    /// The grid's smoke budgets (`reproduce --smoke`: 32 training and 16 validation examples),
    /// to check the path on a small model and data.
    #[arg(long)]
    pub smoke: bool,
    /// Pretrained HF BERT directory: the warm start every arm trains from.
    #[arg(long, default_value = "models/all-minilm-l6-v2")]
    pub model: PathBuf,
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Fewest timed optimizer steps per arm at the grid's batch size, after one untimed
    /// warm-up step.
    #[arg(long, default_value_t = 4)]
    pub train_steps: usize,
    /// Validation examples each arm predicts in one timed pass, after one untimed batch.
    #[arg(long, default_value_t = 128)]
    pub eval_examples: usize,
    /// Fewest seconds each timing lasts: training takes more steps (cycling through the
    /// split) and prediction more passes until both this and the counts above are reached, so
    /// that a fast arm is not timed over a second of noise.
    #[arg(long, default_value_t = 20.0)]
    pub min_seconds: f64,
    /// Batch size of the prediction, as `reproduce`'s evaluation.
    #[arg(long, default_value_t = 32)]
    pub eval_batch_size: usize,
    #[arg(long, value_enum, default_value = "ndarray")]
    pub backend: BackendKind,
    /// The grids' committed summaries: each arm's learning-rate search there names the seed-0
    /// run whose trained model is timed when it is on this machine.
    #[arg(long, default_value = "results/runs")]
    pub results: PathBuf,
    /// Where the grids' run directories are (`runs/<grid>/<cell>/best`).
    #[arg(long, default_value = "runs")]
    pub runs: PathBuf,
    /// Output file (default: `<results>/<preset>/speed.json`, where `trainer report` finds it).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// One arm's throughput.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ArmSpeed {
    pub task: String,
    /// Canonical connection spec.
    pub connection: String,
    /// `none`, `creat` or `pgd`.
    pub adv: String,
    /// Optimizer steps (forward, backward, AdamW, with the run's dropout) from the warm start,
    /// on the seed-0 training split's batches in order, padded to each batch's longest.
    pub train_examples_per_sec: f64,
    pub train_steps: usize,
    pub train_mean_tokens: f64,
    /// Prediction (no gradient) on the first examples of the seed-0 validation split, in as
    /// many passes as `min_seconds` takes.
    pub eval_examples_per_sec: f64,
    pub eval_passes: usize,
    pub eval_mean_tokens: f64,
    /// What predicted: the arm's trained seed-0 model (its run's `best/`), or `warm start` for
    /// every arm when any arm's is not on this machine (backtracking's extra trial forwards
    /// depend on the weights, so the rows compare like with like).
    pub eval_weights: String,
    /// Analytic forward FLOPs per example at `eval_mean_tokens` (`shared::model::flops`;
    /// backtracking's trial forwards not counted).
    pub forward_flops: f64,
}

/// One `trainer speed` run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SpeedReport {
    pub preset: String,
    /// UTC, RFC 3339.
    pub measured_at: String,
    /// `model name` of /proc/cpuinfo, where there is one.
    pub cpu: Option<String>,
    pub logical_cores: usize,
    pub backend: BackendKind,
    /// The CPU GEMM: `openblas` (with `OPENBLAS_CORETYPE` when set) or `matrixmultiply`.
    pub gemm: String,
    /// 1-minute load average before the first measurement (Linux): what else was running.
    pub load_before: Option<f64>,
    pub train_batch_size: usize,
    /// Fewest timed steps and examples per pass, and fewest seconds, of each timing.
    pub train_steps: usize,
    pub eval_batch_size: usize,
    pub eval_examples: usize,
    pub min_seconds: f64,
    /// In the order measured: BERT first and last, the grid's arms between.
    pub arms: Vec<ArmSpeed>,
}

impl SpeedReport {
    /// The reference's (BERT without adversarial training) mean rates on `task`:
    /// (train, eval) examples/s.
    pub fn reference(&self, task: &str) -> Option<(f64, f64)> {
        let rows: Vec<&ArmSpeed> = self
            .arms
            .iter()
            .filter(|a| a.task == task && a.connection == "bert" && a.adv == "none")
            .collect();
        let mean =
            |f: fn(&ArmSpeed) -> f64| rows.iter().map(|a| f(a)).sum::<f64>() / rows.len() as f64;
        (!rows.is_empty())
            .then(|| (mean(|a| a.train_examples_per_sec), mean(|a| a.eval_examples_per_sec)))
    }
}

/// Reads `dir/speed.json` when there is one.
pub fn read_speed(dir: &Path) -> Result<Option<SpeedReport>> {
    let path = dir.join(SPEED_FILE);
    if path.is_file() {
        Ok(Some(run::read_json(&path)?))
    } else {
        Ok(None)
    }
}

pub fn run(args: SpeedArgs) -> Result<()> {
    if args.train_steps == 0 || args.eval_examples == 0 || args.eval_batch_size == 0 {
        bail!("--train-steps, --eval-examples and --eval-batch-size must be at least 1");
    }
    if !(args.min_seconds >= 0.0 && args.min_seconds.is_finite()) {
        bail!("--min-seconds must be a finite number of seconds, at least 0");
    }
    let config = shared::BertConfig::from_file(&args.model.join("config.json"))?;
    if args.im_layers.is_some() && args.preset != Preset::TSweep {
        bail!("--im-layers applies to the t-sweep preset only");
    }
    let mut grid = Grid::of(args.preset, config.num_hidden_layers, args.im_layers.as_deref())?;
    if args.smoke {
        grid = grid.smoke();
    }
    let shared = Shared {
        model: args.model.clone(),
        data_dir: args.data_dir.clone().unwrap_or_else(datasets::default_data_dir),
        samples: grid.samples,
        epochs: grid.epochs,
        max_steps: None,
        max_grad_norm: 0.0,
        eval_limit: None,
        clean_sample: grid.clean_sample,
        backend: args.backend,
        command: format!("trainer speed --preset {}", args.preset.name()),
        lr_in_name: grid.searches_lr(),
        smoke: args.smoke,
    };
    let out =
        args.out.clone().unwrap_or_else(|| args.results.join(args.preset.name()).join(SPEED_FILE));
    run::check_output_path("--out", &out)?;

    let load_before = load_average();
    if load_before.is_some_and(|l| l > 0.5) {
        tracing::warn!(
            "the 1-minute load average is {:.2}: something else is running, and the figures will \
             show it",
            load_before.unwrap_or_default()
        );
    }
    let reference = Arm { connection: "bert".into(), adv: "none" };
    let last_lr = *grid.lrs.last().context("the grid has no learning rate")?;
    let mut cells = Vec::new();
    for &task in &grid.tasks {
        let mut line = vec![reference.clone()];
        line.extend(grid.arms.iter().filter(|a| **a != reference).cloned());
        line.push(reference.clone());
        for arm in line {
            let cell = Cell { task, arm, seed: grid.seeds[0], lr: last_lr };
            let lr = chosen_lr(&args.results, &cell, shared.lr_in_name);
            let cell = Cell { lr, ..cell };
            let trained = trained_model(&args.runs, &cell, shared.lr_in_name);
            cells.push((cell, trained));
        }
    }
    // Like with like: backtracking's trial forwards depend on the weights, so either every arm
    // predicts with its trained model or every arm with the warm start.
    if let Some((missing, _)) = cells.iter().find(|(_, trained)| trained.is_none()) {
        println!(
            "no trained model of {} on this machine: every arm predicts with the warm start",
            missing.name(shared.lr_in_name)
        );
        cells.iter_mut().for_each(|(_, trained)| *trained = None);
    }
    let mut arms = Vec::new();
    for (cell, trained) in &cells {
        let name = cell.name(shared.lr_in_name);
        let config = config_of(&shared, cell)?;
        println!("{name}: timing (predicting with {})", weights_label(trained));
        let speed = crate::with_backend!(args.backend, |B, device| {
            measure::<burn::backend::Autodiff<B>>(&args, &config, trained.as_deref(), &device)
        })
        .with_context(|| format!("timing {name}"))?;
        println!(
            "  train {:.2} ex/s ({:.0} tokens), predict {:.2} ex/s ({:.0} tokens)",
            speed.train_examples_per_sec,
            speed.train_mean_tokens,
            speed.eval_examples_per_sec,
            speed.eval_mean_tokens
        );
        arms.push(speed);
    }
    let report = SpeedReport {
        preset: args.preset.name(),
        measured_at: now_utc(),
        cpu: cpu_name(),
        logical_cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        backend: args.backend,
        gemm: gemm_name(),
        load_before,
        train_batch_size: grid_batch_size(&shared, &grid)?,
        train_steps: args.train_steps,
        eval_batch_size: args.eval_batch_size,
        eval_examples: args.eval_examples,
        min_seconds: args.min_seconds,
        arms,
    };
    if let Some(parent) = out.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    run::write_json(&out, &report)?;
    println!("wrote {}", out.display());
    print!("{}", markdown(&report));
    Ok(())
}

/// The rate the line's committed search chose (`<results>/*/lr-search/<cell>.search.json`, any
/// grid: BERT's is block 1's), else the cell's own. It only decides which run's model predicts.
fn chosen_lr(results: &Path, cell: &Cell, lr_in_name: bool) -> f64 {
    if !lr_in_name {
        return cell.lr;
    }
    let file = format!("{}.search.json", cell.name(false));
    let grids = std::fs::read_dir(results).into_iter().flatten().flatten();
    grids
        .map(|g| g.path().join("lr-search").join(&file))
        .find_map(|p| run::read_json::<Search>(&p).ok())
        .map_or(cell.lr, |s| s.chosen_lr)
}

/// The cell's trained model (`<runs>/<grid>/<cell>/best`), from whichever grid trained it.
fn trained_model(runs: &Path, cell: &Cell, lr_in_name: bool) -> Option<PathBuf> {
    let name = cell.name(lr_in_name);
    let grids = std::fs::read_dir(runs).into_iter().flatten().flatten();
    let mut found: Vec<PathBuf> = grids
        .map(|g| g.path().join(&name).join("best"))
        .filter(|p| p.join("model.safetensors").is_file())
        .collect();
    found.sort();
    found.into_iter().next()
}

fn weights_label(trained: &Option<PathBuf>) -> String {
    trained.as_ref().map_or_else(|| "warm start".into(), |p| p.display().to_string())
}

/// The batch size the grid's cells train at.
fn grid_batch_size(shared: &Shared, grid: &Grid) -> Result<usize> {
    let arm = grid.arms.first().context("the grid has no arm")?.clone();
    let cell = Cell { task: grid.tasks[0], arm, seed: grid.seeds[0], lr: grid.lrs[0] };
    Ok(config_of(shared, &cell)?.batch_size)
}

/// Times `train_steps` optimizer steps from the warm start, then the prediction of
/// `eval_examples` validation examples by the trained model (or the warm start).
fn measure<B: AutodiffBackend>(
    args: &SpeedArgs,
    config: &RunConfig,
    trained: Option<&Path>,
    device: &B::Device,
) -> Result<ArmSpeed> {
    let task = config.task;
    let (tokenizer, mut model, _) = warm_start::<B>(config, device)?;
    let max_len = model.max_len(config.max_len);
    let (train, val) = split_data(config, task)?;
    let batches: Vec<&[Example]> = train.chunks(config.batch_size).collect();
    if batches.len() < 2 {
        bail!("{} training examples make fewer than 2 batches", train.len());
    }
    let mut optim = AdamW::new(
        config.adam_beta1 as f32,
        config.adam_beta2 as f32,
        config.adam_eps as f32,
        config.weight_decay as f32,
    )
    .init::<B, BertClassifier<B>>();
    let (mut seconds, mut tokens, mut examples, mut steps) = (0.0, 0usize, 0usize, 0usize);
    // The first step (untimed) pays for allocations and (on a GPU) kernel compilation.
    for (i, batch) in batches.iter().cycle().enumerate() {
        if i > args.train_steps && seconds >= args.min_seconds {
            break;
        }
        let batch: Vec<&Example> = batch.iter().collect();
        let start = Instant::now();
        let (input, labels) = to_batch::<B>(&tokenizer, &batch, max_len, device)?;
        let loss = training_loss(&model, &input, labels, config)?;
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optim.step(config.lr, model, grads);
        B::sync(device).map_err(|e| anyhow::anyhow!("{e:?}"))?;
        if i > 0 {
            seconds += start.elapsed().as_secs_f64();
            examples += batch.len();
            steps += 1;
            tokens += token_count(&tokenizer, &batch, max_len)?;
        }
    }
    drop(model);

    let predictor: BertClassifier<B::InnerBackend> = match trained {
        Some(dir) => load_for_task::<B::InnerBackend>(dir, task.num_labels(), device)
            .with_context(|| format!("loading {}", dir.display()))?
            .0
            .with_connections(&config.connection)?,
        None => warm_start::<B::InnerBackend>(config, device)?.1,
    };
    let eval: Vec<&Example> = val.iter().take(args.eval_examples).collect();
    let warm_up = &eval[..args.eval_batch_size.min(eval.len())];
    predict(&predictor, &tokenizer, warm_up, args.eval_batch_size, max_len, device)?;
    let (mut eval_seconds, mut passes, mut eval_tokens) = (0.0, 0usize, 0.0);
    while passes == 0 || eval_seconds < args.min_seconds {
        let timed = predict(&predictor, &tokenizer, &eval, args.eval_batch_size, max_len, device)?;
        eval_seconds += timed.seconds;
        eval_tokens = timed.mean_tokens;
        passes += 1;
    }
    let connections = predictor.bert.encoder.connections.clone();
    Ok(ArmSpeed {
        task: task.name().to_string(),
        connection: config.connection.to_spec_string(),
        adv: config.adv.name().to_string(),
        train_examples_per_sec: examples as f64 / seconds.max(1e-9),
        train_steps: steps,
        train_mean_tokens: tokens as f64 / examples.max(1) as f64,
        eval_examples_per_sec: (passes * eval.len()) as f64 / eval_seconds.max(1e-9),
        eval_passes: passes,
        eval_mean_tokens: eval_tokens,
        eval_weights: weights_label(&trained.map(Path::to_path_buf)),
        forward_flops: shared::model::flops::forward_flops(
            &predictor.config,
            &connections,
            eval_tokens.round().max(1.0) as usize,
            true,
        ),
    })
}

/// Real tokens (no padding) of a batch.
fn token_count(tokenizer: &BertTokenizer, batch: &[&Example], max_len: usize) -> Result<usize> {
    let items: Vec<(&str, Option<&str>)> =
        batch.iter().map(|e| (e.text_a.as_str(), e.text_b.as_deref())).collect();
    let encoded = tokenizer.encode(&items, max_len)?;
    Ok((0..encoded.batch).map(|i| encoded.length(i)).sum())
}

/// The table `trainer report` shows (and `speed` prints): one row per arm in measured order.
pub fn markdown(report: &SpeedReport) -> String {
    use std::fmt::Write;
    let mut md = String::new();
    let load = |l: Option<f64>| l.map_or("unknown".into(), |l| format!("{l:.2}"));
    writeln!(
        md,
        "Measured by `trainer speed --preset {}` at {} on {} ({} logical cores, {} backend, {} \
         GEMM), with a 1-minute load average of {} before it started. Train: optimizer steps at \
         batch {} from the warm start, at least {} of them and {} s, after one untimed step. \
         Predict: passes over {} validation examples at batch {}, at least {} s, after one \
         untimed batch, by each arm's trained seed-0 model, or by the warm start for every arm \
         when one of them was not on the machine. × BERT: the arm's time per example over \
         BERT's (the mean of BERT's two rows).\n",
        report.preset,
        report.measured_at,
        report.cpu.as_deref().unwrap_or("an unknown CPU"),
        report.logical_cores,
        format!("{:?}", report.backend).to_lowercase(),
        report.gemm,
        load(report.load_before),
        report.train_batch_size,
        report.train_steps,
        report.min_seconds,
        report.eval_examples,
        report.eval_batch_size,
        report.min_seconds,
    )
    .ok();
    writeln!(
        md,
        "| task | connection | adv | train ex/s | × BERT | predict ex/s | × BERT | GFLOPs/ex | \
         tokens (train / predict) | predicted with |"
    )
    .ok();
    writeln!(md, "|---|---|---|---|---|---|---|---|---|---|").ok();
    for a in &report.arms {
        let (train_ratio, eval_ratio) = match report.reference(&a.task) {
            Some((t, e)) => (
                format!("{:.2}", t / a.train_examples_per_sec),
                format!("{:.2}", e / a.eval_examples_per_sec),
            ),
            None => ("–".into(), "–".into()),
        };
        let weights =
            if a.eval_weights == "warm start" { "warm start" } else { "trained (seed 0)" };
        writeln!(
            md,
            "| {} | `{}` | {} | {:.2} | {train_ratio} | {:.2} | {eval_ratio} | {:.2} | \
             {:.0} / {:.0} | {weights} |",
            a.task,
            a.connection,
            a.adv,
            a.train_examples_per_sec,
            a.eval_examples_per_sec,
            a.forward_flops / 1e9,
            a.train_mean_tokens,
            a.eval_mean_tokens,
        )
        .ok();
    }
    md
}

fn now_utc() -> String {
    let now = time::OffsetDateTime::now_utc();
    now.replace_nanosecond(0)
        .unwrap_or(now)
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|_| "unknown".into())
}

/// The first field of /proc/loadavg.
fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg").ok()?.split_whitespace().next()?.parse().ok()
}

fn cpu_name() -> Option<String> {
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("model name"))?;
    Some(line.split_once(':')?.1.trim().to_string())
}

fn gemm_name() -> String {
    if cfg!(feature = "openblas") {
        match std::env::var("OPENBLAS_CORETYPE") {
            Ok(core) => format!("openblas, OPENBLAS_CORETYPE={core}"),
            Err(_) => "openblas".into(),
        }
    } else {
        "matrixmultiply".into()
    }
}
