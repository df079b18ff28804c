//! The page: input and perturbations on the left, verdicts and charts on the right. Every
//! control feeds one effect that schedules a recomputation; results are cached per (model,
//! connection, texts), so moving the T slider re-runs IM-BERT only.

use std::rc::Rc;

use leptos::prelude::*;
use leptos::task::spawn_local;
use shared::perturb::{self, DiffOp, Perturbation};
use wasm_bindgen_futures::JsFuture;

use crate::catalog::{self, Assignment, ModelIndex, Role};
use crate::charts::{indexed, Frame, Series};
use crate::engine::{Analysis, Input};
use crate::loader;
use crate::runtime;
use crate::session::{self, Session, Shared};

/// Where the site keeps its models (see `trainer export --web --site`).
const MODELS: &str = "models/";
/// AdvGLUE's annotated dev set, copied next to the models by `make demo` (optional).
const PRESETS: &str = "data/dev_ann.json";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Typo,
    Synonym,
    Delete,
    Distractor,
    Negation,
    Checklist,
}

impl Op {
    const ALL: [Op; 6] = [Op::Typo, Op::Synonym, Op::Delete, Op::Distractor, Op::Negation, Op::Checklist];

    fn key(self) -> &'static str {
        match self {
            Op::Typo => "typo",
            Op::Synonym => "synonym",
            Op::Delete => "delete",
            Op::Distractor => "distractor",
            Op::Negation => "negation",
            Op::Checklist => "checklist",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Op::Typo => "typo",
            Op::Synonym => "synonym",
            Op::Delete => "delete word",
            Op::Distractor => "distractor",
            Op::Negation => "contrast clause",
            Op::Checklist => "CheckList",
        }
    }

    fn level(self) -> &'static str {
        match self {
            Op::Typo | Op::Synonym | Op::Delete => "word",
            _ => "sentence",
        }
    }
}

/// A preset: clean text, and optionally its AdvGLUE adversarial version.
#[derive(Debug, Clone, PartialEq)]
struct Preset {
    task: String,
    title: String,
    clean: Input,
    adversarial: Option<Input>,
}

fn task_name(task: &str) -> String {
    match task {
        "sst2" => "SST-2 sentiment".into(),
        "rte" => "RTE entailment (premise + hypothesis)".into(),
        "mnli" => "MNLI inference (premise + hypothesis)".into(),
        "qnli" => "QNLI (question + sentence)".into(),
        "qqp" => "QQP paraphrase (question pair)".into(),
        other => other.to_string(),
    }
}

fn hand_written() -> Vec<Preset> {
    let single = |text: &str, title: &str| Preset {
        task: "sst2".into(),
        title: title.into(),
        clean: Input::new(text, None),
        adversarial: None,
    };
    let pair = |task: &str, a: &str, b: &str, title: &str| Preset {
        task: task.into(),
        title: title.into(),
        clean: Input::new(a, Some(b.into())),
        adversarial: None,
    };
    vec![
        single("a gripping, heartfelt film with a superb cast .", "hand-written: praise"),
        single("the plot is thin and the jokes fall flat .", "hand-written: pan"),
        single("it is not a bad movie , just a forgettable one .", "hand-written: mixed"),
    ]
    .into_iter()
    .chain(["rte", "mnli"].into_iter().flat_map(|task| {
        [
            pair(task, "A man is playing a guitar on a crowded street.", "A man is playing music.", "hand-written: entailment"),
            pair(task, "The company sold its factory in Ohio last year.", "The company bought a factory.", "hand-written: contradiction"),
        ]
    }))
    .collect()
}

/// AdvGLUE dev items of the demo's tasks with their clean originals and attack method/level.
fn advglue_presets(json: &str) -> Vec<Preset> {
    let Ok(value) = serde_json::from_str::<serde_json::Value>(json) else { return Vec::new() };
    let mut out = Vec::new();
    for (task, a, b) in [("sst2", "sentence", None), ("rte", "sentence1", Some("sentence2")), ("mnli", "premise", Some("hypothesis"))] {
        let Some(items) = value.get(task).and_then(|v| v.as_array()) else { continue };
        for item in items.iter().take(60) {
            let field = |k: &str| item.get(k).and_then(|v| v.as_str()).map(str::to_string);
            let original = |k: &str| field(&format!("original_{k}")).or_else(|| field(k));
            let Some(adv_a) = field(a) else { continue };
            let adv_b = b.and_then(field);
            let clean = Input::new(original(a).unwrap_or_default(), b.and_then(original));
            let level = field("data_construction").unwrap_or_default();
            let method = field("method").unwrap_or_default();
            let snippet: String = adv_a.chars().take(60).collect();
            out.push(Preset {
                task: task.into(),
                title: format!("AdvGLUE {level} · {method}: {snippet}…"),
                clean,
                adversarial: Some(Input::new(adv_a, adv_b)),
            });
        }
    }
    out
}

/// One displayed result: the three parts on the same (clean, perturbed) pair.
#[derive(Debug, Clone, PartialEq)]
struct Results {
    key: String,
    parts: Vec<(Assignment, Rc<Analysis>)>,
    labels: Vec<String>,
    millis: f64,
}

#[derive(Clone, Copy)]
struct Ctx {
    session: StoredValue<Option<Shared>, LocalStorage>,
    state: RwSignal<String>,
    message: RwSignal<String>,
    progress: RwSignal<(u64, u64)>,
    task: RwSignal<String>,
    text_a: RwSignal<String>,
    text_b: RwSignal<String>,
    perturbed: RwSignal<String>,
    perturbation: RwSignal<String>,
    last_op: RwSignal<Option<(Op, u64)>>,
    /// No perturbation picked yet: the perturbed box is a copy of the clean text and follows it.
    perturbed_is_copy: RwSignal<bool>,
    seed: RwSignal<u64>,
    t: RwSignal<usize>,
    gamma: RwSignal<f64>,
    results: RwSignal<Option<Results>, LocalStorage>,
    busy: RwSignal<bool>,
    generation: RwSignal<u64>,
    roles: RwSignal<Vec<Assignment>>,
    cards: RwSignal<Vec<String>>,
    tasks: RwSignal<Vec<String>>,
}

impl Ctx {
    fn is_pair(&self) -> bool {
        self.task.get() != "sst2"
    }

    /// The text the perturbations act on: the hypothesis for pair tasks.
    fn source(&self) -> String {
        if self.is_pair() { self.text_b.get_untracked() } else { self.text_a.get_untracked() }
    }

    fn inputs(&self) -> (Input, Input) {
        if self.task.get() != "sst2" {
            let a = self.text_a.get();
            (Input::new(a.clone(), Some(self.text_b.get())), Input::new(a, Some(self.perturbed.get())))
        } else {
            (Input::new(self.text_a.get(), None), Input::new(self.perturbed.get(), None))
        }
    }
}

async fn sleep(ms: i32) {
    let promise = js_sys::Promise::new(&mut |resolve, _| {
        if let Some(w) = web_sys::window() {
            let _ = w.set_timeout_with_callback_and_timeout_and_arguments_0(&resolve, ms);
        }
    });
    let _ = JsFuture::from(promise).await;
}

fn now_ms() -> f64 {
    web_sys::window().and_then(|w| w.performance()).map_or(0.0, |p| p.now())
}

fn query_param(name: &str) -> Option<String> {
    let search = web_sys::window()?.location().search().ok()?;
    search.trim_start_matches('?').split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        (k == name).then(|| v.to_string())
    })
}

fn apply(ctx: &Ctx, op: Op, seed: u64) {
    let text = ctx.source();
    let n = (text.split_whitespace().count() / 8).max(1);
    let result: Option<Perturbation> = match op {
        Op::Typo => Some(perturb::typo(&text, n, seed)),
        Op::Synonym => {
            let neighbours = ctx.session.with_value(|s| s.as_ref().and_then(|s| s.borrow().neighbours(&ctx.task.get_untracked())));
            neighbours.map(|index| perturb::synonym(&text, &index, n, 8, 0.4, seed))
        }
        Op::Delete => Some(perturb::delete_word(&text, n, seed)),
        Op::Distractor => Some(perturb::distractor(&text, seed)),
        Op::Negation => Some(perturb::negation_contrast(&text, seed)),
        Op::Checklist => Some(perturb::checklist_template(&text, seed)),
    };
    match result {
        Some(p) => {
            let what = if p.edits.is_empty() { "nothing to change" } else { op.level() };
            ctx.perturbation.set(format!("{} ({what}, seed {seed})", op.label()));
            ctx.perturbed_is_copy.set(false);
            ctx.perturbed.set(p.text);
        }
        None => ctx.perturbation.set("synonyms need the model's embeddings: still loading".into()),
    }
}

/// Re-runs the three parts on the current inputs, after a short pause so typing does not queue
/// a computation per key. A newer request makes an older one give up.
fn schedule(ctx: Ctx) {
    let generation = ctx.generation.get_untracked() + 1;
    ctx.generation.set(generation);
    spawn_local(async move {
        sleep(200).await;
        if ctx.generation.get_untracked() != generation {
            return;
        }
        let Some(session) = ctx.session.get_value() else { return };
        ctx.busy.set(true);
        // Let the page paint "computing" before the CPU fallback blocks the thread.
        sleep(10).await;
        let result = compute(&ctx, &session, generation).await;
        if ctx.generation.get_untracked() == generation {
            match result {
                Ok(Some(r)) => ctx.results.set(Some(r)),
                Ok(None) => {}
                Err(e) => {
                    ctx.state.set("error".into());
                    ctx.message.set(e);
                }
            }
            ctx.busy.set(false);
        }
    });
}

async fn compute(ctx: &Ctx, session: &Shared, generation: u64) -> Result<Option<Results>, String> {
    let (clean, perturbed) = ctx.inputs();
    let (t, gamma) = (ctx.t.get_untracked(), ctx.gamma.get_untracked());
    let roles = ctx.roles.get_untracked();
    let start = now_ms();
    let mut parts = Vec::new();
    let mut labels = Vec::new();
    for a in roles {
        let model = session::load(session, a.model, |got, total| ctx.progress.set((got, total))).await?;
        if ctx.generation.get_untracked() != generation {
            return Ok(None);
        }
        labels = model.entry.labels.clone();
        if labels.is_empty() {
            labels = model.card.labels.clone();
        }
        let spec = catalog::with_iterations(&a.spec, t, gamma);
        let analysis = session::analyse(session, &model, &spec, &clean, &perturbed).await?;
        parts.push((Assignment { spec, ..a }, analysis));
    }
    let key = format!("{t}|{gamma}|{}|{}", hash(&format!("{clean:?}")), hash(&format!("{perturbed:?}")));
    Ok(Some(Results { key, parts, labels, millis: now_ms() - start }))
}

fn hash(s: &str) -> u64 {
    // FNV-1a: a short, stable key for the DOM.
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3))
}

async fn start(ctx: Ctx) -> Result<(), String> {
    let force_cpu = query_param("backend").as_deref() == Some("cpu");
    ctx.message.set("setting up the backend…".into());
    let (rt, reason) = runtime::select(force_cpu).await;
    if let Some(reason) = reason {
        leptos::logging::log!("CPU fallback: {reason}");
    }
    let index_json = loader::fetch_text(&format!("{MODELS}index.json"), true)
        .await?
        .ok_or("no models/index.json: export a model with `trainer export --web --site dist/models` (see README)")?;
    let index: ModelIndex =
        serde_json::from_str(&index_json).map_err(|e| format!("{MODELS}index.json: {e}"))?;
    if index.models.is_empty() {
        return Err(format!("{MODELS}index.json lists no models"));
    }
    let tasks = catalog::tasks(&index);
    ctx.tasks.set(tasks.clone());
    let session: Shared = Rc::new(std::cell::RefCell::new(Session::new(rt, index, MODELS.into())));
    ctx.session.set_value(Some(session));
    if !tasks.contains(&ctx.task.get_untracked()) {
        ctx.task.set(tasks[0].clone());
    }
    ctx.message.set("downloading the models…".into());
    select_task(ctx, &ctx.task.get_untracked())?;
    Ok(())
}

fn select_task(ctx: Ctx, task: &str) -> Result<(), String> {
    let Some(session) = ctx.session.get_value() else { return Ok(()) };
    let roles = catalog::assign(&session.borrow().index, task)?;
    let cards = roles
        .iter()
        .map(|a| {
            let entry = &session.borrow().index.models[a.model];
            match &a.borrowed_from {
                None => format!("{}: {} (trained as {}): {}", a.role.name(), entry.id, entry.connection, entry.metrics_summary()),
                Some(from) => format!(
                    "{}: no {} model for this task; {from}'s weights run with the {} connection (not trained with it)",
                    a.role.name(),
                    a.role.name(),
                    a.spec.connection.short_name()
                ),
            }
        })
        .collect();
    ctx.cards.set(cards);
    ctx.roles.set(roles);
    Ok(())
}

#[component]
pub fn App() -> impl IntoView {
    let ctx = Ctx {
        session: StoredValue::new_local(None),
        state: RwSignal::new("loading".into()),
        message: RwSignal::new("starting…".into()),
        progress: RwSignal::new((0, 0)),
        task: RwSignal::new("sst2".into()),
        text_a: RwSignal::new("a gripping, heartfelt film with a superb cast .".into()),
        text_b: RwSignal::new(String::new()),
        perturbed: RwSignal::new("a gripping, heartfelt flim with a superb cast .".into()),
        perturbation: RwSignal::new("typo (word)".into()),
        last_op: RwSignal::new(None),
        perturbed_is_copy: RwSignal::new(false),
        seed: RwSignal::new(1),
        t: RwSignal::new(5),
        gamma: RwSignal::new(0.1),
        results: RwSignal::new_local(None),
        busy: RwSignal::new(false),
        generation: RwSignal::new(0),
        roles: RwSignal::new(Vec::new()),
        cards: RwSignal::new(Vec::new()),
        tasks: RwSignal::new(vec!["sst2".into()]),
    };
    let presets = RwSignal::new(hand_written());
    let runtime_label = RwSignal::new(String::from("…"));
    let runtime_id = RwSignal::new(String::new());

    spawn_local(async move {
        match start(ctx).await {
            Ok(()) => {
                if let Some(s) = ctx.session.get_value() {
                    runtime_label.set(s.borrow().runtime.label().to_string());
                    runtime_id.set(s.borrow().runtime.id().to_string());
                }
                schedule(ctx);
            }
            Err(e) => {
                ctx.state.set("error".into());
                ctx.message.set(e);
            }
        }
        if let Ok(Some(json)) = loader::fetch_text(PRESETS, true).await {
            presets.update(|p| p.extend(advglue_presets(&json)));
        }
    });

    // Clean text edited: re-apply the last perturbation to it (same seed), so both stay in step;
    // with none picked yet, the perturbed box copies the clean text (never a stale sentence).
    Effect::new(move |_| {
        let _ = (ctx.text_a.get(), ctx.text_b.get(), ctx.task.get());
        match ctx.last_op.get_untracked() {
            Some((op, seed)) => apply(&ctx, op, seed),
            None if ctx.perturbed_is_copy.get_untracked() => ctx.perturbed.set(ctx.source()),
            None => {}
        }
    });
    // Anything the result depends on changed: recompute (cached parts return at once).
    Effect::new(move |_| {
        let _ = (ctx.inputs(), ctx.t.get(), ctx.gamma.get(), ctx.roles.get());
        if ctx.session.with_value(Option::is_some) {
            schedule(ctx);
        }
    });
    // First result shown: the page is ready.
    Effect::new(move |_| {
        if ctx.results.with(Option::is_some) && ctx.state.get_untracked() == "loading" {
            ctx.state.set("ready".into());
            ctx.message.set(String::new());
        }
    });

    let on_task = move |ev: leptos::ev::Event| {
        let task = event_target_value(&ev);
        ctx.task.set(task.clone());
        if let Some(p) = presets.get_untracked().into_iter().find(|p| p.task == task) {
            load_preset(ctx, &p);
        }
        if let Err(e) = select_task(ctx, &task) {
            ctx.state.set("error".into());
            ctx.message.set(e);
        }
    };
    let on_preset = move |ev: leptos::ev::Event| {
        let Ok(i) = event_target_value(&ev).parse::<usize>() else { return };
        let chosen = presets.with_untracked(|p| p.iter().filter(|p| p.task == ctx.task.get_untracked()).nth(i).cloned());
        if let Some(p) = chosen {
            load_preset(ctx, &p);
        }
    };

    view! {
        <header>
            <h1>"IM-BERT, live"</h1>
            <p class="lede">
                "BERT stacks layers as h" <sub>"t"</sub> " = φ" <sub>"t"</sub> "(h" <sub>"t-1"</sub>
                "). IM-BERT solves the implicit Euler step h" <sub>"t"</sub> " = h" <sub>"t-1"</sub>
                " + φ" <sub>"t"</sub> "(h" <sub>"t"</sub> ") with T gradient steps; the paper says this damps how far a small change in the "
                "input can push the hidden states. EX-BERT, h" <sub>"t"</sub> " = h" <sub>"t-1"</sub> " + φ"
                <sub>"t"</sub> "(h" <sub>"t-1"</sub> "), has the skip connection without the solve. "
                "Perturb a sentence and see which models hold their verdict."
            </p>
            <div class="status-line">
                <span id="runtime" data-runtime=move || runtime_id.get()>"backend: " {move || runtime_label.get()}</span>
                <span id="status" data-state=move || ctx.state.get()>{move || ctx.message.get()}</span>
                <Show when=move || { let (got, total) = ctx.progress.get(); total > 0 && got < total }>
                    <progress max=move || ctx.progress.get().1 as f64 value=move || ctx.progress.get().0 as f64></progress>
                    <span class="muted">{move || { let (g, t) = ctx.progress.get(); format!("{:.1} / {:.1} MB", g as f64 / 1e6, t as f64 / 1e6) }}</span>
                </Show>
            </div>
        </header>
        <main>
            <section class="inputs">
                <label>"Task "
                    <select id="task" prop:value=move || ctx.task.get() on:change=on_task>
                        {move || ctx.tasks.get().into_iter().map(|t| {
                            let name = task_name(&t);
                            view! { <option value=t.clone() selected=t == ctx.task.get_untracked()>{name}</option> }
                        }).collect_view()}
                    </select>
                </label>
                <label>"Preset "
                    <select id="preset" on:change=on_preset>
                        <option value="" disabled=true selected=true>"choose an example…"</option>
                        {move || presets.get().into_iter().filter(|p| p.task == ctx.task.get()).enumerate()
                            .map(|(i, p)| view! { <option value=i.to_string()>{p.title}</option> }).collect_view()}
                    </select>
                </label>
                <label>{move || if ctx.is_pair() { "Premise" } else { "Sentence" }}
                    <textarea id="text-a" rows="3" maxlength="5000"
                        prop:value=move || ctx.text_a.get()
                        on:input=move |ev| ctx.text_a.set(event_target_value(&ev))></textarea>
                </label>
                <Show when=move || ctx.is_pair()>
                    <label>"Hypothesis"
                        <textarea id="text-b" rows="2" maxlength="5000"
                            prop:value=move || ctx.text_b.get()
                            on:input=move |ev| ctx.text_b.set(event_target_value(&ev))></textarea>
                    </label>
                </Show>
                <div class="perturbs">
                    <span class="muted">"word level:"</span>
                    {Op::ALL.into_iter().filter(|o| o.level() == "word").map(|op| perturb_button(ctx, op)).collect_view()}
                    <span class="muted">"sentence level:"</span>
                    {Op::ALL.into_iter().filter(|o| o.level() == "sentence").map(|op| perturb_button(ctx, op)).collect_view()}
                </div>
                <label>{move || format!("Perturbed {} — {}", if ctx.is_pair() { "hypothesis" } else { "sentence" }, ctx.perturbation.get())}
                    <textarea id="perturbed-text" rows="3" maxlength="5000"
                        prop:value=move || ctx.perturbed.get()
                        on:input=move |ev| {
                            ctx.last_op.set(None);
                            ctx.perturbed_is_copy.set(false);
                            ctx.perturbation.set("edited by hand".into());
                            ctx.perturbed.set(event_target_value(&ev));
                        }></textarea>
                </label>
                <p id="diff" class="diff">
                    {move || {
                        let clean = if ctx.is_pair() { ctx.text_b.get() } else { ctx.text_a.get() };
                        perturb::diff_words(&clean, &ctx.perturbed.get()).into_iter().map(|span| match span.op {
                            DiffOp::Equal => view! { <span>{span.text}" "</span> }.into_any(),
                            DiffOp::Delete => view! { <del>{span.text}</del>" " }.into_any(),
                            DiffOp::Insert => view! { <ins>{span.text}</ins>" " }.into_any(),
                        }).collect_view()
                    }}
                </p>
                <div class="controls">
                    <label>{move || format!("T = {} ", ctx.t.get())}
                        <input id="t-slider" type="range" min="0" max="15" step="1"
                            prop:value=move || ctx.t.get().to_string()
                            on:input=move |ev| if let Ok(t) = event_target_value(&ev).parse() { ctx.t.set(t) } />
                    </label>
                    <label>"γ "
                        <input id="gamma" type="number" min="0" max="1" step="0.05"
                            prop:value=move || ctx.gamma.get().to_string()
                            on:change=move |ev| set_gamma(ctx, &event_target_value(&ev)) />
                    </label>
                    <span class="muted">"T = 0 keeps only the explicit start z" <sub>"0"</sub> " = h + φ(h)."</span>
                </div>
                <ul class="cards">{move || ctx.cards.get().into_iter().map(|c| view! { <li>{c}</li> }).collect_view()}</ul>
            </section>
            <section id="results"
                data-key=move || ctx.results.with(|r| r.as_ref().map(|r| r.key.clone()).unwrap_or_default())
                data-busy=move || ctx.busy.get().to_string()>
                {move || ctx.results.get().map(|r| results_view(&r))}
            </section>
        </main>
        <footer class="muted">
            "Models run in your browser (burn on WebGPU, or burn-ndarray on the CPU). Accuracy beside every robustness claim: see the model cards. "
            <a href="https://aclanthology.org/2024.emnlp-main.907/">"IM-BERT (EMNLP 2024)"</a>
        </footer>
    }
}

/// gamma from the number box; out-of-range or non-numeric input is ignored.
fn set_gamma(ctx: Ctx, value: &str) {
    match value.trim().parse::<f64>() {
        Ok(g) if g.is_finite() && (0.0..=1.0).contains(&g) => ctx.gamma.set(g),
        _ => {}
    }
}

fn load_preset(ctx: Ctx, p: &Preset) {
    ctx.text_a.set(p.clean.text_a.clone());
    ctx.text_b.set(p.clean.text_b.clone().unwrap_or_default());
    ctx.last_op.set(None);
    match &p.adversarial {
        Some(adv) => {
            let text = if ctx.is_pair() { adv.text_b.clone().unwrap_or_default() } else { adv.text_a.clone() };
            ctx.perturbed_is_copy.set(false);
            ctx.perturbed.set(text);
            ctx.perturbation.set(p.title.split(':').next().unwrap_or("AdvGLUE").to_string());
            if ctx.is_pair() && adv.text_a != p.clean.text_a {
                // AdvGLUE perturbed the premise: show that one against its original.
                ctx.text_b.set(p.clean.text_b.clone().unwrap_or_default());
            }
        }
        None => {
            ctx.perturbed_is_copy.set(true);
            ctx.perturbed.set(ctx.source());
            ctx.perturbation.set("none yet: pick a perturbation".into());
        }
    }
}

fn perturb_button(ctx: Ctx, op: Op) -> impl IntoView {
    view! {
        <button data-perturb=op.key() title=format!("{} level", op.level()) on:click=move |_| {
            let seed = ctx.seed.get_untracked() + 1;
            ctx.seed.set(seed);
            ctx.last_op.set(Some((op, seed)));
            apply(&ctx, op, seed);
        }>{op.label()}</button>
    }
}

fn results_view(r: &Results) -> impl IntoView {
    let labels = r.labels.clone();
    let verdicts = r.parts.iter().map(|(a, analysis)| {
        let flipped = analysis.flipped();
        let role = a.role;
        let card = |which: &'static str, v: &crate::engine::Verdict| {
            let probs: Vec<String> = v.probs.iter().map(|p| format!("{p:.4}")).collect();
            let best = v.label();
            let truncated = v.truncated;
            view! {
                <div class="verdict" data-verdict=format!("{}-{which}", role.key()) data-probs=probs.join(",")>
                    <div class="verdict-title">{which}</div>
                    {v.probs.iter().enumerate().map(|(i, p)| {
                        let name = labels.get(i).cloned().unwrap_or_else(|| format!("class {i}"));
                        view! {
                            <div class="bar-row" class:best=i == best>
                                <span class="bar-label">{name}</span>
                                <span class="bar"><span class=format!("fill {}", role.key()) style=format!("width:{:.1}%", p * 100.0)></span></span>
                                <span class="bar-value">{format!("{:.1}%", p * 100.0)}</span>
                            </div>
                        }
                    }).collect_view()}
                    {truncated.then(|| view! { <div class="muted">"input cut to 128 tokens"</div> })}
                </div>
            }
        };
        view! {
            <div class="part">
                <h3 class=role.key()>{role.name()}
                    <span class="spec">{a.spec.to_spec_string()}</span>
                    <span class="flip" data-flipped=flipped.to_string()>{if flipped { "verdict flipped" } else { "verdict held" }}</span>
                </h3>
                <div class="pair">{card("clean", &analysis.clean)}{card("perturbed", &analysis.perturbed)}</div>
            </div>
        }
    }).collect_view();

    let drift = |pick: fn(&Analysis) -> &Vec<f32>, title: &'static str| {
        let series: Vec<Series> = r.parts.iter().map(|(a, an)| Series {
            name: a.role.name().into(),
            class: a.role.key(),
            dashed: false,
            points: indexed(pick(an)),
        }).collect();
        chart(title, "layer (0 = embeddings)", series, false)
    };
    let residual_series: Vec<Series> = r
        .parts
        .iter()
        .filter(|(a, _)| a.role == Role::Im)
        .flat_map(|(_, an)| an.residuals.iter())
        .flat_map(|trace| {
            [
                Series { name: format!("layer {} clean", trace.layer), class: layer_class(trace.layer), dashed: false, points: indexed(&trace.clean) },
                Series { name: format!("layer {} perturbed", trace.layer), class: layer_class(trace.layer), dashed: true, points: indexed(&trace.perturbed) },
            ]
        })
        .collect();
    let has_residuals = !residual_series.is_empty();
    view! {
        <div class="verdicts">{verdicts}</div>
        <p class="muted">{format!("computed in {:.0} ms (cached parts are instant)", r.millis)}</p>
        <div id="drift-chart" class="charts">
            {drift(|a| &a.cls_drift, "[CLS] cosine distance, clean vs perturbed")}
            {drift(|a| &a.mean_drift, "mean-token L2 distance, clean vs perturbed")}
        </div>
        <div id="residual-chart" class="charts">
            {if has_residuals {
                chart("IM residual ||z − h − φ(z)||² per iteration (solid clean, dashed perturbed)", "iteration", residual_series, true).into_any()
            } else {
                view! { <p class="muted">"T = 0: no iterations, so no residual to show."</p> }.into_any()
            }}
        </div>
    }
}

/// One shade per IM layer (CSS classes `l0`..`l11`), so the layers' residuals can be told apart.
fn layer_class(layer: usize) -> &'static str {
    const CLASSES: [&str; 12] = ["l0", "l1", "l2", "l3", "l4", "l5", "l6", "l7", "l8", "l9", "l10", "l11"];
    CLASSES[layer % CLASSES.len()]
}

fn chart(title: &'static str, x_label: &'static str, series: Vec<Series>, log_y: bool) -> impl IntoView {
    let frame = Frame::fit(420.0, 220.0, &series, log_y);
    let (w, h) = (frame.width, frame.height);
    let bottom = h - frame.bottom;
    let legend: Vec<(String, &'static str, bool)> = series.iter().map(|s| (s.name.clone(), s.class, s.dashed)).collect();
    view! {
        <figure>
            <figcaption>{title}</figcaption>
            <svg viewBox=format!("0 0 {w} {h}") width=w.to_string() height=h.to_string() role="img">
                <line class="axis" x1=frame.left y1=bottom x2=w - crate::charts::RIGHT y2=bottom />
                <line class="axis" x1=frame.left y1=crate::charts::TOP x2=frame.left y2=bottom />
                {frame.y_ticks().into_iter().map(|(v, label)| {
                    let y = frame.py(v);
                    view! {
                        <line class="grid" x1=frame.left y1=y x2=w - crate::charts::RIGHT y2=y />
                        <text class="tick" x=frame.left - 4.0 y=y + 3.0 text-anchor="end">{label}</text>
                    }
                }).collect_view()}
                {frame.x_ticks(8).into_iter().map(|v| view! {
                    <text class="tick" x=frame.px(v) y=bottom + 14.0 text-anchor="middle">{format!("{v}")}</text>
                }).collect_view()}
                <text class="tick" x=(frame.left + w) / 2.0 y=h - 2.0 text-anchor="middle">{x_label}</text>
                {series.iter().map(|s| view! {
                    <path class=format!("line {}", s.class) class:dashed=s.dashed d=frame.path(&s.points) fill="none" />
                }).collect_view()}
            </svg>
            <div class="legend">
                {legend.into_iter().map(|(name, class, dashed)| view! {
                    <span class=format!("key {class}") class:dashed=dashed>{name}</span>
                }).collect_view()}
            </div>
        </figure>
    }
}
