//! Forward pass of MiniLM-L6 (batch 16, seq 128) on the CPU for BERT, EX-BERT and IM-BERT, next
//! to PyTorch eager doing the same on the same machine in the same run.
//!
//! `make bench` (sets IMBERT_PYTHON to the venv with torch). Without IMBERT_PYTHON the PyTorch
//! column is skipped and said so. The last column is each config's matmul FLOPs over BERT's
//! (`shared::model::flops`): the time ratio that code equally fast on every product would show.
//! An IM layer runs `1 + T` forwards and `T` VJPs, and a VJP costs a forward plus two attention
//! products.

// The allocator the trainer runs with, so the figures are the trainer's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::path::PathBuf;
use std::time::Duration;

use burn::backend::NdArray;
use std::hint::black_box;

mod minilm;
mod peer;

use criterion::Criterion;
use minilm::{model_dir, synthetic_input};
use shared::io::checkpoint::load_classifier;
use shared::model::flops::forward_flops;
use shared::{BertClassifier, BertConfig, BertInput, ConnectionSpec, ForwardOptions};

type B = NdArray<f32>;
const BATCH: usize = 16;
const SEQ: usize = 128;
const CONFIGS: [(&str, &str); 4] = [
    ("bert", "bert"),
    ("ex", "ex"),
    ("im_all", "im:T=5,gamma=0.1"),
    ("im_2_3", "im:T=5,gamma=0.1,layers=2-3"),
];

fn main() {
    std::sync::LazyLock::force(&peer::PROCESS_START);
    shared::cpu::allocator::keep_freed_pages();
    let dir = model_dir();
    let (base, _) = load_classifier::<B>(&dir, Some(2), &Default::default())
        .unwrap_or_else(|e| panic!("{e}: run `make model` first"));
    let x = synthetic_input::<B>(BATCH, SEQ, &Default::default());
    let mut c = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5))
        .configure_from_args();
    let mut group = c.benchmark_group("minilm_forward_b16_s128");
    let models: Vec<(&str, &str, BertClassifier<B>)> = CONFIGS
        .iter()
        .map(|&(name, spec)| {
            (
                name,
                spec,
                base.clone().with_connections(&ConnectionSpec::parse(spec).unwrap()).unwrap(),
            )
        })
        .collect();
    for (name, _, model) in &models {
        group.bench_function(*name, |b| {
            b.iter(|| {
                let out = model.forward(black_box(&x), ForwardOptions::default());
                // Wait for the result: burn may run lazily.
                black_box(out.logits.unwrap().into_data());
            })
        });
    }
    group.finish();
    c.final_summary();
    report(&dir, &models, &x, &base.config);
}

/// Matmul FLOPs of `spec`'s forward over BERT's (`shared::model::flops`): the ratio that equally
/// efficient code would show in the last column.
fn flop_ratio(config: &BertConfig, spec: &str) -> f64 {
    let flops = |spec: &str| {
        let connections = ConnectionSpec::parse(spec)
            .and_then(|s| s.per_layer(config.num_hidden_layers))
            .expect("a valid spec");
        forward_flops(config, &connections, SEQ, true)
    };
    flops(spec) / flops("bert")
}

/// Seconds of paired rounds to spend per config (each round at least one forward of each side).
const PAIRED_SECONDS: f64 = 20.0;

/// Prints criterion's medians and, when IMBERT_PYTHON is set, the ratios to PyTorch from paired
/// rounds: one forward of ours, then the same forward in PyTorch, round after round. On a noisy
/// machine a ratio of two medians taken minutes apart moved by 30%; paired, both sides of each
/// round see the same load.
fn report(
    dir: &std::path::Path,
    models: &[(&str, &str, BertClassifier<B>)],
    x: &BertInput<B>,
    config: &BertConfig,
) {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("benches/forward_torch.py");
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let args = [
        dir.to_string_lossy().into_owned(),
        BATCH.to_string(),
        SEQ.to_string(),
        threads.to_string(),
    ];
    let mut peer = peer::Peer::start(&script, &args);
    let bert = peer::criterion_median("minilm_forward_b16_s128", "bert");
    let mut rows = Vec::new();
    for (name, spec, model) in models {
        let Some(ours) = peer::criterion_median("minilm_forward_b16_s128", name) else { continue };
        let paired = peer.as_mut().and_then(|peer| paired_rounds(peer, name, model, x));
        rows.push((*name, *spec, ours, paired));
    }
    println!(
        "\nMiniLM-L6 forward, batch {BATCH}, seq {SEQ}, CPU ({threads} threads), GEMM: {}",
        shared::cpu::blas::cpu_gemm()
    );
    println!(
        "{:<8} {:>9} {:>12} {:>9} {:>13} {:>7} {:>14} {:>11}",
        "config",
        "ours (s)",
        "PyTorch (s)",
        "ours/PT",
        "(min-max)",
        "rounds",
        "ours/our BERT",
        "FLOPs/BERT"
    );
    for (name, spec, ours, paired) in rows {
        let (pt, ratio, range, rounds) = match paired {
            Some(p) => (
                format!("{:.3}", p.pytorch),
                format!("{:.2}x", p.ratio),
                format!("{:.2}-{:.2}", p.min, p.max),
                p.rounds.to_string(),
            ),
            None => ("n/a".into(), "n/a".into(), String::new(), "0".into()),
        };
        let vs_bert = bert.map_or("n/a".to_string(), |b| format!("{:.2}x", ours / b));
        let flops = format!("{:.2}x", flop_ratio(config, spec));
        println!(
            "{name:<8} {ours:>9.3} {pt:>12} {ratio:>9} {range:>13} {rounds:>7} \
             {vs_bert:>14} {flops:>11}"
        );
    }
    println!(
        "ours: criterion's median. PyTorch and ours/PT: medians over the paired rounds \
         (one forward each, in turn)."
    );
    if peer.is_none() {
        println!(
            "(PyTorch columns skipped: set IMBERT_PYTHON to a python with torch + transformers, \
             or run `make bench`)"
        );
    }
}

/// The PyTorch side of one config over paired rounds: its median seconds and the median, least
/// and greatest of the per-round ratios ours / PyTorch.
struct Paired {
    pytorch: f64,
    ratio: f64,
    min: f64,
    max: f64,
    rounds: usize,
}

fn paired_rounds(
    peer: &mut peer::Peer,
    name: &str,
    model: &BertClassifier<B>,
    x: &BertInput<B>,
) -> Option<Paired> {
    let ours = || {
        let start = std::time::Instant::now();
        black_box(
            model.forward(black_box(x), ForwardOptions::default()).logits.map(|l| l.into_data()),
        );
        start.elapsed().as_secs_f64()
    };
    // One warm-up round, which also sizes the rest.
    let round = ours() + peer.time(name)?;
    let rounds = ((PAIRED_SECONDS / round).ceil() as usize).clamp(3, 15);
    let (mut pytorch, mut ratios) = (Vec::with_capacity(rounds), Vec::with_capacity(rounds));
    for _ in 0..rounds {
        let ours = ours();
        let theirs = peer.time(name)?;
        pytorch.push(theirs);
        ratios.push(ours / theirs);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (min, max) = (
        ratios.iter().copied().fold(f64::INFINITY, f64::min),
        ratios.iter().copied().fold(0.0, f64::max),
    );
    Some(Paired { pytorch: median(&mut pytorch), ratio: median(&mut ratios), min, max, rounds })
}
