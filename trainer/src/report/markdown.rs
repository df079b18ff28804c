//! `report.md`: the tables, clean accuracy beside every robustness number.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use shared::data::AttackLevel;

use super::stats::{split_order, GroupSummary, Report, Stat};
use super::GroupKey;
use crate::run::ImResidualCheck;

/// `"91.2 ± 0.4"` in percent; `(n=k)` when fewer runs than the group's evaluated ones had it.
fn pct(stat: Option<Stat>, expected_n: usize) -> String {
    let Some(s) = stat.map(|s| s.scaled(100.0)) else { return "–".into() };
    let mut text = match s.std {
        Some(std) => format!("{:.1} ± {:.1}", s.mean, std),
        None => format!("{:.1}", s.mean),
    };
    if s.n != expected_n {
        write!(text, " (n={})", s.n).ok();
    }
    text
}

/// `"12.3 ± 0.4"` of `stat` times `scale`; `–` when there is none.
pub(crate) fn plain(stat: Option<Stat>, scale: f64, decimals: usize) -> String {
    match stat.map(|s| s.scaled(scale)) {
        Some(Stat { mean, std: Some(std), .. }) => format!("{mean:.decimals$} ± {std:.decimals$}"),
        Some(Stat { mean, .. }) => format!("{mean:.decimals$}"),
        None => "–".into(),
    }
}

/// A robustness cell: flagged groups carry the warning on the number itself.
fn robust(stat: Option<Stat>, expected_n: usize, flagged: bool) -> String {
    let text = pct(stat, expected_n);
    if flagged && stat.is_some() {
        format!("⚠ {text}")
    } else {
        text
    }
}

fn md_escape(text: &str) -> String {
    text.replace('|', "\\|")
}

/// `report.md`: the main table (one row per group and split), AdvGLUE by task with its average,
/// every run, and the plots.
pub fn markdown(report: &Report, plots: &[String]) -> String {
    let mut md = String::new();
    let n_runs = report.runs.len();
    let n_flagged = report.runs.iter().filter(|r| r.did_not_learn()).count();
    writeln!(md, "# IM-BERT report\n").ok();
    writeln!(
        md,
        "{n_runs} runs in {} groups (grouped by {}). Accuracies in %, mean ± sample std over a \
         group's runs (seeds); `n` is the number of evaluated runs, `(n=k)` marks a number fewer \
         runs had.\n",
        report.groups.len(),
        report.group_by.iter().map(|k| k.name()).collect::<Vec<_>>().join(", ")
    )
    .ok();
    if n_flagged > 0 {
        writeln!(
            md,
            "**⚠ {n_flagged} run(s) did not learn** (near chance on clean data, per \
             `eval.json`). Their AdvGLUE numbers measure nothing about robustness; rows that \
             include them are marked ⚠ and must be read with their clean accuracy.\n"
        )
        .ok();
    }

    main_table(&mut md, report);
    if let Some(speed) = &report.speed {
        writeln!(md, "\n## Throughput, measured idle\n").ok();
        md.push_str(&crate::speed::markdown(speed));
    }
    pivot_by_task(&mut md, report);
    per_run_table(&mut md, report);

    if !plots.is_empty() {
        writeln!(md, "\n## Plots\n").ok();
        for stem in plots {
            writeln!(md, "![{stem}](plots/{stem}.svg)").ok();
        }
    }
    md
}

/// One row per group and split: clean, AdvGLUE, drop, per attack level, cost, status.
fn main_table(md: &mut String, report: &Report) {
    writeln!(md, "## Clean and AdvGLUE accuracy\n").ok();
    writeln!(
        md,
        "Clean: GLUE dev. Majority: the share of GLUE dev's most frequent label, what a model \
         that learned nothing scores. AdvGLUE: AdvGLUE dev. Drop: accuracy on the clean \
         originals minus the adversarial accuracy on the same items. Word / sentence / human: \
         AdvGLUE accuracy per attack level. Drift: the stability probe's last-layer [CLS] \
         cosine distance (1 - cos) between AdvGLUE SST-2 items and their clean originals, on \
         the model's own weights (in parentheses for a model that did not learn: stability of \
         a model that learned nothing is not robustness). GFLOPs: analytic forward matmul \
         FLOPs per example (`shared::model::flops`). Eval and train ex/s: examples per second \
         measured on the machine that ran them (train: forward and backward, at batch 16), with \
         whatever else it ran; `trainer speed`'s idle figures, where measured, follow the \
         table.\n"
    )
    .ok();
    let keys: Vec<&str> = report.group_by.iter().map(|k| k.name()).collect();
    let mut header: Vec<&str> = keys.clone();
    header.extend([
        "split",
        "n",
        "clean (GLUE dev)",
        "majority",
        "AdvGLUE",
        "drop",
        "word",
        "sentence",
        "human",
        "drift",
        "GFLOPs/ex",
        "eval ex/s",
        "train ex/s",
        "status",
    ]);
    table_header(md, &header);
    for g in &report.groups {
        for row in main_table_rows(g) {
            table_row(md, &row);
        }
    }
    let sampled: BTreeSet<String> = report
        .groups
        .iter()
        .flat_map(|g| &g.splits)
        .filter_map(|s| Some(format!("{} of {}", s.split, s.sampled_from?)))
        .collect();
    if !sampled.is_empty() {
        writeln!(
            md,
            "\n† clean accuracy on a fixed sample of GLUE dev, the same items for every model \
             (`eval --clean-sample`): {}.",
            sampled.into_iter().collect::<Vec<_>>().join(", ")
        )
        .ok();
    }
    let held_out: BTreeSet<String> = report
        .groups
        .iter()
        .flat_map(|g| &g.splits)
        .filter_map(|s| Some(format!("{}: {}", s.split, s.held_out.as_ref()?)))
        .collect();
    for note in held_out {
        writeln!(md, "\n‡ clean accuracy and majority share, not on GLUE dev: {note}.").ok();
    }
    if report.groups.iter().any(|g| g.flops_computed && g.flops.is_some()) {
        writeln!(
            md,
            "\n\\* computed from the run's config at `max_len` (an upper bound): the run has no \
             `eval.json`."
        )
        .ok();
    }
}

/// A group's rows of the main table: one per split, or one of dashes when nothing was evaluated.
fn main_table_rows(g: &GroupSummary) -> Vec<Vec<String>> {
    let mut flops = plain(g.flops, 1e-9, 2);
    if g.flops_computed && g.flops.is_some() {
        flops.push('*');
    }
    let n = if g.evaluated == g.runs.len() {
        g.evaluated.to_string()
    } else {
        format!("{} (+{} not evaluated)", g.evaluated, g.runs.len() - g.evaluated)
    };
    let prefix: Vec<String> = g.values.iter().map(|v| md_escape(v)).collect();
    if g.splits.is_empty() {
        let dashes = |k: usize| std::iter::repeat_n("–".to_string(), k);
        let mut row = prefix;
        row.extend(dashes(1).chain([n]).chain(dashes(8)).chain([flops]).chain(dashes(2)));
        row.push(g.status());
        return vec![row];
    }
    let flag = g.flagged();
    g.splits
        .iter()
        .map(|s| {
            let mut row = prefix.clone();
            row.extend([
                s.split.clone(),
                n.clone(),
                match (s.sampled_from, &s.held_out) {
                    (_, Some(_)) => format!("{} ‡", pct(s.clean, g.evaluated)),
                    (Some(_), None) => format!("{} †", pct(s.clean, g.evaluated)),
                    (None, None) => pct(s.clean, g.evaluated),
                },
                s.majority.map_or("–".into(), |m| format!("{:.1}", 100.0 * m.mean)),
                robust(s.adversarial, g.evaluated, flag),
                robust(s.drop, g.evaluated, flag),
            ]);
            for level in AttackLevel::ALL {
                row.push(robust(s.levels.get(level.name()).copied(), g.evaluated, flag));
            }
            let drift = plain(g.final_drift(), 1.0, 3);
            let drift =
                if flag && g.final_drift().is_some() { format!("({drift})") } else { drift };
            row.extend([
                drift,
                flops.clone(),
                plain(g.examples_per_sec, 1.0, 1),
                plain(g.train_examples_per_sec, 1.0, 1),
                g.status(),
            ]);
            row
        })
        .collect()
}

/// AdvGLUE accuracy per task (columns) for each setting (rows), clean accuracy beside each, and
/// the paper's average over tasks. Needs `task` among the group keys.
fn pivot_by_task(md: &mut String, report: &Report) {
    let Some(task_index) = report.group_by.iter().position(|&k| k == GroupKey::Task) else {
        return;
    };
    let mut splits: Vec<String> = report
        .groups
        .iter()
        .flat_map(|g| g.splits.iter().filter(|s| s.adversarial.is_some()).map(|s| s.split.clone()))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    if splits.is_empty() {
        return;
    }
    splits.sort_by_key(|s| split_order(s));

    // Rows: the other keys' values, in the groups' order.
    let mut rows: Vec<(Vec<String>, Vec<&GroupSummary>)> = Vec::new();
    for g in &report.groups {
        let mut key = g.values.clone();
        key.remove(task_index);
        match rows.iter_mut().find(|(k, _)| *k == key) {
            Some((_, members)) => members.push(g),
            None => rows.push((key, vec![g])),
        }
    }

    writeln!(md, "\n## AdvGLUE accuracy by task\n").ok();
    writeln!(
        md,
        "Each cell: AdvGLUE accuracy, then (clean GLUE dev accuracy); each task's header gives \
         the share of its most frequent GLUE dev label. Avg: the mean over the tasks shown.\n"
    )
    .ok();
    let mut header: Vec<&str> =
        report.group_by.iter().filter(|&&k| k != GroupKey::Task).map(|k| k.name()).collect();
    // Each task's majority-label share in its header: what a model that learned nothing scores.
    let split_headers: Vec<String> = splits
        .iter()
        .map(|split| {
            let majority = report.groups.iter().find_map(|g| g.split(split)?.majority);
            match majority {
                Some(m) => format!("{split} (majority {:.1})", 100.0 * m.mean),
                None => split.clone(),
            }
        })
        .collect();
    header.extend(split_headers.iter().map(String::as_str));
    header.push("Avg");
    table_header(md, &header);
    for (key, members) in rows {
        let mut row: Vec<String> = key.iter().map(|v| md_escape(v)).collect();
        let (mut adv_means, mut clean_means, mut flagged) = (Vec::new(), Vec::new(), false);
        for split in &splits {
            let found = members.iter().find_map(|g| g.split(split).map(|s| (g, s)));
            let cell = match found {
                Some((g, s)) if s.adversarial.is_some() => {
                    adv_means.extend(s.adversarial.map(|a| a.mean));
                    clean_means.extend(s.clean.map(|c| c.mean));
                    flagged |= g.flagged();
                    format!(
                        "{} ({})",
                        robust(s.adversarial, g.evaluated, g.flagged()),
                        pct(s.clean, g.evaluated)
                    )
                }
                _ => "–".into(),
            };
            row.push(cell);
        }
        let mean = |v: &[f64]| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
        let avg = match (mean(&adv_means), mean(&clean_means)) {
            (Some(a), c) => {
                let clean = c.map_or("–".into(), |c| format!("{:.1}", 100.0 * c));
                let partial = if adv_means.len() < splits.len() {
                    format!(" [{}/{} tasks]", adv_means.len(), splits.len())
                } else {
                    String::new()
                };
                format!("{}{:.1} ({clean}){partial}", if flagged { "⚠ " } else { "" }, 100.0 * a)
            }
            (None, _) => "–".into(),
        };
        row.push(avg);
        table_row(md, &row);
    }
}

/// Every run with its own numbers, so a group's mean can be traced to its seeds.
fn per_run_table(md: &mut String, report: &Report) {
    writeln!(md, "\n## Runs\n").ok();
    table_header(
        md,
        &["run", "task", "connection", "seed", "clean (GLUE dev)", "AdvGLUE", "status"],
    );
    let mut any_overshooting = false;
    for run in &report.runs {
        let (clean, adv, status) = match &run.eval {
            None => ("–".to_string(), "–".to_string(), "not evaluated".to_string()),
            Some(e) => {
                let clean = e
                    .clean
                    .iter()
                    .map(|c| format!("{} {:.1}", c.split, 100.0 * c.score.accuracy))
                    .collect::<Vec<_>>()
                    .join(", ");
                let flag = if e.did_not_learn { "⚠ " } else { "" };
                let adv = e
                    .advglue
                    .iter()
                    .map(|a| format!("{flag}{} {:.1}", a.split, 100.0 * a.adversarial.accuracy))
                    .collect::<Vec<_>>()
                    .join(", ");
                let status = if e.did_not_learn {
                    match &e.did_not_learn_reason {
                        Some(reason) => format!("⚠ did not learn: {reason}"),
                        None => "⚠ did not learn".into(),
                    }
                } else {
                    "ok".into()
                };
                (clean, adv, status)
            }
        };
        // A rising residual at the start means gamma overshoots: the IM result is not the
        // implicit step the spec names (docs/numerics.md).
        let overshooting =
            run.im_residuals.as_ref().map(ImResidualCheck::overshooting_layers).unwrap_or_default();
        let status = if overshooting.is_empty() {
            status
        } else {
            any_overshooting = true;
            let layers: Vec<String> = overshooting.iter().map(usize::to_string).collect();
            let s = if layers.len() > 1 { "s" } else { "" };
            format!("{status}; ⚠ IM residual rose at the start in layer{s} {}", layers.join(", "))
        };
        let row = [
            run.dir.display().to_string(),
            run.config.task.to_string(),
            run.config.connection.to_spec_string(),
            run.config.seed.to_string(),
            clean,
            adv,
            status,
        ];
        table_row(md, &row.map(|c| md_escape(&c)));
    }
    if any_overshooting {
        writeln!(
            md,
            "\n\"IM residual rose\": before training, `||r||^2` grew in some iteration of those IM \
             layers (`im_residuals.json`): gamma overshoots there, so the IM step is not solved \
             and f32 results depend on rounding (docs/numerics.md)."
        )
        .ok();
    }
}

fn table_header(md: &mut String, header: &[&str]) {
    writeln!(md, "| {} |", header.join(" | ")).ok();
    writeln!(md, "|{}", "---|".repeat(header.len())).ok();
}

fn table_row(md: &mut String, row: &[String]) {
    writeln!(md, "| {} |", row.join(" | ")).ok();
}
