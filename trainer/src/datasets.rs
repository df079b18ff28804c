//! Where a task's files live in a data directory (the layout of `../shared/data`, which
//! `trainer fetch-data` also writes).

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use shared::data::Task;

/// `$IMBERT_DATA`, else `../shared/data` when it exists (this repository's layout), else `data`.
pub fn default_data_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("IMBERT_DATA") {
        return dir.into();
    }
    let beside = PathBuf::from("../shared/data");
    if beside.is_dir() {
        beside
    } else {
        PathBuf::from("data")
    }
}

fn first_existing(dir: &Path, candidates: &[String], what: &str, hint: &str) -> Result<PathBuf> {
    for c in candidates {
        let p = dir.join(c);
        if p.exists() {
            return Ok(p);
        }
    }
    bail!("no {what} in {} (looked for {}); {hint}", dir.display(), candidates.join(", "))
}

/// The GLUE training file of `task` (full train set, else the 9,999-example GLUE-train subset).
pub fn train_file(dir: &Path, task: Task) -> Result<PathBuf> {
    let t = task_key(task);
    first_existing(
        dir,
        &[format!("normalized/{t}_train.jsonl"), format!("normalized/{t}_train_subset_a.jsonl")],
        &format!("{t} training file"),
        "pass --train-file FILE, or --data-dir DIR holding that layout (`trainer fetch-data` \
         writes it)",
    )
}

/// GLUE dev splits of `task` as (split name, file). QQP's dev set is not in the shared data.
pub fn dev_files(dir: &Path, task: Task) -> Vec<(String, PathBuf)> {
    let splits: Vec<(&str, String)> = match task {
        Task::Mnli | Task::MnliMismatched => vec![
            ("mnli", "normalized/mnli_dev_matched.jsonl".into()),
            ("mnli-mm", "normalized/mnli_dev_mismatched.jsonl".into()),
        ],
        other => vec![(other.name(), format!("normalized/{}_dev.jsonl", task_key(other)))],
    };
    splits
        .into_iter()
        .map(|(name, f)| (name.to_string(), dir.join(f)))
        .filter(|(_, p)| p.exists())
        .collect()
}

/// The annotated AdvGLUE dev set.
pub fn advglue_file(dir: &Path) -> Result<PathBuf> {
    first_existing(
        dir,
        &["advglue/dev_ann.json".into(), "advglue/dev.json".into()],
        "AdvGLUE dev file",
        "pass --data-dir DIR holding that layout (`trainer fetch-data` writes it)",
    )
}

/// AdvGLUE task keys evaluated for a GLUE task (MNLI has matched and mismatched items).
pub fn advglue_tasks(task: Task) -> Vec<Task> {
    match task {
        Task::Mnli | Task::MnliMismatched => vec![Task::Mnli, Task::MnliMismatched],
        other => vec![other],
    }
}

fn task_key(task: Task) -> &'static str {
    match task {
        Task::MnliMismatched => "mnli",
        other => other.name(),
    }
}
