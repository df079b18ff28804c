//! Forward pass of MiniLM-L6 (batch 16, seq 128) on the CPU for BERT, EX-BERT and IM-BERT, next
//! to PyTorch eager doing the same on the same machine in the same run.
//!
//! `make bench` (sets IMBERT_PYTHON to the venv with torch). Without IMBERT_PYTHON the PyTorch
//! column is skipped and said so.

// The allocator the trainer runs with, so the figures are the trainer's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::path::PathBuf;
use std::time::Duration;

use burn::backend::NdArray;
use burn::tensor::{Int, Tensor, TensorData};
use std::hint::black_box;

mod peer;

use criterion::Criterion;
use shared::checkpoint::load_classifier;
use shared::{BertClassifier, BertInput, ConnectionSpec, ForwardOptions};

type B = NdArray<f32>;
const BATCH: usize = 16;
const SEQ: usize = 128;
const CONFIGS: [(&str, &str); 4] =
    [("bert", "bert"), ("ex", "ex"), ("im_all", "im:T=5,gamma=0.1"), ("im_2_3", "im:T=5,gamma=0.1,layers=2-3")];

fn model_dir() -> PathBuf {
    std::env::var_os("IMBERT_MINILM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../models/all-minilm-l6-v2"))
}

fn input() -> BertInput<B> {
    // Same token ids as forward_torch.py is not needed: cost does not depend on the ids.
    let ids: Vec<i64> = (0..BATCH * SEQ)
        .map(|i| match i % SEQ { 0 => 101, j if j == SEQ - 1 => 102, j => 1000 + (j as i64 * 7919 + i as i64) % 19000 })
        .collect();
    let t = |v: Vec<i64>| Tensor::<B, 2, Int>::from_data(TensorData::new(v, [BATCH, SEQ]), &Default::default());
    BertInput { input_ids: t(ids), token_type_ids: t(vec![0; BATCH * SEQ]), attention_mask: t(vec![1; BATCH * SEQ]) }
}

fn main() {
    shared::allocator::keep_freed_pages();
    let dir = model_dir();
    let (base, _) = load_classifier::<B>(&dir, Some(2), &Default::default())
        .unwrap_or_else(|e| panic!("{e}: run `make model` first"));
    let x = input();
    let mut c = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5))
        .configure_from_args();
    let mut group = c.benchmark_group("minilm_forward_b16_s128");
    for (name, spec) in CONFIGS {
        let model: BertClassifier<B> = base.clone().with_connections(&ConnectionSpec::parse(spec).unwrap()).unwrap();
        group.bench_function(name, |b| {
            b.iter(|| {
                let out = model.forward(black_box(&x), ForwardOptions::default());
                // Wait for the result: burn may run lazily.
                black_box(out.logits.unwrap().into_data());
            })
        });
    }
    group.finish();
    c.final_summary();
    report(&dir);
}

/// Reads criterion's estimates, runs the PyTorch script, prints ratios.
fn report(dir: &std::path::Path) {
    let ours: Vec<(&str, f64)> = CONFIGS
        .iter()
        .filter_map(|(name, _)| Some((*name, peer::criterion_median("minilm_forward_b16_s128", name)?)))
        .collect();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("benches/forward_torch.py");
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let args = [dir.to_string_lossy().into_owned(), BATCH.to_string(), SEQ.to_string(), threads.to_string(), "5".into()];
    let torch = peer::pytorch_timings(&script, &args);
    let bert = ours.iter().find(|(n, _)| *n == "bert").map(|(_, t)| *t);
    println!("\nMiniLM-L6 forward, batch {BATCH}, seq {SEQ}, CPU ({} threads), GEMM: {}", rayon_threads(), shared::blas::cpu_gemm());
    println!("{:<8} {:>10} {:>12} {:>10} {:>14}", "config", "ours (s)", "PyTorch (s)", "ours/PT", "ours/our BERT");
    for (name, t) in &ours {
        let pt = torch.as_ref().and_then(|v| v[*name].as_f64());
        let vs_pt = pt.map_or("n/a".to_string(), |p| format!("{:.2}x", t / p));
        let pt_s = pt.map_or("n/a".to_string(), |p| format!("{p:.3}"));
        let vs_bert = bert.map_or("n/a".to_string(), |b| format!("{:.2}x", t / b));
        println!("{name:<8} {t:>10.3} {pt_s:>12} {vs_pt:>10} {vs_bert:>14}");
    }
    if torch.is_none() {
        println!("(PyTorch column skipped: set IMBERT_PYTHON to a python with torch + transformers, or run `make bench`)");
    }
}

fn rayon_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}
