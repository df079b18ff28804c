//! Plain BERT equals transformers, layer by layer, on MiniLM-L6 (sentences and pairs, batched
//! with padding); one MiniLM layer's hand-written VJP equals burn autodiff.

use burn::module::AutodiffModule;
use burn::tensor::{Distribution, Int, Tensor, TensorData};
use imbert_tests::*;
use shared::checkpoint::load_classifier;
use shared::layer::{LayerContext, MASKED_SCORE};
use shared::{BertInput, BertTokenizer, ForwardOptions};

fn input_from_reference<B: burn::tensor::backend::Backend>(
    r: &std::collections::BTreeMap<String, (Vec<usize>, Vec<f64>)>,
    device: &B::Device,
) -> BertInput<B> {
    let t = |name: &str| {
        let (shape, v) = &r[name];
        Tensor::<B, 2, Int>::from_data(TensorData::new(ints(v), [shape[0], shape[1]]), device)
    };
    BertInput { input_ids: t("input_ids"), token_type_ids: t("token_type_ids"), attention_mask: t("attention_mask") }
}

#[test]
fn minilm_every_layer_matches_transformers() {
    let device = Default::default();
    let (model, report) = load_classifier::<Cpu>(&minilm_dir(), None, &device).unwrap();
    assert!(report.initialized_fresh.is_empty(), "{:?}", report.initialized_fresh);
    let r = reference("minilm_hidden.safetensors");
    let input = input_from_reference::<Cpu>(&r, &device);
    let out = model.forward(&input, ForwardOptions { hidden_states: true, ..Default::default() });
    assert_eq!(out.hidden_states.len(), 7);
    for (i, h) in out.hidden_states.iter().enumerate() {
        let (shape, expected) = &r[&format!("hidden.{i}")];
        assert_eq!(&h.dims().to_vec(), shape);
        let got: Vec<f64> = h.to_data().convert::<f64>().into_vec().unwrap();
        let diff = max_abs_diff(&got, expected);
        println!("hidden.{i}: max |ours - transformers| = {diff:.2e}");
        assert!(diff < 1e-4, "hidden.{i} differs by {diff}");
    }
}

#[test]
fn tokenizer_builds_the_reference_batch() {
    let tok = BertTokenizer::from_dir(&minilm_dir()).unwrap();
    let items: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("minilm_hidden.json")).unwrap()).unwrap();
    let pairs: Vec<(String, Option<String>)> = items["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p[0].as_str().unwrap().to_string(), p[1].as_str().map(String::from)))
        .collect();
    let refs: Vec<(&str, Option<&str>)> = pairs.iter().map(|(a, b)| (a.as_str(), b.as_deref())).collect();
    let batch = tok.encode(&refs, 128).unwrap();
    let r = reference("minilm_hidden.safetensors");
    assert_eq!(batch.input_ids, ints(&r["input_ids"].1));
    assert_eq!(batch.token_type_ids, ints(&r["token_type_ids"].1));
    assert_eq!(batch.attention_mask, ints(&r["attention_mask"].1));
}

#[test]
fn minilm_layer_vjp_matches_autodiff() {
    let device = Default::default();
    let (model, _) = load_classifier::<Train>(&minilm_dir(), None, &device).unwrap();
    let phi = &model.bert.encoder.layer[2];
    let (batch, seq, hidden) = (2, 9, 384);
    // Second item has 3 padding tokens.
    let mask: Vec<f32> = (0..batch * seq).map(|i| if i >= seq + 6 { 0.0 } else { 1.0 }).collect();
    let mask = Tensor::<Train, 1>::from_data(TensorData::new(mask, [batch * seq]), &device);
    let attention_bias = (mask.neg().add_scalar(1.0) * MASKED_SCORE).reshape([batch, 1, 1, seq]);
    let ctx = LayerContext { attention_bias, hidden_dropout: 0.0, attention_dropout: 0.0 };
    let h = Tensor::<Train, 3>::random([batch, seq, hidden], Distribution::Normal(0.0, 1.0), &device).require_grad();
    let r = Tensor::<Train, 3>::random([batch, seq, hidden], Distribution::Normal(0.0, 1.0), &device);

    let (y, cache) = phi.forward_cached(h.clone(), &ctx);
    let ours: Vec<f64> = phi.vjp(&cache, r.clone()).to_data().convert::<f64>().into_vec().unwrap();
    let grads = (y * r.clone()).sum().backward();
    let autodiff: Vec<f64> = h.grad(&grads).unwrap().to_data().convert::<f64>().into_vec().unwrap();
    let rel = max_rel_diff(&ours, &autodiff);
    println!("MiniLM layer 2: max |vjp - autodiff| / max |autodiff| = {rel:.2e}");
    assert!(rel < 1e-5, "relative difference {rel}");

    // At inference (no autodiff) the forward and the VJP take the fused CPU kernels instead:
    // attention in one pass per item, residuals as the GEMMs' initial values.
    let phi = phi.valid();
    let ctx = LayerContext { attention_bias: ctx.attention_bias.inner(), hidden_dropout: 0.0, attention_dropout: 0.0 };
    let (_, cache) = phi.forward_cached(h.inner(), &ctx);
    let inference: Vec<f64> = phi.vjp(&cache, r.inner()).to_data().convert::<f64>().into_vec().unwrap();
    let rel = max_rel_diff(&inference, &autodiff);
    println!("MiniLM layer 2 at inference: max |vjp - autodiff| / max |autodiff| = {rel:.2e}");
    assert!(rel < 1e-5, "relative difference {rel}");
}
