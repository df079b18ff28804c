//! `trainer fetch-data`: GLUE from the HuggingFace hub and AdvGLUE dev from its site, written in
//! the layout of `../shared/data` (normalized jsonl + `advglue/dev_ann.json`). For users with
//! internet; the tests serve both endpoints from 127.0.0.1.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Args;
use serde_json::Value;
use shared::data::{Example, Task};

#[derive(Args, Debug, Clone)]
pub struct FetchArgs {
    /// Where to write the data (created if missing).
    #[arg(long, default_value = "data")]
    pub data_dir: PathBuf,
    /// Tasks to fetch.
    #[arg(long, value_delimiter = ',', default_value = "sst2,qqp,qnli,mnli,rte")]
    pub tasks: Vec<String>,
    /// The HF datasets-server endpoint (rows API).
    #[arg(long, default_value = "https://datasets-server.huggingface.co")]
    pub hf_endpoint: String,
    /// The HF dataset holding GLUE.
    #[arg(long, default_value = "nyu-mll/glue")]
    pub dataset: String,
    /// Base URL of the AdvGLUE files (dev.json, dev_ann.json).
    #[arg(long, default_value = "https://adversarialglue.github.io/dataset")]
    pub advglue_url: String,
    /// Rows per request (the rows API allows at most 100).
    #[arg(long, default_value_t = 100)]
    pub page_size: usize,
}

/// (HF split, file name under normalized/) for each task.
fn splits(task: Task) -> Vec<(&'static str, String)> {
    match task {
        Task::Mnli | Task::MnliMismatched => vec![
            ("train", "mnli_train.jsonl".into()),
            ("validation_matched", "mnli_dev_matched.jsonl".into()),
            ("validation_mismatched", "mnli_dev_mismatched.jsonl".into()),
        ],
        t => vec![
            ("train", format!("{}_train.jsonl", t.name())),
            ("validation", format!("{}_dev.jsonl", t.name())),
        ],
    }
}

pub fn run(args: FetchArgs) -> Result<()> {
    let agent = ureq::AgentBuilder::new().timeout(std::time::Duration::from_secs(60)).build();
    let normalized = args.data_dir.join("normalized");
    std::fs::create_dir_all(&normalized)
        .with_context(|| format!("creating {}", normalized.display()))?;
    for name in &args.tasks {
        let task: Task = name.parse()?;
        for (split, file) in splits(task) {
            let rows = fetch_split(&agent, &args, task, split)?;
            let text: String = rows
                .iter()
                .map(|e| serde_json::to_string(e).map(|s| s + "\n"))
                .collect::<Result<_, _>>()?;
            let path = normalized.join(&file);
            shared::io::atomic::write_atomic(&path, text.as_bytes())?;
            println!("{}: {} rows", path.display(), rows.len());
        }
    }
    let advglue = args.data_dir.join("advglue");
    std::fs::create_dir_all(&advglue)?;
    for file in ["dev.json", "dev_ann.json"] {
        let url = format!("{}/{file}", args.advglue_url.trim_end_matches('/'));
        let body = agent.get(&url).call().with_context(|| format!("GET {url}"))?.into_string()?;
        let path = advglue.join(file);
        // Parse the download before it replaces anything: a truncated or broken response is an
        // error now, and the file already there (if any) stays as it was.
        let options = shared::data::ReadOptions::strict();
        shared::data::parse_advglue_json(Path::new(&url), body.as_bytes(), &options).with_context(
            || format!("checking the download of {url}; {} is left as it was", path.display()),
        )?;
        shared::io::atomic::write_atomic(&path, body.as_bytes())?;
        println!("{}: {} bytes", path.display(), body.len());
    }
    Ok(())
}

/// Every row of one split, page by page, mapped to `{idx, label, text_a, text_b}`.
fn fetch_split(
    agent: &ureq::Agent,
    args: &FetchArgs,
    task: Task,
    split: &str,
) -> Result<Vec<Example>> {
    let config = match task {
        Task::MnliMismatched => "mnli",
        t => t.name(),
    };
    let (field_a, field_b) = task.advglue_fields();
    let mut out = Vec::new();
    let mut offset = 0;
    loop {
        let url = format!(
            "{}/rows?dataset={}&config={config}&split={split}&offset={offset}&length={}",
            args.hf_endpoint.trim_end_matches('/'),
            args.dataset.replace('/', "%2F"),
            args.page_size
        );
        let page: Value =
            agent.get(&url).call().with_context(|| format!("GET {url}"))?.into_json()?;
        let rows =
            page["rows"].as_array().with_context(|| format!("{url}: no `rows` in the answer"))?;
        for r in rows {
            out.push(
                example(&r["row"], task, field_a, field_b)
                    .with_context(|| format!("{url}: row {}", r["row_idx"]))?,
            );
        }
        offset += rows.len();
        let total = page["num_rows_total"].as_u64().unwrap_or(0) as usize;
        if rows.is_empty() || offset >= total {
            break;
        }
    }
    Ok(out)
}

fn example(row: &Value, task: Task, field_a: &str, field_b: Option<&str>) -> Result<Example> {
    let text =
        |f: &str| row[f].as_str().map(str::to_string).with_context(|| format!("missing field {f}"));
    let label = row["label"].as_i64().context("missing label")?;
    if label < 0 || label as usize >= task.num_labels() {
        bail!("label {label} outside 0..{} (GLUE test splits have no labels)", task.num_labels());
    }
    Ok(Example {
        idx: row["idx"].as_i64().unwrap_or(0),
        text_a: text(field_a)?,
        text_b: field_b.map(text).transpose()?,
        label: label as usize,
    })
}

/// Where `fetch-data` puts a task's training file (the layout `datasets` reads).
pub fn fetched_train_file(data_dir: &Path, task: Task) -> PathBuf {
    data_dir.join("normalized").join(&splits(task)[0].1)
}
