//! The exact GELU `x Phi(x)`, the normal CDF `Phi` it is built from, and their backward passes.

use std::mem::MaybeUninit;

use burn::tensor::backend::Backend;
use burn::tensor::Tensor;
use ndarray::ArrayD;

#[cfg(not(target_arch = "wasm32"))]
use super::autodiff;
use super::simd::{cdf_f32, pdf_f32, vectorised};
use super::{cpu_f32, for_blocks, from_cpu_f32, new_rows_uninit, on_cpu_f32, rows_in_place};

/// `Phi(x) = (1 + erf(x / sqrt 2)) / 2`, the standard normal CDF (exact GELU is `x Phi(x)`).
pub fn normal_cdf<B: Backend, const D: usize>(x: Tensor<B, D>) -> Tensor<B, D> {
    train_node!(autodiff::normal_cdf(&x));
    match on_cpu_f32(x, |_, buf| for_blocks(buf, 1 << 14, cdf_in_place)) {
        Ok(y) => y,
        Err(x) => {
            x.mul_scalar(std::f64::consts::FRAC_1_SQRT_2).erf().add_scalar(1.0).mul_scalar(0.5)
        }
    }
}

/// Input-gradient of [`normal_cdf`]: `g phi(x)`, with `phi` the standard normal density.
pub fn normal_cdf_backward<B: Backend, const D: usize>(
    g: Tensor<B, D>,
    x: &Tensor<B, D>,
) -> Tensor<B, D> {
    let kernel = |_: usize, d: &mut [f32], [x]: [&[f32]; 1]| times_pdf(d, x);
    rows_in_place(g, [x], kernel).unwrap_or_else(|g| g * normal_pdf(x))
}

/// Exact GELU, `x Phi(x)`, and `Phi(x)`, which its backward reuses. Built from `erf` (not burn's
/// `gelu`, whose backward differentiates the tanh approximation), so autodiff differentiates the
/// true function.
pub fn gelu<B: Backend, const D: usize>(x: Tensor<B, D>) -> (Tensor<B, D>, Tensor<B, D>) {
    train_node!(autodiff::gelu(&x));
    if let Some(pair) = gelu_cpu_f32(&x) {
        return pair;
    }
    // Every other backend: autodiff differentiates the composed ops.
    let cdf = normal_cdf(x.clone());
    (x * cdf.clone(), cdf)
}

/// [`gelu`] on burn-ndarray with f32 data: one pass reads `x` and writes both outputs. (As two
/// kernels, each copied `x` first, since the caller keeps `x` for the backward.)
fn gelu_cpu_f32<B: Backend, const D: usize>(
    x: &Tensor<B, D>,
) -> Option<(Tensor<B, D>, Tensor<B, D>)> {
    let x = cpu_f32(x.clone()).ok()?;
    let xs = x.as_slice()?;
    const BLOCK: usize = 1 << 14;
    // SAFETY: `gelu_and_cdf` writes every element of both blocks, one per element of `x`'s slice
    // of the same length.
    let [y, cdf] = unsafe {
        new_rows_uninit(xs.len(), [1, 1], BLOCK, |first, [y, c]| {
            gelu_and_cdf(&xs[first..first + y.len()], y, c)
        })
    };
    let shaped = |v: Vec<f32>| {
        ArrayD::from_shape_vec(x.shape(), v).ok().map(|a| from_cpu_f32(a.into_shared()))
    };
    Some((shaped(y)?, shaped(cdf)?))
}

/// Input-gradient of the exact GELU `x Phi(x)`: `dout * (Phi(x) + x phi(x))`, with `Phi(x)` kept
/// from the forward.
pub fn gelu_backward<B: Backend, const D: usize>(
    dout: Tensor<B, D>,
    x: &Tensor<B, D>,
    cdf: &Tensor<B, D>,
) -> Tensor<B, D> {
    train_node!(autodiff::gelu_backward(&dout, x, cdf));
    let kernel = |_: usize, d: &mut [f32], [x, c]: [&[f32]; 2]| times_gelu_derivative(d, x, c);
    rows_in_place(dout, [x, cdf], kernel)
        .unwrap_or_else(|dout| dout * (cdf.clone() + x.clone() * normal_pdf(x)))
}

/// Exact GELU alone, for a forward that keeps nothing for a backward: on the CPU in place over
/// `x`'s buffer, without [`gelu`]'s second output.
pub fn gelu_output<B: Backend, const D: usize>(x: Tensor<B, D>) -> Tensor<B, D> {
    #[cfg(not(target_arch = "wasm32"))]
    if let Some((y, _)) = autodiff::gelu(&x) {
        return y;
    }
    on_cpu_f32(x, |_, buf| for_blocks(buf, 1 << 14, gelu_in_place)).unwrap_or_else(|x| gelu(x).0)
}

/// `phi(x)` from burn's ops, for the composed paths. (`x * x`, not powi: the CPU backend computes
/// powers with a scalar powf per element.)
pub(super) fn normal_pdf<B: Backend, const D: usize>(x: &Tensor<B, D>) -> Tensor<B, D> {
    (x.clone() * x.clone())
        .mul_scalar(-0.5)
        .exp()
        .mul_scalar(1.0 / (2.0 * std::f64::consts::PI).sqrt())
}

vectorised! {
    /// `Phi(x)` of each element, in place.
    fn cdf_in_place(x: &mut [f32]) {
        x.iter_mut().for_each(|v| *v = cdf_f32(*v));
    }
}

vectorised! {
    /// `x Phi(x)` of each element, in place.
    fn gelu_in_place(x: &mut [f32]) {
        x.iter_mut().for_each(|v| *v *= cdf_f32(*v));
    }
}

vectorised! {
    /// `y = x Phi(x)` and `cdf = Phi(x)`, element by element (as many as `x` has).
    fn gelu_and_cdf(x: &[f32], y: &mut [MaybeUninit<f32>], cdf: &mut [MaybeUninit<f32>]) {
        for ((&x, y), c) in x.iter().zip(y.iter_mut()).zip(cdf.iter_mut()) {
            let phi = cdf_f32(x);
            c.write(phi);
            y.write(x * phi);
        }
    }
}

vectorised! {
    /// `d *= phi(x)`, element by element.
    fn times_pdf(d: &mut [f32], x: &[f32]) {
        d.iter_mut().zip(x).for_each(|(d, &x)| *d *= pdf_f32(x));
    }
}

vectorised! {
    /// `d *= Phi(x) + x phi(x)`, the exact GELU's derivative, with `Phi(x)` given.
    fn times_gelu_derivative(d: &mut [f32], x: &[f32], cdf: &[f32]) {
        for ((d, &x), &c) in d.iter_mut().zip(x).zip(cdf) {
            *d *= c + x * pdf_f32(x);
        }
    }
}
