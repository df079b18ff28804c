//! burn 0.21 keeps one default float dtype per device *type* for the whole process
//! (`burn::tensor::set_default_dtypes`), and `NdArray<f32>` and `NdArray<f64>` share a device
//! type: the first tensor created decides the dtype of every later one. An f64 test that runs
//! after an f32 test in the same process then computes in f32, or fails reading f64 back, and
//! which one runs first depends on the test harness's scheduling. A test that needs f64 calls
//! [`run_in_f64_process!`] first, which reruns it alone in a child process pinned to f64. (The
//! trainer's `probe` runs its f64 pass in a child process for the same reason.)

use std::process::Command;

use burn::backend::NdArray;
use burn::tensor::{FloatDType, IntDType};

const CHILD: &str = "IMBERT_F64_TEST_PROCESS";

/// In the child: pins f64 and returns true, so the test body runs. In the parent: runs `test`
/// (its full path, `concat!(module_path!(), "::name")`) in a child, fails when the child fails
/// or ran no test, and returns false, so the body is skipped here.
pub(crate) fn in_f64_process(test: &str) -> bool {
    if std::env::var_os(CHILD).is_some() {
        burn::tensor::set_default_dtypes::<NdArray<f64>>(
            &Default::default(),
            FloatDType::F64,
            IntDType::I64,
        )
        .expect("no tensor exists yet in the child");
        return true;
    }
    // The harness names tests without the crate.
    let test = test.split_once("::").map_or(test, |(_, rest)| rest);
    let exe = std::env::current_exe().expect("the test binary's path");
    let out = Command::new(exe)
        .args([test, "--exact", "--test-threads=1", "--nocapture"])
        .env(CHILD, "1")
        .output()
        .expect("rerunning the test binary");
    let text =
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{test}, in its own f64 process, failed:\n{text}");
    assert!(text.contains("1 passed"), "{test}: the child process ran no test:\n{text}");
    false
}

/// `run_in_f64_process!(test_name);` at the top of an f64 test: the parent returns from the test
/// there, once the child has passed; the child goes on with the body.
macro_rules! run_in_f64_process {
    ($test:ident) => {
        let path = concat!(module_path!(), "::", stringify!($test));
        if !$crate::model::f64_process::in_f64_process(path) {
            return;
        }
    };
}
pub(crate) use run_in_f64_process;
