//! What a run says while it trains: `log.txt` and the console, warnings, and progress.

use std::io::{IsTerminal, Write};
use std::path::Path;
use std::time::{Duration, Instant};

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
            "step {step}: the gradient of {} is over {EXPLODING_RATIO}x the head's ({:.2e}): \
             it is exploding through the IM iterations, and in f32 it is rounding noise \
             (docs/numerics.md); grad=detached or grad=frozen in the connection spec keeps it \
             bounded",
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

/// Off a terminal, a progress line at least this often, whatever `--progress-every` says.
const PROGRESS_INTERVAL: Duration = Duration::from_secs(30);

/// How a run shows its progress: a bar on a terminal; anywhere else (a file, a pipe, a job
/// scheduler's log) a log line every `every` steps or `PROGRESS_INTERVAL`, whichever comes
/// first, because the bar hides itself there and a long run would say nothing until its
/// epoch ends.
pub(super) struct Progress {
    bar: Option<indicatif::ProgressBar>,
    total_steps: usize,
    every: usize,
    /// Steps taken before this session (a resumed run), so the time left uses this pace only.
    first_step: usize,
    session_start: Instant,
    last_line: Instant,
}

impl Progress {
    /// Progress over `total_steps` optimizer steps, `done` of them already taken; off a
    /// terminal, a line every `every` steps.
    pub(super) fn new(total_steps: usize, done: usize, every: usize) -> Self {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = indicatif::ProgressBar::new(total_steps as u64).with_position(done as u64);
            bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "{bar:30} {pos}/{len} steps  {msg}  ETA {eta}",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            bar
        });
        let now = Instant::now();
        Self {
            bar,
            total_steps,
            every: every.max(1),
            first_step: done,
            session_start: now,
            last_line: now,
        }
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
        let message =
            format!("epoch {epoch} loss {loss:.4} lr {lr:.2e} {examples_per_sec:.1} ex/s");
        if let Some(bar) = &self.bar {
            bar.set_position(step as u64);
            bar.set_message(message);
            return;
        }
        let due = step.is_multiple_of(self.every)
            || step == self.total_steps
            || self.last_line.elapsed() >= PROGRESS_INTERVAL;
        if !due {
            return;
        }
        self.last_line = Instant::now();
        let left = time_left(
            self.session_start.elapsed(),
            step.saturating_sub(self.first_step),
            self.total_steps.saturating_sub(step),
        );
        tracing::info!(
            "step {step}/{}: {message}, {} left",
            self.total_steps,
            format_duration(left)
        );
    }

    pub(super) fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

/// This session's pace applied to the steps that remain.
pub(super) fn time_left(elapsed: Duration, steps_done: usize, steps_left: usize) -> Duration {
    if steps_done == 0 {
        return Duration::ZERO;
    }
    elapsed.mul_f64(steps_left as f64 / steps_done as f64)
}

/// `1h 02m`, `3m 05s`, `12s`.
pub(super) fn format_duration(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 3600 {
        format!("{}h {:02}m", s / 3600, s % 3600 / 60)
    } else if s >= 60 {
        format!("{}m {:02}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}
