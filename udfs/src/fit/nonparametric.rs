//! What the non-parametric calibrators share: the log loss of a model on its points, and
//! the 'quantile' bin edges of the rows behind them.

use crate::fastmath::{ln_1m, ln_normal};
use crate::metrics::binning::{quantile_levels, unweighted_quantile_edges};

/// Mean of the t-weighted log loss of fitted probabilities `p` at the points
/// (clipped to machine epsilon, as `logloss` / `ips_logloss`); `p` is called for each
/// point in order.
pub(crate) fn points_loss(points: &[(f64, f64, f64)], mut p: impl FnMut(usize) -> f64) -> f64 {
    let eps = crate::loss::DEFAULT_EPS;
    let (mut num, mut den) = (0.0, 0.0);
    for (i, &(_, n, t)) in points.iter().enumerate() {
        let pi = p(i).clamp(eps, 1.0 - eps);
        if n == 1.0 && (t == 0.0 || t == 1.0) {
            // A single row (most points of distinct scores): the one logarithm its class
            // weighs, chosen without a branch on the class: ln(p), or ln(1 − p) as
            // `ln_1m` computes it (the rounded 1 − p and its rounding error), the same
            // values as the general line below.
            let u = if t == 1.0 { pi } else { 1.0 - pi };
            let c = if t == 1.0 { 0.0 } else { (1.0 - u) - pi };
            num -= ln_normal(u) + c / u;
        } else {
            // pi ≥ eps is a positive normal number.
            num += -t * ln_normal(pi) - (n - t) * ln_1m(pi);
        }
        den += n;
    }
    num / den
}

/// `numpy.percentile` edges (the 'quantile' rule) of the rows behind sorted points
/// (score, rows, positives).
pub(super) fn quantile_edges_of_points(pts: &[(f64, f64, f64)], bins: usize) -> Vec<f64> {
    let mut cumulative = Vec::with_capacity(pts.len());
    let mut total = 0.0;
    for &(_, n, _) in pts {
        total += n;
        cumulative.push(total);
    }
    let rows = total.round() as usize;
    let at = |r: usize| {
        pts[cumulative
            .partition_point(|&c| c <= r as f64)
            .min(pts.len() - 1)]
        .0
    };
    unweighted_quantile_edges(rows, &quantile_levels(bins), at)
}
