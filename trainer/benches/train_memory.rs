//! Memory of one training step of MiniLM-L6 on the CPU: what the autodiff graph holds once the
//! forward is done (what the backward will read) and the peak over forward and backward, for
//! BERT, EX-BERT and IM-BERT, each as a multiple of BERT's in the same run. Counted at the
//! global allocator (mimalloc underneath, as in the trainer), so the figures are live bytes,
//! not the process's RSS.
//!
//! `cargo bench -p trainer --bench train_memory -- [batch] [seq] [filter]` (default 16, 32: an
//! SST-2 batch; the filter keeps the configs whose name contains it).

use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicUsize, Ordering};

use burn::tensor::Tensor;
use mimalloc::MiMalloc;
use shared::ConnectionSpec;

mod common;

use common::{model_dir, Setup, B};

/// mimalloc, counting the bytes live and their peak.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(bytes: usize) {
    let now = LIVE.fetch_add(bytes, Ordering::Relaxed) + bytes;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

// SAFETY: every call goes to mimalloc with the caller's arguments; the counters only observe.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { MiMalloc.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { MiMalloc.alloc_zeroed(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { MiMalloc.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { MiMalloc.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
            grew(new_size);
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const MIB: f64 = 1024.0 * 1024.0;

/// (held by the graph after the forward, peak over forward and backward), in MiB above what
/// was live before the step. The second of two steps, so one-time allocations do not count.
fn measure(setup: &Setup, spec: &str) -> (f64, f64) {
    let model = setup.base.clone().with_connections(&ConnectionSpec::parse(spec).unwrap()).unwrap();
    let mut figures = (0.0, 0.0);
    for _ in 0..2 {
        let before = LIVE.load(Ordering::Relaxed);
        PEAK.store(before, Ordering::Relaxed);
        let loss: Tensor<B, 1> = setup.loss(&model);
        let held = LIVE.load(Ordering::Relaxed).saturating_sub(before);
        let grads = loss.backward();
        let peak = PEAK.load(Ordering::Relaxed).saturating_sub(before);
        drop(grads);
        figures = (held as f64 / MIB, peak as f64 / MIB);
    }
    figures
}

fn main() {
    let mut args = std::env::args().skip(1).filter(|a| !a.starts_with('-'));
    let mut number = |default: usize| args.next().and_then(|a| a.parse().ok()).unwrap_or(default);
    let (batch, seq) = (number(16), number(32));
    let filter = std::env::args().skip(1).filter(|a| !a.starts_with('-')).nth(2);
    let setup = Setup::new(&model_dir(), batch, seq);
    let configs = [
        ("bert", "bert"),
        ("ex", "ex"),
        ("im_rec_T5", shared::RECOMMENDED_IM),
        ("im_rec_T15", "im:T=15,gamma=0.1,grad=detached,step=backtrack"),
        ("im_paper_T5", "im:T=5,gamma=0.1"),
    ];
    println!("MiniLM-L6 training step memory, batch {batch}, seq {seq}, CPU (live bytes, MiB)");
    println!(
        "{:<12} {:>12} {:>10} {:>12} {:>10}",
        "config", "graph held", "x BERT", "peak", "x BERT"
    );
    let mut bert = None;
    for (name, spec) in configs {
        if name != "bert" && filter.as_deref().is_some_and(|f| !name.contains(f)) {
            continue;
        }
        let (held, peak) = measure(&setup, spec);
        let (bert_held, bert_peak) = *bert.get_or_insert((held, peak));
        println!(
            "{name:<12} {held:>12.1} {:>10.2} {peak:>12.1} {:>10.2}",
            held / bert_held,
            peak / bert_peak
        );
    }
}
