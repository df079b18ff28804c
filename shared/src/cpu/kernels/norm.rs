//! LayerNorm, its backward, and the output-only forward, each one pass per row.

use std::mem::MaybeUninit;

use burn::tensor::backend::Backend;
use burn::tensor::Tensor;
use burn_ndarray::SharedArray;

#[cfg(not(target_arch = "wasm32"))]
use super::autodiff;
use super::simd::{sum_f64_lanes, vectorised};
use super::{cpu_f32, from_cpu_f32, new_rows_uninit, rows_in_place};

/// LayerNorm over the last dimension: `(y, x_hat, rstd)` with `x_hat = (x - mean) * rstd`,
/// `rstd = 1 / sqrt(var + eps)` (biased variance, as PyTorch; shape `[.., 1]`) and
/// `y = gamma * x_hat + beta`. `x_hat` and `rstd` are what the VJP needs.
pub fn layer_norm<B: Backend, const D: usize>(
    x: Tensor<B, D>,
    gamma: Tensor<B, 1>,
    beta: Option<Tensor<B, 1>>,
    eps: f64,
) -> (Tensor<B, D>, Tensor<B, D>, Tensor<B, D>) {
    train_node!(autodiff::layer_norm(&x, &gamma, beta.as_ref(), eps));
    if let Some(fused) = layer_norm_cpu_f32(&x, &gamma, beta.as_ref(), eps) {
        return fused;
    }
    let centered = x.clone() - x.mean_dim(D - 1);
    let var = (centered.clone() * centered.clone()).mean_dim(D - 1);
    let rstd = var.add_scalar(eps).sqrt().recip();
    let x_hat = centered * rstd.clone();
    let mut y = x_hat.clone() * gamma.unsqueeze();
    if let Some(beta) = beta {
        y = y + beta.unsqueeze();
    }
    (y, x_hat, rstd)
}

/// Input-gradient of [`layer_norm`] from its cache:
/// `dx = rstd * (g - mean(g) - x_hat * mean(g * x_hat))` with `g = dout * gamma`.
pub fn layer_norm_backward<B: Backend, const D: usize>(
    dout: Tensor<B, D>,
    x_hat: &Tensor<B, D>,
    rstd: &Tensor<B, D>,
    gamma: Tensor<B, 1>,
) -> Tensor<B, D> {
    train_node!(autodiff::layer_norm_backward(&dout, x_hat, rstd, &gamma));
    let width = x_hat.dims()[D - 1];
    let composed = |dout: Tensor<B, D>, gamma: Tensor<B, 1>| {
        let g = dout * gamma.unsqueeze();
        let mean_g = g.clone().mean_dim(D - 1);
        let mean_gx = (g.clone() * x_hat.clone()).mean_dim(D - 1);
        (g - mean_g - x_hat.clone() * mean_gx) * rstd.clone()
    };
    let gamma_f32 = match cpu_f32(gamma) {
        Ok(g) => g,
        Err(gamma) => return composed(dout, gamma),
    };
    let gamma_s = gamma_f32.as_slice().expect("standard layout");
    let inv_width = 1.0 / width as f32;
    let kernel = |_: usize, d: &mut [f32], [x_hat, rstd]: [&[f32]; 2]| {
        for ((d, x_hat), &rstd) in d.chunks_mut(width).zip(x_hat.chunks(width)).zip(rstd) {
            let (mut sum_g, mut sum_gx) = (0.0f32, 0.0f32);
            for ((d, &gamma), &h) in d.iter_mut().zip(gamma_s).zip(x_hat) {
                *d *= gamma;
                sum_g += *d;
                sum_gx += *d * h;
            }
            let (mean_g, mean_gx) = (sum_g * inv_width, sum_gx * inv_width);
            d.iter_mut().zip(x_hat).for_each(|(d, &h)| *d = (*d - mean_g - h * mean_gx) * rstd);
        }
    };
    match rows_in_place(dout, [x_hat, rstd], kernel) {
        Ok(dx) => dx,
        Err(dout) => composed(dout, from_cpu_f32(gamma_f32)),
    }
}

/// [`layer_norm`]'s output alone, for a forward that keeps nothing for a backward: on the CPU
/// one pass in place over `x`'s buffer.
pub fn layer_norm_output<B: Backend, const D: usize>(
    x: Tensor<B, D>,
    gamma: Tensor<B, 1>,
    beta: Option<Tensor<B, 1>>,
    eps: f64,
) -> Tensor<B, D> {
    #[cfg(not(target_arch = "wasm32"))]
    if let Some((y, _, _)) = autodiff::layer_norm(&x, &gamma, beta.as_ref(), eps) {
        return y;
    }
    let params = match (cpu_f32(gamma.clone()), beta.clone().map(cpu_f32)) {
        (Ok(g), None) => Some((g, None)),
        (Ok(g), Some(Ok(b))) => Some((g, Some(b))),
        _ => None,
    };
    let width = x.dims()[D - 1];
    let Some((g, b)) =
        params.filter(|(g, b)| g.len() == width && b.as_ref().is_none_or(|b| b.len() == width))
    else {
        return layer_norm(x, gamma, beta, eps).0;
    };
    let (g, b) = (
        g.as_slice().expect("standard layout"),
        b.as_ref().map(|b| b.as_slice().expect("standard layout")),
    );
    let kernel = |_: usize, out: &mut [f32], _: [&[f32]; 0]| {
        out.chunks_mut(width).for_each(|row| layer_norm_row_in_place(row, g, b, eps))
    };
    rows_in_place(x, [], kernel).unwrap_or_else(|x| layer_norm(x, gamma, beta, eps).0)
}

/// [`layer_norm`] in one pass per row; `None` off burn-ndarray with f32 data.
#[allow(clippy::type_complexity)]
pub(super) fn layer_norm_cpu_f32<B: Backend, const D: usize>(
    x: &Tensor<B, D>,
    gamma: &Tensor<B, 1>,
    beta: Option<&Tensor<B, 1>>,
    eps: f64,
) -> Option<(Tensor<B, D>, Tensor<B, D>, Tensor<B, D>)> {
    let x = cpu_f32(x.clone()).ok()?;
    let gamma = cpu_f32(gamma.clone()).ok()?;
    let beta = match beta {
        Some(b) => Some(cpu_f32(b.clone()).ok()?),
        None => None,
    };
    let shape = x.shape().to_vec();
    let width = shape[D - 1];
    let (x, gamma) = (x.as_slice()?, gamma.as_slice()?);
    let beta = match &beta {
        Some(b) => Some(b.as_slice()?),
        None => None,
    };
    if gamma.len() != width || beta.is_some_and(|b| b.len() != width) || width == 0 {
        return None; // burn's own ops report the mismatch
    }
    let rows = x.len() / width;
    let block = (1usize << 12).div_ceil(width);
    let work = |first: usize, [y, x_hat, rstd]: [&mut [MaybeUninit<f32>]; 3]| {
        let x = &x[first * width..][..y.len()];
        let rows = x.chunks(width).zip(y.chunks_mut(width)).zip(x_hat.chunks_mut(width)).zip(rstd);
        for (((x, y), x_hat), r) in rows {
            r.write(layer_norm_row(x, y, x_hat, gamma, beta, eps));
        }
    };
    // SAFETY: each row writes its `y` and `x_hat` whole (`gamma` and `beta` are as wide as the
    // rows, checked above) and its `rstd`.
    let [y, x_hat, rstd] = unsafe { new_rows_uninit(rows, [width, width, 1], block, work) };

    let array = |v: Vec<f32>, shape: &[usize]| {
        SharedArray::from_shape_vec(shape.to_vec(), v).expect("length matches shape")
    };
    let mut rstd_shape = shape.clone();
    rstd_shape[D - 1] = 1;
    Some((
        from_cpu_f32(array(y, &shape)),
        from_cpu_f32(array(x_hat, &shape)),
        from_cpu_f32(array(rstd, &rstd_shape)),
    ))
}

/// Mean and `1 / sqrt(var + eps)` of one row (biased variance), each sum in f64 (one pass; no
/// cancellation worth speaking of at BERT's widths) over 8 lanes, so that it vectorises.
#[inline(always)]
fn mean_rstd(x: &[f32], eps: f64) -> (f32, f32) {
    let n = x.len().max(1) as f64;
    let mean = sum_f64_lanes(x, |v| v) / n;
    let var = sum_f64_lanes(x, |v| (v - mean) * (v - mean)) / n;
    (mean as f32, (1.0 / (var + eps).sqrt()) as f32)
}

/// The LayerNorm of one element: `(x_hat, gamma x_hat + beta)`.
#[inline(always)]
fn normalise(v: f32, mean: f32, rstd: f32, gamma: f32, beta: f32) -> (f32, f32) {
    let h = (v - mean) * rstd;
    (h, h * gamma + beta)
}

vectorised! {
    /// One row of [`layer_norm`]: writes `x_hat` and `y` (as many elements as `x` and `gamma`
    /// have), returns `rstd`.
    fn layer_norm_row(
        x: &[f32],
        y: &mut [MaybeUninit<f32>],
        x_hat: &mut [MaybeUninit<f32>],
        gamma: &[f32],
        beta: Option<&[f32]>,
        eps: f64,
    ) -> f32 {
        let (mean, rstd) = mean_rstd(x, eps);
        let beta = beta.unwrap_or(&[]).iter().copied().chain(std::iter::repeat(0.0));
        let rows = x.iter().zip(y.iter_mut()).zip(x_hat.iter_mut()).zip(gamma).zip(beta);
        for ((((&v, y), h), &g), b) in rows {
            let (normalised, out) = normalise(v, mean, rstd, g, b);
            h.write(normalised);
            y.write(out);
        }
        rstd
    }
}

vectorised! {
    /// [`layer_norm_row`]'s `y` alone, in place over the row.
    fn layer_norm_row_in_place(row: &mut [f32], gamma: &[f32], beta: Option<&[f32]>, eps: f64) {
        let (mean, rstd) = mean_rstd(row, eps);
        let beta = beta.unwrap_or(&[]).iter().copied().chain(std::iter::repeat(0.0));
        for ((v, &g), b) in row.iter_mut().zip(gamma).zip(beta) {
            *v = normalise(*v, mean, rstd, g, b).1;
        }
    }
}
