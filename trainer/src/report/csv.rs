//! `report.csv`: one row per group and evaluation split, accuracies as fractions.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use shared::data::AttackLevel;

use super::stats::{Report, SplitSummary, Stat};

/// The columns of `report.csv` after the group keys.
pub const CSV_COLUMNS: &[&str] = &[
    "split",
    "runs",
    "evaluated",
    "did_not_learn_runs",
    "did_not_learn",
    "clean_acc_mean",
    "clean_acc_std",
    "clean_acc_n",
    "majority_share",
    "advglue_acc_mean",
    "advglue_acc_std",
    "advglue_acc_n",
    "clean_original_acc_mean",
    "clean_original_acc_std",
    "clean_original_acc_n",
    "adversarial_paired_acc_mean",
    "adversarial_paired_acc_std",
    "adversarial_paired_acc_n",
    "drop_mean",
    "drop_std",
    "drop_n",
    "word_acc_mean",
    "word_acc_std",
    "word_acc_n",
    "sentence_acc_mean",
    "sentence_acc_std",
    "sentence_acc_n",
    "human_acc_mean",
    "human_acc_std",
    "human_acc_n",
    "flops_per_example_mean",
    "flops_per_example_std",
    "flops_computed_at_max_len",
    "examples_per_sec_mean",
    "examples_per_sec_std",
    "train_examples_per_sec_mean",
    "train_examples_per_sec_std",
    "final_drift_mean",
    "final_drift_std",
    "final_drift_n",
    "status",
];

/// `report.csv`: one row per group and split (one row with an empty split for a group that has no
/// evaluation); accuracies as fractions, empty cells where a number is missing.
pub fn csv(report: &Report) -> String {
    let mut out = String::new();
    let header: Vec<&str> =
        report.group_by.iter().map(|k| k.name()).chain(CSV_COLUMNS.iter().copied()).collect();
    writeln!(out, "{}", header.join(",")).ok();
    let num = |v: Option<f64>| v.map_or(String::new(), |v| v.to_string());
    let stat = |s: Option<Stat>| {
        [
            num(s.map(|s| s.mean)),
            num(s.and_then(|s| s.std)),
            s.map_or(String::new(), |s| s.n.to_string()),
        ]
    };
    for g in &report.groups {
        let empty = SplitSummary {
            split: String::new(),
            clean: None,
            majority: None,
            sampled_from: None,
            held_out: None,
            adversarial: None,
            clean_original: None,
            adversarial_paired: None,
            drop: None,
            levels: BTreeMap::new(),
        };
        let splits: Vec<&SplitSummary> =
            if g.splits.is_empty() { vec![&empty] } else { g.splits.iter().collect() };
        for s in splits {
            let mut row: Vec<String> = g.values.clone();
            row.extend([
                s.split.clone(),
                g.runs.len().to_string(),
                g.evaluated.to_string(),
                g.did_not_learn.to_string(),
                g.flagged().to_string(),
            ]);
            row.extend(stat(s.clean));
            row.push(num(s.majority.map(|m| m.mean)));
            for st in [s.adversarial, s.clean_original, s.adversarial_paired, s.drop] {
                row.extend(stat(st));
            }
            for level in AttackLevel::ALL {
                row.extend(stat(s.levels.get(level.name()).copied()));
            }
            row.extend([
                num(g.flops.map(|f| f.mean)),
                num(g.flops.and_then(|f| f.std)),
                g.flops_computed.to_string(),
            ]);
            row.extend([
                num(g.examples_per_sec.map(|f| f.mean)),
                num(g.examples_per_sec.and_then(|f| f.std)),
                num(g.train_examples_per_sec.map(|f| f.mean)),
                num(g.train_examples_per_sec.and_then(|f| f.std)),
            ]);
            row.extend(stat(g.final_drift()));
            row.push(g.status());
            writeln!(out, "{}", row.iter().map(|c| csv_field(c)).collect::<Vec<_>>().join(","))
                .ok();
        }
    }
    out
}

/// RFC 4180 quoting: connection specs contain commas.
fn csv_field(text: &str) -> String {
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_string()
    }
}
