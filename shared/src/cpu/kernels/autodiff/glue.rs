//! The glue between the kernels: dropout products, residual sums, IM-BERT's residual and descent
//! step. As burn's composed ops each of them was a one-thread pass forward and another back, on
//! every layer evaluation of every IM iteration.

use std::any::{Any, TypeId};

use burn::tensor::backend::Backend;
use burn::tensor::{DType, Tensor, TensorData};

use super::{inner, node, prim, tensor, unwrap, wrap, Inner, Train, TrainTensor};
use crate::cpu::kernels;

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
    let empty = Tensor::<Inner, 1>::from_data(
        TensorData::new(Vec::<f32>::new(), [0]),
        (&Default::default(), DType::F32),
    );
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
fn combine<const D: usize>(
    a: &Tensor<Inner, D>,
    b: &Tensor<Inner, D>,
    f: impl Fn(f32, f32) -> f32 + Send + Sync,
) -> Tensor<Inner, D> {
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
    let out = kernels::from_cpu_f32(ndarray::ArrayD::<f32>::zeros(a.dims().to_vec()).into_shared());
    // Only an empty tensor (no rows) comes back unprocessed, and it is the answer.
    kernels::rows_in_place(out, [a, b], kernel).unwrap_or_else(|empty| empty)
}

/// [`kernels::times_keep`], `x keep` with a constant mask: `dx = g keep`.
pub(in crate::cpu::kernels) fn times_keep<B: Backend, const D: usize>(
    x: Tensor<B, D>,
    keep: &Tensor<B, D>,
) -> Result<Tensor<B, D>, Tensor<B, D>> {
    let Some(keep) = constant(keep).filter(|_| trains(&x)) else { return Err(x) };
    let (data, xt) = take_data::<D>(unwrap_owned(x));
    let y = prim(kernels::times_keep(data, &keep));
    Ok(wrap(node([&xt], y, move |g, [dx]| {
        [dx.then(|| prim(kernels::times_keep(tensor::<D>(g), &keep)))]
    })))
}

/// [`kernels::add_residual`], `x keep + residual` (`keep` constant, or none):
/// `dx = g keep` (or `g`), `dresidual = g`.
pub(in crate::cpu::kernels) fn add_residual<B: Backend, const D: usize>(
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
    let y = prim(kernels::add_residual(data, keep.as_ref(), inner::<D>(&rt)));
    Ok(wrap(node([&xt, &rt], y, move |g, [dx, dr]| {
        let g = tensor::<D>(g);
        let dx = dx.then(|| {
            prim(keep.as_ref().map_or_else(|| g.clone(), |k| combine(&g, k, |g, k| g * k)))
        });
        [dx, dr.then(|| prim(g))]
    })))
}

/// [`kernels::masked_residual`], `r = (z - h - phi) m` with a constant token mask `m`:
/// `dz = g m`, `dh = dphi = -g m`.
pub(in crate::cpu::kernels) fn masked_residual<B: Backend>(
    z: &Tensor<B, 3>,
    h: &Tensor<B, 3>,
    phi: Tensor<B, 3>,
    mask: &Tensor<B, 3>,
) -> Result<Tensor<B, 3>, Tensor<B, 3>> {
    let (Some(zt), Some(ht), Some(mask)) = (unwrap(z), unwrap(h), constant(mask)) else {
        return Err(phi);
    };
    if !trains(&phi) {
        return Err(phi);
    }
    let (data, pt) = take_data::<3>(unwrap_owned(phi));
    let y = prim(kernels::masked_residual(&inner::<3>(&zt), &inner::<3>(&ht), data, &mask));
    Ok(wrap(node([&zt, &ht, &pt], y, move |g, [dz, dh, dphi]| {
        let g = tensor::<3>(g);
        let minus = (dh || dphi).then(|| prim(combine(&g, &mask, |g, m| -(g * m))));
        [
            dz.then(|| prim(combine(&g, &mask, |g, m| g * m))),
            minus.clone().filter(|_| dh),
            minus.filter(|_| dphi),
        ]
    })))
}

/// [`kernels::descent_step`], `z - s (r - jtr)`: `dz = g`, `dr = -s g`, `djtr = s g`.
pub(in crate::cpu::kernels) fn descent_step<B: Backend>(
    z: &Tensor<B, 3>,
    r: &Tensor<B, 3>,
    jtr: Tensor<B, 3>,
    step: f64,
) -> Result<Tensor<B, 3>, Tensor<B, 3>> {
    let (Some(zt), Some(rt)) = (unwrap(z), unwrap(r)) else { return Err(jtr) };
    if !trains(&jtr) {
        return Err(jtr);
    }
    let (data, jt) = take_data::<3>(unwrap_owned(jtr));
    let y = prim(kernels::descent_step(&inner::<3>(&zt), &inner::<3>(&rt), data, step));
    let s = step as f32;
    Ok(wrap(node([&zt, &rt, &jt], y, move |g, [dz, dr, djtr]| {
        let g = tensor::<3>(g);
        let dr = dr.then(|| prim(combine(&g, &g, |g, _| -s * g)));
        let djtr = djtr.then(|| prim(combine(&g, &g, |g, _| s * g)));
        [dz.then(|| prim(g)), dr, djtr]
    })))
}
