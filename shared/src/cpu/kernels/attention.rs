//! Self-attention's core: the fused attention and its backward (one pass per batch item), and
//! the probabilities and softmax backward that the composed path and autodiff run.

use std::mem::MaybeUninit;

use burn::tensor::activation::softmax;
use burn::tensor::backend::Backend;
use burn::tensor::Tensor;
use burn_ndarray::SharedArray;

#[cfg(not(target_arch = "wasm32"))]
use super::autodiff;
use super::gemm::gemm_into;
use super::simd::{exp_f32, fold_lanes, vectorised};
use super::{cpu_f32, cpu_f32_any_layout, from_cpu_f32, new_rows_uninit, rows_in_place, view4};

/// Self-attention's core at inference, `softmax(q k^T * scale + bias) v`, with the heads merged
/// back: `q`, `k`, `v` `[batch, heads, seq, head_dim]` and the padding bias `[batch, 1, 1, seq]`
/// give the context `[batch, seq, heads * head_dim]` and, when `keep_probs`, the probabilities
/// `[batch, heads, seq, seq]` (a VJP reads them).
///
/// One pass per batch item: each head's scores become probabilities and then context while they
/// are in cache. As [`matmul`](super::matmul), [`attention_probs`] and
/// [`matmul_merged`](super::matmul_merged) (what every other case runs), the scores went through
/// memory three times. `None` where the data is not burn-ndarray's f32 (other backends,
/// autodiff): the caller composes those kernels.
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
    crate::cpu::blas::calling_thread_only(); // the items run in parallel instead
    let (hidden, square, scale) = (heads * head_dim, seq * seq, scale as f32);
    // Batch item `i`: every head into `context` ([seq, hidden]), the probabilities into `probs`
    // ([heads, seq, seq]), which without `keep_probs` is scratch reused head after head.
    let item = |i: usize, context: &mut [MaybeUninit<f32>], probs: &mut [MaybeUninit<f32>]| {
        let item_bias = &bias[i * seq..][..seq];
        for j in 0..heads {
            let p = &mut probs[if keep_probs { j * square } else { 0 }..][..square];
            let (qh, kh, vh) =
                (q.slice(s![i, j, .., ..]), k.slice(s![i, j, .., ..]), v.slice(s![i, j, .., ..]));
            // scores = q k^T
            // SAFETY: `p` holds the `seq x seq` scores; `beta = 0` only writes them.
            unsafe { gemm_into(qh, kh.t(), 0.0, p.as_mut_ptr().cast(), seq) };
            // SAFETY: just written whole.
            let p = unsafe { &mut *(p as *mut [MaybeUninit<f32>] as *mut [f32]) };
            p.chunks_exact_mut(seq.max(1))
                .for_each(|row| attention_probs_row(row, item_bias, scale));
            // context[:, head j] = probs v
            let p = ndarray::ArrayView2::from_shape((seq, seq), p).expect("seq x seq");
            // SAFETY: head `j`'s `seq x head_dim` columns of the item's rows of `hidden`.
            unsafe { gemm_into(p, vh, 0.0, context.as_mut_ptr().add(j * head_dim).cast(), hidden) };
        }
    };
    let (context, probs) = if keep_probs {
        // SAFETY: `item` writes every head's columns of the context and every head's scores.
        let [context, probs] = unsafe {
            new_rows_uninit(batch, [seq * hidden, heads * square], 1, |i, [c, p]| item(i, c, p))
        };
        (context, Some(probs))
    } else {
        let run = |i: usize, [c]: [&mut [MaybeUninit<f32>]; 1]| {
            item(i, c, &mut vec![MaybeUninit::uninit(); square])
        };
        // SAFETY: `item` writes every head's columns of the context.
        let [context] = unsafe { new_rows_uninit(batch, [seq * hidden], 1, run) };
        (context, None)
    };
    let context =
        from_cpu_f32(SharedArray::from_shape_vec(vec![batch, seq, hidden], context).ok()?);
    let probs = match probs {
        Some(p) => {
            Some(from_cpu_f32(SharedArray::from_shape_vec(vec![batch, heads, seq, seq], p).ok()?))
        }
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
    crate::cpu::blas::calling_thread_only(); // the items run in parallel instead
    let (hidden, square, scale) = (heads * head_dim, seq * seq, scale as f32);
    let width = 3 * hidden;
    let item = |i: usize, [out]: [&mut [MaybeUninit<f32>]; 1]| {
        let mut dscores = vec![0.0f32; square];
        for j in 0..heads {
            let p = &probs[(i * heads + j) * square..][..square];
            let (dc, qh, kh, vh) = (
                dcontext.slice(s![i, j, .., ..]),
                q.slice(s![i, j, .., ..]),
                k.slice(s![i, j, .., ..]),
                v.slice(s![i, j, .., ..]),
            );
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

/// Attention probabilities: softmax over keys of `scores * scale + bias`, with `scores`
/// `[batch, heads, queries, keys]` and the padding bias `[batch, 1, 1, keys]`. Padded keys
/// (bias -1e9) come out as exactly 0.
pub fn attention_probs<B: Backend>(
    scores: Tensor<B, 4>,
    scale: f64,
    bias: &Tensor<B, 4>,
) -> Tensor<B, 4> {
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

/// Softmax input-gradient, scaled: `scale * p * (dp - sum(dp * p))` along the last dimension
/// (`scale` is the attention's `1 / sqrt(head_dim)`, folded in here instead of a pass of its own).
pub fn softmax_backward<B: Backend, const D: usize>(
    dprobs: Tensor<B, D>,
    probs: &Tensor<B, D>,
    scale: f64,
) -> Tensor<B, D> {
    train_node!(autodiff::softmax_backward(&dprobs, probs, scale));
    let width = probs.dims()[D - 1];
    let scale_f32 = scale as f32;
    let kernel = |_: usize, d: &mut [f32], [p]: [&[f32]; 1]| {
        d.chunks_mut(width)
            .zip(p.chunks(width))
            .for_each(|(d, p)| softmax_backward_row(d, p, scale_f32));
    };
    rows_in_place(dprobs, [probs], kernel).unwrap_or_else(|dprobs| {
        let dot = (dprobs.clone() * probs.clone()).sum_dim(D - 1);
        (probs.clone() * (dprobs - dot)).mul_scalar(scale)
    })
}

/// One row of [`attention_probs`] in place: `softmax(scores * scale + bias)` over the keys.
#[inline]
fn attention_probs_row(row: &mut [f32], bias: &[f32], scale: f32) {
    row.iter_mut().zip(bias).for_each(|(v, b)| *v = *v * scale + b);
    softmax_row(row);
}

vectorised! {
    /// Softmax of one row in place. Max-subtracted, as burn's: padded keys carry -1e9 and must
    /// come out as exactly 0.
    pub(crate) fn softmax_row(row: &mut [f32]) {
        // A compare-and-select, not `f32::max`: wasm has no NaN-ignoring max instruction, so
        // `f32::max` was a call to libm's `fmaxf` per element there (2% of a forward). A NaN
        // score still makes the whole row NaN, through its own `exp`.
        let max = fold_lanes(row, f32::NEG_INFINITY, |m, x| if x > m { x } else { m });
        row.iter_mut().for_each(|v| *v = exp_f32(*v - max));
        let inv = 1.0 / fold_lanes(row, 0.0, |a, b| a + b);
        row.iter_mut().for_each(|v| *v *= inv);
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
        let tail: f32 =
            d_chunks.remainder().iter().zip(p_chunks.remainder()).map(|(a, b)| a * b).sum();
        let dot = products.into_iter().fold(tail, |a, b| a + b);
        d.iter_mut().zip(p).for_each(|(d, p)| *d = scale * p * (*d - dot));
    }
}
