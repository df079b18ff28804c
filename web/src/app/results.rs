//! The right column: each part's verdict on the clean and the perturbed input, whether it flipped,
//! and the charts of hidden-state drift per layer and IM's residual per iteration.

use leptos::prelude::*;

use super::analysis::{Analyses, Results};
use super::chart::Chart;
use crate::catalog::Role;
use crate::charts::{indexed, Series};
use crate::engine::{Analysis, Verdict};

#[component]
pub fn ResultsPanel(analyses: Analyses) -> impl IntoView {
    let key =
        move || analyses.shown.with(|r| r.as_ref().map(|r| r.key.clone()).unwrap_or_default());
    // Before the first results: the parts done so far (`data-partial`: how many).
    let partial =
        move || analyses.shown.with(Option::is_none).then(|| analyses.parts_so_far.get()).flatten();
    view! {
        <section id="results" data-key=key data-busy=move || analyses.busy().to_string()
            data-partial=move || partial().map(|r| r.parts.len().to_string())>
            {move || match analyses.shown.get() {
                Some(results) => view! {
                    <Verdicts results=results.clone() />
                    <p class="muted">
                        {format!("computed in {:.0} ms (cached parts are instant)", results.millis)}
                    </p>
                    <DriftCharts results=results.clone() />
                    <ResidualChart results=results />
                }.into_any(),
                None => partial().map(|results| view! {
                    <Verdicts results />
                    <p class="muted">"computing the other parts…"</p>
                }).into_any(),
            }}
        </section>
    }
}

#[component]
fn Verdicts(results: std::sync::Arc<Results>) -> impl IntoView {
    let parts = results.parts.iter().map(|(assignment, analysis)| {
        let role = assignment.role;
        let flipped = analysis.flipped();
        view! {
            <div class="part">
                <h3 class=role.key()>{assignment.name()}
                    <span class="spec">{assignment.spec.to_spec_string()}</span>
                    <span class="flip" data-flipped=flipped.to_string()>
                        {if flipped { "verdict flipped" } else { "verdict held" }}
                    </span>
                </h3>
                <div class="pair">
                    <VerdictCard role which="clean" verdict=analysis.clean.clone()
                        labels=results.labels.clone() />
                    <VerdictCard role which="perturbed" verdict=analysis.perturbed.clone()
                        labels=results.labels.clone() />
                </div>
            </div>
        }
    });
    view! { <div class="verdicts">{parts.collect_view()}</div> }
}

/// One verdict: a probability bar per class, the most probable one marked.
#[component]
fn VerdictCard(
    role: Role,
    which: &'static str,
    verdict: Verdict,
    labels: Vec<String>,
) -> impl IntoView {
    let probs: Vec<String> = verdict.probs.iter().map(|p| format!("{p:.4}")).collect();
    let best = verdict.label();
    let bars = verdict.probs.iter().enumerate().map(|(i, p)| {
        let name = labels.get(i).cloned().unwrap_or_else(|| format!("class {i}"));
        view! {
            <div class="bar-row" class:best=i == best>
                <span class="bar-label">{name}</span>
                <span class="bar">
                    <span class=format!("fill {}", role.key())
                        style=format!("width:{:.1}%", p * 100.0)></span>
                </span>
                <span class="bar-value">{format!("{:.1}%", p * 100.0)}</span>
            </div>
        }
    });
    view! {
        <div class="verdict" data-verdict=format!("{}-{which}", role.key())
            data-probs=probs.join(",")>
            <div class="verdict-title">{which}</div>
            {bars.collect_view()}
            {verdict.truncated.then(|| view! {
                <div class="muted">"input cut to 128 tokens"</div>
            })}
        </div>
    }
}

/// Per layer, how far the perturbation moved each part's hidden states.
#[component]
fn DriftCharts(results: std::sync::Arc<Results>) -> impl IntoView {
    let series = |pick: fn(&Analysis) -> &Vec<f32>| -> Vec<Series> {
        results
            .parts
            .iter()
            .map(|(a, analysis)| Series {
                name: a.name(),
                class: a.role.key(),
                dashed: false,
                points: indexed(pick(analysis)),
            })
            .collect()
    };
    view! {
        <div id="drift-chart" class="charts">
            <Chart title="[CLS] cosine distance, clean vs perturbed"
                x_label="layer (0 = embeddings)"
                series=series(|a| &a.cls_drift) log_y=false />
            <Chart title="mean-token L2 distance, clean vs perturbed"
                x_label="layer (0 = embeddings)"
                series=series(|a| &a.mean_drift) log_y=false />
        </div>
    }
}

/// IM-BERT's squared residual before each iteration and after the last, per IM layer.
#[component]
fn ResidualChart(results: std::sync::Arc<Results>) -> impl IntoView {
    let series: Vec<Series> = results
        .parts
        .iter()
        .filter(|(a, _)| a.role == Role::Im)
        .flat_map(|(_, analysis)| analysis.residuals.iter())
        .flat_map(|trace| {
            let line = |input: &str, dashed: bool, values: &[f32]| Series {
                name: format!("layer {} {input}", trace.layer),
                class: layer_class(trace.layer),
                dashed,
                points: indexed(values),
            };
            [line("clean", false, &trace.clean), line("perturbed", true, &trace.perturbed)]
        })
        .collect();
    view! {
        <div id="residual-chart" class="charts">
            {if series.is_empty() {
                view! {
                    <p class="muted">"T = 0: no iterations, so no residual to show."</p>
                }.into_any()
            } else {
                view! {
                    <Chart
                        title="IM residual ||z − h − φ(z)||² per iteration \
                               (solid clean, dashed perturbed)"
                        x_label="iteration" series log_y=true />
                }.into_any()
            }}
        </div>
    }
}

/// One shade per IM layer (CSS classes `l0`..`l11`), so the layers' residuals can be told apart.
fn layer_class(layer: usize) -> &'static str {
    const CLASSES: [&str; 12] =
        ["l0", "l1", "l2", "l3", "l4", "l5", "l6", "l7", "l8", "l9", "l10", "l11"];
    CLASSES[layer % CLASSES.len()]
}
