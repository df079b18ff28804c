//! The native side of the browser tests (`web/tests/browser.rs`): token ids, logits and IM
//! residuals of the tiny fixture model, and the output of every text perturbation, computed here
//! and committed as `tests/fixtures/web_reference.json`. The browser computes the same from the
//! same inputs (read from that file) on burn-ndarray and on WebGPU and must agree.
//!
//! This test recomputes everything and compares it with the committed file, so the file cannot go
//! stale silently. After a deliberate change, regenerate it with
//! `IMBERT_REGENERATE=1 cargo test -p imbert-tests --test web_reference`.
//!
//! The tiny model ships only a `vocab.txt`, and the browser has no file system, so the file also
//! carries the tokenizer built from it, serialised as `tokenizer.json`.

use std::collections::HashMap;

use burn::tensor::Tensor;
use imbert_tests::*;
use serde_json::{json, Value};
use shared::io::checkpoint::load_classifier;
use shared::robustness::neighbours::WordNeighbours;
use shared::robustness::perturb::{self, Perturbation};
use shared::{BertTokenizer, ConnectionSpec, ForwardOptions};

const FILE: &str = "web_reference.json";
/// The tiny model's position embeddings cover 32 tokens.
const MAX_LEN: usize = 32;
/// The paper's fixed step, the recommended configuration (on WebGPU its backtracking decides on
/// the device: the browser cannot read back mid-forward) and a step that backtracking must halve.
const CONNECTIONS: [&str; 5] = [
    "bert",
    "ex",
    "im:T=5,gamma=0.1",
    shared::RECOMMENDED_IM,
    "im:T=4,gamma=4,grad=detached,step=backtrack,tol=0.2",
];
/// Native-vs-committed tolerance on logits and residuals (the browser allows 1e-3).
const TOLERANCE: f64 = 1e-5;

/// Tokenizer cases: `(text_a, text_b)`. Accents, emoji, CJK, markup, control whitespace, pairs,
/// and inputs long enough to be truncated.
fn tokenizer_cases() -> Vec<(String, Option<String>)> {
    let long = "the cat sat on the mat and the dog sat on the cat . ".repeat(4);
    let cases: [(&str, Option<&str>); 12] = [
        ("the movie was great !", None),
        ("The FILM is Really BORING.", None),
        ("Café résumé naïve façade", None),
        ("I ❤️ this movie 😂😂", None),
        ("東京は日本の首都です。", None),
        ("  the\tdog\n\nsat   on\u{00a0}the mat  ", None),
        ("<script>alert(1)</script>", None),
        ("", None),
        ("a man plays with the dog", Some("who sat on the mat ?")),
        ("what is the question?", Some("the answer is no… or is it?")),
        (&long, None),
        (&long, Some("a short question : why ?")),
    ];
    cases.iter().map(|(a, b)| (a.to_string(), b.map(str::to_string))).collect()
}

/// Batches run through the model: several sentences padded to one length, and a pair batch.
fn logit_batches() -> Vec<Vec<(String, Option<String>)>> {
    let one = |a: &str, b: Option<&str>| (a.to_string(), b.map(str::to_string));
    vec![
        vec![
            one("the movie was great !", None),
            one("a boring , dull film that i hate", None),
            one("I ❤️ this movie 😂😂", None),
        ],
        vec![
            one("a man plays with the dog", Some("who sat on the mat ?")),
            one("what is the question ?", Some("no")),
        ],
    ]
}

/// A small synonym index: two tight clusters and an unrelated word, as `(word, embedding row)`.
fn neighbour_rows() -> Vec<(&'static str, [f32; 3])> {
    vec![
        ("[PAD]", [0.0, 0.0, 1.0]),
        ("good", [1.0, 0.1, 0.0]),
        ("great", [0.9, 0.2, 0.0]),
        ("fine", [0.8, 0.0, 0.3]),
        ("bad", [-1.0, 0.1, 0.0]),
        ("awful", [-0.9, 0.0, 0.1]),
        ("dull", [-0.8, 0.2, 0.1]),
        ("table", [0.0, 1.0, 0.0]),
    ]
}

fn neighbour_index(rows: &[(&str, [f32; 3])]) -> WordNeighbours {
    let vocab: HashMap<String, u32> =
        rows.iter().enumerate().map(|(i, (w, _))| (w.to_string(), i as u32)).collect();
    let flat: Vec<f32> = rows.iter().flat_map(|(_, r)| *r).collect();
    WordNeighbours::new(&flat, 3, &vocab).unwrap()
}

const PERTURB_TEXTS: [&str; 3] = [
    "The film is good but the ending was bad .",
    "A Good, GREAT movie; truly awful acting and a dull plot!",
    "Café owners are fine 😀 with the new table",
];

/// Every perturbation of every text for a few seeds: `{kind, text, seed, output}`.
fn perturbations(index: &WordNeighbours) -> Vec<Value> {
    let mut out = Vec::new();
    for text in PERTURB_TEXTS {
        for seed in [0u64, 1, 42] {
            let all: [(&str, Perturbation); 6] = [
                ("typo", perturb::typo(text, 2, seed)),
                ("synonym", perturb::synonym(text, index, 2, 2, 0.5, seed)),
                ("delete", perturb::delete_word(text, 2, seed)),
                ("distractor", perturb::distractor(text, seed)),
                ("negation", perturb::negation_contrast(text, seed)),
                ("checklist", perturb::checklist_template(text, seed)),
            ];
            for (kind, p) in all {
                out.push(json!({ "kind": kind, "text": text, "seed": seed, "output": p }));
            }
        }
    }
    out
}

fn floats<const D: usize>(t: Tensor<Cpu, D>) -> Vec<f32> {
    t.into_data().convert::<f32>().into_vec().unwrap()
}

/// Everything the browser checks, computed natively.
fn compute() -> Value {
    let tok = BertTokenizer::from_vocab_file(&fixture("tiny-bert/vocab.txt"), true).unwrap();
    let tokenizer_json = tok.inner().to_string(false).unwrap();
    // The browser reads the serialised tokenizer: it must tokenise exactly like the original.
    let reread = BertTokenizer::from_json_bytes(tokenizer_json.as_bytes()).unwrap();

    let encode = |t: &BertTokenizer, items: &[(String, Option<String>)]| {
        let refs: Vec<(&str, Option<&str>)> =
            items.iter().map(|(a, b)| (a.as_str(), b.as_deref())).collect();
        t.encode(&refs, MAX_LEN).unwrap()
    };
    let tokens: Vec<Value> = tokenizer_cases()
        .into_iter()
        .map(|(a, b)| {
            let item = [(a.clone(), b.clone())];
            let enc = encode(&tok, &item);
            assert_eq!(
                enc,
                encode(&reread, &item),
                "serialised tokenizer differs on {a:?} / {b:?}"
            );
            json!({
                "text_a": a, "text_b": b,
                "input_ids": enc.input_ids, "token_type_ids": enc.token_type_ids,
                "tokens": enc.tokens[0],
            })
        })
        .collect();

    let device = Default::default();
    let (base, report) = load_classifier::<Cpu>(&fixture("tiny-bert"), None, &device).unwrap();
    assert!(report.initialized_fresh.is_empty(), "{report:?}");
    let mut models = Vec::new();
    for spec in CONNECTIONS {
        let model = base.clone().with_connections(&ConnectionSpec::parse(spec).unwrap()).unwrap();
        let mut batches = Vec::new();
        for items in logit_batches() {
            let enc = encode(&tok, &items);
            let out = model.forward(
                &enc.to_input::<Cpu>(&device),
                ForwardOptions { im_residuals: true, ..Default::default() },
            );
            let residuals: Vec<Value> = out
                .im_residuals
                .into_iter()
                .map(|(layer, per_iteration)| {
                    let values: Vec<Vec<f32>> = per_iteration.into_iter().map(floats).collect();
                    json!({ "layer": layer, "per_iteration": values })
                })
                .collect();
            let logits = out.logits.unwrap();
            let [batch, labels] = logits.dims();
            batches.push(json!({
                "items": items.iter().map(|(a, b)| json!([a, b])).collect::<Vec<_>>(),
                "shape": [batch, labels],
                "logits": floats(logits),
                "im_residuals": residuals,
            }));
        }
        models.push(json!({ "connection": spec, "batches": batches }));
    }

    let rows = neighbour_rows();
    let index = neighbour_index(&rows);
    json!({
        "about": "Native reference for web/tests/browser.rs; written by tests/web_reference.rs \
                  (IMBERT_REGENERATE=1 cargo test -p imbert-tests --test web_reference).",
        "model": "tests/fixtures/tiny-bert",
        "max_len": MAX_LEN,
        "tokenizer_json": tokenizer_json,
        "tokenizer_cases": tokens,
        "models": models,
        "neighbours": rows.iter().map(|(w, r)| json!({ "word": w, "row": r })).collect::<Vec<_>>(),
        "perturbations": perturbations(&index),
    })
}

/// Compares `ours` with the committed `theirs`: numbers within [`TOLERANCE`], all else exactly.
/// Returns the paths that differ.
fn differences(ours: &Value, theirs: &Value, path: &str, out: &mut Vec<String>) {
    match (ours, theirs) {
        (Value::Number(a), Value::Number(b)) => {
            let (a, b) = (a.as_f64().unwrap(), b.as_f64().unwrap());
            if (a - b).abs() > TOLERANCE * b.abs().max(1.0) {
                out.push(format!("{path}: {a} != {b}"));
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                differences(x, y, &format!("{path}[{i}]"), out);
            }
        }
        (Value::Object(a), Value::Object(b)) if a.len() == b.len() => {
            for (k, x) in a {
                match b.get(k) {
                    Some(y) => differences(x, y, &format!("{path}.{k}"), out),
                    None => out.push(format!("{path}.{k}: missing from the committed file")),
                }
            }
        }
        // The tokenizer is compared by meaning, not by serialisation details.
        (Value::String(a), Value::String(b)) if path.ends_with("tokenizer_json") => {
            let (a, b): (Value, Value) =
                (serde_json::from_str(a).unwrap(), serde_json::from_str(b).unwrap());
            if a != b {
                out.push(format!("{path}: the serialised tokenizer changed"));
            }
        }
        (a, b) if a == b => {}
        (a, b) => out.push(format!("{path}: {} != {}", short(a), short(b))),
    }
}

fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 120 {
        format!("{}...", s.chars().take(120).collect::<String>())
    } else {
        s
    }
}

#[test]
fn web_reference_is_up_to_date() {
    let ours = compute();
    let path = fixture(FILE);
    if std::env::var_os("IMBERT_REGENERATE").is_some_and(|v| v == "1") {
        std::fs::write(&path, serde_json::to_string_pretty(&ours).unwrap() + "\n").unwrap();
        eprintln!("wrote {}", path.display());
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; create it with IMBERT_REGENERATE=1 cargo test -p imbert-tests \
             --test web_reference",
            path.display()
        )
    });
    let theirs: Value = serde_json::from_str(&committed).unwrap();
    let mut diffs = Vec::new();
    differences(&ours, &theirs, "$", &mut diffs);
    assert!(
        diffs.is_empty(),
        "{} is stale ({} differences; regenerate with IMBERT_REGENERATE=1 \
         if the change is intended):\n{}",
        path.display(),
        diffs.len(),
        diffs.iter().take(20).cloned().collect::<Vec<_>>().join("\n")
    );
}

/// The perturbations in the file do what they claim (the browser checks the same on its side).
#[test]
fn reference_perturbations_are_sound() {
    let index = neighbour_index(&neighbour_rows());
    for case in perturbations(&index) {
        let p: Perturbation = serde_json::from_value(case["output"].clone()).unwrap();
        let text = case["text"].as_str().unwrap();
        assert!(!p.edits.is_empty(), "{case}");
        assert_ne!(p.text, text, "{case}");
    }
}
