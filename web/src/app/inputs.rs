//! The left column: task and preset, the clean texts, the perturbation buttons, the perturbed
//! text with its word diff, the solve's T and gamma, and which bundle plays each part.

use std::sync::Arc;

use leptos::prelude::*;
use shared::data::Task;
use shared::robustness::perturb::{self, DiffOp};

use super::analysis::Results;
use super::ops::{Level, Op};
use super::presets::{self, Preset};
use super::state::{Demo, Perturbed, PerturbedText};
use crate::catalog::Role;

/// Presets, hand-written first, then AdvGLUE's once they arrive.
pub type Presets = Signal<Vec<Preset>>;

#[component]
pub fn TaskPicker(presets: Presets) -> impl IntoView {
    let demo = expect_context::<Demo>();
    let tasks = move || {
        demo.started.with(|s| match s {
            Some(Ok(started)) => started.tasks.clone(),
            _ => vec![Task::Sst2],
        })
    };
    let on_change = move |ev: leptos::ev::Event| {
        let Ok(task) = event_target_value(&ev).parse::<Task>() else { return };
        demo.task.set(task);
        if let Some(first) =
            presets.with_untracked(|all| all.iter().find(|p| p.task == task).cloned())
        {
            load_preset(demo, &first);
        }
    };
    view! {
        <label>"Task "
            <select id="task" prop:value=move || demo.task.get().name() on:change=on_change>
                {move || tasks().into_iter().map(|task| view! {
                    <option value=task.name() selected=task == demo.task.get_untracked()>
                        {presets::describe(task)}
                    </option>
                }).collect_view()}
            </select>
        </label>
    }
}

#[component]
pub fn PresetPicker(presets: Presets) -> impl IntoView {
    let demo = expect_context::<Demo>();
    let of_task = move || {
        let task = demo.task.get();
        presets.with(|all| all.iter().filter(|p| p.task == task).cloned().collect::<Vec<_>>())
    };
    let on_change = move |ev: leptos::ev::Event| {
        let Ok(i) = event_target_value(&ev).parse::<usize>() else { return };
        let task = demo.task.get_untracked();
        let chosen =
            presets.with_untracked(|all| all.iter().filter(|p| p.task == task).nth(i).cloned());
        if let Some(preset) = chosen {
            load_preset(demo, &preset);
        }
    };
    view! {
        <label>"Preset "
            <select id="preset" on:change=on_change>
                <option value="" disabled=true selected=true>"choose an example…"</option>
                {move || of_task().into_iter().enumerate()
                    .map(|(i, p)| view! { <option value=i.to_string()>{p.title}</option> })
                    .collect_view()}
            </select>
        </label>
    }
}

/// Puts a preset's texts in the boxes; an AdvGLUE item's adversarial text goes in the perturbed
/// box as it is.
fn load_preset(demo: Demo, preset: &Preset) {
    demo.text_a.set(preset.clean.text_a.clone());
    demo.text_b.set(preset.clean.text_b.clone().unwrap_or_default());
    demo.perturbed.set(match &preset.adversarial {
        Some(adversarial) => Perturbed::Fixed {
            text: if preset.task.is_pair() {
                adversarial.text_b.clone().unwrap_or_default()
            } else {
                adversarial.text_a.clone()
            },
            origin: preset.title.split(':').next().unwrap_or("AdvGLUE").to_string(),
        },
        None => Perturbed::Copy,
    });
}

#[component]
pub fn CleanText() -> impl IntoView {
    let demo = expect_context::<Demo>();
    view! {
        <label>{move || if demo.is_pair() { "Premise" } else { "Sentence" }}
            <textarea id="text-a" rows="3" maxlength="5000"
                prop:value=move || demo.text_a.get()
                on:input=move |ev| demo.text_a.set(event_target_value(&ev))></textarea>
        </label>
        <Show when=move || demo.is_pair()>
            <label>"Hypothesis"
                <textarea id="text-b" rows="2" maxlength="5000"
                    prop:value=move || demo.text_b.get()
                    on:input=move |ev| demo.text_b.set(event_target_value(&ev))></textarea>
            </label>
        </Show>
    }
}

#[component]
pub fn PerturbButtons() -> impl IntoView {
    let demo = expect_context::<Demo>();
    let buttons = move |level: Level| {
        Op::ALL
            .into_iter()
            .filter(move |op| op.attack_level() == level)
            .map(move |op| {
                view! {
                    <button data-perturb=op.key() title=format!("{} level", op.level())
                        on:click=move |_| demo.perturb(op)>{op.label()}</button>
                }
            })
            .collect_view()
    };
    view! {
        <div class="perturbs">
            <span class="muted">"word level:"</span>
            {buttons(Level::Word)}
            <span class="muted">"sentence level:"</span>
            {buttons(Level::Sentence)}
        </div>
    }
}

/// The perturbed text (editable) and its word diff against the clean one.
#[component]
pub fn PerturbedBox(perturbed: Memo<PerturbedText>) -> impl IntoView {
    let demo = expect_context::<Demo>();
    let title = move || {
        let what = if demo.is_pair() { "hypothesis" } else { "sentence" };
        perturbed.with(|p| format!("Perturbed {what} — {}", p.how))
    };
    let diff = move || {
        let clean = demo.source();
        perturbed
            .with(|p| perturb::diff_words(&clean, &p.text))
            .into_iter()
            .map(|span| match span.op {
                DiffOp::Equal => view! { <span>{span.text}" "</span> }.into_any(),
                DiffOp::Delete => view! { <del>{span.text}</del>" " }.into_any(),
                DiffOp::Insert => view! { <ins>{span.text}</ins>" " }.into_any(),
            })
            .collect_view()
    };
    view! {
        <label>{title}
            <textarea id="perturbed-text" rows="3" maxlength="5000"
                prop:value=move || perturbed.with(|p| p.text.clone())
                on:input=move |ev| demo.perturbed.set(Perturbed::Fixed {
                    text: event_target_value(&ev),
                    origin: "edited by hand".into(),
                })></textarea>
        </label>
        <p id="diff" class="diff">{diff}</p>
    }
}

/// IM-BERT's solve: iterations T and step size gamma.
/// T and gamma, and beside them how IM-BERT's solve went on the results shown: per IM layer, the
/// steps that moved `z` and whether the residual fell (`#solve-used`).
#[component]
pub fn SolveControls(shown: Memo<Option<Arc<Results>>>) -> impl IntoView {
    let demo = expect_context::<Demo>();
    let used = move || {
        shown.with(|r| {
            let Some(results) = r else { return Vec::new() };
            let im = results.parts.iter().find(|(a, _)| a.role == Role::Im);
            im.map(|(_, analysis)| analysis.residuals.clone()).unwrap_or_default()
        })
    };
    let set_gamma = move |ev: leptos::ev::Event| match event_target_value(&ev).trim().parse::<f64>()
    {
        // Out-of-range or non-numeric input is ignored.
        Ok(g) if g.is_finite() && (0.0..=1.0).contains(&g) => demo.gamma.set(g),
        _ => {}
    };
    view! {
        <div class="controls">
            <label>{move || format!("T = {} ", demo.t.get())}
                <input id="t-slider" type="range" min="0" max="15" step="1"
                    prop:value=move || demo.t.get().to_string()
                    on:input=move |ev| {
                        if let Ok(t) = event_target_value(&ev).parse() {
                            demo.t.set(t)
                        }
                    } />
            </label>
            <label>"γ "
                <input id="gamma" type="number" min="0" max="1" step="0.05"
                    prop:value=move || demo.gamma.get().to_string()
                    on:change=set_gamma />
            </label>
            <span class="muted">
                "T = 0 keeps only the explicit start z" <sub>"0"</sub> " = h + φ(h)."
            </span>
            <ul id="solve-used" class="muted">
                {move || used().into_iter().map(|trace| {
                    let fell = trace.fell()[0].map_or("", |f| if f { "true" } else { "false" });
                    view! {
                        <li data-layer=trace.layer data-steps=trace.steps_taken[0] data-fell=fell>
                            {format!("IM-BERT {}", trace.summary())}
                        </li>
                    }
                }).collect_view()}
            </ul>
        </div>
    }
}

/// Which bundle plays each part, with its accuracy; or that it borrows another's weights.
#[component]
pub fn ModelCards() -> impl IntoView {
    let demo = expect_context::<Demo>();
    let cards = move || {
        let (Some(session), Ok(roles)) = (demo.session(), demo.roles()) else { return Vec::new() };
        roles
            .iter()
            .map(|a| {
                let entry = &session.index.models[a.model];
                match &a.borrowed_from {
                    None => format!(
                        "{}: {} (trained as {}): {}",
                        a.name(),
                        entry.id,
                        entry.connection,
                        entry.metrics_summary()
                    ),
                    Some(from) => format!(
                        "{}: no {} model for this task; {from}'s weights run with the {} \
                         connection (not trained with it)",
                        a.name(),
                        a.name(),
                        a.spec.connection.short_name()
                    ),
                }
            })
            .collect::<Vec<_>>()
    };
    view! {
        <ul class="cards">
            {move || cards().into_iter().map(|c| view! { <li>{c}</li> }).collect_view()}
        </ul>
    }
}
