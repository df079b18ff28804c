//! Each kernel against a reference written with burn's ops (and some against f64 definitions):
//! at inference, under autodiff, and the gradients of every input.

use super::dropout::keep_mask;
use super::gemm::gemm_into;
use super::norm::layer_norm_cpu_f32;
use super::simd::exp_f32;
use super::*;
use burn::backend::{Autodiff, NdArray};
use burn::tensor::activation::softmax;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{DType, TensorData};

type Cpu = NdArray<f32>;

/// An f32 tensor, made so whatever the device's default dtype.
///
/// burn 0.21 keeps one default dtype per device for the whole process, fixed by the first op
/// that asks for it, and `NdArray<f32>` and `NdArray<f64>` share the CPU device. The other
/// tests in this binary run in f64, so the policy is pinned to f64 here, before any op of
/// these tests can fix it to f32 (burn's softmax does), whatever order the tests run in.
fn f32_tensor<B: Backend, const D: usize>(values: Vec<f32>, shape: [usize; D]) -> Tensor<B, D> {
    // An error means the policy is already fixed, to f64: the only other backend used here.
    let _ = burn::tensor::set_default_dtypes::<NdArray<f64>>(
        &Default::default(),
        DType::F64,
        DType::I64,
    );
    Tensor::from_data(TensorData::new(values, shape), (&Default::default(), DType::F32))
}

fn values<B: Backend, const D: usize>(t: Tensor<B, D>) -> Vec<f32> {
    t.into_data().convert::<f32>().into_vec().unwrap()
}

/// Deterministic pseudo-normal values with standard deviation about `scale`.
pub(super) fn noise(n: usize, scale: f32) -> Vec<f32> {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    (0..n)
        .map(|_| {
            let sum: f32 = (0..4)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5
                })
                .sum();
            sum * scale * 1.73
        })
        .collect()
}

pub(super) fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    // A NaN anywhere makes the result NaN, so the callers' asserts fail.
    a.iter()
        .zip(b)
        .fold(0.0, |m, (x, y)| if (x - y).is_nan() { f32::NAN } else { m.max((x - y).abs()) })
}

/// The f32 kernel against f64 `erf` on the same inputs.
/// The CPU mask holds only 0 and `1 / (1 - p)`, keeps about `1 - p`, and its seed fixes it.
/// (That `B::seed` fixes the seed drawn: the trainer's resume test, with dropout on.)
#[test]
fn dropout_keep_mask_is_seeded_and_keeps_one_minus_p() {
    let like = f32_tensor::<Cpu, 3>(vec![0.0; 64 * 128 * 8], [64, 128, 8]);
    let mask = values(dropout_keep(&like, 0.1));
    assert_eq!(mask.len(), 65_536);
    assert!(mask.iter().all(|&v| v == 0.0 || (v - 1.0 / 0.9).abs() < 1e-6));

    let draw = |seed| keep_mask(seed, 65_536, 0.1);
    let (a, b, c) = (draw(7), draw(7), draw(8));
    assert_eq!(a, b, "same seed, same mask");
    assert_ne!(a, c, "another seed, another mask");
    let kept = a.iter().filter(|&&v| v > 0.0).count() as f64 / a.len() as f64;
    // 65,536 draws: the standard deviation of the kept share is 0.0012.
    println!("kept share {kept:.4}");
    assert!((kept - 0.9).abs() < 0.006, "kept {kept}");
    // Neighbouring elements are independent: no pair pattern beyond chance.
    let both_dropped =
        a.chunks(2).filter(|p| p[0] == 0.0 && p[1] == 0.0).count() as f64 / (a.len() / 2) as f64;
    assert!((both_dropped - 0.01).abs() < 0.003, "both of a pair dropped: {both_dropped}");
}

#[test]
fn normal_cdf_kernel_matches_f64_erf() {
    let xs = noise(3 * 50 * 700, 3.0);
    let ours = values(normal_cdf(f32_tensor::<Cpu, 3>(xs.clone(), [3, 50, 700])));
    let diff = xs.iter().zip(&ours).fold(0.0f64, |m, (&x, &y)| {
        let exact = 0.5 * (1.0 + libm::erf(x as f64 * std::f64::consts::FRAC_1_SQRT_2));
        m.max((y as f64 - exact).abs())
    });
    println!("normal_cdf: max |f32 kernel - f64 erf| = {diff:.2e}");
    assert!(diff < 4e-7, "{diff}");
}

/// Within 2 ulp of f64's `exp` over f32's normal range; 0 below it (a padded key's score);
/// NaN stays NaN; above 88 it saturates at `e^88`.
#[test]
fn exp_kernel_matches_f64_exp() {
    let mut worst = 0.0f64;
    for i in -87_000..=88_000 {
        let x = i as f32 / 1000.0;
        let exact = (x as f64).exp();
        worst = worst.max((exp_f32(x) as f64 - exact).abs() / exact);
    }
    println!("exp_f32: max relative error {worst:.2e} ({:.2} ulp)", worst / f32::EPSILON as f64);
    assert!(worst < 2.0 * f32::EPSILON as f64, "{worst}");
    assert_eq!(exp_f32(0.0), 1.0);
    for x in [-87.4, -100.0, -1e9, f32::NEG_INFINITY] {
        assert_eq!(exp_f32(x), 0.0, "exp({x})");
    }
    assert!(exp_f32(f32::NAN).is_nan());
    assert_eq!(exp_f32(1e9), exp_f32(88.0));
}

/// The row kernels run the AVX2 copy on this machine when it has AVX2: it must agree with
/// f64 softmax, keep NaN (the trainer stops on it) and give masked keys exactly 0.
#[test]
fn softmax_row_matches_f64_and_keeps_nan() {
    for width in [1, 7, 8, 128, 131] {
        let row: Vec<f32> = noise(width, 6.0);
        let mut ours = row.clone();
        softmax_row(&mut ours);
        let max = row.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v as f64));
        let sum: f64 = row.iter().map(|&v| (v as f64 - max).exp()).sum();
        for (&o, &v) in ours.iter().zip(&row) {
            let exact = (v as f64 - max).exp() / sum;
            assert!(
                (o as f64 - exact).abs() <= 1e-6 * exact.max(1e-3),
                "width {width}: {o} vs {exact}"
            );
        }
    }
    let mut masked = vec![0.5, -1e9, 2.0, -1e9];
    softmax_row(&mut masked);
    assert_eq!((masked[1], masked[3]), (0.0, 0.0));
    let mut with_nan = vec![0.5, f32::NAN, 2.0];
    softmax_row(&mut with_nan);
    assert!(with_nan.iter().all(|v| v.is_nan()), "{with_nan:?}");
}

type Train = Autodiff<Cpu>;
/// The reference backend: burn's own ops in f64, under autodiff. No kernel runs there (the
/// kernels only take over f32 data, and the reference bodies call none of them).
type Reference = Autodiff<NdArray<f64>>;

/// `values` as a tensor of `dtype` (burn converts on creation).
fn tensor_of<B: Backend, const D: usize>(
    values: Vec<f32>,
    shape: [usize; D],
    dtype: DType,
) -> Tensor<B, D> {
    let _ = f32_tensor::<Cpu, 1>(vec![0.0], [1]); // pins the default dtype first, see there
    Tensor::from_data(TensorData::new(values, shape), (&Default::default(), dtype))
}

/// Input `i` of a check: noise of `shape`, offset by `i` so that the inputs differ.
fn input_values(shape: &[usize], i: usize, scale: f32) -> Vec<f32> {
    noise(shape.iter().product::<usize>() + i, scale)[i..].to_vec()
}

fn inputs<B: Backend, const D: usize>(
    shapes: &[[usize; D]],
    scale: f32,
    dtype: DType,
) -> Vec<Tensor<B, D>> {
    shapes
        .iter()
        .enumerate()
        .map(|(i, s)| tensor_of(input_values(s, i, scale), *s, dtype))
        .collect()
}

/// [`inputs`] as leaves, those marked in `tracked` asking for a gradient (a constant input,
/// such as a mask, must not: the kernel nodes leave those to burn's ops).
fn leaves<B: AutodiffBackend, const D: usize>(
    shapes: &[[usize; D]],
    scale: f32,
    dtype: DType,
    tracked: &[bool],
) -> Vec<Tensor<B, D>> {
    let all = inputs::<B, D>(shapes, scale, dtype);
    all.into_iter().zip(tracked).map(|(t, &grad)| if grad { t.require_grad() } else { t }).collect()
}

/// `max |ours - reference| / max |reference|`.
fn rel_error(ours: &[f32], reference: &[f32]) -> f32 {
    max_abs_diff(ours, reference) / reference.iter().fold(1e-12f32, |m, v| m.max(v.abs()))
}

/// A kernel against its reference written out with burn's ops: the output at inference
/// (`NdArray<f32>`, the fused kernel) and in training (`Autodiff<NdArray<f32>>`, the kernel's
/// autodiff node), and the gradient of `sum(out * r)`, `r` random, with respect to every
/// input marked tracked, each against the reference in f64 (`Autodiff<NdArray<f64>>`).
/// `$t` names the inputs (noise of `$shapes` times `$scale`) in both bodies.
macro_rules! check_kernel {
    ($shapes:expr, scale $scale:expr, tracked $tracked:expr, tol $tol:expr,
     kernel |$t:ident| $kernel:expr, reference |$u:ident| $reference:expr $(,)?) => {{
        let (shapes, tracked, tol): (_, &[bool], f32) = (&$shapes[..], &$tracked[..], $tol);
        let reference_leaves = leaves::<Reference, _>(shapes, $scale, DType::F64, tracked);
        let $u = reference_leaves.clone();
        let reference_out = $reference;
        let dims = reference_out.dims();
        let r = input_values(&dims, 7, 1.0);
        let reference_grads =
            (reference_out.clone() * tensor_of(r.clone(), dims, DType::F64)).sum().backward();
        let want = values(reference_out);

        let $t = inputs::<Cpu, _>(shapes, $scale, DType::F32);
        let e = rel_error(&values($kernel), &want);
        println!("{}: inference output, relative error {e:.1e}", stringify!($kernel));
        assert!(e < tol, "inference output differs: {e:.1e}");

        let train_leaves = leaves::<Train, _>(shapes, $scale, DType::F32, tracked);
        let $t = train_leaves.clone();
        let out = $kernel;
        let e = rel_error(&values(out.clone()), &want);
        println!("{}: training output, relative error {e:.1e}", stringify!($kernel));
        assert!(e < tol, "training output differs: {e:.1e}");
        let grads = (out * tensor_of(r, dims, DType::F32)).sum().backward();
        for (i, leaf) in train_leaves.iter().enumerate().filter(|(i, _)| tracked[*i]) {
            let want =
                values(reference_leaves[i].grad(&reference_grads).expect("a reference gradient"));
            assert!(want.iter().any(|v| v.abs() > 1e-6), "no gradient reaches input {i}");
            let e = rel_error(&values(leaf.grad(&grads).expect("a kernel gradient")), &want);
            println!("input {i}: relative gradient error {e:.1e}");
            assert!(e < tol, "gradient of input {i} differs: {e:.1e}");
        }
    }};
}

/// Padding bias `[2, 1, 1, 7]` of `like`'s dtype: the last two keys of the first item and
/// the last of the second.
fn padding_bias<B: Backend>(like: &Tensor<B, 4>) -> Tensor<B, 4> {
    let bias: Vec<f32> =
        (0..14).map(|i| if i == 5 || i == 6 || i == 13 { -1.0e9 } else { 0.0 }).collect();
    tensor_of(bias, [2, 1, 1, 7], like.dtype())
}

/// Softmax over the last dimension from `exp` and `sum` (max-subtracted).
fn softmax_reference<B: Backend, const D: usize>(x: Tensor<B, D>) -> Tensor<B, D> {
    let e = (x.clone() - x.max_dim(D - 1)).exp();
    e.clone() / e.sum_dim(D - 1)
}

/// `Phi(x)` from burn's `erf`.
fn cdf_reference<B: Backend, const D: usize>(x: Tensor<B, D>) -> Tensor<B, D> {
    x.mul_scalar(std::f64::consts::FRAC_1_SQRT_2).erf().add_scalar(1.0).mul_scalar(0.5)
}

/// `phi(x)`, the standard normal density.
fn pdf_reference<B: Backend, const D: usize>(x: Tensor<B, D>) -> Tensor<B, D> {
    (x.clone() * x).mul_scalar(-0.5).exp().mul_scalar(1.0 / (2.0 * std::f64::consts::PI).sqrt())
}

/// LayerNorm's `(x_hat, rstd)` from `mean` and the biased variance.
fn normalise_reference<B: Backend, const D: usize>(
    x: Tensor<B, D>,
    eps: f64,
) -> (Tensor<B, D>, Tensor<B, D>) {
    let centred = x.clone() - x.mean_dim(D - 1);
    let rstd = (centred.clone() * centred.clone()).mean_dim(D - 1).add_scalar(eps).sqrt().recip();
    (centred * rstd.clone(), rstd)
}

mod against_reference;
