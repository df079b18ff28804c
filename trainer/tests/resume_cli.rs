//! A run killed at any point and resumed with `--resume` ends with the weights of a run never
//! interrupted, bit for bit, with dropout and shuffling on; and a resume that cannot be exact is
//! refused with a message that names the file or flag.

mod common;

use std::path::Path;

use common::*;

/// The tiny run every case repeats: 32 examples in batches of 8 (4 steps per epoch), 3 epochs,
/// dropout 0.1 and shuffling on, a checkpoint every 2 steps, `final/` asked for at the start
/// only (so a resumed run must remember it).
fn run_args(dir: &Path) -> Vec<String> {
    let mut args = tiny_finetune(dir, &["--connection", "im", "--T", "2"]);
    let at = args.iter().position(|a| a == "--max-steps").unwrap();
    args.drain(at..at + 2); // all 12 steps of the 3 epochs
    let at = args.iter().position(|a| a == "--epochs").unwrap();
    args[at + 1] = "3".into();
    args
}

fn weights(dir: &Path) -> Vec<u8> {
    std::fs::read(dir.join("final/model.safetensors"))
        .unwrap_or_else(|e| panic!("{}: {e}", dir.join("final").display()))
}

fn state(dir: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(dir.join("checkpoint/state.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// metrics.jsonl's lines, less the wall-clock fields.
fn metrics_without_timings(dir: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(dir.join("metrics.jsonl")).unwrap();
    let mut lines: Vec<serde_json::Value> =
        text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    for line in &mut lines {
        let fields = line.as_object_mut().unwrap();
        assert!(
            fields.remove("examples_per_sec").is_some() && fields.remove("elapsed_s").is_some()
        );
    }
    lines
}

/// Starts the run in `dir` with a crash hook set, and checks that it died.
fn crash(dir: &Path, hook: &str, step: usize) {
    let out = trainer(&as_refs(&run_args(dir)), &[(hook, &step.to_string())]);
    assert!(!out.status.success(), "the induced crash ({hook}={step}) happened");
    assert!(!dir.join("done").exists());
}

/// Resumes `dir` without any flag but --resume, from `cwd`.
fn resume_from(dir: &Path, cwd: &Path) -> String {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_trainer"));
    cmd.args(["finetune", "--resume", dir.to_str().unwrap()]).current_dir(cwd);
    ok(cmd.env("IMBERT_DATA", data_dir()).output().unwrap())
}

#[test]
fn a_run_killed_anywhere_resumes_to_identical_weights() {
    let reference = scratch("resume-reference");
    ok(trainer(&as_refs(&run_args(&reference)), &[]));
    let expected = weights(&reference);
    let metrics = metrics_without_timings(&reference);
    assert_eq!(metrics.len(), 3, "one validation per epoch");

    // (name, hook, step, the checkpoint's step the resume starts from)
    let kills = [
        ("mid-epoch-1", "IMBERT_CRASH_AFTER_STEP", 3, 2),
        ("epoch-boundary", "IMBERT_CRASH_AFTER_STEP", 4, 4),
        ("mid-epoch-2", "IMBERT_CRASH_AFTER_STEP", 7, 6),
        ("mid-epoch-3", "IMBERT_CRASH_AFTER_STEP", 11, 10),
        ("checkpoint-write", "IMBERT_CRASH_IN_CHECKPOINT_AT_STEP", 6, 4),
    ];
    // Resumed from another directory: the run's relative model path must still resolve.
    let elsewhere = scratch("resume-cwd");
    std::fs::create_dir_all(&elsewhere).unwrap();
    for (name, hook, step, checkpoint) in kills {
        let dir = scratch(&format!("resume-{name}"));
        crash(&dir, hook, step);
        assert_eq!(state(&dir)["step"], checkpoint, "{name}: the last checkpoint before the kill");
        let log = resume_from(&dir, &elsewhere);
        assert!(log.contains(&format!("resuming at step {checkpoint}")), "{name}: {log}");
        assert!(weights(&dir) == expected, "{name}: resumed weights differ from the reference");
        assert_eq!(metrics_without_timings(&dir), metrics, "{name}: metrics.jsonl differs");
        let leftovers: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with(".checkpoint"))
            .collect();
        assert!(leftovers.is_empty(), "{name}: leftovers of the killed write: {leftovers:?}");
    }
}

#[test]
fn a_kill_between_the_checkpoint_renames_resumes_from_the_previous_one() {
    let reference = scratch("resume-renames-reference");
    ok(trainer(&as_refs(&run_args(&reference)), &[]));
    // The moment `replace_dir` has moved the old checkpoint aside and not yet moved the new one
    // in: checkpoint/ is missing, the old one and a complete new one sit beside it.
    let dir = scratch("resume-renames");
    crash(&dir, "IMBERT_CRASH_AFTER_STEP", 7);
    std::fs::rename(dir.join("checkpoint"), dir.join(".checkpoint.old-4242")).unwrap();
    std::fs::create_dir_all(dir.join(".checkpoint.tmp-4242")).unwrap();
    let log = resume_from(&dir, &repo());
    assert!(log.contains("resuming at step 6"), "{log}");
    assert!(weights(&dir) == weights(&reference), "resumed weights differ from the reference");
}

#[test]
fn a_resume_that_cannot_be_exact_is_refused() {
    let dir = scratch("resume-refused");
    crash(&dir, "IMBERT_CRASH_AFTER_STEP", 7);
    let dir_arg = dir.to_str().unwrap();
    let fails = |args: &[&str], needle: &str| {
        let out = trainer(args, &[]);
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!out.status.success(), "{args:?} should fail:\n{text}");
        assert!(text.contains(needle), "{args:?}: the message lacks {needle:?}:\n{text}");
        assert!(!text.contains("panicked"), "{args:?} panicked:\n{text}");
    };
    // A flag that would change the run's settings.
    fails(&["finetune", "--resume", dir_arg, "--lr", "1e-3"], "--lr");
    fails(&["finetune", "--resume", dir_arg, "--no-shuffle"], "--no-shuffle");
    fails(&["finetune", "--resume", dir_arg, "--out", "elsewhere"], "--out");

    // A state.json that does not fit the schedule.
    let path = dir.join("checkpoint/state.json");
    let good = std::fs::read_to_string(&path).unwrap();
    let past_end = good.replace("\"step\": 6,", "\"step\": 60,");
    assert_ne!(past_end, good);
    std::fs::write(&path, past_end).unwrap();
    fails(&["finetune", "--resume", dir_arg], "state.json");
    std::fs::write(&path, &good).unwrap();

    // The checkpoint removed after the run validated: starting over would replace best/.
    std::fs::remove_dir_all(dir.join("checkpoint")).unwrap();
    fails(&["finetune", "--resume", dir_arg], "no checkpoint/");
    assert!(dir.join("best").exists(), "the refused resume left best/ alone");
}
