//! `trainer speed` on the tiny model: every arm of the T sweep timed between two BERT rows, the
//! trained model of an arm picked up from its committed learning-rate search, and the grid's
//! report showing the measurement.

mod common;

use common::{ok, scratch, tiny_finetune, trainer};

#[test]
fn speed_times_every_arm_beside_bert_and_the_report_shows_it() {
    let root = scratch("speed");
    let (results, runs) = (root.join("results"), root.join("runs"));
    // T = 1's line has a search on record that chose 3e-3; the others are found at the grid's
    // last rate, 1e-4. Each arm's seed-0 best model is on the machine (the tiny model itself).
    let t1 = "sst2-im_T_1_gamma_0.1_grad_detached_step_backtrack-none";
    let search = results.join("t-sweep/lr-search");
    std::fs::create_dir_all(&search).unwrap();
    std::fs::write(
        search.join(format!("{t1}-s0.search.json")),
        r#"{"trials": [], "chosen_lr": 0.003}"#,
    )
    .unwrap();
    let mut trained =
        vec![format!("sst2/sst2-bert-none-lr1e-4-s0"), format!("t-sweep/{t1}-lr3e-3-s0")];
    for t in [5, 10, 15] {
        let name = format!("sst2-im_T_{t}_gamma_0.1_grad_detached_step_backtrack-none-lr1e-4-s0");
        trained.push(format!("t-sweep/{name}"));
    }
    for run in &trained {
        let best = runs.join(run).join("best");
        std::fs::create_dir_all(&best).unwrap();
        for file in ["config.json", "model.safetensors", "vocab.txt"] {
            let from = common::repo().join("tests/fixtures/tiny-bert").join(file);
            std::fs::copy(from, best.join(file)).unwrap();
        }
    }
    let out = results.join("t-sweep/speed.json");
    let args = [
        "speed",
        "--preset",
        "t-sweep",
        "--smoke",
        "--model",
        "tests/fixtures/tiny-bert",
        "--train-steps",
        "1",
        "--eval-examples",
        "8",
        "--eval-batch-size",
        "4",
        "--min-seconds",
        "0.3",
        "--results",
        results.to_str().unwrap(),
        "--runs",
        runs.to_str().unwrap(),
    ];
    let printed = ok(trainer(&args, &[]));
    assert!(printed.contains("| train ex/s | × BERT |"), "{printed}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let arms = report["arms"].as_array().unwrap();
    let connections: Vec<&str> = arms.iter().map(|a| a["connection"].as_str().unwrap()).collect();
    let sweep = |t| format!("im:T={t},gamma=0.1,grad=detached,step=backtrack");
    let expected = ["bert".to_string(), sweep(1), sweep(5), sweep(10), sweep(15), "bert".into()];
    assert_eq!(connections, expected, "BERT first and last, the sweep between");
    for arm in arms {
        for key in ["train_examples_per_sec", "eval_examples_per_sec", "train_mean_tokens"] {
            let v = arm[key].as_f64().unwrap();
            assert!(v.is_finite() && v > 0.0, "{key} of {arm}");
        }
    }
    // BERT's tiny steps take milliseconds: more steps and passes fill the 0.3 s.
    assert!(arms[0]["train_steps"].as_u64() > Some(1), "{}", arms[0]);
    assert!(arms[0]["eval_passes"].as_u64() > Some(1), "{}", arms[0]);
    let flops: Vec<f64> = arms[1..5].iter().map(|a| a["forward_flops"].as_f64().unwrap()).collect();
    assert!(flops.windows(2).all(|w| w[1] > w[0]), "FLOPs grow with T: {flops:?}");
    let weights: Vec<&str> = arms.iter().map(|a| a["eval_weights"].as_str().unwrap()).collect();
    for (weights, run) in weights.iter().zip(trained.iter().chain([&trained[0]])) {
        assert!(weights.ends_with(&format!("{run}/best")), "{weights} is not {run}");
    }
    assert_eq!(report["train_steps"], 1);
    assert_eq!(report["train_batch_size"], 16);

    // Without T = 15's model, every arm predicts with the warm start.
    std::fs::remove_dir_all(runs.join(&trained[4])).unwrap();
    let printed = ok(trainer(&args, &[]));
    assert!(printed.contains("every arm predicts with the warm start"), "{printed}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let arms = report["arms"].as_array().unwrap();
    assert!(arms.iter().all(|a| a["eval_weights"] == "warm start"), "{arms:?}");

    // The grid's report finds the measurement beside the runs.
    let run = root.join("grid/sst2-tiny");
    ok(trainer(&tiny_finetune(&run, &[]).iter().map(String::as_str).collect::<Vec<_>>(), &[]));
    std::fs::copy(&out, root.join("grid/speed.json")).unwrap();
    let report_dir = root.join("report");
    ok(trainer(
        &["report", root.join("grid").to_str().unwrap(), "--out", report_dir.to_str().unwrap()],
        &[],
    ));
    let md = std::fs::read_to_string(report_dir.join("report.md")).unwrap();
    assert!(md.contains("## Throughput, measured idle"), "{md}");
    assert!(md.contains(&format!("| sst2 | `{}` | none |", sweep(15))), "{md}");
    let json = std::fs::read_to_string(report_dir.join("report.json")).unwrap();
    assert!(json.contains("\"speed\": {"), "report.json carries the measurement");
}
