//! Gamma calibration, `fit_gamma_calib`: `σ(a·ln s' + b·s' + c)`, `s' = s − shift` (Kweon et
//! al. eq. 12), monotone on the fitted range, scores clamped into it; fitted by the shared
//! solver (`super::parametric`).

use datafusion_common::Result;
use datafusion_expr::Documentation;
use datafusion_macros::user_doc;

use crate::common::{args, CallShape};
use crate::model::{Model, ModelRef};
use crate::scalars::sigmoid;

use super::calibrator::{Calibrator, Settings};
use super::parametric::{positive_or_one, Prepared};
use super::state::FitState;

/// Gamma calibration's shift lies this fraction of the score range below the smallest score.
const GAMMA_SHIFT_FRACTION: f64 = 1e-3;

#[user_doc(
    doc_section(label = "Calibrators"),
    description = "Fits Gamma calibration `σ(a·ln s' + b·s' + c)` with `s' = s − shift` (Kweon et al. eq. 12) under \
the monotonicity constraints `a/s' + b >= 0` at both ends of the fitted range. `shift` lies 0.1% of the score \
range below the smallest score (1 below it when all scores are equal) and is stored in the model. `calibrate` \
clamps scores into [s_min, s_max].",
    syntax_example = "fit_gamma_calib(score, y [, propensity [, clip [, w]]])",
    sql_example = r#"```sql
> SELECT m['method'] AS method, m['shift'] AS shift
  FROM (SELECT fit_gamma_calib(s, y) AS m FROM (VALUES (0.0, 0), (1.0, 0), (1.0, 1), (2.0, 0), (2.0, 1), (3.0, 1), (3.0, 0), (4.0, 1)) AS t(s, y));
+--------+--------+
| method | shift  |
+--------+--------+
| gamma  | -0.004 |
+--------+--------+
```"#
)]
struct FitGammaDoc;

/// Gamma calibration.
pub(crate) struct Gamma;

impl Calibrator for Gamma {
    fn shape(&self) -> CallShape {
        CallShape {
            name: "fit_gamma_calib",
            required: &[args::SCORE, args::Y],
            optional: &[args::FIT_PROPENSITY, args::CLIP, args::FIT_W],
        }
    }

    fn documentation(&self) -> Option<&'static Documentation> {
        FitGammaDoc.doc()
    }

    fn fit(&self, st: &FitState, _settings: &Settings, m: &mut Model) {
        let st = Prepared::new(st);
        let range = st.s_max - st.s_min;
        let shift = if range > 0.0 {
            st.s_min - GAMMA_SHIFT_FRACTION * range
        } else {
            st.s_min - 1.0
        };
        let sp = |s: f64| s - shift;
        let kappa = positive_or_one(st.raw.iter().map(|x| x.1 * sp(x.0)).sum::<f64>() / st.n);
        let v = |s: f64| sp(s) / kappa;
        let phi = |s: f64| {
            let x = v(s);
            [1.0, x.ln(), x]
        };
        let cons = [[0.0, 1.0, v(st.s_min)], [0.0, 1.0, v(st.s_max)]];
        let sol = st.minimise(phi, &cons, [st.c0, 0.0, 0.0]);
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
        m.loss = Some(st.loss(|s| [1.0, sp(s).ln(), sp(s)], &[c, a, b]));
    }

    fn apply(&self, m: &ModelRef<'_>, row: usize, s: f64) -> Result<f64> {
        let sp = m.clamp(row, s)? - m.num(row, "shift")?;
        Ok(sigmoid(
            m.num(row, "a")? * sp.ln() + m.num(row, "b")? * sp + m.num(row, "c")?,
        ))
    }
}
