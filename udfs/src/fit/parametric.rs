//! What the parametric calibrators (Platt, temperature, beta, Gaussian, Gamma; each fits in
//! its own file) share: the log loss of `σ(θ·features(s))` over one group's state
//! ([`Prepared`]), minimised under the method's constraints by the solver of
//! `crate::optim`, in standardised units, then mapped back to the score's units.

use crate::optim::active_set::Solution;
use crate::optim::{minimise, objective, Node};

use super::state::FitState;

/// Weighted mean and standard deviation of node scores (softplus weights).
fn moments(nodes: &[(f64, f64, f64)]) -> (f64, f64) {
    let w: f64 = nodes.iter().map(|n| n.1).sum();
    let mean = nodes.iter().map(|n| n.1 * n.0).sum::<f64>() / w;
    let var = nodes
        .iter()
        .map(|n| n.1 * (n.0 - mean).powi(2))
        .sum::<f64>()
        / w;
    (mean, var.sqrt())
}

/// One group's state as the parametric fits read it: the nodes (score, softplus weight,
/// linear weight) sorted, so the sums do not depend on the order in which rows and partitions
/// arrived, the row count, the score range and the intercept of the base rate.
pub(super) struct Prepared {
    pub(super) raw: Vec<(f64, f64, f64)>,
    pub(super) n: f64,
    /// logit of the (clamped) positive rate: every fit's starting intercept.
    pub(super) c0: f64,
    pub(super) s_min: f64,
    pub(super) s_max: f64,
}

impl Prepared {
    pub(super) fn new(st: &FitState) -> Self {
        let mut raw = st.nodes();
        raw.sort_by(|x, y| {
            x.0.total_cmp(&y.0)
                .then(x.1.total_cmp(&y.1))
                .then(x.2.total_cmp(&y.2))
        });
        let n = st.rows as f64;
        let total_t: f64 = raw.iter().map(|x| x.2).sum();
        let rate = (total_t / n).clamp(1e-9, 1.0 - 1e-9);
        Self {
            raw,
            n,
            c0: (rate / (1.0 - rate)).ln(),
            s_min: st.s_min,
            s_max: st.s_max,
        }
    }

    /// The mean and standard deviation the scores are standardised by (Platt, Gaussian).
    ///
    /// One distinct score: its moments are (s, 0) exactly. Computed, the mean may miss s by
    /// an ulp and the standard deviation come out ~1e-17 instead of 0; the scores would then
    /// standardise to O(1) noise, and dividing the slope back by that sd gave parameters of
    /// 1e38 (a probability of 0.5 for rows whose IPS rate is 4/3). A zero sd becomes 1.
    pub(super) fn standardisation(&self) -> (f64, f64) {
        let (mu, sd) = if self.s_min == self.s_max {
            (self.s_min, 0.0)
        } else {
            moments(&self.raw)
        };
        (mu, if sd > 0.0 && sd.is_finite() { sd } else { 1.0 })
    }

    /// The nodes with features `phi(score)`.
    pub(super) fn nodes<const K: usize>(&self, phi: impl Fn(f64) -> [f64; K]) -> Vec<Node<K>> {
        self.raw
            .iter()
            .map(|&(s, a, t)| Node { phi: phi(s), a, t })
            .collect()
    }

    /// The mean log loss at `theta` for features `phi` of the raw (unstandardised) score.
    pub(super) fn loss<const K: usize>(
        &self,
        phi: impl Fn(f64) -> [f64; K],
        theta: &[f64; K],
    ) -> f64 {
        objective(&self.nodes(phi), self.n, theta)
    }

    /// Minimises the mean log loss over the nodes `phi` gives, under `cons`, from `start`.
    pub(super) fn minimise<const K: usize>(
        &self,
        phi: impl Fn(f64) -> [f64; K],
        cons: &[[f64; K]],
        start: [f64; K],
    ) -> Solution<K> {
        minimise(&self.nodes(phi), self.n, cons, start)
    }
}

/// A positive scale, or 1 where it is 0 or not finite.
pub(super) fn positive_or_one(x: f64) -> f64 {
    if x > 0.0 && x.is_finite() {
        x
    } else {
        1.0
    }
}

/// Beta calibration reads p clipped to [ε, 1−ε], ε = 2^-52, as betacal does
/// (`np.clip(p, eps, 1 - eps)` with numpy's float64 eps).
pub(crate) fn beta_clip(p: f64) -> f64 {
    p.clamp(f64::EPSILON, 1.0 - f64::EPSILON)
}
