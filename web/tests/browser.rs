//! The browser build computes what the native build computes. Reference values come from
//! `tests/fixtures/web_reference.json`, written natively by `tests/web_reference.rs`:
//!
//! - token ids of `BertTokenizer::from_json_bytes` for varied inputs (accents, emoji, CJK, pairs,
//!   truncation);
//! - logits and IM residuals of the tiny fixture model for BERT, EX and IM (T=5, gamma=0.1) on
//!   burn-ndarray and, in the browser, on WebGPU, within 1e-3;
//! - every perturbation: deterministic for a seed, equal to the native output, and changing what
//!   it claims to.
//! - a small random RoBERTa (`tests/fixtures/tiny-roberta`): byte-level BPE ids and logits equal
//!   transformers' (`tiny_roberta_reference.safetensors`), on burn-ndarray and WebGPU.
//!
//! In the browser (headless Chromium, see `.cargo/config.toml` and `web/webdriver.json`):
//! `cargo test --release -p web --target wasm32-unknown-unknown --test browser` (`make
//! browser-test`; --release shares its build with the demo's). Natively, everything but
//! the WebGPU test runs as ordinary tests.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use burn::tensor::backend::Backend;
use burn::tensor::Tensor;
use safetensors::{Dtype, SafeTensors};
use serde_json::Value;
use shared::io::checkpoint::load_from_tensors;
use shared::io::tensor_file::HostTensor;
use shared::robustness::neighbours::WordNeighbours;
use shared::robustness::perturb::{self, EditKind, Perturbation};
use shared::{
    BertClassifier, BertConfig, BertTokenizer, ConnectionSpec, EncodedBatch, ForwardOptions,
};

#[cfg(target_arch = "wasm32")]
wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);

const REFERENCE: &str = include_str!("../../tests/fixtures/web_reference.json");
const CONFIG: &[u8] = include_bytes!("../../tests/fixtures/tiny-bert/config.json");
const WEIGHTS: &[u8] = include_bytes!("../../tests/fixtures/tiny-bert/model.safetensors");
/// A small random RoBERTa and transformers' values for it (`tests/python/roberta_reference.py`).
const ROBERTA_CONFIG: &[u8] = include_bytes!("../../tests/fixtures/tiny-roberta/config.json");
const ROBERTA_WEIGHTS: &[u8] =
    include_bytes!("../../tests/fixtures/tiny-roberta/model.safetensors");
const ROBERTA_TOKENIZER: &[u8] = include_bytes!("../../tests/fixtures/tiny-roberta/tokenizer.json");
const ROBERTA_ITEMS: &str = include_str!("../../tests/fixtures/tiny_roberta_reference.json");
const ROBERTA_REFERENCE: &[u8] =
    include_bytes!("../../tests/fixtures/tiny_roberta_reference.safetensors");
/// Browser-vs-native tolerance on logits (absolute) and residuals (relative to max(1, |x|)).
const TOLERANCE: f32 = 1e-3;

type Cpu = burn::backend::NdArray<f32>;

fn reference() -> Value {
    serde_json::from_str(REFERENCE).expect("web_reference.json parses")
}

fn tokenizer(reference: &Value) -> BertTokenizer {
    BertTokenizer::from_json_bytes(reference["tokenizer_json"].as_str().unwrap().as_bytes())
        .unwrap()
}

fn ints(v: &Value) -> Vec<i64> {
    v.as_array().unwrap().iter().map(|x| x.as_i64().unwrap()).collect()
}

fn f32s(v: &Value) -> Vec<f32> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect()
}

fn text_pair(v: &Value) -> (String, Option<String>) {
    (v[0].as_str().unwrap().to_string(), v[1].as_str().map(str::to_string))
}

fn encode(tok: &BertTokenizer, items: &[(String, Option<String>)], max_len: usize) -> EncodedBatch {
    let refs: Vec<(&str, Option<&str>)> =
        items.iter().map(|(a, b)| (a.as_str(), b.as_deref())).collect();
    tok.encode(&refs, max_len).unwrap()
}

// ---------------------------------------------------------------------------------------------
// Tokenizer
// ---------------------------------------------------------------------------------------------

#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
#[cfg_attr(not(target_arch = "wasm32"), test)]
fn token_ids_equal_native() {
    let r = reference();
    let tok = tokenizer(&r);
    let max_len = r["max_len"].as_u64().unwrap() as usize;
    let cases = r["tokenizer_cases"].as_array().unwrap();
    assert!(cases.len() >= 10);
    for case in cases {
        let item = (
            case["text_a"].as_str().unwrap().to_string(),
            case["text_b"].as_str().map(str::to_string),
        );
        let enc = encode(&tok, std::slice::from_ref(&item), max_len);
        assert_eq!(enc.input_ids, ints(&case["input_ids"]), "ids of {item:?}");
        assert_eq!(enc.token_type_ids, ints(&case["token_type_ids"]), "token types of {item:?}");
        let tokens: Vec<&str> =
            case["tokens"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
        assert_eq!(enc.tokens[0], tokens, "tokens of {item:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// Model: logits and IM residuals
// ---------------------------------------------------------------------------------------------

/// The tiny fixture model, from bytes (the browser has no file system).
fn tiny_model<B: Backend>(device: &B::Device) -> BertClassifier<B> {
    model_from_bytes(CONFIG, WEIGHTS, device)
}

/// An HF model from the bytes of its `config.json` and `model.safetensors`.
fn model_from_bytes<B: Backend>(
    config: &[u8],
    weights: &[u8],
    device: &B::Device,
) -> BertClassifier<B> {
    let config: BertConfig = serde_json::from_slice(config).unwrap();
    config.validate().unwrap();
    let st = SafeTensors::deserialize(weights).unwrap();
    let mut tensors = BTreeMap::new();
    for (name, view) in st.tensors() {
        if view.dtype() != Dtype::F32 {
            continue;
        }
        let data = view
            .data()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        tensors.insert(name, HostTensor { shape: view.shape().to_vec(), data });
    }
    let (model, report) =
        load_from_tensors(&config, tensors, None, Path::new("model.safetensors"), device).unwrap();
    assert!(report.initialized_fresh.is_empty(), "{report:?}");
    model
}

async fn read<B: Backend, const D: usize>(t: Tensor<B, D>) -> Vec<f32> {
    // Async: a synchronous read-back is not possible from WebGPU.
    t.into_data_async().await.unwrap().convert::<f32>().into_vec().unwrap()
}

fn assert_close(what: &str, ours: &[f32], theirs: &[f32], relative: bool) {
    assert_eq!(ours.len(), theirs.len(), "{what}: length");
    for (i, (a, b)) in ours.iter().zip(theirs).enumerate() {
        let scale = if relative { b.abs().max(1.0) } else { 1.0 };
        assert!(
            (a - b).abs() <= TOLERANCE * scale,
            "{what}[{i}]: {a} vs native {b} (all: {ours:?} vs {theirs:?})"
        );
    }
}

/// Runs every reference batch through the model on `B` and compares with the native values.
/// Returns the largest absolute logit difference.
async fn check_model<B: Backend>(device: &B::Device, backend: &str) -> f32 {
    let r = reference();
    let tok = tokenizer(&r);
    let max_len = r["max_len"].as_u64().unwrap() as usize;
    let base = tiny_model::<B>(device);
    let mut worst = 0.0f32;
    for entry in r["models"].as_array().unwrap() {
        let spec = entry["connection"].as_str().unwrap();
        let model = base.clone().with_connections(&ConnectionSpec::parse(spec).unwrap()).unwrap();
        for batch in entry["batches"].as_array().unwrap() {
            let items: Vec<(String, Option<String>)> =
                batch["items"].as_array().unwrap().iter().map(text_pair).collect();
            let enc = encode(&tok, &items, max_len);
            // WebGPU cannot read back mid-forward: backtracking decides on the device there.
            let options = ForwardOptions {
                im_residuals: true,
                decide_on_device: backend == "webgpu",
                ..Default::default()
            };
            let out = model.forward(&enc.to_input::<B>(device), options);
            let what = format!("{backend} {spec} {items:?}");
            let logits = read(out.logits.unwrap()).await;
            let expected = f32s(&batch["logits"]);
            assert_close(&format!("{what} logits"), &logits, &expected, false);
            worst = logits.iter().zip(&expected).map(|(a, b)| (a - b).abs()).fold(worst, f32::max);

            let residuals = batch["im_residuals"].as_array().unwrap();
            assert_eq!(out.im_residuals.len(), residuals.len(), "{what}: IM layers");
            for ((layer, per_iteration), expected) in out.im_residuals.into_iter().zip(residuals) {
                assert_eq!(layer as u64, expected["layer"].as_u64().unwrap());
                let expected = expected["per_iteration"].as_array().unwrap();
                assert_eq!(per_iteration.len(), expected.len(), "{what}: T + 1 residuals");
                for (k, (res, exp)) in per_iteration.into_iter().zip(expected).enumerate() {
                    let what = format!("{what} layer {layer} residual {k}");
                    assert_close(&what, &read(res).await, &f32s(exp), true);
                }
            }
        }
    }
    worst
}

#[cfg(not(target_arch = "wasm32"))]
#[test]
fn ndarray_logits_equal_native() {
    let worst = futures_lite_block_on(check_model::<Cpu>(&Default::default(), "ndarray"));
    eprintln!("ndarray: max |logit - native| = {worst:e}");
}

/// Natively the model's futures are ready at once (burn-ndarray reads synchronously).
#[cfg(not(target_arch = "wasm32"))]
fn futures_lite_block_on<F: std::future::Future>(future: F) -> F::Output {
    use std::task::{Context, Poll, Waker};
    let mut future = std::pin::pin!(future);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
    }
}

#[cfg(target_arch = "wasm32")]
#[wasm_bindgen_test::wasm_bindgen_test]
async fn ndarray_logits_equal_native() {
    let worst = check_model::<Cpu>(&Default::default(), "ndarray").await;
    web_sys::console::log_1(&format!("ndarray: max |logit - native| = {worst:e}").into());
}

/// WebGPU must be available where this runs (Chromium with the flags of `web/webdriver.json`):
/// a silent fallback to the CPU would leave the GPU path untested.
#[cfg(target_arch = "wasm32")]
#[wasm_bindgen_test::wasm_bindgen_test]
async fn webgpu_logits_equal_native() {
    use web::runtime::{select, Gpu, Runtime};
    let (runtime, reason) = select(false).await;
    let Runtime::WebGpu(device) = runtime else {
        panic!("WebGPU is not available in this browser: {}", reason.unwrap_or_default());
    };
    let worst = check_model::<Gpu>(&device, "webgpu").await;
    web_sys::console::log_1(&format!("webgpu: max |logit - native| = {worst:e}").into());
}

/// A tensor of the RoBERTa reference file as f64 (ids are stored as i64, values as f32).
fn roberta_reference(name: &str) -> (Vec<usize>, Vec<f64>) {
    let st = SafeTensors::deserialize(ROBERTA_REFERENCE).unwrap();
    let view = st.tensor(name).unwrap();
    let values = match view.dtype() {
        Dtype::I64 => view
            .data()
            .chunks_exact(8)
            .map(|b| i64::from_le_bytes(b.try_into().unwrap()) as f64)
            .collect(),
        Dtype::F32 => view
            .data()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()) as f64)
            .collect(),
        other => panic!("{name}: unexpected dtype {other:?}"),
    };
    (view.shape().to_vec(), values)
}

/// RoBERTa in the browser: byte-level BPE from `tokenizer.json` gives transformers' ids for the
/// reference batch, and the model gives transformers' float32 logits. Returns the worst logit
/// difference.
async fn check_roberta<B: Backend>(device: &B::Device, backend: &str) -> f32 {
    let tok = BertTokenizer::from_json_bytes(ROBERTA_TOKENIZER).unwrap();
    let meta: Value = serde_json::from_str(ROBERTA_ITEMS).unwrap();
    let items: Vec<(String, Option<String>)> =
        meta["items"].as_array().unwrap().iter().map(text_pair).collect();
    let enc = encode(&tok, &items, 128);
    let expected_ids: Vec<i64> =
        roberta_reference("input_ids").1.iter().map(|&x| x as i64).collect();
    assert_eq!(enc.input_ids, expected_ids, "{backend}: RoBERTa token ids");
    let model = model_from_bytes::<B>(ROBERTA_CONFIG, ROBERTA_WEIGHTS, device);
    let out = model.forward(&enc.to_input::<B>(device), ForwardOptions::default());
    let logits = read(out.logits.unwrap()).await;
    let expected: Vec<f32> = roberta_reference("f32.logits").1.iter().map(|&x| x as f32).collect();
    assert_close(&format!("{backend} RoBERTa logits"), &logits, &expected, false);
    logits.iter().zip(&expected).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max)
}

#[cfg(not(target_arch = "wasm32"))]
#[test]
fn roberta_ndarray_logits_equal_transformers() {
    let worst = futures_lite_block_on(check_roberta::<Cpu>(&Default::default(), "ndarray"));
    eprintln!("RoBERTa, ndarray: max |logit - transformers| = {worst:e}");
}

#[cfg(target_arch = "wasm32")]
#[wasm_bindgen_test::wasm_bindgen_test]
async fn roberta_ndarray_logits_equal_transformers() {
    let worst = check_roberta::<Cpu>(&Default::default(), "ndarray").await;
    web_sys::console::log_1(&format!("RoBERTa, ndarray: max |logit - hf| = {worst:e}").into());
}

#[cfg(target_arch = "wasm32")]
#[wasm_bindgen_test::wasm_bindgen_test]
async fn roberta_webgpu_logits_equal_transformers() {
    use web::runtime::{select, Gpu, Runtime};
    let (runtime, reason) = select(false).await;
    let Runtime::WebGpu(device) = runtime else {
        panic!("WebGPU is not available in this browser: {}", reason.unwrap_or_default());
    };
    let worst = check_roberta::<Gpu>(&device, "webgpu").await;
    web_sys::console::log_1(&format!("RoBERTa, webgpu: max |logit - hf| = {worst:e}").into());
}

#[cfg(target_arch = "wasm32")]
#[wasm_bindgen_test::wasm_bindgen_test]
async fn forced_cpu_reports_why() {
    use web::runtime::{select, Runtime};
    let (runtime, reason) = select(true).await;
    assert_eq!(runtime, Runtime::Cpu);
    assert_eq!(runtime.label(), "CPU (ndarray, SIMD128)");
    assert!(reason.is_some_and(|r| r.contains("backend=cpu")));
}

// ---------------------------------------------------------------------------------------------
// Perturbations
// ---------------------------------------------------------------------------------------------

fn neighbour_index(r: &Value) -> WordNeighbours {
    let rows = r["neighbours"].as_array().unwrap();
    let hidden = rows[0]["row"].as_array().unwrap().len();
    let vocab: HashMap<String, u32> = rows
        .iter()
        .enumerate()
        .map(|(i, row)| (row["word"].as_str().unwrap().to_string(), i as u32))
        .collect();
    let flat: Vec<f32> = rows.iter().flat_map(|row| f32s(&row["row"])).collect();
    WordNeighbours::new(&flat, hidden, &vocab).unwrap()
}

/// The same call the native generator made (`tests/web_reference.rs`).
fn run(kind: &str, text: &str, seed: u64, index: &WordNeighbours) -> Perturbation {
    match kind {
        "typo" => perturb::typo(text, 2, seed),
        "synonym" => perturb::synonym(text, index, 2, 2, 0.5, seed),
        "delete" => perturb::delete_word(text, 2, seed),
        "distractor" => perturb::distractor(text, seed),
        "negation" => perturb::negation_contrast(text, seed),
        "checklist" => perturb::checklist_template(text, seed),
        other => panic!("unknown perturbation {other}"),
    }
}

fn chars(s: &str, range: std::ops::Range<usize>) -> String {
    s.chars().skip(range.start).take(range.len()).collect()
}

/// The edits are exact: each span holds its text, and undoing them gives back the clean text.
fn check_edits(clean: &str, p: &Perturbation) {
    for e in &p.edits {
        assert_eq!(chars(&p.text, e.span.clone()), e.after, "{e:?}");
        assert_eq!(chars(clean, e.clean_span.clone()), e.before, "{e:?}");
    }
    let mut text: Vec<char> = p.text.chars().collect();
    for e in p.edits.iter().rev() {
        text.splice(e.span.clone(), e.before.chars());
    }
    assert_eq!(text.into_iter().collect::<String>(), clean, "undoing {p:?}");
}

/// What each perturbation claims to change.
fn check_claim(kind: &str, clean: &str, p: &Perturbation, index: &WordNeighbours) {
    assert!(!p.edits.is_empty() && p.text != clean, "{kind} changed nothing in {clean:?}");
    for e in &p.edits {
        match kind {
            "typo" => {
                assert!(matches!(e.kind, EditKind::Typo(_)), "{e:?}");
                assert!(e.before != e.after && !perturb::is_stop_word(&e.before), "{e:?}");
                assert!(
                    e.before.chars().all(char::is_alphabetic) && e.before.chars().count() >= 3,
                    "{e:?}"
                );
                assert!(
                    e.before.chars().count().abs_diff(e.after.chars().count()) <= 1,
                    "one bug per word: {e:?}"
                );
            }
            "synonym" => {
                assert_eq!(e.kind, EditKind::Synonym);
                let candidates = index.neighbours(&e.before, 2);
                assert!(
                    candidates
                        .iter()
                        .any(|(w, cos)| w.eq_ignore_ascii_case(&e.after) && *cos >= 0.5),
                    "{e:?} is not among {candidates:?}"
                );
            }
            "delete" => {
                assert_eq!(e.kind, EditKind::DeleteWord);
                assert!(e.after.is_empty());
                let core = e.before.trim();
                assert!(!core.is_empty() && !perturb::is_stop_word(core), "{e:?}");
            }
            "distractor" => {
                assert_eq!(e.kind, EditKind::Distractor);
                assert!(
                    e.before.is_empty() && perturb::DISTRACTORS.contains(&e.after.as_str()),
                    "{e:?}"
                );
            }
            "negation" => {
                assert_eq!(e.kind, EditKind::NegationContrast);
                assert!(
                    e.before.is_empty() && perturb::CONTRAST_CLAUSES.contains(&e.after.as_str()),
                    "{e:?}"
                );
            }
            "checklist" => assert!(matches!(e.kind, EditKind::Checklist(_)), "{e:?}"),
            other => panic!("unknown perturbation {other}"),
        }
    }
    match kind {
        "typo" | "synonym" | "delete" => assert!(p.edits.len() <= 2, "{p:?}"),
        "distractor" | "negation" => assert_eq!(p.edits.len(), 1, "{p:?}"),
        _ => {}
    }
    if kind == "delete" {
        assert!(p.text.split_whitespace().count() < clean.split_whitespace().count(), "{p:?}");
    }
}

#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
#[cfg_attr(not(target_arch = "wasm32"), test)]
fn perturbations_are_deterministic_native_and_do_what_they_claim() {
    let r = reference();
    let index = neighbour_index(&r);
    let cases = r["perturbations"].as_array().unwrap();
    let mut outputs: HashMap<&str, std::collections::BTreeSet<String>> = HashMap::new();
    for case in cases {
        let (kind, text, seed) = (
            case["kind"].as_str().unwrap(),
            case["text"].as_str().unwrap(),
            case["seed"].as_u64().unwrap(),
        );
        let p = run(kind, text, seed, &index);
        assert_eq!(p, run(kind, text, seed, &index), "{kind} seed {seed} is not deterministic");
        let native: Perturbation = serde_json::from_value(case["output"].clone()).unwrap();
        assert_eq!(p, native, "{kind} seed {seed} of {text:?} differs from the native output");
        check_edits(text, &p);
        check_claim(kind, text, &p, &index);
        outputs.entry(kind).or_default().insert(p.text);
    }
    // The seed matters: random perturbations do not always produce the same text.
    for kind in ["typo", "synonym", "delete", "distractor", "negation", "checklist"] {
        let seen = outputs.get(kind).map_or(0, |s| s.len());
        assert!(seen > 3, "{kind}: only {seen} distinct outputs");
    }
}
