//! A fine-tune whose output goes to a pipe (as under nohup, a job scheduler or `| tee`): its log
//! carries no terminal colour codes, and progress lines appear although no bar can be drawn.

use std::path::PathBuf;
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

#[test]
fn piped_finetune_logs_plain_progress_lines() {
    let run = repo().join("target/test-artifacts/trainer/piped-progress");
    let _ = std::fs::remove_dir_all(&run);
    std::fs::create_dir_all(run.parent().unwrap()).unwrap();
    #[rustfmt::skip]
    let args = [
        "finetune", "--task", "sst2", "--model", "tests/fixtures/tiny-bert",
        "--train-samples", "32", "--val-samples", "16", "--batch-size", "8", "--max-len", "24",
        "--epochs", "2", "--max-steps", "6", "--progress-every", "2", "--out",
    ];
    // `output()` pipes stdout and stderr: neither is a terminal.
    let out = Command::new(env!("CARGO_BIN_EXE_trainer"))
        .args(args)
        .arg(&run)
        .current_dir(repo())
        // The committed 48-row sample, so that a clone without ../shared/data passes too.
        .env("IMBERT_DATA", repo().join("tests/fixtures/data"))
        .env("RUST_LOG", "info")
        .output()
        .expect("the trainer binary runs");
    let text =
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "trainer failed:\n{text}");
    assert!(!text.contains("\x1b["), "terminal escape codes in piped output:\n{text}");
    let progress: Vec<&str> =
        text.lines().filter(|l| l.contains("step ") && l.contains(" left")).collect();
    for step in ["step 2/6:", "step 4/6:", "step 6/6:"] {
        assert!(progress.iter().any(|l| l.contains(step)), "no progress line {step}:\n{text}");
    }
    assert!(progress.iter().all(|l| l.contains("loss ") && l.contains("ex/s")), "{progress:#?}");
}
