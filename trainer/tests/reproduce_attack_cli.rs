//! `reproduce --preset attack` end to end on the tiny model: block 1's smoke grid trains the
//! victims, the attack block attacks them, resumes an attack from its partial file (a torn last
//! line included), trains a victim again when its run directory is gone, and skips what is done.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use serde_json::Value;

fn read(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

/// The attack summary of `set` against the victim whose cell name starts with `victim`.
fn summary(dir: &Path, set: &str, victim: &str, seed: u64) -> PathBuf {
    let prefix = format!("{set}-{victim}-lr");
    let suffix = format!("-s{seed}.json");
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            name.starts_with(&prefix) && name.ends_with(&suffix)
        })
        .collect();
    assert_eq!(found.len(), 1, "{prefix}*{suffix} in {}: {found:?}", dir.display());
    found.remove(0)
}

#[test]
fn the_attack_block_attacks_block_1s_models_and_resumes() {
    let root = scratch("attack-block");
    let grid = root.join("sst2");
    let rec = "im:T=5,gamma=0.1,grad=detached,step=backtrack";
    ok(trainer(
        &[
            "reproduce",
            "--preset",
            "sst2",
            "--smoke",
            "--model",
            "tests/fixtures/tiny-bert",
            "--connection",
            "bert",
            "--connection",
            rec,
            "--lrs",
            "3e-3,1e-4",
            "--out",
            grid.to_str().unwrap(),
        ],
        &[],
    ));
    let attack_dir = root.join("attack");
    let args = [
        "reproduce",
        "--preset",
        "attack",
        "--smoke",
        "--victims",
        grid.to_str().unwrap(),
        "--out",
        attack_dir.to_str().unwrap(),
    ];
    let first = ok(trainer(&args, &[]));
    // SST-2 dev on seeds 0 and 1, IMDB on seed 0, against both models.
    assert!(first.contains("6 attacks"), "{first}");
    let summaries = attack_dir.join("summaries");
    let rec_cell = "sst2-im_T_5_gamma_0.1_grad_detached_step_backtrack-none";
    for (set, examples, seeds) in [("sst2-dev", 4, &[0, 1][..]), ("imdb", 2, &[0][..])] {
        for victim in ["sst2-bert-none", rec_cell] {
            for &seed in seeds {
                let record = read(&summary(&summaries, set, victim, seed));
                assert_eq!(record["summary"]["total"], examples, "{record}");
                assert_eq!(record["results"].as_array().unwrap().len(), examples);
                assert!(record["retrained"].is_null(), "block 1's own model was attacked");
                assert!(record["victim_dev_accuracy"].as_f64().is_some());
            }
        }
    }
    assert!(!summaries.join("partial").read_dir().unwrap().any(|_| true), "no attack in progress");
    let md = std::fs::read_to_string(attack_dir.join("report/report.md")).unwrap();
    assert!(md.contains("| sst2-dev | ⚠ did not learn: `bert` | 0, 1 | 4 |"), "{md}");
    assert!(md.contains(&format!("| imdb | ⚠ did not learn: `{rec}` | 0 | 2 |")), "{md}");
    let csv = std::fs::read_to_string(attack_dir.join("report/report.csv")).unwrap();
    assert_eq!(csv.lines().count(), 7, "a header and one row per attack:\n{csv}");

    // `trainer report` writes the same tables from the summaries alone.
    let again = root.join("report-again");
    ok(trainer(&["report", summaries.to_str().unwrap(), "--out", again.to_str().unwrap()], &[]));
    assert_eq!(std::fs::read_to_string(again.join("report.md")).unwrap(), md);

    // Everything done: nothing is attacked again.
    let again = ok(trainer(&args, &[]));
    assert_eq!(again.matches(": attack in").count(), 6, "{again}");

    // An attack stopped after two examples, with a torn third line, resumes at the third and
    // comes to the same results.
    let done = summary(&summaries, "sst2-dev", "sst2-bert-none", 0);
    let before = read(&done);
    let partial = summaries.join("partial").join(done.file_name().unwrap()).with_extension("jsonl");
    let mut text = String::new();
    for result in &before["results"].as_array().unwrap()[..2] {
        text.push_str(&serde_json::json!({ "seconds": 0.5, "result": result }).to_string());
        text.push('\n');
    }
    text.push_str("{\"seconds\": 0.5, \"res");
    std::fs::write(&partial, text).unwrap();
    std::fs::remove_file(&done).unwrap();
    let resumed = ok(trainer(&args, &[]));
    assert!(resumed.contains("resuming at example 3 of 4"), "{resumed}");
    let after = read(&done);
    assert_eq!(after["results"], before["results"]);
    assert!(!partial.exists(), "the partial file goes once the summary is written");

    // A partial file from other data is refused, naming its line.
    let foreign = serde_json::json!({ "seconds": 0.5, "result": before["results"][1] });
    std::fs::write(&partial, format!("{foreign}\n")).unwrap();
    std::fs::remove_file(&done).unwrap();
    let refused = trainer(&args, &[]);
    let err = String::from_utf8_lossy(&refused.stderr).into_owned();
    assert!(!refused.status.success() && err.contains(".jsonl:1: example idx"), "{err}");
    std::fs::remove_file(&partial).unwrap();

    // Without its run directory, a victim is trained again from its committed config: the same
    // model (same validation loss), the same attack.
    let cell = summary(&grid.join("summaries"), "sst2", "bert-none", 1);
    let run_dir = grid.join(cell.file_stem().unwrap());
    std::fs::remove_dir_all(&run_dir).unwrap();
    let attacked = summary(&summaries, "sst2-dev", "sst2-bert-none", 1);
    let before = read(&attacked);
    std::fs::remove_file(&attacked).unwrap();
    let retrained = ok(trainer(&args, &[]));
    assert!(retrained.contains("training it again from its committed config"), "{retrained}");
    let after = read(&attacked);
    let check = &after["retrained"];
    assert_eq!(check["committed_val_loss"], check["retrained_val_loss"], "{check}");
    assert_eq!(after["results"], before["results"]);
}
