//! Isotonic regression, `fit_isotonic`: pool-adjacent-violators of the label (or the IPS
//! pseudo-label) on the score, applied as scikit-learn's `IsotonicRegression(out_of_bounds=
//! 'clip')`: linear between the knots, clipped outside.

use datafusion_common::Result;
use datafusion_expr::Documentation;
use datafusion_macros::user_doc;

use crate::common::{args, CallShape};
use crate::model::{interp, Model, ModelRef};

use super::calibrator::{Calibrator, Settings};
use super::nonparametric::points_loss;
use super::state::FitState;
use super::NONPARAMETRIC_EXACT_CAP;

#[user_doc(
    doc_section(label = "Calibrators"),
    description = "Fits isotonic regression (pool-adjacent-violators) of the label on the score, kept as the points \
`knots_x`/`knots_y`; `calibrate` interpolates linearly between them and clips outside, exactly as scikit-learn's \
`IsotonicRegression(out_of_bounds='clip')`. With `propensity`, PAV runs on the IPS pseudo-labels y/ω and the fitted \
values are clipped to [0, 1]. Exact up to `calibsql.fit_exact_cap` distinct scores per group (a session setting, \
default 10,000,000; docs/SEMANTICS.md says what happens past it).",
    syntax_example = "fit_isotonic(score, y [, propensity [, clip [, w]]])",
    sql_example = r#"```sql
> SELECT m['knots_x'] AS x, m['knots_y'] AS y
  FROM (SELECT fit_isotonic(s, y) AS m FROM (VALUES (1.0, 0), (2.0, 1), (3.0, 0), (4.0, 1)) AS t(s, y));
+----------------------+----------------------+
| x                    | y                    |
+----------------------+----------------------+
| [1.0, 2.0, 3.0, 4.0] | [0.0, 0.5, 0.5, 1.0] |
+----------------------+----------------------+
```"#
)]
struct FitIsotonicDoc;

/// Isotonic regression.
pub(crate) struct Isotonic;

impl Calibrator for Isotonic {
    fn shape(&self) -> CallShape {
        CallShape {
            name: "fit_isotonic",
            required: &[args::SCORE, args::Y],
            optional: const {
                &[
                    args::FIT_PROPENSITY
                        .doc("Optional exposure propensity in (0, 1]: PAV on y/ω. Default 1 (no debiasing)."),
                    args::CLIP,
                    args::FIT_W,
                ]
            },
        }
    }

    fn documentation(&self) -> Option<&'static Documentation> {
        FitIsotonicDoc.doc()
    }

    fn exact_cap(&self) -> usize {
        NONPARAMETRIC_EXACT_CAP
    }

    fn fit(&self, st: &FitState, settings: &Settings, m: &mut Model) {
        fit_isotonic(st, settings.ips, m)
    }

    fn apply(&self, m: &ModelRef<'_>, row: usize, s: f64) -> Result<f64> {
        let (x, y) = m.increasing_knots(row)?;
        interp(s, x, y)
    }
}

/// The isotonic (non-decreasing) regression of the means t/n on points (score, n, t) sorted by
/// score, with weights n: pool adjacent violators. One fitted value per point; no point may
/// have n = 0.
pub(crate) fn pav(pts: &[(f64, f64, f64)]) -> Vec<f64> {
    let mut blocks: Vec<(f64, f64, usize)> = Vec::with_capacity(pts.len()); // (Σn, Σt, len)
    for &(_, n, t) in pts {
        blocks.push((n, t, 1));
        while blocks.len() > 1 {
            let (n2, t2, l2) = blocks[blocks.len() - 1];
            let (n1, t1, l1) = blocks[blocks.len() - 2];
            if t1 / n1 > t2 / n2 {
                blocks.pop();
                let last = blocks.len() - 1;
                blocks[last] = (n1 + n2, t1 + t2, l1 + l2);
            } else {
                break;
            }
        }
    }
    let mut fitted = Vec::with_capacity(pts.len());
    for (n, t, len) in blocks {
        fitted.extend(std::iter::repeat_n(t / n, len));
    }
    fitted
}

fn fit_isotonic(st: &FitState, ips: bool, m: &mut Model) {
    let pts = st.sorted_points();
    let mut fitted = pav(&pts);
    if ips {
        fitted.iter_mut().for_each(|v| *v = v.clamp(0.0, 1.0));
    }
    m.loss = Some(points_loss(&pts, |i| fitted[i]));
    // Drop interior points whose value equals both neighbours (as scikit-learn does).
    let k = fitted.len();
    let keep: Vec<bool> = (0..k)
        .map(|i| i == 0 || i + 1 == k || fitted[i] != fitted[i - 1] || fitted[i] != fitted[i + 1])
        .collect();
    m.knots_x = Some((0..k).filter(|&i| keep[i]).map(|i| pts[i].0).collect());
    m.knots_y = Some((0..k).filter(|&i| keep[i]).map(|i| fitted[i]).collect());
    m.converged = Some(true);
}
