//! `trainer attack` end to end: the MiniLM model with a fresh classifier on five SST-2 dev
//! sentences, then the JSON report checked against itself (counts, TextAttack's formulas,
//! budgets). A random head gets some examples right and some wrong, so both the skipped and
//! the attacked paths run; the checks hold whatever it predicts. The sentences are the first
//! of the SST-2 dev sample committed under tests/fixtures/data (the full file's first rows).

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

fn sst2_dev() -> String {
    let path = shared::data::test_data::fixtures_dir().join("normalized/sst2_dev.jsonl");
    path.to_str().expect("a UTF-8 path").to_string()
}
const QUERIES: u64 = 25;

fn minilm_dir() -> PathBuf {
    let dir = std::env::var_os("IMBERT_MINILM").map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../models/all-minilm-l6-v2"))
    });
    assert!(
        dir.join("model.safetensors").exists(),
        "MiniLM model not found at {}: run `make model` or set IMBERT_MINILM",
        dir.display()
    );
    dir
}

fn trainer() -> Command {
    Command::new(env!("CARGO_BIN_EXE_trainer"))
}

#[test]
fn attack_on_five_sst2_sentences_reports_consistent_metrics() {
    let report = run_attack_on_five();
    assert_eq!(report["connection"], "bert", "MiniLM has no imbert.json: plain BERT");
    let results = report["results"].as_array().unwrap();
    check_summary(&report["summary"], results);
    check_results(results);
}

/// `trainer attack` on the first five SST-2 dev rows, by an untrained MiniLM classifier; returns
/// its JSON report.
fn run_attack_on_five() -> Value {
    let out_path =
        std::env::temp_dir().join(format!("imbert-attack-cli-{}.json", std::process::id()));
    let started = std::time::Instant::now();
    let out = trainer()
        .args(["attack", "--task", "sst2", "--limit", "5", "--num-labels", "2"])
        .args(["--max-len", "48", "--k", "8", "--queries", &QUERIES.to_string(), "--seed", "3"])
        .arg("--model")
        .arg(minilm_dir())
        .arg("--data")
        .arg(sst2_dev())
        .arg("--json")
        .arg(&out_path)
        .output()
        .expect("running trainer");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}\n{stderr}\n(took {:.1}s)", started.elapsed().as_secs_f64());
    assert!(out.status.success(), "trainer attack failed");
    assert!(stderr.contains("initialised fresh (random)"), "the fresh head is announced");
    assert!(stdout.contains("Attack success rate:"));
    let report = serde_json::from_str(&std::fs::read_to_string(&out_path).unwrap()).unwrap();
    std::fs::remove_file(&out_path).ok();
    report
}

fn count(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

/// The summary's counts and rates agree with the per-sentence results.
fn check_summary(s: &Value, results: &[Value]) {
    let (total, ok, failed, skipped) =
        (count(&s["total"]), count(&s["succeeded"]), count(&s["failed"]), count(&s["skipped"]));
    assert_eq!(total, 5);
    assert_eq!(ok + failed + skipped, total);
    assert_eq!(results.len(), 5);
    let status = |name: &str| results.iter().filter(|r| r["status"] == name).count() as u64;
    assert_eq!((status("succeeded"), status("failed"), status("skipped")), (ok, failed, skipped));

    let close = |v: &Value, expected: f64| {
        let x = v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"));
        assert!((x - expected).abs() < 1e-9, "{x} vs {expected}");
    };
    close(&s["original_accuracy"], 100.0 * (total - skipped) as f64 / total as f64);
    close(&s["accuracy_under_attack"], 100.0 * failed as f64 / total as f64);
    if ok + failed > 0 {
        close(&s["attack_success_rate"], 100.0 * ok as f64 / (ok + failed) as f64);
        let attacked: Vec<&Value> = results.iter().filter(|r| r["status"] != "skipped").collect();
        let mean_queries = attacked.iter().map(|r| count(&r["queries"]) as f64).sum::<f64>()
            / attacked.len() as f64;
        close(&s["avg_queries"], mean_queries);
    } else {
        assert!(s["attack_success_rate"].is_null());
    }
}

/// Each result: the right gold label, within the query and word budgets, and a status that
/// matches its predictions.
fn check_results(results: &[Value]) {
    // The first five SST-2 dev rows, in order, with their gold labels.
    let gold = [1, 0, 1, 1, 0];
    for (r, label) in results.iter().zip(gold) {
        assert_eq!(count(&r["label"]), label);
        assert!(count(&r["queries"]) <= QUERIES, "{r}");
        let subs = r["substitutions"].as_array().unwrap();
        let max_words = (0.3 * count(&r["num_words"]) as f64).ceil() as usize;
        assert!(subs.len() <= max_words, "{r}");
        let (pred, adv_pred) =
            (count(&r["original_prediction"]), count(&r["adversarial_prediction"]));
        match r["status"].as_str().unwrap() {
            "skipped" => {
                assert_ne!(pred, label);
                assert_eq!(r["adversarial"], r["original"]);
            }
            "succeeded" => {
                assert_eq!(pred, label);
                assert_ne!(adv_pred, label);
                assert_ne!(r["adversarial"], r["original"]);
            }
            "failed" => assert_eq!((pred, adv_pred), (label, label)),
            other => panic!("unknown status {other}"),
        }
    }
}

#[test]
fn bad_input_is_a_clear_error() {
    let run = |args: &[&str]| {
        let out = trainer().args(args).output().expect("running trainer");
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (code, err) = run(&[
        "attack",
        "--model",
        "/nonexistent",
        "--task",
        "sst2",
        "--data",
        "/nonexistent/sst2.jsonl",
    ]);
    assert_eq!(code, Some(1));
    assert!(err.contains("error: reading /nonexistent/sst2.jsonl"), "{err}");
    assert!(!err.contains("panicked"), "{err}");

    let sst2_dev = sst2_dev();
    let sst2_dev = sst2_dev.as_str();

    let (code, err) =
        run(&["attack", "--model", "/nonexistent", "--task", "nope", "--data", sst2_dev]);
    assert_eq!(code, Some(2), "clap rejects an unknown task: {err}");

    let (code, err) = run(&[
        "attack",
        "--model",
        "/nonexistent",
        "--task",
        "sst2",
        "--data",
        sst2_dev,
        "--connection",
        "im:T=x",
    ]);
    assert_eq!(code, Some(1));
    assert!(err.contains("--connection"), "{err}");

    let (code, err) = run(&[
        "attack",
        "--model",
        "/nonexistent",
        "--task",
        "sst2",
        "--data",
        sst2_dev,
        "--limit",
        "0",
    ]);
    assert_eq!(code, Some(1));
    assert!(err.contains("no examples"), "{err}");
}
