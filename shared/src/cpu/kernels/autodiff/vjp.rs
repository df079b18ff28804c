//! The VJP's own pieces (IM-BERT's inner loop), whose backward is the second-order part of the
//! exact training gradient.

use burn::tensor::backend::Backend;
use burn::tensor::Tensor;

use super::{inner, node, prim, sum_rows, tensor, unwrap, wrap, Inner};
use crate::cpu::kernels;

/// [`kernels::softmax_backward`], `o = s p (d - <d, p>)` per row: `dd = s p (g - <g, p>)` (the
/// same map), `dp = s (g (d - <d, p>) - d <g, p>)`.
pub(in crate::cpu::kernels) fn softmax_backward<B: Backend, const D: usize>(
    dprobs: &Tensor<B, D>,
    probs: &Tensor<B, D>,
    scale: f64,
) -> Option<Tensor<B, D>> {
    let (dt, pt) = (unwrap(dprobs)?, unwrap(probs)?);
    let (d, p) = (inner::<D>(&dt), inner::<D>(&pt));
    let y = prim(kernels::softmax_backward(d.clone(), &p, scale));
    Some(wrap(node([&dt, &pt], y, move |g, [gd, gp]| {
        let g = tensor::<D>(g);
        [
            gd.then(|| prim(kernels::softmax_backward(g.clone(), &p, scale))),
            gp.then(|| prim(softmax_backward_probs(g.clone(), &d, &p, scale))),
        ]
    })))
}

fn softmax_backward_probs<const D: usize>(
    g: Tensor<Inner, D>,
    d: &Tensor<Inner, D>,
    p: &Tensor<Inner, D>,
    scale: f64,
) -> Tensor<Inner, D> {
    let width = p.dims()[D - 1];
    let s = scale as f32;
    let kernel = |_: usize, g: &mut [f32], [d, p]: [&[f32]; 2]| {
        for ((g, d), p) in g.chunks_mut(width).zip(d.chunks(width)).zip(p.chunks(width)) {
            let dot_dp: f32 = d.iter().zip(p).map(|(a, b)| a * b).sum();
            let dot_gp: f32 = g.iter().zip(p).map(|(a, b)| a * b).sum();
            g.iter_mut().zip(d).for_each(|(g, &d)| *g = s * (*g * (d - dot_dp) - d * dot_gp));
        }
    };
    kernels::rows_in_place(g, [d, p], kernel).unwrap_or_else(|g| {
        let dot_dp = (d.clone() * p.clone()).sum_dim(D - 1);
        let dot_gp = (g.clone() * p.clone()).sum_dim(D - 1);
        (g * (d.clone() - dot_dp) - d.clone() * dot_gp).mul_scalar(scale)
    })
}

/// [`kernels::gelu_backward`], `o = d (c + x phi(x))` with `c = Phi(x)` its own input:
/// `dd = g (c + x phi(x))`, `dx = g d phi(x) (1 - x^2)`, `dc = g d`.
pub(in crate::cpu::kernels) fn gelu_backward<B: Backend, const D: usize>(
    dout: &Tensor<B, D>,
    x: &Tensor<B, D>,
    cdf: &Tensor<B, D>,
) -> Option<Tensor<B, D>> {
    let (dt, xt, ct) = (unwrap(dout)?, unwrap(x)?, unwrap(cdf)?);
    let (d, x, c) = (inner::<D>(&dt), inner::<D>(&xt), inner::<D>(&ct));
    let y = prim(kernels::gelu_backward(d.clone(), &x, &c));
    Some(wrap(node([&dt, &xt, &ct], y, move |g, [gd, gx, gc]| {
        let g = tensor::<D>(g);
        [
            gd.then(|| prim(kernels::gelu_backward(g.clone(), &x, &c))),
            gx.then(|| prim(gelu_backward_input(g.clone(), &d, &x))),
            gc.then(|| prim(g.clone() * d.clone())),
        ]
    })))
}

fn gelu_backward_input<const D: usize>(
    g: Tensor<Inner, D>,
    d: &Tensor<Inner, D>,
    x: &Tensor<Inner, D>,
) -> Tensor<Inner, D> {
    let kernel = |_: usize, g: &mut [f32], [d, x]: [&[f32]; 2]| {
        for ((g, &d), &x) in g.iter_mut().zip(d).zip(x) {
            *g *= d * kernels::simd::pdf_f32(x) * (1.0 - x * x);
        }
    };
    kernels::rows_in_place(g, [d, x], kernel).unwrap_or_else(|g| {
        g * d.clone()
            * kernels::activation::normal_pdf(x)
            * (x.clone() * x.clone()).neg().add_scalar(1.0)
    })
}

/// [`kernels::layer_norm_backward`], `o = r (h - mean(h) - x_hat mean(h x_hat))` with
/// `h = d gamma`, from its inputs `d`, `x_hat`, `r` (rstd) and `gamma`. With
/// `k = r (g - mean(g) - x_hat mean(g x_hat))` (the same map on `g`, `gamma = 1`):
/// `dd = k gamma`, `dgamma = sum(k d)`, `dx_hat = -r (g mean(h x_hat) + h mean(g x_hat))`,
/// `dr = sum(g (h - mean(h) - x_hat mean(h x_hat)))`.
pub(in crate::cpu::kernels) fn layer_norm_backward<B: Backend, const D: usize>(
    dout: &Tensor<B, D>,
    x_hat: &Tensor<B, D>,
    rstd: &Tensor<B, D>,
    gamma: &Tensor<B, 1>,
) -> Option<Tensor<B, D>> {
    let (dt, xt, rt, gt) = (unwrap(dout)?, unwrap(x_hat)?, unwrap(rstd)?, unwrap(gamma)?);
    let (d, x_hat, rstd, gamma) =
        (inner::<D>(&dt), inner::<D>(&xt), inner::<D>(&rt), inner::<1>(&gt));
    let y = prim(kernels::layer_norm_backward(d.clone(), &x_hat, &rstd, gamma.clone()));
    let ones = gamma.ones_like();
    Some(wrap(node([&dt, &xt, &rt, &gt], y, move |g, [gd, gx, gr, ggamma]| {
        let g = tensor::<D>(g);
        let k = (gd || ggamma)
            .then(|| kernels::layer_norm_backward(g.clone(), &x_hat, &rstd, ones.clone()));
        let h = d.clone() * gamma.clone().unsqueeze();
        let mean_hx = (gx || gr).then(|| (h.clone() * x_hat.clone()).mean_dim(D - 1));
        [
            gd.then(|| prim(k.clone().unwrap() * gamma.clone().unsqueeze())),
            gx.then(|| {
                let mean_gx = (g.clone() * x_hat.clone()).mean_dim(D - 1);
                prim(
                    (g.clone() * mean_hx.clone().unwrap() + h.clone() * mean_gx)
                        * rstd.clone().neg(),
                )
            }),
            gr.then(|| {
                let centred = h.clone()
                    - h.clone().mean_dim(D - 1)
                    - x_hat.clone() * mean_hx.clone().unwrap();
                prim((g.clone() * centred).sum_dim(D - 1))
            }),
            ggamma.then(|| prim(sum_rows(k.clone().unwrap() * d.clone()))),
        ]
    })))
}
