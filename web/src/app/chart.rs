//! A line chart in SVG, with its legend; the geometry comes from [`crate::charts`].

use leptos::prelude::*;

use crate::charts::{Frame, Series, RIGHT, TOP};

/// Drawing size in CSS pixels; the SVG scales with its container.
const WIDTH: f32 = 420.0;
const HEIGHT: f32 = 220.0;
/// At most this many x ticks, so that 12-layer models stay legible.
const MAX_X_TICKS: usize = 8;

#[component]
pub fn Chart(
    title: &'static str,
    x_label: &'static str,
    series: Vec<Series>,
    log_y: bool,
) -> impl IntoView {
    let frame = Frame::fit(WIDTH, HEIGHT, &series, log_y);
    let (w, h) = (frame.width, frame.height);
    let bottom = h - frame.bottom;
    let y_ticks = frame.y_ticks().into_iter().map(|(v, label)| {
        let y = frame.py(v);
        view! {
            <line class="grid" x1=frame.left y1=y x2=w - RIGHT y2=y />
            <text class="tick" x=frame.left - 4.0 y=y + 3.0 text-anchor="end">{label}</text>
        }
    });
    let x_ticks = frame.x_ticks(MAX_X_TICKS).into_iter().map(|v| {
        view! {
            <text class="tick" x=frame.px(v) y=bottom + 14.0 text-anchor="middle">
                {format!("{v}")}
            </text>
        }
    });
    let lines = series.iter().map(|s| {
        view! {
            <path class=format!("line {}", s.class) class:dashed=s.dashed
                d=frame.path(&s.points) fill="none" />
        }
    });
    let legend = series.iter().map(|s| {
        view! {
            <span class=format!("key {}", s.class) class:dashed=s.dashed>{s.name.clone()}</span>
        }
    });
    view! {
        <figure>
            <figcaption>{title}</figcaption>
            <svg viewBox=format!("0 0 {w} {h}") width=w.to_string() height=h.to_string() role="img">
                <line class="axis" x1=frame.left y1=bottom x2=w - RIGHT y2=bottom />
                <line class="axis" x1=frame.left y1=TOP x2=frame.left y2=bottom />
                {y_ticks.collect_view()}
                {x_ticks.collect_view()}
                <text class="tick" x=(frame.left + w) / 2.0 y=h - 2.0 text-anchor="middle">
                    {x_label}
                </text>
                {lines.collect_view()}
            </svg>
            <div class="legend">{legend.collect_view()}</div>
        </figure>
    }
}
