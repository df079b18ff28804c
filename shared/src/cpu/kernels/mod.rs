//! Kernels for the plain CPU backend, where burn's composed ops are slow.
//!
//! burn-ndarray runs each elementwise op as its own pass over memory, on one thread; its `erf`
//! goes element by element through f64 `libm` (GELU alone was a large share of a forward, see
//! `docs/performance.md`); and its
//! reshapes copy even contiguous arrays, so every `matmul` copied its inputs and output. When
//! the backend is burn-ndarray with f32 data (inference: evaluation, attacks, IM's inner loop,
//! the demo's CPU fallback), the functions here run one pass split over threads, and GEMMs on
//! views. Under `Autodiff<NdArray<f32>>` (CPU training), [`autodiff`] records each of them as
//! one node whose backward runs on the same kernels. On every other backend (f64, wgpu, cuda)
//! they compose burn's own ops, so the f64 gradient checks see burn's code.
//!
//! The backend is recognised at run time (`Any` on the tensor primitive), which keeps the model
//! generic over `B: Backend` instead of adding a kernel trait to every bound in the code base.
//!
//! A file per job: `products.rs` (Linear and attention's products, GEMMs on views over
//! `gemm.rs`), `attention.rs`, `norm.rs` (LayerNorm), `activation.rs` (GELU), `dropout.rs`,
//! `residual.rs` (residual sums and IM's update), `simd.rs` (the vectorised per-element math)
//! and `autodiff/` (the nodes). This file holds what they share: the backend check, the access
//! to burn-ndarray's f32 buffers, and the runners that split a kernel over threads.

use std::any::Any;
use std::mem::MaybeUninit;

use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorPrimitive};
use burn_ndarray::{NdArrayTensor, SharedArray};

/// Runs the autodiff node when `B` is `Autodiff<NdArray<f32>>` (see [`autodiff`]).
macro_rules! train_node {
    ($call:expr) => {
        #[cfg(not(target_arch = "wasm32"))]
        if let Some(out) = $call {
            return out;
        }
    };
}

mod activation;
mod attention;
#[cfg(not(target_arch = "wasm32"))]
mod autodiff;
mod dropout;
mod gemm;
mod norm;
mod products;
mod residual;
mod simd;
#[cfg(test)]
mod tests;
#[cfg(any(test, all(target_arch = "wasm32", target_feature = "simd128")))]
mod tiled_gemm;

pub use activation::{gelu, gelu_backward, gelu_output, normal_cdf, normal_cdf_backward};
pub(crate) use attention::softmax_row;
pub use attention::{attention, attention_backward, attention_probs, softmax_backward};
pub use dropout::{dropout_keep, times_keep};
pub use norm::{layer_norm, layer_norm_backward, layer_norm_output};
pub use products::{
    concat, linear, linear_residual, matmul, matmul_merged, split_heads, weight_gradient,
};
pub use residual::{add_residual, descent_step, masked_residual};

/// `x`'s f32 array in standard (row-major, contiguous) layout when `B` is burn-ndarray holding
/// f32; otherwise `x` itself as the error.
fn cpu_f32<B: Backend, const D: usize>(x: Tensor<B, D>) -> Result<SharedArray<f32>, Tensor<B, D>> {
    let array = cpu_f32_any_layout(x)?;
    Ok(if array.is_standard_layout() {
        array
    } else {
        array.as_standard_layout().into_owned().into_shared()
    })
}

/// [`cpu_f32`] without the copy to standard layout: a transposed view stays one.
fn cpu_f32_any_layout<B: Backend, const D: usize>(
    x: Tensor<B, D>,
) -> Result<SharedArray<f32>, Tensor<B, D>> {
    let primitive = match x.into_primitive() {
        TensorPrimitive::Float(p) => p,
        quantized => return Err(Tensor::from_primitive(quantized)),
    };
    let tensor = match (Box::new(primitive) as Box<dyn Any>).downcast::<NdArrayTensor>() {
        Ok(t) => *t,
        Err(other) => return Err(from_any(other)),
    };
    let NdArrayTensor::F32(storage) = tensor else {
        return Err(from_any(Box::new(tensor)));
    };
    Ok(storage.into_owned())
}

/// A 4-D view of an array that should be one.
fn view4(a: &SharedArray<f32>) -> Option<ndarray::ArrayView4<'_, f32>> {
    a.view().into_dimensionality::<ndarray::Ix4>().ok()
}

/// The inverse of [`cpu_f32`]; only called where `B` was found to be burn-ndarray.
fn from_cpu_f32<B: Backend, const D: usize>(array: SharedArray<f32>) -> Tensor<B, D> {
    from_any(Box::new(NdArrayTensor::from(array)))
}

/// The box always holds `B`'s own primitive (what [`cpu_f32`] took out, or burn-ndarray's after
/// `B` was found to be burn-ndarray).
fn from_any<B: Backend, const D: usize>(boxed: Box<dyn Any>) -> Tensor<B, D> {
    let primitive =
        boxed.downcast::<B::FloatTensorPrimitive>().expect("the backend's own primitive");
    Tensor::from_primitive(TensorPrimitive::Float(*primitive))
}

/// Runs `kernel(shape, buffer)` in place on `x`'s f32 data when `B` is burn-ndarray holding f32,
/// and returns the result; otherwise returns `x` untouched as the error.
fn on_cpu_f32<B: Backend, const D: usize>(
    x: Tensor<B, D>,
    kernel: impl FnOnce(&[usize], &mut [f32]),
) -> Result<Tensor<B, D>, Tensor<B, D>> {
    // Unique after the op that made it (else copied here), so the kernel writes in place.
    let mut array = cpu_f32(x)?;
    let shape = array.shape().to_vec();
    kernel(&shape, array.as_slice_mut().expect("standard layout is contiguous"));
    Ok(from_cpu_f32(array))
}

/// Runs `kernel(first_row, rows_of_out, rows_of_inputs)` over blocks of whole rows of `out` (its
/// last dimension), in parallel, writing in place. Each input has as many rows as `out`, of its
/// own width (e.g. `[.., 1]` for one value per row). Works when `B` is burn-ndarray holding f32;
/// otherwise returns `out` untouched as the error.
fn rows_in_place<B: Backend, const D: usize, const N: usize>(
    out: Tensor<B, D>,
    inputs: [&Tensor<B, D>; N],
    kernel: impl Fn(usize, &mut [f32], [&[f32]; N]) + Send + Sync,
) -> Result<Tensor<B, D>, Tensor<B, D>> {
    let mut out = cpu_f32(out)?;
    let mut arrays = Vec::with_capacity(N);
    for input in inputs {
        match cpu_f32(input.clone()) {
            Ok(a) => arrays.push(a),
            Err(_) => return Err(from_cpu_f32(out)),
        }
    }
    let width = out.shape().last().copied().unwrap_or(1);
    let rows = out.len() / width.max(1);
    if rows == 0 || arrays.iter().any(|a| a.len() % rows != 0) {
        return Err(from_cpu_f32(out));
    }
    let inputs: [&[f32]; N] =
        std::array::from_fn(|i| arrays[i].as_slice().expect("standard layout"));
    let block_rows = (1usize << 14).div_ceil(width.max(1));
    let run = |(block, chunk): (usize, &mut [f32])| {
        let first = block * block_rows;
        let n = chunk.len() / width.max(1);
        kernel(
            first,
            chunk,
            inputs.map(|x| {
                let w = x.len() / rows;
                &x[first * w..(first + n) * w]
            }),
        );
    };
    let buf = out.as_slice_mut().expect("standard layout is contiguous");
    #[cfg(not(target_arch = "wasm32"))]
    {
        use rayon::prelude::*;
        buf.par_chunks_mut(block_rows * width.max(1)).enumerate().for_each(run);
    }
    #[cfg(target_arch = "wasm32")]
    buf.chunks_mut(block_rows * width.max(1)).enumerate().for_each(run);
    Ok(from_cpu_f32(out))
}

/// `f` over consecutive blocks of `block` elements, in parallel where there are threads.
fn for_blocks(buf: &mut [f32], block: usize, f: impl Fn(&mut [f32]) + Send + Sync) {
    #[cfg(not(target_arch = "wasm32"))]
    {
        use rayon::prelude::*;
        buf.par_chunks_mut(block).for_each(f);
    }
    #[cfg(target_arch = "wasm32")]
    buf.chunks_mut(block).for_each(f);
}

/// Runs an elementwise update on the CPU for code outside this module (the trainer's fused
/// AdamW): when `B` is burn-ndarray holding f32 and every tensor has `written[0]`'s shape,
/// `kernel(written, read)` runs on matching blocks of `block` elements of each tensor's data, in
/// parallel where there are threads, and `written` comes back holding what the kernel wrote.
/// Otherwise (another backend or dtype, or a shape that differs) `written` comes back as the
/// error, its data as it was.
///
/// A written tensor is updated in place when nothing else holds its buffer, else copied first;
/// the read ones are never copied (unless they are not row-major).
pub fn elementwise_in_place<B: Backend, const D: usize, const W: usize, const R: usize>(
    written: [Tensor<B, D>; W],
    read: [&Tensor<B, D>; R],
    block: usize,
    kernel: impl Fn([&mut [f32]; W], [&[f32]; R]) + Send + Sync,
) -> Result<[Tensor<B, D>; W], [Tensor<B, D>; W]> {
    let arrays = written.map(cpu_f32);
    let inputs = read.map(|t| cpu_f32(t.clone()).ok());
    let shape = arrays.first().and_then(|a| a.as_ref().ok()).map(|a| a.shape().to_vec());
    let fits =
        |a: Option<&SharedArray<f32>>| a.is_some_and(|a| shape.as_deref() == Some(a.shape()));
    if !(arrays.iter().all(|a| fits(a.as_ref().ok())) && inputs.iter().all(|a| fits(a.as_ref()))) {
        return Err(arrays.map(|a| a.map_or_else(|t| t, from_cpu_f32)));
    }
    let mut arrays = arrays.map(|a| a.unwrap_or_else(|_| unreachable!("checked above")));
    let inputs = inputs.map(|a| a.expect("checked above"));
    let (block, n) = (block.max(1), shape.map_or(0, |s| s.iter().product::<usize>()));
    {
        let mut outs = arrays
            .each_mut()
            .map(|a| a.as_slice_mut().expect("standard layout is contiguous").chunks_mut(block));
        let mut ins =
            inputs.each_ref().map(|a| a.as_slice().expect("standard layout").chunks(block));
        let parts: Vec<_> = (0..n.div_ceil(block))
            .map(|_| {
                (
                    outs.each_mut().map(|c| c.next().expect("n elements")),
                    ins.each_mut().map(|c| c.next().expect("n elements")),
                )
            })
            .collect();
        let run = |(outs, ins): ([&mut [f32]; W], [&[f32]; R])| kernel(outs, ins);
        #[cfg(not(target_arch = "wasm32"))]
        {
            use rayon::prelude::*;
            parts.into_par_iter().for_each(run);
        }
        #[cfg(target_arch = "wasm32")]
        parts.into_iter().for_each(run);
    }
    Ok(arrays.map(from_cpu_f32))
}

/// `K` new buffers of `rows` rows (buffer `i` has rows of `widths[i]` elements), filled block by
/// block of `block_rows` rows by `kernel(first_row, blocks)` in parallel. Each block is zeroed on
/// the thread that fills it, just before: `vec![0.0; n]` zeroed the whole output on the calling
/// thread first, a single-threaded pass over every output.
fn new_rows<const K: usize>(
    rows: usize,
    widths: [usize; K],
    block_rows: usize,
    kernel: impl Fn(usize, [&mut [f32]; K]) + Send + Sync,
) -> [Vec<f32>; K] {
    let zeroed = |first, blocks: [&mut [MaybeUninit<f32>]; K]| {
        kernel(
            first,
            blocks.map(|block| {
                block.fill(MaybeUninit::new(0.0));
                // SAFETY: every element was just initialised; MaybeUninit<f32> has f32's layout.
                unsafe { &mut *(block as *mut [MaybeUninit<f32>] as *mut [f32]) }
            }),
        )
    };
    // SAFETY: `zeroed` initialises every element of every block.
    unsafe { new_rows_uninit(rows, widths, block_rows, zeroed) }
}

/// [`new_rows`] without the zeroing, for kernels that write every element themselves (a GEMM
/// with `beta = 0` or a bias as its initial `C`): the zeroing pass is a whole extra pass over
/// memory.
///
/// # Safety
/// `kernel` must initialise every element of every block it is given.
unsafe fn new_rows_uninit<const K: usize>(
    rows: usize,
    widths: [usize; K],
    block_rows: usize,
    kernel: impl Fn(usize, [&mut [MaybeUninit<f32>]; K]) + Send + Sync,
) -> [Vec<f32>; K] {
    let block_rows = block_rows.max(1);
    let mut buffers: [Vec<f32>; K] = widths.map(|w| Vec::with_capacity(rows * w));
    {
        let mut parts: Vec<(usize, [&mut [MaybeUninit<f32>]; K])> =
            Vec::with_capacity(rows.div_ceil(block_rows));
        let mut rests = buffers.each_mut().map(|b| b.spare_capacity_mut());
        for first in (0..rows).step_by(block_rows) {
            let n = block_rows.min(rows - first);
            let blocks = std::array::from_fn(|i| {
                let (block, tail) = std::mem::take(&mut rests[i]).split_at_mut(n * widths[i]);
                rests[i] = tail;
                block
            });
            parts.push((first, blocks));
        }
        let run = |(first, blocks): (usize, [&mut [MaybeUninit<f32>]; K])| kernel(first, blocks);
        #[cfg(not(target_arch = "wasm32"))]
        {
            use rayon::prelude::*;
            parts.into_par_iter().for_each(run);
        }
        #[cfg(target_arch = "wasm32")]
        parts.into_iter().for_each(run);
    }
    for (buffer, width) in buffers.iter_mut().zip(widths) {
        // SAFETY: the blocks cover all `rows * width` elements, and the caller promises that
        // `kernel` initialised each.
        unsafe { buffer.set_len(rows * width) };
    }
    buffers
}
