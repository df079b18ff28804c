//! What the trainer's CLI tests share: the repo, scratch directories, running the binary, and
//! the tiny-model fine-tune they start from.
#![allow(dead_code)] // each test binary uses its own part

use std::path::{Path, PathBuf};
use std::process::Command;

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

pub fn data_dir() -> PathBuf {
    shared::data::test_data::fixtures_dir()
}

/// A fresh directory under target/test-artifacts.
pub fn scratch(name: &str) -> PathBuf {
    let dir = repo().join("target/test-artifacts/trainer").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.parent().unwrap()).unwrap();
    dir
}

pub fn trainer(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_trainer"));
    cmd.args(args).current_dir(repo()).env("IMBERT_DATA", data_dir());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("the trainer binary runs")
}

pub fn ok(out: std::process::Output) -> String {
    let text =
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "trainer failed:\n{text}");
    text
}

pub fn tiny_finetune(run: &Path, extra: &[&str]) -> Vec<String> {
    tiny_finetune_of("tests/fixtures/tiny-bert", run, extra)
}

/// `tiny_finetune` from another model directory (the tiny RoBERTa).
pub fn tiny_finetune_of(model: &str, run: &Path, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = [
        "finetune",
        "--task",
        "sst2",
        "--model",
        model,
        "--train-samples",
        "32",
        "--val-samples",
        "16",
        "--batch-size",
        "8",
        "--max-len",
        "24",
        "--epochs",
        "2",
        "--max-steps",
        "6",
        "--checkpoint-every",
        "2",
        "--lr",
        "1e-3",
        "--save-final",
        "--out",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.push(run.display().to_string());
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

pub fn as_refs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}
