//! Grouping runs across seeds: mean ± sample std per group and evaluation split, in the paper's
//! order.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use serde::Serialize;
use shared::data::{AttackLevel, Task};
use shared::{Connection, ConnectionSpec};

use super::load::{FlopsSource, RunRecord};
use super::GroupKey;
use crate::run::EvalReport;

/// Mean and sample standard deviation (`n - 1` in the denominator) over a group's runs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Stat {
    pub mean: f64,
    /// `None` for a single run.
    pub std: Option<f64>,
    /// Number of runs the statistic is over.
    pub n: usize,
}

impl Stat {
    /// `None` for no values.
    pub fn of(values: &[f64]) -> Option<Stat> {
        let n = values.len();
        if n == 0 {
            return None;
        }
        let mean = values.iter().sum::<f64>() / n as f64;
        let std = (n > 1).then(|| {
            let ss: f64 = values.iter().map(|v| (v - mean).powi(2)).sum();
            (ss / (n - 1) as f64).sqrt()
        });
        Some(Stat { mean, std, n })
    }

    pub(super) fn scaled(self, factor: f64) -> Stat {
        Stat { mean: self.mean * factor, std: self.std.map(|s| s * factor), ..self }
    }
}

/// One evaluation split of a group (`sst2`; MNLI has `mnli` and `mnli-mm`).
#[derive(Debug, Clone, Serialize)]
pub struct SplitSummary {
    /// `sst2`, `mnli` (matched), `mnli-mm` (mismatched), ...
    pub split: String,
    /// GLUE dev accuracy.
    pub clean: Option<Stat>,
    /// Share of GLUE dev's most frequent label: the accuracy of always guessing it.
    pub majority: Option<Stat>,
    /// The dev split's size when the clean accuracy is over a fixed sample of it.
    pub sampled_from: Option<usize>,
    /// What the clean examples are when they are not GLUE dev (QQP in the shared data).
    pub held_out: Option<String>,
    /// AdvGLUE accuracy on every adversarial item.
    pub adversarial: Option<Stat>,
    /// Accuracy on the clean originals of the adversarial items.
    pub clean_original: Option<Stat>,
    /// Adversarial accuracy on the items that have an original.
    pub adversarial_paired: Option<Stat>,
    /// `clean_original - adversarial_paired`, per run.
    pub drop: Option<Stat>,
    /// Adversarial accuracy per attack level (`word`, `sentence`, `human`).
    pub levels: BTreeMap<String, Stat>,
}

/// Runs that share the group keys' values.
#[derive(Debug, Clone, Serialize)]
pub struct GroupSummary {
    /// One value per key of [`Report::group_by`].
    pub values: Vec<String>,
    /// The task and canonical connection all runs share, `None` where they differ.
    pub task: Option<String>,
    pub connection: Option<String>,
    /// The group's run directories and their seeds, in the same order.
    pub runs: Vec<PathBuf>,
    pub seeds: Vec<u64>,
    /// Runs with an `eval.json`.
    pub evaluated: usize,
    /// Runs whose `eval.json` says `did_not_learn`.
    pub did_not_learn: usize,
    /// Per evaluation split, in AdvGLUE's task order.
    pub splits: Vec<SplitSummary>,
    /// Forward FLOPs per example.
    pub flops: Option<Stat>,
    /// Some run's FLOPs were computed at `max_len` instead of read from `eval.json`.
    pub flops_computed: bool,
    /// Measured evaluation throughput.
    pub examples_per_sec: Option<Stat>,
    /// Measured training throughput (examples per second, forward and backward).
    pub train_examples_per_sec: Option<Stat>,
    /// The stability probe per layer (index 0: the embeddings): [CLS] cosine distance between
    /// AdvGLUE items and their clean originals, over the runs that were probed.
    pub drift_by_layer: Vec<Stat>,
}

impl GroupSummary {
    /// The last layer's drift.
    pub fn final_drift(&self) -> Option<Stat> {
        self.drift_by_layer.last().copied()
    }

    /// Whether any run of the group did not learn: its robustness numbers must not be read as
    /// robustness.
    pub fn flagged(&self) -> bool {
        self.did_not_learn > 0
    }

    /// The summary of one evaluation split.
    pub fn split(&self, name: &str) -> Option<&SplitSummary> {
        self.splits.iter().find(|s| s.split == name)
    }

    /// `"⚠ did not learn (1/3)"`, `"not evaluated"`, `"ok"`, or several joined by `"; "`.
    pub fn status(&self) -> String {
        let mut parts = Vec::new();
        if self.flagged() {
            parts.push(format!("⚠ did not learn ({}/{})", self.did_not_learn, self.evaluated));
        }
        let not_evaluated = self.runs.len() - self.evaluated;
        if not_evaluated > 0 {
            parts.push(if self.evaluated == 0 {
                "not evaluated".to_string()
            } else {
                format!("{not_evaluated} not evaluated")
            });
        }
        if parts.is_empty() {
            "ok".into()
        } else {
            parts.join("; ")
        }
    }
}

/// Everything the outputs are made from.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The keys that define a group, in column order.
    pub group_by: Vec<GroupKey>,
    /// Groups in the paper's order.
    pub groups: Vec<GroupSummary>,
    /// Every run, sorted by directory.
    pub runs: Vec<RunRecord>,
    /// `trainer speed`'s idle measurement of the grid's arms, when one lies beside the runs.
    pub speed: Option<crate::speed::SpeedReport>,
}

/// Groups runs by `group_by` and computes each group's statistics. Groups come in the paper's
/// order: task (AdvGLUE order), then BERT, EX, IM by `T` and layers.
pub fn summarise(runs: Vec<RunRecord>, group_by: &[GroupKey]) -> Report {
    let mut buckets: BTreeMap<Vec<String>, Vec<&RunRecord>> = BTreeMap::new();
    for run in &runs {
        let values = group_by.iter().map(|k| k.value(&run.config)).collect();
        buckets.entry(values).or_default().push(run);
    }
    let mut groups: Vec<GroupSummary> =
        buckets.into_iter().map(|(values, members)| summarise_group(values, &members)).collect();
    groups.sort_by_key(group_order);
    Report { group_by: group_by.to_vec(), groups, runs, speed: None }
}

fn summarise_group(values: Vec<String>, runs: &[&RunRecord]) -> GroupSummary {
    let shared_value = |f: &dyn Fn(&RunRecord) -> String| {
        let first = f(runs[0]);
        runs.iter().all(|r| f(r) == first).then_some(first)
    };
    let evals: Vec<&EvalReport> = runs.iter().filter_map(|r| r.eval.as_ref()).collect();

    let mut split_names: Vec<String> = evals
        .iter()
        .flat_map(|e| {
            e.clean.iter().map(|c| c.split.clone()).chain(e.advglue.iter().map(|a| a.split.clone()))
        })
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    split_names.sort_by_key(|s| split_order(s));

    let splits = split_names
        .into_iter()
        .map(|split| {
            // Per run, then across runs: a run that lacks a number simply does not count for it.
            let per_run = |f: &dyn Fn(&EvalReport) -> Option<f64>| -> Option<Stat> {
                Stat::of(&evals.iter().filter_map(|e| f(e)).collect::<Vec<_>>())
            };
            let adv = |e: &EvalReport| e.advglue.iter().find(|a| a.split == split).cloned();
            let nonempty = |s: &crate::run::Score| (s.n > 0).then_some(s.accuracy);
            let levels = AttackLevel::ALL
                .iter()
                .filter_map(|level| {
                    let stat = per_run(&|e| {
                        adv(e).and_then(|a| {
                            a.by_level.get(level.name()).and_then(|l| nonempty(&l.adversarial))
                        })
                    })?;
                    Some((level.name().to_string(), stat))
                })
                .collect();
            SplitSummary {
                clean: per_run(&|e| {
                    e.clean.iter().find(|c| c.split == split).map(|c| c.score.accuracy)
                }),
                majority: per_run(&|e| {
                    e.clean.iter().find(|c| c.split == split).map(|c| c.majority_share)
                }),
                sampled_from: evals.iter().find_map(|e| {
                    e.clean.iter().find(|c| c.split == split).and_then(|c| c.sampled_from)
                }),
                held_out: evals.iter().find_map(|e| {
                    e.clean.iter().find(|c| c.split == split).and_then(|c| c.held_out.clone())
                }),
                adversarial: per_run(&|e| adv(e).and_then(|a| nonempty(&a.adversarial))),
                clean_original: per_run(&|e| adv(e).and_then(|a| nonempty(&a.clean_original))),
                adversarial_paired: per_run(&|e| {
                    adv(e).and_then(|a| nonempty(&a.adversarial_paired))
                }),
                drop: per_run(&|e| {
                    adv(e).and_then(|a| {
                        Some(nonempty(&a.clean_original)? - nonempty(&a.adversarial_paired)?)
                    })
                }),
                levels,
                split,
            }
        })
        .collect();

    let flops: Vec<f64> = runs.iter().filter_map(|r| r.flops).collect();
    let throughput: Vec<f64> =
        evals.iter().map(|e| e.examples_per_sec).filter(|v| v.is_finite() && *v > 0.0).collect();
    GroupSummary {
        values,
        task: shared_value(&|r| r.config.task.to_string()),
        connection: shared_value(&|r| r.config.connection.to_spec_string()),
        runs: runs.iter().map(|r| r.dir.clone()).collect(),
        seeds: runs.iter().map(|r| r.config.seed).collect(),
        evaluated: evals.len(),
        did_not_learn: runs.iter().filter(|r| r.did_not_learn()).count(),
        splits,
        flops: Stat::of(&flops),
        flops_computed: runs.iter().any(|r| r.flops_source == FlopsSource::ComputedAtMaxLen),
        examples_per_sec: Stat::of(&throughput),
        train_examples_per_sec: Stat::of(
            &runs.iter().filter_map(|r| r.train_examples_per_sec).collect::<Vec<_>>(),
        ),
        drift_by_layer: drift_by_layer(runs),
    }
}

/// Per layer, the [CLS] drift over the runs whose probe measured their own weights.
fn drift_by_layer(runs: &[&RunRecord]) -> Vec<Stat> {
    let curves: Vec<&Vec<f64>> = runs
        .iter()
        .filter_map(|r| r.probe.as_ref()?.connections.iter().find(|c| c.run.is_some()))
        .map(|c| &c.cls_cosine_distance)
        .collect();
    let layers = curves.iter().map(|c| c.len()).min().unwrap_or(0);
    (0..layers).filter_map(|l| Stat::of(&curves.iter().map(|c| c[l]).collect::<Vec<_>>())).collect()
}

/// AdvGLUE's task order; unknown names after, alphabetically.
pub(super) fn split_order(split: &str) -> (usize, String) {
    let rank = split.parse::<Task>().ok().and_then(|t| Task::ALL.iter().position(|&a| a == t));
    (rank.unwrap_or(Task::ALL.len()), split.to_string())
}

/// Sort key of a connection: BERT, EX, then IM by T; all layers before a layer range.
type ConnectionOrder = (usize, usize, Option<(usize, usize)>, String);

/// BERT, EX, then IM by T and layers; unparsable specs last.
fn connection_order(spec: &str) -> ConnectionOrder {
    match ConnectionSpec::parse(spec) {
        Ok(s) => match s.connection {
            Connection::Monotone => (0, 0, s.layers, spec.into()),
            Connection::Explicit => (1, 0, s.layers, spec.into()),
            Connection::Implicit(im) => (2, im.iterations, s.layers, spec.into()),
        },
        Err(_) => (3, 0, None, spec.into()),
    }
}

fn group_order(g: &GroupSummary) -> ((usize, String), ConnectionOrder, Vec<String>) {
    let task = g.task.as_deref().map_or((usize::MAX, String::new()), split_order);
    let connection =
        g.connection.as_deref().map_or((usize::MAX, 0, None, String::new()), connection_order);
    (task, connection, g.values.clone())
}
