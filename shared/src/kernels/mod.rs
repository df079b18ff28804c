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

use std::any::Any;

use burn::tensor::activation::softmax;
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorPrimitive};
use burn_ndarray::{NdArrayTensor, SharedArray};
use std::mem::MaybeUninit;

use ndarray::ArrayD;

#[cfg(not(target_arch = "wasm32"))]
mod autodiff;

/// Runs the autodiff node when `B` is `Autodiff<NdArray<f32>>` (see [`autodiff`]).
macro_rules! train_node {
    ($call:expr) => {
        #[cfg(not(target_arch = "wasm32"))]
        if let Some(out) = $call {
            return out;
        }
    };
}

/// Inverted-dropout keep mask shaped like `like`: `1 / (1 - p)` with probability `1 - p`, else 0.
///
/// On the CPU, burn draws each element through a freshly built sampler, a cost that showed in
/// every training step. There the mask comes from a counter-based generator (SplitMix64 of the
/// element's index) split over threads, seeded by one draw from the backend's RNG, so `B::seed`
/// still fixes every mask. Other devices draw it where the tensor lives.
pub fn dropout_keep<B: Backend, const D: usize>(like: &Tensor<B, D>, p: f64) -> Tensor<B, D> {
    use burn::tensor::{DType, Distribution, Int, TensorData};
    let device = like.device();
    if !((&device as &dyn Any).is::<burn_ndarray::NdArrayDevice>() && like.dtype() == DType::F32) {
        return Tensor::random(like.shape(), Distribution::Bernoulli(1.0 - p), &device).mul_scalar(1.0 / (1.0 - p));
    }
    let draw = Tensor::<B, 1, Int>::random([2], Distribution::Uniform(0.0, 4294967296.0), &device);
    let seed = draw.into_data().convert::<i64>().into_vec::<i64>().unwrap_or_default().iter().fold(0u64, |s, &v| (s << 32) ^ v as u64);
    let mask = keep_mask(seed, like.shape().num_elements(), p);
    Tensor::from_data(TensorData::new(mask, like.shape()), (&device, DType::F32))
}

/// [`dropout_keep`]'s CPU mask of `n` elements for `seed`.
fn keep_mask(seed: u64, n: usize, p: f64) -> Vec<f32> {
    // Keep when the top 32 bits fall below (1 - p) 2^32.
    let threshold = ((1.0 - p) * 4294967296.0).round() as u64;
    let (scale, block) = ((1.0 / (1.0 - p)) as f32, 1usize << 14);
    let mut mask = vec![0.0f32; n];
    let fill = |(index, chunk): (usize, &mut [f32])| {
        for (i, v) in chunk.iter_mut().enumerate() {
            let bits = crate::rng::nth(seed, (index * block + i) as u64);
            *v = if bits >> 32 < threshold { scale } else { 0.0 };
        }
    };
    #[cfg(not(target_arch = "wasm32"))]
    {
        use rayon::prelude::*;
        mask.par_chunks_mut(block).enumerate().for_each(fill);
    }
    #[cfg(target_arch = "wasm32")]
    mask.chunks_mut(block).enumerate().for_each(fill);
    mask
}

/// `Phi(x) = (1 + erf(x / sqrt 2)) / 2`, the standard normal CDF (exact GELU is `x Phi(x)`).
pub fn normal_cdf<B: Backend, const D: usize>(x: Tensor<B, D>) -> Tensor<B, D> {
    train_node!(autodiff::normal_cdf(&x));
    match on_cpu_f32(x, |_, buf| for_blocks(buf, 1 << 14, cdf_in_place)) {
        Ok(y) => y,
        Err(x) => x.mul_scalar(std::f64::consts::FRAC_1_SQRT_2).erf().add_scalar(1.0).mul_scalar(0.5),
    }
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

/// Exact GELU alone, for a forward that keeps nothing for a backward: on the CPU in place over
/// `x`'s buffer, without [`gelu`]'s second output.
pub fn gelu_output<B: Backend, const D: usize>(x: Tensor<B, D>) -> Tensor<B, D> {
    #[cfg(not(target_arch = "wasm32"))]
    if let Some((y, _)) = autodiff::gelu(&x) {
        return y;
    }
    on_cpu_f32(x, |_, buf| for_blocks(buf, 1 << 14, gelu_in_place)).unwrap_or_else(|x| gelu(x).0)
}

/// `parts` joined along their last dimension (the fused q/k/v weight and bias). On burn-ndarray
/// with f32 data, one multi-threaded pass of row copies: burn-ndarray's `cat` copies element by
/// element on one thread, and the weight is joined on every layer call and every IM iteration. Under autodiff,
/// burn's own `cat`, whose backward slices the gradient.
pub fn concat<B: Backend, const D: usize>(parts: Vec<Tensor<B, D>>) -> Tensor<B, D> {
    let arrays: Option<Vec<SharedArray<f32>>> = parts.iter().map(|p| cpu_f32(p.clone()).ok()).collect();
    let Some(arrays) = arrays.filter(|a| !a.is_empty()) else { return Tensor::cat(parts, D - 1) };
    let lead = &arrays[0].shape()[..D - 1];
    if arrays.iter().any(|a| &a.shape()[..D - 1] != lead) {
        return Tensor::cat(parts, D - 1); // burn's own op reports the mismatch
    }
    let widths: Vec<usize> = arrays.iter().map(|a| a.shape()[D - 1]).collect();
    let (rows, width) = (lead.iter().product::<usize>(), widths.iter().sum::<usize>());
    let slices: Vec<&[f32]> = arrays.iter().map(|a| a.as_slice().expect("standard layout")).collect();
    let block = (1usize << 14).div_ceil(width.max(1));
    let [out] = new_rows(rows, [width], block, |first, [out]| {
        for (i, row) in out.chunks_mut(width.max(1)).enumerate() {
            let mut at = 0;
            for (part, &w) in slices.iter().zip(&widths) {
                row[at..at + w].copy_from_slice(&part[(first + i) * w..][..w]);
                at += w;
            }
        }
    });
    let mut shape = lead.to_vec();
    shape.push(width);
    from_cpu_f32(SharedArray::from_shape_vec(shape, out).expect("rows * width elements"))
}

/// `x W + b` over the last dimension of `x` (`weight` is `[in, out]`, as burn's `Linear`), run
/// as one `[rows, in]` GEMM over all leading dimensions: a single large product instead of one
/// per batch item that each re-pack `W` (also in autodiff's weight gradient).
///
/// On burn-ndarray with f32 data this is one GEMM on views of the inputs, with the bias as the
/// GEMM's initial `C` (`beta = 1`): burn-ndarray's reshapes copy even contiguous arrays, so its
/// `linear` on `[batch * seq, in]` copied the input, the weight and the output twice over.
/// A transposed weight (a VJP's `W^T`) is passed to the GEMM as a transpose, not copied.
pub fn linear<B: Backend, const D: usize>(x: Tensor<B, D>, weight: Tensor<B, 2>, bias: Option<Tensor<B, 1>>) -> Tensor<B, D> {
    train_node!(autodiff::linear(&x, &weight, bias.as_ref()));
    if let Some(y) = linear_cpu_f32(&x, &weight, bias.as_ref()) {
        return y;
    }
    let dims = x.dims();
    let features = dims[D - 1];
    let y = burn::tensor::module::linear(x.reshape([dims[..D - 1].iter().product(), features]), weight, bias);
    let mut out = dims;
    out[D - 1] = y.dims()[1];
    y.reshape(out)
}

fn linear_cpu_f32<B: Backend, const D: usize>(
    x: &Tensor<B, D>,
    weight: &Tensor<B, 2>,
    bias: Option<&Tensor<B, 1>>,
) -> Option<Tensor<B, D>> {
    use ndarray::Ix2;
    let x = cpu_f32(x.clone()).ok()?;
    let weight = cpu_f32_any_layout(weight.clone()).ok()?;
    let bias = match bias {
        Some(b) => Some(cpu_f32(b.clone()).ok()?),
        None => None,
    };
    let weight = weight.view().into_dimensionality::<Ix2>().ok()?;
    let (features, out) = weight.dim();
    let mut shape = x.shape().to_vec();
    if shape[D - 1] != features || bias.as_ref().is_some_and(|b| b.len() != out) {
        return None; // burn's own op reports the mismatch
    }
    let rows = x.len() / features.max(1);
    let x = x.view().into_shape_with_order((rows, features)).ok()?;
    let bias = match &bias {
        Some(b) => Some(b.as_slice()?),
        None => None,
    };
    let y = gemm_by_rows(x, weight, bias);
    shape[D - 1] = out;
    Some(from_cpu_f32(y.into_shape_with_order(shape).ok()?.into_shared()))
}

/// `x W + b + residual`: a Linear layer whose output joins the residual stream with no dropout
/// between (the sub-blocks' output dense at inference, and the VJP's two input-gradients that
/// meet a residual path).
///
/// On burn-ndarray with f32 data the residual is the GEMM's initial `C` (`beta = 1`): updated in
/// place when nothing else holds its buffer, else copied with the bias added on the way. That
/// replaces [`linear`] followed by [`add_residual`], a zeroed (or bias-filled) output and then a
/// pass that read it back. Everywhere else, those two kernels.
pub fn linear_residual<B: Backend, const D: usize>(
    x: Tensor<B, D>,
    weight: Tensor<B, 2>,
    bias: Option<Tensor<B, 1>>,
    residual: Tensor<B, D>,
) -> Tensor<B, D> {
    match linear_residual_cpu_f32(&x, &weight, bias.as_ref(), residual) {
        Ok(y) => y,
        Err(residual) => add_residual(linear(x, weight, bias), None, residual),
    }
}

fn linear_residual_cpu_f32<B: Backend, const D: usize>(
    x: &Tensor<B, D>,
    weight: &Tensor<B, 2>,
    bias: Option<&Tensor<B, 1>>,
    residual: Tensor<B, D>,
) -> Result<Tensor<B, D>, Tensor<B, D>> {
    use ndarray::Ix2;
    let (Ok(x), Ok(weight)) = (cpu_f32(x.clone()), cpu_f32_any_layout(weight.clone())) else { return Err(residual) };
    let bias = match bias.map(|b| cpu_f32(b.clone())) {
        Some(Ok(b)) => Some(b),
        Some(Err(_)) => return Err(residual),
        None => None,
    };
    let Some(weight) = weight.view().into_dimensionality::<Ix2>().ok() else { return Err(residual) };
    let (features, out) = weight.dim();
    let fits = x.shape()[D - 1] == features && residual.dims()[..D - 1] == x.shape()[..D - 1] && residual.dims()[D - 1] == out;
    if !fits || bias.as_ref().is_some_and(|b| b.len() != out) {
        return Err(residual); // burn's own ops report the mismatch
    }
    let mut c = cpu_f32(residual)?;
    let rows = x.len() / features.max(1);
    let Ok(x) = x.view().into_shape_with_order((rows, features)) else { return Err(from_cpu_f32(c)) };
    let bias = bias.as_ref().and_then(|b| b.as_slice());
    if c.is_unique() {
        let buf = c.as_slice_mut().expect("standard layout is contiguous");
        if let Some(bias) = bias {
            let block = (1usize << 14).div_ceil(out.max(1)) * out.max(1); // whole rows
            for_blocks(buf, block, |rows| rows.chunks_mut(out.max(1)).for_each(|row| row.iter_mut().zip(bias).for_each(|(c, b)| *c += b)));
        }
        gemm_add_by_rows(x, weight, buf);
        return Ok(from_cpu_f32(c));
    }
    // Held elsewhere (IM keeps `h_{t-1}`): a new `C` starts as residual + bias.
    let init = c.as_slice().expect("standard layout is contiguous");
    // SAFETY: each part's rows are written whole, from the residual's rows.
    let y = unsafe { gemm_by_rows_with(x, weight, Some(|first: usize, part: &mut [MaybeUninit<f32>]| {
        let rows = part.chunks_exact_mut(out.max(1)).zip(init[first * out..].chunks_exact(out.max(1)));
        for (row, r) in rows {
            match bias {
                Some(b) => row.iter_mut().zip(r).zip(b).for_each(|((c, r), b)| *c = MaybeUninit::new(r + b)),
                None => row.iter_mut().zip(r).for_each(|(c, r)| *c = MaybeUninit::new(*r)),
            }
        }
    })) };
    Ok(from_cpu_f32(y.into_shape_with_order(c.shape()).expect("the residual's shape").into_shared()))
}

/// `c = a b`, plus `bias` on every row, as a new array. The rows of `c` and `a` are split into
/// one part per thread of rayon's pool, each part one GEMM on its thread. The bias is the GEMM's
/// initial `C` (`beta = 1`), written by the part's own thread; without one, `beta = 0` and the
/// GEMM writes every element, so the output is never zeroed first.
///
/// With OpenBLAS, its own thread pool is switched off ([`crate::blas::calling_thread_only`]): its
/// threads spin for a while after each GEMM, and on a small machine they took the cores from
/// the rayon kernels between GEMMs (`sched_yield` dominated the profile). One pool
/// for everything avoids that. `matrixmultiply` threads itself and gets the product whole.
fn gemm_by_rows(a: ndarray::ArrayView2<f32>, b: ndarray::ArrayView2<f32>, bias: Option<&[f32]>) -> ndarray::Array2<f32> {
    let cols = b.ncols();
    match bias {
        // SAFETY: every row of every part gets the bias (`cols` elements, checked by the caller).
        Some(bias) => unsafe {
            gemm_by_rows_with(a, b, Some(|_: usize, part: &mut [MaybeUninit<f32>]| {
                for row in part.chunks_exact_mut(cols.max(1)) {
                    // SAFETY: `row` and `bias` both hold `cols` elements, in different buffers.
                    std::ptr::copy_nonoverlapping(bias.as_ptr(), row.as_mut_ptr().cast(), cols);
                }
            }))
        },
        // SAFETY: no `init`: the GEMM writes with `beta = 0`.
        None => unsafe { gemm_by_rows_with(a, b, None::<fn(usize, &mut [MaybeUninit<f32>])>) },
    }
}

/// [`gemm_by_rows`] from an initial `C` when `init` is given: `init(first_row, part)` writes the
/// part's rows and the GEMM adds `a b` to them (`beta = 1`); without, `beta = 0`.
///
/// # Safety
/// `init`, when given, must initialise every element of the part it is given.
unsafe fn gemm_by_rows_with(
    a: ndarray::ArrayView2<f32>,
    b: ndarray::ArrayView2<f32>,
    init: Option<impl Fn(usize, &mut [MaybeUninit<f32>]) + Sync>,
) -> ndarray::Array2<f32> {
    use ndarray::s;
    let (rows, cols) = (a.nrows(), b.ncols());
    let part_rows = gemm_part_rows(&a, cols);
    let fill = |first: usize, [part]: [&mut [MaybeUninit<f32>]; 1]| {
        let n = part.len() / cols.max(1);
        let beta = match &init {
            Some(init) => {
                init(first, part);
                1.0
            }
            None => 0.0,
        };
        // SAFETY: `part` holds `n` rows of `cols`; with `beta = 1`, `init` initialised them (the
        // caller's promise).
        unsafe { gemm_into(a.slice(s![first..first + n, ..]), b, beta, part.as_mut_ptr().cast(), cols) };
    };
    // SAFETY: the GEMM writes every element of every part, whatever `beta`.
    let [c] = unsafe { new_rows_uninit(rows, [cols], part_rows, fill) };
    ndarray::Array2::from_shape_vec((rows, cols), c).expect("rows * cols elements")
}

/// `c += a b` in place, `c` row-major `[a.nrows(), b.ncols()]`, split by rows as [`gemm_by_rows`].
fn gemm_add_by_rows(a: ndarray::ArrayView2<f32>, b: ndarray::ArrayView2<f32>, c: &mut [f32]) {
    use ndarray::s;
    let cols = b.ncols();
    assert_eq!(c.len(), a.nrows() * cols, "c holds a.nrows() rows of b.ncols()");
    if cols == 0 {
        return;
    }
    let part_rows = gemm_part_rows(&a, cols).max(1);
    let run = |(part, c): (usize, &mut [f32])| {
        let (first, n) = (part * part_rows, c.len() / cols);
        // SAFETY: `c` holds the part's `n` rows of `cols`, initialised (`beta = 1` reads them).
        unsafe { gemm_into(a.slice(s![first..first + n, ..]), b, 1.0, c.as_mut_ptr(), cols) };
    };
    #[cfg(not(target_arch = "wasm32"))]
    {
        use rayon::prelude::*;
        c.par_chunks_mut(part_rows * cols).enumerate().for_each(run);
    }
    #[cfg(target_arch = "wasm32")]
    c.chunks_mut(part_rows * cols).enumerate().for_each(run);
}

/// Rows of `c = a b` per GEMM call: one part per thread with OpenBLAS (which then runs on the
/// calling thread, see [`gemm_by_rows`]), the whole product for `matrixmultiply`.
fn gemm_part_rows(a: &ndarray::ArrayView2<f32>, cols: usize) -> usize {
    let rows = a.nrows();
    #[cfg(all(feature = "openblas", not(target_arch = "wasm32")))]
    {
        crate::blas::calling_thread_only();
        // Below ~1 MFLOP a part costs less than handing it to another thread.
        let threads = rayon::current_num_threads().min(rows.max(1)).min(1 + a.len() * cols / 500_000);
        rows.div_ceil(threads.max(1))
    }
    #[cfg(not(all(feature = "openblas", not(target_arch = "wasm32"))))]
    {
        let _ = cols;
        rows
    }
}

/// Batched matrix product `[b, h, m, k] x [b, h, k, n]` (attention's products; no broadcasting).
///
/// On burn-ndarray with f32 data, each `(b, h)` product runs as a GEMM on views of the inputs,
/// so transposed operands (`k^T`, `p^T`) are not copied, and the result is written in place:
/// burn-ndarray's own batched `matmul` copies both inputs and the output through reshapes.
pub fn matmul<B: Backend>(a: Tensor<B, 4>, b: Tensor<B, 4>) -> Tensor<B, 4> {
    train_node!(autodiff::matmul(&a, &b));
    match matmul_cpu_f32(&a, &b) {
        Some(c) => c,
        None => a.matmul(b),
    }
}

fn matmul_cpu_f32<B: Backend>(a: &Tensor<B, 4>, b: &Tensor<B, 4>) -> Option<Tensor<B, 4>> {
    use ndarray::{s, Ix4};
    let a = cpu_f32_any_layout(a.clone()).ok()?;
    let b = cpu_f32_any_layout(b.clone()).ok()?;
    let (a, b) = (a.view().into_dimensionality::<Ix4>().ok()?, b.view().into_dimensionality::<Ix4>().ok()?);
    let ([d0, d1, m, k], [e0, e1, k2, n]) = (a.dim().into(), b.dim().into());
    if (d0, d1, k) != (e0, e1, k2) {
        return None; // burn's own op broadcasts or reports the mismatch
    }
    #[cfg(feature = "openblas")]
    crate::blas::calling_thread_only(); // the blocks run in parallel instead
    // One `(b, h)` product per block.
    let product = |first: usize, [block]: [&mut [MaybeUninit<f32>]; 1]| {
        let index = first / m.max(1);
        let (i, j) = (index / d1, index % d1);
        // SAFETY: `block` holds the `m x n` result; `beta = 0` only writes it.
        unsafe { gemm_into(a.slice(s![i, j, .., ..]), b.slice(s![i, j, .., ..]), 0.0, block.as_mut_ptr().cast(), n) };
    };
    // SAFETY: each block is one whole product, which the GEMM writes.
    let [c] = unsafe { new_rows_uninit(d0 * d1 * m, [n], m, product) };
    Some(from_cpu_f32(SharedArray::from_shape_vec(vec![d0, d1, m, n], c).ok()?))
}

/// Part `part` of `x` `[batch, seq, parts * hidden]` (the fused projection has three: q, k, v)
/// split into attention heads: `[batch, heads, seq, hidden / heads]`.
///
/// On burn-ndarray with f32 data this is a strided view of `x`'s buffer, no copy: the products
/// ([`matmul`], [`matmul_merged`]) take any layout. burn's narrow and reshape copied each part,
/// and under autodiff the narrow's backward filled a zero tensor on one thread.
pub fn split_heads<B: Backend>(x: Tensor<B, 3>, parts: usize, part: usize, heads: usize) -> Tensor<B, 4> {
    use ndarray::{Axis, IxDyn};
    train_node!(autodiff::split_heads(&x, parts, part, heads));
    let [batch, seq, width] = x.dims();
    let head_dim = width / (parts * heads).max(1);
    let composed = |x: Tensor<B, 3>| {
        let hidden = heads * head_dim;
        x.narrow(2, part * hidden, hidden).reshape([batch, seq, heads, head_dim]).swap_dims(1, 2)
    };
    if parts * heads * head_dim != width || part >= parts {
        return composed(x); // burn's own ops report the mismatch
    }
    match cpu_f32_any_layout(x) {
        Ok(array) if array.is_standard_layout() => {
            let parted = array.into_shape_with_order(IxDyn(&[batch, seq, parts, heads, head_dim]));
            let parted = parted.expect("a standard-layout array of this length");
            from_cpu_f32(parted.index_axis_move(Axis(2), part).permuted_axes(IxDyn(&[0, 2, 1, 3])))
        }
        Ok(array) => composed(from_cpu_f32(array)),
        Err(x) => composed(x),
    }
}

/// Attention's products with their heads merged back: each `(a, b)` of `products`,
/// `[batch, heads, m, k] x [batch, heads, k, n]`, fills its own `heads * n` columns of the result
/// `[batch, m, products.len() * heads * n]`, head by head: the context from `(probs, v)`, and the
/// VJP's `[dq dk dv]` from three products.
///
/// On burn-ndarray with f32 data each `(batch, head)` product is one GEMM on views, written
/// straight into its columns; burn's swap, reshape and cat copied each result twice. Under
/// autodiff the whole merge is one node.
pub fn matmul_merged<B: Backend>(products: Vec<(Tensor<B, 4>, Tensor<B, 4>)>) -> Tensor<B, 3> {
    train_node!(autodiff::matmul_merged(&products));
    if let Some(merged) = matmul_merged_cpu_f32(&products) {
        return merged;
    }
    let merged = products.into_iter().map(|(a, b)| {
        let c = matmul(a, b);
        let [batch, heads, m, n] = c.dims();
        c.swap_dims(1, 2).reshape([batch, m, heads * n])
    });
    Tensor::cat(merged.collect(), 2)
}

fn matmul_merged_cpu_f32<B: Backend>(products: &[(Tensor<B, 4>, Tensor<B, 4>)]) -> Option<Tensor<B, 3>> {
    use ndarray::{s, ArrayView4, Ix4};
    let mut arrays = Vec::with_capacity(products.len());
    for (a, b) in products {
        arrays.push((cpu_f32_any_layout(a.clone()).ok()?, cpu_f32_any_layout(b.clone()).ok()?));
    }
    let mut views: Vec<(ArrayView4<f32>, ArrayView4<f32>)> = Vec::with_capacity(arrays.len());
    for (a, b) in &arrays {
        views.push((a.view().into_dimensionality::<Ix4>().ok()?, b.view().into_dimensionality::<Ix4>().ok()?));
    }
    let (first_a, first_b) = views.first()?;
    let ([batch, heads, m, _], n) = (<[usize; 4]>::from(first_a.dim()), first_b.dim().3);
    let fits = |(a, b): &(ArrayView4<f32>, ArrayView4<f32>)| {
        let ([d0, d1, dm, k], [e0, e1, k2, dn]) = (a.dim().into(), b.dim().into());
        (d0, d1, dm, e0, e1, dn) == (batch, heads, m, batch, heads, n) && k == k2
    };
    if !views.iter().all(fits) {
        return None; // burn's own ops broadcast or report the mismatch
    }
    #[cfg(feature = "openblas")]
    crate::blas::calling_thread_only(); // the blocks run in parallel instead
    // One batch item per block, `[m, part * heads + head, n]`; each product fills its columns.
    let columns = views.len() * heads;
    let width = columns * n;
    let products = |first: usize, [item]: [&mut [MaybeUninit<f32>]; 1]| {
        let i = first / m.max(1);
        for column in 0..columns {
            let (a, b) = &views[column / heads];
            let j = column % heads;
            // SAFETY: the `m x n` block at column `column * n` of the item's `m` rows of `width`;
            // `beta = 0` only writes it.
            let block = unsafe { item.as_mut_ptr().add(column * n) }.cast();
            unsafe { gemm_into(a.slice(s![i, j, .., ..]), b.slice(s![i, j, .., ..]), 0.0, block, width) };
        }
    };
    // SAFETY: the item's columns are covered by its products, each written whole by its GEMM.
    let [out] = unsafe { new_rows_uninit(batch * m, [width], m, products) };
    Some(from_cpu_f32(SharedArray::from_shape_vec(vec![batch, m, columns * n], out).ok()?))
}

/// Self-attention's core at inference, `softmax(q k^T * scale + bias) v`, with the heads merged
/// back: `q`, `k`, `v` `[batch, heads, seq, head_dim]` and the padding bias `[batch, 1, 1, seq]`
/// give the context `[batch, seq, heads * head_dim]` and, when `keep_probs`, the probabilities
/// `[batch, heads, seq, seq]` (a VJP reads them).
///
/// One pass per batch item: each head's scores become probabilities and then context while they
/// are in cache. As [`matmul`], [`attention_probs`] and [`matmul_merged`] (what every other case
/// runs), the scores went through memory three times. `None` where the data is not
/// burn-ndarray's f32 (other backends, autodiff): the caller composes those kernels.
pub fn attention<B: Backend>(
    q: &Tensor<B, 4>,
    k: &Tensor<B, 4>,
    v: &Tensor<B, 4>,
    bias: &Tensor<B, 4>,
    scale: f64,
    keep_probs: bool,
) -> Option<(Tensor<B, 3>, Option<Tensor<B, 4>>)> {
    use ndarray::s;
    let [q, k, v] = [q, k, v].map(|t| cpu_f32_any_layout(t.clone()).ok());
    let (q, k, v) = (q?, k?, v?);
    let (q, k, v) = (view4(&q)?, view4(&k)?, view4(&v)?);
    let [batch, heads, seq, head_dim] = <[usize; 4]>::from(q.dim());
    if k.dim() != q.dim() || v.dim() != q.dim() {
        return None;
    }
    let bias = cpu_f32(bias.clone()).ok().filter(|b| b.len() == batch * seq)?;
    let bias = bias.as_slice()?;
    #[cfg(feature = "openblas")]
    crate::blas::calling_thread_only(); // the items run in parallel instead
    let (hidden, square, scale) = (heads * head_dim, seq * seq, scale as f32);
    // Batch item `i`: every head into `context` ([seq, hidden]), the probabilities into `probs`
    // ([heads, seq, seq]), which without `keep_probs` is scratch reused head after head.
    let item = |i: usize, context: &mut [MaybeUninit<f32>], probs: &mut [MaybeUninit<f32>]| {
        let item_bias = &bias[i * seq..][..seq];
        for j in 0..heads {
            let p = &mut probs[if keep_probs { j * square } else { 0 }..][..square];
            let (qh, kh, vh) = (q.slice(s![i, j, .., ..]), k.slice(s![i, j, .., ..]), v.slice(s![i, j, .., ..]));
            // scores = q k^T
            // SAFETY: `p` holds the `seq x seq` scores; `beta = 0` only writes them.
            unsafe { gemm_into(qh, kh.t(), 0.0, p.as_mut_ptr().cast(), seq) };
            // SAFETY: just written whole.
            let p = unsafe { &mut *(p as *mut [MaybeUninit<f32>] as *mut [f32]) };
            p.chunks_exact_mut(seq.max(1)).for_each(|row| attention_probs_row(row, item_bias, scale));
            // context[:, head j] = probs v
            let p = ndarray::ArrayView2::from_shape((seq, seq), p).expect("seq x seq");
            // SAFETY: head `j`'s `seq x head_dim` columns of the item's rows of `hidden`.
            unsafe { gemm_into(p, vh, 0.0, context.as_mut_ptr().add(j * head_dim).cast(), hidden) };
        }
    };
    let (context, probs) = if keep_probs {
        // SAFETY: `item` writes every head's columns of the context and every head's scores.
        let [context, probs] = unsafe { new_rows_uninit(batch, [seq * hidden, heads * square], 1, |i, [c, p]| item(i, c, p)) };
        (context, Some(probs))
    } else {
        let run = |i: usize, [c]: [&mut [MaybeUninit<f32>]; 1]| item(i, c, &mut vec![MaybeUninit::uninit(); square]);
        // SAFETY: `item` writes every head's columns of the context.
        let [context] = unsafe { new_rows_uninit(batch, [seq * hidden], 1, run) };
        (context, None)
    };
    let context = from_cpu_f32(SharedArray::from_shape_vec(vec![batch, seq, hidden], context).ok()?);
    let probs = match probs {
        Some(p) => Some(from_cpu_f32(SharedArray::from_shape_vec(vec![batch, heads, seq, seq], p).ok()?)),
        None => None,
    };
    Some((context, probs))
}

/// [`attention`]'s input-gradients at inference, `[dq dk dv]` `[batch, seq, 3 * heads * head_dim]`
/// (the fused projection's layout) from `dcontext` `[batch, heads, seq, head_dim]` and the
/// forward's `q`, `k`, `v` and probabilities (no dropout): per head,
/// `dscores = softmax_backward(dcontext v^T, probs) * scale`, `dq = dscores k`,
/// `dk = dscores^T q`, `dv = probs^T dcontext`.
///
/// One pass per batch item with each head's `dscores` in cache, where the composed kernels wrote
/// `dprobs` and `dscores` to memory and read them back three times. `None` where the data is not
/// burn-ndarray's f32: the caller composes the kernels.
pub fn attention_backward<B: Backend>(
    dcontext: &Tensor<B, 4>,
    q: &Tensor<B, 4>,
    k: &Tensor<B, 4>,
    v: &Tensor<B, 4>,
    probs: &Tensor<B, 4>,
    scale: f64,
) -> Option<Tensor<B, 3>> {
    use ndarray::s;
    let [dcontext, q, k, v] = [dcontext, q, k, v].map(|t| cpu_f32_any_layout(t.clone()).ok());
    let (dcontext, q, k, v) = (dcontext?, q?, k?, v?);
    let (dcontext, q, k, v) = (view4(&dcontext)?, view4(&q)?, view4(&k)?, view4(&v)?);
    let [batch, heads, seq, head_dim] = <[usize; 4]>::from(q.dim());
    if [dcontext.dim(), k.dim(), v.dim()].iter().any(|d| *d != q.dim()) {
        return None;
    }
    let probs = cpu_f32(probs.clone()).ok().filter(|p| p.len() == batch * heads * seq * seq)?;
    let probs = probs.as_slice()?;
    #[cfg(feature = "openblas")]
    crate::blas::calling_thread_only(); // the items run in parallel instead
    let (hidden, square, scale) = (heads * head_dim, seq * seq, scale as f32);
    let width = 3 * hidden;
    let item = |i: usize, [out]: [&mut [MaybeUninit<f32>]; 1]| {
        let mut dscores = vec![0.0f32; square];
        for j in 0..heads {
            let p = &probs[(i * heads + j) * square..][..square];
            let (dc, qh, kh, vh) =
                (dcontext.slice(s![i, j, .., ..]), q.slice(s![i, j, .., ..]), k.slice(s![i, j, .., ..]), v.slice(s![i, j, .., ..]));
            // dprobs = dcontext v^T, then dscores in place.
            // SAFETY: `dscores` holds `seq x seq`.
            unsafe { gemm_into(dc, vh.t(), 0.0, dscores.as_mut_ptr(), seq) };
            for (d, p) in dscores.chunks_exact_mut(seq.max(1)).zip(p.chunks_exact(seq.max(1))) {
                softmax_backward_row(d, p, scale);
            }
            let ds = ndarray::ArrayView2::from_shape((seq, seq), &dscores[..]).expect("seq x seq");
            let p = ndarray::ArrayView2::from_shape((seq, seq), p).expect("seq x seq");
            // SAFETY: head `j`'s columns of part 0 (dq), 1 (dk) and 2 (dv) of the item's rows.
            unsafe {
                let out = out.as_mut_ptr().cast::<f32>();
                let column = |part: usize| out.add(part * hidden + j * head_dim);
                gemm_into(ds, kh, 0.0, column(0), width);
                gemm_into(ds.t(), qh, 0.0, column(1), width);
                gemm_into(p.t(), dc, 0.0, column(2), width);
            }
        }
    };
    // SAFETY: `item` writes every head's columns of all three parts.
    let [dqkv] = unsafe { new_rows_uninit(batch, [seq * width], 1, item) };
    Some(from_cpu_f32(SharedArray::from_shape_vec(vec![batch, seq, width], dqkv).ok()?))
}

/// `x^T g` summed over all rows: the weight gradient of [`linear`], `[in, out]` from `x`
/// `[.., in]` and `g` `[.., out]`. One GEMM on a transposed view on burn-ndarray with f32 data.
pub fn weight_gradient<B: Backend, const D: usize>(x: Tensor<B, D>, g: Tensor<B, D>) -> Tensor<B, 2> {
    let (features, out) = (x.dims()[D - 1], g.dims()[D - 1]);
    let composed = |x: Tensor<B, D>, g: Tensor<B, D>| x.reshape([-1, features as i32]).transpose().matmul(g.reshape([-1, out as i32]));
    let (x_f32, g_f32) = match (cpu_f32(x.clone()), cpu_f32(g.clone())) {
        (Ok(x), Ok(g)) => (x, g),
        _ => return composed(x, g),
    };
    let rows = x_f32.len() / features.max(1);
    let views = (
        x_f32.view().into_shape_with_order((rows, features)),
        g_f32.view().into_shape_with_order((g_f32.len() / out.max(1), out)),
    );
    let (Ok(xv), Ok(gv)) = views else { return composed(x, g) };
    if gv.nrows() != rows {
        return composed(x, g); // burn's own op reports the mismatch
    }
    let w = gemm_by_rows(xv.t(), gv, None);
    from_cpu_f32(w.into_dyn().into_shared())
}

/// Attention probabilities: softmax over keys of `scores * scale + bias`, with `scores`
/// `[batch, heads, queries, keys]` and the padding bias `[batch, 1, 1, keys]`. Padded keys
/// (bias -1e9) come out as exactly 0.
pub fn attention_probs<B: Backend>(scores: Tensor<B, 4>, scale: f64, bias: &Tensor<B, 4>) -> Tensor<B, 4> {
    train_node!(autodiff::attention_probs(&scores, scale, bias));
    let composed = |scores: Tensor<B, 4>| softmax(scores.mul_scalar(scale) + bias.clone(), 3);
    let [batch, _, _, keys] = scores.dims();
    let Some(bias_f32) = cpu_f32(bias.clone()).ok().filter(|b| b.len() == batch * keys) else {
        return composed(scores);
    };
    let bias_f32 = bias_f32.as_slice().expect("standard layout");
    let rows_per_item = scores.shape().num_elements() / (batch * keys).max(1);
    let scale_f32 = scale as f32;
    let kernel = |first_row: usize, out: &mut [f32], _: [&[f32]; 0]| {
        for (i, row) in out.chunks_mut(keys).enumerate() {
            let item_bias = &bias_f32[(first_row + i) / rows_per_item * keys..][..keys];
            attention_probs_row(row, item_bias, scale_f32);
        }
    };
    rows_in_place(scores, [], kernel).unwrap_or_else(composed)
}

/// One row of [`attention_probs`] in place: `softmax(scores * scale + bias)` over the keys.
#[inline]
fn attention_probs_row(row: &mut [f32], bias: &[f32], scale: f32) {
    row.iter_mut().zip(bias).for_each(|(v, b)| *v = *v * scale + b);
    softmax_row(row);
}

/// [`gelu`] on burn-ndarray with f32 data: one pass reads `x` and writes both outputs. (As two
/// kernels, each copied `x` first, since the caller keeps `x` for the backward.)
fn gelu_cpu_f32<B: Backend, const D: usize>(x: &Tensor<B, D>) -> Option<(Tensor<B, D>, Tensor<B, D>)> {
    let x = cpu_f32(x.clone()).ok()?;
    let xs = x.as_slice()?;
    const BLOCK: usize = 1 << 14;
    // SAFETY: `gelu_and_cdf` writes every element of both blocks, one per element of `x`'s slice
    // of the same length.
    let [y, cdf] = unsafe { new_rows_uninit(xs.len(), [1, 1], BLOCK, |first, [y, c]| gelu_and_cdf(&xs[first..first + y.len()], y, c)) };
    let shaped = |v: Vec<f32>| ArrayD::from_shape_vec(x.shape(), v).ok().map(|a| from_cpu_f32(a.into_shared()));
    Some((shaped(y)?, shaped(cdf)?))
}

/// Dropout with a keep mask from [`dropout_keep`]: `x * keep`, one pass over `x`'s buffer on the
/// CPU. Its backward is the same product.
pub fn times_keep<B: Backend, const D: usize>(x: Tensor<B, D>, keep: &Tensor<B, D>) -> Tensor<B, D> {
    #[cfg(not(target_arch = "wasm32"))]
    let x = match autodiff::times_keep(x, keep) {
        Ok(y) => return y,
        Err(x) => x,
    };
    if x.dims() != keep.dims() {
        return x * keep.clone(); // burn's own op broadcasts or reports the mismatch
    }
    let kernel = |_: usize, out: &mut [f32], [keep]: [&[f32]; 1]| out.iter_mut().zip(keep).for_each(|(o, k)| *o *= k);
    rows_in_place(x, [keep], kernel).unwrap_or_else(|x| x * keep.clone())
}

/// A sub-block's output joining the residual stream: `x * keep + residual`, with `keep` the
/// sub-block's dropout mask (`None` when not training). One pass over `x`'s buffer on the CPU.
pub fn add_residual<B: Backend, const D: usize>(x: Tensor<B, D>, keep: Option<&Tensor<B, D>>, residual: Tensor<B, D>) -> Tensor<B, D> {
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
        None => rows_in_place(x, [&residual], |_, out, [r]| out.iter_mut().zip(r).for_each(|(o, r)| *o += r)),
    };
    done.unwrap_or_else(|x| composed(x, residual))
}

/// IM-BERT's residual `(z - h - phi) * mask` in one pass over `phi`'s buffer, with `mask`
/// `[batch, seq, 1]` (1 on real tokens).
pub fn masked_residual<B: Backend>(z: &Tensor<B, 3>, h: &Tensor<B, 3>, phi: Tensor<B, 3>, mask: &Tensor<B, 3>) -> Tensor<B, 3> {
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
    rows_in_place(phi, [z, h, mask], kernel).unwrap_or_else(|phi| (z.clone() - h.clone() - phi) * mask.clone())
}

/// A gradient-descent step `z - step * (r - jtr)` in one pass over `jtr`'s buffer.
pub fn descent_step<B: Backend>(z: &Tensor<B, 3>, r: &Tensor<B, 3>, jtr: Tensor<B, 3>, step: f64) -> Tensor<B, 3> {
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
    rows_in_place(jtr, [z, r], kernel).unwrap_or_else(|jtr| z.clone() - (r.clone() - jtr).mul_scalar(step))
}

/// Softmax input-gradient, scaled: `scale * p * (dp - sum(dp * p))` along the last dimension
/// (`scale` is the attention's `1 / sqrt(head_dim)`, folded in here instead of a pass of its own).
pub fn softmax_backward<B: Backend, const D: usize>(dprobs: Tensor<B, D>, probs: &Tensor<B, D>, scale: f64) -> Tensor<B, D> {
    train_node!(autodiff::softmax_backward(&dprobs, probs, scale));
    let width = probs.dims()[D - 1];
    let scale_f32 = scale as f32;
    let kernel = |_: usize, d: &mut [f32], [p]: [&[f32]; 1]| {
        d.chunks_mut(width).zip(p.chunks(width)).for_each(|(d, p)| softmax_backward_row(d, p, scale_f32));
    };
    rows_in_place(dprobs, [probs], kernel).unwrap_or_else(|dprobs| {
        let dot = (dprobs.clone() * probs.clone()).sum_dim(D - 1);
        (probs.clone() * (dprobs - dot)).mul_scalar(scale)
    })
}

/// Input-gradient of [`normal_cdf`]: `g phi(x)`, with `phi` the standard normal density.
pub fn normal_cdf_backward<B: Backend, const D: usize>(g: Tensor<B, D>, x: &Tensor<B, D>) -> Tensor<B, D> {
    let kernel = |_: usize, d: &mut [f32], [x]: [&[f32]; 1]| times_pdf(d, x);
    rows_in_place(g, [x], kernel).unwrap_or_else(|g| g * normal_pdf(x))
}

/// Input-gradient of the exact GELU `x Phi(x)`: `dout * (Phi(x) + x phi(x))`, with `Phi(x)` kept
/// from the forward.
pub fn gelu_backward<B: Backend, const D: usize>(dout: Tensor<B, D>, x: &Tensor<B, D>, cdf: &Tensor<B, D>) -> Tensor<B, D> {
    train_node!(autodiff::gelu_backward(&dout, x, cdf));
    let kernel = |_: usize, d: &mut [f32], [x, c]: [&[f32]; 2]| times_gelu_derivative(d, x, c);
    rows_in_place(dout, [x, cdf], kernel).unwrap_or_else(|dout| {
        dout * (cdf.clone() + x.clone() * normal_pdf(x))
    })
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

/// [`layer_norm`]'s output alone, for a forward that keeps nothing for a backward: on the CPU
/// one pass in place over `x`'s buffer.
pub fn layer_norm_output<B: Backend, const D: usize>(x: Tensor<B, D>, gamma: Tensor<B, 1>, beta: Option<Tensor<B, 1>>, eps: f64) -> Tensor<B, D> {
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
    let Some((g, b)) = params.filter(|(g, b)| g.len() == width && b.as_ref().is_none_or(|b| b.len() == width)) else {
        return layer_norm(x, gamma, beta, eps).0;
    };
    let (g, b) = (g.as_slice().expect("standard layout"), b.as_ref().map(|b| b.as_slice().expect("standard layout")));
    let kernel = |_: usize, out: &mut [f32], _: [&[f32]; 0]| out.chunks_mut(width).for_each(|row| layer_norm_row_in_place(row, g, b, eps));
    rows_in_place(x, [], kernel).unwrap_or_else(|x| layer_norm(x, gamma, beta, eps).0)
}

/// [`layer_norm`] in one pass per row; `None` off burn-ndarray with f32 data.
#[allow(clippy::type_complexity)]
fn layer_norm_cpu_f32<B: Backend, const D: usize>(
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

/// Defines `fn $name` three times over: as written, compiled for AVX2 + FMA, and compiled for
/// AVX-512, and runs the widest the CPU has. The workspace builds for baseline x86-64 (SSE2, four
/// lanes), so without this the per-element loops below would use a quarter of an AVX-512
/// register, and calls to libm's `expf` not at all. Helpers the body calls must be
/// `#[inline(always)]` to be compiled into each.
macro_rules! vectorised {
    ($(#[$meta:meta])* $vis:vis fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block) => {
        $(#[$meta])*
        $vis fn $name($($arg: $ty),*) $(-> $ret)? {
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("avx512f") && std::arch::is_x86_feature_detected!("avx512vl") {
                #[target_feature(enable = "avx512f,avx512vl,avx2,fma")]
                fn widest($($arg: $ty),*) $(-> $ret)? $body
                // SAFETY: the CPU has the features `widest` was compiled for (checked above).
                return unsafe { widest($($arg),*) };
            }
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
                #[target_feature(enable = "avx2,fma")]
                fn wide($($arg: $ty),*) $(-> $ret)? $body
                // SAFETY: the CPU has the features `wide` was compiled for (checked above).
                return unsafe { wide($($arg),*) };
            }
            $body
        }
    };
}

/// `e^x` in f32, within 2 ulp of the exact value, as straight-line code the compiler vectorises
/// (libm's `expf` is a call per element). Below -87.3 it is 0 (f32's normal range ends there),
/// above 88 it is `e^88`, and NaN stays NaN. Range reduction `x = n ln 2 + r` with `|r| <= ln 2 / 2`, then Cephes'
/// degree-5 minimax polynomial for `e^r`, then `2^n` built in the exponent bits.
#[inline(always)]
fn exp_f32(x: f32) -> f32 {
    const ROUND: f32 = 12_582_912.0; // 1.5 * 2^23: adding it rounds to an integer
    let clamped = x.clamp(-88.0, 88.0); // NaN stays NaN
    let shifted = clamped * std::f32::consts::LOG2_E + ROUND;
    let n = shifted - ROUND;
    // ln 2 in two parts, so `n * LN2_HI` is exact.
    let r = clamped - n * 0.693_359_4 - n * -2.121_944_4e-4;
    let p = 1.987_569_1e-4;
    let p = p * r + 1.398_199_9e-3;
    let p = p * r + 8.333_452e-3;
    let p = p * r + 4.166_579_6e-2;
    let p = p * r + 0.166_666_65;
    let p = p * r + 0.5;
    let e_r = p * (r * r) + r + 1.0;
    let two_n = f32::from_bits(shifted.to_bits().wrapping_sub(ROUND.to_bits()).wrapping_add(127) << 23);
    if x < -87.3 { 0.0 } else { e_r * two_n }
}

/// `f(acc, x)` folded over `x` in 8 independent lanes, then the lanes: a sum or max the compiler
/// can vectorise (a single accumulator makes each step wait on the last).
#[inline(always)]
fn fold_lanes(x: &[f32], init: f32, f: impl Fn(f32, f32) -> f32) -> f32 {
    let mut lanes = [init; 8];
    let mut chunks = x.chunks_exact(8);
    for chunk in &mut chunks {
        for (lane, &v) in lanes.iter_mut().zip(chunk) {
            *lane = f(*lane, v);
        }
    }
    let tail = chunks.remainder().iter().fold(init, |a, &v| f(a, v));
    lanes.into_iter().fold(tail, &f)
}

/// `Phi(x)` with `erf` from Abramowitz & Stegun 7.1.26 (error below 1.5e-7): one `exp` and no
/// branches, and it vectorises, where `libm::erff` is a call per element. In f32 the result is within 4e-7 of `Phi`
/// (test below), near f32's resolution of `Phi` close to 1.
#[inline(always)]
fn cdf_f32(x: f32) -> f32 {
    let z = (x * std::f32::consts::FRAC_1_SQRT_2).abs();
    let t = 1.0 / (1.0 + 0.327_591_1 * z);
    let poly = t * (0.254_829_6 + t * (-0.284_496_74 + t * (1.421_413_7 + t * (-1.453_152 + t * 1.061_405_4))));
    let erf = (1.0 - poly * exp_f32(-z * z)).copysign(x);
    0.5 * (1.0 + erf)
}

/// The standard normal density `phi(x) = exp(-x^2 / 2) / sqrt(2 pi)`.
#[inline(always)]
fn pdf_f32(x: f32) -> f32 {
    const INV_SQRT_2PI: f32 = 0.398_942_3;
    exp_f32(-0.5 * x * x) * INV_SQRT_2PI
}

/// `phi(x)` from burn's ops, for the composed paths. (`x * x`, not powi: the CPU backend computes
/// powers with a scalar powf per element.)
fn normal_pdf<B: Backend, const D: usize>(x: &Tensor<B, D>) -> Tensor<B, D> {
    (x.clone() * x.clone()).mul_scalar(-0.5).exp().mul_scalar(1.0 / (2.0 * std::f64::consts::PI).sqrt())
}

vectorised! {
    /// Softmax of one row in place. Max-subtracted, as burn's: padded keys carry -1e9 and must
    /// come out as exactly 0.
    pub(crate) fn softmax_row(row: &mut [f32]) {
        let max = fold_lanes(row, f32::NEG_INFINITY, f32::max);
        row.iter_mut().for_each(|v| *v = exp_f32(*v - max));
        let inv = 1.0 / fold_lanes(row, 0.0, |a, b| a + b);
        row.iter_mut().for_each(|v| *v *= inv);
    }
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

/// `sum f(x_i)` in f64 over 8 independent lanes.
#[inline(always)]
fn sum_f64_lanes(x: &[f32], f: impl Fn(f64) -> f64) -> f64 {
    let mut lanes = [0.0f64; 8];
    let mut chunks = x.chunks_exact(8);
    for chunk in &mut chunks {
        for (lane, &v) in lanes.iter_mut().zip(chunk) {
            *lane += f(v as f64);
        }
    }
    lanes.into_iter().sum::<f64>() + chunks.remainder().iter().map(|&v| f(v as f64)).sum::<f64>()
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
    fn layer_norm_row(x: &[f32], y: &mut [MaybeUninit<f32>], x_hat: &mut [MaybeUninit<f32>], gamma: &[f32], beta: Option<&[f32]>, eps: f64) -> f32 {
        let (mean, rstd) = mean_rstd(x, eps);
        let beta = beta.unwrap_or(&[]).iter().copied().chain(std::iter::repeat(0.0));
        for ((((&v, y), h), &g), b) in x.iter().zip(y.iter_mut()).zip(x_hat.iter_mut()).zip(gamma).zip(beta) {
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

vectorised! {
    /// One row of [`softmax_backward`], in place over `d`.
    fn softmax_backward_row(d: &mut [f32], p: &[f32], scale: f32) {
        let mut products = [0.0f32; 8];
        let (mut d_chunks, mut p_chunks) = (d.chunks_exact(8), p.chunks_exact(8));
        for (dc, pc) in (&mut d_chunks).zip(&mut p_chunks) {
            for ((acc, a), b) in products.iter_mut().zip(dc).zip(pc) {
                *acc += a * b;
            }
        }
        let tail: f32 = d_chunks.remainder().iter().zip(p_chunks.remainder()).map(|(a, b)| a * b).sum();
        let dot = products.into_iter().fold(tail, |a, b| a + b);
        d.iter_mut().zip(p).for_each(|(d, p)| *d = scale * p * (*d - dot));
    }
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
    let inputs: [&[f32]; N] = std::array::from_fn(|i| arrays[i].as_slice().expect("standard layout"));
    let block_rows = (1usize << 14).div_ceil(width.max(1));
    let run = |(block, chunk): (usize, &mut [f32])| {
        let first = block * block_rows;
        let n = chunk.len() / width.max(1);
        kernel(first, chunk, inputs.map(|x| {
            let w = x.len() / rows;
            &x[first * w..(first + n) * w]
        }));
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
        kernel(first, blocks.map(|block| {
            block.fill(MaybeUninit::new(0.0));
            // SAFETY: every element was just initialised; MaybeUninit<f32> has f32's layout.
            unsafe { &mut *(block as *mut [MaybeUninit<f32>] as *mut [f32]) }
        }))
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
        let mut parts: Vec<(usize, [&mut [MaybeUninit<f32>]; K])> = Vec::with_capacity(rows.div_ceil(block_rows));
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

/// `c = a b + beta c` for `[m, k] x [k, n]` views of any strides, with `c` row-major, its rows
/// `ldc` elements apart. With `beta = 0`, `c` is only written, so it may be uninitialised (BLAS
/// and `matrixmultiply` both promise not to read it). OpenBLAS runs it when both operands have
/// a BLAS layout (one unit stride), `matrixmultiply` otherwise and in builds without OpenBLAS.
///
/// # Safety
/// `c` must be valid for writes (and reads, if `beta != 0`) of `m` rows of `n` elements, `ldc`
/// apart, and not alias `a` or `b`.
unsafe fn gemm_into(a: ndarray::ArrayView2<f32>, b: ndarray::ArrayView2<f32>, beta: f32, c: *mut f32, ldc: usize) {
    let ((m, k), n) = (a.dim(), b.ncols());
    assert_eq!(k, b.nrows(), "inner dimensions");
    assert!(n <= ldc || m <= 1, "a row of c fits in ldc");
    if m == 0 || n == 0 {
        return;
    }
    #[cfg(all(feature = "openblas", not(target_arch = "wasm32")))]
    if let (Some(a_layout), Some(b_layout)) = (blas_layout(&a), blas_layout(&b)) {
        if k > 0 {
            // SAFETY: the layouts describe the views' memory; the caller vouches for `c`.
            unsafe { crate::blas::sgemm(a_layout, b_layout, [m, n, k], a.as_ptr(), b.as_ptr(), beta, c, ldc) };
            return;
        }
    }
    let ([rsa, csa], [rsb, csb]) = (<[isize; 2]>::try_from(a.strides()).unwrap_or_default(), <[isize; 2]>::try_from(b.strides()).unwrap_or_default());
    // SAFETY: the strides describe the views' memory; the caller vouches for `c`.
    unsafe { matrixmultiply::sgemm(m, k, n, 1.0, a.as_ptr(), rsa, csa, b.as_ptr(), rsb, csb, beta, c, ldc as isize, 1) };
}

/// How a BLAS reads a view: `(transposed, leading dimension)`, or `None` when neither stride is
/// 1 (or a stride is negative).
#[cfg(all(feature = "openblas", not(target_arch = "wasm32")))]
fn blas_layout(x: &ndarray::ArrayView2<f32>) -> Option<crate::blas::Layout> {
    let (rows, cols) = x.dim();
    let [s0, s1] = <[isize; 2]>::try_from(x.strides()).ok()?;
    let (s0, s1) = (usize::try_from(s0).ok()?, usize::try_from(s1).ok()?);
    if (s1 == 1 || cols == 1) && s0 >= cols.max(1) {
        Some(crate::blas::Layout { transposed: false, leading: s0 })
    } else if (s0 == 1 || rows == 1) && s1 >= rows.max(1) {
        Some(crate::blas::Layout { transposed: true, leading: s1 })
    } else {
        None
    }
}

/// AdamW's settings at one optimizer step, for [`adamw_update`].
#[derive(Clone, Copy, Debug)]
pub struct AdamWStep {
    pub lr: f64,
    pub beta_1: f32,
    pub beta_2: f32,
    pub epsilon: f32,
    /// Decoupled weight decay.
    pub weight_decay: f32,
    /// Steps taken including this one (1 at the first), for the bias corrections.
    pub time: usize,
}

/// The tensors of one parameter's AdamW update: the parameter, its gradient and the moments
/// (`None` before the first step, i.e. zero).
pub struct AdamWTensors<B: Backend, const D: usize> {
    pub param: Tensor<B, D>,
    pub grad: Tensor<B, D>,
    pub moments: Option<(Tensor<B, D>, Tensor<B, D>)>,
}

/// One AdamW update as burn's `AdamW` computes it, returning `[param, moment_1, moment_2]`
/// after the step: `m = b1 m + (1 - b1) g`, `v = b2 v + (1 - b2) g^2`,
/// `param = param (1 - lr wd) - lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)`.
///
/// On burn-ndarray with f32 data this is one pass over the four arrays, split over threads and
/// written in place, with burn's arithmetic element by element (so the results are equal bit for
/// bit). burn's optimizer makes about fifteen passes, one per op. Elsewhere the tensors come back untouched as the
/// error, for burn's own optimizer.
pub fn adamw_update<B: Backend, const D: usize>(
    step: &AdamWStep,
    tensors: AdamWTensors<B, D>,
) -> Result<[Tensor<B, D>; 3], AdamWTensors<B, D>> {
    let AdamWTensors { param, grad, moments } = tensors;
    let mut param = match cpu_f32(param) {
        Ok(p) => p,
        Err(param) => return Err(AdamWTensors { param, grad, moments }),
    };
    let back = |param, grad, moments| Err(AdamWTensors { param: from_cpu_f32(param), grad, moments });
    let grad = match cpu_f32(grad) {
        Ok(g) if g.shape() == param.shape() => g,
        Ok(g) => return back(param, from_cpu_f32(g), moments),
        Err(grad) => return back(param, grad, moments),
    };
    let (mut m, mut v) = match moments {
        None => (ArrayD::zeros(param.raw_dim()).into_shared(), ArrayD::zeros(param.raw_dim()).into_shared()),
        Some((m, v)) => match (cpu_f32(m), cpu_f32(v)) {
            (Ok(m), Ok(v)) if m.shape() == param.shape() && v.shape() == param.shape() => (m, v),
            (m, v) => {
                let restore = |a: Result<SharedArray<f32>, Tensor<B, D>>| a.map_or_else(|t| t, from_cpu_f32);
                return back(param, from_cpu_f32(grad), Some((restore(m), restore(v))));
            }
        },
    };
    let AdamWStep { lr, beta_1, beta_2, epsilon, weight_decay, time } = *step;
    let (factor_1, factor_2) = (1.0 - beta_1, 1.0 - beta_2);
    let time = time.min(i32::MAX as usize) as i32;
    let (correction_1, correction_2) = (1.0 - beta_1.powi(time), 1.0 - beta_2.powi(time));
    let decay_rate = lr * weight_decay as f64;
    let (keep, lr) = ((1.0 - decay_rate) as f32, lr as f32);
    let g = grad.as_slice().expect("standard layout");
    let slices = (
        param.as_slice_mut().expect("standard layout"),
        m.as_slice_mut().expect("standard layout"),
        v.as_slice_mut().expect("standard layout"),
    );
    // The same operations in the same order as burn's optimizer, element by element.
    let update = |(p, m, v, g): (&mut [f32], &mut [f32], &mut [f32], &[f32])| {
        for i in 0..p.len() {
            m[i] = m[i] * beta_1 + g[i] * factor_1;
            v[i] = v[i] * beta_2 + (g[i] * g[i]) * factor_2;
            let delta = (m[i] / correction_1) / ((v[i] / correction_2).sqrt() + epsilon);
            let decayed = if decay_rate == 0.0 { p[i] } else { p[i] * keep };
            p[i] = decayed - delta * lr;
        }
    };
    const BLOCK: usize = 1 << 15;
    let blocks = slices.0.chunks_mut(BLOCK).zip(slices.1.chunks_mut(BLOCK)).zip(slices.2.chunks_mut(BLOCK)).zip(g.chunks(BLOCK));
    #[cfg(not(target_arch = "wasm32"))]
    {
        use rayon::prelude::*;
        let blocks: Vec<_> = blocks.map(|(((p, m), v), g)| (p, m, v, g)).collect();
        blocks.into_par_iter().for_each(update);
    }
    #[cfg(target_arch = "wasm32")]
    blocks.map(|(((p, m), v), g)| (p, m, v, g)).for_each(update);
    Ok([from_cpu_f32(param), from_cpu_f32(m), from_cpu_f32(v)])
}

/// `x`'s f32 array in standard (row-major, contiguous) layout when `B` is burn-ndarray holding
/// f32; otherwise `x` itself as the error.
fn cpu_f32<B: Backend, const D: usize>(x: Tensor<B, D>) -> Result<SharedArray<f32>, Tensor<B, D>> {
    let array = cpu_f32_any_layout(x)?;
    Ok(if array.is_standard_layout() { array } else { array.as_standard_layout().into_owned().into_shared() })
}

/// A 4-D view of an array that should be one.
fn view4(a: &SharedArray<f32>) -> Option<ndarray::ArrayView4<'_, f32>> {
    a.view().into_dimensionality::<ndarray::Ix4>().ok()
}

/// [`cpu_f32`] without the copy to standard layout: a transposed view stays one.
fn cpu_f32_any_layout<B: Backend, const D: usize>(x: Tensor<B, D>) -> Result<SharedArray<f32>, Tensor<B, D>> {
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

/// The inverse of [`cpu_f32`]; only called where `B` was found to be burn-ndarray.
fn from_cpu_f32<B: Backend, const D: usize>(array: SharedArray<f32>) -> Tensor<B, D> {
    from_any(Box::new(NdArrayTensor::from(array)))
}

/// The box always holds `B`'s own primitive (what [`cpu_f32`] took out, or burn-ndarray's after
/// `B` was found to be burn-ndarray).
fn from_any<B: Backend, const D: usize>(boxed: Box<dyn Any>) -> Tensor<B, D> {
    let primitive = boxed.downcast::<B::FloatTensorPrimitive>().expect("the backend's own primitive");
    Tensor::from_primitive(TensorPrimitive::Float(*primitive))
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

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::{Autodiff, NdArray};
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
        let _ = burn::tensor::set_default_dtypes::<NdArray<f64>>(&Default::default(), DType::F64, DType::I64);
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
        a.iter().zip(b).fold(0.0, |m, (x, y)| if (x - y).is_nan() { f32::NAN } else { m.max((x - y).abs()) })
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
        let both_dropped = a.chunks(2).filter(|p| p[0] == 0.0 && p[1] == 0.0).count() as f64 / (a.len() / 2) as f64;
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
                assert!((o as f64 - exact).abs() <= 1e-6 * exact.max(1e-3), "width {width}: {o} vs {exact}");
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
    fn tensor_of<B: Backend, const D: usize>(values: Vec<f32>, shape: [usize; D], dtype: DType) -> Tensor<B, D> {
        let _ = f32_tensor::<Cpu, 1>(vec![0.0], [1]); // pins the default dtype first, see there
        Tensor::from_data(TensorData::new(values, shape), (&Default::default(), dtype))
    }

    /// Input `i` of a check: noise of `shape`, offset by `i` so that the inputs differ.
    fn input_values(shape: &[usize], i: usize, scale: f32) -> Vec<f32> {
        noise(shape.iter().product::<usize>() + i, scale)[i..].to_vec()
    }

    fn inputs<B: Backend, const D: usize>(shapes: &[[usize; D]], scale: f32, dtype: DType) -> Vec<Tensor<B, D>> {
        shapes.iter().enumerate().map(|(i, s)| tensor_of(input_values(s, i, scale), *s, dtype)).collect()
    }

    /// [`inputs`] as leaves, those marked in `tracked` asking for a gradient (a constant input,
    /// such as a mask, must not: the kernel nodes leave those to burn's ops).
    fn leaves<B: AutodiffBackend, const D: usize>(shapes: &[[usize; D]], scale: f32, dtype: DType, tracked: &[bool]) -> Vec<Tensor<B, D>> {
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
            let reference_grads = (reference_out.clone() * tensor_of(r.clone(), dims, DType::F64)).sum().backward();
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
                let want = values(reference_leaves[i].grad(&reference_grads).expect("a reference gradient"));
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
        let bias: Vec<f32> = (0..14).map(|i| if i == 5 || i == 6 || i == 13 { -1.0e9 } else { 0.0 }).collect();
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
    fn normalise_reference<B: Backend, const D: usize>(x: Tensor<B, D>, eps: f64) -> (Tensor<B, D>, Tensor<B, D>) {
        let centred = x.clone() - x.mean_dim(D - 1);
        let rstd = (centred.clone() * centred.clone()).mean_dim(D - 1).add_scalar(eps).sqrt().recip();
        (centred * rstd.clone(), rstd)
    }

    #[test]
    fn attention_probs_kernel_matches_reference_with_masked_keys() {
        let shape = [2, 3, 5, 7];
        let scores = f32_tensor::<Cpu, 4>(noise(210, 4.0), shape);
        let probs = attention_probs(scores.clone(), 0.35, &padding_bias(&scores));
        for (item, keys) in [(0..1, 5..7), (1..2, 6..7)] {
            let masked = values(probs.clone().slice([item, 0..3, 0..5, keys]));
            assert!(masked.iter().all(|&p| p == 0.0), "padded keys get exactly 0");
        }
        check_kernel!([shape], scale 4.0, tracked [true], tol 2e-5,
            kernel |t| attention_probs(t[0].clone(), 0.35, &padding_bias(&t[0])),
            reference |t| softmax_reference(t[0].clone().mul_scalar(0.35) + padding_bias(&t[0])));
    }

    /// With and without bias, and with a transposed weight view (the VJP's `W^T`).
    #[test]
    fn linear_kernel_matches_reference() {
        check_kernel!([[2, 5, 40], [1, 40, 24], [1, 1, 24]], scale 1.0, tracked [true; 3], tol 2e-5,
            kernel |t| linear(t[0].clone(), t[1].clone().reshape([40, 24]), Some(t[2].clone().reshape([24]))),
            reference |t| t[0].clone().matmul(t[1].clone()) + t[2].clone());
        check_kernel!([[2, 5, 40], [1, 24, 40]], scale 1.0, tracked [true; 2], tol 2e-5,
            kernel |t| linear(t[0].clone(), t[1].clone().reshape([24, 40]).transpose(), None),
            reference |t| t[0].clone().matmul(t[1].clone().swap_dims(1, 2)));
        let y = linear(f32_tensor::<Cpu, 3>(noise(80, 1.0), [2, 1, 40]), f32_tensor(noise(40 * 24, 1.0), [40, 24]), None);
        assert_eq!(y.dims(), [2, 1, 24]);
    }

    /// `x W + b + residual` against burn's ops, with the residual's buffer held elsewhere
    /// (copied) or not (updated in place), with a bias or a transposed weight, on rows that do
    /// not fill the bias pass's blocks evenly (100 x 200 elements). A held residual is left as
    /// it was.
    #[test]
    fn linear_residual_matches_reference() {
        let (rows, features, out) = (100, 24, 200);
        let x = f32_tensor::<Cpu, 3>(noise(rows * features, 1.0), [4, 25, features]);
        let weight = f32_tensor::<Cpu, 2>(noise(features * out, 1.0), [features, out]);
        let weight_t = f32_tensor::<Cpu, 2>(noise(features * out, 1.0), [out, features]).transpose();
        let bias = f32_tensor::<Cpu, 1>(noise(out, 1.0), [out]);
        let residual_values = noise(rows * out, 1.0);
        let residual = || f32_tensor::<Cpu, 3>(residual_values.clone(), [4, 25, out]);
        for (w, b) in [(weight.clone(), Some(bias.clone())), (weight_t.clone(), None)] {
            let product = x.clone().matmul(w.clone().unsqueeze()) + residual();
            let want = values(match &b {
                Some(b) => product + b.clone().unsqueeze(),
                None => product,
            });
            let unique = values(linear_residual(x.clone(), w.clone(), b.clone(), residual()));
            let held = residual();
            let shared = values(linear_residual(x.clone(), w.clone(), b.clone(), held.clone()));
            assert_eq!(values(held), residual_values, "the held residual was written");
            for got in [unique, shared] {
                let diff = max_abs_diff(&got, &want);
                assert!(diff < 1e-5, "{diff}");
            }
        }
    }

    /// Plain, transposed (`k^T`) and head-split (strided) operands.
    #[test]
    fn batched_matmul_kernel_matches_reference() {
        check_kernel!([[2, 3, 5, 4], [2, 3, 4, 6]], scale 1.0, tracked [true; 2], tol 2e-5,
            kernel |t| matmul(t[0].clone(), t[1].clone()),
            reference |t| t[0].clone().matmul(t[1].clone()));
        check_kernel!([[2, 3, 5, 4], [2, 3, 6, 4]], scale 1.0, tracked [true; 2], tol 2e-5,
            kernel |t| matmul(t[0].clone(), t[1].clone().swap_dims(2, 3)),
            reference |t| t[0].clone().matmul(t[1].clone().swap_dims(2, 3)));
        check_kernel!([[2, 5, 3, 4], [2, 5, 3, 4]], scale 1.0, tracked [true; 2], tol 2e-5,
            kernel |t| matmul(t[0].clone().swap_dims(1, 2), t[1].clone().swap_dims(1, 2).swap_dims(2, 3)),
            reference |t| t[0].clone().swap_dims(1, 2).matmul(t[1].clone().swap_dims(1, 2).swap_dims(2, 3)));
    }

    /// `gemm_into` against a plain f64 triple loop on every operand layout it meets: row-major,
    /// transposed (BLAS takes it), strided in both dimensions and reversed (neither BLAS layout:
    /// `matrixmultiply` takes it), into rows wider than the product. With `beta = 0` the output
    /// starts as NaN, which any read of it would carry into the result.
    #[test]
    fn gemm_into_matches_definition_on_every_layout() {
        use ndarray::{s, Array2, ArrayView2};
        let (m, k, n, ldc) = (7, 5, 6, 9);
        let a = Array2::from_shape_vec((m, 2 * k), noise(m * 2 * k, 1.0)).unwrap();
        let bt = Array2::from_shape_vec((n, k), noise(n * k, 1.0)).unwrap();
        let a_views: [(&str, ArrayView2<f32>); 3] = [
            ("row-major", a.slice(s![.., ..k])),
            ("strided", a.slice(s![.., ..;2])),
            ("reversed", a.slice(s![..;-1, ..k])),
        ];
        let b_row_major = bt.t().to_owned();
        let b_views: [(&str, ArrayView2<f32>); 2] = [("row-major", b_row_major.view()), ("transposed", bt.t())];
        for (a_name, av) in &a_views {
            for (b_name, bv) in &b_views {
                for beta in [0.0f32, 1.0] {
                    let start = if beta == 0.0 { f32::NAN } else { 0.5 };
                    let mut c = vec![start; m * ldc];
                    unsafe { gemm_into(av.view(), bv.view(), beta, c.as_mut_ptr(), ldc) };
                    for i in 0..m {
                        for j in 0..ldc {
                            let got = c[i * ldc + j];
                            if j >= n {
                                assert!(got.is_nan() || got == start, "column {j} past the product was written");
                                continue;
                            }
                            let dot: f64 = (0..k).map(|l| av[[i, l]] as f64 * bv[[l, j]] as f64).sum();
                            let want = if beta == 0.0 { dot } else { dot + start as f64 };
                            assert!((got as f64 - want).abs() < 1e-5, "{a_name} x {b_name}, beta {beta}: [{i}, {j}] {got} vs {want}");
                        }
                    }
                }
            }
        }
    }

    /// The head views and the merged products equal burn's narrow / reshape / swap / cat.
    #[test]
    fn head_split_and_merge_match_composed() {
        let (batch, seq, heads, head_dim) = (2, 5, 3, 4);
        let hidden = heads * head_dim;
        let qkv = f32_tensor::<Cpu, 3>(noise(batch * seq * 3 * hidden, 1.0), [batch, seq, 3 * hidden]);
        let burn_split = |x: Tensor<Cpu, 3>, part: usize| {
            x.narrow(2, part * hidden, hidden).reshape([batch, seq, heads, head_dim]).swap_dims(1, 2)
        };
        for part in 0..3 {
            let ours = values(split_heads(qkv.clone(), 3, part, heads));
            assert_eq!(ours, values(burn_split(qkv.clone(), part)), "part {part}");
        }
        // The VJP's products into one `[dq dk dv]`, transposed and strided operands included.
        let s = f32_tensor::<Cpu, 4>(noise(batch * heads * seq * seq, 1.0), [batch, heads, seq, seq]);
        let [q, k, v] = [0, 1, 2].map(|part| split_heads(qkv.clone(), 3, part, heads));
        let products = vec![(s.clone(), k.clone()), (s.clone().swap_dims(2, 3), q.clone()), (s.clone(), v.clone())];
        let ours = matmul_merged(products.clone());
        assert_eq!(ours.dims(), [batch, seq, 3 * hidden]);
        let merge = |(a, b): (Tensor<Cpu, 4>, Tensor<Cpu, 4>)| a.matmul(b).swap_dims(1, 2).reshape([batch, seq, hidden]);
        let burn = Tensor::cat(products.into_iter().map(merge).collect(), 2);
        let diff = max_abs_diff(&values(ours), &values(burn));
        assert!(diff < 1e-5, "{diff}");
    }

    /// The fused attention and its backward against burn's ops, on head views of one `[q k v]`
    /// projection and with padded keys (seq 7, keys 5..7 and 6..7 masked), probabilities kept
    /// or not.
    #[test]
    fn fused_attention_matches_reference() {
        let (batch, seq, heads, head_dim) = (2, 7, 3, 4);
        let hidden = heads * head_dim;
        let qkv = f32_tensor::<Cpu, 3>(noise(batch * seq * 3 * hidden, 1.0), [batch, seq, 3 * hidden]);
        let [q, k, v] = [0, 1, 2].map(|part| split_heads(qkv.clone(), 3, part, heads));
        let (bias, scale) = (padding_bias(&q), 0.5);
        let merge = |x: Tensor<Cpu, 4>| x.swap_dims(1, 2).reshape([batch, seq, hidden]);
        let probs = softmax_reference(q.clone().matmul(k.clone().swap_dims(2, 3)).mul_scalar(scale) + bias.clone());
        let context = merge(probs.clone().matmul(v.clone()));
        let (fused_context, fused_probs) = attention(&q, &k, &v, &bias, scale, true).expect("CPU f32 data");
        assert!(max_abs_diff(&values(fused_context.clone()), &values(context.clone())) < 1e-6);
        assert!(max_abs_diff(&values(fused_probs.expect("kept")), &values(probs.clone())) < 1e-7);
        let (unkept_context, none) = attention(&q, &k, &v, &bias, scale, false).expect("CPU f32 data");
        assert!(none.is_none());
        assert_eq!(values(unkept_context), values(fused_context));

        let dcontext = split_heads(f32_tensor::<Cpu, 3>(noise(batch * seq * hidden, 1.0), [batch, seq, hidden]), 1, 0, heads);
        let dprobs = dcontext.clone().matmul(v.clone().swap_dims(2, 3));
        let dscores = (probs.clone() * (dprobs.clone() - (dprobs * probs.clone()).sum_dim(3))).mul_scalar(scale);
        let dq = merge(dscores.clone().matmul(k.clone()));
        let dk = merge(dscores.swap_dims(2, 3).matmul(q.clone()));
        let dv = merge(probs.clone().swap_dims(2, 3).matmul(dcontext.clone()));
        let fused = attention_backward(&dcontext, &q, &k, &v, &probs, scale).expect("CPU f32 data");
        let diff = max_abs_diff(&values(fused), &values(Tensor::cat(vec![dq, dk, dv], 2)));
        assert!(diff < 1e-5, "{diff}");
        // Under autodiff the caller composes: no fused path.
        let ad = |t: &Tensor<Cpu, 4>| Tensor::<Train, 4>::from_inner(t.clone());
        assert!(attention(&ad(&q), &ad(&k), &ad(&v), &ad(&bias), scale, true).is_none());
    }

    /// `dprobs` and `probs` both inputs (in the VJP both depend on the weights).
    #[test]
    fn softmax_backward_kernel_matches_reference() {
        let shape = [2, 3, 5, 7];
        check_kernel!([shape, shape], scale 1.0, tracked [true; 2], tol 2e-5,
            kernel |t| softmax_backward(t[0].clone(), &t[1], 0.35),
            reference |t| (t[1].clone() * (t[0].clone() - (t[0].clone() * t[1].clone()).sum_dim(3))).mul_scalar(0.35));
    }

    #[test]
    fn normal_cdf_kernel_matches_reference() {
        check_kernel!([[3, 4, 50]], scale 3.0, tracked [true], tol 2e-5,
            kernel |t| normal_cdf(t[0].clone()),
            reference |t| cdf_reference(t[0].clone()));
    }

    /// Both outputs of the one-pass kernel: `x Phi(x)` and `Phi(x)`.
    #[test]
    fn gelu_kernel_matches_reference() {
        check_kernel!([[3, 4, 50]], scale 3.0, tracked [true], tol 2e-5,
            kernel |t| gelu(t[0].clone()).0,
            reference |t| t[0].clone() * cdf_reference(t[0].clone()));
        check_kernel!([[3, 4, 50]], scale 3.0, tracked [true], tol 2e-5,
            kernel |t| gelu(t[0].clone()).1,
            reference |t| cdf_reference(t[0].clone()));
    }

    /// IM's residual with a row weight for the mask (a constant), then a 0/1 mask that must zero
    /// whole rows; then the descent step.
    #[test]
    fn im_update_kernels_match_reference() {
        check_kernel!([[3, 4, 50], [3, 4, 50], [3, 4, 50], [3, 4, 1]], scale 2.0, tracked [true, true, true, false], tol 2e-5,
            kernel |t| masked_residual(&t[0], &t[1], t[2].clone(), &t[3]),
            reference |t| (t[0].clone() - t[1].clone() - t[2].clone()) * t[3].clone());
        let zeroed = values(masked_residual(
            &f32_tensor::<Cpu, 3>(noise(600, 1.0), [3, 4, 50]),
            &f32_tensor(noise(601, 1.0)[1..].to_vec(), [3, 4, 50]),
            f32_tensor(noise(602, 1.0)[2..].to_vec(), [3, 4, 50]),
            &f32_tensor(vec![1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0], [3, 4, 1]),
        ));
        assert!(zeroed[50..100].iter().chain(&zeroed[550..600]).all(|&v| v == 0.0));
        assert!(zeroed[..50].iter().any(|&v| v != 0.0));
        check_kernel!([[3, 4, 50]; 3], scale 2.0, tracked [true; 3], tol 2e-5,
            kernel |t| descent_step(&t[0], &t[1], t[2].clone(), 0.2),
            reference |t| t[0].clone() - (t[1].clone() - t[2].clone()).mul_scalar(0.2));
    }

    /// With `Phi(x)` from the kernel, so that `x` reaches the output directly and through it.
    #[test]
    fn gelu_backward_kernel_matches_reference() {
        let shape = [3, 4, 50];
        check_kernel!([shape, shape], scale 2.0, tracked [true; 2], tol 2e-5,
            kernel |t| gelu_backward(t[0].clone(), &t[1], &normal_cdf(t[1].clone())),
            reference |t| t[0].clone() * (cdf_reference(t[1].clone()) + t[1].clone() * pdf_reference(t[1].clone())));
    }

    /// From an off-centre input, with and without `beta`; each of `y`, `x_hat` and `rstd` (the
    /// IM-connection's VJP differentiates through all three).
    #[test]
    fn layer_norm_kernel_matches_reference() {
        let (shapes, eps) = ([[2, 7, 48], [1, 1, 48], [1, 1, 48]], 1e-12);
        fn gamma_beta<B: Backend>(t: &[Tensor<B, 3>]) -> (Tensor<B, 1>, Option<Tensor<B, 1>>) {
            (t[1].clone().reshape([48]), Some(t[2].clone().reshape([48])))
        }
        check_kernel!(shapes, scale 2.0, tracked [true; 3], tol 2e-5,
            kernel |t| { let (g, b) = gamma_beta(&t); layer_norm(t[0].clone().add_scalar(5.0), g, b, eps).0 },
            reference |t| normalise_reference(t[0].clone().add_scalar(5.0), eps).0 * t[1].clone() + t[2].clone());
        check_kernel!(shapes[..2], scale 2.0, tracked [true; 2], tol 2e-5,
            kernel |t| layer_norm(t[0].clone().add_scalar(5.0), t[1].clone().reshape([48]), None, eps).0,
            reference |t| normalise_reference(t[0].clone().add_scalar(5.0), eps).0 * t[1].clone());
        check_kernel!(shapes, scale 2.0, tracked [true, false, false], tol 2e-5,
            kernel |t| { let (g, b) = gamma_beta(&t); layer_norm(t[0].clone().add_scalar(5.0), g, b, eps).1 },
            reference |t| normalise_reference(t[0].clone().add_scalar(5.0), eps).0);
        check_kernel!(shapes, scale 2.0, tracked [true, false, false], tol 2e-5,
            kernel |t| { let (g, b) = gamma_beta(&t); layer_norm(t[0].clone().add_scalar(5.0), g, b, eps).2 },
            reference |t| normalise_reference(t[0].clone().add_scalar(5.0), eps).1);
    }

    /// With `x_hat` and `rstd` from the LayerNorm kernel of an input, so that the gradient of
    /// every input of the backward reaches that input.
    #[test]
    fn layer_norm_backward_kernel_matches_reference() {
        let (shapes, eps) = ([[3, 4, 48], [3, 4, 48], [1, 1, 48]], 1e-12);
        check_kernel!(shapes, scale 1.0, tracked [true; 3], tol 2e-5,
            kernel |t| {
                let gamma = t[2].clone().reshape([48]);
                let (_, x_hat, rstd) = layer_norm(t[1].clone().add_scalar(3.0), gamma.clone(), None, eps);
                layer_norm_backward(t[0].clone(), &x_hat, &rstd, gamma)
            },
            reference |t| {
                let (x_hat, rstd) = normalise_reference(t[1].clone().add_scalar(3.0), eps);
                let g = t[0].clone() * t[2].clone();
                (g.clone() - g.clone().mean_dim(2) - x_hat.clone() * (g * x_hat).mean_dim(2)) * rstd
            });
    }

    /// The fused LayerNorm against the definition, in f64, on an off-centre input.
    #[test]
    fn layer_norm_kernel_matches_f64_definition() {
        let (rows, width, eps) = (2 * 7, 48, 1e-12);
        let xs: Vec<f32> = noise(rows * width, 2.0).iter().map(|v| v + 5.0).collect();
        let (gamma, beta) = (noise(width, 1.0), noise(width, 0.5));
        let x = f32_tensor::<Cpu, 3>(xs.clone(), [2, 7, width]);
        let (g, b) = (f32_tensor::<Cpu, 1>(gamma.clone(), [width]), f32_tensor::<Cpu, 1>(beta.clone(), [width]));
        let (y, x_hat, rstd) = layer_norm_cpu_f32(&x, &g, Some(&b), eps).expect("CPU f32 backend");
        assert_eq!(rstd.dims(), [2, 7, 1]);
        let (y, x_hat, rstd) = (values(y), values(x_hat), values(rstd));
        for r in 0..rows {
            let row: Vec<f64> = xs[r * width..(r + 1) * width].iter().map(|&v| v as f64).collect();
            let mean = row.iter().sum::<f64>() / width as f64;
            let var = row.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / width as f64;
            let expected_rstd = 1.0 / (var + eps).sqrt();
            assert!((rstd[r] as f64 - expected_rstd).abs() < 1e-6 * expected_rstd);
            for j in 0..width {
                let h = (row[j] - mean) * expected_rstd;
                assert!((x_hat[r * width + j] as f64 - h).abs() < 1e-5, "x_hat[{r}, {j}]");
                let o = h * gamma[j] as f64 + beta[j] as f64;
                assert!((y[r * width + j] as f64 - o).abs() < 1e-5, "y[{r}, {j}]");
            }
        }
    }

    /// The row-copy join equals burn's `cat` on the last axis, for matrices and vectors.
    #[test]
    fn concat_matches_burn_cat() {
        let parts: Vec<Tensor<Cpu, 2>> = [3, 5, 2].iter().map(|&w| f32_tensor::<Cpu, 2>(noise(7 * w, 1.0), [7, w])).collect();
        let joined = concat(parts.clone());
        assert_eq!(joined.dims(), [7, 10]);
        assert_eq!(values(joined), values(Tensor::cat(parts, 1)));
        let vectors: Vec<Tensor<Cpu, 1>> = [4, 1].iter().map(|&w| f32_tensor::<Cpu, 1>(noise(w, 1.0), [w])).collect();
        assert_eq!(values(concat(vectors.clone())), values(Tensor::cat(vectors, 0)));
    }

    /// The in-place outputs of a forward that keeps no cache are exactly the cached kernels'
    /// outputs (the layer's `forward` and `forward_cached` must agree to the bit), and leave a
    /// shared input intact.
    #[test]
    fn output_only_kernels_equal_the_cached_ones() {
        let (width, eps) = (48, 1e-12);
        let x = f32_tensor::<Cpu, 3>(noise(2 * 7 * width, 3.0), [2, 7, width]);
        let before = values(x.clone());
        assert_eq!(values(gelu_output(x.clone())), values(gelu(x.clone()).0));
        let (g, b) = (f32_tensor::<Cpu, 1>(noise(width, 1.0), [width]), f32_tensor::<Cpu, 1>(noise(width, 0.5), [width]));
        let cached = layer_norm(x.clone(), g.clone(), Some(b.clone()), eps).0;
        assert_eq!(values(layer_norm_output(x.clone(), g.clone(), Some(b), eps)), values(cached));
        let cached = layer_norm(x.clone(), g.clone(), None, eps).0;
        assert_eq!(values(layer_norm_output(x.clone(), g, None, eps)), values(cached));
        assert_eq!(values(x), before);
    }

    /// A transposed (non-contiguous) input and a shared buffer are handled, the input unchanged.
    #[test]
    fn kernels_leave_shared_and_strided_inputs_intact() {
        let x = f32_tensor::<Cpu, 4>(noise(98, 1.0), [2, 1, 7, 7]);
        let before = values(x.clone());
        let y = attention_probs(x.clone().swap_dims(2, 3), 1.0, &padding_bias(&x));
        assert_eq!(values(x.clone()), before);
        let expected = softmax(x.clone().swap_dims(2, 3) + padding_bias(&x), 3);
        let diff = max_abs_diff(&values(y), &values(expected));
        assert!(diff < 1e-6, "{diff}");
    }

    /// The normal CDF's node differentiates to the density (a hand formula).
    #[test]
    fn normal_cdf_node_gradient_is_the_density() {
        let xs = [-1.0f32, 0.5, 2.0];
        let x = f32_tensor::<Train, 1>(xs.to_vec(), [3]).require_grad();
        let grads = normal_cdf(x.clone()).sum().backward();
        let g = values(x.grad(&grads).unwrap());
        // d/dx Phi(x) = exp(-x^2 / 2) / sqrt(2 pi)
        for (gi, xi) in g.iter().zip(xs) {
            let pdf = (-xi * xi / 2.0).exp() / (2.0 * std::f32::consts::PI).sqrt();
            assert!((gi - pdf).abs() < 1e-6, "{gi} vs {pdf}");
        }
    }
}
