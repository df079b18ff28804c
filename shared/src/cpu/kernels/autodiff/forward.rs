//! The forward kernels as nodes, each backward made of the same kernels: what a training step's
//! forward and first-order backward run.

use burn::tensor::backend::Backend;
use burn::tensor::Tensor;

use super::{inner, node, prim, sum_rows, tensor, unwrap, wrap, Inner, InnerTensor, TrainTensor};
use crate::cpu::kernels;

/// [`kernels::linear`]: `dx = g W^T`, `dW = x^T g` over all rows, `db = sum of g's rows`.
pub(in crate::cpu::kernels) fn linear<B: Backend, const D: usize>(
    x: &Tensor<B, D>,
    weight: &Tensor<B, 2>,
    bias: Option<&Tensor<B, 1>>,
) -> Option<Tensor<B, D>> {
    let (xt, wt) = (unwrap(x)?, unwrap(weight)?);
    let bt = match bias {
        Some(b) => Some(unwrap(b)?),
        None => None,
    };
    let (x, w) = (inner::<D>(&xt), inner::<2>(&wt));
    let y = prim(kernels::linear(x.clone(), w.clone(), bt.as_ref().map(inner::<1>)));
    let backward = move |g: InnerTensor, [dx, dw, db]: [bool; 3]| {
        let g = tensor::<D>(g);
        [
            dx.then(|| prim(kernels::linear(g.clone(), w.clone().transpose(), None))),
            dw.then(|| prim(kernels::weight_gradient(x.clone(), g.clone()))),
            db.then(|| prim(sum_rows(g.clone()))),
        ]
    };
    Some(wrap(match &bt {
        Some(bt) => node([&xt, &wt, bt], y, backward),
        None => node([&xt, &wt], y, move |g, [dx, dw]| {
            let [dx, dw, _] = backward(g, [dx, dw, false]);
            [dx, dw]
        }),
    }))
}

/// [`kernels::matmul`]: `da = g b^T`, `db = a^T g`, both GEMMs on transposed views.
pub(in crate::cpu::kernels) fn matmul<B: Backend>(
    a: &Tensor<B, 4>,
    b: &Tensor<B, 4>,
) -> Option<Tensor<B, 4>> {
    let (at, bt) = (unwrap(a)?, unwrap(b)?);
    let (a, b) = (inner::<4>(&at), inner::<4>(&bt));
    if a.dims()[..2] != b.dims()[..2] {
        return None; // broadcasting: burn's own op
    }
    let y = prim(kernels::matmul(a.clone(), b.clone()));
    Some(wrap(node([&at, &bt], y, move |g, [da, db]| {
        let g = tensor::<4>(g);
        [
            da.then(|| prim(kernels::matmul(g.clone(), b.clone().swap_dims(2, 3)))),
            db.then(|| prim(kernels::matmul(a.clone().swap_dims(2, 3), g.clone()))),
        ]
    })))
}

/// [`kernels::normal_cdf`]: `dx = g phi(x)`.
pub(in crate::cpu::kernels) fn normal_cdf<B: Backend, const D: usize>(
    x: &Tensor<B, D>,
) -> Option<Tensor<B, D>> {
    let xt = unwrap(x)?;
    let x = inner::<D>(&xt);
    let y = prim(kernels::normal_cdf(x.clone()));
    Some(wrap(node([&xt], y, move |g, [dx]| {
        [dx.then(|| prim(kernels::normal_cdf_backward(tensor::<D>(g), &x)))]
    })))
}

/// [`kernels::attention_probs`]: `dscores = scale p (g - sum(g p))`. The padding bias is a
/// constant; when it asks for a gradient, burn's composed ops run instead.
pub(in crate::cpu::kernels) fn attention_probs<B: Backend>(
    scores: &Tensor<B, 4>,
    scale: f64,
    bias: &Tensor<B, 4>,
) -> Option<Tensor<B, 4>> {
    let (st, bt) = (unwrap(scores)?, unwrap(bias)?);
    if bt.node.clone_if_require_grad().is_some() {
        return None;
    }
    let probs = kernels::attention_probs(inner::<4>(&st), scale, &inner::<4>(&bt));
    let y = prim(probs.clone());
    Some(wrap(node([&st], y, move |g, [ds]| {
        [ds.then(|| prim(kernels::softmax_backward(tensor::<4>(g), &probs, scale)))]
    })))
}

/// [`kernels::layer_norm`]: `y`, `x_hat` and `rstd` from one pass, as three nodes (the
/// IM-connection's VJP differentiates through `x_hat` and `rstd` too). With `g_y` the gradient of
/// `y`: `dx = rstd (g - mean(g) - x_hat mean(g x_hat))` for `g = g_y gamma` (and for
/// `g = g_x_hat`), `dgamma = sum(g_y x_hat)`, `dbeta = sum(g_y)`, and through `rstd`:
/// `dx = -g_rstd rstd^2 x_hat / width`.
#[allow(clippy::type_complexity)]
pub(in crate::cpu::kernels) fn layer_norm<B: Backend, const D: usize>(
    x: &Tensor<B, D>,
    gamma: &Tensor<B, 1>,
    beta: Option<&Tensor<B, 1>>,
    eps: f64,
) -> Option<(Tensor<B, D>, Tensor<B, D>, Tensor<B, D>)> {
    let (xt, gt) = (unwrap(x)?, unwrap(gamma)?);
    let bt = match beta {
        Some(b) => Some(unwrap(b)?),
        None => None,
    };
    let gamma = inner::<1>(&gt);
    let ones = gamma.ones_like();
    let (y, x_hat, rstd) =
        kernels::layer_norm(inner::<D>(&xt), gamma.clone(), bt.as_ref().map(inner::<1>), eps);
    let width = gamma.dims()[0];

    let (xh, rs) = (x_hat.clone(), rstd.clone());
    let y_backward = move |g: InnerTensor, [dx, dgamma, dbeta]: [bool; 3]| {
        let g = tensor::<D>(g);
        [
            dx.then(|| prim(kernels::layer_norm_backward(g.clone(), &xh, &rs, gamma.clone()))),
            dgamma.then(|| prim(sum_rows(g.clone() * xh.clone()))),
            dbeta.then(|| prim(sum_rows(g.clone()))),
        ]
    };
    let y = match &bt {
        Some(bt) => node([&xt, &gt, bt], prim(y), y_backward),
        None => node([&xt, &gt], prim(y), move |g, [dx, dgamma]| {
            let [dx, dgamma, _] = y_backward(g, [dx, dgamma, false]);
            [dx, dgamma]
        }),
    };

    let (xh, rs) = (x_hat.clone(), rstd.clone());
    let x_hat_node = node([&xt], prim(x_hat.clone()), move |g, [dx]| {
        [dx.then(|| prim(kernels::layer_norm_backward(tensor::<D>(g), &xh, &rs, ones.clone())))]
    });

    let (xh, rs) = (x_hat, rstd.clone());
    let rstd_node = node([&xt], prim(rstd), move |g, [dx]| {
        [dx.then(|| {
            prim(
                xh.clone()
                    * (tensor::<D>(g) * rs.clone() * rs.clone()).mul_scalar(-1.0 / width as f64),
            )
        })]
    });
    Some((wrap(y), wrap(x_hat_node), wrap(rstd_node)))
}

/// [`kernels::gelu`]: `y = x Phi(x)` and `Phi(x)` from one pass, as two nodes (the IM-connection's
/// VJP differentiates through `Phi(x)` too): `dx = g (Phi(x) + x phi(x))` and `dx = g phi(x)`.
pub(in crate::cpu::kernels) fn gelu<B: Backend, const D: usize>(
    x: &Tensor<B, D>,
) -> Option<(Tensor<B, D>, Tensor<B, D>)> {
    let xt = unwrap(x)?;
    let x = inner::<D>(&xt);
    let (y, cdf) = kernels::gelu(x.clone());
    let (x_y, cdf_y) = (x.clone(), cdf.clone());
    let y = node([&xt], prim(y), move |g, [dx]| {
        [dx.then(|| prim(kernels::gelu_backward(tensor::<D>(g), &x_y, &cdf_y)))]
    });
    let cdf = node([&xt], prim(cdf), move |g, [dx]| {
        [dx.then(|| prim(kernels::normal_cdf_backward(tensor::<D>(g), &x)))]
    });
    Some((wrap(y), wrap(cdf)))
}

/// [`kernels::split_heads`]: a view of `x`'s part, as at inference; its backward writes `g` into
/// that part's columns of a zero `[batch, seq, parts * hidden]` (burn sums the three parts of
/// the q/k/v projection).
pub(in crate::cpu::kernels) fn split_heads<B: Backend>(
    x: &Tensor<B, 3>,
    parts: usize,
    part: usize,
    heads: usize,
) -> Option<Tensor<B, 4>> {
    let xt = unwrap(x)?;
    let x = inner::<3>(&xt);
    let [batch, seq, width] = x.dims();
    if width % (parts * heads).max(1) != 0 || part >= parts {
        return None; // burn's own ops report the mismatch
    }
    let y = prim(kernels::split_heads(x, parts, part, heads));
    Some(wrap(node([&xt], y, move |g, [dx]| {
        [dx.then(|| prim(scatter_heads(tensor::<4>(g), [batch, seq, width], parts, part)))]
    })))
}

/// The views of `v` at each index of its first axis, each borrowing what `v` borrows (so that
/// they can be handed to threads together).
fn unstack<'a, D: ndarray::RemoveAxis>(
    v: ndarray::ArrayViewMut<'a, f32, D>,
) -> Vec<ndarray::ArrayViewMut<'a, f32, D::Smaller>> {
    use ndarray::Axis;
    let mut views = Vec::with_capacity(v.len_of(Axis(0)));
    let mut rest = v;
    while rest.len_of(Axis(0)) > 0 {
        let (first, tail) = rest.split_at(Axis(0), 1);
        views.push(first.index_axis_move(Axis(0), 0));
        rest = tail;
    }
    views
}

/// `g` `[batch, heads, seq, head_dim]` as part `part` of a zero
/// `[batch, seq, parts * heads * head_dim]`.
fn scatter_heads(
    g: Tensor<Inner, 4>,
    shape: [usize; 3],
    parts: usize,
    part: usize,
) -> Tensor<Inner, 3> {
    use ndarray::{Axis, Ix4};
    let [batch, seq, width] = shape;
    let [_, heads, _, head_dim] = g.dims();
    let g = kernels::cpu_f32_any_layout(g).expect("the CPU backend");
    let g =
        g.view().into_dimensionality::<Ix4>().expect("four dimensions").permuted_axes([0, 2, 1, 3]);
    let mut out = ndarray::Array5::<f32>::zeros((batch, seq, parts, heads, head_dim));
    let items: Vec<_> = unstack(out.view_mut()).into_iter().zip(g.outer_iter()).collect();
    let copy = |(mut o, g): (ndarray::ArrayViewMut4<f32>, ndarray::ArrayView3<f32>)| {
        o.index_axis_mut(Axis(1), part).assign(&g)
    };
    {
        use rayon::prelude::*;
        items.into_par_iter().for_each(copy);
    }
    let out = out.into_shape_with_order(vec![batch, seq, width]).expect("standard layout");
    kernels::from_cpu_f32(out.into_shared())
}

/// [`kernels::matmul_merged`] of one or three products: for each `(a, b)`, with `g_p` the view of
/// its columns of `g` split into heads, `da = g_p b^T` and `db = a^T g_p`.
pub(in crate::cpu::kernels) fn matmul_merged<B: Backend>(
    products: &[(Tensor<B, 4>, Tensor<B, 4>)],
) -> Option<Tensor<B, 3>> {
    let mut tensors = Vec::with_capacity(2 * products.len());
    for (a, b) in products {
        tensors.push(unwrap(a)?);
        tensors.push(unwrap(b)?);
    }
    Some(wrap(match tensors.len() {
        2 => merged_node::<2>(tensors.try_into().ok()?)?,
        6 => merged_node::<6>(tensors.try_into().ok()?)?,
        _ => return None,
    }))
}

fn merged_node<const N: usize>(tensors: [TrainTensor; N]) -> Option<TrainTensor> {
    let pairs: Vec<(Tensor<Inner, 4>, Tensor<Inner, 4>)> =
        tensors.chunks(2).map(|p| (inner::<4>(&p[0]), inner::<4>(&p[1]))).collect();
    let heads = pairs.first()?.0.dims()[1];
    let y = prim(kernels::matmul_merged(pairs.clone()));
    Some(node(tensors.each_ref(), y, move |g, wanted| {
        let g = tensor::<3>(g);
        let mut grads: [Option<InnerTensor>; N] = std::array::from_fn(|_| None);
        for (p, (a, b)) in pairs.iter().enumerate() {
            let g_p = kernels::split_heads(g.clone(), pairs.len(), p, heads);
            grads[2 * p] = wanted[2 * p]
                .then(|| prim(kernels::matmul(g_p.clone(), b.clone().swap_dims(2, 3))));
            grads[2 * p + 1] =
                wanted[2 * p + 1].then(|| prim(kernels::matmul(a.clone().swap_dims(2, 3), g_p)));
        }
        grads
    }))
}
