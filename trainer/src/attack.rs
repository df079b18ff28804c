//! `trainer attack`: TextFooler against a model on a data file, with TextAttack's summary table
//! (the attack itself is `shared::robustness::attack`).

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use burn::tensor::backend::Backend;
use clap::{Args, ValueEnum};
use serde::Serialize;
use shared::data::Task;
use shared::io::bundle::load_model_dir;
use shared::robustness::attack::{
    AttackConfig, AttackResult, AttackStatus, AttackSummary, PairField, TextFooler,
};
use shared::robustness::neighbours::WordNeighbours;
use shared::{BertClassifier, BertTokenizer, ConnectionSpec};

use crate::backend::BackendKind;

/// Which text of a pair to perturb.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FieldArg {
    /// The first text (premise, question1, ...).
    A,
    /// The second text (hypothesis, question2, ...), as TextAttack does for NLI.
    B,
}

#[derive(Args, Debug)]
pub struct AttackArgs {
    /// HF model directory (config.json, weights, tokenizer), e.g. a run's `best/`, or a web
    /// bundle (`trainer export --web`).
    #[arg(long)]
    pub model: PathBuf,
    /// Connection spec (`bert`, `ex`, `im:T=5,gamma=0.1,layers=3-5`). Default: `connection` from
    /// the model directory's imbert.json, else `bert`.
    #[arg(long)]
    pub connection: Option<String>,
    /// Task whose labels the data uses (`sst2`, `qqp`, `qnli`, `mnli`, `mnli-mm`, `rte`; IMDB
    /// reads as sst2).
    #[arg(long, value_parser = parse_task)]
    pub task: Task,
    /// Examples: GLUE .tsv, HF-style .jsonl, AdvGLUE or train-subset .json, `label text` .txt.
    #[arg(long)]
    pub data: PathBuf,
    /// Attack only the first N examples.
    #[arg(long)]
    pub limit: Option<usize>,
    /// Maximum tokens per input, special tokens included.
    #[arg(long, default_value_t = shared::io::tokenizer::DEFAULT_MAX_LEN)]
    pub max_len: usize,
    /// Model queries per example (the clean prediction included).
    #[arg(long, default_value_t = 500)]
    pub queries: usize,
    /// Embedding neighbours tried per word.
    #[arg(long, default_value_t = 30)]
    pub k: usize,
    /// Lowest cosine similarity of a substitute word.
    #[arg(long, default_value_t = 0.5)]
    pub min_cos: f32,
    /// Largest share of the words that may be replaced.
    #[arg(long, default_value_t = 0.3)]
    pub max_ratio: f64,
    /// Which text of a pair to attack.
    #[arg(long, value_enum, default_value = "b")]
    pub field: FieldArg,
    /// Texts per forward pass.
    #[arg(long, default_value_t = 32)]
    pub batch_size: usize,
    /// Add a freshly initialised classifier with this many classes when the model has none.
    #[arg(long)]
    pub num_labels: Option<usize>,
    /// Seed of the backend's random numbers (a fresh classifier's weights).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Write the metrics and every result to this JSON file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    #[arg(long, value_enum, default_value = "ndarray")]
    pub backend: BackendKind,
}

pub(crate) fn parse_task(s: &str) -> Result<Task, String> {
    s.parse().map_err(|e: shared::data::DataError| e.to_string())
}

/// What `--json` writes.
#[derive(Debug, Serialize)]
pub struct AttackReport {
    pub model: PathBuf,
    pub connection: String,
    pub task: String,
    pub data: PathBuf,
    /// Label names: `results[i].label` is `labels[label]`.
    pub labels: Vec<String>,
    pub config: AttackConfig,
    pub summary: AttackSummary,
    /// Wall time of the attack (model loading excluded).
    pub elapsed_s: f64,
    pub results: Vec<AttackResult>,
}

pub fn run(args: AttackArgs) -> Result<()> {
    if let Some(json) = &args.json {
        crate::run::check_output_path("--json", json)?;
    }
    let config = AttackConfig {
        k: args.k,
        min_cosine: args.min_cos,
        max_queries: args.queries,
        max_perturb_ratio: args.max_ratio,
        max_len: args.max_len,
        batch_size: args.batch_size,
        pair_field: match args.field {
            FieldArg::A => PairField::TextA,
            FieldArg::B => PairField::TextB,
        },
    };
    // Cheap checks first: bad settings or a bad file should not wait for the model to load.
    config.validate()?;
    crate::run::check_num_labels(args.num_labels)?;
    let mut examples = shared::data::load(&args.data, args.task)
        .with_context(|| format!("reading {} as {}", args.data.display(), args.task))?;
    if let Some(limit) = args.limit {
        examples.truncate(limit);
    }
    if examples.is_empty() {
        bail!("{}: no examples to attack", args.data.display());
    }
    let spec = connection_spec(&args.model, args.connection.as_deref())?;
    crate::with_backend!(args.backend, |B, device| attack::<B>(
        &args, config, &spec, &examples, &device
    ))
}

/// `--connection`, else the `connection` of `MODEL/imbert.json`, else plain BERT.
pub(crate) fn connection_spec(model: &Path, flag: Option<&str>) -> Result<ConnectionSpec> {
    if let Some(spec) = flag {
        return ConnectionSpec::parse(spec).context("parsing --connection");
    }
    let path = model.join("imbert.json");
    if !path.exists() {
        return Ok(ConnectionSpec::default());
    }
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let value: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    match value.get("connection") {
        None | Some(serde_json::Value::Null) => Ok(ConnectionSpec::default()),
        Some(serde_json::Value::String(spec)) => ConnectionSpec::parse(spec)
            .with_context(|| format!("{}: field `connection`", path.display())),
        Some(other) => {
            bail!("{}: field `connection` is {other}, expected a spec string", path.display())
        }
    }
}

fn attack<B: Backend>(
    args: &AttackArgs,
    config: AttackConfig,
    spec: &ConnectionSpec,
    examples: &[shared::data::Example],
    device: &B::Device,
) -> Result<()> {
    B::seed(device, args.seed);
    let (tokenizer, model) =
        load_victim::<B>(&args.model, args.num_labels, args.task, spec, device)?;
    let max_positions = model.max_len(usize::MAX);
    if args.max_len > max_positions {
        tracing::warn!(
            "--max-len {} is past the model's {max_positions} positions: using {max_positions}",
            args.max_len
        );
    }

    let start = Instant::now();
    let neighbours =
        WordNeighbours::from_model(&model, &tokenizer).context("indexing the word embeddings")?;
    tracing::info!(
        "{} whole-word embeddings indexed in {:.2}s",
        neighbours.len(),
        start.elapsed().as_secs_f64()
    );
    let attacker = TextFooler::new(&model, &tokenizer, &neighbours, config)?;

    let start = Instant::now();
    let n = examples.len();
    let results = attacker.attack_all(examples, |i, r| {
        tracing::info!(
            "[{}/{n}] idx {}: {:?}, {} words replaced, {} queries",
            i + 1,
            r.idx,
            r.status,
            r.substitutions.len(),
            r.queries
        );
    })?;
    let elapsed_s = start.elapsed().as_secs_f64();

    let labels: Vec<String> = args.task.label_names().iter().map(|s| s.to_string()).collect();
    let report = AttackReport {
        model: args.model.clone(),
        connection: spec.to_spec_string(),
        task: args.task.to_string(),
        data: args.data.clone(),
        labels,
        config: attacker.config().clone(),
        summary: AttackSummary::from_results(&results),
        elapsed_s,
        results,
    };
    print_report(&report);
    if let Some(path) = &args.json {
        crate::run::write_json(path, &report)?;
    }
    Ok(())
}

/// The tokenizer and the classifier under attack (an HF directory or a web bundle, with
/// `spec`'s connections), which must have the task's number of classes.
pub(crate) fn load_victim<B: Backend>(
    dir: &Path,
    num_labels: Option<usize>,
    task: Task,
    spec: &ConnectionSpec,
    device: &B::Device,
) -> Result<(BertTokenizer, BertClassifier<B>)> {
    let tokenizer = BertTokenizer::from_dir(dir)
        .with_context(|| format!("loading the tokenizer of {}", dir.display()))?;
    let (model, report) = load_model_dir::<B>(dir, num_labels, device)
        .with_context(|| format!("loading the model {}", dir.display()))?;
    for name in &report.initialized_fresh {
        tracing::warn!(
            "{name} is not in {}: initialised fresh (random)",
            report.weights_file.display()
        );
    }
    let task_labels = task.num_labels();
    match model.num_labels() {
        0 => bail!(
            "{} has no classifier: pass --num-labels {task_labels} to add a fresh (random) one",
            dir.display()
        ),
        n if n != task_labels => {
            bail!("{}: the model has {n} classes, task {task} has {task_labels}", dir.display())
        }
        _ => {}
    }
    Ok((tokenizer, model.with_connections(spec)?))
}

fn print_report(report: &AttackReport) {
    println!(
        "model: {}   connection: {}   task: {}   data: {}",
        report.model.display(),
        report.connection,
        report.task,
        report.data.display()
    );
    let label = |i: usize| report.labels.get(i).map_or("?", String::as_str);
    for r in &report.results {
        let status = match r.status {
            AttackStatus::Succeeded => "SUCCEEDED",
            AttackStatus::Failed => "FAILED",
            AttackStatus::Skipped => "SKIPPED",
        };
        let p = |probs: &[f32], i: usize| probs.get(i).copied().unwrap_or(f32::NAN);
        let subs: Vec<String> =
            r.substitutions.iter().map(|s| format!("{} -> {}", s.before, s.after)).collect();
        println!(
            "[{}] {status:9} {} ({:.2}) -> {} ({:.2})  {} queries  {}",
            r.idx,
            label(r.original_prediction),
            p(&r.original_probabilities, r.original_prediction),
            label(r.adversarial_prediction),
            p(&r.adversarial_probabilities, r.adversarial_prediction),
            r.queries,
            subs.join(", ")
        );
    }
    let s = &report.summary;
    let pct = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{v:.2}%"));
    let num = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{v:.2}"));
    let rows = [
        ("Number of successful attacks:", s.succeeded.to_string()),
        ("Number of failed attacks:", s.failed.to_string()),
        ("Number of skipped attacks:", s.skipped.to_string()),
        ("Original accuracy:", pct(s.original_accuracy)),
        ("Accuracy under attack:", pct(s.accuracy_under_attack)),
        ("Attack success rate:", pct(s.attack_success_rate)),
        ("Average perturbed word %:", pct(s.avg_perturbed_word_pct)),
        ("Average num. words per input:", num(s.avg_num_words)),
        ("Avg num queries:", num(s.avg_queries)),
        (
            "Time:",
            format!(
                "{:.1}s ({:.2}s/example)",
                report.elapsed_s,
                report.elapsed_s / s.total.max(1) as f64
            ),
        ),
    ];
    let w0 = rows.iter().map(|r| r.0.len()).max().unwrap_or(0);
    let w1 = rows.iter().map(|r| r.1.len()).max().unwrap_or(0);
    let rule = format!("+-{}-+-{}-+", "-".repeat(w0), "-".repeat(w1));
    println!("{rule}\n| {:w0$} | {:w1$} |\n{rule}", "Attack Results", "");
    for (k, v) in rows {
        println!("| {k:w0$} | {v:w1$} |");
    }
    println!("{rule}");
}
