//! Dropout: the keep mask, drawn on all threads from a counter-based generator, and the product
//! with it.

use std::any::Any;

use burn::tensor::backend::Backend;
use burn::tensor::Tensor;

#[cfg(not(target_arch = "wasm32"))]
use super::autodiff;
use super::rows_in_place;

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
        return Tensor::random(like.shape(), Distribution::Bernoulli(1.0 - p), &device)
            .mul_scalar(1.0 / (1.0 - p));
    }
    let draw = Tensor::<B, 1, Int>::random([2], Distribution::Uniform(0.0, 4294967296.0), &device);
    let seed = draw
        .into_data()
        .convert::<i64>()
        .into_vec::<i64>()
        .unwrap_or_default()
        .iter()
        .fold(0u64, |s, &v| (s << 32) ^ v as u64);
    let mask = keep_mask(seed, like.shape().num_elements(), p);
    Tensor::from_data(TensorData::new(mask, like.shape()), (&device, DType::F32))
}

/// [`dropout_keep`]'s CPU mask of `n` elements for `seed`.
pub(super) fn keep_mask(seed: u64, n: usize, p: f64) -> Vec<f32> {
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

/// Dropout with a keep mask from [`dropout_keep`]: `x * keep`, one pass over `x`'s buffer on the
/// CPU. Its backward is the same product.
pub fn times_keep<B: Backend, const D: usize>(
    x: Tensor<B, D>,
    keep: &Tensor<B, D>,
) -> Tensor<B, D> {
    #[cfg(not(target_arch = "wasm32"))]
    let x = match autodiff::times_keep(x, keep) {
        Ok(y) => return y,
        Err(x) => x,
    };
    if x.dims() != keep.dims() {
        return x * keep.clone(); // burn's own op broadcasts or reports the mismatch
    }
    let kernel = |_: usize, out: &mut [f32], [keep]: [&[f32]; 1]| {
        out.iter_mut().zip(keep).for_each(|(o, k)| *o *= k)
    };
    rows_in_place(x, [keep], kernel).unwrap_or_else(|x| x * keep.clone())
}
