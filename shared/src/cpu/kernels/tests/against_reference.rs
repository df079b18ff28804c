//! Each kernel against a reference written with burn's plain ops on f64 (`check_kernel!`): the
//! inference output, the training output and the gradient of `sum(out * r)` for every input.

use super::*;

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
        kernel |t| linear(
            t[0].clone(),
            t[1].clone().reshape([40, 24]),
            Some(t[2].clone().reshape([24])),
        ),
        reference |t| t[0].clone().matmul(t[1].clone()) + t[2].clone());
    check_kernel!([[2, 5, 40], [1, 24, 40]], scale 1.0, tracked [true; 2], tol 2e-5,
        kernel |t| linear(t[0].clone(), t[1].clone().reshape([24, 40]).transpose(), None),
        reference |t| t[0].clone().matmul(t[1].clone().swap_dims(1, 2)));
    let y = linear(
        f32_tensor::<Cpu, 3>(noise(80, 1.0), [2, 1, 40]),
        f32_tensor(noise(40 * 24, 1.0), [40, 24]),
        None,
    );
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
        kernel |t| matmul(
            t[0].clone().swap_dims(1, 2),
            t[1].clone().swap_dims(1, 2).swap_dims(2, 3),
        ),
        reference |t| t[0]
            .clone()
            .swap_dims(1, 2)
            .matmul(t[1].clone().swap_dims(1, 2).swap_dims(2, 3)));
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
    let b_views: [(&str, ArrayView2<f32>); 2] =
        [("row-major", b_row_major.view()), ("transposed", bt.t())];
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
                            assert!(
                                got.is_nan() || got == start,
                                "column {j} past the product was written"
                            );
                            continue;
                        }
                        let dot: f64 = (0..k).map(|l| av[[i, l]] as f64 * bv[[l, j]] as f64).sum();
                        let want = if beta == 0.0 { dot } else { dot + start as f64 };
                        assert!(
                            (got as f64 - want).abs() < 1e-5,
                            "{a_name} x {b_name}, beta {beta}: [{i}, {j}] {got} vs {want}"
                        );
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
    let products = vec![
        (s.clone(), k.clone()),
        (s.clone().swap_dims(2, 3), q.clone()),
        (s.clone(), v.clone()),
    ];
    let ours = matmul_merged(products.clone());
    assert_eq!(ours.dims(), [batch, seq, 3 * hidden]);
    let merge = |(a, b): (Tensor<Cpu, 4>, Tensor<Cpu, 4>)| {
        a.matmul(b).swap_dims(1, 2).reshape([batch, seq, hidden])
    };
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
    let probs = softmax_reference(
        q.clone().matmul(k.clone().swap_dims(2, 3)).mul_scalar(scale) + bias.clone(),
    );
    let context = merge(probs.clone().matmul(v.clone()));
    let (fused_context, fused_probs) =
        attention(&q, &k, &v, &bias, scale, true).expect("CPU f32 data");
    assert!(max_abs_diff(&values(fused_context.clone()), &values(context.clone())) < 1e-6);
    assert!(max_abs_diff(&values(fused_probs.expect("kept")), &values(probs.clone())) < 1e-7);
    let (unkept_context, none) = attention(&q, &k, &v, &bias, scale, false).expect("CPU f32 data");
    assert!(none.is_none());
    assert_eq!(values(unkept_context), values(fused_context));

    let dcontext = split_heads(
        f32_tensor::<Cpu, 3>(noise(batch * seq * hidden, 1.0), [batch, seq, hidden]),
        1,
        0,
        heads,
    );
    let dprobs = dcontext.clone().matmul(v.clone().swap_dims(2, 3));
    let dscores =
        (probs.clone() * (dprobs.clone() - (dprobs * probs.clone()).sum_dim(3))).mul_scalar(scale);
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
        reference |t| (t[1].clone() * (t[0].clone() - (t[0].clone() * t[1].clone()).sum_dim(3)))
            .mul_scalar(0.35));
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
    check_kernel!([[3, 4, 50], [3, 4, 50], [3, 4, 50], [3, 4, 1]], scale 2.0,
        tracked [true, true, true, false], tol 2e-5,
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
        reference |t| t[0].clone()
            * (cdf_reference(t[1].clone()) + t[1].clone() * pdf_reference(t[1].clone())));
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
        kernel |t| {
            let (g, b) = gamma_beta(&t);
            layer_norm(t[0].clone().add_scalar(5.0), g, b, eps).0
        },
        reference |t| normalise_reference(t[0].clone().add_scalar(5.0), eps).0 * t[1].clone()
            + t[2].clone());
    check_kernel!(shapes[..2], scale 2.0, tracked [true; 2], tol 2e-5,
        kernel |t| {
            layer_norm(t[0].clone().add_scalar(5.0), t[1].clone().reshape([48]), None, eps).0
        },
        reference |t| normalise_reference(t[0].clone().add_scalar(5.0), eps).0 * t[1].clone());
    check_kernel!(shapes, scale 2.0, tracked [true, false, false], tol 2e-5,
        kernel |t| {
            let (g, b) = gamma_beta(&t);
            layer_norm(t[0].clone().add_scalar(5.0), g, b, eps).1
        },
        reference |t| normalise_reference(t[0].clone().add_scalar(5.0), eps).0);
    check_kernel!(shapes, scale 2.0, tracked [true, false, false], tol 2e-5,
        kernel |t| {
            let (g, b) = gamma_beta(&t);
            layer_norm(t[0].clone().add_scalar(5.0), g, b, eps).2
        },
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
    let (g, b) =
        (f32_tensor::<Cpu, 1>(gamma.clone(), [width]), f32_tensor::<Cpu, 1>(beta.clone(), [width]));
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
    let parts: Vec<Tensor<Cpu, 2>> =
        [3, 5, 2].iter().map(|&w| f32_tensor::<Cpu, 2>(noise(7 * w, 1.0), [7, w])).collect();
    let joined = concat(parts.clone());
    assert_eq!(joined.dims(), [7, 10]);
    assert_eq!(values(joined), values(Tensor::cat(parts, 1)));
    let vectors: Vec<Tensor<Cpu, 1>> =
        [4, 1].iter().map(|&w| f32_tensor::<Cpu, 1>(noise(w, 1.0), [w])).collect();
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
    let (g, b) = (
        f32_tensor::<Cpu, 1>(noise(width, 1.0), [width]),
        f32_tensor::<Cpu, 1>(noise(width, 0.5), [width]),
    );
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

/// The public runner on blocks that do not divide the data evenly, with a written buffer held
/// elsewhere (copied, the holder unchanged); and the tensors handed back as they were when a
/// shape differs or the data is not f32.
#[test]
fn elementwise_in_place_updates_cpu_f32_and_hands_back_the_rest() {
    let (a, b) = (noise(1000, 1.0), noise(1001, 1.0)[1..].to_vec());
    let (x, y) =
        (f32_tensor::<Cpu, 2>(a.clone(), [10, 100]), f32_tensor::<Cpu, 2>(b.clone(), [10, 100]));
    let kernel = |[s, p]: [&mut [f32]; 2], [y]: [&[f32]; 1]| {
        s.iter_mut().zip(p.iter_mut()).zip(y).for_each(|((s, p), y)| (*s, *p) = (*s + y, *p * y));
    };
    let [sum, product] =
        elementwise_in_place([x.clone(), x.clone()], [&y], 64, kernel).expect("CPU f32 data");
    assert_eq!(values(sum), a.iter().zip(&b).map(|(a, b)| a + b).collect::<Vec<_>>());
    assert_eq!(values(product), a.iter().zip(&b).map(|(a, b)| a * b).collect::<Vec<_>>());
    assert_eq!(values(x.clone()), a);
    let other_shape = f32_tensor::<Cpu, 2>(b.clone(), [100, 10]);
    let [back, _] = elementwise_in_place([x.clone(), x], [&other_shape], 64, kernel)
        .expect_err("shapes differ");
    assert_eq!(values(back), a);
    let f64_data = tensor_of::<NdArray<f64>, 2>(a.clone(), [10, 100], DType::F64);
    let y64 = tensor_of::<NdArray<f64>, 2>(b, [10, 100], DType::F64);
    let [back, _] = elementwise_in_place([f64_data.clone(), f64_data], [&y64], 64, kernel)
        .expect_err("f64 data");
    assert_eq!(values(back), a);
}
