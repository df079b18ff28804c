//! The PyTorch side of the benchmarks: each bench runs a Python script that times the same work
//! and prints one JSON object of seconds, `{"<name>": seconds, ...}`.

use std::path::Path;

/// Runs `script args..` with the Python in `IMBERT_PYTHON` (`make bench` sets it to the venv) and
/// parses its JSON. `None`, said on stderr, when it is unset or the script fails.
pub fn pytorch_timings(script: &Path, args: &[String]) -> Option<serde_json::Value> {
    let py = std::env::var("IMBERT_PYTHON").ok()?;
    let out = std::process::Command::new(py).arg(script).args(args).output().ok()?;
    if !out.status.success() {
        eprintln!("PyTorch benchmark failed: {}", String::from_utf8_lossy(&out.stderr));
        return None;
    }
    serde_json::from_slice(&out.stdout).ok()
}

/// Criterion's median for `group/name` from the run just finished, in seconds.
#[allow(dead_code)] // train_step times its steps itself
pub fn criterion_median(group: &str, name: &str) -> Option<f64> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/criterion").join(group).join(name);
    let text = std::fs::read_to_string(dir.join("new/estimates.json")).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    Some(v["median"]["point_estimate"].as_f64()? / 1e9)
}
