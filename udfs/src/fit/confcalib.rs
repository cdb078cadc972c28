//! ConfCalib for one field, `fit_confcalib(p, y, field [, n_bins [, lambda]])` (Zhao et al.
//! §3.2): `n_bins` equal-frequency bins inside each field value ('quantile' rule), each bin's
//! multiplier `confcalib_multiplier(mean p, mean y, count, lambda)`; `calibrate(p, model,
//! field)` scales p by its bin's multiplier.

use datafusion_common::Result;
use datafusion_expr::Documentation;
use datafusion_macros::user_doc;

use crate::common::{args, CallShape};
use crate::model::{check_probability, ConfCalibRow, FieldKey, Model, ModelRef};
use crate::scalars::confcalib_multiplier;

use super::calibrator::{Calibrator, Settings};
use super::nonparametric::{points_loss, quantile_edges_of_points};
use super::state::FitState;
use super::{Method, NONPARAMETRIC_EXACT_CAP};

#[user_doc(
    doc_section(label = "Calibrators"),
    description = "Fits ConfCalib for one field (Zhao et al. 2024, §3.2): inside each value of `field`, the rows are cut \
into `n_bins` equal-frequency bins by p (edges `numpy.percentile` of that value's p, the 'quantile' rule of the binned \
metrics; bins closed on the right), and each bin gets the multiplier `confcalib_multiplier(mean p, mean y, count, \
lambda)`: the observed rate shrunk toward the prediction by a Wilson interval whose confidence grows with the \
evidence. `calibrate(p, model, field)` returns `p · m(value, bin of p)` clipped to [0, 1]; a value the fit never saw \
keeps p. An empty bin, or one whose mean p is 0, has multiplier 1. The model keeps the values in `field_keys`, \
`n_bins + 1` edges per value in `field_edges` and `n_bins` multipliers per value in `field_values`.",
    syntax_example = "fit_confcalib(p, y, field [, n_bins [, lambda]])",
    sql_example = r#"```sql
> SELECT f, round(calibrate(0.2, m, f), 4) AS p
  FROM (SELECT fit_confcalib(p, y, f, 1, 0.0) AS m
        FROM (VALUES (0.2, 1, 'a'), (0.2, 0, 'a'), (0.2, 0, 'b'), (0.2, 0, 'b')) AS t(p, y, f))
  CROSS JOIN (VALUES ('a'), ('b'), ('c')) AS v(f) ORDER BY f;
+---+-----+
| f | p   |
+---+-----+
| a | 0.5 |
| b | 0.0 |
| c | 0.2 |
+---+-----+
```"#
)]
struct FitConfCalibDoc;

/// ConfCalib.
pub(crate) struct ConfCalib;

impl Calibrator for ConfCalib {
    fn shape(&self) -> CallShape {
        CallShape {
            name: "fit_confcalib",
            required: const {
                &[
                    args::P,
                    args::Y,
                    args::FIELD.doc("The field whose values are calibrated separately (any type; compared as text)."),
                ]
            },
            optional: const {
                &[
                    args::N_BINS.or("10").doc("Bins per field value, an integer constant in [1, 10000]. Default 10."),
                    args::LAMBDA.doc("Bound of the shrunk deviation, a constant >= 0. Default 1.96; 0 trusts each bin's observed rate entirely."),
                ]
            },
        }
    }

    fn documentation(&self) -> Option<&'static Documentation> {
        FitConfCalibDoc.doc()
    }

    fn exact_cap(&self) -> usize {
        NONPARAMETRIC_EXACT_CAP
    }

    fn takes_probability(&self) -> bool {
        true
    }

    fn field_aware(&self) -> bool {
        true
    }

    fn fit_fields(&self, states: &[(&str, &FitState)], settings: &Settings) -> Option<Model> {
        Some(confcalib(states, settings.count, settings.lambda))
    }

    fn apply_field(&self, m: &ModelRef<'_>, row: usize, s: f64, key: FieldKey<'_>) -> Result<f64> {
        let position = m.field_position(row, key)?;
        check_probability(s)?;
        Ok(match position {
            Some(i) => ConfCalibRow::new(m, row)?.scale(s, i),
            None => s,
        })
    }
}

/// ConfCalib over the field values' states (see the module documentation).
fn confcalib(states: &[(&str, &FitState)], bins: usize, lambda: f64) -> Model {
    let rows: i64 = states.iter().map(|(_, st)| st.rows).sum();
    let (s_min, s_max) = states
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |acc, (_, st)| {
            (acc.0.min(st.s_min), acc.1.max(st.s_max))
        });
    let mut m = Model::new(Method::ConfCalib, rows, s_min, s_max);
    // Each field value's bins, multipliers and loss, the values spread over the cores; the
    // results are read in the values' order, so the model does not depend on the threads.
    let fitted = crate::parallel::map_in_order(states.len(), crate::parallel::cores(), |k| {
        let st = states[k].1;
        let pts = st.sorted_points();
        let edges = quantile_edges_of_points(&pts, bins);
        // A point is in bin b when inner edge b − 1 < p ≤ inner edge b. The points ascend,
        // so bin b holds the run pts[cut[b]..cut[b + 1]] (the cuts kept non-decreasing
        // should rounding make two edges cross).
        let mut cut = vec![0];
        for &e in &edges[1..bins] {
            let below = pts.partition_point(|q| q.0 <= e);
            cut.push(below.max(cut[cut.len() - 1]));
        }
        cut.push(pts.len());
        let (mut n, mut sp, mut t) = (vec![0.0; bins], vec![0.0; bins], vec![0.0; bins]);
        for b in 0..bins {
            for &(p, pn, pt) in &pts[cut[b]..cut[b + 1]] {
                n[b] += pn;
                sp[b] += pn * p;
                t[b] += pt;
            }
        }
        let mult: Vec<f64> = (0..bins)
            .map(|b| {
                if n[b] == 0.0 {
                    return 1.0;
                }
                let (mean_p, rate) = (sp[b] / n[b], t[b] / n[b]);
                confcalib_multiplier(mean_p.clamp(0.0, 1.0), rate, n[b], lambda).unwrap_or(1.0)
            })
            .collect();
        let mut b = 0;
        let loss = points_loss(&pts, |i| {
            while i >= cut[b + 1] {
                b += 1;
            }
            (pts[i].0 * mult[b]).clamp(0.0, 1.0)
        });
        (edges, mult, loss)
    });
    let (mut keys, mut edges_all, mut multipliers) = (vec![], vec![], vec![]);
    let mut loss_sum = 0.0;
    for ((key, st), (edges, mult, loss)) in states.iter().zip(fitted) {
        loss_sum += loss * st.rows as f64;
        keys.push(key.to_string());
        edges_all.extend(edges);
        multipliers.extend(mult);
    }
    m.loss = Some(loss_sum / rows as f64);
    m.field_keys = Some(keys);
    m.field_edges = Some(edges_all);
    m.field_values = Some(multipliers);
    m.converged = Some(true);
    m
}
