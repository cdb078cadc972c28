//! How the binned metrics (`ece`, `mce`, `reliability`, `ace`, `rmsce`) put a probability in
//! a bin: one [`Strategy`] per tool whose numbers we reproduce, each with its exact edge rule.
//!
//! Two kinds of rule:
//! - **fixed edges** (`'uniform'`, `'sklearn'`, `'netcal'`, `'torchmetrics'`, `'relplot'`,
//!   `'kumar'`): the bin of p depends on p alone, so a group keeps O(n_bins) sums;
//! - **data-dependent edges** (`'quantile'`): the edges are order statistics of the group's
//!   p, so a group keeps its rows (`crate::values`) and bins them at the end.
//!
//! Every float operation below mirrors the tool's own (numpy / torch) arithmetic, so values
//! that fall exactly on an edge (0.3, 0.6, 1.0, …) land where the tool puts them.

use datafusion_common::{plan_err, Result, ScalarValue};

use crate::values::{self, Rows};

/// A binning rule, named by the tool whose numbers it reproduces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Strategy {
    /// `min(floor(p·M), M−1)`: `[k/M, (k+1)/M)`, the last bin closed at 1.
    Uniform,
    /// scikit-learn `calibration_curve(strategy='quantile')`: numpy-percentile edges,
    /// right-closed.
    Quantile,
    /// scikit-learn `calibration_curve(strategy='uniform')`: `linspace` edges, right-closed.
    Sklearn,
    /// netcal 1.4 `ECE(bins=M)`.
    Netcal,
    /// torchmetrics 1.9 `binary_calibration_error(n_bins=M)`.
    Torchmetrics,
    /// relplot 1.0 `binnedECE`: `int(p / (1/M))`.
    Relplot,
    /// uncertainty-calibration 0.1 `get_ece(num_bins=M)`: edges `k/M`, right-closed.
    Kumar,
}

/// Every strategy's SQL name, in the order the docs list them.
pub const STRATEGY_NAMES: &[&str] = &[
    "uniform",
    "quantile",
    "sklearn",
    "netcal",
    "torchmetrics",
    "relplot",
    "kumar",
];

impl Strategy {
    pub fn parse(func: &str, v: &ScalarValue) -> Result<Self> {
        Ok(match v.try_as_str().flatten() {
            Some("uniform") => Strategy::Uniform,
            Some("quantile") => Strategy::Quantile,
            Some("sklearn") => Strategy::Sklearn,
            Some("netcal") => Strategy::Netcal,
            Some("torchmetrics") => Strategy::Torchmetrics,
            Some("relplot") => Strategy::Relplot,
            Some("kumar") => Strategy::Kumar,
            _ => {
                return plan_err!(
                    "{func}: argument strategy must be one of '{}', got {v}",
                    STRATEGY_NAMES.join("', '")
                )
            }
        })
    }

    /// Whether the edges depend on the data (the group keeps its rows).
    pub fn data_dependent(self) -> bool {
        self == Strategy::Quantile
    }
}

/// `numpy.linspace(0, 1, m + 1)[k]`: `k · (1/m)`, the last one exactly 1.
#[inline]
pub(crate) fn linspace01(k: usize, m: usize) -> f64 {
    if k == m {
        1.0
    } else {
        k as f64 * (1.0 / m as f64)
    }
}

/// The fixed-edge rules as a function of p: the bin index, the p the bin averages, and the
/// edges `reliability` shows. `'torchmetrics'` and (for most M) `'relplot'` have one bin more
/// than M: the tools give p = 1.0 a bin of its own.
#[derive(Debug, Clone)]
pub(crate) struct FixedBins {
    strategy: Strategy,
    m: usize,
    mf: f64,
    /// `fl(1/M)`, the step of relplot's rule.
    step: f64,
    /// The number of bins (M, or M + 1).
    n: usize,
    /// The edges the rule compares p with (strategy-specific, see `bin`).
    cuts: Vec<f64>,
    /// Lower and upper edge of each bin, as `reliability` reports them.
    lower: Vec<f64>,
    upper: Vec<f64>,
}

impl FixedBins {
    pub(crate) fn new(strategy: Strategy, m: usize) -> Self {
        let step = 1.0 / m as f64;
        let (n, cuts): (usize, Vec<f64>) = match strategy {
            Strategy::Uniform => (m, (0..=m).map(|k| k as f64 / m as f64).collect()),
            Strategy::Sklearn | Strategy::Netcal => {
                (m, (0..=m).map(|k| linspace01(k, m)).collect())
            }
            Strategy::Torchmetrics => (m + 1, (0..=m).map(|k| torch_linspace01(k, m)).collect()),
            // relplot: `int(1/s) + 1` bins (M + 1, or M when fl(1/s) < M: M = 93, 99, …).
            Strategy::Relplot => ((1.0 / step) as usize + 1, vec![]),
            // uncertainty-calibration: edges fl(k/M), one correctly rounded division.
            Strategy::Kumar => (m, (0..=m).map(|k| k as f64 / m as f64).collect()),
            Strategy::Quantile => unreachable!("data-dependent edges"),
        };
        let (mut lower, mut upper): (Vec<f64>, Vec<f64>) = match strategy {
            Strategy::Relplot => (0..m)
                .map(|k| (k as f64 * step, ((k + 1) as f64 * step).min(1.0)))
                .unzip(),
            _ => (0..m).map(|k| (cuts[k], cuts[k + 1])).unzip(),
        };
        if n > m {
            // The extra bin of p = 1.0.
            lower.push(1.0);
            upper.push(1.0);
        }
        Self {
            strategy,
            m,
            mf: m as f64,
            step,
            n,
            cuts,
            lower,
            upper,
        }
    }

    pub(crate) fn strategy(&self) -> Strategy {
        self.strategy
    }

    /// The number of bins.
    pub(crate) fn n(&self) -> usize {
        self.n
    }

    /// Lower and upper edge of bin k.
    pub(crate) fn edges(&self, k: usize) -> (f64, f64) {
        (self.lower[k], self.upper[k])
    }

    /// The bin of a probability p in [0, 1], and the p the bin averages (netcal clips it).
    #[inline(always)]
    pub(crate) fn bin(&self, p: f64) -> (usize, f64) {
        let m = self.m;
        match self.strategy {
            Strategy::Uniform => (uniform_bin(p, self.mf, (m - 1) as f64), p),
            // searchsorted(edges[1:-1], p, side='left'): the inner edges strictly below p.
            Strategy::Sklearn => (self.cuts[1..m].partition_point(|&e| e < p), p),
            // p clipped to [ε, 1−ε], then histogram's left-closed bins.
            Strategy::Netcal => {
                let p = p.clamp(f64::EPSILON, 1.0 - f64::EPSILON);
                (self.cuts[1..m].partition_point(|&e| e <= p), p)
            }
            // bucketize(right=True) − 1 over all M+1 edges: p = 1.0 gets bin M.
            Strategy::Torchmetrics => (self.cuts[1..=m].partition_point(|&e| e <= p), p),
            Strategy::Relplot => (((p / self.step) as usize).min(self.n - 1), p),
            // searchsorted(fl(k/M) for k = 1..M, p, side='left').
            Strategy::Kumar => (self.cuts[1..=m].partition_point(|&e| e < p), p),
            Strategy::Quantile => unreachable!("data-dependent edges"),
        }
    }
}

/// The uniform rule's bin of a p in [0, 1]: ⌊p·M⌋, with p = 1.0 in the last bin (`top` =
/// M − 1). It is ⌊min(p·M, M − 1)⌋ (M − 1 is an integer, so the minimum and the floor
/// commute), which x86-64 computes in three instructions: a multiply, a `minsd` and one
/// truncating conversion. Rust's `as` wraps the conversion in six more that saturate NaN and
/// out-of-range values, and `.min(M − 1)` on the integer adds four: in `ece(p, y)`'s row loop
/// they were a third of its instructions. For p outside [0, 1] or NaN the result is some
/// number (2^31 on x86-64), never undefined behaviour: callers check p first, or discard the
/// rows when one fails its check.
#[inline(always)]
#[allow(unsafe_code)]
pub(crate) fn uniform_bin(p: f64, mf: f64, top: f64) -> usize {
    let x = p * mf;
    // `minsd`'s own rule: the second operand when the first is not below it (or is NaN).
    let x = if x < top { x } else { top };
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_cvttsd_si32, _mm_set_sd};
        // SAFETY: the intrinsics need SSE2, which every x86-64 processor has; they touch no
        // memory. `cvttsd2si` truncates, and returns i32::MIN for NaN or out of range.
        unsafe { _mm_cvttsd_si32(_mm_set_sd(x)) as u32 as usize }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        // Other targets' conversions saturate in the instruction itself.
        x as u32 as usize
    }
}

/// `torch.linspace(0, 1, m + 1)[k]` in float64 on the CPU: torch computes the first half
/// from the start (`k·step`) and the second half from the end (`1 − (m − k)·step`), which its
/// vectorised (AVX2/AVX-512, NEON) kernels contract to one fused multiply-add. The scalar
/// fallback kernel (`ATEN_CPU_CAPABILITY=default`) rounds twice and differs in the last bit
/// for most M (first M = 15, 17, 20, …): calibsql follows the vectorised kernels, which is
/// what torch runs on any current x86-64 or ARM machine.
pub(crate) fn torch_linspace01(k: usize, m: usize) -> f64 {
    let step = 1.0 / m as f64;
    let halfway = m.div_ceil(2); // (m + 1) / 2: torch's `steps / 2`
    if k < halfway {
        k as f64 * step
    } else {
        (-step).mul_add((m - k) as f64, 1.0)
    }
}

/// numpy's `_lerp`: `a + (b − a)·t`, computed from the far end when `t ≥ 0.5`.
#[inline]
pub(crate) fn np_lerp(a: f64, b: f64, t: f64) -> f64 {
    let d = b - a;
    if t >= 0.5 {
        b - d * (1.0 - t)
    } else {
        a + d * t
    }
}

/// The probabilities `q_k` numpy's percentile sees for scikit-learn's
/// `np.percentile(p, np.linspace(0, 1, M+1) * 100)`: `(linspace · 100) / 100`.
pub(crate) fn quantile_levels(m: usize) -> Vec<f64> {
    (0..=m).map(|k| linspace01(k, m) * 100.0 / 100.0).collect()
}

/// The `k`-th smallest of the union of two sorted slices.
pub(crate) fn kth_of_two(a: &[f64], b: &[f64], k: usize) -> f64 {
    // The number i of elements taken from `a` among the k+1 smallest.
    let (mut lo, mut hi) = ((k + 1).saturating_sub(b.len()), (k + 1).min(a.len()));
    while lo < hi {
        let i = (lo + hi) / 2;
        let j = k + 1 - i; // taken from b
                           // Too few from a if a[i] < b[j-1].
        if j > 0 && i < a.len() && a[i] < b[j - 1] {
            lo = i + 1;
        } else {
            hi = i;
        }
    }
    let i = lo;
    let j = k + 1 - i;
    match (
        i.checked_sub(1).map(|x| a[x]),
        j.checked_sub(1).map(|x| b[x]),
    ) {
        (Some(x), Some(y)) => x.max(y),
        (Some(x), None) => x,
        (None, Some(y)) => y,
        (None, None) => unreachable!("k < a.len() + b.len()"),
    }
}

/// The M+1 edges of `'quantile'` bins over a group's unweighted rows, each class one
/// ascending slice: numpy's `percentile(p, linspace(0, 1, M+1)*100)` (method `'linear'`).
pub(crate) fn quantile_edges(neg: &[f64], pos: &[f64], m: usize) -> Vec<f64> {
    let n = neg.len() + pos.len();
    unweighted_quantile_edges(n, &quantile_levels(m), |i| kth_of_two(neg, pos, i))
}

/// The M+1 edges of `'quantile'` bins over a group's weighted rows, each class ascending
/// (scores, weights) parts: numpy's `percentile(p, linspace(0, 1, M+1)*100,
/// weights=w, method='inverted_cdf')`, the first score whose cumulative weight share
/// cdf = cumsum(w) / total reaches q, where the leading zero shares count as −1 (never
/// reached); the last score when none does. Two sweeps over the distinct scores, without a
/// copy: the total, then the shares (summed a score at a time: the same edges as numpy's
/// row at a time, up to the sums' rounding).
pub(crate) fn weighted_quantile_edges(
    negs: &[(&[f64], &[f64])],
    poss: &[(&[f64], &[f64])],
    m: usize,
) -> Vec<f64> {
    let qs = quantile_levels(m);
    let mut total = 0.0;
    values::for_each_weighted_score(negs, poss, |_, w0, w1| total += w0 + w1);
    let mut edges = Vec::with_capacity(qs.len());
    let (mut s, mut last) = (0.0, f64::NAN);
    values::for_each_weighted_score(negs, poss, |p, w0, w1| {
        s += w0 + w1;
        last = p;
        let cdf = s / total;
        // Reached: not below q (a NaN share, of a zero total, reaches every q, as in numpy).
        while edges.len() < qs.len()
            && cdf.partial_cmp(&qs[edges.len()]) != Some(std::cmp::Ordering::Less)
            && cdf != 0.0
        {
            edges.push(p);
        }
    });
    // Past the end (the shares' rounding): numpy's index clipped to the last score.
    edges.resize(qs.len(), last);
    edges
}

/// numpy's percentile edges of `n` values at the levels `qs`, from the order statistic `at`.
pub(crate) fn unweighted_quantile_edges(
    n: usize,
    qs: &[f64],
    at: impl Fn(usize) -> f64,
) -> Vec<f64> {
    qs.iter()
        .map(|&q| {
            // numpy: virtual index (n−1)·q; at or past the end, the last value.
            let vi = (n - 1) as f64 * q;
            if vi >= (n - 1) as f64 {
                return at(n - 1);
            }
            let below = vi.floor();
            let i = below as usize;
            np_lerp(at(i), at(i + 1), vi - below)
        })
        .collect()
}

/// The `'quantile'` edges of unweighted, unsorted rows by selection (see
/// [`values::select_ranks`]), or None when the rows are weighted, few (sorting is as fast),
/// or the bins too many.
pub(crate) fn quantile_edges_unsorted(rows: &Rows, m: usize) -> Option<Vec<f64>> {
    if rows.len() < SELECT_FROM || rows.weighted() {
        return None;
    }
    let mut parts = rows.parts(0);
    parts.extend(rows.parts(1));
    quantile_edges_of_parts(&parts, m)
}

/// Rows from which [`quantile_edges_of_parts`] pays: below, sorting a copy is as fast.
pub(crate) const SELECT_FROM: usize = 1 << 14;

/// `numpy.percentile` edges (the 'quantile' rule, `m` bins) of the union of `parts` (in any
/// order, left untouched), by selecting the order statistics they read; None when there
/// are too many bins to select (see `values::select_ranks`) or no rows.
pub(crate) fn quantile_edges_of_parts(parts: &[&[f64]], m: usize) -> Option<Vec<f64>> {
    let n: usize = parts.iter().map(|p| p.len()).sum();
    if n == 0 {
        return None;
    }
    let qs = quantile_levels(m);
    // The order statistics the edges read: floor and floor + 1 of each virtual index.
    let mut ranks = vec![];
    for &q in &qs {
        let vi = (n - 1) as f64 * q;
        let i = (vi.floor() as usize).min(n - 1);
        ranks.push(i);
        ranks.push((i + 1).min(n - 1));
    }
    ranks.sort_unstable();
    ranks.dedup();
    let values = values::select_ranks(parts, &ranks)?;
    let at = |i: usize| values[ranks.binary_search(&i).expect("a selected rank")];
    Some(unweighted_quantile_edges(n, &qs, at))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kth_of_two_is_the_merged_order_statistic() {
        let a = [0.1, 0.2, 0.2, 0.5, 0.9];
        let b = [0.0, 0.2, 0.3, 1.0];
        let mut all: Vec<f64> = a.iter().chain(&b).copied().collect();
        all.sort_by(f64::total_cmp);
        for (k, v) in all.iter().enumerate() {
            assert_eq!(kth_of_two(&a, &b, k), *v, "k = {k}");
            assert_eq!(kth_of_two(&b, &a, k), *v, "k = {k}");
            assert_eq!(kth_of_two(&all, &[], k), *v);
            assert_eq!(kth_of_two(&[], &all, k), *v);
        }
    }

    #[test]
    fn quantile_edges_of_constant_p_are_all_equal() {
        let e = quantile_edges(&[0.1; 10], &[], 10);
        assert!(e.iter().all(|&x| x == 0.1));
    }

    #[test]
    fn quantile_edges_interpolate_linearly() {
        // numpy.percentile([0, 1, 2, 3], [0, 50, 100]) = [0, 1.5, 3]
        assert_eq!(
            quantile_edges(&[0.0, 1.0, 2.0, 3.0], &[], 2),
            [0.0, 1.5, 3.0]
        );
    }

    /// `uniform_bin` is ⌊p·M⌋ capped at M − 1 (Rust's saturating `as`, the rule's
    /// definition) for p on and beside every edge k/M, 0, 1 and −0.0, M = 1 … 300.
    #[test]
    fn uniform_bin_is_the_capped_floor() {
        for m in 1..=300usize {
            let mf = m as f64;
            let mut ps = vec![0.0, -0.0, 1.0, f64::MIN_POSITIVE, 1.0 - f64::EPSILON / 2.0];
            for k in 0..=m {
                let e = k as f64 / mf;
                ps.extend([e, e.next_down(), e.next_up()]);
            }
            for p in ps.into_iter().filter(|p| (0.0..=1.0).contains(p)) {
                let want = ((p * mf) as usize).min(m - 1);
                assert_eq!(uniform_bin(p, mf, (m - 1) as f64), want, "m {m} p {p:e}");
            }
        }
    }
}
