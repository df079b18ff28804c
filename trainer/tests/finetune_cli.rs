//! End to end through the `trainer` binary: fine-tune (tiny random BERT and MiniLM), CreAT/PGD,
//! evaluation with the honesty flag (resuming is tested in resume_cli.rs). The runs
//! read the data samples committed under tests/fixtures/data (48 examples per split: enough for
//! the 32 + 16 examples they draw), so they need no download.

mod common;

use std::path::PathBuf;

use common::*;

#[test]
fn tiny_bert_finetunes_evaluates_and_is_flagged_as_not_learned() {
    let run = scratch("tiny-im");
    let args = tiny_finetune(&run, &["--connection", "im", "--T", "2", "--im-layers", "1-1"]);
    ok(trainer(&as_refs(&args), &[]));
    for f in [
        "config.json",
        "log.txt",
        "metrics.jsonl",
        "best/config.json",
        "best/model.safetensors",
        "best/imbert.json",
        "best/vocab.txt",
        "final/model.safetensors",
        "checkpoint/state.json",
        "done",
    ] {
        assert!(run.join(f).exists(), "{f} missing");
    }
    let metrics = std::fs::read_to_string(run.join("metrics.jsonl")).unwrap();
    assert_eq!(metrics.lines().count(), 2, "one validation per epoch (6 steps over 2 epochs of 4)");
    let residuals: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("im_residuals.json")).unwrap())
            .unwrap();
    assert_eq!(residuals["layers"][0]["layer"], 1);
    assert_eq!(residuals["layers"][0]["squared_norms"].as_array().unwrap().len(), 3, "T + 1 norms");

    let out = ok(trainer(&["eval", "--run", run.to_str().unwrap(), "--limit", "24"], &[]));
    assert!(out.contains("AdvGLUE"), "{out}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("eval.json")).unwrap()).unwrap();
    assert_eq!(report["connection"], "im:T=2,gamma=0.1,layers=1-1");
    assert_eq!(report["advglue"][0]["adversarial"]["n"], 24);
    assert!(report["advglue"][0]["by_level"]["word"]["adversarial"]["n"].as_u64().unwrap() > 0);
    // A 99-word random model after 6 steps is near chance: its AdvGLUE score must not pass as
    // robustness.
    assert_eq!(report["did_not_learn"], true, "{report}");
    assert!(std::fs::read_to_string(run.join("eval.md")).unwrap().contains("did not learn"));
}

/// A gamma far too large makes the residual rise; the run says so before its first step.
#[test]
fn an_overshooting_gamma_is_reported_before_training() {
    let run = scratch("tiny-im-overshoot");
    let args = tiny_finetune(
        &run,
        &["--connection", "im", "--T", "4", "--gamma", "5", "--im-layers", "0-1"],
    );
    ok(trainer(&as_refs(&args), &[]));
    let log = std::fs::read_to_string(run.join("log.txt")).unwrap();
    assert!(log.contains("warning: IM layer") && log.contains("gamma = 5 overshoots"), "{log}");
    let residuals: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("im_residuals.json")).unwrap())
            .unwrap();
    let layers = residuals["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 2);
    assert!(
        layers.iter().any(|l| !l["rises_after_iteration"].as_array().unwrap().is_empty()),
        "{residuals}"
    );

    // A small step descends on the same model: no warning.
    let run = scratch("tiny-im-descends");
    let args = tiny_finetune(
        &run,
        &["--connection", "im", "--T", "4", "--gamma", "0.01", "--im-layers", "0-1"],
    );
    ok(trainer(&as_refs(&args), &[]));
    let log = std::fs::read_to_string(run.join("log.txt")).unwrap();
    assert!(log.contains("IM layer 0: ||r||^2") && !log.contains("warning"), "{log}");
}

#[test]
fn creat_and_pgd_adversarial_training_run() {
    for adv in ["creat", "pgd"] {
        let run = scratch(&format!("adv-{adv}"));
        let mut args = tiny_finetune(&run, &["--adv", adv, "--adv-steps", "2"]);
        args.retain(|a| a != "--save-final");
        ok(trainer(&as_refs(&args), &[]));
        let config: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(run.join("config.json")).unwrap())
                .unwrap();
        assert_eq!(config["adv"], adv);
        assert_eq!(config["adv_tau"], if adv == "pgd" { 0.0 } else { 1.0 });
        assert!(run.join("done").exists());
    }
}

#[test]
fn minilm_finetunes_a_few_steps_with_an_im_layer() {
    let model = repo().join("models/all-minilm-l6-v2");
    assert!(model.join("model.safetensors").exists(), "run `make model` first");
    let run = scratch("minilm-im");
    let out = ok(trainer(
        &[
            "finetune",
            "--task",
            "sst2",
            "--model",
            model.to_str().unwrap(),
            "--connection",
            "im:T=2,layers=5-5",
            "--train-samples",
            "32",
            "--val-samples",
            "16",
            "--batch-size",
            "8",
            "--max-len",
            "32",
            "--max-steps",
            "2",
            "--out",
            run.to_str().unwrap(),
        ],
        &[],
    ));
    assert!(
        out.contains("classifier initialised fresh")
            || std::fs::read_to_string(run.join("log.txt")).unwrap().contains("classifier")
    );
    ok(trainer(&["eval", "--run", run.to_str().unwrap(), "--limit", "8"], &[]));
    assert!(run.join("eval.json").exists());
}

#[test]
fn bad_input_is_a_clear_error() {
    let out = trainer(&["finetune", "--task", "nope"], &[]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("nope"));
    let out = trainer(
        &[
            "finetune",
            "--task",
            "sst2",
            "--model",
            "/no/such/dir",
            "--out",
            scratch("bad").to_str().unwrap(),
        ],
        &[],
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("/no/such/dir"));
}

#[test]
fn impossible_settings_are_refused_before_anything_is_written() {
    let cases = [
        ("--lr", "NaN"),
        ("--lr", "inf"),
        ("--lr", "0"),
        ("--adam-eps", "-1e-8"),
        ("--adam-beta2", "1"),
        ("--warmup-ratio", "1.5"),
        ("--weight-decay", "NaN"),
        ("--dropout", "1"),
        ("--adv-lambda", "2"),
        ("--max-len", "0"),
        ("--train-samples", "0"),
    ];
    for (flag, value) in cases {
        let run = scratch("refused");
        // `--flag=value`: clap would read a bare `-1e-8` as a flag.
        let setting = format!("{flag}={value}");
        #[rustfmt::skip]
        let args = [
            "finetune", "--task", "sst2", "--model", "tests/fixtures/tiny-bert", &setting,
            "--out", run.to_str().unwrap(),
        ];
        let out = trainer(&args, &[]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{flag} {value} was accepted");
        assert!(stderr.contains(flag) && stderr.contains("must be"), "{flag} {value}: {stderr}");
        assert!(!run.exists(), "{flag} {value}: {} was created", run.display());
    }
}

/// One SGD step with no randomness, for `tests/python/check_sgd_step.py` to replay in PyTorch
/// (`make test` runs it on the directory this leaves behind).
#[test]
fn single_exact_sgd_step_for_the_pytorch_replay() {
    let run = repo().join("target/test-artifacts/sgd-step");
    let _ = std::fs::remove_dir_all(&run);
    ok(trainer(
        &[
            "finetune",
            "--task",
            "mnli",
            "--model",
            "tests/fixtures/tiny-bert",
            "--connection",
            "im:T=2,layers=1-1",
            "--optimizer",
            "sgd",
            "--lr",
            "5",
            "--warmup-ratio",
            "0",
            "--max-steps",
            "1",
            "--no-shuffle",
            "--dropout",
            "0",
            "--batch-size",
            "4",
            "--max-len",
            "24",
            "--train-samples",
            "16",
            "--val-samples",
            "8",
            "--save-final",
            "--out",
            run.to_str().unwrap(),
        ],
        &[],
    ));
    assert!(run.join("final/model.safetensors").exists() && run.join("split.json").exists());
}

/// The block-1 grid at smoke budgets on the tiny model: every arm searches the learning rate on
/// seed 0, seed 1 trains at the chosen one, the report reads the summaries (not the trials), and
/// a second run with only the summaries left trains nothing.
#[test]
fn reproduce_searches_the_lr_runs_the_grid_reports_it_and_resumes() {
    let grid = scratch("grid-smoke");
    let args = [
        "reproduce",
        "--preset",
        "sst2",
        "--smoke",
        "--model",
        "tests/fixtures/tiny-bert",
        // The untrained tiny model's validation loss prefers the smaller rate: listed second, so
        // that seed 1 following the choice (not the first rate) is tested.
        "--lrs",
        "3e-3,1e-4",
        "--out",
        grid.to_str().unwrap(),
    ];
    let first = ok(trainer(&args, &[]));
    // 8 arms on the tiny model's 2 layers (thirds: 0-0, 1-1), each 2 lr trials + seed 1.
    assert!(first.contains("24 cells (1 tasks x 8 arms x 2 seeds"), "{first}");
    let summaries = grid.join("summaries");
    let read = |path: PathBuf| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!("{}: {e}", path.display());
        }))
        .unwrap()
    };
    let mut chosen_rates = Vec::new();
    for stem in ["sst2-bert-none", "sst2-bert-creat", "sst2-im_T_5_gamma_0.1-none"] {
        let search = read(summaries.join(format!("lr-search/{stem}-s0.search.json")));
        let chosen = search["chosen_lr"].as_f64().unwrap();
        chosen_rates.push(chosen);
        let trials = search["trials"].as_array().unwrap();
        assert_eq!(trials.len(), 2, "{search}");
        let best = trials
            .iter()
            .min_by(|a, b| {
                a["val_loss"].as_f64().unwrap().total_cmp(&b["val_loss"].as_f64().unwrap())
            })
            .unwrap();
        assert_eq!(best["lr"].as_f64(), Some(chosen), "the lowest validation loss is chosen");
        for seed in [0, 1] {
            let cell = read(summaries.join(format!("{stem}-lr{chosen:e}-s{seed}.json")));
            assert_eq!(cell["config"]["lr"].as_f64(), Some(chosen), "seed {seed} of {stem}");
            assert_eq!(cell["config"]["seed"].as_u64(), Some(seed));
            assert!(
                cell["eval"]["advglue"].is_array() && cell["train_seconds"].as_f64() > Some(0.0)
            );
        }
        for lr in [3e-3, 1e-4] {
            assert!(summaries.join(format!("lr-search/{stem}-lr{lr:e}-s0.json")).exists());
        }
    }
    assert!(chosen_rates.contains(&1e-4), "some arm chose the second rate: {chosen_rates:?}");
    let report = read(grid.join("report/report.json"));
    assert_eq!(report["runs"].as_array().unwrap().len(), 16, "the grid's cells, not its trials");
    let md = std::fs::read_to_string(grid.join("report/report.md")).unwrap();
    assert!(md.contains("did not learn"), "a near-chance model is flagged in the report");
    assert!(!repo().join("results/runs/grid-smoke").exists(), "a smoke commits nothing");
    // A grid whose summaries exist is skipped cell by cell, even without its run directories
    // (a fresh clone of the repository).
    for entry in std::fs::read_dir(&grid).unwrap() {
        let path = entry.unwrap().path();
        if path.file_name().unwrap() != "summaries" {
            std::fs::remove_dir_all(&path).unwrap();
        }
    }
    let again = ok(trainer(&args, &[]));
    assert_eq!(again.matches(": summary in").count(), 24, "{again}");
    assert!(!grid.join("sst2-bert-none-lr1e-4-s0").exists(), "nothing was trained again");
    assert!(grid.join("report/report.md").exists(), "the report is rebuilt from the summaries");
}

/// Each validation records the gradient norm of every part; clipping is part of the run's config.
#[test]
fn gradient_norms_are_logged_and_clipping_is_recorded() {
    let run = scratch("tiny-grad-norms");
    let spec = "im:T=2,gamma=0.1,grad=frozen,step=backtrack,layers=1-1";
    ok(trainer(
        &as_refs(&tiny_finetune(&run, &["--connection", spec, "--max-grad-norm", "1"])),
        &[],
    ));
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("config.json")).unwrap()).unwrap();
    assert_eq!(
        (config["connection"].as_str(), config["max_grad_norm"].as_f64()),
        (Some(spec), Some(1.0))
    );
    let log = std::fs::read_to_string(run.join("log.txt")).unwrap();
    assert!(log.contains("gradient norms at the first step: embeddings"), "{log}");
    for line in std::fs::read_to_string(run.join("metrics.jsonl")).unwrap().lines() {
        let m: serde_json::Value = serde_json::from_str(line).unwrap();
        let norms = &m["grad_norms"];
        assert_eq!(norms["layers"].as_array().map(Vec::len), Some(2), "{m}");
        assert!(
            norms["head"].as_f64().unwrap() > 0.0
                && norms["total"].as_f64().unwrap() >= norms["head"].as_f64().unwrap()
        );
    }
    let refused = trainer(
        &as_refs(&tiny_finetune(&scratch("tiny-bad-clip"), &["--max-grad-norm", "-1"])),
        &[],
    );
    assert!(!refused.status.success());
}

#[test]
fn lr_search_picks_the_lowest_validation_loss_and_resumes() {
    let out = scratch("lr-search");
    let mut args = tiny_finetune(&out, &["--lrs", "1e-4,3e-3"]);
    args[0] = "lr-search".into();
    // tiny_finetune sets --lr and --save-final, which lr-search replaces and refuses.
    let lr = args.iter().position(|a| a == "--lr").unwrap();
    args.drain(lr..lr + 2);
    args.retain(|a| a != "--save-final");
    let first = ok(trainer(&as_refs(&args), &[]));
    assert!(first.contains("Chosen on the validation split"), "{first}");
    let search: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("search.json")).unwrap()).unwrap();
    let trials = search["trials"].as_array().unwrap();
    assert_eq!(trials.len(), 2);
    let best = trials
        .iter()
        .min_by(|a, b| a["val_loss"].as_f64().unwrap().total_cmp(&b["val_loss"].as_f64().unwrap()))
        .unwrap();
    assert_eq!(search["chosen_lr"], best["lr"]);
    for t in trials {
        assert!(t["val_majority_share"].as_f64().unwrap() >= 0.5);
        assert!(out
            .join(t["run_dir"].as_str().unwrap().rsplit('/').next().unwrap())
            .join("done")
            .exists());
    }
    // Finished runs are not trained again.
    let run_dirs = |search: &serde_json::Value| -> Vec<String> {
        let trials = search["trials"].as_array().unwrap();
        trials.iter().map(|t| t["run_dir"].as_str().unwrap().to_string()).collect()
    };
    let first_dirs = run_dirs(&search);
    assert!(first_dirs[0].contains("lr-1e-4-"), "{first_dirs:?}");
    let metrics = repo().join(&first_dirs[0]).join("metrics.jsonl");
    let before = std::fs::metadata(&metrics).unwrap().modified().unwrap();
    let second = ok(trainer(&as_refs(&args), &[]));
    assert_eq!(std::fs::metadata(&metrics).unwrap().modified().unwrap(), before);
    assert!(!second.contains("validation loss 0"), "{second}");

    // Another seed is another search: new runs, and the answer is theirs, not the old runs'.
    let mut reseeded = args.clone();
    reseeded.extend(["--seed".to_string(), "7".to_string()]);
    let third = ok(trainer(&as_refs(&reseeded), &[]));
    assert!(third.contains("validation loss 0"), "the reseeded runs did not train:\n{third}");
    let search: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("search.json")).unwrap()).unwrap();
    let reseeded_dirs = run_dirs(&search);
    assert_eq!(reseeded_dirs.len(), 2);
    assert!(reseeded_dirs.iter().all(|d| !first_dirs.contains(d)), "{reseeded_dirs:?}");
    args.extend(["--lr".to_string(), "1e-3".to_string()]);
    let refused = trainer(&as_refs(&args), &[]);
    assert!(!refused.status.success());
}
