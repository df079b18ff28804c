//! The same kernels as single autodiff nodes, for training on `Autodiff<NdArray<f32>>`.
//!
//! Under autodiff, burn records every composed op (a LayerNorm is about ten) and runs each of
//! them, forward and back, as a one-thread pass of burn-ndarray, with `erf` through f64 `libm`
//! and GEMMs behind reshape copies. Here a kernel is one node: its forward is the CPU kernel on
//! the inner tensors, and its backward is written out with the same kernels.
//!
//! The exact second-order IM gradient is unaffected: IM-BERT's inner loop, VJP included, is made
//! of ordinary ops, and the outer backward only ever asks each op for its first-order backward,
//! which every node here has.

use std::any::{Any, TypeId};
use std::sync::Arc;

use burn::tensor::backend::Backend;
use burn::tensor::{DType, Tensor, TensorData, TensorPrimitive};
use burn_autodiff::checkpoint::{base::Checkpointer, strategy::NoCheckpointing};
use burn_autodiff::grads::Gradients;
use burn_autodiff::ops::{Backward, Ops, OpsKind};
use burn_autodiff::Autodiff;
use burn_ndarray::NdArray;

type Inner = NdArray<f32>;
type Train = Autodiff<Inner>;
type TrainTensor = burn::tensor::ops::FloatTensor<Train>;
type InnerTensor = burn::tensor::ops::FloatTensor<Inner>;

/// A node's backward: from the output's gradient and which parents want one, their gradients.
type BackwardFn<const N: usize> = Arc<dyn Fn(InnerTensor, [bool; N]) -> [Option<InnerTensor>; N] + Send + Sync>;

#[derive(Debug)]
struct Kernel<const N: usize>;

#[derive(Clone)]
struct KernelBackward<const N: usize>(BackwardFn<N>);

impl<const N: usize> std::fmt::Debug for KernelBackward<N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KernelBackward<{N}>")
    }
}

impl<const N: usize> Backward<Inner, N> for Kernel<N> {
    type State = KernelBackward<N>;

    fn backward(self, ops: Ops<Self::State, N>, grads: &mut Gradients, _: &mut Checkpointer) {
        let grad = grads.consume::<Inner>(&ops.node);
        let wanted = ops.parents.each_ref().map(Option::is_some);
        let parent_grads = (ops.state.0)(grad, wanted);
        for (parent, grad) in ops.parents.into_iter().zip(parent_grads) {
            if let (Some(parent), Some(grad)) = (parent, grad) {
                grads.register::<Inner>(parent.id, grad);
            }
        }
    }
}

/// Records `output`, computed from `parents`, as one node with the given backward.
fn node<const N: usize>(
    parents: [&TrainTensor; N],
    output: InnerTensor,
    backward: impl Fn(InnerTensor, [bool; N]) -> [Option<InnerTensor>; N] + Send + Sync + 'static,
) -> TrainTensor {
    match Kernel::<N>.prepare::<NoCheckpointing>(parents.map(|p| p.node.clone())).compute_bound().stateful() {
        OpsKind::Tracked(prep) => prep.finish(KernelBackward(Arc::new(backward)), output),
        OpsKind::UnTracked(prep) => prep.finish(output),
    }
}

/// `x`'s autodiff tensor when `B` is `Autodiff<NdArray<f32>>` (the default checkpointing, whose
/// strategy [`node`] records with) holding f32 data; `None` otherwise.
fn unwrap<B: Backend, const D: usize>(x: &Tensor<B, D>) -> Option<TrainTensor> {
    if TypeId::of::<B>() != TypeId::of::<Train>() || x.dtype() != DType::F32 {
        return None;
    }
    match x.clone().into_primitive() {
        TensorPrimitive::Float(p) => (Box::new(p) as Box<dyn Any>).downcast::<TrainTensor>().ok().map(|t| *t),
        TensorPrimitive::QFloat(_) => None,
    }
}

/// The inverse of [`unwrap`]; only called where `B` was found to be `Train`.
fn wrap<B: Backend, const D: usize>(t: TrainTensor) -> Tensor<B, D> {
    let p = (Box::new(t) as Box<dyn Any>).downcast::<B::FloatTensorPrimitive>().expect("B is Autodiff<NdArray<f32>>");
    Tensor::from_primitive(TensorPrimitive::Float(*p))
}

fn inner<const D: usize>(t: &TrainTensor) -> Tensor<Inner, D> {
    Tensor::from_primitive(TensorPrimitive::Float(t.primitive.clone()))
}

fn tensor<const D: usize>(p: InnerTensor) -> Tensor<Inner, D> {
    Tensor::from_primitive(TensorPrimitive::Float(p))
}

fn prim<const D: usize>(t: Tensor<Inner, D>) -> InnerTensor {
    t.into_primitive().tensor()
}

/// Sum over every dimension but the last: a bias's or LayerNorm parameter's gradient.
fn sum_rows<const D: usize>(g: Tensor<Inner, D>) -> Tensor<Inner, 1> {
    let width = g.dims()[D - 1];
    g.reshape([-1, width as i32]).sum_dim(0).reshape([width])
}

/// [`super::linear`]: `dx = g W^T`, `dW = x^T g` over all rows, `db = sum of g's rows`.
pub(super) fn linear<B: Backend, const D: usize>(
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
    let y = prim(super::linear(x.clone(), w.clone(), bt.as_ref().map(inner::<1>)));
    let backward = move |g: InnerTensor, [dx, dw, db]: [bool; 3]| {
        let g = tensor::<D>(g);
        [
            dx.then(|| prim(super::linear(g.clone(), w.clone().transpose(), None))),
            dw.then(|| prim(super::weight_gradient(x.clone(), g.clone()))),
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

/// [`super::matmul`]: `da = g b^T`, `db = a^T g`, both GEMMs on transposed views.
pub(super) fn matmul<B: Backend>(a: &Tensor<B, 4>, b: &Tensor<B, 4>) -> Option<Tensor<B, 4>> {
    let (at, bt) = (unwrap(a)?, unwrap(b)?);
    let (a, b) = (inner::<4>(&at), inner::<4>(&bt));
    if a.dims()[..2] != b.dims()[..2] {
        return None; // broadcasting: burn's own op
    }
    let y = prim(super::matmul(a.clone(), b.clone()));
    Some(wrap(node([&at, &bt], y, move |g, [da, db]| {
        let g = tensor::<4>(g);
        [
            da.then(|| prim(super::matmul(g.clone(), b.clone().swap_dims(2, 3)))),
            db.then(|| prim(super::matmul(a.clone().swap_dims(2, 3), g.clone()))),
        ]
    })))
}

/// [`super::normal_cdf`]: `dx = g phi(x)`.
pub(super) fn normal_cdf<B: Backend, const D: usize>(x: &Tensor<B, D>) -> Option<Tensor<B, D>> {
    let xt = unwrap(x)?;
    let x = inner::<D>(&xt);
    let y = prim(super::normal_cdf(x.clone()));
    Some(wrap(node([&xt], y, move |g, [dx]| [dx.then(|| prim(super::normal_cdf_backward(tensor::<D>(g), &x)))])))
}

/// [`super::attention_probs`]: `dscores = scale p (g - sum(g p))`. The padding bias is a
/// constant; when it asks for a gradient, burn's composed ops run instead.
pub(super) fn attention_probs<B: Backend>(scores: &Tensor<B, 4>, scale: f64, bias: &Tensor<B, 4>) -> Option<Tensor<B, 4>> {
    let (st, bt) = (unwrap(scores)?, unwrap(bias)?);
    if bt.node.clone_if_require_grad().is_some() {
        return None;
    }
    let probs = super::attention_probs(inner::<4>(&st), scale, &inner::<4>(&bt));
    let y = prim(probs.clone());
    Some(wrap(node([&st], y, move |g, [ds]| {
        [ds.then(|| prim(super::softmax_backward(tensor::<4>(g), &probs, scale)))]
    })))
}

/// [`super::layer_norm`]: `y`, `x_hat` and `rstd` from one pass, as three nodes (the IM-connection's
/// VJP differentiates through `x_hat` and `rstd` too). With `g_y` the gradient of `y`:
/// `dx = rstd (g - mean(g) - x_hat mean(g x_hat))` for `g = g_y gamma` (and for `g = g_x_hat`),
/// `dgamma = sum(g_y x_hat)`, `dbeta = sum(g_y)`, and through `rstd`: `dx = -g_rstd rstd^2 x_hat / width`.
#[allow(clippy::type_complexity)]
pub(super) fn layer_norm<B: Backend, const D: usize>(
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
    let (y, x_hat, rstd) = super::layer_norm(inner::<D>(&xt), gamma.clone(), bt.as_ref().map(inner::<1>), eps);
    let width = gamma.dims()[0];

    let (xh, rs) = (x_hat.clone(), rstd.clone());
    let y_backward = move |g: InnerTensor, [dx, dgamma, dbeta]: [bool; 3]| {
        let g = tensor::<D>(g);
        [
            dx.then(|| prim(super::layer_norm_backward(g.clone(), &xh, &rs, gamma.clone()))),
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
        [dx.then(|| prim(super::layer_norm_backward(tensor::<D>(g), &xh, &rs, ones.clone())))]
    });

    let (xh, rs) = (x_hat, rstd.clone());
    let rstd_node = node([&xt], prim(rstd), move |g, [dx]| {
        [dx.then(|| prim(xh.clone() * (tensor::<D>(g) * rs.clone() * rs.clone()).mul_scalar(-1.0 / width as f64)))]
    });
    Some((wrap(y), wrap(x_hat_node), wrap(rstd_node)))
}

// The VJP's own pieces (IM-BERT's inner loop), whose backward is the second-order part of the
// exact training gradient.

/// [`super::softmax_backward`], `o = s p (d - <d, p>)` per row: `dd = s p (g - <g, p>)` (the
/// same map), `dp = s (g (d - <d, p>) - d <g, p>)`.
pub(super) fn softmax_backward<B: Backend, const D: usize>(
    dprobs: &Tensor<B, D>,
    probs: &Tensor<B, D>,
    scale: f64,
) -> Option<Tensor<B, D>> {
    let (dt, pt) = (unwrap(dprobs)?, unwrap(probs)?);
    let (d, p) = (inner::<D>(&dt), inner::<D>(&pt));
    let y = prim(super::softmax_backward(d.clone(), &p, scale));
    Some(wrap(node([&dt, &pt], y, move |g, [gd, gp]| {
        let g = tensor::<D>(g);
        [
            gd.then(|| prim(super::softmax_backward(g.clone(), &p, scale))),
            gp.then(|| prim(softmax_backward_probs(g.clone(), &d, &p, scale))),
        ]
    })))
}

fn softmax_backward_probs<const D: usize>(g: Tensor<Inner, D>, d: &Tensor<Inner, D>, p: &Tensor<Inner, D>, scale: f64) -> Tensor<Inner, D> {
    let width = p.dims()[D - 1];
    let s = scale as f32;
    let kernel = |_: usize, g: &mut [f32], [d, p]: [&[f32]; 2]| {
        for ((g, d), p) in g.chunks_mut(width).zip(d.chunks(width)).zip(p.chunks(width)) {
            let dot_dp: f32 = d.iter().zip(p).map(|(a, b)| a * b).sum();
            let dot_gp: f32 = g.iter().zip(p).map(|(a, b)| a * b).sum();
            g.iter_mut().zip(d).for_each(|(g, &d)| *g = s * (*g * (d - dot_dp) - d * dot_gp));
        }
    };
    super::rows_in_place(g, [d, p], kernel).unwrap_or_else(|g| {
        let dot_dp = (d.clone() * p.clone()).sum_dim(D - 1);
        let dot_gp = (g.clone() * p.clone()).sum_dim(D - 1);
        (g * (d.clone() - dot_dp) - d.clone() * dot_gp).mul_scalar(scale)
    })
}

/// [`super::gelu_backward`], `o = d (c + x phi(x))` with `c = Phi(x)` its own input:
/// `dd = g (c + x phi(x))`, `dx = g d phi(x) (1 - x^2)`, `dc = g d`.
pub(super) fn gelu_backward<B: Backend, const D: usize>(
    dout: &Tensor<B, D>,
    x: &Tensor<B, D>,
    cdf: &Tensor<B, D>,
) -> Option<Tensor<B, D>> {
    let (dt, xt, ct) = (unwrap(dout)?, unwrap(x)?, unwrap(cdf)?);
    let (d, x, c) = (inner::<D>(&dt), inner::<D>(&xt), inner::<D>(&ct));
    let y = prim(super::gelu_backward(d.clone(), &x, &c));
    Some(wrap(node([&dt, &xt, &ct], y, move |g, [gd, gx, gc]| {
        let g = tensor::<D>(g);
        [
            gd.then(|| prim(super::gelu_backward(g.clone(), &x, &c))),
            gx.then(|| prim(gelu_backward_input(g.clone(), &d, &x))),
            gc.then(|| prim(g.clone() * d.clone())),
        ]
    })))
}

fn gelu_backward_input<const D: usize>(g: Tensor<Inner, D>, d: &Tensor<Inner, D>, x: &Tensor<Inner, D>) -> Tensor<Inner, D> {
    let kernel = |_: usize, g: &mut [f32], [d, x]: [&[f32]; 2]| {
        for ((g, &d), &x) in g.iter_mut().zip(d).zip(x) {
            *g *= d * super::pdf_f32(x) * (1.0 - x * x);
        }
    };
    super::rows_in_place(g, [d, x], kernel)
        .unwrap_or_else(|g| g * d.clone() * super::normal_pdf(x) * (x.clone() * x.clone()).neg().add_scalar(1.0))
}

/// [`super::layer_norm_backward`], `o = r (h - mean(h) - x_hat mean(h x_hat))` with
/// `h = d gamma`, from its inputs `d`, `x_hat`, `r` (rstd) and `gamma`. With
/// `k = r (g - mean(g) - x_hat mean(g x_hat))` (the same map on `g`, `gamma = 1`):
/// `dd = k gamma`, `dgamma = sum(k d)`, `dx_hat = -r (g mean(h x_hat) + h mean(g x_hat))`,
/// `dr = sum(g (h - mean(h) - x_hat mean(h x_hat)))`.
pub(super) fn layer_norm_backward<B: Backend, const D: usize>(
    dout: &Tensor<B, D>,
    x_hat: &Tensor<B, D>,
    rstd: &Tensor<B, D>,
    gamma: &Tensor<B, 1>,
) -> Option<Tensor<B, D>> {
    let (dt, xt, rt, gt) = (unwrap(dout)?, unwrap(x_hat)?, unwrap(rstd)?, unwrap(gamma)?);
    let (d, x_hat, rstd, gamma) = (inner::<D>(&dt), inner::<D>(&xt), inner::<D>(&rt), inner::<1>(&gt));
    let y = prim(super::layer_norm_backward(d.clone(), &x_hat, &rstd, gamma.clone()));
    let ones = gamma.ones_like();
    Some(wrap(node([&dt, &xt, &rt, &gt], y, move |g, [gd, gx, gr, ggamma]| {
        let g = tensor::<D>(g);
        let k = (gd || ggamma).then(|| super::layer_norm_backward(g.clone(), &x_hat, &rstd, ones.clone()));
        let h = d.clone() * gamma.clone().unsqueeze();
        let mean_hx = (gx || gr).then(|| (h.clone() * x_hat.clone()).mean_dim(D - 1));
        [
            gd.then(|| prim(k.clone().unwrap() * gamma.clone().unsqueeze())),
            gx.then(|| {
                let mean_gx = (g.clone() * x_hat.clone()).mean_dim(D - 1);
                prim((g.clone() * mean_hx.clone().unwrap() + h.clone() * mean_gx) * rstd.clone().neg())
            }),
            gr.then(|| {
                let centred = h.clone() - h.clone().mean_dim(D - 1) - x_hat.clone() * mean_hx.clone().unwrap();
                prim((g.clone() * centred).sum_dim(D - 1))
            }),
            ggamma.then(|| prim(sum_rows(k.clone().unwrap() * d.clone()))),
        ]
    })))
}

// The glue between the kernels: dropout products, residual sums, IM-BERT's residual and descent
// step. As burn's composed ops each of them was a one-thread pass forward and another back, on
// every layer evaluation of every IM iteration.

/// Whether `x` is the training backend's, holding f32.
fn trains<B: Backend, const D: usize>(x: &Tensor<B, D>) -> bool {
    TypeId::of::<B>() == TypeId::of::<Train>() && x.dtype() == DType::F32
}

/// [`unwrap`] by value; only called where [`trains`] holds.
fn unwrap_owned<B: Backend, const D: usize>(x: Tensor<B, D>) -> TrainTensor {
    let p = (Box::new(x.into_primitive().tensor()) as Box<dyn Any>).downcast::<TrainTensor>();
    *p.expect("B is Autodiff<NdArray<f32>>")
}

/// `t`'s data, for a kernel to overwrite in place (after the op that made it nothing else holds
/// it), and `t` without it, which still names its graph node: all that [`node`] reads of a parent.
fn take_data<const D: usize>(mut t: TrainTensor) -> (Tensor<Inner, D>, TrainTensor) {
    let empty = Tensor::<Inner, 1>::from_data(TensorData::new(Vec::<f32>::new(), [0]), (&Default::default(), DType::F32));
    let data = std::mem::replace(&mut t.primitive, prim(empty));
    (tensor(data), t)
}

/// A constant input's inner tensor (a dropout or token mask); `None` off the training backend or
/// when it asks for a gradient, where burn's composed ops run instead.
fn constant<B: Backend, const D: usize>(t: &Tensor<B, D>) -> Option<Tensor<Inner, D>> {
    let t = unwrap(t)?;
    t.node.clone_if_require_grad().is_none().then(|| inner::<D>(&t))
}

/// A fresh tensor shaped like `a`: `f(a, b)` element by element, with `b` of `a`'s shape or one
/// value per row (`[.., 1]`). Two gradients from one without copying it first.
fn combine<const D: usize>(a: &Tensor<Inner, D>, b: &Tensor<Inner, D>, f: impl Fn(f32, f32) -> f32 + Send + Sync) -> Tensor<Inner, D> {
    let width = a.dims()[D - 1].max(1);
    let kernel = |_: usize, out: &mut [f32], [a, b]: [&[f32]; 2]| {
        if b.len() == a.len() {
            out.iter_mut().zip(a).zip(b).for_each(|((o, &a), &b)| *o = f(a, b));
        } else {
            for ((out, a), &b) in out.chunks_mut(width).zip(a.chunks(width)).zip(b) {
                out.iter_mut().zip(a).for_each(|(o, &a)| *o = f(a, b));
            }
        }
    };
    // burn's `zeros_like` fills a `TensorData` on one thread and then copies it.
    let out = super::from_cpu_f32(ndarray::ArrayD::<f32>::zeros(a.dims().to_vec()).into_shared());
    // Only an empty tensor (no rows) comes back unprocessed, and it is the answer.
    super::rows_in_place(out, [a, b], kernel).unwrap_or_else(|empty| empty)
}

/// [`super::times_keep`], `x keep` with a constant mask: `dx = g keep`.
pub(super) fn times_keep<B: Backend, const D: usize>(x: Tensor<B, D>, keep: &Tensor<B, D>) -> Result<Tensor<B, D>, Tensor<B, D>> {
    let Some(keep) = constant(keep).filter(|_| trains(&x)) else { return Err(x) };
    let (data, xt) = take_data::<D>(unwrap_owned(x));
    let y = prim(super::times_keep(data, &keep));
    Ok(wrap(node([&xt], y, move |g, [dx]| [dx.then(|| prim(super::times_keep(tensor::<D>(g), &keep)))])))
}

/// [`super::add_residual`], `x keep + residual` (`keep` constant, or none):
/// `dx = g keep` (or `g`), `dresidual = g`.
pub(super) fn add_residual<B: Backend, const D: usize>(
    x: Tensor<B, D>,
    keep: Option<&Tensor<B, D>>,
    residual: Tensor<B, D>,
) -> Result<Tensor<B, D>, (Tensor<B, D>, Tensor<B, D>)> {
    let keep = match keep.map(constant) {
        Some(None) => return Err((x, residual)),
        keep => keep.flatten(),
    };
    if !(trains(&x) && trains(&residual)) {
        return Err((x, residual));
    }
    let (data, xt) = take_data::<D>(unwrap_owned(x));
    let rt = unwrap_owned(residual);
    let y = prim(super::add_residual(data, keep.as_ref(), inner::<D>(&rt)));
    Ok(wrap(node([&xt, &rt], y, move |g, [dx, dr]| {
        let g = tensor::<D>(g);
        let dx = dx.then(|| prim(keep.as_ref().map_or_else(|| g.clone(), |k| combine(&g, k, |g, k| g * k))));
        [dx, dr.then(|| prim(g))]
    })))
}

/// [`super::masked_residual`], `r = (z - h - phi) m` with a constant token mask `m`:
/// `dz = g m`, `dh = dphi = -g m`.
pub(super) fn masked_residual<B: Backend>(
    z: &Tensor<B, 3>,
    h: &Tensor<B, 3>,
    phi: Tensor<B, 3>,
    mask: &Tensor<B, 3>,
) -> Result<Tensor<B, 3>, Tensor<B, 3>> {
    let (Some(zt), Some(ht), Some(mask)) = (unwrap(z), unwrap(h), constant(mask)) else { return Err(phi) };
    if !trains(&phi) {
        return Err(phi);
    }
    let (data, pt) = take_data::<3>(unwrap_owned(phi));
    let y = prim(super::masked_residual(&inner::<3>(&zt), &inner::<3>(&ht), data, &mask));
    Ok(wrap(node([&zt, &ht, &pt], y, move |g, [dz, dh, dphi]| {
        let g = tensor::<3>(g);
        let minus = (dh || dphi).then(|| prim(combine(&g, &mask, |g, m| -(g * m))));
        [dz.then(|| prim(combine(&g, &mask, |g, m| g * m))), minus.clone().filter(|_| dh), minus.filter(|_| dphi)]
    })))
}

/// [`super::descent_step`], `z - s (r - jtr)`: `dz = g`, `dr = -s g`, `djtr = s g`.
pub(super) fn descent_step<B: Backend>(z: &Tensor<B, 3>, r: &Tensor<B, 3>, jtr: Tensor<B, 3>, step: f64) -> Result<Tensor<B, 3>, Tensor<B, 3>> {
    let (Some(zt), Some(rt)) = (unwrap(z), unwrap(r)) else { return Err(jtr) };
    if !trains(&jtr) {
        return Err(jtr);
    }
    let (data, jt) = take_data::<3>(unwrap_owned(jtr));
    let y = prim(super::descent_step(&inner::<3>(&zt), &inner::<3>(&rt), data, step));
    let s = step as f32;
    Ok(wrap(node([&zt, &rt, &jt], y, move |g, [dz, dr, djtr]| {
        let g = tensor::<3>(g);
        let dr = dr.then(|| prim(combine(&g, &g, |g, _| -s * g)));
        let djtr = djtr.then(|| prim(combine(&g, &g, |g, _| s * g)));
        [dz.then(|| prim(g)), dr, djtr]
    })))
}

/// [`super::gelu`]: `y = x Phi(x)` and `Phi(x)` from one pass, as two nodes (the IM-connection's
/// VJP differentiates through `Phi(x)` too): `dx = g (Phi(x) + x phi(x))` and `dx = g phi(x)`.
pub(super) fn gelu<B: Backend, const D: usize>(x: &Tensor<B, D>) -> Option<(Tensor<B, D>, Tensor<B, D>)> {
    let xt = unwrap(x)?;
    let x = inner::<D>(&xt);
    let (y, cdf) = super::gelu(x.clone());
    let (x_y, cdf_y) = (x.clone(), cdf.clone());
    let y = node([&xt], prim(y), move |g, [dx]| [dx.then(|| prim(super::gelu_backward(tensor::<D>(g), &x_y, &cdf_y)))]);
    let cdf = node([&xt], prim(cdf), move |g, [dx]| [dx.then(|| prim(super::normal_cdf_backward(tensor::<D>(g), &x)))]);
    Some((wrap(y), wrap(cdf)))
}

/// [`super::split_heads`]: a view of `x`'s part, as at inference; its backward writes `g` into
/// that part's columns of a zero `[batch, seq, parts * hidden]` (burn sums the three parts of
/// the q/k/v projection).
pub(super) fn split_heads<B: Backend>(x: &Tensor<B, 3>, parts: usize, part: usize, heads: usize) -> Option<Tensor<B, 4>> {
    let xt = unwrap(x)?;
    let x = inner::<3>(&xt);
    let [batch, seq, width] = x.dims();
    if width % (parts * heads).max(1) != 0 || part >= parts {
        return None; // burn's own ops report the mismatch
    }
    let y = prim(super::split_heads(x, parts, part, heads));
    Some(wrap(node([&xt], y, move |g, [dx]| {
        [dx.then(|| prim(scatter_heads(tensor::<4>(g), [batch, seq, width], parts, part)))]
    })))
}

/// The views of `v` at each index of its first axis, each borrowing what `v` borrows (so that
/// they can be handed to threads together).
fn unstack<'a, D: ndarray::RemoveAxis>(v: ndarray::ArrayViewMut<'a, f32, D>) -> Vec<ndarray::ArrayViewMut<'a, f32, D::Smaller>> {
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

/// `g` `[batch, heads, seq, head_dim]` as part `part` of a zero `[batch, seq, parts * heads * head_dim]`.
fn scatter_heads(g: Tensor<Inner, 4>, shape: [usize; 3], parts: usize, part: usize) -> Tensor<Inner, 3> {
    use ndarray::{Axis, Ix4};
    let [batch, seq, width] = shape;
    let [_, heads, _, head_dim] = g.dims();
    let g = super::cpu_f32_any_layout(g).expect("the CPU backend");
    let g = g.view().into_dimensionality::<Ix4>().expect("four dimensions").permuted_axes([0, 2, 1, 3]);
    let mut out = ndarray::Array5::<f32>::zeros((batch, seq, parts, heads, head_dim));
    let items: Vec<_> = unstack(out.view_mut()).into_iter().zip(g.outer_iter()).collect();
    let copy = |(mut o, g): (ndarray::ArrayViewMut4<f32>, ndarray::ArrayView3<f32>)| o.index_axis_mut(Axis(1), part).assign(&g);
    {
        use rayon::prelude::*;
        items.into_par_iter().for_each(copy);
    }
    let out = out.into_shape_with_order(vec![batch, seq, width]).expect("standard layout");
    super::from_cpu_f32(out.into_shared())
}

/// [`super::matmul_merged`] of one or three products: for each `(a, b)`, with `g_p` the view of
/// its columns of `g` split into heads, `da = g_p b^T` and `db = a^T g_p`.
pub(super) fn matmul_merged<B: Backend>(products: &[(Tensor<B, 4>, Tensor<B, 4>)]) -> Option<Tensor<B, 3>> {
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
    let pairs: Vec<(Tensor<Inner, 4>, Tensor<Inner, 4>)> = tensors.chunks(2).map(|p| (inner::<4>(&p[0]), inner::<4>(&p[1]))).collect();
    let heads = pairs.first()?.0.dims()[1];
    let y = prim(super::matmul_merged(pairs.clone()));
    Some(node(tensors.each_ref(), y, move |g, wanted| {
        let g = tensor::<3>(g);
        let mut grads: [Option<InnerTensor>; N] = std::array::from_fn(|_| None);
        for (p, (a, b)) in pairs.iter().enumerate() {
            let g_p = super::split_heads(g.clone(), pairs.len(), p, heads);
            grads[2 * p] = wanted[2 * p].then(|| prim(super::matmul(g_p.clone(), b.clone().swap_dims(2, 3))));
            grads[2 * p + 1] = wanted[2 * p + 1].then(|| prim(super::matmul(a.clone().swap_dims(2, 3), g_p)));
        }
        grads
    }))
}

#[cfg(test)]
mod tests {
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
                assert!(reference.iter().any(|v| v.abs() > 1e-6), "no gradient reaches {}", stringify!($input));
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
        let burn = x.clone().mul_scalar(std::f64::consts::FRAC_1_SQRT_2).erf().add_scalar(1.0).mul_scalar(0.5);
        // The kernel's erf is within 1.5e-7 (Abramowitz & Stegun), so the forward agrees to ~1e-6.
        check_grads!(super::super::normal_cdf(x.clone()), burn, r, [x]);
    }

    #[test]
    fn attention_probs_node_matches_burn() {
        let scores = f32_tensor([2, 3, 4, 5], 3.0, 12).require_grad();
        let mut bias = vec![0.0f32; 10];
        bias[8..].fill(-1e9); // the second item's last two keys are padding
        let bias = Tensor::<T, 4>::from_data(TensorData::new(bias, [2, 1, 1, 5]), (&Default::default(), DType::F32));
        let r = f32_tensor([2, 3, 4, 5], 1.0, 13);
        let burn = softmax(scores.clone().mul_scalar(0.5) + bias.clone(), 3);
        check_grads!(super::super::attention_probs(scores.clone(), 0.5, &bias), burn, r, [scores]);
    }

    #[test]
    fn layer_norm_nodes_match_burn() {
        let (x, gamma, beta) = (f32_tensor([2, 5, 8], 3.0, 14).require_grad(), tracked([8], 15), tracked([8], 16));
        let r: [Tensor<T, 3>; 3] = [f32_tensor([2, 5, 8], 1.0, 17), f32_tensor([2, 5, 8], 1.0, 18), f32_tensor([2, 5, 1], 1.0, 19)];
        let eps = 1e-12;
        let (y, x_hat, rstd) = super::super::layer_norm(x.clone(), gamma.clone(), Some(beta.clone()), eps);
        let centered = x.clone() - x.clone().mean_dim(2);
        let burn_rstd = (centered.clone() * centered.clone()).mean_dim(2).add_scalar(eps).sqrt().recip();
        let burn_x_hat = centered * burn_rstd.clone();
        let burn_y = burn_x_hat.clone() * gamma.clone().unsqueeze() + beta.clone().unsqueeze();
        // All three outputs at once, as the IM-connection's VJP uses them.
        let ours = (y * r[0].clone()).sum() + (x_hat * r[1].clone()).sum() + (rstd * r[2].clone()).sum();
        let burn = (burn_y * r[0].clone()).sum() + (burn_x_hat * r[1].clone()).sum() + (burn_rstd * r[2].clone()).sum();
        check_grads!(ours, burn, f32_tensor([1], 1.0, 20), [x, gamma, beta]);
    }

    #[test]
    fn softmax_backward_node_matches_burn() {
        let probs = softmax(f32_tensor([2, 3, 4, 5], 2.0, 23), 3);
        let probs = Tensor::<T, 4>::from_data(probs.into_data(), (&Default::default(), DType::F32)).require_grad();
        let d = tracked([2, 3, 4, 5], 24);
        let r = f32_tensor([2, 3, 4, 5], 1.0, 25);
        let burn = (probs.clone() * (d.clone() - (d.clone() * probs.clone()).sum_dim(3))).mul_scalar(0.5);
        check_grads!(super::super::softmax_backward(d.clone(), &probs, 0.5), burn, r, [d, probs]);
    }

    #[test]
    fn gelu_backward_node_matches_burn() {
        let (d, x) = (tracked([3, 4, 6], 26), f32_tensor([3, 4, 6], 2.0, 27).require_grad());
        // `x` reaches the output directly and through `cdf`. Each side builds its own graph from
        // the leaves: a backward pass consumes the graph it runs through.
        let cdf = || x.clone().mul_scalar(std::f64::consts::FRAC_1_SQRT_2).erf().add_scalar(1.0).mul_scalar(0.5);
        let r = f32_tensor([3, 4, 6], 1.0, 28);
        let pdf = (x.clone() * x.clone()).mul_scalar(-0.5).exp().mul_scalar(1.0 / (2.0 * std::f64::consts::PI).sqrt());
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
            let rstd = (centered.clone() * centered.clone()).mean_dim(2).add_scalar(1e-12).sqrt().recip();
            (centered * rstd.clone(), rstd)
        };
        let (x_hat, rstd) = normalise();
        let h = d.clone() * gamma.clone().unsqueeze();
        let burn = (h.clone() - h.clone().mean_dim(2) - x_hat.clone() * (h * x_hat).mean_dim(2)) * rstd;
        let (x_hat, rstd) = normalise();
        check_grads!(super::super::layer_norm_backward(d.clone(), &x_hat, &rstd, gamma.clone()), burn, r, [d, gamma, x]);
    }

    /// An inverted-dropout mask like [`super::super::dropout_keep`]'s: 0 or 2, as a constant.
    fn keep_mask<const D: usize>(shape: [usize; D], salt: usize) -> Tensor<T, D> {
        let n: usize = shape.iter().product();
        let values: Vec<f32> = noise(n + salt, 1.0).split_off(salt).iter().map(|v| if *v > 0.0 { 2.0 } else { 0.0 }).collect();
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
        check_grads!(super::super::add_residual(x.clone(), Some(&keep), residual.clone()), burn, r, [x, residual]);
        let (x, residual) = leaves();
        let burn = x.clone() + residual.clone();
        check_grads!(super::super::add_residual(x.clone(), None, residual.clone()), burn, r, [x, residual]);
        // The kernels write in place only into a buffer nothing else holds.
        assert_eq!(values(x), before);
    }

    #[test]
    fn im_update_nodes_match_burn() {
        let leaves = || (tracked([2, 4, 6], 44), tracked([2, 4, 6], 45), tracked([2, 4, 6], 46));
        let mut mask = vec![1.0f32; 8];
        mask[6..].fill(0.0); // the second item's last two tokens are padding
        let mask = Tensor::<T, 3>::from_data(TensorData::new(mask, [2, 4, 1]), (&Default::default(), DType::F32));
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
        let burn_cdf = x.clone().mul_scalar(std::f64::consts::FRAC_1_SQRT_2).erf().add_scalar(1.0).mul_scalar(0.5);
        let burn = ((x.clone() * burn_cdf.clone()) * r[0].clone()).sum() + (burn_cdf * r[1].clone()).sum();
        check_grads!(ours, burn, f32_tensor([1], 1.0, 53), [x]);
    }

    #[test]
    fn head_split_and_merge_nodes_match_burn() {
        let (batch, seq, heads, head_dim) = (2, 5, 3, 4);
        let hidden = heads * head_dim;
        let leaf = || tracked([batch, seq, 3 * hidden], 54);
        let burn_split = |qkv: &Tensor<T, 3>, part: usize| {
            qkv.clone().narrow(2, part * hidden, hidden).reshape([batch, seq, heads, head_dim]).swap_dims(1, 2)
        };
        let r = f32_tensor([batch, heads, seq, head_dim], 1.0, 55);
        for part in 0..3 {
            let qkv = leaf();
            check_grads!(super::super::split_heads(qkv.clone(), 3, part, heads), burn_split(&qkv, part), r, [qkv]);
        }
        // All three parts at once: burn sums the three gradients of the projection.
        let qkv = leaf();
        let r3: [Tensor<T, 4>; 3] = std::array::from_fn(|i| f32_tensor([batch, heads, seq, head_dim], 1.0, 56 + i));
        let ours = (0..3).map(|p| (super::super::split_heads(qkv.clone(), 3, p, heads) * r3[p].clone()).sum());
        let burn = (0..3).map(|p| (burn_split(&qkv, p) * r3[p].clone()).sum());
        let (ours, burn) = (ours.reduce(|a, b| a + b).unwrap(), burn.reduce(|a, b| a + b).unwrap());
        check_grads!(ours, burn, f32_tensor([1], 1.0, 59), [qkv]);

        // The VJP's `[dq dk dv]`: three products, with transposed and strided operands; and one
        // product, attention's context.
        let merge = |(a, b): (Tensor<T, 4>, Tensor<T, 4>)| a.matmul(b).swap_dims(1, 2).reshape([batch, seq, hidden]);
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
}
