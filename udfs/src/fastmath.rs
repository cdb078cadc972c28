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

use crate::labels::{label_values, Label};

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

/// Moves a positive normal product's binary exponent into `exps` (exact) and its mantissa
/// back to [1, 2) (see [`log_loss_sums_unweighted`]).
#[inline(always)]
fn normalise(prod: &mut f64, exps: &mut f64) {
    let bits = prod.to_bits();
    *exps += f64::from_bits((bits >> 52) | TWO_52_BITS) - (TWO_52 + 1023.0);
    *prod = f64::from_bits((bits & MANTISSA) | ONE_BITS);
}

/// The loss `−(ln prod + k·ln 2 + corr)` of a lane whose factors multiplied to prod·2^k:
/// k·ln 2 in two parts, as fdlibm (k·LN2_HI is exact while |k| < 2²¹: below 40,000
/// normalisations of a lane).
#[inline(always)]
fn product_loss(prod: f64, k: f64, corr: f64) -> f64 {
    -(ln_normal(prod) + k * LN2_LO + k * LN2_HI + corr)
}

/// A row's factor in its lane's product (`p` or `1 − p`, p clipped to [eps, 1 − eps]) and its
/// correction for the rounding of 1 − p (see [`log_loss_sums_unweighted`]).
#[inline(always)]
fn loss_factor(p: f64, y: f64, eps: f64) -> (f64, f64) {
    let q = p.max(eps).min(1.0 - eps);
    let u = 1.0 - q;
    let c = (1.0 - u) - q;
    (y * q + (1.0 - y) * u, (1.0 - y) * (c * (1.0 + q)))
}

/// Per group of a batch's checked rows (p in [0, 1], y 0 or 1) spread over `n_groups` groups,
/// unweighted, eps ≥ machine epsilon: [rows, Σ loss, Σ y], by [`log_loss_sums_unweighted`]'s
/// products, one running product a group normalised every 16 of its rows. None when a
/// group's mean loss in the batch is below 2⁻¹⁰, where the products' absolute rounding
/// would not be small against it: the caller then adds one logarithm a row.
pub(crate) fn log_loss_sums_grouped(
    p: &[f64],
    y: &[f64],
    groups: &[usize],
    n_groups: usize,
    eps: f64,
) -> Option<Vec<[f64; 3]>> {
    debug_assert!(eps >= f64::EPSILON);
    /// Per group: product, exponent, correction, rows since the last normalisation.
    #[derive(Clone, Copy)]
    struct Lane {
        prod: f64,
        exps: f64,
        corr: f64,
        since: u32,
    }
    let mut lanes = vec![
        Lane {
            prod: 1.0,
            exps: 0.0,
            corr: 0.0,
            since: 0,
        };
        n_groups
    ];
    let mut sums = vec![[0.0f64; 3]; n_groups];
    for ((&pi, &yi), &g) in p.iter().zip(y).zip(groups) {
        let (factor, corr) = loss_factor(pi, yi, eps);
        let lane = &mut lanes[g];
        lane.prod *= factor;
        lane.corr += corr;
        lane.since += 1;
        if lane.since == 16 {
            normalise(&mut lane.prod, &mut lane.exps);
            lane.since = 0;
        }
        sums[g][0] += 1.0;
        sums[g][2] += yi;
    }
    for (lane, s) in lanes.iter().zip(&mut sums) {
        if s[0] > 0.0 {
            s[1] = product_loss(lane.prod, lane.exps, lane.corr);
            if s[1] < s[0] * (1.0 / 1024.0) {
                return None;
            }
        }
    }
    Some(sums)
}

/// Σ loss and Σ y of unweighted rows for eps ≥ machine epsilon, checking the rows as it goes
/// (p in [0, 1], y 0 or 1): None, with nothing added, when one fails (the caller's checked
/// path then names the bad value).
///
/// No logarithm per row: Σ ln xᵢ = ln Πxᵢ, so each lane multiplies its rows' xᵢ (p or 1 − p,
/// both ≥ eps ≥ 2⁻⁵²) into a running product and, every [`ROUNDS`] rows, moves the product's
/// binary exponent into an integer count (exact) and its mantissa back to [1, 2); one `ln`
/// per lane at the end. A multiplication rounds by at most 2⁻⁵³ relative, i.e. adds at most
/// 2⁻⁵³ to Σ ln xᵢ, the same order as adding up per-row logarithms. The rounding of 1 − p
/// is corrected as in [`log_loss`] (`ln(1 − p) = ln u + c/u`), with `c·(1 + p)` for `c/u`:
/// c is 0 for p ≥ ½, and for p < ½ the difference is below |c|·p²/(1 − p) ≤ 2⁻⁵⁵.
/// The profile of `logloss` on the realistic bench file showed the per-row logarithm's
/// division and polynomial as its cost; this is a multiply and two adds a row.
pub(crate) fn log_loss_sums_unweighted<Y: Label>(p: &[f64], y: &[Y], eps: f64) -> Option<[f64; 2]> {
    debug_assert!(eps >= f64::EPSILON);
    const LANES: usize = 8;
    /// Factors per lane between normalisations: 16 factors ≥ 2⁻⁵² keep a product that
    /// starts in [1, 2) above 2⁻⁸³², far from the subnormals.
    const ROUNDS: usize = 16;
    const BLOCK: usize = LANES * ROUNDS;
    let n = p.len() / BLOCK * BLOCK;
    let mut prod = [1.0f64; LANES];
    let mut exps = [0.0f64; LANES];
    let mut corr = [0.0f64; LANES];
    let mut pos = [0.0f64; LANES];
    let mut ok = true;
    for (pb, yb) in p[..n].chunks_exact(BLOCK).zip(y[..n].chunks_exact(BLOCK)) {
        for (pc, yc) in pb.chunks_exact(LANES).zip(yb.chunks_exact(LANES)) {
            for j in 0..LANES {
                let (pj, yj) = (pc[j], yc[j].to_f64());
                ok &= (0.0..=1.0).contains(&pj) & yc[j].is_label();
                let (factor, c) = loss_factor(pj, yj, eps);
                prod[j] *= factor;
                corr[j] += c;
                pos[j] += yj;
            }
        }
        // The products are positive normal numbers: exponent out, mantissa back to [1, 2).
        for j in 0..LANES {
            normalise(&mut prod[j], &mut exps[j]);
        }
    }
    if !ok {
        return None;
    }
    let (mut loss, mut positives) = (0.0, 0.0);
    for j in 0..LANES {
        loss += product_loss(prod[j], exps[j], corr[j]);
        positives += pos[j];
    }
    for i in n..p.len() {
        let (pi, yi) = (p[i], y[i].to_f64());
        if !((0.0..=1.0).contains(&pi) & y[i].is_label()) {
            return None;
        }
        loss += log_loss_fast(pi, yi, eps);
        positives += yi;
    }
    // The products' rounding is absolute in Σ ln xᵢ (at most 2⁻⁵³ a row), so it is small
    // against the loss only while the loss is not: when the mean loss is below 2⁻¹⁰ (a model
    // almost always confidently right) the rows are added up one logarithm at a time instead,
    // which keeps every batch within 2⁻⁴³ relative.
    if loss < p.len() as f64 * (1.0 / 1024.0) {
        let [_, l, y] = log_loss_sums(p, &label_values(y), None, eps);
        return Some([l, y]);
    }
    Some([loss, positives])
}

/// Σ of `ips_logloss`'s row loss `−[t ln p + (1 − t) ln(1 − p)]`, t = y / max(q, clip), of
/// checked rows (p in [0, 1], y 0 or 1, q in (0, 1]) with p clipped to [eps, 1 − eps], for
/// eps ≥ machine epsilon: both logarithms of every row, without a branch (whether a row is
/// a click is random, so a branch on it mispredicts), in four lanes, so the loop
/// vectorises. Each row's loss is the per-row formula's (`metrics::loss::ips_loss_row`):
/// a term whose weight is 0 adds 0, as both logarithms are finite here.
pub(crate) fn ips_loss_sum(p: &[f64], y: &[f64], q: &[f64], clip: f64, eps: f64) -> f64 {
    debug_assert!(eps >= f64::EPSILON);
    const LANES: usize = 4;
    let row = |p: f64, y: f64, q: f64| {
        let t = y / q.max(clip);
        let p = p.max(eps).min(1.0 - eps);
        let u = 1.0 - p;
        let c = (1.0 - u) - p;
        -(t * ln_normal(p) + (1.0 - t) * (ln_normal(u) + c / u))
    };
    let n = p.len() / LANES * LANES;
    let mut sum = [0.0; LANES];
    for ((pc, yc), qc) in p[..n]
        .chunks_exact(LANES)
        .zip(y[..n].chunks_exact(LANES))
        .zip(q[..n].chunks_exact(LANES))
    {
        for j in 0..LANES {
            sum[j] += row(pc[j], yc[j], qc[j]);
        }
    }
    for i in n..p.len() {
        sum[0] += row(p[i], y[i], q[i]);
    }
    sum.iter().sum()
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

    /// `ips_loss_sum` against the definition with the standard library's logarithms
    /// (`−[t ln p + (1 − t) ln_1p(−p)]`, each term only when its weight is not 0), over
    /// probabilities from 0 to 1 (clipped), both labels and propensities down to the clip:
    /// within 1e-12 relative of the sum (the lanes add in another order).
    #[test]
    fn ips_loss_sum_is_the_definition() {
        let p: Vec<f64> = samples().into_iter().filter(|x| *x <= 1.0).collect();
        let n = p.len();
        let y: Vec<f64> = (0..n).map(|i| ((i * 7) % 3 == 0) as u8 as f64).collect();
        let q: Vec<f64> = (0..n).map(|i| 0.001 + (i % 1000) as f64 / 1000.0).collect();
        let (clip, eps) = (0.01, 1e-15);
        let mut want = 0.0;
        for i in 0..n {
            let t = y[i] / q[i].max(clip);
            let pc = p[i].clamp(eps, 1.0 - eps);
            if t != 0.0 {
                want -= t * pc.ln();
            }
            if t != 1.0 {
                want -= (1.0 - t) * (-pc).ln_1p();
            }
        }
        for len in [n, n - 1, 3] {
            let got = ips_loss_sum(&p[..len], &y[..len], &q[..len], clip, eps);
            let want = if len == n {
                want
            } else {
                (0..len)
                    .map(|i| {
                        let t = y[i] / q[i].max(clip);
                        let pc = p[i].clamp(eps, 1.0 - eps);
                        -(t * pc.ln() + (1.0 - t) * (-pc).ln_1p())
                    })
                    .sum()
            };
            assert!(
                (got - want).abs() <= 1e-12 * want.abs(),
                "{len}: {got} vs {want}"
            );
        }
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

    /// Σ of the standard library's per-row losses, compensated (Kahan), as the reference.
    fn reference_sum(p: &[f64], y: &[f64], eps: f64) -> f64 {
        let (mut sum, mut carry) = (0.0f64, 0.0f64);
        for (&p, &y) in p.iter().zip(y) {
            let q = p.clamp(eps, 1.0 - eps);
            let l = if y == 1.0 { -q.ln() } else { -(-q).ln_1p() } - carry;
            let t = sum + l;
            carry = (t - sum) - l;
            sum = t;
        }
        sum
    }

    /// The product form agrees with the compensated sum of the standard library's per-row
    /// losses to 1e-14 relative (the plain per-row sums, 4 lanes of naive addition, are
    /// off by about 1e-14 themselves on 8,192 rows), at every eps and length (tails
    /// included), and refuses a bad row anywhere.
    #[test]
    fn unweighted_sums_by_products_match_per_row_losses() {
        let s = samples();
        let probs: Vec<f64> = s
            .iter()
            .copied()
            .filter(|p| (0.0..=1.0).contains(p))
            .collect();
        for len in [0, 1, 127, 128, 129, 8192, 20_000] {
            for eps in [f64::EPSILON, 1e-6, 0.25] {
                let p: Vec<f64> = probs.iter().cycle().take(len).copied().collect();
                // Extremes too: 0 and 1 of both labels, clipped to eps.
                let p: Vec<f64> = p
                    .iter()
                    .enumerate()
                    .map(|(i, &x)| match i % 97 {
                        0 => 0.0,
                        1 => 1.0,
                        _ => x,
                    })
                    .collect();
                let y: Vec<f64> = (0..len).map(|i| ((i * 7 + i / 3) % 2) as f64).collect();
                let [l, yw] = log_loss_sums_unweighted(&p, &y, eps).unwrap();
                let [_, _, want_y] = log_loss_sums(&p, &y, None, eps);
                let want = reference_sum(&p, &y, eps);
                assert!(
                    (l - want).abs() <= 1e-14 * want.abs().max(1e-300),
                    "len {len} eps {eps:e}: {l:e} vs {want:e}"
                );
                assert_eq!(yw, want_y);
                // Confident, right predictions (mean loss ~1e-10): the per-row path, whose
                // relative accuracy does not depend on the size of the loss (1e-13: its
                // lanes add naively).
                let tiny: Vec<f64> = (0..len).map(|i| 1e-10 * (1.0 + (i % 5) as f64)).collect();
                let zeros = vec![0.0; len];
                let [l, _] = log_loss_sums_unweighted(&tiny, &zeros, eps).unwrap();
                let want = reference_sum(&tiny, &zeros, eps);
                assert!((l - want).abs() <= 1e-13 * want.abs(), "{l:e} vs {want:e}");
                if len > 0 {
                    for (bad_p, bad_y) in [(1.5, 0.0), (f64::NAN, 1.0), (0.5, 2.0), (-0.1, 0.0)] {
                        let (mut p2, mut y2) = (p.clone(), y.clone());
                        p2[len - 1 - len / 3] = bad_p;
                        y2[len - 1 - len / 3] = bad_y;
                        assert!(log_loss_sums_unweighted(&p2, &y2, eps).is_none());
                    }
                }
            }
        }
    }

    /// The grouped products give each group the per-row sum of its rows' losses
    /// (`reference_sum`, std's logarithms) to 1e-14 relative, its row count and its Σy
    /// exactly, for groups of every size (none, one row, fewer than 16, thousands; the rows
    /// of a group scattered through the batch) and the extremes 0 and 1; and refuse a batch
    /// in which one group's predictions are confidently right (mean loss below 2⁻¹⁰).
    #[test]
    fn grouped_sums_by_products_match_per_row_losses() {
        let probs: Vec<f64> = samples()
            .into_iter()
            .filter(|p| (0.0..=1.0).contains(p))
            .collect();
        let n_groups = 9;
        for len in [0, 1, 15, 16, 17, 8192, 20_000] {
            for eps in [f64::EPSILON, 1e-6] {
                let p: Vec<f64> = (0..len)
                    .map(|i| match i % 97 {
                        0 => 0.0,
                        1 => 1.0,
                        _ => probs[i % probs.len()],
                    })
                    .collect();
                let y: Vec<f64> = (0..len).map(|i| ((i * 7 + i / 3) % 2) as f64).collect();
                // Group 8 gets every 1000th row, group 7 none, the rest share the others.
                let groups: Vec<usize> = (0..len)
                    .map(|i| if i % 1000 == 999 { 8 } else { (i * 31 / 7) % 7 })
                    .collect();
                let of = |v: &[f64], g: usize| -> Vec<f64> {
                    v.iter()
                        .zip(&groups)
                        .filter(|(_, &h)| h == g)
                        .map(|(x, _)| *x)
                        .collect()
                };
                // A group of a few rows that happen to be 0 or 1 rightly is confidently right:
                // then the whole batch is refused.
                let confident = (0..n_groups).any(|g| {
                    let pg = of(&p, g);
                    !pg.is_empty() && reference_sum(&pg, &of(&y, g), eps) < pg.len() as f64 / 1024.0
                });
                let got = log_loss_sums_grouped(&p, &y, &groups, n_groups, eps);
                assert_eq!(got.is_none(), confident, "len {len}");
                assert!(len < 8192 || !confident, "the large batches are compared");
                for (g, [rows, l, yw]) in got.unwrap_or_default().into_iter().enumerate() {
                    let (pg, yg) = (of(&p, g), of(&y, g));
                    let want = reference_sum(&pg, &yg, eps);
                    assert_eq!(rows, pg.len() as f64, "group {g}");
                    assert_eq!(yw, yg.iter().sum::<f64>(), "group {g}");
                    let close = (l - want).abs() <= 1e-14 * want.abs().max(1e-300);
                    assert!(close, "len {len} group {g}: {l:e} vs {want:e}");
                }
                if len > 0 {
                    let mut confident = p.clone();
                    for (c, &g) in confident.iter_mut().zip(&groups) {
                        if g == groups[0] {
                            *c = 1e-10;
                        }
                    }
                    let zeros = vec![0.0; len];
                    let refused = log_loss_sums_grouped(&confident, &zeros, &groups, n_groups, eps);
                    assert!(refused.is_none(), "len {len}");
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
