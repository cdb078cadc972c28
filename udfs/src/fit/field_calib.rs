//! `fit_field_calib(logit, y, field [, n_knots [, l2]])`: field-aware calibration in Pan et
//! al.'s "ILPS & field z only" variant (eq. 7): `σ(η(l) + g_z)`, η as ILPS (ordered knot
//! values) and one offset per field value, fitted jointly on the summed log loss plus
//! `l2/2·Σ g_z²`.
//!
//! Solved by `crate::optim::ordered`'s projected Newton method on the ILPS variables and the
//! offsets; the knots without data are filled as in ILPS.

use crate::model::Model;
use datafusion_common::{exec_err, Result};
use datafusion_expr::Documentation;
use datafusion_macros::user_doc;

use crate::common::{args, Arg, CallShape};
use crate::model::{interp, FieldKey, ModelRef};

use super::calibrator::{Calibrator, Settings};
use super::Method;
use crate::scalars::sigmoid;

use super::state::FitState;
use crate::optim::ordered::{ilps_knots, locate_from, solve_with_offsets, Located, Nodes};

/// Nodes a batch of field values holds at most while it is located on the cores (unless one
/// value holds more).
const BATCH_NODES: usize = 1 << 20;

/// The joint fit over the field values' states (sorted by value).
fn field_calib(states: &[(&str, &FitState)], kn: usize, l2: f64, m: &mut Model) {
    let knots = ilps_knots(kn);
    // Nodes of every value, with the value's index: the values' nodes read in ascending order
    // and located on the cores a batch of values at a time, and appended in the values' order.
    let mut nodes = Nodes::with_capacity(states.iter().map(|(_, st)| st.nodes_bound()).sum());
    let mut start = 0;
    while start < states.len() {
        let mut end = start + 1;
        let mut held = states[start].1.nodes_bound();
        while end < states.len() && held + states[end].1.nodes_bound() <= BATCH_NODES {
            held += states[end].1.nodes_bound();
            end += 1;
        }
        let located = crate::parallel::map_in_order(end - start, crate::parallel::cores(), |i| {
            let state = states[start + i].1;
            // The scores ascend, so each one's knot is found from the last one's.
            let mut part = Nodes::with_capacity(state.nodes_bound());
            let mut from = 0;
            state.for_each_node_ascending(|s, a, t| {
                let (k, lambda) = locate_from(&knots, from, s);
                from = k;
                part.push(start + i, Located { k, lambda, a, t });
            });
            part
        });
        for part in located {
            nodes.append(part);
        }
        start = end;
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

/// Field-aware calibration.
pub(crate) struct FieldCalib;

impl Calibrator for FieldCalib {
    fn shape(&self) -> CallShape {
        CallShape {
            name: "fit_field_calib",
            required: const {
                &[
                    args::LOGIT,
                    args::Y,
                    args::FIELD.doc(
                        "The field whose values get their own offset (any type; compared as text).",
                    ),
                ]
            },
            optional: const {
                &[
                    args::N_KNOTS.doc("Number of knots of η, an integer constant in [1, 1000]. Default 100."),
                    Arg::lit_num("l2").or("1.0").doc("L2 penalty on the offsets (on the summed loss), a constant >= 0. Default 1.0."),
                ]
            },
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
```"#
)]
struct FitFieldCalibDoc;
