//! Block 4 (the paper's Table 4): TextFooler against block 1's BERT and recommended IM-BERT, on
//! SST-2 dev sentences and IMDB reviews.
//!
//! The victims are block 1's own models: a cell's `best/` in its run directory, or, on a clone
//! that has only the committed summaries, the same model trained again from the committed
//! config (its validation loss is checked against the committed one and recorded). Each
//! (set, model) attack is one summary, committed like a grid cell; an attack in progress appends
//! every finished example to a partial file beside the summaries, so a stopped session resumes
//! at the next example, on any machine the partial file was committed to.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use burn::tensor::backend::Backend;
use serde::{Deserialize, Serialize};
use shared::data::Task;
use shared::robustness::attack::{AttackConfig, AttackResult, AttackSummary, TextFooler};
use shared::robustness::neighbours::WordNeighbours;

use super::presets::{recommended_im, Arm};
use super::{Layout, Preset, ReproduceArgs};
use crate::attack::load_victim;
use crate::backend::BackendKind;
use crate::finetune::{self, RunOptions};
use crate::run::{self, EpochMetrics, EvalReport, RunSummary};

/// Texts attacked against every victim, and with which of block 1's seeds.
#[derive(Debug, Clone, Copy)]
pub struct AttackSet {
    pub name: &'static str,
    /// Under the data directory; read as SST-2 (IMDB's labels are the same two).
    pub file: &'static str,
    /// The first this many examples.
    pub limit: usize,
    pub seeds: &'static [u64],
}

/// SST-2 dev's first 200 sentences on every seed; IMDB's first 50 reviews on seed 0 only: a
/// review is cut to 128 tokens, which still makes it about 25 times an SST-2 sentence's cost,
/// about four minutes per review against IM on all layers on two cores.
pub const SETS: [AttackSet; 2] = [
    AttackSet { name: "sst2-dev", file: "glue/SST-2/dev.tsv", limit: 200, seeds: &[0, 1, 2] },
    AttackSet { name: "imdb", file: "imdb/textfooler_imdb_1000.txt", limit: 50, seeds: &[0] },
];

/// `--smoke`: the first examples of each set, block 1's smoke seeds.
const SMOKE_LIMITS: [usize; 2] = [4, 2];

/// The victims: BERT and the recommended IM-BERT on all layers, as trained in block 1.
pub fn victims() -> Result<Vec<Arm>> {
    Ok(vec![
        Arm { connection: "bert".into(), adv: "none" },
        Arm { connection: recommended_im(None, None)?, adv: "none" },
    ])
}

/// One attack, as committed.
#[derive(Debug, Serialize, Deserialize)]
pub struct AttackRecord {
    pub set: String,
    /// The data file and how many of its examples were attacked.
    pub data: PathBuf,
    pub limit: usize,
    /// Block 1's cell whose model was attacked.
    pub victim: String,
    pub connection: String,
    pub adv: String,
    pub seed: u64,
    /// The victim's SST-2 dev accuracy and whether it learned (block 1's evaluation).
    pub victim_dev_accuracy: Option<f64>,
    pub victim_did_not_learn: bool,
    /// Set when the model was trained again from the committed config (no run directory).
    pub retrained: Option<Retrained>,
    pub config: AttackConfig,
    pub summary: AttackSummary,
    /// Attack wall time, summed over the sessions it ran in.
    pub elapsed_s: f64,
    pub results: Vec<AttackResult>,
}

/// The best validation loss the committed summary holds and the one the retrained model reached.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Retrained {
    pub committed_val_loss: f64,
    pub retrained_val_loss: f64,
}

/// One line of an attack's partial file.
#[derive(Debug, Serialize, Deserialize)]
struct PartialLine {
    seconds: f64,
    result: AttackResult,
}

/// What every attack of the block shares.
struct Block<'a> {
    backend: BackendKind,
    data_dir: PathBuf,
    /// Block 1's grid: the victims' run directories and committed summaries.
    block1: Layout,
    /// This block's summaries and report.
    out: &'a Layout,
}

pub fn run(args: &ReproduceArgs, layout: &Layout) -> Result<()> {
    let block = Block {
        backend: args.backend,
        data_dir: args.data_dir.clone().unwrap_or_else(crate::datasets::default_data_dir),
        block1: block1_layout(args),
        out: layout,
    };
    let victims = victims()?;
    std::fs::create_dir_all(&layout.summaries)
        .with_context(|| format!("creating {}", layout.summaries.display()))?;
    let sets: Vec<AttackSet> = SETS
        .iter()
        .zip(SMOKE_LIMITS)
        .map(|(set, smoke_limit)| {
            if args.smoke {
                AttackSet {
                    limit: smoke_limit,
                    seeds: &set.seeds[..set.seeds.len().min(2)],
                    ..*set
                }
            } else {
                *set
            }
        })
        .collect();
    let total: usize = sets.iter().map(|s| s.seeds.len() * victims.len()).sum();
    println!(
        "{total} attacks ({} sets x {} models x their seeds) on block 1's models in {}",
        sets.len(),
        victims.len(),
        block.block1.runs.display()
    );
    let mut done = 0;
    for set in &sets {
        for arm in &victims {
            for &seed in set.seeds {
                done += 1;
                let label =
                    format!("[{done}/{total}] {} against {} s{seed}", set.name, arm.connection);
                if args.dry_run {
                    println!("  {label}");
                    continue;
                }
                ensure(&block, set, arm, seed, &label)?;
            }
        }
    }
    if args.dry_run {
        return Ok(());
    }
    super::attack_report::write(&layout.summaries, &layout.report)
}

/// Where block 1's run directories and committed summaries are.
fn block1_layout(args: &ReproduceArgs) -> Layout {
    let sst2 = ReproduceArgs { preset: Preset::Sst2, out: args.victims.clone(), ..args.clone() };
    Layout::of(&sst2)
}

fn ensure(block: &Block, set: &AttackSet, arm: &Arm, seed: u64, label: &str) -> Result<()> {
    let victim = committed_cell(&block.block1.summaries, arm, seed)?;
    let path = block.out.summaries.join(format!("{}-{}.json", set.name, victim.name));
    if path.exists() {
        println!("{label}: attack in {}", path.display());
        return Ok(());
    }
    println!("{label}: {}", victim.name);
    crate::with_backend!(block.backend, |B, device| attack_victim::<B>(
        block, set, arm, &victim, &path, &device
    ))
    .with_context(|| format!("attacking {} with {}", victim.name, set.name))
}

/// Block 1's committed summary of `arm` at `seed` (whatever learning rate its search chose).
fn committed_cell(summaries: &Path, arm: &Arm, seed: u64) -> Result<RunSummary> {
    let cell = super::Cell { task: Task::Sst2, arm: arm.clone(), seed, lr: 0.0 };
    let name = cell.name(false);
    let stem = name.strip_suffix(&format!("-s{seed}")).unwrap_or(&name);
    let (prefix, suffix) = (format!("{stem}-lr"), format!("-s{seed}.json"));
    let entries = std::fs::read_dir(summaries)
        .with_context(|| format!("reading block 1's summaries in {}", summaries.display()))?;
    let mut found = Vec::new();
    for entry in entries {
        let file = entry?.file_name().to_string_lossy().into_owned();
        if file.starts_with(&prefix) && file.ends_with(&suffix) {
            found.push(summaries.join(file));
        }
    }
    match found.as_slice() {
        [one] => run::read_json(one),
        [] => bail!(
            "{}: no summary of {stem} seed {seed}; run `trainer reproduce --preset sst2` first",
            summaries.display()
        ),
        many => bail!("{}: several summaries of {stem} seed {seed}: {many:?}", summaries.display()),
    }
}

/// The victim's model directory: its run's `best/`, trained again from the committed config when
/// the run directory is gone.
fn victim_model<B: Backend>(
    runs: &Path,
    victim: &RunSummary,
    device: &B::Device,
) -> Result<(PathBuf, Option<Retrained>)> {
    let dir = runs.join(&victim.name);
    let best = dir.join("best");
    let already = dir.join("done").exists() && best.join("config.json").exists();
    if already && !dir.join("retrained").exists() {
        return Ok((best, None));
    }
    if !already {
        println!(
            "  {} has no model here: training it again from its committed config",
            dir.display()
        );
        let options = RunOptions {
            checkpoint_every: 50,
            progress_every: 50,
            resume: dir.join("config.json").exists(),
        };
        finetune::train::<burn::backend::Autodiff<B>>(&victim.config, &dir, &options, device)?;
        shared::io::atomic::write_atomic(&dir.join("retrained"), b"")?;
    }
    let metrics: Vec<EpochMetrics> = run::read_jsonl(&dir.join("metrics.jsonl"))?;
    let best_loss = |m: &[EpochMetrics]| m.iter().map(|e| e.val_loss).fold(f64::INFINITY, f64::min);
    let check = Retrained {
        committed_val_loss: best_loss(&victim.metrics),
        retrained_val_loss: best_loss(&metrics),
    };
    let gap = (check.committed_val_loss - check.retrained_val_loss).abs();
    if gap.is_nan() || gap > 1e-3 * check.committed_val_loss.abs().max(1e-6) {
        tracing::warn!(
            "{}: retrained best validation loss {} differs from the committed {}",
            dir.display(),
            check.retrained_val_loss,
            check.committed_val_loss
        );
    }
    Ok((best, Some(check)))
}

fn attack_victim<B: Backend>(
    block: &Block,
    set: &AttackSet,
    arm: &Arm,
    victim: &RunSummary,
    path: &Path,
    device: &B::Device,
) -> Result<()> {
    let data = block.data_dir.join(set.file);
    let mut examples = shared::data::load(&data, Task::Sst2)
        .with_context(|| format!("reading {} as sst2", data.display()))?;
    examples.truncate(set.limit);
    let (model_dir, retrained) = victim_model::<B>(&block.block1.runs, victim, device)?;
    let spec = victim.config.connection.clone();
    let (tokenizer, model) = load_victim::<B>(&model_dir, None, Task::Sst2, &spec, device)?;
    let neighbours =
        WordNeighbours::from_model(&model, &tokenizer).context("indexing the word embeddings")?;
    let attacker = TextFooler::new(&model, &tokenizer, &neighbours, AttackConfig::default())?;

    let partial_path = block
        .out
        .summaries
        .join("partial")
        .join(
            path.file_name().map_or_else(|| "attack".into(), |n| n.to_string_lossy().into_owned()),
        )
        .with_extension("jsonl");
    let mut lines = read_partial(&partial_path, &examples)?;
    if !lines.is_empty() {
        println!("  resuming at example {} of {}", lines.len() + 1, examples.len());
    }
    let mut partial = open_append(&partial_path)?;
    for (i, example) in examples.iter().enumerate().skip(lines.len()) {
        let start = Instant::now();
        let result = attacker.attack(example)?;
        let line = PartialLine { seconds: start.elapsed().as_secs_f64(), result };
        tracing::info!(
            "[{}/{}] idx {}: {:?}, {} words replaced, {} queries, {:.1}s",
            i + 1,
            examples.len(),
            example.idx,
            line.result.status,
            line.result.substitutions.len(),
            line.result.queries,
            line.seconds
        );
        let mut text = serde_json::to_string(&line)?;
        text.push('\n');
        partial
            .write_all(text.as_bytes())
            .and_then(|()| partial.sync_data())
            .with_context(|| format!("appending to {}", partial_path.display()))?;
        lines.push(line);
    }
    let elapsed_s = lines.iter().map(|l| l.seconds).sum();
    let results: Vec<AttackResult> = lines.into_iter().map(|l| l.result).collect();
    let eval: EvalReport = serde_json::from_value(victim.eval.clone())
        .with_context(|| format!("block 1's evaluation of {}", victim.name))?;
    let record = AttackRecord {
        set: set.name.into(),
        data: PathBuf::from(set.file),
        limit: set.limit,
        victim: victim.name.clone(),
        connection: arm.connection.clone(),
        adv: arm.adv.into(),
        seed: victim.config.seed,
        victim_dev_accuracy: eval.clean.first().map(|c| c.score.accuracy),
        victim_did_not_learn: eval.did_not_learn,
        retrained,
        config: attacker.config().clone(),
        summary: AttackSummary::from_results(&results),
        elapsed_s,
        results,
    };
    run::write_json(path, &record)?;
    std::fs::remove_file(&partial_path)
        .with_context(|| format!("removing {}", partial_path.display()))?;
    println!("  summary written to {}", path.display());
    Ok(())
}

/// The examples an earlier session finished, checked against the examples being attacked. A torn
/// last line (a session killed mid-write) is dropped and attacked again.
fn read_partial(path: &Path, examples: &[shared::data::Example]) -> Result<Vec<PartialLine>> {
    if !path.exists() {
        return Ok(Vec::new());
    }
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let count = text.split_inclusive('\n').count();
    let mut lines = Vec::new();
    let mut kept_bytes = 0;
    for (number, line) in text.split_inclusive('\n').enumerate() {
        match serde_json::from_str::<PartialLine>(line) {
            Ok(parsed) if line.ends_with('\n') => {
                let expected = examples.get(number).map(|e| e.idx);
                if expected != Some(parsed.result.idx) {
                    bail!(
                        "{}:{}: example idx {} where {expected:?} was expected: the partial \
                         file is from other data; delete it to start the attack over",
                        path.display(),
                        number + 1,
                        parsed.result.idx
                    );
                }
                kept_bytes += line.len();
                lines.push(parsed);
            }
            Err(e) if number + 1 < count => bail!("{}:{}: {e}", path.display(), number + 1),
            // Only the last line can be torn (or lack its newline).
            _ => break,
        }
    }
    if kept_bytes < text.len() {
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .with_context(|| format!("opening {}", path.display()))?;
        file.set_len(kept_bytes as u64)
            .with_context(|| format!("truncating {}", path.display()))?;
    }
    Ok(lines)
}

fn open_append(path: &Path) -> Result<std::fs::File> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))
}
