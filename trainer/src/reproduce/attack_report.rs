//! Block 4's tables from the committed attack summaries alone: one row per (set, model), mean ±
//! sample standard deviation over block 1's seeds, beside the model's clean accuracy.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Serialize;

use super::attack_block::{AttackRecord, SETS};
use crate::report::{plain, Stat};
use crate::run;

/// One (set, model) row.
#[derive(Debug, Serialize)]
pub struct AttackGroup {
    pub set: String,
    pub connection: String,
    pub adv: String,
    pub seeds: Vec<u64>,
    /// Examples attacked per seed.
    pub examples: usize,
    /// Any of its models near chance on clean data (block 1's evaluation).
    pub did_not_learn: bool,
    /// All in percent.
    pub victim_dev_accuracy: Option<Stat>,
    pub original_accuracy: Option<Stat>,
    pub accuracy_under_attack: Option<Stat>,
    pub attack_success_rate: Option<Stat>,
    pub perturbed_word_pct: Option<Stat>,
    pub queries: Option<Stat>,
    pub seconds_per_example: Option<Stat>,
}

/// Whether `dir` holds block 4's attack summaries (`trainer report` then writes their tables):
/// it has JSON files, and its first one, in name order, is an attack.
pub fn is_attack_dir(dir: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else { return false };
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    files.first().is_some_and(|f| run::read_json::<AttackRecord>(f).is_ok())
}

/// The summaries in `dir` (not its `partial/` attacks in progress), in block order.
pub fn load(dir: &Path) -> Result<Vec<AttackRecord>> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .map(|e| e.map(|e| e.path()))
        .collect::<std::io::Result<_>>()
        .with_context(|| format!("reading {}", dir.display()))?;
    paths.retain(|p| p.extension().is_some_and(|e| e == "json"));
    paths.sort();
    let mut records: Vec<AttackRecord> =
        paths.iter().map(|p| run::read_json(p)).collect::<Result<_>>()?;
    let set_rank = |name: &str| SETS.iter().position(|s| s.name == name).unwrap_or(SETS.len());
    // BERT before IM, then by seed.
    records
        .sort_by_key(|r| (set_rank(&r.set), r.connection != "bert", r.connection.clone(), r.seed));
    Ok(records)
}

pub fn groups(records: &[AttackRecord]) -> Vec<AttackGroup> {
    let mut groups: Vec<(String, String, String, Vec<&AttackRecord>)> = Vec::new();
    for r in records {
        match groups.iter_mut().find(|g| (&g.0, &g.1, &g.2) == (&r.set, &r.connection, &r.adv)) {
            Some(g) => g.3.push(r),
            None => groups.push((r.set.clone(), r.connection.clone(), r.adv.clone(), vec![r])),
        }
    }
    groups
        .into_iter()
        .map(|(set, connection, adv, rs)| {
            let stat = |f: &dyn Fn(&AttackRecord) -> Option<f64>| {
                Stat::of(&rs.iter().filter_map(|r| f(r)).collect::<Vec<_>>())
            };
            AttackGroup {
                set,
                connection,
                adv,
                seeds: rs.iter().map(|r| r.seed).collect(),
                examples: rs.iter().map(|r| r.summary.total).max().unwrap_or(0),
                did_not_learn: rs.iter().any(|r| r.victim_did_not_learn),
                victim_dev_accuracy: stat(&|r| r.victim_dev_accuracy.map(|a| 100.0 * a)),
                original_accuracy: stat(&|r| r.summary.original_accuracy),
                accuracy_under_attack: stat(&|r| r.summary.accuracy_under_attack),
                attack_success_rate: stat(&|r| r.summary.attack_success_rate),
                perturbed_word_pct: stat(&|r| r.summary.avg_perturbed_word_pct),
                queries: stat(&|r| r.summary.avg_queries),
                seconds_per_example: stat(&|r| {
                    (r.summary.total > 0).then(|| r.elapsed_s / r.summary.total as f64)
                }),
            }
        })
        .collect()
}

pub fn markdown(records: &[AttackRecord], groups: &[AttackGroup]) -> String {
    let mut md = String::new();
    writeln!(md, "# Block 4: TextFooler against block 1's models (the paper's Table 4)\n").ok();
    if let Some(config) = records.first().map(|r| &r.config) {
        writeln!(
            md,
            "TextFooler as `trainer attack` runs it: the words the model reads ({} tokens) ranked \
             by the drop of the true label's probability when deleted, each replaced by the one \
             of its {} nearest embedding neighbours (cosine ≥ {}) that flips the prediction or \
             lowers that probability most; at most {:.0}% of the words and {} queries per \
             example. Skipped: examples the model got wrong before the attack.\n",
            config.max_len,
            config.k,
            config.min_cosine,
            100.0 * config.max_perturb_ratio,
            config.max_queries
        )
        .ok();
    }
    writeln!(
        md,
        "The models are block 1's SST-2 models (its cells, same seeds); IMDB reviews are read by \
         the same SST-2 models (no IMDB training split is available here). Percentages, mean ± \
         sample std over the seeds. Clean accuracy: SST-2 dev (872 sentences), from block 1; \
         original accuracy: on the attacked examples before the attack.\n"
    )
    .ok();
    writeln!(
        md,
        "| set | model | seeds | examples | SST-2 dev acc (clean) | original acc | acc under \
         attack | attack success | perturbed words | queries | s / example |"
    )
    .ok();
    writeln!(md, "|---|---|---|---|---|---|---|---|---|---|---|").ok();
    for g in groups {
        let model = if g.adv == "none" {
            g.connection.clone()
        } else {
            format!("{} + {}", g.connection, g.adv)
        };
        let flag = if g.did_not_learn { "⚠ did not learn: " } else { "" };
        let seeds: Vec<String> = g.seeds.iter().map(u64::to_string).collect();
        writeln!(
            md,
            "| {} | {flag}`{model}` | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            g.set,
            seeds.join(", "),
            g.examples,
            plain(g.victim_dev_accuracy, 1.0, 1),
            plain(g.original_accuracy, 1.0, 1),
            plain(g.accuracy_under_attack, 1.0, 1),
            plain(g.attack_success_rate, 1.0, 1),
            plain(g.perturbed_word_pct, 1.0, 1),
            plain(g.queries, 1.0, 0),
            plain(g.seconds_per_example, 1.0, 2),
        )
        .ok();
    }
    let retrained: Vec<&AttackRecord> = records.iter().filter(|r| r.retrained.is_some()).collect();
    if !retrained.is_empty() {
        writeln!(
            md,
            "\nModels trained again from their committed config (no run directory was left):\n"
        )
        .ok();
        for r in retrained {
            if let Some(check) = &r.retrained {
                writeln!(
                    md,
                    "- {}: best validation loss {:.6} committed, {:.6} retrained",
                    r.victim, check.committed_val_loss, check.retrained_val_loss
                )
                .ok();
            }
        }
    }
    md
}

/// One row per attack.
pub fn csv(records: &[AttackRecord]) -> String {
    let mut out = String::from(
        "set,victim,connection,adv,seed,examples,victim_dev_accuracy,original_accuracy,\
         accuracy_under_attack,attack_success_rate,perturbed_word_pct,queries,elapsed_s\n",
    );
    let num = |x: Option<f64>| x.map_or(String::new(), |v| format!("{v}"));
    for r in records {
        let s = &r.summary;
        writeln!(
            out,
            "{},{},\"{}\",{},{},{},{},{},{},{},{},{},{}",
            r.set,
            r.victim,
            r.connection,
            r.adv,
            r.seed,
            s.total,
            num(r.victim_dev_accuracy),
            num(s.original_accuracy),
            num(s.accuracy_under_attack),
            num(s.attack_success_rate),
            num(s.avg_perturbed_word_pct),
            num(s.avg_queries),
            r.elapsed_s
        )
        .ok();
    }
    out
}

/// Writes report.md, report.csv and report.json (the groups) into `out`.
pub fn write(summaries: &Path, out: &Path) -> Result<()> {
    let records = load(summaries)?;
    let groups = groups(&records);
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let files = [
        ("report.md", markdown(&records, &groups)),
        ("report.csv", csv(&records)),
        ("report.json", serde_json::to_string_pretty(&groups).context("serialising the groups")?),
    ];
    for (name, text) in files {
        let path = out.join(name);
        shared::io::atomic::write_atomic(&path, text.as_bytes())
            .with_context(|| format!("writing {}", path.display()))?;
        println!("wrote {}", path.display());
    }
    println!("{} attacks in {} rows", records.len(), groups.len());
    Ok(())
}

#[cfg(test)]
mod tests {
    use shared::robustness::attack::AttackSummary;

    use super::*;

    /// Every committed attack loads, its summary is what its own results add up to, and the
    /// report's groups cover every attack once.
    #[test]
    fn committed_attacks_load_and_add_up() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../results/runs/attack");
        if !dir.is_dir() {
            return;
        }
        let records = load(&dir).unwrap();
        // serde_json reads floats back to within an ulp, not always to the same bits.
        let close = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(a), Some(b)) => (a - b).abs() <= 1e-9 * a.abs().max(1.0),
            (a, b) => a == b,
        };
        for r in &records {
            let (s, sum) = (&r.summary, AttackSummary::from_results(&r.results));
            assert_eq!(
                (s.total, s.succeeded, s.failed, s.skipped),
                (sum.total, sum.succeeded, sum.failed, sum.skipped),
                "{}",
                r.victim
            );
            for (a, b) in [
                (s.original_accuracy, sum.original_accuracy),
                (s.accuracy_under_attack, sum.accuracy_under_attack),
                (s.attack_success_rate, sum.attack_success_rate),
                (s.avg_perturbed_word_pct, sum.avg_perturbed_word_pct),
                (s.avg_num_words, sum.avg_num_words),
                (s.avg_queries, sum.avg_queries),
            ] {
                assert!(close(a, b), "{}: {a:?} vs {b:?}", r.victim);
            }
            assert_eq!(r.results.len(), r.summary.total);
            assert!(r.summary.total <= r.limit && r.elapsed_s > 0.0, "{}", r.victim);
        }
        let groups = groups(&records);
        assert_eq!(groups.iter().map(|g| g.seeds.len()).sum::<usize>(), records.len());
        assert!(markdown(&records, &groups).contains("| set | model |"));
    }
}
