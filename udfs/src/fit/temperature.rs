//! Temperature scaling, `fit_temperature`: `σ(logit / T)`, T > 0 (Guo et al. 2017), kept
//! as T in the model's `a`; fitted by the shared solver (`super::parametric`).

use datafusion_common::Result;
use datafusion_expr::Documentation;
use datafusion_macros::user_doc;

use crate::common::{args, CallShape};
use crate::model::{Model, ModelRef};
use crate::scalars::sigmoid;

use super::calibrator::{Calibrator, Settings};
use super::parametric::{positive_or_one, Prepared};
use super::state::FitState;
use datafusion_common::exec_err;

#[user_doc(
    doc_section(label = "Calibrators"),
    description = "Fits temperature scaling `σ(logit / T)`, T > 0 (Guo et al. 2017; a baseline of Kweon et al. and Zhao \
et al.), by minimising the mean log loss — or, with `propensity`, the mean IPS log loss (UERM) with ω = \
max(propensity, clip); weighted by `w`. The model keeps T in field `a`. When the logits are not positively \
associated with the label the optimum lies at T = +∞ (every probability 0.5): the model then has `a` = +inf. \
On a multiclass model's list of logits, `fit_temperature(logits, label [, w => w])` fits one T by the weighted \
multinomial log loss (scikit-learn's `CalibratedClassifierCV(method='temperature')`), and \
`calibrate(logits, model)` returns `softmax(logits / T)`; it keeps every row (8·(K + 2) bytes), so it has no \
stored state, and takes no propensity.",
    syntax_example = "fit_temperature(logit, y [, propensity [, clip [, w]]])",
    sql_example = r#"```sql
> SELECT m['method'] AS method, round(m['a'], 4) AS temperature
  FROM (SELECT fit_temperature(l, y) AS m FROM (VALUES (-2.0, 0), (-1.0, 0), (-1.0, 1), (1.0, 0), (1.0, 1), (2.0, 1)) AS t(l, y));
+-------------+-------------+
| method      | temperature |
+-------------+-------------+
| temperature | 1.3222      |
+-------------+-------------+
```"#
)]
struct FitTemperatureDoc;

/// Temperature scaling.
pub(crate) struct Temperature;

impl Calibrator for Temperature {
    fn shape(&self) -> CallShape {
        CallShape {
            name: "fit_temperature",
            required: &[args::LOGIT, args::Y],
            optional: &[args::FIT_PROPENSITY, args::CLIP, args::FIT_W],
        }
    }

    fn documentation(&self) -> Option<&'static Documentation> {
        FitTemperatureDoc.doc()
    }

    fn fit(&self, st: &FitState, _settings: &Settings, m: &mut Model) {
        // f = β·s with β = 1/T ≥ 0, in units of the root mean square score.
        let st = Prepared::new(st);
        let w: f64 = st.raw.iter().map(|x| x.1).sum();
        let rms = positive_or_one((st.raw.iter().map(|x| x.1 * x.0 * x.0).sum::<f64>() / w).sqrt());
        let sol = st.minimise(|s| [s / rms], &[[1.0]], [1.0]);
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
        m.loss = Some(st.loss(|s| [s], &[beta]));
    }

    fn apply(&self, m: &ModelRef<'_>, row: usize, s: f64) -> Result<f64> {
        let t = m.num(row, "a")?;
        if t.is_nan() || t <= 0.0 {
            return exec_err!("calibrate: argument model has temperature a = {t}, expected > 0");
        }
        // T = +Infinity is the constant 0.5, also at a score of ±Infinity (∞/∞ is NaN).
        Ok(if t == f64::INFINITY {
            0.5
        } else {
            sigmoid(s / t)
        })
    }
}
