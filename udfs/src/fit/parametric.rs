//! The parametric calibrators' fit (Platt, temperature, beta, Gaussian, Gamma): the log
//! loss of `σ(θ·features(s))` minimised under each method's constraints by the solver of
//! `crate::optim`, on the fit's state, in standardised units.

use crate::model::Model;
use crate::optim::{minimise, objective, Node};

use super::state::FitState;
use super::Method;

/// Gamma calibration's shift lies this fraction of the score range below the smallest score.
pub(super) const GAMMA_SHIFT_FRACTION: f64 = 1e-3;

/// Weighted mean and standard deviation of node scores (softplus weights).
pub(super) fn moments(nodes: &[(f64, f64, f64)]) -> (f64, f64) {
    let w: f64 = nodes.iter().map(|n| n.1).sum();
    let mean = nodes.iter().map(|n| n.1 * n.0).sum::<f64>() / w;
    let var = nodes
        .iter()
        .map(|n| n.1 * (n.0 - mean).powi(2))
        .sum::<f64>()
        / w;
    (mean, var.sqrt())
}

pub(super) fn fit_parametric(method: Method, st: &FitState, m: &mut Model) {
    // Sorted, so the sums do not depend on the order in which rows and partitions arrived.
    let mut raw = st.nodes();
    raw.sort_by(|x, y| {
        x.0.total_cmp(&y.0)
            .then(x.1.total_cmp(&y.1))
            .then(x.2.total_cmp(&y.2))
    });
    let n = st.rows as f64;
    let total_t: f64 = raw.iter().map(|x| x.2).sum();
    let rate = (total_t / n).clamp(1e-9, 1.0 - 1e-9);
    let c0 = (rate / (1.0 - rate)).ln();
    let (s_min, s_max) = (st.s_min, st.s_max);
    match method {
        Method::Platt | Method::Gaussian => {
            // One distinct score: its moments are (s, 0) exactly. Computed, the mean may miss s
            // by an ulp and the standard deviation come out ~1e-17 instead of 0; the scores
            // would then standardise to O(1) noise, and dividing the slope back by that sd
            // gave parameters of 1e38 (a probability of 0.5 for rows whose IPS rate is 4/3).
            let (mu, sd) = if s_min == s_max {
                (s_min, 0.0)
            } else {
                moments(&raw)
            };
            let sd = if sd > 0.0 && sd.is_finite() { sd } else { 1.0 };
            let u = |s: f64| (s - mu) / sd;
            let (u_min, u_max) = (u(s_min), u(s_max));
            if method == Method::Platt {
                let nodes: Vec<Node<2>> = nodes_of(&raw, |s| [1.0, u(s)]);
                let sol = minimise(&nodes, n, &[[0.0, 1.0]], [c0, 0.0]);
                let [cu, bu] = sol.theta;
                let b = bu / sd;
                let c = cu - bu * mu / sd;
                m.b = Some(b);
                m.c = Some(c);
                m.iterations = Some(sol.iterations);
                m.converged = Some(sol.converged);
                let raw_nodes: Vec<Node<2>> = nodes_of(&raw, |s| [1.0, s]);
                m.loss = Some(objective(&raw_nodes, n, &[c, b]));
            } else {
                let nodes: Vec<Node<3>> = nodes_of(&raw, |s| {
                    let x = u(s);
                    [1.0, x, x * x]
                });
                let cons = [[0.0, 1.0, 2.0 * u_min], [0.0, 1.0, 2.0 * u_max]];
                let sol = minimise(&nodes, n, &cons, [c0, 0.0, 0.0]);
                let [cu, bu, au] = sol.theta;
                let a = au / (sd * sd);
                let b = bu / sd - 2.0 * au * mu / (sd * sd);
                let c = cu - bu * mu / sd + au * mu * mu / (sd * sd);
                m.a = Some(a);
                m.b = Some(b);
                m.c = Some(c);
                m.iterations = Some(sol.iterations);
                m.converged = Some(sol.converged);
                let raw_nodes: Vec<Node<3>> = nodes_of(&raw, |s| [1.0, s, s * s]);
                m.loss = Some(objective(&raw_nodes, n, &[c, b, a]));
            }
        }
        Method::Gamma => {
            let range = s_max - s_min;
            let shift = if range > 0.0 {
                s_min - GAMMA_SHIFT_FRACTION * range
            } else {
                s_min - 1.0
            };
            let sp = |s: f64| s - shift;
            let kappa = raw.iter().map(|x| x.1 * sp(x.0)).sum::<f64>() / n;
            let kappa = if kappa > 0.0 && kappa.is_finite() {
                kappa
            } else {
                1.0
            };
            let v = |s: f64| sp(s) / kappa;
            let nodes: Vec<Node<3>> = nodes_of(&raw, |s| {
                let x = v(s);
                [1.0, x.ln(), x]
            });
            let cons = [[0.0, 1.0, v(s_min)], [0.0, 1.0, v(s_max)]];
            let sol = minimise(&nodes, n, &cons, [c0, 0.0, 0.0]);
            let [cv, av, bv] = sol.theta;
            let a = av;
            let b = bv / kappa;
            let c = cv - av * kappa.ln();
            m.a = Some(a);
            m.b = Some(b);
            m.c = Some(c);
            m.shift = Some(shift);
            m.iterations = Some(sol.iterations);
            m.converged = Some(sol.converged);
            let raw_nodes: Vec<Node<3>> = nodes_of(&raw, |s| [1.0, sp(s).ln(), sp(s)]);
            m.loss = Some(objective(&raw_nodes, n, &[c, a, b]));
        }
        Method::Temperature => {
            // f = β·s with β = 1/T ≥ 0, in units of the root mean square score.
            let w: f64 = raw.iter().map(|x| x.1).sum();
            let rms = (raw.iter().map(|x| x.1 * x.0 * x.0).sum::<f64>() / w).sqrt();
            let rms = if rms > 0.0 && rms.is_finite() {
                rms
            } else {
                1.0
            };
            let nodes: Vec<Node<1>> = nodes_of(&raw, |s| [s / rms]);
            let sol = minimise(&nodes, n, &[[1.0]], [1.0]);
            // The bound β ≥ 0 holds at the optimum up to the rounding of the steps.
            let beta = if sol.theta[0] > 1e-12 {
                sol.theta[0] / rms
            } else {
                0.0
            };
            m.a = Some(if beta > 0.0 {
                1.0 / beta
            } else {
                f64::INFINITY
            });
            m.iterations = Some(sol.iterations);
            m.converged = Some(sol.converged);
            let raw_nodes: Vec<Node<1>> = nodes_of(&raw, |s| [s]);
            m.loss = Some(objective(&raw_nodes, n, &[beta]));
        }
        Method::Beta => {
            // f = c + a·ln p − b·ln(1−p), a, b ≥ 0; each feature in units of its root mean square.
            let features = |p: f64| {
                let p = beta_clip(p);
                [p.ln(), -(-p).ln_1p()]
            };
            let w: f64 = raw.iter().map(|x| x.1).sum();
            let mut scale = [0.0; 2];
            for &(s, a, _) in &raw {
                let f = features(s);
                for k in 0..2 {
                    scale[k] += a * f[k] * f[k];
                }
            }
            let scale = scale.map(|v| {
                let r = (v / w).sqrt();
                if r > 0.0 && r.is_finite() {
                    r
                } else {
                    1.0
                }
            });
            let nodes: Vec<Node<3>> = nodes_of(&raw, |s| {
                let f = features(s);
                [1.0, f[0] / scale[0], f[1] / scale[1]]
            });
            let cons = [[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]];
            let sol = minimise(&nodes, n, &cons, [c0, 0.0, 0.0]);
            let [c, au, bu] = sol.theta;
            let (a, b) = (au / scale[0], bu / scale[1]);
            m.a = Some(a);
            m.b = Some(b);
            m.c = Some(c);
            m.iterations = Some(sol.iterations);
            m.converged = Some(sol.converged);
            let raw_nodes: Vec<Node<3>> = nodes_of(&raw, |s| {
                let f = features(s);
                [1.0, f[0], f[1]]
            });
            m.loss = Some(objective(&raw_nodes, n, &[c, a, b]));
        }
        // Only the five calibrators above call this.
        _ => {}
    }
}

/// Beta calibration reads p clipped to [ε, 1−ε], ε = 2^-52, as betacal does
/// (`np.clip(p, eps, 1 - eps)` with numpy's float64 eps).
pub(crate) fn beta_clip(p: f64) -> f64 {
    p.clamp(f64::EPSILON, 1.0 - f64::EPSILON)
}

/// The quadrature nodes (score, softplus weight, linear weight) with features `phi(score)`.
fn nodes_of<const K: usize>(
    raw: &[(f64, f64, f64)],
    phi: impl Fn(f64) -> [f64; K],
) -> Vec<Node<K>> {
    raw.iter()
        .map(|&(s, a, t)| Node { phi: phi(s), a, t })
        .collect()
}
