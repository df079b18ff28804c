//! Each node's output and gradients against burn's composed ops on the same backend.

use super::super::tests::{max_abs_diff, noise};
use super::*;
use burn::tensor::activation::softmax;
use burn::tensor::{DType, TensorData};

type T = Train;

fn f32_tensor<const D: usize>(shape: [usize; D], scale: f32, salt: usize) -> Tensor<T, D> {
    let n: usize = shape.iter().product();
    let values: Vec<f32> = noise(n + salt, scale).split_off(salt);
    // Explicitly f32: the other tests in this binary pin the CPU's default dtype to f64.
    Tensor::from_data(TensorData::new(values, shape), (&Default::default(), DType::F32))
}

fn tracked<const D: usize>(shape: [usize; D], salt: usize) -> Tensor<T, D> {
    f32_tensor(shape, 1.0, salt).require_grad()
}

fn values<B: Backend, const D: usize>(t: Tensor<B, D>) -> Vec<f32> {
    t.into_data().convert::<f32>().into_vec().unwrap()
}

/// `max |ours - burn| / max |burn|`.
fn rel(ours: &[f32], burn: &[f32]) -> f32 {
    max_abs_diff(ours, burn) / burn.iter().fold(1e-12f32, |m, v| m.max(v.abs()))
}

/// Forward values and the gradients of `sum(out * r)` with respect to `inputs`, from the
/// kernel node (`ours`) and from burn's own ops (`burn`), agree within 2e-5 relative.
macro_rules! check_grads {
    ($ours:expr, $burn:expr, $r:expr, [$($input:expr),+]) => {{
        let (ours, burn) = ($ours, $burn);
        assert!(rel(&values(ours.clone()), &values(burn.clone())) < 2e-5, "forward differs");
        let g_ours = (ours * $r.clone()).sum().backward();
        let g_burn = (burn * $r.clone()).sum().backward();
        $(
            let reference = values($input.grad(&g_burn).unwrap());
            assert!(
                reference.iter().any(|v| v.abs() > 1e-6),
                "no gradient reaches {}",
                stringify!($input)
            );
            let e = rel(&values($input.grad(&g_ours).unwrap()), &reference);
            println!("{}: relative gradient error {e:.1e}", stringify!($input));
            assert!(e < 2e-5, "gradient of {} differs: {e:.1e}", stringify!($input));
        )+
    }};
}

#[test]
fn linear_node_matches_burn() {
    let (x, w, b) = (tracked([2, 5, 6], 0), tracked([6, 4], 1), tracked([4], 2));
    let r = f32_tensor([2, 5, 4], 1.0, 3);
    let burn = x.clone().matmul(w.clone().unsqueeze()) + b.clone().unsqueeze();
    check_grads!(super::super::linear(x.clone(), w.clone(), Some(b.clone())), burn, r, [x, w, b]);

    // A VJP's transposed weight, without a bias.
    let (x, w) = (tracked([2, 5, 4], 4), tracked([6, 4], 5));
    let r = f32_tensor([2, 5, 6], 1.0, 6);
    let burn = x.clone().matmul(w.clone().transpose().unsqueeze());
    check_grads!(super::super::linear(x.clone(), w.clone().transpose(), None), burn, r, [x, w]);
}

#[test]
fn matmul_node_matches_burn() {
    let (a, b) = (tracked([2, 3, 5, 4], 7), tracked([2, 3, 5, 4], 8));
    let r = f32_tensor([2, 3, 5, 5], 1.0, 9);
    let burn = a.clone().matmul(b.clone().swap_dims(2, 3));
    check_grads!(super::super::matmul(a.clone(), b.clone().swap_dims(2, 3)), burn, r, [a, b]);
}

#[test]
fn normal_cdf_node_matches_burn() {
    let x = f32_tensor([3, 7, 5], 2.0, 10).require_grad();
    let r = f32_tensor([3, 7, 5], 1.0, 11);
    let burn =
        x.clone().mul_scalar(std::f64::consts::FRAC_1_SQRT_2).erf().add_scalar(1.0).mul_scalar(0.5);
    // The kernel's erf is within 1.5e-7 (Abramowitz & Stegun), so the forward agrees to ~1e-6.
    check_grads!(super::super::normal_cdf(x.clone()), burn, r, [x]);
}

#[test]
fn attention_probs_node_matches_burn() {
    let scores = f32_tensor([2, 3, 4, 5], 3.0, 12).require_grad();
    let mut bias = vec![0.0f32; 10];
    bias[8..].fill(-1e9); // the second item's last two keys are padding
    let bias = Tensor::<T, 4>::from_data(
        TensorData::new(bias, [2, 1, 1, 5]),
        (&Default::default(), DType::F32),
    );
    let r = f32_tensor([2, 3, 4, 5], 1.0, 13);
    let burn = softmax(scores.clone().mul_scalar(0.5) + bias.clone(), 3);
    check_grads!(super::super::attention_probs(scores.clone(), 0.5, &bias), burn, r, [scores]);
}

#[test]
fn layer_norm_nodes_match_burn() {
    let (x, gamma, beta) =
        (f32_tensor([2, 5, 8], 3.0, 14).require_grad(), tracked([8], 15), tracked([8], 16));
    let r: [Tensor<T, 3>; 3] = [
        f32_tensor([2, 5, 8], 1.0, 17),
        f32_tensor([2, 5, 8], 1.0, 18),
        f32_tensor([2, 5, 1], 1.0, 19),
    ];
    let eps = 1e-12;
    let (y, x_hat, rstd) =
        super::super::layer_norm(x.clone(), gamma.clone(), Some(beta.clone()), eps);
    let centered = x.clone() - x.clone().mean_dim(2);
    let burn_rstd =
        (centered.clone() * centered.clone()).mean_dim(2).add_scalar(eps).sqrt().recip();
    let burn_x_hat = centered * burn_rstd.clone();
    let burn_y = burn_x_hat.clone() * gamma.clone().unsqueeze() + beta.clone().unsqueeze();
    // All three outputs at once, as the IM-connection's VJP uses them.
    let ours =
        (y * r[0].clone()).sum() + (x_hat * r[1].clone()).sum() + (rstd * r[2].clone()).sum();
    let burn = (burn_y * r[0].clone()).sum()
        + (burn_x_hat * r[1].clone()).sum()
        + (burn_rstd * r[2].clone()).sum();
    check_grads!(ours, burn, f32_tensor([1], 1.0, 20), [x, gamma, beta]);
}

#[test]
fn softmax_backward_node_matches_burn() {
    let probs = softmax(f32_tensor([2, 3, 4, 5], 2.0, 23), 3);
    let probs = Tensor::<T, 4>::from_data(probs.into_data(), (&Default::default(), DType::F32))
        .require_grad();
    let d = tracked([2, 3, 4, 5], 24);
    let r = f32_tensor([2, 3, 4, 5], 1.0, 25);
    let burn =
        (probs.clone() * (d.clone() - (d.clone() * probs.clone()).sum_dim(3))).mul_scalar(0.5);
    check_grads!(super::super::softmax_backward(d.clone(), &probs, 0.5), burn, r, [d, probs]);
}

#[test]
fn gelu_backward_node_matches_burn() {
    let (d, x) = (tracked([3, 4, 6], 26), f32_tensor([3, 4, 6], 2.0, 27).require_grad());
    // `x` reaches the output directly and through `cdf`. Each side builds its own graph from
    // the leaves: a backward pass consumes the graph it runs through.
    let cdf = || {
        x.clone().mul_scalar(std::f64::consts::FRAC_1_SQRT_2).erf().add_scalar(1.0).mul_scalar(0.5)
    };
    let r = f32_tensor([3, 4, 6], 1.0, 28);
    let pdf = (x.clone() * x.clone())
        .mul_scalar(-0.5)
        .exp()
        .mul_scalar(1.0 / (2.0 * std::f64::consts::PI).sqrt());
    let burn = d.clone() * (cdf() + x.clone() * pdf);
    check_grads!(super::super::gelu_backward(d.clone(), &x, &cdf()), burn, r, [d, x]);
}

#[test]
fn layer_norm_backward_node_matches_burn() {
    let x = f32_tensor([2, 5, 8], 3.0, 29).require_grad();
    let (d, gamma) = (tracked([2, 5, 8], 30), tracked([8], 31));
    let r = f32_tensor([2, 5, 8], 1.0, 32);
    // x_hat and rstd as functions of x, so all four inputs carry gradients back to x; each
    // side with its own graph.
    let normalise = || {
        let centered = x.clone() - x.clone().mean_dim(2);
        let rstd =
            (centered.clone() * centered.clone()).mean_dim(2).add_scalar(1e-12).sqrt().recip();
        (centered * rstd.clone(), rstd)
    };
    let (x_hat, rstd) = normalise();
    let h = d.clone() * gamma.clone().unsqueeze();
    let burn = (h.clone() - h.clone().mean_dim(2) - x_hat.clone() * (h * x_hat).mean_dim(2)) * rstd;
    let (x_hat, rstd) = normalise();
    check_grads!(
        super::super::layer_norm_backward(d.clone(), &x_hat, &rstd, gamma.clone()),
        burn,
        r,
        [d, gamma, x]
    );
}

/// An inverted-dropout mask like [`super::super::dropout_keep`]'s: 0 or 2, as a constant.
fn keep_mask<const D: usize>(shape: [usize; D], salt: usize) -> Tensor<T, D> {
    let n: usize = shape.iter().product();
    let values: Vec<f32> = noise(n + salt, 1.0)
        .split_off(salt)
        .iter()
        .map(|v| if *v > 0.0 { 2.0 } else { 0.0 })
        .collect();
    Tensor::from_data(TensorData::new(values, shape), (&Default::default(), DType::F32))
}

// Each check below starts from fresh leaves: burn does not give a leaf a gradient in a second
// backward pass.

#[test]
fn dropout_and_residual_nodes_match_burn() {
    let leaves = || (tracked([2, 5, 6], 40), tracked([2, 5, 6], 41));
    let (keep, r) = (keep_mask([2, 5, 6], 42), f32_tensor([2, 5, 6], 1.0, 43));
    let (x, _) = leaves();
    let before = values(x.clone());
    check_grads!(super::super::times_keep(x.clone(), &keep), x.clone() * keep.clone(), r, [x]);
    let (x, residual) = leaves();
    let burn = x.clone() * keep.clone() + residual.clone();
    check_grads!(
        super::super::add_residual(x.clone(), Some(&keep), residual.clone()),
        burn,
        r,
        [x, residual]
    );
    let (x, residual) = leaves();
    let burn = x.clone() + residual.clone();
    check_grads!(
        super::super::add_residual(x.clone(), None, residual.clone()),
        burn,
        r,
        [x, residual]
    );
    // The kernels write in place only into a buffer nothing else holds.
    assert_eq!(values(x), before);
}

#[test]
fn im_update_nodes_match_burn() {
    let leaves = || (tracked([2, 4, 6], 44), tracked([2, 4, 6], 45), tracked([2, 4, 6], 46));
    let mut mask = vec![1.0f32; 8];
    mask[6..].fill(0.0); // the second item's last two tokens are padding
    let mask = Tensor::<T, 3>::from_data(
        TensorData::new(mask, [2, 4, 1]),
        (&Default::default(), DType::F32),
    );
    let r = f32_tensor([2, 4, 6], 1.0, 47);
    let (z, h, phi) = leaves();
    let burn = (z.clone() - h.clone() - phi.clone()) * mask.clone();
    check_grads!(super::super::masked_residual(&z, &h, phi.clone(), &mask), burn, r, [z, h, phi]);

    let (z, res, jtr) = leaves();
    let burn = z.clone() - (res.clone() - jtr.clone()).mul_scalar(0.2);
    check_grads!(super::super::descent_step(&z, &res, jtr.clone(), 0.2), burn, r, [z, res, jtr]);
}

#[test]
fn gelu_nodes_match_burn() {
    let x = f32_tensor([3, 4, 6], 2.0, 50).require_grad();
    let r: [Tensor<T, 3>; 2] = [f32_tensor([3, 4, 6], 1.0, 51), f32_tensor([3, 4, 6], 1.0, 52)];
    let (y, cdf) = super::super::gelu(x.clone());
    let ours = (y * r[0].clone()).sum() + (cdf * r[1].clone()).sum();
    let burn_cdf =
        x.clone().mul_scalar(std::f64::consts::FRAC_1_SQRT_2).erf().add_scalar(1.0).mul_scalar(0.5);
    let burn =
        ((x.clone() * burn_cdf.clone()) * r[0].clone()).sum() + (burn_cdf * r[1].clone()).sum();
    check_grads!(ours, burn, f32_tensor([1], 1.0, 53), [x]);
}

#[test]
fn head_split_and_merge_nodes_match_burn() {
    let (batch, seq, heads, head_dim) = (2, 5, 3, 4);
    let hidden = heads * head_dim;
    let leaf = || tracked([batch, seq, 3 * hidden], 54);
    let burn_split = |qkv: &Tensor<T, 3>, part: usize| {
        qkv.clone()
            .narrow(2, part * hidden, hidden)
            .reshape([batch, seq, heads, head_dim])
            .swap_dims(1, 2)
    };
    let r = f32_tensor([batch, heads, seq, head_dim], 1.0, 55);
    for part in 0..3 {
        let qkv = leaf();
        check_grads!(
            super::super::split_heads(qkv.clone(), 3, part, heads),
            burn_split(&qkv, part),
            r,
            [qkv]
        );
    }
    // All three parts at once: burn sums the three gradients of the projection.
    let qkv = leaf();
    let r3: [Tensor<T, 4>; 3] =
        std::array::from_fn(|i| f32_tensor([batch, heads, seq, head_dim], 1.0, 56 + i));
    let ours =
        (0..3).map(|p| (super::super::split_heads(qkv.clone(), 3, p, heads) * r3[p].clone()).sum());
    let burn = (0..3).map(|p| (burn_split(&qkv, p) * r3[p].clone()).sum());
    let (ours, burn) = (ours.reduce(|a, b| a + b).unwrap(), burn.reduce(|a, b| a + b).unwrap());
    check_grads!(ours, burn, f32_tensor([1], 1.0, 59), [qkv]);

    // The VJP's `[dq dk dv]`: three products, with transposed and strided operands; and one
    // product, attention's context.
    let merge = |(a, b): (Tensor<T, 4>, Tensor<T, 4>)| {
        a.matmul(b).swap_dims(1, 2).reshape([batch, seq, hidden])
    };
    for three in [true, false] {
        let (s, qkv) = (tracked([batch, heads, seq, seq], 60), leaf());
        // Each side with its own graph from the leaves.
        let products = || {
            let [q, k, v] = [0, 1, 2].map(|part| burn_split(&qkv, part));
            match three {
                true => vec![(s.clone(), k), (s.clone().swap_dims(2, 3), q), (s.clone(), v)],
                false => vec![(s.clone(), v)],
            }
        };
        let burn = Tensor::cat(products().into_iter().map(merge).collect(), 2);
        let r = f32_tensor([batch, seq, if three { 3 * hidden } else { hidden }], 1.0, 61);
        check_grads!(super::super::matmul_merged(products()), burn, r, [s, qkv]);
    }
}

/// A weight that asks for no gradient gets none, and the input's gradient is unchanged.
#[test]
fn untracked_parents_get_no_gradient() {
    let (x, w) = (tracked([3, 6], 21), f32_tensor([6, 4], 1.0, 22));
    let grads = super::super::linear(x.clone(), w.clone(), None).sum().backward();
    assert!(w.grad(&grads).is_none());
    let expected = w.clone().sum_dim(1).reshape([1, 6]).repeat_dim(0, 3);
    assert!(max_abs_diff(&values(x.grad(&grads).unwrap()), &values(expected)) < 1e-5);
}
