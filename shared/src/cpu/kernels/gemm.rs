//! The GEMM under every product, `c = a b + beta c` on views of any strides (OpenBLAS,
//! `matrixmultiply`, or in the browser `tiled_gemm`), and the drivers that split a product's
//! rows over rayon's threads.

use std::mem::MaybeUninit;

use super::new_rows_uninit;

/// `c = a b + beta c` for `[m, k] x [k, n]` views of any strides, with `c` row-major, its rows
/// `ldc` elements apart. With `beta = 0`, `c` is only written, so it may be uninitialised (BLAS
/// and `matrixmultiply` both promise not to read it). OpenBLAS runs it when both operands have
/// a BLAS layout (one unit stride), `matrixmultiply` otherwise and in builds without OpenBLAS,
/// and [`super::tiled_gemm`] on wasm with SIMD128 (with fused multiply-adds in the build with
/// the `relaxed-simd` feature).
///
/// # Safety
/// `c` must be valid for writes (and reads, if `beta != 0`) of `m` rows of `n` elements, `ldc`
/// apart, and not alias `a` or `b`.
pub(super) unsafe fn gemm_into(
    a: ndarray::ArrayView2<f32>,
    b: ndarray::ArrayView2<f32>,
    beta: f32,
    c: *mut f32,
    ldc: usize,
) {
    let ((m, k), n) = (a.dim(), b.ncols());
    assert_eq!(k, b.nrows(), "inner dimensions");
    assert!(n <= ldc || m <= 1, "a row of c fits in ldc");
    if m == 0 || n == 0 {
        return;
    }
    #[cfg(all(feature = "openblas", not(target_arch = "wasm32")))]
    if let (Some(a_layout), Some(b_layout)) = (blas_layout(&a), blas_layout(&b)) {
        if k > 0 {
            // SAFETY: the layouts describe the views' memory; the caller vouches for `c`.
            unsafe {
                crate::cpu::blas::sgemm(
                    a_layout,
                    b_layout,
                    [m, n, k],
                    a.as_ptr(),
                    b.as_ptr(),
                    beta,
                    c,
                    ldc,
                )
            };
            return;
        }
    }
    let ([rsa, csa], [rsb, csb]) = (
        <[isize; 2]>::try_from(a.strides()).unwrap_or_default(),
        <[isize; 2]>::try_from(b.strides()).unwrap_or_default(),
    );
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    {
        use super::tiled_gemm::{self, Strided};
        let (a, b) = (
            Strided { ptr: a.as_ptr(), rows: rsa, cols: csa },
            Strided { ptr: b.as_ptr(), rows: rsb, cols: csb },
        );
        // SAFETY: the strides describe the views' memory; the caller vouches for `c`.
        unsafe {
            #[cfg(not(feature = "relaxed-simd"))]
            tiled_gemm::gemm::<core::arch::wasm32::v128>([m, k, n], a, b, beta, c, ldc);
            #[cfg(feature = "relaxed-simd")]
            tiled_gemm::gemm_fused([m, k, n], a, b, beta, c, ldc);
        }
    }
    #[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
    // SAFETY: the strides describe the views' memory; the caller vouches for `c`.
    unsafe {
        matrixmultiply::sgemm(
            m,
            k,
            n,
            1.0,
            a.as_ptr(),
            rsa,
            csa,
            b.as_ptr(),
            rsb,
            csb,
            beta,
            c,
            ldc as isize,
            1,
        )
    };
}

/// How a BLAS reads a view: `(transposed, leading dimension)`, or `None` when neither stride is
/// 1 (or a stride is negative).
#[cfg(all(feature = "openblas", not(target_arch = "wasm32")))]
fn blas_layout(x: &ndarray::ArrayView2<f32>) -> Option<crate::cpu::blas::Layout> {
    let (rows, cols) = x.dim();
    let [s0, s1] = <[isize; 2]>::try_from(x.strides()).ok()?;
    let (s0, s1) = (usize::try_from(s0).ok()?, usize::try_from(s1).ok()?);
    if (s1 == 1 || cols == 1) && s0 >= cols.max(1) {
        Some(crate::cpu::blas::Layout { transposed: false, leading: s0 })
    } else if (s0 == 1 || rows == 1) && s1 >= rows.max(1) {
        Some(crate::cpu::blas::Layout { transposed: true, leading: s1 })
    } else {
        None
    }
}

/// `c = a b`, plus `bias` on every row, as a new array. The rows of `c` and `a` are split into
/// one part per thread of rayon's pool, each part one GEMM on its thread. The bias is the GEMM's
/// initial `C` (`beta = 1`), written by the part's own thread; without one, `beta = 0` and the
/// GEMM writes every element, so the output is never zeroed first.
///
/// With OpenBLAS, its own thread pool is switched off
/// ([`crate::cpu::blas::calling_thread_only`]): its threads spin for a while after each GEMM, and
/// on a small machine they took the cores from the rayon kernels between GEMMs (`sched_yield`
/// dominated the profile). One pool for everything avoids that. `matrixmultiply` threads itself
/// and gets the product whole.
pub(super) fn gemm_by_rows(
    a: ndarray::ArrayView2<f32>,
    b: ndarray::ArrayView2<f32>,
    bias: Option<&[f32]>,
) -> ndarray::Array2<f32> {
    let cols = b.ncols();
    match bias {
        // SAFETY: every row of every part gets the bias (`cols` elements, checked by the caller).
        Some(bias) => unsafe {
            gemm_by_rows_with(
                a,
                b,
                Some(|_: usize, part: &mut [MaybeUninit<f32>]| {
                    for row in part.chunks_exact_mut(cols.max(1)) {
                        // SAFETY: `row` and `bias` both hold `cols` elements, in different buffers.
                        std::ptr::copy_nonoverlapping(bias.as_ptr(), row.as_mut_ptr().cast(), cols);
                    }
                }),
            )
        },
        // SAFETY: no `init`: the GEMM writes with `beta = 0`.
        None => unsafe { gemm_by_rows_with(a, b, None::<fn(usize, &mut [MaybeUninit<f32>])>) },
    }
}

/// [`gemm_by_rows`] from an initial `C` when `init` is given: `init(first_row, part)` writes the
/// part's rows and the GEMM adds `a b` to them (`beta = 1`); without, `beta = 0`.
///
/// # Safety
/// `init`, when given, must initialise every element of the part it is given.
pub(super) unsafe fn gemm_by_rows_with(
    a: ndarray::ArrayView2<f32>,
    b: ndarray::ArrayView2<f32>,
    init: Option<impl Fn(usize, &mut [MaybeUninit<f32>]) + Sync>,
) -> ndarray::Array2<f32> {
    use ndarray::s;
    let (rows, cols) = (a.nrows(), b.ncols());
    let part_rows = gemm_part_rows(&a, cols);
    let fill = |first: usize, [part]: [&mut [MaybeUninit<f32>]; 1]| {
        let n = part.len() / cols.max(1);
        let beta = match &init {
            Some(init) => {
                init(first, part);
                1.0
            }
            None => 0.0,
        };
        // SAFETY: `part` holds `n` rows of `cols`; with `beta = 1`, `init` initialised them (the
        // caller's promise).
        unsafe {
            gemm_into(a.slice(s![first..first + n, ..]), b, beta, part.as_mut_ptr().cast(), cols)
        };
    };
    // SAFETY: the GEMM writes every element of every part, whatever `beta`.
    let [c] = unsafe { new_rows_uninit(rows, [cols], part_rows, fill) };
    ndarray::Array2::from_shape_vec((rows, cols), c).expect("rows * cols elements")
}

/// `c += a b` in place, `c` row-major `[a.nrows(), b.ncols()]`, split by rows as [`gemm_by_rows`].
pub(super) fn gemm_add_by_rows(
    a: ndarray::ArrayView2<f32>,
    b: ndarray::ArrayView2<f32>,
    c: &mut [f32],
) {
    use ndarray::s;
    let cols = b.ncols();
    assert_eq!(c.len(), a.nrows() * cols, "c holds a.nrows() rows of b.ncols()");
    if cols == 0 {
        return;
    }
    let part_rows = gemm_part_rows(&a, cols).max(1);
    let run = |(part, c): (usize, &mut [f32])| {
        let (first, n) = (part * part_rows, c.len() / cols);
        // SAFETY: `c` holds the part's `n` rows of `cols`, initialised (`beta = 1` reads them).
        unsafe { gemm_into(a.slice(s![first..first + n, ..]), b, 1.0, c.as_mut_ptr(), cols) };
    };
    #[cfg(not(target_arch = "wasm32"))]
    {
        use rayon::prelude::*;
        c.par_chunks_mut(part_rows * cols).enumerate().for_each(run);
    }
    #[cfg(target_arch = "wasm32")]
    c.chunks_mut(part_rows * cols).enumerate().for_each(run);
}

/// Rows of `c = a b` per GEMM call: one part per thread with OpenBLAS (which then runs on the
/// calling thread, see [`gemm_by_rows`]), the whole product for `matrixmultiply`.
fn gemm_part_rows(a: &ndarray::ArrayView2<f32>, cols: usize) -> usize {
    let rows = a.nrows();
    #[cfg(all(feature = "openblas", not(target_arch = "wasm32")))]
    {
        crate::cpu::blas::calling_thread_only();
        // Below ~1 MFLOP a part costs less than handing it to another thread.
        let threads =
            rayon::current_num_threads().min(rows.max(1)).min(1 + a.len() * cols / 500_000);
        rows.div_ceil(threads.max(1))
    }
    #[cfg(not(all(feature = "openblas", not(target_arch = "wasm32"))))]
    {
        let _ = cols;
        rows
    }
}
