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
use super::parametric::fit_parametric;
use super::state::FitState;
use super::Method;

#[user_doc(
    doc_section(label = "Calibrators"),
    description = "Fits Gaussian calibration `σ(a·s² + b·s + c)` (Kweon et al. eq. 10) under the monotonicity \
constraints `2a·s + b >= 0` at the smallest and largest fitted score, by minimising the mean log loss (or the IPS \
log loss with `propensity`). `calibrate` clamps scores into [s_min, s_max].",
    syntax_example = "fit_gaussian_calib(score, y [, propensity [, clip]])",
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
            optional: &[args::PROPENSITY, args::CLIP],
        }
    }

    fn documentation(&self) -> Option<&'static Documentation> {
        FitGaussianDoc.doc()
    }

    fn fit(&self, st: &FitState, _settings: &Settings, m: &mut Model) {
        fit_parametric(Method::Gaussian, st, m)
    }

    fn apply(&self, m: &ModelRef<'_>, row: usize, s: f64) -> Result<f64> {
        let s = m.clamp(row, s)?;
        Ok(sigmoid(
            (m.num(row, "a")? * s + m.num(row, "b")?) * s + m.num(row, "c")?,
        ))
    }
}
