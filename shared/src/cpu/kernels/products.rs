//! Linear layers and attention's batched products as GEMMs on views of their operands
//! (transposed and head-split ones included), and the head split and merge and the q/k/v weight
//! join around them, so that no operand is copied into shape.

use std::mem::MaybeUninit;

use burn::tensor::backend::Backend;
use burn::tensor::Tensor;
use burn_ndarray::SharedArray;

#[cfg(not(target_arch = "wasm32"))]
use super::autodiff;
use super::gemm::{gemm_add_by_rows, gemm_by_rows, gemm_by_rows_with, gemm_into};
use super::residual::add_residual;
use super::{cpu_f32, cpu_f32_any_layout, for_blocks, from_cpu_f32, new_rows, new_rows_uninit};

/// `x W + b` over the last dimension of `x` (`weight` is `[in, out]`, as burn's `Linear`), run
/// as one `[rows, in]` GEMM over all leading dimensions: a single large product instead of one
/// per batch item that each re-pack `W` (also in autodiff's weight gradient).
///
/// On burn-ndarray with f32 data this is one GEMM on views of the inputs, with the bias as the
/// GEMM's initial `C` (`beta = 1`): burn-ndarray's reshapes copy even contiguous arrays, so its
/// `linear` on `[batch * seq, in]` copied the input, the weight and the output twice over.
/// A transposed weight (a VJP's `W^T`) is passed to the GEMM as a transpose, not copied.
pub fn linear<B: Backend, const D: usize>(
    x: Tensor<B, D>,
    weight: Tensor<B, 2>,
    bias: Option<Tensor<B, 1>>,
) -> Tensor<B, D> {
    train_node!(autodiff::linear(&x, &weight, bias.as_ref()));
    if let Some(y) = linear_cpu_f32(&x, &weight, bias.as_ref()) {
        return y;
    }
    let dims = x.dims();
    let features = dims[D - 1];
    let y = burn::tensor::module::linear(
        x.reshape([dims[..D - 1].iter().product(), features]),
        weight,
        bias,
    );
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
    let (Ok(x), Ok(weight)) = (cpu_f32(x.clone()), cpu_f32_any_layout(weight.clone())) else {
        return Err(residual);
    };
    let bias = match bias.map(|b| cpu_f32(b.clone())) {
        Some(Ok(b)) => Some(b),
        Some(Err(_)) => return Err(residual),
        None => None,
    };
    let Some(weight) = weight.view().into_dimensionality::<Ix2>().ok() else {
        return Err(residual);
    };
    let (features, out) = weight.dim();
    let fits = x.shape()[D - 1] == features
        && residual.dims()[..D - 1] == x.shape()[..D - 1]
        && residual.dims()[D - 1] == out;
    if !fits || bias.as_ref().is_some_and(|b| b.len() != out) {
        return Err(residual); // burn's own ops report the mismatch
    }
    let mut c = cpu_f32(residual)?;
    let rows = x.len() / features.max(1);
    let Ok(x) = x.view().into_shape_with_order((rows, features)) else {
        return Err(from_cpu_f32(c));
    };
    let bias = bias.as_ref().and_then(|b| b.as_slice());
    if c.is_unique() {
        let buf = c.as_slice_mut().expect("standard layout is contiguous");
        if let Some(bias) = bias {
            let block = (1usize << 14).div_ceil(out.max(1)) * out.max(1); // whole rows
            for_blocks(buf, block, |rows| {
                rows.chunks_mut(out.max(1))
                    .for_each(|row| row.iter_mut().zip(bias).for_each(|(c, b)| *c += b))
            });
        }
        gemm_add_by_rows(x, weight, buf);
        return Ok(from_cpu_f32(c));
    }
    // Held elsewhere (IM keeps `h_{t-1}`): a new `C` starts as residual + bias.
    let init = c.as_slice().expect("standard layout is contiguous");
    // SAFETY: each part's rows are written whole, from the residual's rows.
    let y = unsafe {
        gemm_by_rows_with(
            x,
            weight,
            Some(|first: usize, part: &mut [MaybeUninit<f32>]| {
                let rows = part
                    .chunks_exact_mut(out.max(1))
                    .zip(init[first * out..].chunks_exact(out.max(1)));
                for (row, r) in rows {
                    match bias {
                        Some(b) => row
                            .iter_mut()
                            .zip(r)
                            .zip(b)
                            .for_each(|((c, r), b)| *c = MaybeUninit::new(r + b)),
                        None => row.iter_mut().zip(r).for_each(|(c, r)| *c = MaybeUninit::new(*r)),
                    }
                }
            }),
        )
    };
    Ok(from_cpu_f32(
        y.into_shape_with_order(c.shape()).expect("the residual's shape").into_shared(),
    ))
}

/// `x^T g` summed over all rows: the weight gradient of [`linear`], `[in, out]` from `x`
/// `[.., in]` and `g` `[.., out]`. One GEMM on a transposed view on burn-ndarray with f32 data.
pub fn weight_gradient<B: Backend, const D: usize>(
    x: Tensor<B, D>,
    g: Tensor<B, D>,
) -> Tensor<B, 2> {
    let (features, out) = (x.dims()[D - 1], g.dims()[D - 1]);
    let composed = |x: Tensor<B, D>, g: Tensor<B, D>| {
        x.reshape([-1, features as i32]).transpose().matmul(g.reshape([-1, out as i32]))
    };
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
    let (a, b) =
        (a.view().into_dimensionality::<Ix4>().ok()?, b.view().into_dimensionality::<Ix4>().ok()?);
    let ([d0, d1, m, k], [e0, e1, k2, n]) = (a.dim().into(), b.dim().into());
    if (d0, d1, k) != (e0, e1, k2) {
        return None; // burn's own op broadcasts or reports the mismatch
    }
    #[cfg(feature = "openblas")]
    crate::cpu::blas::calling_thread_only(); // the blocks run in parallel instead
                                             // One `(b, h)` product per block.
    let product = |first: usize, [block]: [&mut [MaybeUninit<f32>]; 1]| {
        let index = first / m.max(1);
        let (i, j) = (index / d1, index % d1);
        // SAFETY: `block` holds the `m x n` result; `beta = 0` only writes it.
        unsafe {
            gemm_into(
                a.slice(s![i, j, .., ..]),
                b.slice(s![i, j, .., ..]),
                0.0,
                block.as_mut_ptr().cast(),
                n,
            )
        };
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
pub fn split_heads<B: Backend>(
    x: Tensor<B, 3>,
    parts: usize,
    part: usize,
    heads: usize,
) -> Tensor<B, 4> {
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

fn matmul_merged_cpu_f32<B: Backend>(
    products: &[(Tensor<B, 4>, Tensor<B, 4>)],
) -> Option<Tensor<B, 3>> {
    use ndarray::{s, ArrayView4, Ix4};
    let mut arrays = Vec::with_capacity(products.len());
    for (a, b) in products {
        arrays.push((cpu_f32_any_layout(a.clone()).ok()?, cpu_f32_any_layout(b.clone()).ok()?));
    }
    let mut views: Vec<(ArrayView4<f32>, ArrayView4<f32>)> = Vec::with_capacity(arrays.len());
    for (a, b) in &arrays {
        views.push((
            a.view().into_dimensionality::<Ix4>().ok()?,
            b.view().into_dimensionality::<Ix4>().ok()?,
        ));
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
    crate::cpu::blas::calling_thread_only(); // the blocks run in parallel instead

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
            unsafe {
                gemm_into(a.slice(s![i, j, .., ..]), b.slice(s![i, j, .., ..]), 0.0, block, width)
            };
        }
    };
    // SAFETY: the item's columns are covered by its products, each written whole by its GEMM.
    let [out] = unsafe { new_rows_uninit(batch * m, [width], m, products) };
    Some(from_cpu_f32(SharedArray::from_shape_vec(vec![batch, m, columns * n], out).ok()?))
}

/// `parts` joined along their last dimension (the fused q/k/v weight and bias). On burn-ndarray
/// with f32 data, one multi-threaded pass of row copies: burn-ndarray's `cat` copies element by
/// element on one thread, and the weight is joined on every layer call and every IM iteration.
/// Under autodiff, burn's own `cat`, whose backward slices the gradient.
pub fn concat<B: Backend, const D: usize>(parts: Vec<Tensor<B, D>>) -> Tensor<B, D> {
    let arrays: Option<Vec<SharedArray<f32>>> =
        parts.iter().map(|p| cpu_f32(p.clone()).ok()).collect();
    let Some(arrays) = arrays.filter(|a| !a.is_empty()) else { return Tensor::cat(parts, D - 1) };
    let lead = &arrays[0].shape()[..D - 1];
    if arrays.iter().any(|a| &a.shape()[..D - 1] != lead) {
        return Tensor::cat(parts, D - 1); // burn's own op reports the mismatch
    }
    let widths: Vec<usize> = arrays.iter().map(|a| a.shape()[D - 1]).collect();
    let (rows, width) = (lead.iter().product::<usize>(), widths.iter().sum::<usize>());
    let slices: Vec<&[f32]> =
        arrays.iter().map(|a| a.as_slice().expect("standard layout")).collect();
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
