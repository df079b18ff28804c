//! Checkpoints: save -> load is exact; a saved directory is a valid HF directory (the Python
//! side of that check, `tests/python/check_saved.py`, loads it in transformers); bad input is a
//! clear error naming the file or tensor.

use burn::tensor::Tensor;
use imbert_tests::*;
use shared::io::checkpoint::{load_classifier, save_classifier};
use shared::{BertClassifier, BertTokenizer, ConnectionSpec, ForwardOptions};

fn logits(model: &BertClassifier<Cpu>, tok: &BertTokenizer) -> Vec<f32> {
    let batch = tok
        .encode(
            &[("a gripping, heartfelt film", None), ("the cat sat", Some("a cat is sitting"))],
            64,
        )
        .unwrap();
    let out = model.forward(&batch.to_input::<Cpu>(&Default::default()), ForwardOptions::default());
    out.logits.unwrap().into_data().into_vec().unwrap()
}

/// MiniLM with a fresh 2-class head, saved and loaded back: identical logits. The saved directory
/// and the logits are left under `target/test-artifacts/` for the transformers check.
#[test]
fn save_then_load_gives_identical_logits() {
    let device = Default::default();
    let (model, report) = load_classifier::<Cpu>(&minilm_dir(), Some(2), &device).unwrap();
    assert_eq!(report.initialized_fresh, ["classifier"]);
    let model =
        model.with_connections(&ConnectionSpec::parse("im:T=2,layers=4-5").unwrap()).unwrap();
    let tok = BertTokenizer::from_dir(&minilm_dir()).unwrap();
    let before = logits(&model, &tok);

    let out_dir = repo_root().join("target/test-artifacts");
    let saved = out_dir.join("roundtrip-minilm");
    save_classifier(&model, &saved, Some(&minilm_dir())).unwrap();
    for f in ["config.json", "model.safetensors", "tokenizer.json", "vocab.txt"] {
        assert!(saved.join(f).exists(), "{f} missing");
    }
    let (loaded, report) = load_classifier::<Cpu>(&saved, None, &device).unwrap();
    assert!(report.initialized_fresh.is_empty() && report.unused.is_empty(), "{report:?}");
    assert_eq!(loaded.num_labels(), 2);
    let loaded =
        loaded.with_connections(&ConnectionSpec::parse("im:T=2,layers=4-5").unwrap()).unwrap();
    assert_eq!(logits(&loaded, &tok), before);

    // Plain-BERT logits for the Python check against transformers.
    let plain = loaded.with_connections(&ConnectionSpec::default()).unwrap();
    let json = serde_json::json!({
        "texts": [["a gripping, heartfelt film", null], ["the cat sat", "a cat is sitting"]],
        "num_labels": 2, "logits": logits(&plain, &tok)
    });
    std::fs::write(out_dir.join("roundtrip-minilm.json"), json.to_string()).unwrap();
}

/// tiny-roberta with IM on layer 1, saved and loaded back: identical logits, RoBERTa's HF names
/// and config. Left under `target/test-artifacts/` for the transformers check.
#[test]
fn roberta_save_then_load_gives_identical_logits() {
    let device = Default::default();
    let source = fixture("tiny-roberta");
    let (model, report) = load_classifier::<Cpu>(&source, None, &device).unwrap();
    assert!(report.initialized_fresh.is_empty() && report.unused.is_empty(), "{report:?}");
    let im = ConnectionSpec::parse("im:T=2,layers=1").unwrap();
    let model = model.with_connections(&im).unwrap();
    let tok = BertTokenizer::from_dir(&source).unwrap();
    let before = logits(&model, &tok);

    let out_dir = repo_root().join("target/test-artifacts");
    let saved = out_dir.join("roundtrip-roberta");
    save_classifier(&model, &saved, Some(&source)).unwrap();
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(saved.join("config.json")).unwrap()).unwrap();
    assert_eq!(config["model_type"], "roberta");
    assert_eq!(config["architectures"][0], "RobertaForSequenceClassification");
    let names: Vec<String> = float_tensors(&saved.join("model.safetensors")).into_keys().collect();
    for name in ["roberta.embeddings.position_embeddings.weight", "classifier.out_proj.weight"] {
        assert!(names.iter().any(|n| n == name), "{name} not in {names:?}");
    }
    let (loaded, report) = load_classifier::<Cpu>(&saved, None, &device).unwrap();
    assert!(report.initialized_fresh.is_empty() && report.unused.is_empty(), "{report:?}");
    assert_eq!(logits(&loaded.with_connections(&im).unwrap(), &tok), before);

    let plain = model.with_connections(&ConnectionSpec::default()).unwrap();
    let json = serde_json::json!({
        "texts": [["a gripping, heartfelt film", null], ["the cat sat", "a cat is sitting"]],
        "num_labels": plain.num_labels(), "logits": logits(&plain, &tok)
    });
    std::fs::write(out_dir.join("roundtrip-roberta.json"), json.to_string()).unwrap();
}

#[test]
fn saving_replaces_an_existing_directory_whole() {
    let device = Default::default();
    let dir = repo_root().join("target/test-artifacts/replace-tiny");
    let (model, _) = load_classifier::<Cpu>(&fixture("tiny-bert"), None, &device).unwrap();
    save_classifier(&model, &dir, None).unwrap();
    std::fs::write(dir.join("stale.txt"), "old").unwrap();
    save_classifier(&model, &dir, None).unwrap();
    assert!(!dir.join("stale.txt").exists());
    let leftovers: Vec<_> = std::fs::read_dir(dir.parent().unwrap())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(".replace-tiny"))
        .collect();
    assert!(leftovers.is_empty(), "temporary directories left behind");
}

#[test]
fn bad_inputs_are_clear_errors() {
    let device = Default::default();
    let err = load_classifier::<Cpu>(std::path::Path::new("/no/such/model"), None, &device)
        .err()
        .unwrap();
    assert!(err.to_string().contains("/no/such/model"), "{err}");

    let dir = repo_root().join("target/test-artifacts/bad-config");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("config.json"), "{\n  \"hidden_size\": 384,\n  oops\n}").unwrap();
    let err = load_classifier::<Cpu>(&dir, None, &device).err().unwrap().to_string();
    assert!(err.contains("config.json:3"), "names file and line: {err}");

    // A weight of the wrong shape names the tensor and both shapes.
    let mut tensors = float_tensors(&fixture("tiny-bert/model.safetensors"));
    let key = "bert.encoder.layer.0.intermediate.dense.weight";
    tensors.get_mut(key).unwrap().shape = vec![16, 32];
    let config = shared::BertConfig::from_file(&fixture("tiny-bert/config.json")).unwrap();
    let err = shared::io::checkpoint::load_from_tensors::<Cpu>(
        &config,
        tensors.clone(),
        None,
        "x".as_ref(),
        &device,
    )
    .err()
    .unwrap()
    .to_string();
    assert!(err.contains(key) && err.contains("[32, 16]") && err.contains("[16, 32]"), "{err}");

    tensors.remove(key);
    let err = shared::io::checkpoint::load_from_tensors::<Cpu>(
        &config,
        tensors,
        None,
        "x".as_ref(),
        &device,
    )
    .err()
    .unwrap()
    .to_string();
    assert!(err.contains("missing") && err.contains(key), "{err}");
}

/// A `pytorch_model.bin` checkpoint loads to the same model as its safetensors twin.
#[test]
fn pytorch_bin_loads_like_safetensors() {
    let device = Default::default();
    let (a, _) = load_classifier::<Cpu>(&fixture("tiny-bert"), None, &device).unwrap();
    let (b, report) = load_classifier::<Cpu>(&fixture("tiny-bert-bin"), None, &device).unwrap();
    assert!(report.weights_file.ends_with("pytorch_model.bin"));
    let x: Tensor<Cpu, 2> = a.bert.encoder.layer[1].output.dense.weight.val();
    let y: Tensor<Cpu, 2> = b.bert.encoder.layer[1].output.dense.weight.val();
    assert_eq!(x.into_data(), y.into_data());
    assert_eq!(
        a.classifier.unwrap().weight.val().into_data(),
        b.classifier.unwrap().weight.val().into_data()
    );
}

/// A web bundle's load (`load_complete_from_tensors`: nothing drawn for the values it replaces)
/// builds the model the ordinary load builds, and refuses tensors without a head.
#[test]
fn complete_load_equals_the_ordinary_one_and_refuses_gaps() {
    use shared::io::checkpoint::{load_complete_from_tensors, load_from_tensors};
    let device = Default::default();
    let config = shared::BertConfig::from_file(&fixture("tiny-bert/config.json")).unwrap();
    let tok = BertTokenizer::from_vocab_file(&fixture("tiny-bert/vocab.txt"), true).unwrap();
    let tensors = float_tensors(&fixture("tiny-bert/model.safetensors"));
    let file = std::path::Path::new("model.safetensors");
    let (ordinary, report) =
        load_from_tensors::<Cpu>(&config, tensors.clone(), None, file, &device).unwrap();
    assert!(report.initialized_fresh.is_empty(), "{:?}", report.initialized_fresh);
    let complete = load_complete_from_tensors::<Cpu>(&config, tensors.clone(), file, &device);
    assert_eq!(logits(&complete.unwrap(), &tok), logits(&ordinary, &tok));

    let mut headless = tensors;
    headless.remove("classifier.weight");
    headless.remove("classifier.bias");
    let err = load_complete_from_tensors::<Cpu>(&config, headless.clone(), file, &device)
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("classifier.weight"), "{err}");
    let (_, report) = load_from_tensors::<Cpu>(&config, headless, Some(2), file, &device).unwrap();
    assert_eq!(report.initialized_fresh, ["classifier"]);
}
