//! The training gradient through IM layers is exact: it equals PyTorch's
//! `torch.autograd.grad(..., create_graph=True)` reference and central finite differences, in
//! float64 (the float32 comparison is in `im_gradient_f32.rs`).

use burn::module::Param;
use burn::tensor::{Tensor, TensorData};
use imbert_tests::*;
use shared::{BertClassifier, ForwardOptions};

#[test]
fn exact_im_gradient_matches_pytorch_create_graph_f64() {
    compare_with_pytorch::<Train64>(1e-8);
}

#[test]
fn im_residuals_match_pytorch() {
    let r = reference(REFERENCE);
    let model = model::<Cpu64>(&spec());
    let (input, _) = batch::<Cpu64>();
    let out = model.forward(&input, ForwardOptions { im_residuals: true, ..Default::default() });
    let (layer, residuals) = &out.im_residuals[0];
    let ours: Vec<f64> = residuals.iter().map(|t| t.clone().sum().into_scalar()).collect();
    let expected = &r[&format!("im_residual.{layer}")].1;
    println!("||r||^2 per iteration: ours {ours:?}, pytorch {expected:?}");
    assert!(max_rel_diff(&ours, expected) < 1e-9);
    assert!(ours.windows(2).all(|w| w[1] < w[0]), "the residual decreases: {ours:?}");
}

/// Perturbs one entry of a parameter, for finite differences.
fn nudge<const D: usize>(
    p: &Param<Tensor<Cpu64, D>>,
    index: usize,
    eps: f64,
) -> Param<Tensor<Cpu64, D>> {
    let t = p.val();
    let shape = t.shape();
    let mut v: Vec<f64> = t.into_data().into_vec().unwrap();
    v[index] += eps;
    Param::from_tensor(Tensor::from_data(TensorData::new(v, shape), &Default::default()))
}

#[test]
fn im_gradient_matches_central_finite_differences() {
    let spec = spec();
    let (_, grads) = gradients::<Train64>(&spec);
    let (input, labels) = batch::<Cpu64>();
    let eps = 1e-5;
    // (HF name, flat index in HF layout, how to nudge that entry in our layout)
    type Nudge = fn(&mut BertClassifier<Cpu64>, f64);
    let cases: [(&str, usize, Nudge); 6] = [
        // query weight: HF [out, in] entry (3, 5) is burn [in, out] entry (5, 3) = 5 * 16 + 3.
        ("bert.encoder.layer.1.attention.self.query.weight", 3 * 16 + 5, |m, e| {
            let q = &mut m.bert.encoder.layer[1].attention.self_attention.query;
            q.weight = nudge(&q.weight, 5 * 16 + 3, e);
        }),
        ("bert.encoder.layer.1.output.LayerNorm.weight", 7, |m, e| {
            let ln = &mut m.bert.encoder.layer[1].output.layer_norm;
            ln.gamma = nudge(&ln.gamma, 7, e);
        }),
        ("bert.encoder.layer.1.intermediate.dense.bias", 11, |m, e| {
            let d = &mut m.bert.encoder.layer[1].intermediate.dense;
            d.bias = Some(nudge(d.bias.as_ref().unwrap(), 11, e));
        }),
        ("bert.encoder.layer.0.attention.output.dense.weight", 2 * 16 + 9, |m, e| {
            let d = &mut m.bert.encoder.layer[0].attention.output.dense;
            d.weight = nudge(&d.weight, 9 * 16 + 2, e);
        }),
        ("bert.embeddings.word_embeddings.weight", 17 * 16 + 4, |m, e| {
            let w = &mut m.bert.embeddings.word_embeddings;
            w.weight = nudge(&w.weight, 17 * 16 + 4, e);
        }),
        ("classifier.bias", 2, |m, e| {
            let c = m.classifier.as_mut().unwrap();
            c.bias = Some(nudge(c.bias.as_ref().unwrap(), 2, e));
        }),
    ];
    for (name, hf_index, nudge_fn) in cases {
        let at = |e: f64| {
            let mut m = model::<Cpu64>(&spec);
            nudge_fn(&mut m, e);
            loss(&m, &input, labels.clone()).into_scalar()
        };
        let numeric = (at(eps) - at(-eps)) / (2.0 * eps);
        let analytic = grads[name][hf_index];
        let err = (numeric - analytic).abs() / analytic.abs().max(1e-6);
        println!(
            "{name}[{hf_index}]: autodiff {analytic:+.9e}, finite difference {numeric:+.9e}, \
             rel err {err:.1e}"
        );
        assert!(err < 1e-5, "{name}: {analytic} vs {numeric}");
    }
}

#[test]
fn detached_im_gradient_matches_pytorch_f64() {
    compare_gradient_choice_with_pytorch::<Train64>(shared::InnerGradient::Detached, 1e-8);
}

#[test]
fn frozen_im_gradient_matches_pytorch_f64() {
    compare_gradient_choice_with_pytorch::<Train64>(shared::InnerGradient::Frozen, 1e-8);
}

/// The three choices share the forward pass and give three different gradients.
#[test]
fn gradient_choices_share_the_forward_and_differ_in_the_backward() {
    let name = "bert.encoder.layer.1.attention.self.query.weight";
    let (loss_exact, g_exact) = gradients::<Train64>(&spec_with(shared::InnerGradient::Exact));
    for other in [shared::InnerGradient::Detached, shared::InnerGradient::Frozen] {
        let (loss, g) = gradients::<Train64>(&spec_with(other));
        assert_eq!(loss_exact, loss, "grad={} changed the forward pass", other.name());
        let rel = max_rel_diff(&g[name], &g_exact[name]);
        println!(
            "grad={} vs exact gradient of {name}: relative difference {rel:.2e}",
            other.name()
        );
        assert!(rel > 1e-3, "grad={} gives the exact gradient", other.name());
    }
}
