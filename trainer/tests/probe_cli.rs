//! `trainer probe` end to end on the tiny model: drift per layer and connection, f32 against f64.

use std::path::PathBuf;
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

#[test]
fn probe_measures_drift_per_layer_and_precision() {
    let out = repo().join("target/test-artifacts/trainer/probe");
    let _ = std::fs::remove_dir_all(&out);
    let run = Command::new(env!("CARGO_BIN_EXE_trainer"))
        .args([
            "probe",
            "--model",
            "tests/fixtures/tiny-bert",
            "--connection",
            "bert",
            "--connection",
            "ex",
        ])
        .args(["--connection", "im:T=3,gamma=0.1,step=backtrack"])
        // An unchanged pair (no drift anywhere) and an edited one.
        .args(["--text", "the movie was good", "--perturbed", "the movie was good"])
        .args(["--text", "the movie was good", "--perturbed", "the film was not good"])
        .arg("--out")
        .arg(&out)
        .current_dir(repo())
        .output()
        .unwrap();
    let text =
        format!("{}{}", String::from_utf8_lossy(&run.stdout), String::from_utf8_lossy(&run.stderr));
    assert!(run.status.success(), "{text}");
    assert!(text.contains("Mean [CLS] cosine distance"), "{text}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("probe.json")).unwrap()).unwrap();
    assert_eq!(report["pairs"], 2);
    let connections = report["connections"].as_array().unwrap();
    assert_eq!(connections.len(), 3);
    for c in connections {
        let cls: Vec<f64> = c["cls_cosine_distance"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        let l2: Vec<f64> =
            c["mean_relative_l2"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
        assert_eq!(cls.len(), 3, "embeddings and two layers");
        // Averaged over one unchanged pair and one edited one: positive, and at most half of the
        // largest a single pair could show (cosine distance <= 2).
        assert!(l2[0] > 0.0 && l2.iter().all(|&x| x.is_finite()), "{c}");
        assert!(cls.iter().all(|&x| (0.0..=1.0).contains(&x)), "{c}");
        // f32 and f64 agree on the tiny model (its solve does not amplify rounding much).
        assert!(c["f32_vs_f64"].as_f64().unwrap() < 1e-3, "{c}");
    }
    for f in ["probe.md", "drift_cls.svg", "drift_l2.svg"] {
        assert!(out.join(f).exists(), "{f} missing");
    }

    // Only unchanged pairs: no drift at any layer, for any connection.
    let same = Command::new(env!("CARGO_BIN_EXE_trainer"))
        .args(["probe", "--model", "tests/fixtures/tiny-bert", "--no-f64", "--json"])
        .args(["--text", "a gripping film", "--perturbed", "a gripping film"])
        .current_dir(repo())
        .output()
        .unwrap();
    assert!(same.status.success(), "{}", String::from_utf8_lossy(&same.stderr));
    let report: serde_json::Value = serde_json::from_slice(&same.stdout).unwrap();
    for c in report["connections"].as_array().unwrap() {
        for v in c["cls_cosine_distance"]
            .as_array()
            .unwrap()
            .iter()
            .chain(c["mean_relative_l2"].as_array().unwrap())
        {
            assert!(v.as_f64().unwrap().abs() < 1e-6, "{c}");
        }
    }

    // A --text without its --perturbed is refused.
    let bad = Command::new(env!("CARGO_BIN_EXE_trainer"))
        .args(["probe", "--model", "tests/fixtures/tiny-bert", "--text", "x"])
        .current_dir(repo())
        .output()
        .unwrap();
    assert!(!bad.status.success());
}

/// `--run DIR` probes the run's `best/` weights with the connection it was trained with.
#[test]
fn a_run_is_probed_with_its_own_connection() {
    let root = repo().join("target/test-artifacts/trainer/probe-run");
    let _ = std::fs::remove_dir_all(&root);
    let run_dir = root.join("tiny-im");
    std::fs::create_dir_all(run_dir.join("best")).unwrap();
    for f in std::fs::read_dir(repo().join("tests/fixtures/tiny-bert")).unwrap() {
        let f = f.unwrap().path();
        std::fs::copy(&f, run_dir.join("best").join(f.file_name().unwrap())).unwrap();
    }
    // Weights that differ from --model's: a much larger layer-norm epsilon changes every layer.
    let best_config = run_dir.join("best/config.json");
    let text = std::fs::read_to_string(&best_config)
        .unwrap()
        .replace("\"layer_norm_eps\": 1e-12", "\"layer_norm_eps\": 0.5");
    std::fs::write(&best_config, text).unwrap();
    let config = serde_json::json!({
        "task": "sst2", "model": "tests/fixtures/tiny-bert",
        "connection": "im:T=3,gamma=0.1,grad=frozen",
        "train_file": "x.jsonl", "seed": 0, "epochs": 1, "max_steps": null, "train_samples": null,
        "val_samples": null, "batch_size": 16, "grad_accum": 1, "max_len": 128,
        "optimizer": "adamw",
        "lr": 2e-5, "weight_decay": 0.0, "adam_eps": 1e-8, "adam_beta1": 0.9, "adam_beta2": 0.999,
        "warmup_ratio": 0.1, "shuffle": true, "dropout": null, "adv": "none", "adv_epsilon": 0.1,
        "adv_alpha": 0.1, "adv_steps": 1, "adv_tau": 1.0, "adv_lambda": 0.5, "backend": "ndarray",
        "command": "test"
    });
    std::fs::write(run_dir.join("config.json"), config.to_string()).unwrap();
    let probe = |extra: &[&str]| -> serde_json::Value {
        let out = Command::new(env!("CARGO_BIN_EXE_trainer"))
            .args([
                "probe",
                "--json",
                "--text",
                "the movie was good",
                "--perturbed",
                "the film was not good",
            ])
            .args(extra)
            .current_dir(repo())
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let tiny = ["--model", "tests/fixtures/tiny-bert"];
    let with_run =
        probe(&[&tiny[..], &["--connection", "bert", "--run", run_dir.to_str().unwrap()]].concat());
    let connections = with_run["connections"].as_array().unwrap();
    assert_eq!(connections.len(), 2, "the --connection, then the run");
    assert!(connections[0].get("run").is_none());
    assert_eq!(connections[1]["run"], "tiny-im");
    assert_eq!(connections[1]["connection"], "im:T=3,gamma=0.1,grad=frozen");
    // The run's own weights with its own connection, in f32 and f64: the same numbers as
    // probing `best/` directly with that connection, and not those of --model's weights.
    let spec = ["--connection", "im:T=3,gamma=0.1,grad=frozen"];
    let best = run_dir.join("best");
    let direct = probe(&[&["--model", best.to_str().unwrap()][..], &spec].concat());
    let other_weights = probe(&[&tiny[..], &spec].concat());
    for key in ["cls_cosine_distance", "mean_relative_l2", "f32_vs_f64"] {
        assert_eq!(connections[1][key], direct["connections"][0][key], "{key}");
    }
    assert_ne!(
        connections[1]["mean_relative_l2"],
        other_weights["connections"][0]["mean_relative_l2"]
    );

    // A directory without a run's config.json is an error naming it.
    let bad = Command::new(env!("CARGO_BIN_EXE_trainer"))
        .args(["probe", "--run", "tests/fixtures/tiny-bert", "--text", "a", "--perturbed", "b"])
        .current_dir(repo())
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("tests/fixtures/tiny-bert"));
}
