//! The residual stream and IM-BERT's update: a sub-block's output joining the stream, IM's
//! masked residual and its descent step, each one pass over a buffer it overwrites.

use burn::tensor::backend::Backend;
use burn::tensor::Tensor;

#[cfg(not(target_arch = "wasm32"))]
use super::autodiff;
use super::rows_in_place;

/// A sub-block's output joining the residual stream: `x * keep + residual`, with `keep` the
/// sub-block's dropout mask (`None` when not training). One pass over `x`'s buffer on the CPU.
pub fn add_residual<B: Backend, const D: usize>(
    x: Tensor<B, D>,
    keep: Option<&Tensor<B, D>>,
    residual: Tensor<B, D>,
) -> Tensor<B, D> {
    let composed = |x: Tensor<B, D>, residual: Tensor<B, D>| match keep {
        Some(keep) => x * keep.clone() + residual,
        None => x + residual,
    };
    if x.dims() != residual.dims() || keep.is_some_and(|k| k.dims() != x.dims()) {
        return composed(x, residual); // burn's own ops broadcast or report the mismatch
    }
    #[cfg(not(target_arch = "wasm32"))]
    let (x, residual) = match autodiff::add_residual(x, keep, residual) {
        Ok(y) => return y,
        Err(pair) => pair,
    };
    let done = match keep {
        Some(keep) => rows_in_place(x, [&residual, keep], |_, out, [r, k]| {
            out.iter_mut().zip(r).zip(k).for_each(|((o, r), k)| *o = *o * k + r);
        }),
        None => rows_in_place(x, [&residual], |_, out, [r]| {
            out.iter_mut().zip(r).for_each(|(o, r)| *o += r)
        }),
    };
    done.unwrap_or_else(|x| composed(x, residual))
}

/// IM-BERT's residual `(z - h - phi) * mask` in one pass over `phi`'s buffer, with `mask`
/// `[batch, seq, 1]` (1 on real tokens).
pub fn masked_residual<B: Backend>(
    z: &Tensor<B, 3>,
    h: &Tensor<B, 3>,
    phi: Tensor<B, 3>,
    mask: &Tensor<B, 3>,
) -> Tensor<B, 3> {
    #[cfg(not(target_arch = "wasm32"))]
    let phi = match autodiff::masked_residual(z, h, phi, mask) {
        Ok(r) => return r,
        Err(phi) => phi,
    };
    let width = phi.dims()[2];
    let kernel = |_: usize, out: &mut [f32], [z, h, mask]: [&[f32]; 3]| {
        let rows = out.chunks_mut(width).zip(z.chunks(width)).zip(h.chunks(width)).zip(mask);
        for (((out, z), h), &m) in rows {
            for ((o, &z), &h) in out.iter_mut().zip(z).zip(h) {
                *o = (z - h - *o) * m;
            }
        }
    };
    rows_in_place(phi, [z, h, mask], kernel)
        .unwrap_or_else(|phi| (z.clone() - h.clone() - phi) * mask.clone())
}

/// A gradient-descent step `z - step * (r - jtr)` in one pass over `jtr`'s buffer.
pub fn descent_step<B: Backend>(
    z: &Tensor<B, 3>,
    r: &Tensor<B, 3>,
    jtr: Tensor<B, 3>,
    step: f64,
) -> Tensor<B, 3> {
    #[cfg(not(target_arch = "wasm32"))]
    let jtr = match autodiff::descent_step(z, r, jtr, step) {
        Ok(z) => return z,
        Err(jtr) => jtr,
    };
    let step_f32 = step as f32;
    let kernel = |_: usize, out: &mut [f32], [z, r]: [&[f32]; 2]| {
        for ((o, &z), &r) in out.iter_mut().zip(z).zip(r) {
            *o = z - step_f32 * (r - *o);
        }
    };
    rows_in_place(jtr, [z, r], kernel)
        .unwrap_or_else(|jtr| z.clone() - (r.clone() - jtr).mul_scalar(step))
}
