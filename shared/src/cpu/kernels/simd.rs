//! Per-element math that the compiler vectorises: `exp`, the normal CDF and density, lane-wise
//! folds, and [`vectorised!`], which compiles a row kernel for the widest SIMD the CPU has.

/// Defines `fn $name` three times over: as written, compiled for AVX2 + FMA, and compiled for
/// AVX-512, and runs the widest the CPU has. The workspace builds for baseline x86-64 (SSE2, four
/// lanes), so without this the per-element loops below would use a quarter of an AVX-512
/// register, and calls to libm's `expf` not at all. Helpers the body calls must be
/// `#[inline(always)]` to be compiled into each.
macro_rules! vectorised {
    (
        $(#[$meta:meta])*
        $vis:vis fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block
    ) => {
        $(#[$meta])*
        $vis fn $name($($arg: $ty),*) $(-> $ret)? {
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("avx512vl")
            {
                #[target_feature(enable = "avx512f,avx512vl,avx2,fma")]
                fn widest($($arg: $ty),*) $(-> $ret)? $body
                // SAFETY: the CPU has the features `widest` was compiled for (checked above).
                return unsafe { widest($($arg),*) };
            }
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
            {
                #[target_feature(enable = "avx2,fma")]
                fn wide($($arg: $ty),*) $(-> $ret)? $body
                // SAFETY: the CPU has the features `wide` was compiled for (checked above).
                return unsafe { wide($($arg),*) };
            }
            $body
        }
    };
}
pub(super) use vectorised;

/// `e^x` in f32, within 2 ulp of the exact value, as straight-line code the compiler vectorises
/// (libm's `expf` is a call per element). Below -87.3 it is 0 (f32's normal range ends there),
/// above 88 it is `e^88`, and NaN stays NaN. Range reduction `x = n ln 2 + r` with
/// `|r| <= ln 2 / 2`, then Cephes' degree-5 minimax polynomial for `e^r`, then `2^n` built in the
/// exponent bits.
#[inline(always)]
pub(super) fn exp_f32(x: f32) -> f32 {
    const ROUND: f32 = 12_582_912.0; // 1.5 * 2^23: adding it rounds to an integer
    let clamped = x.clamp(-88.0, 88.0); // NaN stays NaN
    let shifted = clamped * std::f32::consts::LOG2_E + ROUND;
    let n = shifted - ROUND;
    // ln 2 in two parts, so `n * LN2_HI` is exact.
    let r = clamped - n * 0.693_359_4 - n * -2.121_944_4e-4;
    let p = 1.987_569_1e-4;
    let p = p * r + 1.398_199_9e-3;
    let p = p * r + 8.333_452e-3;
    let p = p * r + 4.166_579_6e-2;
    let p = p * r + 0.166_666_65;
    let p = p * r + 0.5;
    let e_r = p * (r * r) + r + 1.0;
    let two_n =
        f32::from_bits(shifted.to_bits().wrapping_sub(ROUND.to_bits()).wrapping_add(127) << 23);
    if x < -87.3 {
        0.0
    } else {
        e_r * two_n
    }
}

/// `f(acc, x)` folded over `x` in 8 independent lanes, then the lanes: a sum or max the compiler
/// can vectorise (a single accumulator makes each step wait on the last).
#[inline(always)]
pub(super) fn fold_lanes(x: &[f32], init: f32, f: impl Fn(f32, f32) -> f32) -> f32 {
    let mut lanes = [init; 8];
    let mut chunks = x.chunks_exact(8);
    for chunk in &mut chunks {
        for (lane, &v) in lanes.iter_mut().zip(chunk) {
            *lane = f(*lane, v);
        }
    }
    let tail = chunks.remainder().iter().fold(init, |a, &v| f(a, v));
    lanes.into_iter().fold(tail, &f)
}

/// `sum f(x_i)` in f64 over 8 independent lanes.
#[inline(always)]
pub(super) fn sum_f64_lanes(x: &[f32], f: impl Fn(f64) -> f64) -> f64 {
    let mut lanes = [0.0f64; 8];
    let mut chunks = x.chunks_exact(8);
    for chunk in &mut chunks {
        for (lane, &v) in lanes.iter_mut().zip(chunk) {
            *lane += f(v as f64);
        }
    }
    lanes.into_iter().sum::<f64>() + chunks.remainder().iter().map(|&v| f(v as f64)).sum::<f64>()
}

/// `Phi(x)` with `erf` from Abramowitz & Stegun 7.1.26 (error below 1.5e-7): one `exp` and no
/// branches, and it vectorises, where `libm::erff` is a call per element. In f32 the result is
/// within 4e-7 of `Phi` (test below), near f32's resolution of `Phi` close to 1.
#[inline(always)]
pub(super) fn cdf_f32(x: f32) -> f32 {
    let z = (x * std::f32::consts::FRAC_1_SQRT_2).abs();
    let t = 1.0 / (1.0 + 0.327_591_1 * z);
    let poly = t
        * (0.254_829_6
            + t * (-0.284_496_74 + t * (1.421_413_7 + t * (-1.453_152 + t * 1.061_405_4))));
    let erf = (1.0 - poly * exp_f32(-z * z)).copysign(x);
    0.5 * (1.0 + erf)
}

/// The standard normal density `phi(x) = exp(-x^2 / 2) / sqrt(2 pi)`.
#[inline(always)]
pub(super) fn pdf_f32(x: f32) -> f32 {
    const INV_SQRT_2PI: f32 = 0.398_942_3;
    exp_f32(-0.5 * x * x) * INV_SQRT_2PI
}
