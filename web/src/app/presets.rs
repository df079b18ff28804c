//! Example inputs: a few hand-written ones, and AdvGLUE dev items with their clean originals when
//! the site has `data/dev_ann.json` (read with `shared::data`'s AdvGLUE parser).

use std::path::Path;

use shared::data::{self, AdvExample, ReadOptions, Task};

use crate::engine::Input;

/// AdvGLUE items shown per task: enough to browse, few enough for a select box.
const PER_TASK: usize = 60;

/// Clean text, and optionally its AdvGLUE adversarial version.
#[derive(Debug, Clone, PartialEq)]
pub struct Preset {
    pub task: Task,
    pub title: String,
    pub clean: Input,
    pub adversarial: Option<Input>,
}

/// The task as the task picker names it.
pub fn describe(task: Task) -> &'static str {
    match task {
        Task::Sst2 => "SST-2 sentiment",
        Task::Rte => "RTE entailment (premise + hypothesis)",
        Task::Mnli => "MNLI inference (premise + hypothesis)",
        Task::MnliMismatched => "MNLI mismatched (premise + hypothesis)",
        Task::Qnli => "QNLI (question + sentence)",
        Task::Qqp => "QQP paraphrase (question pair)",
    }
}

pub fn hand_written() -> Vec<Preset> {
    let single = |text: &str, title: &str| Preset {
        task: Task::Sst2,
        title: title.into(),
        clean: Input::new(text, None),
        adversarial: None,
    };
    let pair = |task: Task, a: &str, b: &str, title: &str| Preset {
        task,
        title: title.into(),
        clean: Input::new(a, Some(b.into())),
        adversarial: None,
    };
    let pairs = [Task::Rte, Task::Mnli].into_iter().flat_map(|task| {
        [
            pair(
                task,
                "A man is playing a guitar on a crowded street.",
                "A man is playing music.",
                "hand-written: entailment",
            ),
            pair(
                task,
                "The company sold its factory in Ohio last year.",
                "The company bought a factory.",
                "hand-written: contradiction",
            ),
        ]
    });
    [
        single("a gripping, heartfelt film with a superb cast .", "hand-written: praise"),
        single("the plot is thin and the jokes fall flat .", "hand-written: pan"),
        single("it is not a bad movie , just a forgettable one .", "hand-written: mixed"),
    ]
    .into_iter()
    .chain(pairs)
    .collect()
}

/// The first [`PER_TASK`] items of each task in AdvGLUE's annotated dev file, `url` naming it in
/// errors. Malformed items are skipped; the page keeps its hand-written presets either way.
pub fn advglue(url: &str, json: &str) -> Vec<Preset> {
    let Ok(loaded) =
        data::parse_advglue_json(Path::new(url), json.as_bytes(), &ReadOptions::skipping())
    else {
        return Vec::new();
    };
    let mut per_task = std::collections::HashMap::<Task, usize>::new();
    loaded
        .rows
        .into_iter()
        .filter(|item| {
            let seen = per_task.entry(item.task).or_default();
            *seen += 1;
            *seen <= PER_TASK && shows_as_attacked(item)
        })
        .map(advglue_preset)
        .collect()
}

/// The page perturbs the hypothesis of a pair; an item whose attack changed the premise cannot
/// be shown as it was attacked, so it is left out.
fn shows_as_attacked(item: &AdvExample) -> bool {
    !item.task.is_pair() || item.original_a.is_none()
}

fn advglue_preset(item: AdvExample) -> Preset {
    let AdvExample { example, task, method, level, original_a, original_b } = item;
    let clean = Input::new(
        original_a.unwrap_or_else(|| example.text_a.clone()),
        original_b.or_else(|| example.text_b.clone()),
    );
    let level = level.map_or("", |l| l.name());
    let snippet: String = example.text_a.chars().take(60).collect();
    Preset {
        task,
        title: format!("AdvGLUE {level} · {}: {snippet}…", method.unwrap_or_default()),
        clean,
        adversarial: Some(Input::new(example.text_a, example.text_b)),
    }
}
