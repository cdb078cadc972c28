//! What the non-parametric calibrators share: the log loss of a model on its points, and
//! the 'quantile' bin edges of the rows behind them.

use crate::fastmath::{ln_1m, ln_normal};
use crate::metrics::binning::{quantile_levels, unweighted_quantile_edges};

/// Mean of the t-weighted log loss of fitted probabilities `p` at the points
/// (clipped to machine epsilon, as `logloss` / `ips_logloss`); `p` is called for each
/// point in order. Points that are single rows of class 0 or 1 (most points of distinct
/// scores) are summed a block at a time by running products
/// ([`crate::fastmath::log_loss_sums_unweighted`]: no logarithm a row); the rest one at a
/// time.
pub(crate) fn points_loss(points: &[(f64, f64, f64)], mut p: impl FnMut(usize) -> f64) -> f64 {
    /// Single rows summed together.
    const BLOCK: usize = 4096;
    let eps = crate::loss::DEFAULT_EPS;
    let (mut num, mut den) = (0.0, 0.0);
    let room = BLOCK.min(points.len());
    let (mut ps, mut ts) = (Vec::with_capacity(room), Vec::with_capacity(room));
    let add_rows = |ps: &mut Vec<f64>, ts: &mut Vec<f64>, num: &mut f64| {
        match crate::fastmath::log_loss_sums_unweighted(ps, ts, eps) {
            Some([loss, _]) => *num += loss,
            // A fitted value outside [0, 1]: the general line below, row by row.
            None => {
                for (&pi, &t) in ps.iter().zip(ts.iter()) {
                    let pi = pi.clamp(eps, 1.0 - eps);
                    *num += -t * ln_normal(pi) - (1.0 - t) * ln_1m(pi);
                }
            }
        }
        ps.clear();
        ts.clear();
    };
    for (i, &(_, n, t)) in points.iter().enumerate() {
        let pi = p(i);
        if n == 1.0 && (t == 0.0 || t == 1.0) {
            ps.push(pi);
            ts.push(t);
            if ps.len() == BLOCK {
                add_rows(&mut ps, &mut ts, &mut num);
            }
        } else {
            // pi ≥ eps is a positive normal number.
            let pi = pi.clamp(eps, 1.0 - eps);
            num += -t * ln_normal(pi) - (n - t) * ln_1m(pi);
        }
        den += n;
    }
    add_rows(&mut ps, &mut ts, &mut num);
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
