//! Platt scaling, `fit_platt`: `σ(b·s + c)` with b >= 0 (Kweon et al. eq. 7), fitted by the
//! shared constrained logistic solver (`super::parametric`).

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
    description = "Fits Platt scaling `σ(b·s + c)` (Kweon et al. eq. 7) with b >= 0, by minimising the mean log loss \
— or, with `propensity`, the mean IPS log loss (UERM) with ω = max(propensity, clip). Returns a model struct for \
`calibrate(score, model)`.",
    syntax_example = "fit_platt(score, y [, propensity [, clip [, w]]])",
    sql_example = r#"```sql
> SELECT m['method'] AS method, m['converged'] AS converged, round(calibrate(0, m), 6) AS p0
  FROM (SELECT fit_platt(s, y) AS m FROM (VALUES (-2.0, 0), (-1.0, 0), (-1.0, 1), (0.0, 0), (0.0, 1), (1.0, 1), (1.0, 0), (2.0, 1)) AS t(s, y));
+--------+-----------+-----+
| method | converged | p0  |
+--------+-----------+-----+
| platt  | true      | 0.5 |
+--------+-----------+-----+
```"#
)]
struct FitPlattDoc;

/// Platt scaling.
pub(crate) struct Platt;

impl Calibrator for Platt {
    fn shape(&self) -> CallShape {
        CallShape {
            name: "fit_platt",
            required: &[args::SCORE, args::Y],
            optional: &[args::FIT_PROPENSITY, args::CLIP, args::FIT_W],
        }
    }

    fn documentation(&self) -> Option<&'static Documentation> {
        FitPlattDoc.doc()
    }

    fn fit(&self, st: &FitState, _settings: &Settings, m: &mut Model) {
        let st = Prepared::new(st);
        let (mu, sd) = st.standardisation();
        let u = |s: f64| (s - mu) / sd;
        let sol = st.minimise(|s| [1.0, u(s)], &[[0.0, 1.0]], [st.c0, 0.0]);
        let [cu, bu] = sol.theta;
        let b = bu / sd;
        let c = cu - bu * mu / sd;
        m.b = Some(b);
        m.c = Some(c);
        m.iterations = Some(sol.iterations);
        m.converged = Some(sol.converged);
        m.loss = Some(st.loss(|s| [1.0, s], &[c, b]));
    }

    fn apply(&self, m: &ModelRef<'_>, row: usize, s: f64) -> Result<f64> {
        // b = 0 is a constant model (the data did not rank the labels): σ(c) at every
        // score, also at ±Infinity, where b·s would be NaN.
        let (b, c) = (m.num(row, "b")?, m.num(row, "c")?);
        Ok(sigmoid(if b == 0.0 { c } else { b * s + c }))
    }
}
