//! The CPU backend's GEMM: burn-ndarray's `matrixmultiply` by default; with the `openblas`
//! feature, the system OpenBLAS, whose AVX-512 kernels make a MiniLM forward 1.6x faster on
//! this project's Sapphire Rapids machines (`matrixmultiply` has AVX2 kernels only).
//!
//! OpenBLAS picks its kernels once, when the library loads, from the CPU model number. A release
//! older than the CPU does not know it and falls back to its SSE3 ("Prescott") kernels: Debian
//! 12's 0.3.21 does so on Sapphire Rapids and is then slower than `matrixmultiply` (it takes
//! AMD's Zen 5 for a Cooperlake, an AVX-512 set, and is right). Only the environment variable
//! `OPENBLAS_CORETYPE`, read at load time, overrides the choice, so `advice` says what to set
//! (the Makefile sets it unless the environment already does: some machine images set it to
//! `Haswell`, AVX2, for every process, which halves the GEMM speed of an AVX-512 CPU).

#[cfg(feature = "openblas")]
use std::ffi::{c_char, CStr};

#[cfg(feature = "openblas")]
use std::ffi::c_int;

#[cfg(feature = "openblas")]
extern "C" {
    fn openblas_get_corename() -> *const c_char;
    fn openblas_set_num_threads(threads: c_int);
    // CBLAS, as OpenBLAS exports it (the enums are C ints: row-major 101, no-trans 111, trans 112).
    fn cblas_sgemm(
        layout: c_int,
        trans_a: c_int,
        trans_b: c_int,
        m: c_int,
        n: c_int,
        k: c_int,
        alpha: f32,
        a: *const f32,
        lda: c_int,
        b: *const f32,
        ldb: c_int,
        beta: f32,
        c: *mut f32,
        ldc: c_int,
    );
}

/// How a BLAS reads one operand of a row-major GEMM: as stored, or transposed (a column-major
/// view), with rows `leading` elements apart.
#[cfg(feature = "openblas")]
#[derive(Debug, Clone, Copy)]
pub(crate) struct Layout {
    pub transposed: bool,
    pub leading: usize,
}

/// Row-major `c = a b + beta c` for `[m, n, k]` through OpenBLAS's CBLAS on the calling thread.
///
/// # Safety
/// `a` and `b` must be valid for reads as their layouts describe (`m x k` and `k x n`); `c` for
/// writes of `m` rows of `n`, `ldc` apart (and reads when `beta != 0`). With `beta = 0` BLAS does
/// not read `c`, so it may be uninitialised.
#[cfg(feature = "openblas")]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn sgemm(
    a_layout: Layout,
    b_layout: Layout,
    [m, n, k]: [usize; 3],
    a: *const f32,
    b: *const f32,
    beta: f32,
    c: *mut f32,
    ldc: usize,
) {
    const ROW_MAJOR: c_int = 101;
    let trans = |l: Layout| if l.transposed { 112 } else { 111 };
    let int = |x: usize| c_int::try_from(x).expect("GEMM dimension fits a C int");
    // SAFETY: the caller vouches for the three buffers and their layouts.
    unsafe {
        cblas_sgemm(
            ROW_MAJOR,
            trans(a_layout),
            trans(b_layout),
            int(m),
            int(n),
            int(k),
            1.0,
            a,
            int(a_layout.leading),
            b,
            int(b_layout.leading),
            beta,
            c,
            int(ldc),
        )
    }
}

/// Makes OpenBLAS run each GEMM on the thread that calls it, once per process: the kernels
/// split GEMMs over rayon's pool themselves (see `kernels::gemm::gemm_by_rows`), so a second pool
/// would only compete with the first for the same cores.
#[cfg(feature = "openblas")]
pub(crate) fn calling_thread_only() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    // SAFETY: stores an integer in OpenBLAS's settings, which each GEMM reads when it starts.
    ONCE.call_once(|| unsafe { openblas_set_num_threads(1) });
}

/// The GEMM burn-ndarray runs in this build, for benchmark headers and logs; with OpenBLAS on
/// kernels older than the CPU supports, it says so, since the figures then understate the CPU.
pub fn cpu_gemm() -> String {
    #[cfg(feature = "openblas")]
    return match advice() {
        Some(advice) => format!("OpenBLAS ({} kernels) [{advice}]", core_name()),
        None => format!("OpenBLAS ({} kernels)", core_name()),
    };
    #[cfg(not(feature = "openblas"))]
    return "matrixmultiply".to_string();
}

/// The kernel set OpenBLAS chose, e.g. `"SkylakeX"`, `"Haswell"`, `"Prescott"`.
#[cfg(feature = "openblas")]
pub fn core_name() -> String {
    // SAFETY: OpenBLAS returns a pointer to a static, NUL-terminated name.
    unsafe { CStr::from_ptr(openblas_get_corename()) }.to_string_lossy().into_owned()
}

/// The `OPENBLAS_CORETYPE` to set when OpenBLAS chose kernels older than this CPU supports, with
/// the reason; `None` when its choice is fine.
#[cfg(feature = "openblas")]
pub fn advice() -> Option<String> {
    let (wanted, wanted_level) = best_core()?;
    let core = core_name();
    if level(&core) >= wanted_level {
        return None;
    }
    let why = match std::env::var("OPENBLAS_CORETYPE") {
        // Some machine images set it for every process, to a lowest common denominator.
        Ok(set) => format!(
            "OPENBLAS_CORETYPE={set} in the environment makes OpenBLAS use its {core} kernels"
        ),
        Err(_) => format!("OpenBLAS does not recognise this CPU and chose its {core} kernels"),
    };
    Some(format!(
        "{why}; set OPENBLAS_CORETYPE={wanted} to use its {wanted} kernels (about 2x faster GEMM)"
    ))
}

/// Vector width of an OpenBLAS x86 kernel set: 0 SSE, 1 AVX, 2 AVX2, 3 AVX-512.
#[cfg(feature = "openblas")]
fn level(core: &str) -> u8 {
    match core.to_ascii_lowercase().as_str() {
        "skylakex" | "cooperlake" | "sapphirerapids" => 3,
        "haswell" | "zen" | "excavator" => 2,
        "sandybridge" | "bulldozer" | "piledriver" | "steamroller" => 1,
        _ => 0,
    }
}

/// The OpenBLAS kernel set (and its vector width, as `level` counts it) for this CPU, among
/// those every release since 0.3.10 has; `None` off x86-64.
#[cfg(feature = "openblas")]
pub fn best_core() -> Option<(&'static str, u8)> {
    #[cfg(target_arch = "x86_64")]
    {
        let avx512 = std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512dq")
            && std::arch::is_x86_feature_detected!("avx512vl");
        if avx512 {
            return Some(("SkylakeX", 3));
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            return Some(("Haswell", 2));
        }
    }
    None
}
