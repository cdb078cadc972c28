//! Gaussian calibration, `fit_gaussian_calib`: `σ(a·s² + b·s + c)` (Kweon et al. eq. 10),
//! monotone on the fitted range, scores clamped into it; fitted by the shared solver
//! (`super::parametric`).

use datafusion_common::Result;
use datafusion_expr::Documentation;
use datafusion_macros::user_doc;

use crate::common::{args, CallShape};
use crate::model::{Model, ModelRef};
use crate::scalars::sigmoid;

use super::calibrator::{Calibrator, Settings};
use super::parametric::Prepared;
use super::state::FitState;

#[user_doc(
    doc_section(label = "Calibrators"),
    description = "Fits Gaussian calibration `σ(a·s² + b·s + c)` (Kweon et al. eq. 10) under the monotonicity \
constraints `2a·s + b >= 0` at the smallest and largest fitted score, by minimising the mean log loss (or the IPS \
log loss with `propensity`). `calibrate` clamps scores into [s_min, s_max].",
    syntax_example = "fit_gaussian_calib(score, y [, propensity [, clip [, w]]])",
    sql_example = r#"```sql
> SELECT m['method'] AS method, m['s_min'] AS s_min, m['s_max'] AS s_max
  FROM (SELECT fit_gaussian_calib(s, y) AS m FROM (VALUES (-2.0, 0), (-1.0, 0), (-1.0, 1), (0.0, 0), (0.0, 1), (1.0, 1), (1.0, 0), (2.0, 1)) AS t(s, y));
+----------+-------+-------+
| method   | s_min | s_max |
+----------+-------+-------+
| gaussian | -2.0  | 2.0   |
+----------+-------+-------+
```"#
)]
struct FitGaussianDoc;

/// Gaussian calibration.
pub(crate) struct Gaussian;

impl Calibrator for Gaussian {
    fn shape(&self) -> CallShape {
        CallShape {
            name: "fit_gaussian_calib",
            required: &[args::SCORE, args::Y],
            optional: &[args::FIT_PROPENSITY, args::CLIP, args::FIT_W],
        }
    }

    fn documentation(&self) -> Option<&'static Documentation> {
        FitGaussianDoc.doc()
    }

    fn fit(&self, st: &FitState, _settings: &Settings, m: &mut Model) {
        let st = Prepared::new(st);
        let (mu, sd) = st.standardisation();
        let u = |s: f64| (s - mu) / sd;
        let (u_min, u_max) = (u(st.s_min), u(st.s_max));
        // Monotone on the fitted range: the derivative b + 2a·s >= 0 at both ends.
        let cons = [[0.0, 1.0, 2.0 * u_min], [0.0, 1.0, 2.0 * u_max]];
        let phi = |s: f64| {
            let x = u(s);
            [1.0, x, x * x]
        };
        let sol = st.minimise(phi, &cons, [st.c0, 0.0, 0.0]);
        let [cu, bu, au] = sol.theta;
        let a = au / (sd * sd);
        let b = bu / sd - 2.0 * au * mu / (sd * sd);
        let c = cu - bu * mu / sd + au * mu * mu / (sd * sd);
        m.a = Some(a);
        m.b = Some(b);
        m.c = Some(c);
        m.iterations = Some(sol.iterations);
        m.converged = Some(sol.converged);
        m.loss = Some(st.loss(|s| [1.0, s, s * s], &[c, b, a]));
    }

    fn apply(&self, m: &ModelRef<'_>, row: usize, s: f64) -> Result<f64> {
        let s = m.clamp(row, s)?;
        Ok(sigmoid(
            (m.num(row, "a")? * s + m.num(row, "b")?) * s + m.num(row, "c")?,
        ))
    }
}
