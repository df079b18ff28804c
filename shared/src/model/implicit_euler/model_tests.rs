//! The connections inside a whole model: how BERT, EX and IM relate, padding, and the
//! safeguarded solve's steps and stops, on a small random BERT in f64.

use super::*;
use crate::model::{BertClassifier, BertInput, ForwardOptions};
use crate::BertConfig;
use burn::backend::NdArray;
use burn::tensor::{Int, TensorData};

type B = NdArray<f64>;

fn input(rows: &[Vec<i64>]) -> BertInput<B> {
    let seq = rows.iter().map(Vec::len).max().unwrap();
    let pad = |f: &dyn Fn(&[i64], usize) -> i64| {
        let v: Vec<i64> = rows.iter().flat_map(|r| (0..seq).map(move |j| f(r, j))).collect();
        Tensor::<B, 2, Int>::from_data(TensorData::new(v, [rows.len(), seq]), &Default::default())
    };
    BertInput {
        input_ids: pad(&|r, j| r.get(j).copied().unwrap_or(0)),
        token_type_ids: pad(&|_, _| 0),
        attention_mask: pad(&|r, j| (j < r.len()) as i64),
    }
}

/// A sentence gets the same logits alone and padded inside a batch: the residual is masked.
#[test]
fn padding_never_changes_a_sentence() {
    crate::model::f64_process::run_in_f64_process!(padding_never_changes_a_sentence);
    let model = BertClassifier::<B>::new(&BertConfig::tiny(), 2, &Default::default())
        .with_connections(&ConnectionSpec::parse("im:T=4,gamma=0.2").unwrap())
        .unwrap();
    let short = vec![2, 7, 9, 3];
    let long = vec![2, 5, 6, 7, 8, 11, 12, 3];
    let opts = ForwardOptions { im_residuals: true, ..Default::default() };
    let alone = model.forward(&input(std::slice::from_ref(&short)), opts);
    let batched = model.forward(&input(&[long, short]), opts);
    let a: Vec<f64> = alone.logits.unwrap().into_data().into_vec().unwrap();
    let b: Vec<f64> = batched.logits.unwrap().slice([1..2, 0..2]).into_data().into_vec().unwrap();
    let diff = a.iter().zip(&b).fold(0.0f64, |m, (x, y)| m.max((x - y).abs()));
    assert!(diff < 1e-12, "padding changed the logits by {diff}");
    // The residuals of the short sentence agree too.
    for ((_, ra), (_, rb)) in alone.im_residuals.iter().zip(&batched.im_residuals) {
        for (x, y) in ra.iter().zip(rb) {
            let x: f64 = x.clone().into_scalar();
            let y: f64 = y.clone().slice(1..2).into_scalar();
            assert!((x - y).abs() < 1e-12 * x.abs().max(1.0), "{x} vs {y}");
        }
    }
}

/// T = 0 is the explicit Euler step; EX differs from BERT; IM's residual shrinks with T.
#[test]
fn connections_relate_as_the_paper_says() {
    crate::model::f64_process::run_in_f64_process!(connections_relate_as_the_paper_says);
    let config = BertConfig::tiny();
    let base = BertClassifier::<B>::new(&config, 2, &Default::default());
    let x = input(&[vec![2, 7, 9, 4, 3]]);
    let run = |spec: &str| {
        let m = base.clone().with_connections(&ConnectionSpec::parse(spec).unwrap()).unwrap();
        let out = m.forward(&x, ForwardOptions { im_residuals: true, ..Default::default() });
        let h: Vec<f64> = out.last_hidden_state.into_data().into_vec().unwrap();
        let res: Vec<f64> = out
            .im_residuals
            .first()
            .map_or(vec![], |(_, r)| r.iter().map(|t| t.clone().into_scalar()).collect());
        (h, res)
    };
    let (ex, _) = run("ex");
    let (im0, _) = run("im:T=0");
    let (bert, _) = run("bert");
    assert_eq!(ex, im0);
    assert_ne!(ex, bert);
    let (_, res) = run("im:T=8,gamma=0.1,layers=0-0");
    assert_eq!(res.len(), 9);
    assert!(res.last().unwrap() < res.first().unwrap(), "{res:?}");
}

/// A small step descends at every iteration (which a VJP of the wrong sign or scale would
/// not); a step far too large overshoots, and `residual_rises` says where.
#[test]
fn residual_rises_tell_a_small_step_from_an_overshoot() {
    let base = BertClassifier::<B>::new(&BertConfig::tiny(), 2, &Default::default());
    let x = input(&[vec![2, 7, 9, 4, 3], vec![2, 5, 3]]);
    let trace = |spec: &str| -> Vec<Vec<f64>> {
        let m = base.clone().with_connections(&ConnectionSpec::parse(spec).unwrap()).unwrap();
        let out = m.forward(&x, ForwardOptions { im_residuals: true, ..Default::default() });
        out.im_residuals
            .iter()
            .map(|(_, r)| r.iter().map(|t| t.clone().sum().into_scalar()).collect())
            .collect()
    };
    for layer in trace("im:T=6,gamma=0.01") {
        assert!(residual_rises(&layer).is_empty(), "{layer:?}");
        assert!(layer[6] < 0.999 * layer[0], "{layer:?}");
    }
    let overshoot = trace("im:T=6,gamma=5");
    assert!(overshoot.iter().any(|layer| !residual_rises(layer).is_empty()), "{overshoot:?}");
    assert_eq!(residual_rises(&[843.0, 679.0, 460.0]), Vec::<usize>::new());
    assert_eq!(residual_rises(&[786.0f32, 1013.0]), vec![1]);
    assert_eq!(residual_rises(&[786.0, 1013.0, 937.0, 1134.0, 989.0]), vec![1, 3]);
    assert_eq!(residual_rises(&[1.0, 1.0005]), Vec::<usize>::new());
}

/// Backtracking never lets an example's residual rise, even at a step that overshoots
/// everywhere under the fixed rule; at a small step it takes every full step and so lands
/// where the fixed rule does.
#[test]
fn backtracking_never_rises_and_agrees_with_small_fixed_steps() {
    crate::model::f64_process::run_in_f64_process!(
        backtracking_never_rises_and_agrees_with_small_fixed_steps
    );
    let base = BertClassifier::<B>::new(&BertConfig::tiny(), 2, &Default::default());
    let x = input(&[vec![2, 7, 9, 4, 3], vec![2, 5, 3]]);
    let run = |spec: &str| {
        let m = base.clone().with_connections(&ConnectionSpec::parse(spec).unwrap()).unwrap();
        m.forward(
            &x,
            ForwardOptions { im_residuals: true, hidden_states: true, ..Default::default() },
        )
    };
    let per_example = |r: &Tensor<B, 1>| -> Vec<f64> { r.clone().into_data().into_vec().unwrap() };
    let out = run("im:T=6,gamma=5,step=backtrack");
    for (layer, residuals) in &out.im_residuals {
        for example in 0..2 {
            let trace: Vec<f64> = residuals.iter().map(|r| per_example(r)[example]).collect();
            assert!(
                trace.windows(2).all(|w| w[1] <= w[0]),
                "layer {layer}, example {example}: {trace:?}"
            );
            assert!(
                trace[6] < trace[0],
                "layer {layer}, example {example} made no progress: {trace:?}"
            );
        }
    }
    let halved = out
        .im_solves
        .iter()
        .flat_map(|s| s.step_sizes.iter().flat_map(per_example))
        .any(|s| s < 5.0);
    assert!(halved, "at gamma 5 some step must have been halved");
    let hidden = |o: &crate::model::ClassifierOutput<B>| -> Vec<f64> {
        o.last_hidden_state.clone().into_data().into_vec().unwrap()
    };
    let small = run("im:T=4,gamma=0.01,step=backtrack");
    let fixed = run("im:T=4,gamma=0.01");
    let diff =
        hidden(&small).iter().zip(hidden(&fixed)).fold(0.0f64, |m, (a, b)| m.max((a - b).abs()));
    assert!(diff < 1e-12, "backtracking at a small step differs from the fixed rule by {diff}");
    assert!(small.im_solves.iter().all(|s| s
        .step_sizes
        .iter()
        .flat_map(per_example)
        .all(|g| g == 0.01)));

    // Decided on the device (WebGPU in the browser): the same solve, to the last bit.
    let spec = "im:T=6,gamma=5,step=backtrack,tol=0.3";
    let m = base.clone().with_connections(&ConnectionSpec::parse(spec).unwrap()).unwrap();
    let on = |decide_on_device| {
        let options = ForwardOptions {
            im_residuals: true,
            hidden_states: true,
            decide_on_device,
            ..Default::default()
        };
        m.forward(&x, options)
    };
    let (on_host, on_device) = (on(false), on(true));
    assert_eq!(hidden(&on_host), hidden(&on_device));
    let steps = |o: &crate::model::ClassifierOutput<B>| -> Vec<Vec<f64>> {
        o.im_solves.iter().map(|s| s.step_sizes.iter().flat_map(per_example).collect()).collect()
    };
    for (host, device) in steps(&on_host).iter().zip(steps(&on_device)) {
        // The device cannot stop the loop early; it runs on with zero steps.
        assert_eq!(host[..], device[..host.len()]);
        assert!(device[host.len()..].iter().all(|&s| s == 0.0));
    }
}

/// A tolerance stops each example once its residual has fallen far enough, and the loop
/// once every example has; a tolerance never met runs all T iterations.
#[test]
fn tolerance_stops_examples_and_the_loop() {
    crate::model::f64_process::run_in_f64_process!(tolerance_stops_examples_and_the_loop);
    let base = BertClassifier::<B>::new(&BertConfig::tiny(), 2, &Default::default());
    let x = input(&[vec![2, 7, 9, 4, 3], vec![2, 5, 3]]);
    let run = |spec: &str| {
        let m = base.clone().with_connections(&ConnectionSpec::parse(spec).unwrap()).unwrap();
        m.forward(&x, ForwardOptions { im_residuals: true, ..Default::default() })
    };
    let loose = run("im:T=20,gamma=0.1,tol=0.9");
    for (solve, (_, residuals)) in loose.im_solves.iter().zip(&loose.im_residuals) {
        assert!(
            solve.iterations < 20,
            "tol=0.9 should stop early: {} iterations",
            solve.iterations
        );
        assert_eq!(residuals.len(), 21, "the trace keeps T + 1 entries");
        let first: Vec<f64> = residuals[0].clone().into_data().into_vec().unwrap();
        let last: Vec<f64> = residuals[20].clone().into_data().into_vec().unwrap();
        for (f, l) in first.iter().zip(&last) {
            assert!(*l <= 0.9 * f, "{l} vs {f}");
        }
    }
    let tight = run("im:T=3,gamma=0.01,tol=1e-9");
    assert!(tight.im_solves.iter().all(|s| s.iterations == 3));
}
