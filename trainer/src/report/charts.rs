//! The plots as data (testable without drawing): accuracy vs IM's `T`, per IM layer range, per
//! attack level, and the stability probe's drift per layer.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use shared::data::AttackLevel;
use shared::{Connection, ConnectionSpec};

use super::stats::{split_order, GroupSummary, Report, SplitSummary, Stat};
use super::GroupKey;

/// A plot, as data: what `draw_chart` renders to SVG and PNG.
#[derive(Debug, Clone, PartialEq)]
pub enum Chart {
    /// Accuracy against a number (IM's `T`).
    Lines(LineChart),
    /// Accuracy per category (layer range, attack level).
    Bars(BarChart),
}

/// Lines over a numeric x axis; accuracies in %.
#[derive(Debug, Clone, PartialEq)]
pub struct LineChart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub series: Vec<LineSeriesData>,
    /// Top of the y axis; `None`: 100 (accuracies).
    pub y_max: Option<f64>,
}

/// One line of a [`LineChart`].
#[derive(Debug, Clone, PartialEq)]
pub struct LineSeriesData {
    /// Legend text.
    pub label: String,
    /// Series that share a colour share a setting (clean and AdvGLUE of one configuration).
    pub color: usize,
    /// Clean accuracy is drawn thin, AdvGLUE thick.
    pub clean: bool,
    /// `(x, mean, std)`.
    pub points: Vec<(f64, f64, Option<f64>)>,
}

/// Grouped bars: one group of bars per category, one bar per series.
#[derive(Debug, Clone, PartialEq)]
pub struct BarChart {
    pub title: String,
    pub y_label: String,
    pub categories: Vec<String>,
    pub series: Vec<BarSeriesData>,
}

/// One bar per category of a [`BarChart`].
#[derive(Debug, Clone, PartialEq)]
pub struct BarSeriesData {
    /// Legend text.
    pub label: String,
    /// Per category: `(mean, std)`, `None` for no bar.
    pub values: Vec<Option<(f64, Option<f64>)>>,
}

pub(super) const CLEAN_LABEL: &str = "clean (GLUE dev)";
const DNL_SUFFIX: &str = " (did not learn)";

/// The IM settings of a group that has a single, implicit connection.
fn implicit_spec(g: &GroupSummary) -> Option<(ConnectionSpec, shared::ImplicitEuler)> {
    let spec = ConnectionSpec::parse(g.connection.as_deref()?).ok()?;
    let Connection::Implicit(im) = spec.connection else { return None };
    Some((spec, im))
}

/// Group values other than task and connection (model, adv, ...), to keep distinct settings apart.
fn other_values(report: &Report, g: &GroupSummary) -> String {
    report
        .group_by
        .iter()
        .zip(&g.values)
        .filter(|(k, _)| !matches!(k, GroupKey::Task | GroupKey::Connection))
        .map(|(k, v)| format!("{}={v}", k.name()))
        .collect::<Vec<_>>()
        .join(" ")
}

fn layers_label(spec: &ConnectionSpec) -> String {
    spec.layers.map_or("all layers".into(), |(a, b)| format!("layers {a}-{b}"))
}

fn with_flag(label: String, flagged: bool) -> String {
    if flagged {
        label + DNL_SUFFIX
    } else {
        label
    }
}

fn pct_point(stat: Stat) -> (f64, Option<f64>) {
    let s = stat.scaled(100.0);
    (s.mean, s.std)
}

/// All plots of a report, by file stem, per evaluation split: accuracy vs `T`, accuracy per IM
/// layer range, accuracy per attack level. Clean accuracy is in every plot beside AdvGLUE.
pub fn charts(report: &Report) -> Vec<(String, Chart)> {
    let mut splits: Vec<String> = report
        .groups
        .iter()
        .flat_map(|g| g.splits.iter().map(|s| s.split.clone()))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    splits.sort_by_key(|s| split_order(s));
    let mut out = Vec::new();
    for split in &splits {
        let stem = split.replace(|c: char| !c.is_ascii_alphanumeric() && c != '-', "_");
        if let Some(c) = accuracy_vs_t(report, split) {
            out.push((format!("accuracy_vs_T_{stem}"), Chart::Lines(c)));
        }
        if let Some(c) = accuracy_by_layers(report, split) {
            out.push((format!("accuracy_by_layers_{stem}"), Chart::Bars(c)));
        }
        if let Some(c) = accuracy_by_attack_level(report, split) {
            out.push((format!("attack_levels_{stem}"), Chart::Bars(c)));
        }
    }
    if let Some(c) = drift_by_layer(report) {
        out.push(("drift_by_layer".to_string(), Chart::Lines(c)));
    }
    out
}

/// One line per probed group: the [CLS] drift between AdvGLUE items and their clean originals,
/// layer by layer (0: the embeddings), on the group's own trained weights.
fn drift_by_layer(report: &Report) -> Option<LineChart> {
    let series: Vec<LineSeriesData> = report
        .groups
        .iter()
        .filter(|g| !g.drift_by_layer.is_empty())
        .enumerate()
        .map(|(color, g)| LineSeriesData {
            label: with_flag(g.values.join(" "), g.flagged()),
            color,
            clean: false,
            points: g
                .drift_by_layer
                .iter()
                .enumerate()
                .map(|(layer, s)| {
                    let (mean, std) = pct_point(*s);
                    (layer as f64, mean, std)
                })
                .collect(),
        })
        .collect();
    let top = series
        .iter()
        .flat_map(|s| s.points.iter().map(|&(_, mean, std)| mean + std.unwrap_or(0.0)))
        .fold(0.0_f64, f64::max);
    (!series.is_empty()).then(|| LineChart {
        title: "Stability probe: [CLS] drift per layer (AdvGLUE vs clean original)".into(),
        x_label: "0: embeddings; k: output of layer k - 1".into(),
        y_label: "1 - cos (%)".into(),
        series,
        y_max: Some((top * 1.1).max(1e-3)),
    })
}

/// `(T, clean, AdvGLUE, did not learn)` of one IM group.
type PointAtT = (usize, Option<Stat>, Option<Stat>, bool);

/// IM groups with the same settings but `T`, joined into one clean and one AdvGLUE line each.
/// EX-BERT on the same layers is the line's `T = 0`: with no iteration, the solve returns its
/// start, `z_0 = h + phi(h)`, which is EX-BERT's step. BERT, when reported, is a flat reference
/// across the T axis.
fn accuracy_vs_t(report: &Report, split: &str) -> Option<LineChart> {
    // Setting (every IM parameter but T, plus other group keys) -> its points.
    let mut settings: BTreeMap<String, Vec<PointAtT>> = BTreeMap::new();
    // (layers, other group keys) of each setting, to find its EX-BERT.
    let mut setting_scope: BTreeMap<String, (String, String)> = BTreeMap::new();
    for g in &report.groups {
        let (Some((spec, im)), Some(s)) = (implicit_spec(g), g.split(split)) else { continue };
        let mut grad = String::new();
        if im.gradient != shared::InnerGradient::Exact {
            grad += &format!(", {}", im.gradient.name());
        }
        if im.step_rule == shared::StepRule::Backtrack {
            grad += ", backtrack";
        }
        if let Some(tol) = im.tolerance {
            grad += &format!(", tol {tol}");
        }
        let (layers, others) = (layers_label(&spec), other_values(report, g));
        let key = format!("γ={} {layers}{grad} {others}", im.gamma).trim().to_string();
        settings.entry(key.clone()).or_default().push((
            im.iterations,
            s.clean,
            s.adversarial,
            g.flagged(),
        ));
        setting_scope.insert(key, (layers, others));
    }
    if settings.is_empty() {
        return None;
    }
    // EX-BERT and BERT groups of this split, by (layers, other group keys) / other group keys.
    let mut explicit: BTreeMap<(String, String), PointAtT> = BTreeMap::new();
    let mut references = Vec::new();
    for g in &report.groups {
        let Some(s) = g.split(split) else { continue };
        let Some(spec) = g.connection.as_deref().and_then(|c| ConnectionSpec::parse(c).ok()) else {
            continue;
        };
        let others = other_values(report, g);
        match spec.connection {
            Connection::Explicit => {
                let scope = (layers_label(&spec), others);
                explicit.insert(scope, (0, s.clean, s.adversarial, g.flagged()));
            }
            Connection::Monotone => {
                references.push((format!("BERT {others}").trim().to_string(), s, g.flagged()))
            }
            Connection::Implicit(_) => {}
        }
    }
    let mut series = Vec::new();
    let mut color = 0;
    let (mut t_min, mut t_max, mut with_ex) = (usize::MAX, 0, false);
    for (setting, mut points) in settings {
        if let Some(&t0) = setting_scope.get(&setting).and_then(|scope| explicit.get(scope)) {
            points.push(t0);
            with_ex = true;
        }
        points.sort_by_key(|p| p.0);
        t_min = t_min.min(points[0].0);
        t_max = t_max.max(points[points.len() - 1].0);
        let flagged = points.iter().any(|p| p.3);
        let line = |clean: bool| {
            let pts: Vec<_> = points
                .iter()
                .filter_map(|&(t, c, a, _)| {
                    let (mean, std) = pct_point(if clean { c } else { a }?);
                    Some((t as f64, mean, std))
                })
                .collect();
            let name = if clean { CLEAN_LABEL } else { "AdvGLUE" };
            (!pts.is_empty()).then(|| LineSeriesData {
                label: with_flag(format!("{name}, {setting}"), flagged),
                color,
                clean,
                points: pts,
            })
        };
        series.extend(line(true));
        series.extend(line(false));
        color += 1;
    }
    for (name, s, flagged) in references {
        for clean in [true, false] {
            let Some(stat) = (if clean { s.clean } else { s.adversarial }) else { continue };
            let (mean, std) = pct_point(stat);
            let what = if clean { CLEAN_LABEL } else { "AdvGLUE" };
            series.push(LineSeriesData {
                label: with_flag(format!("{what}, {name} (reference, no T)"), flagged),
                color,
                clean,
                points: vec![(t_min as f64, mean, std), (t_max as f64, mean, std)],
            });
        }
        color += 1;
    }
    let ex_note = if with_ex { "; T = 0: EX-BERT" } else { "" };
    Some(LineChart {
        title: format!("{split}: accuracy vs T (IM-BERT)"),
        x_label: format!("T (IM iterations{ex_note})"),
        y_label: "accuracy (%)".into(),
        series,
        y_max: None,
    })
}

/// One category per IM group (its layer range), bars for clean and AdvGLUE accuracy.
fn accuracy_by_layers(report: &Report, split: &str) -> Option<BarChart> {
    let members: Vec<(&GroupSummary, ConnectionSpec, shared::ImplicitEuler, &SplitSummary)> =
        report
            .groups
            .iter()
            .filter_map(|g| {
                let (spec, im) = implicit_spec(g)?;
                Some((g, spec, im, g.split(split)?))
            })
            .collect();
    if members.is_empty() {
        return None;
    }
    // Name T and gamma only where the groups differ in them.
    let settings = members
        .iter()
        .map(|(_, _, im, _)| format!("T={} γ={}", im.iterations, im.gamma))
        .collect::<BTreeSet<String>>();
    let mut rows: Vec<_> = members
        .iter()
        .map(|(g, spec, im, s)| {
            let mut label = layers_label(spec);
            if settings.len() > 1 {
                write!(label, " T={} γ={}", im.iterations, im.gamma).ok();
            }
            let other = other_values(report, g);
            if !other.is_empty() {
                write!(label, " {other}").ok();
            }
            let order = (spec.layers, im.iterations); // all layers first, then by range
            (order, with_flag(label, g.flagged()), s)
        })
        .collect();
    rows.sort_by_key(|r| r.0);
    Some(BarChart {
        title: format!("{split}: accuracy per IM layer range"),
        y_label: "accuracy (%)".into(),
        categories: rows.iter().map(|r| r.1.clone()).collect(),
        series: vec![
            BarSeriesData {
                label: CLEAN_LABEL.into(),
                values: rows.iter().map(|r| r.2.clean.map(pct_point)).collect(),
            },
            BarSeriesData {
                label: "AdvGLUE".into(),
                values: rows.iter().map(|r| r.2.adversarial.map(pct_point)).collect(),
            },
        ],
    })
}

/// Categories clean, word, sentence, human; one bar per group (connection).
fn accuracy_by_attack_level(report: &Report, split: &str) -> Option<BarChart> {
    let mut categories = vec![CLEAN_LABEL.to_string()];
    categories.extend(AttackLevel::ALL.iter().map(|l| format!("{} (AdvGLUE)", l.name())));
    let series: Vec<BarSeriesData> = report
        .groups
        .iter()
        .filter_map(|g| {
            let s = g.split(split)?;
            if s.levels.is_empty() {
                return None;
            }
            let mut values = vec![s.clean.map(pct_point)];
            values.extend(
                AttackLevel::ALL.iter().map(|l| s.levels.get(l.name()).copied().map(pct_point)),
            );
            let mut label = g.connection.clone().unwrap_or_else(|| g.values.join(" "));
            let other = other_values(report, g);
            if !other.is_empty() {
                write!(label, " {other}").ok();
            }
            Some(BarSeriesData { label: with_flag(label, g.flagged()), values })
        })
        .collect();
    (!series.is_empty()).then(|| BarChart {
        title: format!("{split}: accuracy per attack level"),
        y_label: "accuracy (%)".into(),
        categories,
        series,
    })
}
