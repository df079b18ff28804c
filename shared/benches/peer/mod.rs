//! The PyTorch side of the benchmarks: each bench runs a Python script that times the same work,
//! either all at once (one JSON object of seconds, `{"<name>": seconds, ...}`) or one run per
//! request, in turn with the bench's own runs ([`Peer`]).

use std::path::Path;

/// Runs `script args..` with the Python in `IMBERT_PYTHON` (`make bench` sets it to the venv) and
/// parses its JSON. `None`, said on stderr, when it is unset or the script fails.
#[allow(dead_code)] // the forward bench pairs its runs with a `Peer` instead
pub fn pytorch_timings(script: &Path, args: &[String]) -> Option<serde_json::Value> {
    let py = std::env::var("IMBERT_PYTHON").ok()?;
    let out = std::process::Command::new(py).arg(script).args(args).output().ok()?;
    if !out.status.success() {
        eprintln!("PyTorch benchmark failed: {}", String::from_utf8_lossy(&out.stderr));
        return None;
    }
    serde_json::from_slice(&out.stdout).ok()
}

/// Criterion's median for `group/name` from the run just finished, in seconds: `None` when this
/// process did not measure it (a filter left it out; an older run's figure is not reported).
#[allow(dead_code)] // train_step times its steps itself
pub fn criterion_median(group: &str, name: &str) -> Option<f64> {
    let dir =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/criterion").join(group).join(name);
    let file = dir.join("new/estimates.json");
    let written = std::fs::metadata(&file).and_then(|m| m.modified()).ok()?;
    if written < *PROCESS_START {
        return None;
    }
    let text = std::fs::read_to_string(file).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    Some(v["median"]["point_estimate"].as_f64()? / 1e9)
}

/// When this process started, taken the first time a bench asks (before criterion runs).
#[allow(dead_code)]
pub static PROCESS_START: std::sync::LazyLock<std::time::SystemTime> =
    std::sync::LazyLock::new(std::time::SystemTime::now);

/// A PyTorch script kept running to time one call per request, so that a bench can alternate
/// its own runs with PyTorch's (`forward_torch.py`): the script prints `ready` once loaded, then
/// answers each line `<name>` with the seconds one run of `name` took.
#[allow(dead_code)] // only the forward bench pairs its runs
pub struct Peer {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    stdout: std::io::BufReader<std::process::ChildStdout>,
}

#[allow(dead_code)]
impl Peer {
    /// Starts `script args..` with the Python in `IMBERT_PYTHON`; `None`, said on stderr, when it
    /// is unset or the script does not get ready.
    pub fn start(script: &Path, args: &[String]) -> Option<Self> {
        use std::io::BufRead;
        use std::process::{Command, Stdio};
        let py = std::env::var("IMBERT_PYTHON").ok()?;
        let spawned = Command::new(py)
            .arg(script)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn();
        let mut child =
            spawned.map_err(|e| eprintln!("PyTorch benchmark did not start: {e}")).ok()?;
        let (stdin, stdout) = (child.stdin.take()?, child.stdout.take()?);
        let mut peer = Self { child, stdin: Some(stdin), stdout: std::io::BufReader::new(stdout) };
        let mut line = String::new();
        peer.stdout.read_line(&mut line).ok()?;
        if line.trim() != "ready" {
            eprintln!("PyTorch benchmark failed to load (see above)");
            return None;
        }
        Some(peer)
    }

    /// Seconds of one run of `name` on the PyTorch side.
    pub fn time(&mut self, name: &str) -> Option<f64> {
        use std::io::{BufRead, Write};
        let stdin = self.stdin.as_mut()?;
        writeln!(stdin, "{name}").and_then(|()| stdin.flush()).ok()?;
        let mut line = String::new();
        self.stdout.read_line(&mut line).ok()?;
        line.trim().parse().ok()
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        drop(self.stdin.take()); // end of input: the script exits
        let _ = self.child.wait();
    }
}
