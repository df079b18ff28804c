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

/// One clean evaluation split of a task.
#[derive(Debug, Clone, PartialEq)]
pub struct DevFile {
    /// `sst2`, `mnli`, `mnli-mm`, ...: the AdvGLUE split it stands beside.
    pub split: String,
    pub path: PathBuf,
    /// `None` for GLUE dev; else what the examples are instead.
    pub held_out: Option<String>,
}

/// The clean evaluation splits of `task`: its GLUE dev splits. Where the data has no GLUE dev
/// file but trains on a GLUE-train subset (`<task>_train_subset_a`), the disjoint held-out
/// subset (`<task>_train_subset_b`) stands in, so that clean accuracy and the majority-label
/// share stand beside AdvGLUE; this is QQP in the shared data, whose dev set is not there.
pub fn dev_files(dir: &Path, task: Task) -> Vec<DevFile> {
    let splits: Vec<(&str, String)> = match task {
        Task::Mnli | Task::MnliMismatched => vec![
            ("mnli", "normalized/mnli_dev_matched.jsonl".into()),
            ("mnli-mm", "normalized/mnli_dev_mismatched.jsonl".into()),
        ],
        other => vec![(other.name(), format!("normalized/{}_dev.jsonl", task_key(other)))],
    };
    let dev: Vec<DevFile> = splits
        .into_iter()
        .map(|(name, f)| DevFile { split: name.to_string(), path: dir.join(f), held_out: None })
        .filter(|d| d.path.exists())
        .collect();
    let t = task_key(task);
    let subset = |part: &str| dir.join(format!("normalized/{t}_train_subset_{part}.jsonl"));
    let trains_on_subset = train_file(dir, task).is_ok_and(|f| f == subset("a"));
    if !dev.is_empty() || !trains_on_subset || !subset("b").exists() {
        return dev;
    }
    vec![DevFile {
        split: task.name().to_string(),
        path: subset("b"),
        held_out: Some(format!(
            "held-out GLUE train pairs (`{t}_train_subset_b`, disjoint from the training subset \
             `{t}_train_subset_a`): no GLUE dev file of {t} in the data"
        )),
    }]
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

#[cfg(test)]
mod tests {
    use super::*;

    /// QQP in the shared data: no GLUE dev file, training on `qqp_train_subset_a`, so the
    /// disjoint `qqp_train_subset_b` is its clean split, marked as such; never when a dev file
    /// or the full training file is there.
    #[test]
    fn a_task_without_glue_dev_is_evaluated_on_its_held_out_subset() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let file = |name: &str| {
            let path = dir.join("normalized").join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, "").unwrap();
            path
        };
        file("qqp_train_subset_a.jsonl");
        assert!(dev_files(dir, Task::Qqp).is_empty(), "no held-out file yet");
        let b = file("qqp_train_subset_b.jsonl");
        let found = dev_files(dir, Task::Qqp);
        assert_eq!(found.len(), 1);
        assert_eq!((found[0].split.as_str(), &found[0].path), ("qqp", &b));
        assert!(found[0].held_out.as_deref().unwrap().contains("qqp_train_subset_b"));

        let full = file("qqp_train.jsonl");
        assert!(dev_files(dir, Task::Qqp).is_empty(), "the full train set may hold subset b");
        std::fs::remove_file(full).unwrap();
        let dev = file("qqp_dev.jsonl");
        assert_eq!(
            dev_files(dir, Task::Qqp),
            [DevFile { split: "qqp".into(), path: dev, held_out: None }]
        );

        file("mnli_train_subset_a.jsonl");
        file("mnli_train_subset_b.jsonl");
        let m = file("mnli_dev_matched.jsonl");
        let found = dev_files(dir, Task::Mnli);
        assert_eq!(found, [DevFile { split: "mnli".into(), path: m, held_out: None }]);
    }
}
