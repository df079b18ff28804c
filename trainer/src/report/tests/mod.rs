//! The report's tests on a fixture of run directories and summaries: loading, grouping, the
//! tables and CSV here; the plots in `plots`.

mod plots;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use shared::{BertConfig, ConnectionSpec};

use super::charts::CLEAN_LABEL;
use super::*;
use crate::run::{
    write_json, AdvResult, CleanResult, EvalReport, ImResidualCheck, LevelResult, RunConfig, Score,
    IM_RESIDUALS_FILE,
};

fn run_config(task: &str, connection: &str, seed: u64) -> RunConfig {
    RunConfig {
        task: task.parse().unwrap(),
        model: "models/none".into(),
        connection: ConnectionSpec::parse(connection).unwrap(),
        train_file: "train.tsv".into(),
        seed,
        epochs: 3,
        max_steps: None,
        train_samples: None,
        val_samples: None,
        batch_size: 32,
        grad_accum: 1,
        max_len: 16,
        optimizer: crate::run::OptimizerKind::Adamw,
        lr: 2e-5,
        weight_decay: 0.01,
        adam_eps: 1e-8,
        adam_beta1: 0.9,
        adam_beta2: 0.999,
        warmup_ratio: 0.1,
        max_grad_norm: None,
        shuffle: true,
        dropout: None,
        adv: crate::run::AdvKind::None,
        adv_epsilon: 0.0,
        adv_alpha: 0.0,
        adv_steps: 0,
        adv_tau: 0.0,
        adv_lambda: 0.0,
        backend: crate::backend::BackendKind::Ndarray,
        command: "trainer finetune".into(),
        save_final: false,
        started_in: None,
    }
}

fn score(accuracy: f64) -> Score {
    Score { n: 100, accuracy, f1: None }
}

/// One split's results: clean, AdvGLUE, clean originals, paired adversarial, word level.
struct Split {
    name: &'static str,
    clean: f64,
    adv: f64,
    original: f64,
    paired: f64,
    word: f64,
}

fn eval(config: &RunConfig, splits: &[Split], did_not_learn: bool) -> EvalReport {
    EvalReport {
        task: config.task.to_string(),
        model: "best".into(),
        connection: config.connection.to_spec_string(),
        clean: splits
            .iter()
            .map(|s| CleanResult {
                split: s.name.into(),
                score: score(s.clean),
                majority_share: 0.5,
                top_prediction_share: 0.5,
                sampled_from: None,
                held_out: None,
            })
            .collect(),
        advglue: splits
            .iter()
            .map(|s| AdvResult {
                split: s.name.into(),
                adversarial: score(s.adv),
                clean_original: score(s.original),
                adversarial_paired: score(s.paired),
                top_prediction_share: 0.5,
                by_level: [(
                    "word".to_string(),
                    LevelResult { adversarial: score(s.word), clean_original: None },
                )]
                .into(),
                by_method: BTreeMap::new(),
            })
            .collect(),
        did_not_learn,
        did_not_learn_reason: did_not_learn
            .then(|| "clean accuracy 51.0% is at chance".to_string()),
        flops_per_example: 1.5e9,
        examples_per_sec: 100.0 + config.seed as f64,
    }
}

fn sst2(clean: f64, adv: f64) -> Split {
    Split { name: "sst2", clean, adv, original: clean, paired: adv - 0.05, word: adv - 0.1 }
}

fn write_run(root: &Path, name: &str, config: &RunConfig, eval: Option<&EvalReport>) -> PathBuf {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    write_json(&dir.join("config.json"), config).unwrap();
    if let Some(e) = eval {
        write_json(&dir.join("eval.json"), e).unwrap();
    }
    dir
}

/// Three BERT seeds, two IM seeds (one of which did not learn), one IM run not evaluated,
/// an MNLI run, and a pretrained model folder that must not count as a run.
fn fixture(root: &Path) {
    for (seed, (clean, adv)) in [(1, (0.90, 0.40)), (2, (0.92, 0.42)), (3, (0.94, 0.44))] {
        let c = run_config("sst2", "bert", seed);
        write_run(
            root,
            &format!("sst2/bert-{seed}"),
            &c,
            Some(&eval(&c, &[sst2(clean, adv)], false)),
        );
    }
    let c = run_config("sst2", "im:gamma=0.1,T=5", 1);
    write_run(root, "sst2/im5-1", &c, Some(&eval(&c, &[sst2(0.91, 0.56)], false)));
    let c = run_config("sst2", "im:T=5,gamma=0.1", 2);
    write_run(root, "sst2/im5-2", &c, Some(&eval(&c, &[sst2(0.51, 0.60)], true)));
    let c = run_config("sst2", "im:T=2,gamma=0.1", 1);
    let dir = write_run(root, "sst2/im2-1", &c, Some(&eval(&c, &[sst2(0.90, 0.50)], false)));
    let layer = |layer, squared_norms: Vec<f64>, rises_after_iteration| {
        crate::run::LayerResidualCheck { layer, gamma: 0.1, squared_norms, rises_after_iteration }
    };
    let check = ImResidualCheck {
        examples: 16,
        layers: vec![layer(0, vec![9.0, 5.0, 4.0], vec![]), layer(1, vec![3.0, 7.0, 6.0], vec![1])],
    };
    write_json(&dir.join(IM_RESIDUALS_FILE), &check).unwrap();
    let c = run_config("sst2", "im:T=3,gamma=0.1,layers=0-0", 1);
    write_run(root, "sst2/im3-pending", &c, None);
    let c = run_config("mnli", "bert", 1);
    let m = Split { name: "mnli", clean: 0.84, adv: 0.30, original: 0.8, paired: 0.3, word: 0.2 };
    let mm =
        Split { name: "mnli-mm", clean: 0.85, adv: 0.31, original: 0.8, paired: 0.31, word: 0.21 };
    write_run(root, "mnli/bert-1", &c, Some(&eval(&c, &[m, mm], false)));
    let model = root.join("models/bert-tiny");
    std::fs::create_dir_all(&model).unwrap();
    std::fs::write(model.join("config.json"), serde_json::to_string(&BertConfig::tiny()).unwrap())
        .unwrap();
}

fn default_report(root: &Path) -> Report {
    let runs = load_runs(&[root.to_path_buf()]).unwrap();
    summarise(runs, &[GroupKey::Task, GroupKey::Connection])
}

fn group<'a>(report: &'a Report, task: &str, connection: &str) -> &'a GroupSummary {
    report
        .groups
        .iter()
        .find(|g| g.task.as_deref() == Some(task) && g.connection.as_deref() == Some(connection))
        .unwrap_or_else(|| panic!("no group {task} {connection}"))
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-12
}

#[test]
fn mean_and_sample_std() {
    let s = Stat::of(&[0.8, 0.9, 1.0]).unwrap();
    assert!(close(s.mean, 0.9) && close(s.std.unwrap(), 0.1) && s.n == 3, "{s:?}");
    let one = Stat::of(&[0.7]).unwrap();
    assert_eq!((one.std, one.n), (None, 1));
    assert!(Stat::of(&[]).is_none());
}

#[test]
fn finds_runs_and_skips_model_folders() {
    let tmp = tempfile::tempdir().unwrap();
    fixture(tmp.path());
    // A run's own best/ holds an HF config: neither it nor models/ are runs.
    let best = tmp.path().join("sst2/bert-1/best");
    std::fs::create_dir_all(&best).unwrap();
    std::fs::write(best.join("config.json"), serde_json::to_string(&BertConfig::tiny()).unwrap())
        .unwrap();
    let dirs = find_run_dirs(tmp.path()).unwrap();
    assert_eq!(dirs.len(), 8, "{dirs:?}");
    assert!(dirs.iter().all(|d| !d.starts_with(tmp.path().join("models"))));
    assert!(load_runs(&[tmp.path().join("models")]).is_err(), "a folder without runs is an error");
    assert!(load_runs(&[tmp.path().join("missing")]).is_err());
}

#[test]
fn groups_across_seeds_with_mean_and_std() {
    let tmp = tempfile::tempdir().unwrap();
    fixture(tmp.path());
    let report = default_report(tmp.path());
    // sst2: bert, im T=2, im T=3 (layers 0-0), im T=5 (two spellings, one group); mnli: bert.
    assert_eq!(
        report.groups.len(),
        5,
        "{:?}",
        report.groups.iter().map(|g| &g.values).collect::<Vec<_>>()
    );
    let bert = group(&report, "sst2", "bert");
    assert_eq!((bert.runs.len(), bert.evaluated, bert.did_not_learn), (3, 3, 0));
    let s = bert.split("sst2").unwrap();
    let clean = s.clean.unwrap();
    assert!(close(clean.mean, 0.92) && close(clean.std.unwrap(), 0.02), "{clean:?}");
    assert!(close(s.adversarial.unwrap().mean, 0.42));
    // drop = clean original - paired adversarial = clean - (adv - 0.05) per run.
    assert!(close(s.drop.unwrap().mean, 0.92 - 0.37), "{:?}", s.drop);
    assert!(close(s.levels["word"].mean, 0.32));
    assert!(close(bert.examples_per_sec.unwrap().mean, 102.0));
    assert!(close(bert.flops.unwrap().mean, 1.5e9));

    let im5 = group(&report, "sst2", "im:T=5,gamma=0.1");
    assert_eq!((im5.runs.len(), im5.did_not_learn), (2, 1));
    assert!(im5.flagged());
    // Order: bert before im by T.
    let order: Vec<_> = report.groups.iter().map(|g| g.connection.clone().unwrap()).collect();
    assert_eq!(
        order[..4],
        ["bert", "im:T=2,gamma=0.1", "im:T=3,gamma=0.1,layers=0-0", "im:T=5,gamma=0.1"]
    );

    // MNLI keeps matched and mismatched apart.
    let mnli = group(&report, "mnli", "bert");
    let names: Vec<_> = mnli.splits.iter().map(|s| s.split.as_str()).collect();
    assert_eq!(names, ["mnli", "mnli-mm"]);

    // Grouping by task alone pools every sst2 run.
    let by_task = summarise(load_runs(&[tmp.path().to_path_buf()]).unwrap(), &[GroupKey::Task]);
    assert_eq!(by_task.groups.len(), 2);
    assert_eq!(by_task.groups[0].runs.len(), 7);
    assert_eq!(by_task.groups[0].connection, None);
}

#[test]
fn markdown_flags_did_not_learn_beside_clean_accuracy() {
    let tmp = tempfile::tempdir().unwrap();
    fixture(tmp.path());
    let report = default_report(tmp.path());
    let md = markdown(&report, &[]);
    println!("{md}");
    assert!(md.contains("⚠ did not learn (1/2)"), "group flag missing");
    let run_flag = "⚠ did not learn: clean accuracy 51.0% is at chance";
    assert!(md.contains(run_flag), "run flag missing");
    assert!(md.contains("not evaluated"));
    // A run whose IM residual rose before training says which layer overshot.
    let im2_run = md.lines().find(|l| l.contains("im2-1 |")).expect("im2-1 run row");
    assert!(im2_run.ends_with("| ok; ⚠ IM residual rose at the start in layer 1 |"), "{im2_run}");
    let im5_run = md.lines().find(|l| l.contains("im5-1 |")).expect("im5-1 run row");
    assert!(im5_run.ends_with("| ok |"), "{im5_run}");
    assert!(md.contains("\"IM residual rose\": before training"), "the flag is explained");
    // Every table row with an AdvGLUE number also shows a clean accuracy.
    let im5_row =
        md.lines().find(|l| l.contains("| im:T=5,gamma=0.1 | sst2 |")).expect("im T=5 row");
    assert!(im5_row.contains("71.0 ± 28.3"), "clean mean ± std beside robustness: {im5_row}");
    assert!(im5_row.contains("⚠ 58.0 ± 2.8"), "flagged AdvGLUE cell: {im5_row}");
    let bert_row = md.lines().find(|l| l.starts_with("| sst2 | bert | sst2 |")).expect("bert row");
    assert!(
        bert_row.contains("92.0 ± 2.0")
            && bert_row.contains("42.0 ± 2.0")
            && !bert_row.contains('⚠'),
        "{bert_row}"
    );
    // The by-task table puts clean accuracy in parentheses and averages the tasks.
    let pivot = md.lines().find(|l| l.starts_with("| bert |")).expect("pivot row");
    assert!(
        pivot.contains("42.0 ± 2.0 (92.0 ± 2.0)")
            && pivot.contains("30.0 (84.0)")
            && pivot.contains("31.0 (85.0)"),
        "{pivot}"
    );
    let avg = (42.0 + 30.0 + 31.0) / 3.0;
    assert!(pivot.ends_with(&format!("{avg:.1} ({:.1}) |", (92.0 + 84.0 + 85.0) / 3.0)), "{pivot}");
}

#[test]
fn csv_has_one_row_per_group_and_split() {
    let tmp = tempfile::tempdir().unwrap();
    fixture(tmp.path());
    let report = default_report(tmp.path());
    let text = csv(&report);
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let mut expected = vec!["task", "connection"];
    expected.extend(CSV_COLUMNS);
    assert_eq!(header, expected);
    let rows: Vec<&str> = lines.collect();
    // sst2: 4 groups x 1 split (the unevaluated group gets an empty split); mnli: 2 splits.
    assert_eq!(rows.len(), 6, "{text}");
    let im5 = rows
        .iter()
        .find(|r| r.starts_with("sst2,\"im:T=5,gamma=0.1\",sst2,"))
        .expect("quoted spec");
    assert!(im5.contains(",2,2,1,true,"), "{im5}");
    let pending = rows.iter().find(|r| r.contains("layers=0-0")).unwrap();
    assert!(pending.ends_with(",not evaluated"), "{pending}");
    // Same number of fields in every row (the quoted spec holds commas).
    let fields = |r: &str| {
        r.replace("\"im:T=5,gamma=0.1\"", "x")
            .replace("\"im:T=2,gamma=0.1\"", "x")
            .replace("\"im:T=3,gamma=0.1,layers=0-0\"", "x")
            .split(',')
            .count()
    };
    assert!(rows.iter().all(|r| fields(r) == header.len()), "{text}");
}

#[test]
fn flops_are_computed_when_not_evaluated() {
    let tmp = tempfile::tempdir().unwrap();
    let mut c = run_config("sst2", "im:T=3,layers=1-1", 1);
    let model = tmp.path().join("models/tiny");
    std::fs::create_dir_all(&model).unwrap();
    std::fs::write(model.join("config.json"), serde_json::to_string(&BertConfig::tiny()).unwrap())
        .unwrap();
    c.model = model.display().to_string();
    let dir = write_run(tmp.path(), "runs/a", &c, None);
    let run = load_run(&dir).unwrap();
    let tiny = BertConfig::tiny();
    let conns = ConnectionSpec::parse("im:T=3,layers=1-1").unwrap().per_layer(2).unwrap();
    assert_eq!(
        run.flops,
        Some(shared::model::flops::forward_flops(&tiny, &conns, c.max_len, true))
    );
    assert_eq!(run.flops_source, FlopsSource::ComputedAtMaxLen);
    let report = summarise(vec![run], &[GroupKey::Task, GroupKey::Connection]);
    assert!(markdown(&report, &[]).contains("computed from the run's config at `max_len`"));
}

/// A clean split that is not GLUE dev (QQP's held-out training pairs) is marked ‡ and named.
#[test]
fn a_held_out_clean_split_is_marked_in_the_table() {
    let tmp = tempfile::tempdir().unwrap();
    fixture(tmp.path());
    let c = run_config("qqp", "bert", 1);
    let mut e = eval(&c, &[], false);
    e.clean = vec![CleanResult {
        split: "qqp".into(),
        score: score(0.8),
        majority_share: 0.62,
        top_prediction_share: 0.6,
        sampled_from: None,
        held_out: Some("held-out GLUE train pairs".into()),
    }];
    write_run(tmp.path(), "qqp/bert-1", &c, Some(&e));
    let report = default_report(tmp.path());
    let split = group(&report, "qqp", "bert").split("qqp").unwrap();
    assert_eq!(split.held_out.as_deref(), Some("held-out GLUE train pairs"));
    let md = markdown(&report, &[]);
    assert!(md.contains("| 80.0 ‡ | 62.0 |"), "{md}");
    assert!(md.contains("‡ clean accuracy and majority share, not on GLUE dev: qqp: held-out"));
    assert!(!md.contains("| 90.0 ± 2.0 ‡"), "GLUE dev splits stay unmarked: {md}");
}

#[test]
fn command_line_defaults_and_group_keys() {
    use clap::Parser;
    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: ReportArgs,
    }
    let cli = Cli::try_parse_from(["report", "runs/"]).unwrap();
    assert_eq!(cli.args.group_by, [GroupKey::Task, GroupKey::Connection]);
    assert_eq!(cli.args.out, PathBuf::from("report"));
    let cli = Cli::try_parse_from([
        "report",
        "a",
        "b",
        "--group-by",
        "task,adv,train-samples",
        "--out",
        "o",
    ])
    .unwrap();
    assert_eq!(cli.args.runs.len(), 2);
    assert_eq!(cli.args.group_by, [GroupKey::Task, GroupKey::Adv, GroupKey::TrainSamples]);
    assert!(Cli::try_parse_from(["report"]).is_err(), "a run directory is required");
    assert!(Cli::try_parse_from(["report", "a", "--group-by", "seed"]).is_err());
}

/// A committed summary (`reproduce`'s results/runs/<grid>/<cell>.json) is a run like a run
/// directory: its probe gives the drift column and plot, its clean results the majority share
/// and the sample footnote; the learning-rate trials in lr-search/ are not the grid's cells.
#[test]
fn summaries_are_runs_with_their_drift_majority_and_clean_sample() {
    let tmp = tempfile::tempdir().unwrap();
    let grid = tmp.path().join("results/runs/sst2");
    let summary = |seed: u64, final_drift: f64| {
        let config = run_config("mnli", "bert", seed);
        let mut eval = eval(&config, &[sst2(0.80, 0.40)], false);
        eval.clean[0].split = "mnli".into();
        eval.advglue[0].split = "mnli".into();
        eval.clean[0].majority_share = 0.354;
        eval.clean[0].sampled_from = Some(9815);
        let probe = crate::probe::ProbeReport {
            model: "models/all-minilm-l6-v2".into(),
            source: "AdvGLUE".into(),
            pairs: 131,
            connections: vec![crate::probe::ConnectionDrift {
                connection: "bert".into(),
                run: Some(format!("cell-s{seed}")),
                cls_cosine_distance: vec![0.0, 0.01, final_drift],
                mean_relative_l2: vec![0.0, 0.02, 0.03],
                f32_vs_f64: Some(1e-6),
            }],
        };
        crate::run::RunSummary {
            name: format!("mnli-bert-none-s{seed}"),
            config,
            metrics: vec![crate::run::EpochMetrics {
                epoch: 1,
                step: 63,
                train_loss: 0.5,
                val_loss: 0.4,
                val_accuracy: 0.8,
                val_majority_share: None,
                val_top_prediction_share: None,
                lr: 1e-4,
                examples_per_sec: 10.0 + seed as f64,
                elapsed_s: 60.0,
                best: true,
                grad_norms: None,
            }],
            train_seconds: 60.0,
            im_residuals: None,
            eval: serde_json::to_value(eval).unwrap(),
            probe: Some(probe),
        }
    };
    std::fs::create_dir_all(grid.join("lr-search")).unwrap();
    write_json(&grid.join("mnli-bert-none-s0.json"), &summary(0, 0.10)).unwrap();
    write_json(&grid.join("mnli-bert-none-s1.json"), &summary(1, 0.20)).unwrap();
    write_json(&grid.join("lr-search/mnli-bert-none-lr2e-5-s0.json"), &summary(0, 0.9)).unwrap();
    write_json(&grid.join("lr-search/mnli-bert-none-s0.search.json"), &"not a run").unwrap();

    let runs = load_runs(std::slice::from_ref(&grid)).unwrap();
    assert_eq!(runs.len(), 2, "the trials in lr-search/ are not cells");
    assert_eq!(runs[0].flops_source, FlopsSource::Eval);
    let one = load_runs(&[grid.join("mnli-bert-none-s1.json")]).unwrap();
    assert_eq!(one.len(), 1, "a summary file by name");
    let report = summarise(runs, &[GroupKey::Task, GroupKey::Connection]);
    let g = group(&report, "mnli", "bert");
    assert!(close(g.final_drift().unwrap().mean, 0.15), "{:?}", g.drift_by_layer);
    assert!(close(g.train_examples_per_sec.unwrap().mean, 10.5));
    assert_eq!(g.drift_by_layer.len(), 3);
    let split = g.split("mnli").unwrap();
    assert_eq!((split.majority.map(|m| m.mean), split.sampled_from), (Some(0.354), Some(9815)));
    let md = markdown(&report, &[]);
    assert!(md.contains("| 80.0 ± 0.0 † | 35.4 |"), "{md}");
    assert!(md.contains("mnli of 9815"), "{md}");
    assert!(md.contains("| 0.150 ± 0.071 |"), "the drift column: {md}");
    assert!(md.contains("mnli (majority 35.4)"), "{md}");
    let table = csv(&report);
    let header: Vec<&str> = table.lines().next().unwrap().split(',').collect();
    let row: Vec<&str> = table.lines().nth(1).unwrap().split(',').collect();
    let at = |name: &str| row[header.iter().position(|h| *h == name).unwrap()];
    assert_eq!((at("majority_share"), at("final_drift_n")), ("0.354", "2"));
    let charts = charts(&report);
    assert!(charts.iter().any(|(stem, _)| stem == "drift_by_layer"), "the drift plot");
}
