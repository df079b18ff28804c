//! Fused elementwise kernels for the plain CPU backend, where burn's composed ops are slow.
//!
//! burn-ndarray runs each elementwise op as its own pass over memory, on one thread, and its
//! `erf` goes element by element through f64 `libm`: in a MiniLM forward, the exact GELU's `erf`
//! alone took 13% of the time, and softmax's and LayerNorm's many passes much of the rest outside
//! the GEMMs. When the backend is burn-ndarray with f32 data (inference: evaluation, attacks,
//! the demo's CPU fallback), the functions here run one pass, split over threads. On every other backend, f64
//! and autodiff included, they compose burn's own ops, so training and the gradient checks see
//! exactly the code they always did.
//!
//! The backend is recognised at run time (`Any` on the tensor primitive), which keeps the model
//! generic over `B: Backend` instead of adding a kernel trait to every bound in the code base.

use std::any::Any;

use burn::tensor::activation::softmax;
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorPrimitive};
use burn_ndarray::{NdArrayTensor, SharedArray};

/// `Phi(x) = (1 + erf(x / sqrt 2)) / 2`, the standard normal CDF (exact GELU is `x Phi(x)`).
pub fn normal_cdf<B: Backend, const D: usize>(x: Tensor<B, D>) -> Tensor<B, D> {
    match on_cpu_f32(x, |_, buf| for_blocks(buf, 1 << 14, |b| b.iter_mut().for_each(|v| *v = cdf_f32(*v)))) {
        Ok(y) => y,
        Err(x) => x.mul_scalar(std::f64::consts::FRAC_1_SQRT_2).erf().add_scalar(1.0).mul_scalar(0.5),
    }
}

/// Softmax over the last dimension.
pub fn softmax_last<B: Backend, const D: usize>(x: Tensor<B, D>) -> Tensor<B, D> {
    let kernel = |shape: &[usize], buf: &mut [f32]| {
        let row = shape[shape.len() - 1];
        if row > 0 {
            for_blocks(buf, row * (1usize << 14).div_ceil(row), |b| b.chunks_mut(row).for_each(softmax_row));
        }
    };
    match on_cpu_f32(x, kernel) {
        Ok(y) => y,
        Err(x) => softmax(x, D - 1),
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
    let rows = x.len() / width.max(1);
    let mut y = vec![0.0f32; x.len()];
    let mut x_hat = vec![0.0f32; x.len()];
    let mut rstd = vec![0.0f32; rows];
    let block = (1usize << 12).div_ceil(width.max(1));
    let work = |(((x, y), x_hat), rstd): (((&[f32], &mut [f32]), &mut [f32]), &mut [f32])| {
        let rows = x.chunks(width).zip(y.chunks_mut(width)).zip(x_hat.chunks_mut(width)).zip(rstd);
        for (((x, y), x_hat), r) in rows {
            // f64 sums: one pass, no cancellation worth speaking of at BERT's widths.
            let mean = x.iter().map(|&v| v as f64).sum::<f64>() / width as f64;
            let var = x.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / width as f64;
            *r = (1.0 / (var + eps).sqrt()) as f32;
            let mean = mean as f32;
            for (j, ((h, o), &v)) in x_hat.iter_mut().zip(y.iter_mut()).zip(x).enumerate() {
                *h = (v - mean) * *r;
                *o = *h * gamma[j] + beta.map_or(0.0, |b| b[j]);
            }
        }
    };
    let (n, bn) = (block * width, block);
    #[cfg(not(target_arch = "wasm32"))]
    {
        use rayon::prelude::*;
        x.par_chunks(n).zip(y.par_chunks_mut(n)).zip(x_hat.par_chunks_mut(n)).zip(rstd.par_chunks_mut(bn)).for_each(work);
    }
    #[cfg(target_arch = "wasm32")]
    x.chunks(n).zip(y.chunks_mut(n)).zip(x_hat.chunks_mut(n)).zip(rstd.chunks_mut(bn)).for_each(work);

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

/// `Phi(x)` with `erf` from Abramowitz & Stegun 7.1.26 (error below 1.5e-7): one `exp` and no
/// branches, about twice as fast as `libm::erff`. In f32 the result is within 4e-7 of `Phi`
/// (test below), near f32's resolution of `Phi` close to 1.
fn cdf_f32(x: f32) -> f32 {
    let z = (x * std::f32::consts::FRAC_1_SQRT_2).abs();
    let t = 1.0 / (1.0 + 0.327_591_1 * z);
    let poly = t * (0.254_829_6 + t * (-0.284_496_74 + t * (1.421_413_7 + t * (-1.453_152 + t * 1.061_405_4))));
    let erf = (1.0 - poly * (-z * z).exp()).copysign(x);
    0.5 * (1.0 + erf)
}

/// Softmax of one row in place. Max-subtracted, as burn's: padded keys carry -1e9 and must come
/// out as exactly 0.
pub(crate) fn softmax_row(row: &mut [f32]) {
    let max = row.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
    let mut sum = 0.0;
    for v in row.iter_mut() {
        *v = (*v - max).exp();
        sum += *v;
    }
    let inv = 1.0 / sum;
    row.iter_mut().for_each(|v| *v *= inv);
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

/// `x`'s f32 array in standard (row-major, contiguous) layout when `B` is burn-ndarray holding
/// f32; otherwise `x` itself as the error.
fn cpu_f32<B: Backend, const D: usize>(x: Tensor<B, D>) -> Result<SharedArray<f32>, Tensor<B, D>> {
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
    let array: SharedArray<f32> = storage.into_owned();
    Ok(if array.is_standard_layout() { array } else { array.as_standard_layout().into_owned().into_shared() })
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
    use burn::tensor::{DType, TensorData};

    type Cpu = NdArray<f32>;

    /// An f32 tensor whatever the device's default dtype (f64 tests in this binary share the
    /// device, and the first tensor made fixes its default).
    fn f32_tensor<B: Backend, const D: usize>(values: Vec<f32>, shape: [usize; D]) -> Tensor<B, D> {
        Tensor::from_data(TensorData::new(values, shape), (&Default::default(), DType::F32))
    }

    fn values<B: Backend, const D: usize>(t: Tensor<B, D>) -> Vec<f32> {
        t.into_data().convert::<f32>().into_vec().unwrap()
    }

    /// Deterministic pseudo-normal values with standard deviation about `scale`.
    fn noise(n: usize, scale: f32) -> Vec<f32> {
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

    fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
        assert_eq!(a.len(), b.len());
        // A NaN anywhere makes the result NaN, so the callers' asserts fail.
        a.iter().zip(b).fold(0.0, |m, (x, y)| if (x - y).is_nan() { f32::NAN } else { m.max((x - y).abs()) })
    }

    /// The f32 kernel against f64 `erf` on the same inputs.
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

    #[test]
    fn softmax_kernel_matches_burn_with_masked_keys() {
        let scores = f32_tensor::<Cpu, 4>(noise(2 * 3 * 5 * 7, 4.0), [2, 3, 5, 7]);
        let bias: Vec<f32> = (0..14).map(|i| if i % 7 >= 5 { -1.0e9 } else { 0.0 }).collect();
        let scores = scores + f32_tensor::<Cpu, 4>(bias, [2, 1, 1, 7]);
        let ours = softmax_last(scores.clone());
        let masked = values(ours.clone().slice([0..2, 0..3, 0..5, 5..7]));
        assert!(masked.iter().all(|&p| p == 0.0), "padded keys get exactly 0");
        let diff = max_abs_diff(&values(ours), &values(softmax(scores, 3)));
        assert!(diff < 1e-6, "{diff}");
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

    /// A transposed (non-contiguous) input and a shared buffer are handled, the input unchanged.
    #[test]
    fn kernels_leave_shared_and_strided_inputs_intact() {
        let x = f32_tensor::<Cpu, 2>(noise(24, 1.0), [4, 6]);
        let before = values(x.clone());
        let y = softmax_last(x.clone().transpose());
        assert_eq!(values(x.clone()), before);
        let diff = max_abs_diff(&values(y), &values(softmax(x.transpose(), 1)));
        assert!(diff < 1e-6, "{diff}");
    }

    /// Under autodiff the composed ops run, so gradients flow as before.
    #[test]
    fn autodiff_takes_the_composed_path() {
        let xs = [-1.0f32, 0.5, 2.0];
        let x = f32_tensor::<Autodiff<Cpu>, 1>(xs.to_vec(), [3]).require_grad();
        let grads = normal_cdf(x.clone()).sum().backward();
        let g = values(x.grad(&grads).unwrap());
        // d/dx Phi(x) = exp(-x^2 / 2) / sqrt(2 pi)
        for (gi, xi) in g.iter().zip(xs) {
            let pdf = (-xi * xi / 2.0).exp() / (2.0 * std::f32::consts::PI).sqrt();
            assert!((gi - pdf).abs() < 1e-6, "{gi} vs {pdf}");
        }
    }
}
