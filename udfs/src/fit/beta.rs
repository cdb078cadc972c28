//! Beta calibration, `fit_beta_calib`: `σ(a·ln p − b·ln(1−p) + c)` with a, b >= 0 (Kull et
//! al. 2017, the 'abm' model), on p clipped by [`beta_clip`]; fitted by the shared solver
//! (`super::parametric`).

use datafusion_common::Result;
use datafusion_expr::Documentation;
use datafusion_macros::user_doc;

use crate::common::{args, CallShape};
use crate::model::{Model, ModelRef};
use crate::scalars::sigmoid;

use super::calibrator::{Calibrator, Settings};
use super::parametric::{beta_clip, positive_or_one, Prepared};
use super::state::FitState;
use datafusion_common::exec_err;

#[user_doc(
    doc_section(label = "Calibrators"),
    description = "Fits beta calibration `σ(a·ln p − b·ln(1−p) + c)` with a, b >= 0 (Kull et al. 2017, the 'abm' \
model; a baseline of Kweon et al.), by minimising the mean log loss — or, with `propensity`, the mean IPS log loss \
with ω = max(propensity, clip). p is clipped to [ε, 1−ε] (ε = 2.2e-16) before the logarithms, as betacal does. \
Unlike betacal, which refits without a feature whose coefficient comes out negative, the constraints are solved \
exactly, so the loss is never higher than betacal's.",
    syntax_example = "fit_beta_calib(p, y [, propensity [, clip [, w]]])",
    sql_example = r#"```sql
> SELECT m['method'] AS method, m['a'] >= 0 AND m['b'] >= 0 AS monotone
  FROM (SELECT fit_beta_calib(p, y) AS m FROM (VALUES (0.1, 0), (0.2, 0), (0.3, 1), (0.6, 0), (0.7, 1), (0.9, 1)) AS t(p, y));
+--------+----------+
| method | monotone |
+--------+----------+
| beta   | true     |
+--------+----------+
```"#
)]
struct FitBetaDoc;

/// Beta calibration.
pub(crate) struct Beta;

impl Calibrator for Beta {
    fn shape(&self) -> CallShape {
        CallShape {
            name: "fit_beta_calib",
            required: &[args::P, args::Y],
            optional: &[args::FIT_PROPENSITY, args::CLIP, args::FIT_W],
        }
    }

    fn documentation(&self) -> Option<&'static Documentation> {
        FitBetaDoc.doc()
    }

    fn takes_probability(&self) -> bool {
        true
    }

    fn fit(&self, st: &FitState, _settings: &Settings, m: &mut Model) {
        // f = c + a·ln p − b·ln(1−p), a, b ≥ 0; each feature in units of its root mean square.
        let st = Prepared::new(st);
        let features = |p: f64| {
            let p = beta_clip(p);
            [p.ln(), -(-p).ln_1p()]
        };
        let w: f64 = st.raw.iter().map(|x| x.1).sum();
        let mut scale = [0.0; 2];
        for &(s, a, _) in &st.raw {
            let f = features(s);
            for k in 0..2 {
                scale[k] += a * f[k] * f[k];
            }
        }
        let scale = scale.map(|v| positive_or_one((v / w).sqrt()));
        let phi = |s: f64| {
            let f = features(s);
            [1.0, f[0] / scale[0], f[1] / scale[1]]
        };
        let cons = [[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]];
        let sol = st.minimise(phi, &cons, [st.c0, 0.0, 0.0]);
        let [c, au, bu] = sol.theta;
        let (a, b) = (au / scale[0], bu / scale[1]);
        m.a = Some(a);
        m.b = Some(b);
        m.c = Some(c);
        m.iterations = Some(sol.iterations);
        m.converged = Some(sol.converged);
        let raw_phi = |s: f64| {
            let f = features(s);
            [1.0, f[0], f[1]]
        };
        m.loss = Some(st.loss(raw_phi, &[c, a, b]));
    }

    fn apply(&self, m: &ModelRef<'_>, row: usize, s: f64) -> Result<f64> {
        if !(0.0..=1.0).contains(&s) {
            return exec_err!(
                "calibrate: a beta model takes a probability in [0, 1] as score, got {s}"
            );
        }
        let p = beta_clip(s);
        Ok(sigmoid(
            m.num(row, "a")? * p.ln() - m.num(row, "b")? * (-p).ln_1p() + m.num(row, "c")?,
        ))
    }
}
