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
//! that are, and an Armijo search along the projection arc (`crate::optim::ordered`, shared
//! with the field-aware fit: ILPS is that fit without fields). The Hessian in b is tridiagonal
//! (each row touches two knots); in x it is its 2-D suffix sums, a dense K×K system solved
//! by Cholesky. This is the exact optimum of eq. 11 as λ → ∞ (hard constraints).
//!
//! ## Knots without data
//! A knot whose neighbouring intervals hold no row does not change the loss, so the optimum
//! does not determine it. Such knots get the linear interpolation (in a) between the nearest
//! knots that do have data, and the nearest one's value beyond the outermost of those: the
//! order holds, η at every row is unchanged, and the curve is the simplest one the data
//! allow.

use crate::model::Model;
use datafusion_common::Result;
use datafusion_expr::Documentation;
use datafusion_macros::user_doc;

use crate::common::{args, CallShape};
use crate::model::{interp, ModelRef};
use crate::scalars::sigmoid;

use super::calibrator::{Calibrator, Settings};

use super::state::FitState;
use crate::optim::ordered::{ilps_knots, locate, solve_with_offsets, Located, Nodes};

/// `fit_ilps` on a fit's state.
fn fit_ilps(st: &FitState, kn: usize, m: &mut Model) {
    let knots = ilps_knots(kn);
    let mut raw = st.nodes();
    raw.sort_by(|x, y| x.0.total_cmp(&y.0).then(x.1.total_cmp(&y.1)));
    // ILPS is the field-aware solver without fields; it starts from the identity η(l) = l.
    let mut nodes = Nodes::with_capacity(raw.len());
    for (s, a, t) in raw {
        let (k, lambda) = locate(&knots, s);
        nodes.push(0, Located { k, lambda, a, t });
    }
    let n = st.rows as f64;
    let fit = solve_with_offsets(&nodes, 0, 0.0, &knots, n);
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
            optional: const {
                &[
                    args::N_KNOTS
                        .doc("Number of knots K, an integer constant in [1, 1000]. Default 100."),
                    args::PROPENSITY,
                    args::CLIP,
                ]
            },
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
```"#
)]
struct FitIlpsDoc;
