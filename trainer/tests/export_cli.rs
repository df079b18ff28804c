//! `trainer export --web` end to end on the tiny fixture model (3-label head, vocab.txt only):
//! the bundle reloads through `WebBundle` with logits close to the f32 model, `index.json` is
//! upserted, a model without a trained head is refused unless marked untrained, and `eval`
//! reads a bundle.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use burn::backend::NdArray;
use serde_json::Value;
use shared::io::bundle::WebBundle;
use shared::io::checkpoint;
use shared::io::tensor_file::{self, HostTensor};
use shared::{BertClassifier, BertTokenizer, ConnectionSpec, ForwardOptions};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn tiny() -> PathBuf {
    repo().join("tests/fixtures/tiny-bert")
}

/// A fresh directory under target/test-artifacts.
fn scratch(name: &str) -> PathBuf {
    let dir = repo().join("target/test-artifacts/export").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn trainer(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_trainer"))
        .args(args)
        .current_dir(repo())
        // `eval` reads the data samples committed under tests/fixtures/data.
        .env("IMBERT_DATA", shared::data::test_data::fixtures_dir())
        .output()
        .expect("the trainer binary runs")
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

fn ok(out: Output) -> String {
    let t = text(&out);
    assert!(out.status.success(), "trainer failed:\n{t}");
    t
}

fn export(model: &Path, site: &Path, name: &str, extra: &[&str]) -> Output {
    let (model, site) = (model.to_str().unwrap(), site.to_str().unwrap());
    let mut args = vec!["export", "--web", "--model", model, "--site", site, "--name", name];
    args.extend_from_slice(extra);
    trainer(&args)
}

fn read_json(path: &Path) -> Value {
    serde_json::from_str(
        &std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
    )
    .unwrap()
}

/// Max |logit difference| between the f32 fixture (with `spec`) and a bundle, on a few inputs.
fn max_logit_diff(bundle: &WebBundle, spec: &str) -> f32 {
    let device = Default::default();
    let (f32_model, _) = checkpoint::load_classifier::<NdArray>(&tiny(), None, &device).unwrap();
    let f32_model = f32_model.with_connections(&ConnectionSpec::parse(spec).unwrap()).unwrap();
    let int8_model: BertClassifier<NdArray> = bundle.classifier(&device).unwrap();
    let tokenizer = BertTokenizer::from_dir(&tiny()).unwrap();
    let items = [
        ("the cat sat on the mat", None),
        ("a dog runs", Some("the dog is running fast")),
        ("[UNK] words", None),
    ];
    let batch = tokenizer.encode(&items, 24).unwrap();
    assert_eq!(
        batch,
        bundle.tokenizer.encode(&items, 24).unwrap(),
        "the bundle's tokenizer.json tokenizes like vocab.txt"
    );
    let input = batch.to_input::<NdArray>(&device);
    let a = f32_model.forward(&input, ForwardOptions::default()).logits.unwrap();
    let b = int8_model.forward(&input, ForwardOptions::default()).logits.unwrap();
    (a - b).abs().max().into_scalar()
}

#[test]
fn export_reloads_within_tolerance_and_upserts_the_index() {
    let site = scratch("site");
    ok(export(&tiny(), &site, "tiny-a", &["--task", "mnli"]));
    let dir = site.join("tiny-a");
    for f in ["config.json", "tokenizer.json", "model.int8.safetensors", "imbert.json"] {
        assert!(dir.join(f).is_file(), "{f} missing");
    }
    let leftovers: Vec<_> =
        std::fs::read_dir(&site).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(leftovers.len(), 2, "only tiny-a/ and index.json: {leftovers:?}");

    let bundle = WebBundle::from_dir(&dir).unwrap();
    assert_eq!(bundle.card.name, "tiny-a");
    assert_eq!(bundle.card.labels, ["entailment", "neutral", "contradiction"]);
    assert!(!bundle.card.untrained);
    let q = bundle.card.quantization.clone().unwrap();
    assert_eq!(q.scheme, "int8-symmetric-per-row");
    assert_eq!(q.bytes, std::fs::metadata(dir.join("model.int8.safetensors")).unwrap().len());
    // The tiny model's file is mostly safetensors header; MiniLM's is ~25% of f32.
    assert!(q.bytes < q.f32_bytes, "int8 is smaller than f32: {} vs {}", q.bytes, q.f32_bytes);
    let diff = max_logit_diff(&bundle, "bert");
    println!("bert: max |logit f32 - int8| = {diff:.3e}");
    assert!(diff < 1e-2, "{diff}");

    // A second model, with an IM connection.
    let spec = "im:T=2,gamma=0.1,layers=1-1";
    ok(export(&tiny(), &site, "tiny-b", &["--task", "mnli", "--connection", spec]));
    let bundle_b = WebBundle::from_dir(&site.join("tiny-b")).unwrap();
    assert_eq!(bundle_b.card.connection, spec);
    let diff = max_logit_diff(&bundle_b, spec);
    println!("im: max |logit f32 - int8| = {diff:.3e}");
    assert!(diff < 1e-2, "{diff}");

    let index = read_json(&site.join("index.json"));
    let ids: Vec<&str> =
        index["models"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["tiny-a", "tiny-b"]);
    let a = &index["models"][0];
    assert_eq!(a["path"], "tiny-a/");
    assert_eq!(a["task"], "mnli");
    assert_eq!(a["connection"], "bert");
    assert_eq!(a["architecture"], "bert");
    assert_eq!(a["labels"].as_array().unwrap().len(), 3);
    let total: u64 =
        std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().metadata().unwrap().len()).sum();
    assert_eq!(a["bytes"], total);
    assert!(a["metrics"].is_object());

    // Exporting tiny-a again is refused without --force, and leaves the bundle as it was.
    let out = export(&tiny(), &site, "tiny-a", &["--task", "mnli", "--connection", "ex"]);
    assert!(!out.status.success() && text(&out).contains("--force"), "{}", text(&out));
    assert_eq!(WebBundle::from_dir(&dir).unwrap().card.connection, "bert");
    // With --force it replaces the bundle and its entry in place.
    ok(export(&tiny(), &site, "tiny-a", &["--task", "mnli", "--connection", "ex", "--force"]));
    let index = read_json(&site.join("index.json"));
    let models = index["models"].as_array().unwrap();
    assert_eq!(models.len(), 2);
    assert_eq!(
        (models[0]["id"].as_str(), models[0]["connection"].as_str()),
        (Some("tiny-a"), Some("ex"))
    );
    assert_eq!(WebBundle::from_dir(&dir).unwrap().card.connection, "ex");

    // `eval` reads a bundle directory (its card supplies task and connection).
    let out = ok(trainer(&["eval", "--model", dir.to_str().unwrap(), "--limit", "8"]));
    assert!(out.contains("AdvGLUE"), "{out}");
}

#[test]
fn a_model_without_a_trained_head_is_refused_unless_marked_untrained() {
    // The tiny fixture without its classifier.
    let headless = scratch("headless-model");
    let tensors = tensor_file::read_safetensors(&tiny().join("model.safetensors")).unwrap();
    let kept: Vec<(String, HostTensor)> =
        tensors.into_iter().filter(|(k, _)| !k.starts_with("classifier.")).collect();
    tensor_file::write_safetensors(&headless.join("model.safetensors"), &kept).unwrap();
    for f in ["config.json", "vocab.txt"] {
        std::fs::copy(tiny().join(f), headless.join(f)).unwrap();
    }

    let site = scratch("site-untrained");
    let out = export(&headless, &site, "headless", &["--task", "sst2"]);
    assert!(!out.status.success());
    let message = text(&out);
    assert!(
        message.contains("no trained classifier") && message.contains("--allow-untrained"),
        "{message}"
    );
    assert!(
        !site.join("headless").exists() && !site.join("index.json").exists(),
        "nothing written on refusal"
    );

    ok(export(&headless, &site, "headless", &["--task", "sst2", "--allow-untrained"]));
    let bundle = WebBundle::from_dir(&site.join("headless")).unwrap();
    assert!(bundle.card.untrained);
    assert_eq!(bundle.num_labels(), 2);
    let index = read_json(&site.join("index.json"));
    assert_eq!(index["models"][0]["untrained"], true);
}

#[test]
fn the_source_card_supplies_task_connection_and_metrics() {
    let model = scratch("carded-model");
    for f in ["config.json", "vocab.txt", "model.safetensors"] {
        std::fs::copy(tiny().join(f), model.join(f)).unwrap();
    }
    let site = scratch("site-carded");
    // Without a card, the task must be given.
    let out = export(&model, &site, "carded", &[]);
    assert!(!out.status.success() && text(&out).contains("--task is required"), "{}", text(&out));

    let card = serde_json::json!({
        "task": "mnli", "labels": ["entailment", "neutral", "contradiction"],
        "connection": "im:T=2,gamma=0.1,layers=0-1", "checkpoint": "best",
        "trained_from": "models/all-minilm-l6-v2", "command": "trainer finetune --task mnli",
        "metrics": {"validation": 0.75}, "config": {"seed": 0}
    });
    std::fs::write(model.join("imbert.json"), serde_json::to_string(&card).unwrap()).unwrap();
    let out = export(&model, &site, "carded", &["--task", "sst2"]);
    assert!(!out.status.success() && text(&out).contains("contradicts"), "{}", text(&out));
    let out = export(&model, &site, "../escape", &[]);
    assert!(!out.status.success() && text(&out).contains("--name"), "{}", text(&out));

    ok(export(&model, &site, "carded", &[]));
    let exported = read_json(&site.join("carded/imbert.json"));
    assert_eq!(exported["task"], "mnli");
    assert_eq!(exported["connection"], "im:T=2,gamma=0.1,layers=0-1");
    assert_eq!(exported["trained_from"], "models/all-minilm-l6-v2");
    assert_eq!(exported["command"], "trainer finetune --task mnli");
    assert_eq!(exported["metrics"]["validation"], 0.75);
    assert_eq!(exported["config"]["seed"], 0);
    assert_eq!(read_json(&site.join("index.json"))["models"][0]["metrics"]["validation"], 0.75);
}
