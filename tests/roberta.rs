//! RoBERTa shares BERT's layer and connections: a small random RoBERTa checkpoint
//! (`tests/fixtures/tiny-roberta`, built by `tests/python/roberta_reference.py`) equals
//! transformers layer by layer in float64 (from safetensors and from `pytorch_model.bin`), and its
//! exact IM training gradient equals PyTorch's `create_graph=True` reference. The float32 parity,
//! tokenisation and save -> load checks are in `hf_parity.rs`, `tokenizer.rs` and `checkpoint.rs`.

use imbert_tests::*;
use shared::io::checkpoint::load_classifier;
use shared::model::config::Architecture;
use shared::{ConnectionSpec, ForwardOptions};

#[test]
fn tiny_roberta_every_layer_and_the_logits_match_transformers_f64() {
    let diffs = check_tiny_roberta_forward::<Cpu64>(&Default::default(), "tiny-roberta", "");
    assert!(diffs.iter().all(|&d| d < 1e-10), "{diffs:?}");
}

/// The same weights saved by `torch.save` (`pytorch_model.bin`, zip format) give the same model.
#[test]
fn tiny_roberta_from_pytorch_bin_matches_transformers_f64() {
    let diffs = check_tiny_roberta_forward::<Cpu64>(&Default::default(), "tiny-roberta-bin", "");
    assert!(diffs.iter().all(|&d| d < 1e-10), "{diffs:?}");
}

#[test]
fn exact_im_gradient_of_roberta_matches_pytorch_create_graph_f64() {
    let device = Default::default();
    let r = reference(ROBERTA_REFERENCE);
    let meta: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(fixture("tiny_roberta_reference.json")).unwrap(),
    )
    .unwrap();
    let spec = ConnectionSpec::parse(meta["connection"].as_str().unwrap()).unwrap();
    let (model, _) = load_classifier::<Train64>(&fixture("tiny-roberta"), None, &device).unwrap();
    assert_eq!(model.config.architecture(), Architecture::Roberta);
    let model = model.with_connections(&spec).unwrap();
    let (input, labels) = roberta_reference_batch::<Train64>(&r, &device);

    let logits = model.forward(&input, ForwardOptions::default()).logits.unwrap();
    let logits: Vec<f64> = logits.into_data().convert::<f64>().into_vec().unwrap();
    let logit_diff = max_abs_diff(&logits, &r["im.logits"].1);
    println!("IM logits: max |ours - pytorch| = {logit_diff:.2e}");
    assert!(logit_diff < 1e-10);

    let (loss, grads) = parameter_gradients(&model, &input, labels);
    println!("loss: ours {loss:.12}, pytorch {:.12}", r["im.loss"].1[0]);
    assert!((loss - r["im.loss"].1[0]).abs() < 1e-10);
    let (worst, name, compared) = worst_gradient_error(&r, "im.grad.", &grads);
    println!("{compared} parameter gradients; worst relative difference {worst:.2e} ({name})");
    assert_eq!(compared, grads.len(), "every parameter has a reference gradient");
    assert!(
        grads.keys().any(|k| k == "classifier.out_proj.weight")
            && grads.keys().any(|k| k == "roberta.embeddings.position_embeddings.weight"),
        "RoBERTa's names: {:?}",
        grads.keys().collect::<Vec<_>>()
    );
    assert!(worst < 1e-8, "{name} differs by {worst}");
}
