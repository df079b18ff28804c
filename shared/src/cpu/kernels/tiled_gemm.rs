//! The browser's GEMM: packed panels and a 4 x 8 register tile on WebAssembly SIMD128.
//!
//! `matrixmultiply`, the GEMM below ndarray, has hand-written kernels for x86 and Arm only; on
//! wasm it runs a generic kernel that the compiler vectorises poorly, and the demo's CPU fallback
//! spent most of a verdict there. This is the GotoBLAS loop nest (as in BLIS and `gemm`): `B` is
//! packed into `KC x 8` column panels, `A` into `4 x KC` row panels, so that the micro-kernel
//! reads both contiguously, and the micro-kernel keeps a 4 x 8 block of `C` in eight 4-lane
//! registers: per step of `k`, two loads of `B`, four broadcasts of `A`, eight multiply-adds.
//! Plain SIMD128 has no fused multiply-add, so each of those is two instructions; relaxed SIMD's
//! `f32x4.relaxed_madd` is one ([`FusedLanes`], in the worker build with the `relaxed-simd`
//! feature: a module containing it does not load in a browser without relaxed SIMD, so the page
//! picks between two builds, see `web/inference_loader.js`).
//!
//! The loop nest is generic over the 4-lane vector ([`Lanes`]), so that native tests run it on
//! plain arrays, on every layout and edge, and the browser tests check the SIMD128 build's logits
//! against the native ones.

use std::mem::MaybeUninit;

/// Rows of `C` per micro-tile.
const MR: usize = 4;
/// Columns of `C` per micro-tile: two 4-lane vectors.
const NR: usize = 8;
/// Depth of a packed block: a `4 x KC` panel of `A` and a `KC x 8` panel of `B` (24 KiB) stay in
/// L1 while the micro-kernel runs.
const KC: usize = 256;
/// Rows of a packed block of `A` (`MC x KC`, 64 KiB, in L2).
const MC: usize = 64;
/// Columns of a packed block of `B` (`KC x NC`, 256 KiB, in L2).
const NC: usize = 256;

/// A 4-lane f32 vector: wasm's `v128`, or `[f32; 4]` where there is none (native tests).
pub(super) trait Lanes: Copy {
    fn zero() -> Self;
    fn splat(x: f32) -> Self;
    /// # Safety
    /// `p` is valid for reads of 4 floats (any alignment).
    unsafe fn load(p: *const f32) -> Self;
    /// # Safety
    /// `p` is valid for writes of 4 floats (any alignment).
    unsafe fn store(self, p: *mut f32);
    /// `self + a * b`: the product rounded first, or, with [`FusedLanes`], fused where the
    /// machine has a fused multiply-add (relaxed SIMD leaves the rounding to the engine).
    fn mul_add(self, a: Self, b: Self) -> Self;
}

impl Lanes for [f32; 4] {
    #[inline(always)]
    fn zero() -> Self {
        [0.0; 4]
    }
    #[inline(always)]
    fn splat(x: f32) -> Self {
        [x; 4]
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        // SAFETY: the caller's promise.
        unsafe { p.cast::<[f32; 4]>().read_unaligned() }
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32) {
        // SAFETY: the caller's promise.
        unsafe { p.cast::<[f32; 4]>().write_unaligned(self) }
    }
    #[inline(always)]
    fn mul_add(self, a: Self, b: Self) -> Self {
        std::array::from_fn(|i| self[i] + a[i] * b[i])
    }
}

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
impl Lanes for core::arch::wasm32::v128 {
    #[inline(always)]
    fn zero() -> Self {
        core::arch::wasm32::f32x4_splat(0.0)
    }
    #[inline(always)]
    fn splat(x: f32) -> Self {
        core::arch::wasm32::f32x4_splat(x)
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        // SAFETY: the caller's promise; `v128_load` takes any alignment.
        unsafe { core::arch::wasm32::v128_load(p.cast()) }
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32) {
        // SAFETY: the caller's promise; `v128_store` takes any alignment.
        unsafe { core::arch::wasm32::v128_store(p.cast(), self) }
    }
    #[inline(always)]
    fn mul_add(self, a: Self, b: Self) -> Self {
        use core::arch::wasm32::{f32x4_add, f32x4_mul};
        f32x4_add(self, f32x4_mul(a, b))
    }
}

/// SIMD128 whose multiply-add is relaxed SIMD's `f32x4.relaxed_madd`: one instruction, fused
/// on x86 with FMA and on Arm. Its functions are compiled into [`gemm_fused`], which enables
/// relaxed SIMD.
#[cfg(all(target_arch = "wasm32", target_feature = "simd128", feature = "relaxed-simd"))]
#[derive(Clone, Copy)]
pub(super) struct FusedLanes(core::arch::wasm32::v128);

#[cfg(all(target_arch = "wasm32", target_feature = "simd128", feature = "relaxed-simd"))]
impl Lanes for FusedLanes {
    #[inline(always)]
    fn zero() -> Self {
        Self(core::arch::wasm32::v128::zero())
    }
    #[inline(always)]
    fn splat(x: f32) -> Self {
        Self(core::arch::wasm32::v128::splat(x))
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        // SAFETY: the caller's promise.
        Self(unsafe { core::arch::wasm32::v128::load(p) })
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32) {
        // SAFETY: the caller's promise.
        unsafe { self.0.store(p) }
    }
    #[inline(always)]
    fn mul_add(self, a: Self, b: Self) -> Self {
        Self(core::arch::wasm32::f32x4_relaxed_madd(a.0, b.0, self.0))
    }
}

/// [`gemm`] with fused multiply-adds, compiled with relaxed SIMD enabled (the micro-kernel is
/// inlined here, so its `relaxed_madd`s are too).
///
/// # Safety
/// As for [`gemm`].
#[cfg(all(target_arch = "wasm32", target_feature = "simd128", feature = "relaxed-simd"))]
#[target_feature(enable = "relaxed-simd")]
pub(super) unsafe fn gemm_fused(
    shape: [usize; 3],
    a: Strided,
    b: Strided,
    beta: f32,
    c: *mut f32,
    ldc: usize,
) {
    // SAFETY: the caller's promise.
    unsafe { gemm::<FusedLanes>(shape, a, b, beta, c, ldc) }
}

/// A read-only matrix: element `[i, j]` at `ptr + i * rows + j * cols` (strides in elements,
/// either sign).
#[derive(Clone, Copy)]
pub(super) struct Strided {
    pub ptr: *const f32,
    pub rows: isize,
    pub cols: isize,
}

impl Strided {
    /// # Safety
    /// `[i, j]` is inside the matrix.
    #[inline(always)]
    unsafe fn at(self, i: usize, j: usize) -> f32 {
        // SAFETY: the caller's promise.
        unsafe { *self.ptr.offset(i as isize * self.rows + j as isize * self.cols) }
    }
}

/// `c = a b + beta c` for `a: [m, k]`, `b: [k, n]`, `c` row-major with rows `ldc` apart. With
/// `beta = 0`, `c` is only written (it may hold NaN or be uninitialised).
///
/// # Safety
/// `a` and `b` describe readable `[m, k]` and `[k, n]` matrices; `c` is valid for writes (and
/// reads, if `beta != 0`) of `m` rows of `n` elements `ldc` apart, and aliases neither.
#[inline(always)]
pub(super) unsafe fn gemm<V: Lanes>(
    [m, k, n]: [usize; 3],
    a: Strided,
    b: Strided,
    beta: f32,
    c: *mut f32,
    ldc: usize,
) {
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        // No products: `c = beta c`, and with beta 0 an explicit zero (never a read).
        for i in 0..m {
            for j in 0..n {
                // SAFETY: `[i, j]` is inside `c` (the caller's promise).
                unsafe {
                    let p = c.add(i * ldc + j);
                    *p = if beta == 0.0 { 0.0 } else { beta * *p };
                }
            }
        }
        return;
    }
    let mut packed_b = vec![MaybeUninit::<f32>::uninit(); KC * NC.min(n.next_multiple_of(NR))];
    let mut packed_a = vec![MaybeUninit::<f32>::uninit(); MC.min(m.next_multiple_of(MR)) * KC];
    for jc in (0..n).step_by(NC) {
        let nc = NC.min(n - jc);
        for pc in (0..k).step_by(KC) {
            let kc = KC.min(k - pc);
            // The first block of `k` applies `beta`; the later ones add to what it wrote.
            let beta = if pc == 0 { beta } else { 1.0 };
            // With rows of `b` contiguous, its full panels are read in place, 8 floats from each
            // row: packing them cost as much as the products themselves at a few dozen rows of
            // `a` (a short sentence). The last panel, narrower than 8, is packed with zeros.
            let in_place = if b.cols == 1 { nc / NR * NR } else { 0 };
            // SAFETY: the block is inside `b`; `packed_b` holds `kc * nc` rounded up to panels.
            let bp = unsafe {
                let bt = Strided { ptr: b.ptr, rows: b.cols, cols: b.rows };
                pack::<NR>(bt, [jc + in_place, pc], [nc - in_place, kc], &mut packed_b)
            };
            for ic in (0..m).step_by(MC) {
                let mc = MC.min(m - ic);
                // SAFETY: as above, for `a`.
                let ap = unsafe { pack::<MR>(a, [ic, pc], [mc, kc], &mut packed_a) };
                for jr in (0..nc).step_by(NR) {
                    // A panel of `b`: its first step and the distance between steps.
                    let (b_panel, b_step) = if jr < in_place {
                        let offset = pc as isize * b.rows + (jc + jr) as isize;
                        // SAFETY: `[pc, jc + jr]` is inside `b`.
                        (unsafe { b.ptr.offset(offset) }, b.rows)
                    } else {
                        // SAFETY: the packed panels hold `kc * (nc - in_place)` rounded up.
                        (unsafe { bp.add((jr - in_place) * kc) }, NR as isize)
                    };
                    for ir in (0..mc).step_by(MR) {
                        let tile = [MR.min(mc - ir), NR.min(nc - jr)];
                        // SAFETY: the panels hold `kc` steps; the tile is inside `c`.
                        unsafe {
                            micro_kernel::<V>(
                                kc,
                                ap.add(ir * kc),
                                (b_panel, b_step),
                                c.add((ic + ir) * ldc + jc + jr),
                                ldc,
                                tile,
                                beta,
                            )
                        };
                    }
                }
            }
        }
    }
}

/// Packs `x[i0.., p0..][..len, ..kc]` as panels of `width` rows of `x`, panel after panel, each
/// step of `k` one column of `width` (zero past `len`); returns the start of the packed block.
/// `A` is packed as `4 x KC` panels, and `B` as `KC x 8` panels by packing its transpose.
///
/// # Safety
/// The block is inside `x`, and `out` holds `len.next_multiple_of(width) * kc` floats.
unsafe fn pack<const WIDTH: usize>(
    x: Strided,
    [i0, p0]: [usize; 2],
    [len, kc]: [usize; 2],
    out: &mut [MaybeUninit<f32>],
) -> *const f32 {
    let mut dst = out.iter_mut();
    for ir in (0..len).step_by(WIDTH) {
        let height = WIDTH.min(len - ir);
        for p in 0..kc {
            for i in 0..WIDTH {
                // SAFETY: `[i0 + ir + i, p0 + p]` is inside the block for `i < height`.
                let v = if i < height { unsafe { x.at(i0 + ir + i, p0 + p) } } else { 0.0 };
                dst.next().expect("out holds the packed block").write(v);
            }
        }
    }
    out.as_ptr().cast()
}

/// One `4 x 8` tile of `c = a b + beta c` over `kc` steps of a packed panel of `a` and a panel
/// of `b` whose steps are `b.1` floats apart; `rows x cols` of the tile are inside `c` (the rest
/// is computed on the panels' zero padding and dropped).
///
/// # Safety
/// `a` holds `4 * kc` floats, and `b` 8 floats at each of its `kc` steps; the `rows x cols`
/// tile at `c` is inside `c`.
#[inline(always)]
unsafe fn micro_kernel<V: Lanes>(
    kc: usize,
    a: *const f32,
    (b, b_step): (*const f32, isize),
    c: *mut f32,
    ldc: usize,
    [rows, cols]: [usize; 2],
    beta: f32,
) {
    let mut acc = [[V::zero(); 2]; MR];
    for p in 0..kc {
        // SAFETY: step `p` of each panel is inside it.
        let (b0, b1) = unsafe {
            let row = b.offset(p as isize * b_step);
            (V::load(row), V::load(row.add(4)))
        };
        for (i, row) in acc.iter_mut().enumerate() {
            // SAFETY: as above.
            let x = V::splat(unsafe { *a.add(p * MR + i) });
            row[0] = row[0].mul_add(x, b0);
            row[1] = row[1].mul_add(x, b1);
        }
    }
    if rows == MR && cols == NR {
        for (i, row) in acc.iter().enumerate() {
            for (half, &v) in row.iter().enumerate() {
                // SAFETY: the whole tile is inside `c`.
                unsafe {
                    let p = c.add(i * ldc + half * 4);
                    let v = if beta == 0.0 { v } else { v.mul_add(V::splat(beta), V::load(p)) };
                    v.store(p);
                }
            }
        }
        return;
    }
    let mut tile = [[0.0f32; NR]; MR];
    for (out, row) in tile.iter_mut().zip(&acc) {
        // SAFETY: `out` holds 8 floats.
        unsafe { (row[0].store(out.as_mut_ptr()), row[1].store(out.as_mut_ptr().add(4))) };
    }
    for (i, out) in tile.iter().enumerate().take(rows) {
        for (j, &v) in out.iter().enumerate().take(cols) {
            // SAFETY: `[i, j]` is inside `c` for `i < rows`, `j < cols`.
            unsafe {
                let p = c.add(i * ldc + j);
                *p = if beta == 0.0 { v } else { v + beta * *p };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::kernels::tests::noise;

    /// `gemm` on plain arrays against an f64 triple loop: shapes on both sides of every block
    /// edge (the 4 x 8 tile, `MC`, `KC`, `NC`), `A` row-major, strided and reversed, `B`
    /// row-major and transposed, `beta` 0 (onto NaN, so any read of `c` shows), 1 and 0.5, into
    /// rows wider than the product (columns past it must stay untouched).
    #[test]
    fn tiled_gemm_matches_definition_across_block_edges() {
        let shapes =
            [[1, 1, 1], [3, 5, 7], [4, 8, 8], [5, 9, 9], [67, 257, 13], [130, 40, 265], [9, 0, 6]];
        for [m, k, n] in shapes {
            let ldc = n + 3;
            let a_data = noise(2 * m * k.max(1), 1.0);
            let b_data = noise(k * n + 1, 1.0);
            // `A` as stored three ways; element [i, p] is the same number in each.
            let a_of = |i: usize, p: usize| a_data[2 * (i * k + p)];
            let a_layouts = [
                ("row-major", a_data.iter().step_by(2).copied().collect::<Vec<_>>(), k, 1),
                ("strided", a_data.clone(), 2 * k, 2),
            ];
            let b_of = |p: usize, j: usize| b_data[p * n + j];
            let b_transposed: Vec<f32> =
                (0..n).flat_map(|j| (0..k).map(move |p| (j, p))).map(|(j, p)| b_of(p, j)).collect();
            let b_layouts = [("row-major", &b_data, n, 1), ("transposed", &b_transposed, 1, k)];
            for (a_name, a_store, rsa, csa) in &a_layouts {
                for (b_name, b_store, rsb, csb) in &b_layouts {
                    for reversed in [false, true] {
                        for beta in [0.0f32, 1.0, 0.5] {
                            let start = if beta == 0.0 { f32::NAN } else { 0.25 };
                            let mut c = vec![start; m * ldc];
                            // Reversed: row `i` of the view is stored row `m - 1 - i`.
                            let (ptr, rows) = if reversed && m > 0 {
                                // SAFETY: the last row's start is inside the store.
                                let last = unsafe { a_store.as_ptr().add((m - 1) * rsa) };
                                (last, -(*rsa as isize))
                            } else {
                                (a_store.as_ptr(), *rsa as isize)
                            };
                            let a = Strided { ptr, rows, cols: *csa as isize };
                            let b = Strided {
                                ptr: b_store.as_ptr(),
                                rows: *rsb as isize,
                                cols: *csb as isize,
                            };
                            // SAFETY: the views and `c` hold the shapes given.
                            unsafe { gemm::<[f32; 4]>([m, k, n], a, b, beta, c.as_mut_ptr(), ldc) };
                            let case = format!(
                                "{m}x{k}x{n} {a_name}{} x {b_name}, beta {beta}",
                                if reversed { " reversed" } else { "" }
                            );
                            for i in 0..m {
                                let ai = if reversed { m - 1 - i } else { i };
                                for j in 0..ldc {
                                    let got = c[i * ldc + j];
                                    if j >= n {
                                        let same = got.is_nan() && start.is_nan() || got == start;
                                        assert!(same, "{case}: column {j} past the product");
                                        continue;
                                    }
                                    let dot: f64 = (0..k)
                                        .map(|p| a_of(ai, p) as f64 * b_of(p, j) as f64)
                                        .sum();
                                    let kept = if beta == 0.0 { 0.0 } else { beta * start };
                                    let want = dot + kept as f64;
                                    assert!(
                                        (got as f64 - want).abs() < 1e-4 * (1.0 + want.abs()),
                                        "{case}: [{i}, {j}] {got} vs {want}"
                                    );
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}
