//! Isotonic Line-Plot Scaling (Pan et al., *Field-aware Calibration*, eq. 9–11): the
//! calibrated logit η(l) is piecewise linear through K knots `a_k = logit(k/(K+1))` with
//! values `b_1 ≤ … ≤ b_K`, constant outside `[a_1, a_K]`.
//!
//! ## The optimisation
//! The mean log loss (or IPS loss) is convex in b and every row's η is linear in b (two
//! neighbouring knots), so the problem is a smooth convex program with order constraints.
//! Written in x = (b_1, d_1, …, d_{K−1}) with `b_{k+1} = b_k + d_k`, the constraints become
//! bounds `d ≥ 0` and the problem is solved by Bertsekas' projected Newton method (1982):
//! a Newton step on the variables not held at their bound, a scaled gradient step on those
//! that are, and an Armijo search along the projection arc (the solver is shared with the
//! field-aware fit, `field_calib::solve_with_offsets`; ILPS is that fit without fields). The Hessian in b is tridiagonal
//! (each row touches two knots); in x it is its 2-D suffix sums, a dense K×K system solved
//! by Cholesky. This is the exact optimum of eq. 11 as λ → ∞ (hard constraints).
//!
//! ## Knots without data
//! A knot whose neighbouring intervals hold no row does not change the loss, so the optimum
//! does not determine it. Such knots get the linear interpolation (in a) between the nearest
//! knots that do have data, and the nearest one's value beyond the outermost of those: the
//! order holds, η at every row is unchanged, and the curve is the simplest one the data
//! allow.

// Dense matrices read best with index loops.
#![allow(clippy::needless_range_loop)]

use crate::model::Model;
use datafusion_common::Result;
use datafusion_expr::Documentation;
use datafusion_macros::user_doc;

use crate::common::{args, CallShape};
use crate::model::{interp, ModelRef};
use crate::scalars::sigmoid;

use super::calibrator::{Calibrator, Settings};

use super::state::FitState;

/// The knots `a_k = ln(p / (1 − p))`, `p = k / (K + 1)`, k = 1..K.
pub(crate) fn ilps_knots(k: usize) -> Vec<f64> {
    (1..=k)
        .map(|i| {
            let p = i as f64 / (k + 1) as f64;
            (p / (1.0 - p)).ln()
        })
        .collect()
}

/// One quadrature node located among the knots: η = (1 − λ)·b[k] + λ·b[k+1], with weight `a`
/// on softplus(η) and `t` on −η.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Located {
    pub k: usize,
    pub lambda: f64,
    pub a: f64,
    pub t: f64,
}

/// Locates score `s` among the knots.
pub(crate) fn locate(knots: &[f64], s: f64) -> (usize, f64) {
    let n = knots.len();
    if s <= knots[0] || n == 1 {
        return (0, 0.0);
    }
    if s >= knots[n - 1] {
        return (n - 1, 0.0);
    }
    let k = knots.partition_point(|&a| a <= s) - 1; // knots[k] <= s < knots[k+1]
    (k, (s - knots[k]) / (knots[k + 1] - knots[k]))
}

/// η of a located node.
#[inline]
pub(crate) fn eta(b: &[f64], p: &Located) -> f64 {
    if p.lambda == 0.0 {
        b[p.k]
    } else {
        (1.0 - p.lambda) * b[p.k] + p.lambda * b[p.k + 1]
    }
}

/// The Hessian in x from the tridiagonal Hessian in b (`diag`, `off` = superdiagonal).
pub(crate) fn suffix_hessian(diag: &[f64], off: &[f64]) -> Vec<Vec<f64>> {
    let kn = diag.len();
    // Row sums of H_b restricted to columns ≥ j, for each row k: S[k][j]. Then
    // H_x[i][j] = Σ_{k≥i} S[k][j]. Both are cumulative sums of a tridiagonal matrix.
    let hb = |k: usize, l: usize| -> f64 {
        if k == l {
            diag[k]
        } else if l == k + 1 {
            off[k]
        } else if k == l + 1 {
            off[l]
        } else {
            0.0
        }
    };
    let mut hx = vec![vec![0.0; kn]; kn];
    // Column suffix sums per row, then row suffix sums.
    let mut col = vec![vec![0.0; kn]; kn];
    for k in 0..kn {
        let mut acc = 0.0;
        for j in (0..kn).rev() {
            if j + 1 >= k && j <= k + 1 {
                acc += hb(k, j);
            }
            col[k][j] = acc;
        }
    }
    for j in 0..kn {
        let mut acc = 0.0;
        for i in (0..kn).rev() {
            acc += col[i][j];
            hx[i][j] = acc;
        }
    }
    hx
}

/// Solves H_FF p = −g_F by Cholesky, with a small ridge for directions without curvature
/// (knots without data).
pub(crate) fn newton_step(h: &[Vec<f64>], g: &[f64], free: &[usize]) -> Vec<f64> {
    let m = free.len();
    let scale = free
        .iter()
        .map(|&j| h[j][j])
        .fold(0.0, f64::max)
        .max(1e-300);
    let ridge = 1e-12 * scale;
    let mut l = vec![vec![0.0; m]; m];
    for r in 0..m {
        for c in 0..=r {
            let mut s = h[free[r]][free[c]];
            if r == c {
                s += ridge;
            }
            for k in 0..c {
                s -= l[r][k] * l[c][k];
            }
            if r == c {
                l[r][c] = s.max(ridge).sqrt();
            } else {
                l[r][c] = s / l[c][c];
            }
        }
    }
    let mut y = vec![0.0; m];
    for r in 0..m {
        let mut s = -g[free[r]];
        for k in 0..r {
            s -= l[r][k] * y[k];
        }
        y[r] = s / l[r][r];
    }
    let mut p = vec![0.0; m];
    for r in (0..m).rev() {
        let mut s = y[r];
        for k in r + 1..m {
            s -= l[k][r] * p[k];
        }
        p[r] = s / l[r][r];
    }
    p
}

/// Which knots some node depends on.
pub(crate) fn supported(nodes: &[Located], kn: usize) -> Vec<bool> {
    let mut out = vec![false; kn];
    for p in nodes {
        if p.a == 0.0 && p.t == 0.0 {
            continue;
        }
        if p.lambda < 1.0 {
            out[p.k] = true;
        }
        if p.lambda > 0.0 {
            out[p.k + 1] = true;
        }
    }
    out
}

/// Knots without data: interpolated in `a` between the nearest supported knots, constant
/// beyond the outermost ones (see the module documentation).
pub(crate) fn fill_unsupported(knots: &[f64], b: &mut [f64], supported: &[bool]) {
    let idx: Vec<usize> = (0..b.len()).filter(|&k| supported[k]).collect();
    let (Some(&first), Some(&last)) = (idx.first(), idx.last()) else {
        return;
    };
    for k in 0..first {
        b[k] = b[first];
    }
    for k in last + 1..b.len() {
        b[k] = b[last];
    }
    for w in idx.windows(2) {
        let (lo, hi) = (w[0], w[1]);
        for k in lo + 1..hi {
            let t = (knots[k] - knots[lo]) / (knots[hi] - knots[lo]);
            b[k] = b[lo] + t * (b[hi] - b[lo]);
        }
    }
}

/// `fit_ilps` on a fit's state.
fn fit_ilps(st: &FitState, kn: usize, m: &mut Model) {
    let knots = ilps_knots(kn);
    let mut raw = st.nodes();
    raw.sort_by(|x, y| x.0.total_cmp(&y.0).then(x.1.total_cmp(&y.1)));
    let nodes: Vec<Located> = raw
        .iter()
        .map(|&(s, a, t)| {
            let (k, lambda) = locate(&knots, s);
            Located { k, lambda, a, t }
        })
        .collect();
    let n = st.rows as f64;
    // ILPS is the field-aware solver without fields; it starts from the identity η(l) = l.
    let nodes: Vec<(usize, Located)> = nodes.into_iter().map(|p| (0, p)).collect();
    let fit = super::field_calib::solve_with_offsets(&nodes, 0, 0.0, &knots, n);
    m.loss = Some(fit.data_loss / n);
    m.iterations = Some(fit.iterations);
    m.converged = Some(fit.converged);
    m.knots_x = Some(knots);
    m.knots_y = Some(fit.b);
}

/// ILPS.
pub(crate) struct Ilps;

impl Calibrator for Ilps {
    fn shape(&self) -> CallShape {
        CallShape {
            name: "fit_ilps",
            required: &[args::LOGIT, args::Y],
            optional: &[args::N_KNOTS, args::PROPENSITY, args::CLIP],
        }
    }

    fn documentation(&self) -> Option<&'static Documentation> {
        FitIlpsDoc.doc()
    }

    fn fit(&self, st: &FitState, settings: &Settings, m: &mut Model) {
        fit_ilps(st, settings.count, m)
    }

    fn apply(&self, m: &ModelRef<'_>, row: usize, s: f64) -> Result<f64> {
        let (x, y) = m.increasing_knots(row)?;
        Ok(sigmoid(interp(s, x, y)?))
    }
}

#[user_doc(
    doc_section(label = "Calibrators"),
    description = "Fits Isotonic Line-Plot Scaling (Pan et al. 2020, eq. 9–11): `σ(η(logit))` with η piecewise linear \
through the knots `a_k = logit(k/(n_knots+1))`, k = 1..n_knots, with ordered values `b_1 <= … <= b_K` (hard \
constraints: the exact optimum of eq. 11 as λ → ∞) and constant outside [a_1, a_K], by minimising the mean log loss \
— or, with `propensity`, the mean IPS log loss with ω = max(propensity, clip). Knots without data (no row in their \
neighbouring intervals) do not change the loss; they get the linear interpolation between the nearest knots with \
data, and the nearest one's value beyond the outermost. The model keeps the knots in `knots_x` and the values (logits) \
in `knots_y`.",
    syntax_example = "fit_ilps(logit, y [, n_knots [, propensity [, clip]]])",
    sql_example = r#"```sql
> SELECT m['method'] AS method, cardinality(m['knots_x']) AS knots, round(calibrate(0.0, m), 4) AS p0
  FROM (SELECT fit_ilps(l, y, 3) AS m FROM (VALUES (-2.0, 0), (-1.0, 0), (-1.0, 1), (1.0, 0), (1.0, 1), (2.0, 1)) AS t(l, y));
+--------+-------+-----+
| method | knots | p0  |
+--------+-------+-----+
| ilps   | 3     | 0.5 |
+--------+-------+-----+
```"#,
    argument(
        name = "n_knots",
        description = "Number of knots K, an integer constant in [1, 1000]. Default 100."
    )
)]
struct FitIlpsDoc;
