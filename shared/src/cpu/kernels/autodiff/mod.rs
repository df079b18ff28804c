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
use burn::tensor::{DType, Tensor, TensorPrimitive};
use burn_autodiff::checkpoint::{base::Checkpointer, strategy::NoCheckpointing};
use burn_autodiff::grads::Gradients;
use burn_autodiff::ops::{Backward, Ops, OpsKind};
use burn_autodiff::Autodiff;
use burn_ndarray::NdArray;

mod forward;
mod glue;
#[cfg(test)]
mod tests;
mod vjp;

pub(super) use forward::{
    attention_probs, gelu, layer_norm, linear, matmul, matmul_merged, normal_cdf, split_heads,
};
pub(super) use glue::{add_residual, descent_step, masked_residual, times_keep};
pub(super) use vjp::{gelu_backward, layer_norm_backward, softmax_backward};

type Inner = NdArray<f32>;
type Train = Autodiff<Inner>;
type TrainTensor = burn::tensor::ops::FloatTensor<Train>;
type InnerTensor = burn::tensor::ops::FloatTensor<Inner>;

/// A node's backward: from the output's gradient and which parents want one, their gradients.
type BackwardFn<const N: usize> =
    Arc<dyn Fn(InnerTensor, [bool; N]) -> [Option<InnerTensor>; N] + Send + Sync>;

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
    match Kernel::<N>
        .prepare::<NoCheckpointing>(parents.map(|p| p.node.clone()))
        .compute_bound()
        .stateful()
    {
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
        TensorPrimitive::Float(p) => {
            (Box::new(p) as Box<dyn Any>).downcast::<TrainTensor>().ok().map(|t| *t)
        }
        TensorPrimitive::QFloat(_) => None,
    }
}

/// The inverse of [`unwrap`]; only called where `B` was found to be `Train`.
fn wrap<B: Backend, const D: usize>(t: TrainTensor) -> Tensor<B, D> {
    let p = (Box::new(t) as Box<dyn Any>)
        .downcast::<B::FloatTensorPrimitive>()
        .expect("B is Autodiff<NdArray<f32>>");
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
