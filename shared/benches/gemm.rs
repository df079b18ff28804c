//! The matrix products of one MiniLM layer (batch 16, seq 128) on the CPU backend, next to
//! PyTorch's on the same machine in the same run.
//!
//! The forward benchmark is a ratio of whole passes; this one separates the GEMMs from
//! everything around them. The summary adds the products up per BERT forward (6 layers), which is
//! the least time any forward built on this GEMM can take, and sets it beside PyTorch's. Run by
//! `make bench`; without IMBERT_PYTHON the PyTorch column is skipped and said so.

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::path::PathBuf;
use std::time::Duration;

use burn::backend::NdArray;
use burn::tensor::{Distribution, Tensor};
use criterion::Criterion;
use shared::cpu::kernels;
use std::hint::black_box;

mod peer;

type B = NdArray<f32>;
const LAYERS: usize = 6;

/// `(name, lhs shape, rhs shape, products per layer forward)`. The Linear layers run as the model
/// runs them, one 2-D product over all `batch * seq` rows (leading dimensions 1 here); attention
/// as `[batch, heads, m, k] x [batch, heads, k, n]`.
const PRODUCTS: [(&str, [usize; 4], [usize; 4], usize); 5] = [
    ("qkv", [1, 1, 2048, 384], [1, 1, 384, 1152], 1),
    ("attn_out", [1, 1, 2048, 384], [1, 1, 384, 384], 1),
    ("ffn_in", [1, 1, 2048, 384], [1, 1, 384, 1536], 1),
    ("ffn_out", [1, 1, 2048, 1536], [1, 1, 1536, 384], 1),
    ("attention", [16, 12, 128, 32], [16, 12, 32, 128], 2),
];

fn flops(lhs: [usize; 4], rhs: [usize; 4]) -> f64 {
    2.0 * (lhs[0] * lhs[1] * lhs[2] * lhs[3] * rhs[3]) as f64
}

fn main() {
    std::sync::LazyLock::force(&peer::PROCESS_START);
    shared::cpu::allocator::keep_freed_pages();
    let mut c = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    let mut group = c.benchmark_group("minilm_gemm");
    // The products as the model runs them (`kernels::linear` and `kernels::matmul`, split over
    // rayon's threads); burn-ndarray computes eagerly, so each is done when the call returns.
    let device = Default::default();
    for (name, lhs, rhs, _) in PRODUCTS {
        let a = Tensor::<B, 4>::random(lhs, Distribution::Normal(0.0, 1.0), &device);
        let b = Tensor::<B, 4>::random(rhs, Distribution::Normal(0.0, 1.0), &device);
        if lhs[0] * lhs[1] == 1 {
            let (a, b): (Tensor<B, 2>, Tensor<B, 2>) =
                (a.squeeze_dims(&[0, 1]), b.squeeze_dims(&[0, 1]));
            group.bench_function(name, |bench| {
                bench.iter(|| black_box(kernels::linear(a.clone(), b.clone(), None)))
            });
        } else {
            group.bench_function(name, |bench| {
                bench.iter(|| black_box(kernels::matmul(a.clone(), b.clone())))
            });
        }
    }
    group.finish();
    c.final_summary();
    report();
}

fn report() {
    let shapes: serde_json::Map<String, serde_json::Value> = PRODUCTS
        .iter()
        .map(|(name, lhs, rhs, _)| (name.to_string(), serde_json::json!([lhs, rhs])))
        .collect();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("benches/gemm_torch.py");
    let torch = peer::pytorch_timings(
        &script,
        &[serde_json::Value::Object(shapes).to_string(), threads.to_string(), "20".into()],
    );
    let ours = |name: &str| peer::criterion_median("minilm_gemm", name);
    println!(
        "\nMiniLM-L6 layer GEMMs, batch 16, seq 128, CPU ({threads} threads), GEMM: {}",
        shared::cpu::blas::cpu_gemm()
    );
    println!(
        "{:<22} {:>10} {:>10} {:>12} {:>12} {:>9}",
        "product", "ours (ms)", "GFLOP/s", "PyTorch (ms)", "GFLOP/s", "ours/PT"
    );
    let (mut total_ours, mut total_pt) = (0.0, Some(0.0));
    for (name, lhs, rhs, per_layer) in PRODUCTS {
        let Some(t) = ours(name) else { continue };
        let pt = torch.as_ref().and_then(|v| v[name].as_f64());
        let f = flops(lhs, rhs);
        total_ours += t * (per_layer * LAYERS) as f64;
        total_pt = total_pt.zip(pt).map(|(s, p)| s + p * (per_layer * LAYERS) as f64);
        let (pt_ms, pt_rate, ratio) = match pt {
            Some(p) => {
                (format!("{:.2}", p * 1e3), format!("{:.0}", f / p / 1e9), format!("{:.2}x", t / p))
            }
            None => ("n/a".into(), "n/a".into(), "n/a".into()),
        };
        println!(
            "{name:<22} {:>10.2} {:>10.0} {pt_ms:>12} {pt_rate:>12} {ratio:>9}",
            t * 1e3,
            f / t / 1e9
        );
    }
    match total_pt {
        Some(pt) if torch.is_some() => println!(
            "GEMMs of one BERT forward ({LAYERS} layers): ours {:.3} s, PyTorch {:.3} s ({:.2}x)",
            total_ours,
            pt,
            total_ours / pt
        ),
        _ => {
            println!("GEMMs of one BERT forward ({LAYERS} layers): ours {total_ours:.3} s");
            println!(
                "(PyTorch column skipped: set IMBERT_PYTHON to a python with torch, \
                 or run `make bench`)"
            );
        }
    }
}
