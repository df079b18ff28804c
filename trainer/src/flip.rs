//! `trainer flip`: the fewest edits that change a model's verdict
//! (`shared::robustness::flip_search`), then the same edited text through other connections or
//! models. Does IM-BERT keep its verdict where BERT flips? On one text (`--text`) or on each of
//! a data file's first examples (`--data`), with a tally at the end.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use burn::tensor::backend::Backend;
use clap::Args;
use serde::Serialize;
use shared::data::{Example, Task};
use shared::robustness::classify::{argmax, probabilities};
use shared::robustness::flip_search::{FlipOutcome, FlipSearch, FlipSearchConfig, FlipStatus};
use shared::robustness::neighbours::WordNeighbours;
use shared::{BertClassifier, BertTokenizer, ConnectionSpec};

use crate::attack::{connection_spec, load_victim, parse_task};
use crate::backend::BackendKind;

#[derive(Args, Debug)]
pub struct FlipArgs {
    /// HF model directory or web bundle whose verdict the search flips.
    #[arg(long)]
    pub model: PathBuf,
    /// Its connection spec (default: `connection` from its imbert.json, else `bert`).
    #[arg(long)]
    pub connection: Option<String>,
    /// Also run the found edit through the same weights with this connection (repeatable:
    /// `--compare ex --compare im:T=5,gamma=0.1`).
    #[arg(long)]
    pub compare: Vec<String>,
    /// Also run the found edit through this model with its own connection (repeatable).
    #[arg(long)]
    pub compare_model: Vec<PathBuf>,
    /// Task whose labels the models use.
    #[arg(long, value_parser = parse_task)]
    pub task: Task,
    /// The text to edit (a single sentence).
    #[arg(long, conflicts_with = "data", required_unless_present = "data")]
    pub text: Option<String>,
    /// Or a data file: each example's text (of a pair, the second one) is edited.
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// With --data: the first N examples.
    #[arg(long, default_value_t = 50)]
    pub limit: usize,
    /// Most edits in one text.
    #[arg(long, default_value_t = FlipSearchConfig::default().max_edits)]
    pub max_edits: usize,
    /// Most texts scored per search, the clean one included.
    #[arg(long, default_value_t = FlipSearchConfig::default().max_queries)]
    pub queries: usize,
    /// Words that get typos and synonyms, the most important first.
    #[arg(long, default_value_t = FlipSearchConfig::default().words)]
    pub words: usize,
    /// Embedding neighbours tried per word.
    #[arg(long, default_value_t = FlipSearchConfig::default().synonyms)]
    pub synonyms: usize,
    /// Lowest cosine similarity of a synonym.
    #[arg(long, default_value_t = FlipSearchConfig::default().min_cosine)]
    pub min_cos: f32,
    /// Word edits only (no distractors, contrast clauses or CheckList rewrites).
    #[arg(long)]
    pub no_sentence_edits: bool,
    /// Texts per forward pass.
    #[arg(long, default_value_t = FlipSearchConfig::default().batch_size)]
    pub batch_size: usize,
    /// Maximum tokens per input, special tokens included.
    #[arg(long, default_value_t = shared::io::tokenizer::DEFAULT_MAX_LEN)]
    pub max_len: usize,
    /// Write every search and the tally to this JSON file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    #[arg(long, value_enum, default_value = "ndarray")]
    pub backend: BackendKind,
}

/// A model the found edits are run through.
#[derive(Debug, Serialize)]
pub struct Verdict {
    pub model: String,
    pub clean_label: usize,
    pub clean_probabilities: Vec<f32>,
    pub edited_label: usize,
    pub edited_probabilities: Vec<f32>,
    pub flipped: bool,
}

/// One search and what the other models made of its edit.
#[derive(Debug, Serialize)]
pub struct FlipRecord {
    pub idx: i64,
    pub text: String,
    pub outcome: FlipOutcome,
    /// Only when an edit was found.
    pub compared: Vec<Verdict>,
    pub elapsed_s: f64,
}

/// What `--json` writes.
#[derive(Debug, Serialize)]
pub struct FlipReport {
    pub model: String,
    pub task: String,
    pub labels: Vec<String>,
    pub config: FlipSearchConfig,
    pub records: Vec<FlipRecord>,
    /// Searches that found an edit, out of those run.
    pub found: usize,
    pub searched: usize,
    /// Per compared model: on how many of the found edits it flipped too.
    pub flipped_too: Vec<(String, usize)>,
}

/// A classifier with a name, and how to score texts with it.
struct Scorer<B: Backend> {
    name: String,
    tokenizer: BertTokenizer,
    model: BertClassifier<B>,
}

impl<B: Backend> Scorer<B> {
    fn score(
        &self,
        context: Option<&str>,
        texts: &[String],
        args: &FlipArgs,
    ) -> Result<Vec<Vec<f32>>> {
        let items: Vec<(String, Option<String>)> = texts
            .iter()
            .map(|t| match context {
                Some(a) => (a.to_string(), Some(t.clone())),
                None => (t.clone(), None),
            })
            .collect();
        let max_len = self.model.max_len(args.max_len);
        Ok(probabilities(&self.model, &self.tokenizer, &items, max_len, args.batch_size)?)
    }
}

pub fn run(args: FlipArgs) -> Result<()> {
    if let Some(json) = &args.json {
        crate::run::check_output_path("--json", json)?;
    }
    let config = FlipSearchConfig {
        max_edits: args.max_edits,
        max_queries: args.queries,
        words: args.words,
        synonyms: args.synonyms,
        min_cosine: args.min_cos,
        batch_size: args.batch_size,
        sentence_edits: !args.no_sentence_edits,
        ..Default::default()
    };
    config.validate()?;
    let examples = match (&args.text, &args.data) {
        (Some(text), _) => {
            vec![Example { idx: 0, text_a: text.clone(), text_b: None, label: 0 }]
        }
        (None, Some(path)) => {
            let mut examples = shared::data::load(path, args.task)
                .with_context(|| format!("reading {} as {}", path.display(), args.task))?;
            examples.truncate(args.limit);
            examples
        }
        (None, None) => bail!("pass --text or --data"),
    };
    if examples.is_empty() {
        bail!("no examples to search");
    }
    let specs = args
        .compare
        .iter()
        .map(|s| ConnectionSpec::parse(s).with_context(|| format!("parsing --compare {s}")))
        .collect::<Result<Vec<_>>>()?;
    crate::with_backend!(args.backend, |B, device| search_all::<B>(
        &args, config, &specs, &examples, &device
    ))
}

fn load<B: Backend>(
    dir: &Path,
    flag: Option<&str>,
    args: &FlipArgs,
    device: &B::Device,
) -> Result<Scorer<B>> {
    let spec = connection_spec(dir, flag)?;
    let (tokenizer, model) = load_victim::<B>(dir, None, args.task, &spec, device)?;
    let name = format!("{} ({})", dir.display(), spec.to_spec_string());
    Ok(Scorer { name, tokenizer, model })
}

fn search_all<B: Backend>(
    args: &FlipArgs,
    config: FlipSearchConfig,
    specs: &[ConnectionSpec],
    examples: &[Example],
    device: &B::Device,
) -> Result<()> {
    let target = load::<B>(&args.model, args.connection.as_deref(), args, device)?;
    let mut others = Vec::new();
    for spec in specs {
        let name = format!("{} ({})", args.model.display(), spec.to_spec_string());
        let model = target.model.clone().with_connections(spec)?;
        others.push(Scorer { name, tokenizer: target.tokenizer.clone(), model });
    }
    for dir in &args.compare_model {
        others.push(load::<B>(dir, None, args, device)?);
    }
    let neighbours = WordNeighbours::from_model(&target.model, &target.tokenizer)
        .context("indexing the word embeddings")?;

    let labels: Vec<String> = args.task.label_names().iter().map(|s| s.to_string()).collect();
    let mut records = Vec::with_capacity(examples.len());
    for (i, example) in examples.iter().enumerate() {
        let (context, text) = match &example.text_b {
            Some(b) => (Some(example.text_a.as_str()), b.as_str()),
            None => (None, example.text_a.as_str()),
        };
        let start = Instant::now();
        // Words past the model's maximum length are never edited: it would not read the edit.
        let item = context.map_or((text, None), |premise| (premise, Some(text)));
        let visible = target.tokenizer.visible_len(item, target.model.max_len(args.max_len))?;
        let search = FlipSearch::with_visible(text, visible, Some(&neighbours), config.clone())?;
        let outcome = search.run(|batch| target.score(context, batch, args))?;
        let mut compared = Vec::new();
        if let (FlipStatus::Flipped, Some(best)) = (outcome.status, &outcome.best) {
            let pair = [text.to_string(), best.perturbation.text.clone()];
            for other in &others {
                let p = other.score(context, &pair, args)?;
                let (clean, edited) = (argmax(&p[0]), argmax(&p[1]));
                compared.push(Verdict {
                    model: other.name.clone(),
                    clean_label: clean,
                    clean_probabilities: p[0].clone(),
                    edited_label: edited,
                    edited_probabilities: p[1].clone(),
                    flipped: clean != edited,
                });
            }
        }
        let record = FlipRecord {
            idx: example.idx,
            text: text.to_string(),
            outcome,
            compared,
            elapsed_s: start.elapsed().as_secs_f64(),
        };
        tracing::info!("[{}/{}] {}", i + 1, examples.len(), summary_line(&record, &labels));
        records.push(record);
    }
    let found: Vec<&FlipRecord> =
        records.iter().filter(|r| r.outcome.status == FlipStatus::Flipped).collect();
    let flipped_too = others
        .iter()
        .enumerate()
        .map(|(k, o)| (o.name.clone(), found.iter().filter(|r| r.compared[k].flipped).count()))
        .collect();
    let report = FlipReport {
        model: target.name.clone(),
        task: args.task.to_string(),
        labels,
        config,
        found: found.len(),
        searched: records.len(),
        records,
        flipped_too,
    };
    print_report(&report);
    if let Some(path) = &args.json {
        crate::run::write_json(path, &report)?;
    }
    Ok(())
}

fn label(labels: &[String], i: usize) -> &str {
    labels.get(i).map_or("?", String::as_str)
}

fn summary_line(r: &FlipRecord, labels: &[String]) -> String {
    let o = &r.outcome;
    let clean = o.clean_label.map_or("?", |y| label(labels, y));
    match (o.status, &o.best) {
        (FlipStatus::Flipped, Some(best)) => format!(
            "{clean} -> {} with {} edit(s), {} queries: {:?}",
            label(labels, best.label),
            best.num_edits,
            o.queries,
            best.perturbation.text
        ),
        (status, _) => format!("{clean}: no flip ({status:?}, {} queries)", o.queries),
    }
}

fn print_report(report: &FlipReport) {
    println!("model: {}   task: {}", report.model, report.task);
    for r in &report.records {
        println!("[{}] {}", r.idx, summary_line(r, &report.labels));
        if let Some(best) = r.outcome.best.as_ref().filter(|_| !r.compared.is_empty()) {
            for e in &best.perturbation.edits {
                println!("      {:?}: {:?} -> {:?}", e.kind, e.before, e.after);
            }
        }
        for v in &r.compared {
            let verdict = if v.flipped { "FLIPPED too" } else { "kept its verdict" };
            println!(
                "      {}: {} ({:.2}) -> {} ({:.2}): {verdict}",
                v.model,
                label(&report.labels, v.clean_label),
                v.clean_probabilities[v.clean_label],
                label(&report.labels, v.edited_label),
                v.edited_probabilities[v.edited_label],
            );
        }
    }
    let found = report.found;
    println!("edits found: {found} of {} searches", report.searched);
    for (name, n) in &report.flipped_too {
        println!("  {name} flipped on {n} of those {found} edits");
    }
}
