//! `trainer flip` end to end on MiniLM with a fresh (random, saved) two-class head: every edit it
//! reports flips the model when the edited text is scored again in this process, each compared
//! connection's verdict is what its flag says, and the budgets hold. (The tiny test BERT gives
//! the same verdict to every text, so nothing there can flip.)

mod common;

use std::path::PathBuf;
use std::sync::OnceLock;

use burn::tensor::backend::Backend;
use common::*;
use serde_json::Value;
use shared::io::checkpoint::{load_classifier, save_classifier};
use shared::robustness::classify::{argmax, probabilities};

type Cpu = burn::backend::NdArray<f32>;

/// `label text` lines, as the `.txt` reader takes them.
const TEXTS: &[&str] = &[
    "1 the movie was good and really fun .",
    "0 a boring film , very dull and bad .",
    "1 i love this story , the best film of the year",
    "0 the worst movie , i hate it",
];

fn minilm_dir() -> PathBuf {
    let dir = std::env::var_os("IMBERT_MINILM")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("models/all-minilm-l6-v2"));
    assert!(
        dir.join("model.safetensors").exists(),
        "MiniLM model not found at {}: run `make model` or set IMBERT_MINILM",
        dir.display()
    );
    dir
}

/// The seed of the fresh head. Unseeded, the head changed from run to run and some draws gave
/// every text so wide a margin that no edit within the budget flipped it (seed 5 still does;
/// seed 0 gives a flip on all four texts).
const HEAD_SEED: u64 = 0;

/// MiniLM with a fresh two-class head, saved once as an HF directory so that the CLI and this
/// process score the same weights.
fn minilm_with_a_head() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = scratch("flip-minilm");
        let minilm = minilm_dir();
        let device = Default::default();
        Cpu::seed(&device, HEAD_SEED);
        let (model, _) = load_classifier::<Cpu>(&minilm, Some(2), &device).unwrap();
        save_classifier(&model, &dir, Some(&minilm)).unwrap();
        dir
    })
    .clone()
}
const QUERIES: u64 = 80;

fn read_json(path: &std::path::Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect()
}

#[test]
fn every_reported_flip_flips_the_model_and_comparisons_match_their_flags() {
    let run = scratch("flip-texts");
    std::fs::create_dir_all(&run).unwrap();
    let best = minilm_with_a_head();
    let data = run.join("texts.txt");
    std::fs::write(&data, TEXTS.join("\n")).unwrap();
    let json = run.join("flip.json");
    let queries = QUERIES.to_string();
    let args =
        ["flip", "--task", "sst2", "--compare", "ex", "--compare", "im:T=2", "--queries", &queries];
    let paths = ["--model", best.to_str().unwrap(), "--data", data.to_str().unwrap()];
    let out = ok(trainer(&[&args[..], &paths, &["--json", json.to_str().unwrap()]].concat(), &[]));
    let report = read_json(&json);
    assert!(out.contains("edits found:"), "{out}");

    let device = Default::default();
    let tokenizer = shared::BertTokenizer::from_dir(&best).unwrap();
    let (model, _) = load_classifier::<Cpu>(&best, None, &device).unwrap();
    let score = |text: &str| {
        let items = [(text.to_string(), None)];
        probabilities(&model, &tokenizer, &items, 128, 1).unwrap().remove(0)
    };
    let close = |a: &[f32], b: &[f32]| a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-5);

    let records = report["records"].as_array().unwrap();
    assert_eq!(records.len(), TEXTS.len());
    let mut found = 0;
    for r in records {
        let o = &r["outcome"];
        assert!(o["queries"].as_u64().unwrap() <= QUERIES, "{r}");
        let clean = floats(&o["clean_probabilities"]);
        assert!(close(&clean, &score(r["text"].as_str().unwrap())), "{r}");
        if o["status"] != "flipped" {
            assert!(r["compared"].as_array().unwrap().is_empty(), "{r}");
            continue;
        }
        found += 1;
        let b = &o["best"];
        let edited = b["perturbation"]["text"].as_str().unwrap();
        let p = score(edited);
        assert!(close(&p, &floats(&b["probabilities"])), "{r}");
        assert_ne!(argmax(&p), argmax(&clean), "the reported edit flips the model: {r}");
        let edits = b["num_edits"].as_u64().unwrap();
        assert!((1..=3).contains(&edits), "{r}");
        let compared = r["compared"].as_array().unwrap();
        assert_eq!(compared.len(), 2);
        assert!(compared[0]["model"].as_str().unwrap().ends_with("(ex)"), "{r}");
        for v in compared {
            let flipped = v["clean_label"] != v["edited_label"];
            assert_eq!(v["flipped"], flipped, "{v}");
            let (c, e) = (floats(&v["clean_probabilities"]), floats(&v["edited_probabilities"]));
            assert_eq!(v["clean_label"], argmax(&c));
            assert_eq!(v["edited_label"], argmax(&e));
        }
    }
    assert_eq!(report["found"], found);
    assert!(found > 0, "no flip found on any text: the checks above never ran\n{out}");
}

#[test]
fn word_edits_only_when_sentence_edits_are_off() {
    let run = scratch("flip-words");
    std::fs::create_dir_all(&run).unwrap();
    let json = run.join("flip.json");
    let best = minilm_with_a_head();
    let text = "the movie was good and really fun .";
    let args =
        ["flip", "--task", "sst2", "--no-sentence-edits", "--max-edits", "2", "--text", text];
    let paths = ["--model", best.to_str().unwrap(), "--json", json.to_str().unwrap()];
    ok(trainer(&[&args[..], &paths].concat(), &[]));
    let report = read_json(&json);
    let o = &report["records"][0]["outcome"];
    let word_kinds = ["delete_word", "synonym"];
    let edits = o["best"]["perturbation"]["edits"].as_array().expect("a flip or the closest try");
    for e in edits {
        let kind = &e["kind"];
        let word = kind.get("typo").is_some() || word_kinds.contains(&kind.as_str().unwrap_or(""));
        assert!(word, "a sentence edit with --no-sentence-edits: {e}");
    }
    assert!((1..=2).contains(&o["best"]["num_edits"].as_u64().unwrap()), "{o}");
}
