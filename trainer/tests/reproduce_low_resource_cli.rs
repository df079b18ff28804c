//! `reproduce --preset low-resource` (block 3) at smoke budgets on the tiny model and the
//! committed data sample: the pair tasks' whole path, MNLI's matched and mismatched splits, and
//! QQP's clean accuracy on its held-out training pairs (the data has no QQP dev file).

mod common;

use std::path::Path;

use common::{ok, scratch, trainer};

fn read(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

fn names(list: &serde_json::Value) -> Vec<&str> {
    list.as_array().unwrap().iter().map(|s| s["split"].as_str().unwrap()).collect()
}

#[test]
fn the_pair_task_grid_reports_clean_accuracy_beside_advglue() {
    let grid = scratch("low-resource-smoke");
    let out = ok(trainer(
        &[
            "reproduce",
            "--preset",
            "low-resource",
            "--smoke",
            "--model",
            "tests/fixtures/tiny-bert",
            "--out",
            grid.to_str().unwrap(),
        ],
        &[],
    ));
    assert!(out.contains("36 cells (4 tasks x 3 arms x 2 seeds"), "{out}");

    let summaries = grid.join("summaries");
    let cell = |task: &str, arm: &str| -> serde_json::Value {
        let prefix = format!("{task}-{arm}-none-");
        let path = std::fs::read_dir(&summaries)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| {
                let name = p.file_name().unwrap().to_string_lossy();
                name.starts_with(&prefix) && name.ends_with("-s1.json")
            })
            .unwrap_or_else(|| panic!("no seed-1 summary {prefix}*"));
        read(&path)
    };
    for task in ["qnli", "qqp", "mnli", "rte"] {
        for arm in ["bert", "ex", "im_T_5_gamma_0.1_grad_detached_step_backtrack"] {
            let eval = &cell(task, arm)["eval"];
            let (clean, adv) = (names(&eval["clean"]), names(&eval["advglue"]));
            let expected = if task == "mnli" { vec!["mnli", "mnli-mm"] } else { vec![task] };
            assert_eq!((&clean, &adv), (&expected, &expected), "{task} {arm}");
            for c in eval["clean"].as_array().unwrap() {
                assert!(c["majority_share"].as_f64().unwrap() > 0.3, "{task}: {c}");
                assert_eq!(c["held_out"].is_string(), task == "qqp", "{task}: {c}");
            }
        }
    }
    let qqp = &cell("qqp", "bert")["eval"]["clean"][0];
    assert!(qqp["held_out"].as_str().unwrap().contains("qqp_train_subset_b"), "{qqp}");

    let md = std::fs::read_to_string(grid.join("report/report.md")).unwrap();
    assert!(md.contains("‡ clean accuracy and majority share, not on GLUE dev: qqp: held-out"));
    let report = read(&grid.join("report/report.json"));
    assert_eq!(report["runs"].as_array().unwrap().len(), 24, "the grid's cells, not its trials");
}
