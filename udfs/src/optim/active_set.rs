//! A small active-set Newton method for the parametric calibrators.
//!
//! Minimises a convex logistic objective over k ≤ 3 parameters,
//! `L(θ) = (1/N) Σ_j a_j·softplus(θ·φ_j) − t_j·θ·φ_j`, subject to homogeneous linear
//! inequalities `G θ ≥ 0` (the monotonicity constraints, written in standardised units).
//! Each iteration solves the equality-constrained Newton step on the working set (a KKT system
//! of at most 5 unknowns), takes the longest feasible step that decreases L (Armijo
//! backtracking), adds a blocking constraint, and drops a constraint whose multiplier turns
//! negative. Iterates stay feasible, so the model is monotone whatever happens; when the
//! optimum lies at infinity (separable data) the iteration limit ends it with `converged`
//! false and finite parameters.

// Small dense matrices read best with index loops.
#![allow(clippy::needless_range_loop)]

use crate::scalars::sigmoid;

/// One quadrature node: features φ, weight on the softplus term, weight on the linear term.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Node<const K: usize> {
    pub phi: [f64; K],
    pub a: f64,
    pub t: f64,
}

#[derive(Debug, Clone)]
pub(crate) struct Solution<const K: usize> {
    pub theta: [f64; K],
    pub iterations: i32,
    pub converged: bool,
}

pub(crate) const MAX_ITERATIONS: i32 = 200;
/// Standardised parameters beyond this are treated as diverging (separable data).
const MAX_PARAM: f64 = 1e7;

/// `log(1 + e^x)` without overflow or loss of precision.
#[inline]
pub(crate) fn softplus(x: f64) -> f64 {
    if x > 0.0 {
        x + (-x).exp().ln_1p()
    } else {
        x.exp().ln_1p()
    }
}

#[inline]
fn dot<const K: usize>(a: &[f64; K], b: &[f64; K]) -> f64 {
    (0..K).map(|i| a[i] * b[i]).sum()
}

pub(crate) fn objective<const K: usize>(nodes: &[Node<K>], n: f64, theta: &[f64; K]) -> f64 {
    let mut s = 0.0;
    for nd in nodes {
        let f = dot(theta, &nd.phi);
        s += nd.a * softplus(f) - nd.t * f;
    }
    s / n
}

fn grad_hess<const K: usize>(
    nodes: &[Node<K>],
    n: f64,
    theta: &[f64; K],
) -> ([f64; K], [[f64; K]; K]) {
    let mut g = [0.0; K];
    let mut h = [[0.0; K]; K];
    for nd in nodes {
        let f = dot(theta, &nd.phi);
        let p = sigmoid(f);
        let r = nd.a * p - nd.t;
        let w = nd.a * p * (1.0 - p);
        for i in 0..K {
            g[i] += r * nd.phi[i];
            for j in 0..=i {
                h[i][j] += w * nd.phi[i] * nd.phi[j];
            }
        }
    }
    for i in 0..K {
        g[i] /= n;
        for j in 0..=i {
            h[i][j] /= n;
            h[j][i] = h[i][j];
        }
    }
    (g, h)
}

/// Solves a small dense system by Gaussian elimination with partial pivoting.
fn solve(mut m: Vec<Vec<f64>>, mut rhs: Vec<f64>) -> Option<Vec<f64>> {
    let n = rhs.len();
    for col in 0..n {
        let piv = (col..n).max_by(|&a, &b| m[a][col].abs().total_cmp(&m[b][col].abs()))?;
        if m[piv][col].abs() < 1e-300 {
            return None;
        }
        m.swap(col, piv);
        rhs.swap(col, piv);
        for r in col + 1..n {
            let f = m[r][col] / m[col][col];
            if f != 0.0 {
                for c in col..n {
                    m[r][c] -= f * m[col][c];
                }
                rhs[r] -= f * rhs[col];
            }
        }
    }
    let mut x = vec![0.0; n];
    for r in (0..n).rev() {
        let s: f64 = (r + 1..n).map(|c| m[r][c] * x[c]).sum();
        x[r] = (rhs[r] - s) / m[r][r];
    }
    x.iter().all(|v| v.is_finite()).then_some(x)
}

/// Newton step restricted to the working set: returns (step, multipliers of the working set).
fn kkt_step<const K: usize>(
    g: &[f64; K],
    h: &[[f64; K]; K],
    cons: &[[f64; K]],
    work: &[usize],
) -> Option<(Vec<f64>, Vec<f64>)> {
    // Tiny ridge keeps the system solvable when a feature is constant (one distinct score).
    let trace: f64 = (0..K).map(|i| h[i][i]).sum();
    let ridge = 1e-12 * (trace / K as f64) + 1e-300;
    let size = K + work.len();
    let mut m = vec![vec![0.0; size]; size];
    let mut rhs = vec![0.0; size];
    for i in 0..K {
        for j in 0..K {
            m[i][j] = h[i][j];
        }
        m[i][i] += ridge;
        rhs[i] = -g[i];
    }
    for (r, &c) in work.iter().enumerate() {
        for j in 0..K {
            m[K + r][j] = cons[c][j];
            m[j][K + r] = -cons[c][j];
        }
    }
    let x = solve(m, rhs)?;
    Some((x[..K].to_vec(), x[K..].to_vec()))
}

/// Minimises the objective from the feasible start `theta`.
pub(crate) fn minimise<const K: usize>(
    nodes: &[Node<K>],
    n: f64,
    cons: &[[f64; K]],
    mut theta: [f64; K],
) -> Solution<K> {
    let mut work: Vec<usize> = vec![];
    let mut last_dropped: Option<usize> = None;
    let mut loss = objective(nodes, n, &theta);
    let mut converged = false;
    let mut it = 0;
    while it < MAX_ITERATIONS {
        if crate::cancel::requested() {
            break;
        }
        it += 1;
        let (g, h) = grad_hess(nodes, n, &theta);
        let Some((p, lambda)) = kkt_step(&g, &h, cons, &work) else {
            break;
        };
        let decrement = -(0..K).map(|i| g[i] * p[i]).sum::<f64>();
        let step_norm = p.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        let theta_norm = theta.iter().fold(1.0f64, |m, v| m.max(v.abs()));
        // The Newton decrement estimates the loss still to gain; below 1e-14 of the loss
        // (parameters within ~1e-7 of the optimum) further steps only chase rounding.
        if decrement <= 1e-14 * (1.0 + loss.abs()) || step_norm <= 1e-13 * theta_norm {
            // Stationary on the working set: done unless a constraint wants to be released.
            match lambda
                .iter()
                .enumerate()
                .filter(|(_, l)| **l < -1e-10)
                .min_by(|a, b| a.1.total_cmp(b.1))
            {
                Some((i, _)) => {
                    last_dropped = Some(work.remove(i));
                    continue;
                }
                None => {
                    converged = true;
                    break;
                }
            }
        }
        // Longest step that keeps every constraint satisfied.
        let mut alpha_max = f64::INFINITY;
        let mut blocking = None;
        for (c, row) in cons.iter().enumerate() {
            if work.contains(&c) {
                continue;
            }
            let gp: f64 = (0..K).map(|j| row[j] * p[j]).sum();
            if gp < 0.0 {
                let slack = dot(row, &theta).max(0.0);
                let a = slack / -gp;
                if a < alpha_max {
                    alpha_max = a;
                    blocking = Some(c);
                }
            }
        }
        if let Some(c) = blocking {
            if alpha_max == 0.0 && last_dropped == Some(c) {
                // Releasing the constraint gives no feasible descent: a degenerate vertex
                // that is optimal up to rounding.
                work.push(c);
                converged = true;
                break;
            }
        }
        last_dropped = None;
        // Never step outside the box |θ| <= MAX_PARAM: on separable data the Hessian vanishes
        // and a full Newton step would jump to astronomically large parameters.
        let alpha_box = (0..K)
            .filter(|&i| p[i] != 0.0)
            .map(|i| (MAX_PARAM - theta[i] * p[i].signum()) / p[i].abs())
            .fold(f64::INFINITY, f64::min)
            .max(0.0);
        let mut alpha = alpha_max.min(1.0).min(alpha_box);
        let hit_box = alpha_box < alpha_max.min(1.0);
        let blocked = alpha_max <= 1.0 && !hit_box;
        let mut next = theta;
        let mut accepted = false;
        for _ in 0..60 {
            for i in 0..K {
                next[i] = theta[i] + alpha * p[i];
            }
            let l = objective(nodes, n, &next);
            if l <= loss - 1e-4 * alpha * decrement || (alpha == 0.0) {
                loss = l;
                accepted = true;
                break;
            }
            alpha *= 0.5;
        }
        if blocked {
            if let Some(c) = blocking {
                work.push(c);
            }
        }
        if !accepted {
            // No decrease possible at floating-point resolution: we are at the optimum
            // if the decrement is tiny relative to the loss.
            converged = decrement <= 1e-12 * (1.0 + loss.abs());
            break;
        }
        theta = next;
        if hit_box {
            break;
        }
    }
    // Put active constraints exactly at zero so rounding cannot make the model decrease.
    for &c in &work {
        let row = cons[c];
        let v = dot(&row, &theta);
        if v < 0.0 {
            let norm2 = dot(&row, &row);
            for i in 0..K {
                theta[i] -= v * row[i] / norm2;
            }
        }
    }
    Solution {
        theta,
        iterations: it,
        converged,
    }
}
