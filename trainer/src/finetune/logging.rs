//! What a run says while it trains: `log.txt` and the console, warnings, and progress.

use std::io::Write;
use std::path::Path;

use anyhow::Result;

use crate::grad_norms::{GradNorms, EXPLODING_RATIO};

/// Warns when some part's gradient is `EXPLODING_RATIO` times the head's or more.
pub(super) fn warn_if_exploding(run_dir: &Path, norms: &GradNorms, step: usize) -> Result<()> {
    let parts = norms.exploding();
    if parts.is_empty() {
        return Ok(());
    }
    warn(
        run_dir,
        &format!(
            "step {step}: the gradient of {} is over {EXPLODING_RATIO}x the head's ({:.2e}): it is exploding through \
             the IM iterations, and in f32 it is rounding noise (docs/numerics.md); grad=detached or grad=frozen \
             in the connection spec keeps it bounded",
            parts.join(", "),
            norms.head
        ),
    )
}

pub(super) fn log(run_dir: &Path, line: &str) -> Result<()> {
    tracing::info!("{line}");
    append_log(run_dir, line)
}

pub(super) fn warn(run_dir: &Path, line: &str) -> Result<()> {
    tracing::warn!("{line}");
    append_log(run_dir, &format!("warning: {line}"))
}

fn append_log(run_dir: &Path, line: &str) -> Result<()> {
    let mut file =
        std::fs::OpenOptions::new().create(true).append(true).open(run_dir.join("log.txt"))?;
    writeln!(file, "{line}")?;
    Ok(())
}

/// The progress bar on a terminal.
pub(super) struct Progress {
    bar: indicatif::ProgressBar,
}

impl Progress {
    /// A bar over `total_steps` optimizer steps, `done` of them already taken.
    pub(super) fn new(total_steps: usize, done: usize) -> Self {
        let bar = indicatif::ProgressBar::new(total_steps as u64).with_position(done as u64);
        bar.set_style(
            indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} steps  {msg}  ETA {eta}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        Self { bar }
    }

    /// After optimizer step `step`: the epoch, the mean training loss since the last
    /// validation, the learning rate and this session's throughput.
    pub(super) fn update(
        &mut self,
        step: usize,
        epoch: usize,
        loss: f64,
        lr: f64,
        examples_per_sec: f64,
    ) {
        self.bar.set_position(step as u64);
        self.bar.set_message(format!(
            "epoch {epoch} loss {loss:.4} lr {lr:.2e} {examples_per_sec:.1} ex/s"
        ));
    }

    pub(super) fn finish(&self) {
        self.bar.finish_and_clear();
    }
}
