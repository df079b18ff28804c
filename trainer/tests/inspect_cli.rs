//! `trainer inspect` on the tiny model: the IM solve's residuals and the steps it actually took.

use std::path::PathBuf;
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

const SENTENCES: [&str; 2] = ["the movie was good", "a dull and lifeless plot"];

fn inspect(connection: &str, json: bool) -> String {
    inspect_texts(connection, json, &SENTENCES)
}

fn inspect_texts(connection: &str, json: bool, texts: &[&str]) -> String {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_trainer"));
    cmd.args(["inspect", "--model", "tests/fixtures/tiny-bert", "--connection", connection]);
    for text in texts {
        cmd.args(["--text", text]);
    }
    if json {
        cmd.arg("--json");
    }
    let out = cmd.current_dir(repo()).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

fn layers(report: &serde_json::Value, item: usize) -> Vec<serde_json::Value> {
    report["items"][item]["im_residuals"].as_array().unwrap().clone()
}

fn floats(v: &serde_json::Value) -> Vec<f64> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect()
}

#[test]
fn backtracking_reports_the_steps_it_took_and_never_raises_the_residual() {
    // At gamma 5 the fixed step overshoots on the tiny model; backtracking halves it.
    let gamma = 5.0;
    let report: serde_json::Value =
        serde_json::from_str(&inspect("im:T=3,gamma=5,step=backtrack", true)).unwrap();
    let mut halved = 0;
    for item in 0..2 {
        let layers = layers(&report, item);
        assert!(!layers.is_empty());
        for layer in layers {
            let norms = floats(&layer["squared_norms"]);
            let steps = floats(&layer["step_sizes"]);
            assert_eq!(steps.len(), 3, "one step per iteration: {layer}");
            assert!(norms.windows(2).all(|w| w[1] <= w[0]), "the residual rose: {layer}");
            for s in steps {
                // gamma / 2^k for k <= 5 halvings, or 0 (no step found).
                assert!(
                    s == 0.0 || (0..=5).any(|k| (s - gamma / f64::from(1 << k)).abs() < 1e-6),
                    "{s}"
                );
                halved += usize::from(s < gamma);
            }
        }
    }
    assert!(halved > 0, "gamma 5 should need a smaller step somewhere");
    // Each example's steps are its own: the second sentence alone takes the steps it took in the
    // batch (the first sentence is shorter, so its padding must not matter either).
    let alone: serde_json::Value = serde_json::from_str(&inspect_texts(
        "im:T=3,gamma=5,step=backtrack",
        true,
        &SENTENCES[1..],
    ))
    .unwrap();
    for (batched, alone) in layers(&report, 1).iter().zip(layers(&alone, 0)) {
        assert_eq!(
            floats(&batched["step_sizes"]),
            floats(&alone["step_sizes"]),
            "layer {}",
            alone["layer"]
        );
    }
    assert!(inspect("im:T=3,gamma=5,step=backtrack", false).contains("steps taken: "));

    // The paper's fixed step: gamma every time, and the text output does not repeat it.
    let fixed: serde_json::Value = serde_json::from_str(&inspect("im:T=3,gamma=5", true)).unwrap();
    for layer in layers(&fixed, 0) {
        assert_eq!(floats(&layer["step_sizes"]), vec![gamma; 3]);
        assert!(
            !layer["rises_after_iteration"].as_array().unwrap().is_empty(),
            "gamma 5 overshoots: {layer}"
        );
    }
    assert!(!inspect("im:T=3,gamma=5", false).contains("steps taken"));
}
