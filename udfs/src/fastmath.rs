//! Logarithms for the per-row loss kernels.
//!
//! `logloss` spends most of its time in the C library's `log` / `log1p` (the profile of the
//! realistic bench file: 32% of all samples). [`ln`] is the classic fdlibm `__ieee754_log`
//! reduction and polynomial (Sun Microsystems, 1993: `x = 2^k·(1+f)`, `1+f` in [√½, √2),
//! `s = f/(2+f)`, a degree-14 odd polynomial in `s`), written branch-free so the compiler can
//! keep it in registers and interleave rows; its error is below 1 ulp, the same bound as the
//! C library's. [`ln_1m`] is `ln(1 − p)` accurate to a few ulps for every p, by the usual
//! correction of the rounding of `1 − p` (`ln(u) + c/u`, `c = (1 − u) − p`).
//!
//! Both agree with Rust's `f64::ln` / `ln_1p` within 2 ulps on every value the unit tests
//! try; the sums of 20M rows in the slt files and the round-trip tests are unchanged at
//! their 1e-12 relative tolerance.

// fdlibm's coefficients as published (more digits than an f64 holds; they round to it).
#![allow(clippy::excessive_precision)]

const LG1: f64 = 6.666666666666735130e-01;
const LG2: f64 = 3.999999999940941908e-01;
const LG3: f64 = 2.857142874366239149e-01;
const LG4: f64 = 2.222219843214978396e-01;
const LG5: f64 = 1.818357216161805012e-01;
const LG6: f64 = 1.531383769920937332e-01;
const LG7: f64 = 1.479819860511658591e-01;
const LN2_HI: f64 = 6.93147180369123816490e-01;
const LN2_LO: f64 = 1.90821492927058770002e-10;
/// The bit pattern of √½: mantissas at or above it stay in [√½, 1), the rest move to [1, √2).
const SQRT_HALF_BITS: u64 = 0x3fe6_a09e_667f_3bcd;
const ONE_BITS: u64 = 0x3ff0_0000_0000_0000;
const MANTISSA: u64 = 0x000f_ffff_ffff_ffff;
const TWO_52: f64 = 4503599627370496.0;
const TWO_52_BITS: u64 = 0x4330_0000_0000_0000;

/// The natural logarithm; below 1 ulp of error for positive normal finite x, and exactly
/// `f64::ln` elsewhere (0, subnormals, infinities, NaN, negatives).
#[inline(always)]
pub(crate) fn ln(x: f64) -> f64 {
    if !(f64::MIN_POSITIVE..f64::INFINITY).contains(&x) {
        return x.ln();
    }
    ln_normal(x)
}

/// [`ln`] for positive normal finite x only (anything else gives garbage, never UB): no
/// branch at all, so a loop over it vectorises. The binary exponent k becomes a float by
/// the 2^52 trick (exact, and vectorisable where an integer conversion is not).
#[inline(always)]
pub(crate) fn ln_normal(x: f64) -> f64 {
    let bits = x.to_bits().wrapping_add(ONE_BITS - SQRT_HALF_BITS);
    let dk = f64::from_bits((bits >> 52) | TWO_52_BITS) - (TWO_52 + 1023.0);
    let f = f64::from_bits((bits & MANTISSA).wrapping_add(SQRT_HALF_BITS)) - 1.0;
    let hfsq = 0.5 * f * f;
    let s = f / (2.0 + f);
    let z = s * s;
    let w = z * z;
    let r = z * (LG1 + w * (LG3 + w * (LG5 + w * LG7))) + w * (LG2 + w * (LG4 + w * LG6));
    s * (hfsq + r) + dk * LN2_LO - hfsq + f + dk * LN2_HI
}

/// The log loss `−[y ln p + (1−y) ln(1−p)]` of a label y in {0, 1} and p clipped to
/// [eps, 1−eps], without a branch: the argument of the logarithm is chosen
/// by arithmetic (exact, as y is 0 or 1) and ln(1−p) is corrected for the rounding of 1−p.
/// An eps below machine epsilon (0 is allowed; 1 − eps may then round to 1, and p or 1 − p
/// reach 0 or a subnormal) takes the checked [`ln`].
#[inline(always)]
pub(crate) fn log_loss(p: f64, y: f64, eps: f64) -> f64 {
    if eps >= f64::EPSILON {
        log_loss_fast(p, y, eps)
    } else {
        log_loss_checked(p, y, eps)
    }
}

/// eps ≥ machine epsilon: 1 − p ≥ eps > 0, so the correction's division is always defined
/// and the whole function is straight-line arithmetic (a branch or a guarded division here
/// keeps the compiler from vectorising the loop that calls it).
#[inline(always)]
fn log_loss_fast(p: f64, y: f64, eps: f64) -> f64 {
    let p = p.max(eps).min(1.0 - eps);
    let u = 1.0 - p;
    let c = (1.0 - u) - p;
    let x = y * p + (1.0 - y) * u;
    -(ln_normal(x) + (1.0 - y) * (c / u))
}

#[inline(always)]
fn log_loss_checked(p: f64, y: f64, eps: f64) -> f64 {
    let p = p.max(eps).min(1.0 - eps);
    let u = 1.0 - p;
    let c = (1.0 - u) - p;
    let x = y * p + (1.0 - y) * u;
    // c = 0 whenever 1 − p is exact (always for p ≥ ½, so also at p = 1 where u = 0).
    let correction = if c == 0.0 { 0.0 } else { c / u };
    -(ln(x) + (1.0 - y) * correction)
}

/// Σw, Σw·loss and Σw·y of checked rows (labels 0/1, p in [0, 1], weights ≥ 0; `w` None
/// for weight 1) in four independent lanes, so the loop vectorises.
pub(crate) fn log_loss_sums(p: &[f64], y: &[f64], w: Option<&[f64]>, eps: f64) -> [f64; 3] {
    if eps >= f64::EPSILON {
        log_loss_sums_with(p, y, w, |p, y| log_loss_fast(p, y, eps))
    } else {
        log_loss_sums_with(p, y, w, |p, y| log_loss_checked(p, y, eps))
    }
}

#[inline(always)]
fn log_loss_sums_with(
    p: &[f64],
    y: &[f64],
    w: Option<&[f64]>,
    log_loss: impl Fn(f64, f64) -> f64,
) -> [f64; 3] {
    // Fixed-size lanes over exact chunks (no closure, no lane index computed at run time),
    // so the compiler keeps the sums in registers and vectorises the lanes.
    const LANES: usize = 4;
    let n = p.len() / LANES * LANES;
    let (mut sw, mut sl, mut sy) = ([0.0; LANES], [0.0; LANES], [0.0; LANES]);
    match w {
        None => {
            for (pc, yc) in p[..n].chunks_exact(LANES).zip(y[..n].chunks_exact(LANES)) {
                for j in 0..LANES {
                    sl[j] += log_loss(pc[j], yc[j]);
                    sy[j] += yc[j];
                }
            }
            sw[0] = n as f64;
        }
        Some(w) => {
            for ((pc, yc), wc) in p[..n]
                .chunks_exact(LANES)
                .zip(y[..n].chunks_exact(LANES))
                .zip(w[..n].chunks_exact(LANES))
            {
                for j in 0..LANES {
                    sw[j] += wc[j];
                    sl[j] += wc[j] * log_loss(pc[j], yc[j]);
                    sy[j] += wc[j] * yc[j];
                }
            }
        }
    }
    for i in n..p.len() {
        let wi = w.map_or(1.0, |w| w[i]);
        sw[0] += wi;
        sl[0] += wi * log_loss(p[i], y[i]);
        sy[0] += wi * y[i];
    }
    [sw, sl, sy].map(|s| s.iter().sum())
}

/// `ln(1 − p)` for p in [0, 1]: `ln(u) + c/u` with `u = 1 − p` rounded and `c` its rounding
/// error, so small p keep their relative accuracy (as `ln_1p(−p)` does).
#[inline(always)]
pub(crate) fn ln_1m(p: f64) -> f64 {
    let u = 1.0 - p;
    let c = (1.0 - u) - p;
    // c = 0 whenever 1 − p is exact (always for p ≥ ½, so also at p = 1 where u = 0).
    ln(u) + if c == 0.0 { 0.0 } else { c / u }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ulps(a: f64, b: f64) -> f64 {
        if a == b {
            0.0
        } else {
            ((a - b) / (b.abs() * f64::EPSILON)).abs()
        }
    }

    fn samples() -> Vec<f64> {
        let mut out = vec![
            1.0,
            0.5,
            2.0,
            std::f64::consts::SQRT_2,
            std::f64::consts::FRAC_1_SQRT_2,
            f64::MIN_POSITIVE,
            f64::MAX,
            f64::EPSILON,
            1.0 - f64::EPSILON / 2.0,
            1.0 + f64::EPSILON,
            1e-300,
            0.1,
            0.3,
            0.7,
            0.9,
        ];
        // Every decade from 1e-300 to 1e300, and a pseudo-random spread inside [0, 1].
        let mut st = 0x9e37_79b9_7f4a_7c15_u64;
        for _ in 0..200_000 {
            st ^= st << 13;
            st ^= st >> 7;
            st ^= st << 17;
            let u = ((st >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
            out.push(u);
            out.push(u * 10f64.powi((st % 600) as i32 - 300));
        }
        out
    }

    #[test]
    fn ln_is_within_one_ulp_of_std() {
        for x in samples() {
            let (ours, std) = (ln(x), x.ln());
            assert!(
                ulps(ours, std) <= 1.0 || (ours - std).abs() <= f64::EPSILON * 1e-300,
                "ln({x:e}) = {ours:e}, std {std:e}"
            );
        }
        for x in [0.0, -1.0, f64::INFINITY, f64::NAN, 1e-310] {
            assert_eq!(ln(x).to_bits(), x.ln().to_bits(), "{x}");
        }
    }

    #[test]
    fn log_loss_is_within_two_ulps_of_std() {
        for p in samples().into_iter().filter(|p| (0.0..=1.0).contains(p)) {
            // Both paths: the checked one (eps below machine epsilon) and the branch-free one.
            for eps in [1e-300, f64::EPSILON, 1e-6] {
                let pc = p.clamp(eps, 1.0 - eps);
                for (y, std) in [(1.0, -pc.ln()), (0.0, -(-pc).ln_1p())] {
                    let ours = log_loss(p, y, eps);
                    assert!(
                        ulps(ours, std) <= 2.0,
                        "log_loss({p:e}, {y}, {eps:e}) = {ours:e}, std {std:e}"
                    );
                    let [_, sum, _] = log_loss_sums(&[p], &[y], None, eps);
                    assert_eq!(sum, ours);
                }
            }
        }
    }

    #[test]
    fn ln_1m_is_within_two_ulps_of_ln_1p() {
        for p in samples().into_iter().filter(|p| (0.0..1.0).contains(p)) {
            let (ours, std) = (ln_1m(p), (-p).ln_1p());
            assert!(
                ulps(ours, std) <= 2.0,
                "ln_1m({p:e}) = {ours:e}, std {std:e}"
            );
        }
        assert_eq!(ln_1m(0.0), 0.0);
        assert_eq!(ln_1m(1.0), f64::NEG_INFINITY);
    }
}
