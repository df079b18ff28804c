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
        .args(["probe", "--model", "tests/fixtures/tiny-bert", "--connection", "bert", "--connection", "ex"])
        .args(["--connection", "im:T=3,gamma=0.1,step=backtrack"])
        // An unchanged pair (no drift anywhere) and an edited one.
        .args(["--text", "the movie was good", "--perturbed", "the movie was good"])
        .args(["--text", "the movie was good", "--perturbed", "the film was not good"])
        .arg("--out")
        .arg(&out)
        .current_dir(repo())
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&run.stdout), String::from_utf8_lossy(&run.stderr));
    assert!(run.status.success(), "{text}");
    assert!(text.contains("Mean [CLS] cosine distance"), "{text}");
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out.join("probe.json")).unwrap()).unwrap();
    assert_eq!(report["pairs"], 2);
    let connections = report["connections"].as_array().unwrap();
    assert_eq!(connections.len(), 3);
    for c in connections {
        let cls: Vec<f64> = c["cls_cosine_distance"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
        let l2: Vec<f64> = c["mean_relative_l2"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
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
        for v in c["cls_cosine_distance"].as_array().unwrap().iter().chain(c["mean_relative_l2"].as_array().unwrap()) {
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
