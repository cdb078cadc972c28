//! `fit_field_calib(logit, y, field [, n_knots [, l2]])`: field-aware calibration in Pan et
//! al.'s "ILPS & field z only" variant (eq. 7): `σ(η(l) + g_z)`, η as ILPS (ordered knot
//! values) and one offset per field value, fitted jointly on the summed log loss plus
//! `l2/2·Σ g_z²`.
//!
//! Solved by projected Newton on (x, g) — x the ILPS variables (`b_1` and the increments,
//! bounded below by 0), g free — with the offsets eliminated by their Schur complement: the
//! Hessian's g block is diagonal, so each step solves a K×K system. The cost of a step is
//! O(rows + K²·values); the knots without data are filled as in ILPS.

// Dense matrices read best with index loops.
#![allow(clippy::needless_range_loop)]

use crate::model::Model;
use datafusion_common::{exec_err, Result};
use datafusion_expr::Documentation;
use datafusion_macros::user_doc;

use crate::common::{args, Arg, CallShape};
use crate::model::{interp, FieldKey, ModelRef};

use super::calibrator::{Calibrator, Settings};
use super::Method;
use crate::optim::softplus;
use crate::scalars::sigmoid;

use super::ilps::{
    eta, fill_unsupported, ilps_knots, locate, newton_step, suffix_hessian, supported, Located,
};
use super::state::FitState;

const MAX_ITERATIONS: i32 = 500;

/// The joint fit over the field values' states (sorted by value).
fn field_calib(states: &[(&str, &FitState)], kn: usize, l2: f64, m: &mut Model) {
    let knots = ilps_knots(kn);
    // Nodes of every value, with the value's index.
    let mut nodes: Vec<(usize, Located)> = vec![];
    for (z, (_, st)) in states.iter().enumerate() {
        let mut raw = st.nodes();
        raw.sort_by(|x, y| x.0.total_cmp(&y.0).then(x.1.total_cmp(&y.1)));
        nodes.extend(raw.into_iter().map(|(s, a, t)| {
            let (k, lambda) = locate(&knots, s);
            (z, Located { k, lambda, a, t })
        }));
    }
    let rows: f64 = states.iter().map(|(_, st)| st.rows as f64).sum();
    let fit = solve_with_offsets(&nodes, states.len(), l2, &knots, rows);
    m.loss = Some(fit.data_loss / rows);
    m.iterations = Some(fit.iterations);
    m.converged = Some(fit.converged);
    m.knots_x = Some(knots);
    m.knots_y = Some(fit.b);
    m.field_keys = Some(states.iter().map(|(k, _)| k.to_string()).collect());
    m.field_values = Some(fit.g);
}

/// The result of [`solve_with_offsets`].
pub(super) struct OrderedFit {
    /// Knot values (knots without data filled in).
    pub b: Vec<f64>,
    /// One offset per field value.
    pub g: Vec<f64>,
    /// The summed data term (without the penalty).
    pub data_loss: f64,
    pub iterations: i32,
    pub converged: bool,
}

/// Minimises `Σ a·softplus(η + g_z) − t·(η + g_z) + l2/2·Σ g_z²` over ordered knot values and
/// `zn` offsets (`zn` = 0: plain ILPS, every node's field index ignored), starting from the
/// identity η(l) = l and g = 0.
pub(super) fn solve_with_offsets(
    nodes: &[(usize, Located)],
    zn: usize,
    l2: f64,
    knots: &[f64],
    rows: f64,
) -> OrderedFit {
    let kn = knots.len();
    let offset = |g: &[f64], z: usize| if zn == 0 { 0.0 } else { g[z] };
    let value = |b: &[f64], g: &[f64]| -> f64 {
        let data: f64 = nodes
            .iter()
            .map(|(z, p)| {
                let e = eta(b, p) + offset(g, *z);
                p.a * softplus(e) - p.t * e
            })
            .sum();
        data + 0.5 * l2 * g.iter().map(|v| v * v).sum::<f64>()
    };
    let to_b = |x: &[f64]| -> Vec<f64> {
        let mut acc = 0.0;
        x.iter()
            .enumerate()
            .map(|(j, v)| {
                acc = if j == 0 { *v } else { acc + v };
                acc
            })
            .collect()
    };
    let mut x: Vec<f64> = std::iter::once(knots[0])
        .chain(knots.windows(2).map(|w| w[1] - w[0]))
        .collect();
    let mut g = vec![0.0; zn];
    let mut b = to_b(&x);
    let mut f = value(&b, &g);
    let tol = 1e-13 * rows.max(1.0);
    let (mut iterations, mut converged) = (0, false);
    while iterations < MAX_ITERATIONS {
        iterations += 1;
        let mut gb = vec![0.0; kn];
        let mut diag = vec![0.0; kn];
        let mut off = vec![0.0; kn.saturating_sub(1)];
        let mut gg: Vec<f64> = g.iter().map(|v| l2 * v).collect();
        let mut dz = vec![l2; zn];
        let mut cb = vec![vec![0.0; zn]; kn]; // cross terms in b, then x
        for (z, p) in nodes {
            let e = eta(&b, p) + offset(&g, *z);
            let s = sigmoid(e);
            let r = p.a * s - p.t;
            let h = p.a * s * (1.0 - s);
            let (w0, w1) = (1.0 - p.lambda, p.lambda);
            gb[p.k] += r * w0;
            diag[p.k] += h * w0 * w0;
            if zn > 0 {
                cb[p.k][*z] += h * w0;
            }
            if w1 != 0.0 {
                gb[p.k + 1] += r * w1;
                diag[p.k + 1] += h * w1 * w1;
                off[p.k] += h * w0 * w1;
                if zn > 0 {
                    cb[p.k + 1][*z] += h * w1;
                }
            }
            if zn > 0 {
                gg[*z] += r;
                dz[*z] += h;
            }
        }
        let mut gx = vec![0.0; kn];
        let mut acc = 0.0;
        for k in (0..kn).rev() {
            acc += gb[k];
            gx[k] = acc;
        }
        for k in (0..kn.saturating_sub(1)).rev() {
            for z in 0..zn {
                cb[k][z] += cb[k + 1][z];
            }
        }
        let at_bound = |j: usize| j > 0 && x[j] <= 0.0 && gx[j] > 0.0;
        let pg = (0..kn)
            .map(|j| if at_bound(j) { 0.0 } else { gx[j].abs() })
            .chain(gg.iter().map(|v| v.abs()))
            .fold(0.0, f64::max);
        if pg <= tol {
            converged = true;
            break;
        }
        let eps = pg.min(1e-8);
        let active: Vec<bool> = (0..kn)
            .map(|j| j > 0 && x[j] <= eps && gx[j] > 0.0)
            .collect();
        let free: Vec<usize> = (0..kn).filter(|&j| !active[j]).collect();
        let hx = suffix_hessian(&diag, &off);
        let dmax = dz.iter().fold(0.0f64, |a, &v| a.max(v));
        let dz: Vec<f64> = dz
            .iter()
            .map(|&v| v.max(1e-12 * dmax.max(1e-300)))
            .collect();
        // Schur complement on the free x: S = H_FF − C_F D⁻¹ C_Fᵀ, rhs = −(g_F − C_F D⁻¹ gg).
        let m_free = free.len();
        let mut schur = vec![vec![0.0; m_free]; m_free];
        let mut rhs_grad = vec![0.0; m_free];
        for (a, &i) in free.iter().enumerate() {
            rhs_grad[a] = gx[i] - (0..zn).map(|z| cb[i][z] * gg[z] / dz[z]).sum::<f64>();
            for (c, &j) in free.iter().enumerate().take(a + 1) {
                let v = hx[i][j] - (0..zn).map(|z| cb[i][z] * cb[j][z] / dz[z]).sum::<f64>();
                schur[a][c] = v;
                schur[c][a] = v;
            }
        }
        let all: Vec<usize> = (0..m_free).collect();
        let px_free = newton_step(&schur, &rhs_grad, &all);
        let mut px = vec![0.0; kn];
        for (a, &i) in free.iter().enumerate() {
            px[i] = px_free[a];
        }
        for j in 0..kn {
            if active[j] {
                px[j] = -gx[j] / hx[j][j].max(1e-12);
            }
        }
        let pgz: Vec<f64> = (0..zn)
            .map(|z| {
                let cross: f64 = free.iter().map(|&i| cb[i][z] * px[i]).sum();
                -(gg[z] + cross) / dz[z]
            })
            .collect();
        let mut alpha = 1.0;
        let mut accepted = false;
        for _ in 0..60 {
            let tx: Vec<f64> = (0..kn)
                .map(|j| {
                    let v = x[j] + alpha * px[j];
                    if j > 0 {
                        v.max(0.0)
                    } else {
                        v
                    }
                })
                .collect();
            let tg: Vec<f64> = (0..zn).map(|z| g[z] + alpha * pgz[z]).collect();
            let tb = to_b(&tx);
            let tf = value(&tb, &tg);
            let decrease: f64 = (0..kn).map(|j| gx[j] * (tx[j] - x[j])).sum::<f64>()
                + (0..zn).map(|z| gg[z] * (tg[z] - g[z])).sum::<f64>();
            if tf.is_finite() && tf <= f + 1e-4 * decrease {
                let done = (f - tf).abs() <= 1e-16 * f.abs().max(1e-300);
                x = tx;
                g = tg;
                b = tb;
                f = tf;
                accepted = true;
                converged = done;
                break;
            }
            alpha *= 0.5;
        }
        if !accepted || converged {
            converged = converged || pg <= 1e-9 * rows.max(1.0);
            break;
        }
        if b.iter().chain(&g).any(|v| v.abs() > 1e6) {
            // Diverging: separable past a knot, or an IPS objective unbounded below.
            break;
        }
    }
    let flat: Vec<Located> = nodes.iter().map(|(_, p)| *p).collect();
    fill_unsupported(knots, &mut b, &supported(&flat, kn));
    let data_loss: f64 = nodes
        .iter()
        .map(|(z, p)| {
            let e = eta(&b, p) + offset(&g, *z);
            p.a * softplus(e) - p.t * e
        })
        .sum();
    OrderedFit {
        b,
        g,
        data_loss,
        iterations,
        converged,
    }
}

/// Field-aware calibration.
pub(crate) struct FieldCalib;

impl Calibrator for FieldCalib {
    fn shape(&self) -> CallShape {
        CallShape {
            name: "fit_field_calib",
            required: &[args::LOGIT, args::Y, args::FIELD],
            optional: const { &[args::N_KNOTS, Arg::lit_num("l2").or("1.0")] },
        }
    }

    fn documentation(&self) -> Option<&'static Documentation> {
        FitFieldCalibDoc.doc()
    }

    fn field_aware(&self) -> bool {
        true
    }

    fn fit_fields(&self, states: &[(&str, &FitState)], settings: &Settings) -> Option<Model> {
        let rows: i64 = states.iter().map(|(_, st)| st.rows).sum();
        let (lo, hi) = states
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |acc, (_, st)| {
                (acc.0.min(st.s_min), acc.1.max(st.s_max))
            });
        let mut m = Model::new(Method::FieldCalib, rows, lo, hi);
        field_calib(states, settings.count, settings.lambda, &mut m);
        Some(m)
    }

    fn apply_field(&self, m: &ModelRef<'_>, row: usize, s: f64, key: FieldKey<'_>) -> Result<f64> {
        let position = m.field_position(row, key)?;
        let (x, y) = m.knots(row)?;
        let offsets = m.floats(m.field_values, row, "field_values")?;
        let g = match position {
            Some(i) => match offsets.get(i) {
                Some(g) => *g,
                None => return exec_err!("calibrate: argument model has malformed field_values"),
            },
            None => 0.0,
        };
        Ok(sigmoid(interp(s, x, y)? + g))
    }
}

#[user_doc(
    doc_section(label = "Calibrators"),
    description = "Fits field-aware calibration (Pan et al. 2020, eq. 7, the paper's \"ILPS & field z only\" variant): \
`σ(η(logit) + g_z)`, η as `fit_ilps` (ordered values at the knots logit(k/(n_knots+1)), constant outside) and one \
offset g_z per value z of `field`, fitted jointly by minimising the summed log loss plus `l2/2 · Σ g_z²` (default \
l2 = 1: values with few rows stay near 0, the sparsity problem Zhao et al. raise; l2 = 0 leaves the split between η \
and the offsets free, the predictions are still determined). `calibrate(logit, model, field)` applies it; a value the \
fit never saw gets offset 0. The model keeps the knots in `knots_x`/`knots_y`, the values in `field_keys` and their \
offsets in `field_values`; `loss` is the mean log loss without the penalty.",
    syntax_example = "fit_field_calib(logit, y, field [, n_knots [, l2]])",
    sql_example = r#"```sql
> SELECT f, calibrate(0.0, m, f) > 0.5 AS above
  FROM (SELECT fit_field_calib(l, y, f, 3) AS m
        FROM (VALUES (0.0, 1, 'a'), (0.0, 1, 'a'), (0.0, 0, 'a'), (0.0, 0, 'b'), (0.0, 0, 'b'), (0.0, 1, 'b')) AS t(l, y, f))
  CROSS JOIN (VALUES ('a'), ('b')) AS v(f) ORDER BY f;
+---+-------+
| f | above |
+---+-------+
| a | true  |
| b | false |
+---+-------+
```"#,
    argument(
        name = "field",
        description = "The field whose values get their own offset (any type; compared as text)."
    ),
    argument(
        name = "n_knots",
        description = "Number of knots of η, an integer constant in [1, 1000]. Default 100."
    ),
    argument(
        name = "l2",
        description = "L2 penalty on the offsets (on the summed loss), a constant >= 0. Default 1.0."
    )
)]
struct FitFieldCalibDoc;
