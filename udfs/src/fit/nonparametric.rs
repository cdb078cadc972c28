//! What the non-parametric calibrators share: the log loss of a model on its points, and
//! the 'quantile' bin edges of the rows behind them.

use crate::fastmath::{ln_1m, ln_normal};
use crate::metrics::binning::{quantile_levels, unweighted_quantile_edges};

/// Mean of the t-weighted log loss of fitted probabilities `p` at the points
/// (clipped to machine epsilon, as `logloss` / `ips_logloss`); `p` is called for each
/// point in order. See [`LossSum`].
pub(crate) fn points_loss(points: &[(f64, f64, f64)], mut p: impl FnMut(usize) -> f64) -> f64 {
    let mut sum = LossSum::new(points.len());
    for (i, &(_, n, t)) in points.iter().enumerate() {
        sum.add(p(i), n, t);
    }
    sum.mean()
}

/// The t-weighted log loss of fitted probabilities, clipped to machine epsilon (as
/// `logloss` / `ips_logloss`), summed point by point. Single rows of class 0 or 1 (most
/// points of distinct scores, and every kept row) are summed a block at a time by running
/// products ([`crate::fastmath::log_loss_sums_unweighted`]: no logarithm a row); the rest
/// one at a time.
pub(crate) struct LossSum {
    /// Fitted probabilities and targets of single rows waiting for their block.
    ps: Vec<f64>,
    ts: Vec<f64>,
    num: f64,
    den: f64,
}

impl LossSum {
    /// Single rows summed together.
    const BLOCK: usize = 4096;

    /// A sum for about `points` points (its block's room).
    pub(crate) fn new(points: usize) -> Self {
        let room = Self::BLOCK.min(points);
        Self {
            ps: Vec::with_capacity(room),
            ts: Vec::with_capacity(room),
            num: 0.0,
            den: 0.0,
        }
    }

    /// Adds a point of `n` rows and total target `t` whose fitted probability is `p`.
    #[inline]
    pub(crate) fn add(&mut self, p: f64, n: f64, t: f64) {
        if n == 1.0 && (t == 0.0 || t == 1.0) {
            self.ps.push(p);
            self.ts.push(t);
            if self.ps.len() == Self::BLOCK {
                self.add_block();
            }
        } else {
            // p ≥ eps is a positive normal number.
            let p = p.clamp(crate::loss::DEFAULT_EPS, 1.0 - crate::loss::DEFAULT_EPS);
            self.num += -t * ln_normal(p) - (n - t) * ln_1m(p);
        }
        self.den += n;
    }

    fn add_block(&mut self) {
        let eps = crate::loss::DEFAULT_EPS;
        match crate::fastmath::log_loss_sums_unweighted(&self.ps, &self.ts, eps) {
            Some([loss, _]) => self.num += loss,
            // A fitted value outside [0, 1]: the general line, row by row.
            None => {
                for (&p, &t) in self.ps.iter().zip(self.ts.iter()) {
                    let p = p.clamp(eps, 1.0 - eps);
                    self.num += -t * ln_normal(p) - (1.0 - t) * ln_1m(p);
                }
            }
        }
        self.ps.clear();
        self.ts.clear();
    }

    /// The mean loss over the rows added.
    pub(crate) fn mean(mut self) -> f64 {
        self.add_block();
        self.num / self.den
    }
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
