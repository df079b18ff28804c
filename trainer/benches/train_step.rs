//! One training step (forward, backward, AdamW) of MiniLM-L6 at batch 16, seq 128 on the CPU, for
//! BERT and IM-BERT (T=5, all layers, exact second-order gradient), next to PyTorch eager doing
//! the same step in the same run (`make bench` sets IMBERT_PYTHON). Prints examples/s and the
//! time ratio; the target is at most 1.2x PyTorch's time. Also times the AdamW update alone,
//! ours (fused on the CPU) against burn's `AdamW`, on the same gradients.

// The allocator the trainer runs with, so the figures are the trainer's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::path::PathBuf;
use std::time::Instant;

use burn::optim::{AdamWConfig, GradientsParams, Optimizer};
use shared::{BertClassifier, ConnectionSpec};
use trainer::adamw::AdamW;

mod common;
#[path = "../../shared/benches/peer/mod.rs"]
mod peer;

use common::{model_dir, Setup, B};

const BATCH: usize = 16;
const SEQ: usize = 128;
const REPS: usize = 3;

fn median(mut times: Vec<f64>) -> Option<f64> {
    times.sort_by(f64::total_cmp);
    times.get(times.len() / 2).copied()
}

/// Median seconds of a whole training step with our AdamW, after one warm-up step.
fn time_steps(setup: &Setup, spec: &str) -> f64 {
    let mut model =
        setup.base.clone().with_connections(&ConnectionSpec::parse(spec).unwrap()).unwrap();
    let mut optim = AdamW::new(0.9, 0.999, 1e-8, 0.0).init::<B, BertClassifier<B>>();
    let mut times = Vec::new();
    for rep in 0..=REPS {
        let start = Instant::now();
        let grads = GradientsParams::from_grads(setup.loss(&model).backward(), &model);
        model = optim.step(2e-5, model, grads);
        // Wait for the update to finish.
        let _ = model.bert.pooler.dense.weight.val().into_data();
        if rep > 0 {
            times.push(start.elapsed().as_secs_f64());
        }
    }
    median(times).unwrap_or(f64::NAN)
}

/// Median seconds of the update alone, ours then burn's `AdamW`, on fresh gradients (from the
/// second step on, when the moments exist).
fn time_updates(setup: &Setup) -> (f64, f64) {
    let mut fused = AdamW::new(0.9, 0.999, 1e-8, 0.0).init::<B, BertClassifier<B>>();
    let mut burns =
        AdamWConfig::new().with_epsilon(1e-8).with_weight_decay(0.0).init::<B, BertClassifier<B>>();
    let (mut a, mut b) = (setup.base.clone(), setup.base.clone());
    let (mut fused_times, mut burn_times) = (Vec::new(), Vec::new());
    for rep in 0..=REPS {
        let g = GradientsParams::from_grads(setup.loss(&a).backward(), &a);
        let start = Instant::now();
        a = fused.step(2e-5, a, g);
        let _ = a.bert.pooler.dense.weight.val().into_data();
        let fused_secs = start.elapsed().as_secs_f64();
        let g = GradientsParams::from_grads(setup.loss(&b).backward(), &b);
        let start = Instant::now();
        b = burns.step(2e-5, b, g);
        let _ = b.bert.pooler.dense.weight.val().into_data();
        if rep > 0 {
            fused_times.push(fused_secs);
            burn_times.push(start.elapsed().as_secs_f64());
        }
    }
    (median(fused_times).unwrap_or(f64::NAN), median(burn_times).unwrap_or(f64::NAN))
}

fn main() {
    shared::cpu::allocator::keep_freed_pages();
    let dir = model_dir();
    let setup = Setup::new(&dir, BATCH, SEQ);

    // `cargo bench --bench train_step -- bert` runs only the configs whose name contains "bert".
    let filter = std::env::args().skip(1).find(|a| !a.starts_with('-')).unwrap_or_default();
    let ours: Vec<(&str, f64)> = [("bert", "bert"), ("im_all", "im:T=5,gamma=0.1")]
        .into_iter()
        .filter(|(name, _)| name.contains(filter.as_str()))
        .map(|(name, spec)| (name, time_steps(&setup, spec)))
        .collect();
    let updates = ("adamw".contains(filter.as_str()) || "bert".contains(filter.as_str()))
        .then(|| time_updates(&setup));

    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("benches/train_step_torch.py");
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let args = [
        dir.to_string_lossy().into_owned(),
        BATCH.to_string(),
        SEQ.to_string(),
        threads.to_string(),
        REPS.to_string(),
        filter,
    ];
    let torch = peer::pytorch_timings(&script, &args);
    println!(
        "MiniLM-L6 training step (forward + backward + AdamW), batch {BATCH}, seq {SEQ}, CPU, \
         GEMM: {}",
        shared::cpu::blas::cpu_gemm()
    );
    println!(
        "{:<8} {:>12} {:>12} {:>14} {:>10}",
        "config", "ours (s)", "ours ex/s", "PyTorch (s)", "ours/PT"
    );
    for (name, secs) in &ours {
        let pt = torch.as_ref().and_then(|v| v[*name].as_f64());
        println!(
            "{name:<8} {secs:>12.3} {:>12.1} {:>14} {:>10}",
            BATCH as f64 / secs,
            pt.map_or("n/a".into(), |p| format!("{p:.3}")),
            pt.map_or("n/a".into(), |p| format!("{:.2}x", secs / p))
        );
    }
    if let Some((fused, burns)) = updates {
        println!(
            "AdamW update alone: ours {:.1} ms, burn's AdamW {:.1} ms ({:.2}x)",
            fused * 1e3,
            burns * 1e3,
            fused / burns
        );
    }
    if torch.is_none() {
        println!("(PyTorch column skipped: set IMBERT_PYTHON, or run `make bench`)");
    }
}
