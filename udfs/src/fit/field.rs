//! Field-aware calibrators: one fit state per value of a field inside each group.
//!
//! The kernel nests the fits' own [`FitKernel`]: each (group, field value) pair is one inner
//! group, so rows, merges and memory accounting are the fits' (exact distinct scores, then
//! the fixed grid). The partial state is the group's field values (`keys`, as text) and,
//! for each of the fits' state columns, the list of the inner states of those values.
//!
//! - `fit_confcalib(p, y, field [, n_bins [, lambda]])`: ConfCalib (Zhao et al. §3.2) with
//!   `n_bins` equal-frequency bins inside each field value ('quantile' rule), each bin's
//!   multiplier `confcalib_multiplier(mean p, mean y, count, lambda)`.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, StringArray, UInt32Array};
use arrow::buffer::OffsetBuffer;
use arrow::compute::{and, cast, is_not_null, take};
use arrow::datatypes::{DataType, Field, FieldRef};
use datafusion_common::{internal_err, Result};
use datafusion_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion_expr::utils::format_state_name;
use datafusion_expr::{AggregateUDFImpl, Documentation, Signature, Volatility};
use datafusion_macros::user_doc;

use crate::common::{list_array, list_type, literal_checked, n_bins, Arg, CallShape};
use crate::kernel::{kernel_aggregate, kernel_udaf_common, Kernel};
use crate::metrics::binning::{quantile_levels, unweighted_quantile_edges};
use crate::model::Model;
use crate::scalars::confcalib_multiplier;

use super::kernel::FitKernel;
use super::nonparametric::points_loss;
use super::state::FitState;
use super::{fit_state_fields, FitMethod};

/// Default bins per field value of `fit_confcalib`.
pub const DEFAULT_CONFCALIB_BINS: usize = 10;
/// Default `l2` of `fit_field_calib`.
pub const DEFAULT_FIELD_L2: f64 = 1.0;
/// Default `lambda` of `fit_confcalib` (as `confcalib_multiplier`).
pub const DEFAULT_CONFCALIB_LAMBDA: f64 = 1.96;

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
```"#,
    argument(name = "p", description = "The predicted probability, in [0, 1]."),
    argument(name = "y", description = "Observed label: Boolean or a number 0/1."),
    argument(
        name = "field",
        description = "The field whose values are calibrated separately (any type; compared as text)."
    ),
    argument(
        name = "n_bins",
        description = "Bins per field value, an integer constant in [1, 10000]. Default 10."
    ),
    argument(
        name = "lambda",
        description = "Bound of the shrunk deviation, a constant >= 0. Default 1.96; 0 trusts each bin's observed rate entirely."
    )
)]
struct FitConfCalibDoc;

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
```"#,
    argument(name = "logit", description = "The model's logit (any finite number)."),
    argument(name = "y", description = "Observed label: Boolean or a number 0/1."),
    argument(
        name = "field",
        description = "The field whose values get their own offset (any type; compared as text)."
    ),
    argument(
        name = "n_knots",
        description = "Number of knots of η, an integer constant in [1, 1000]. Default 100."
    ),
    argument(
        name = "l2",
        description = "L2 penalty on the offsets (on the summed loss), a constant >= 0. Default 1.0."
    )
)]
struct FitFieldCalibDoc;

/// A field-aware fitting aggregate.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct FieldFit {
    method: FitMethod,
    signature: Signature,
    /// Distinct scores kept exactly per (group, field value); `None`: the method's default.
    exact_cap: Option<usize>,
}

super::fit_constructors!(FieldFit);

impl FieldFit {
    fn shape(&self) -> CallShape {
        if self.method == FitMethod::FieldCalib {
            return CallShape {
                name: self.method.function_name(),
                required: &[Arg::Num("logit"), Arg::Label("y"), Arg::Any("field")],
                optional: &[Arg::LitInt("n_knots"), Arg::LitNum("l2")],
            };
        }
        CallShape {
            name: self.method.function_name(),
            required: &[Arg::Num("p"), Arg::Label("y"), Arg::Any("field")],
            optional: &[Arg::LitInt("n_bins"), Arg::LitNum("lambda")],
        }
    }

    fn kernel(&self, args: &AccumulatorArgs) -> Result<FieldFitKernel> {
        let func = self.method.function_name();
        let field_calib = self.method == FitMethod::FieldCalib;
        let bins = match (args.exprs.get(3), field_calib) {
            (Some(e), true) => super::n_knots(func, e)?,
            (Some(e), false) => n_bins(func, e)?,
            (None, true) => super::DEFAULT_KNOTS,
            (None, false) => DEFAULT_CONFCALIB_BINS,
        };
        let name = if field_calib { "l2" } else { "lambda" };
        let lambda = match args.exprs.get(4) {
            Some(e) => literal_checked(func, name, e, "finite and >= 0", |x| {
                x.is_finite() && x >= 0.0
            })?,
            None if field_calib => DEFAULT_FIELD_L2,
            None => DEFAULT_CONFCALIB_LAMBDA,
        };
        Ok(FieldFitKernel {
            method: self.method,
            bins,
            lambda,
            inner: FitKernel::for_field(
                self.method,
                self.exact_cap.unwrap_or(self.method.exact_cap()),
            ),
            keys: vec![],
        })
    }
}

kernel_aggregate!(FieldFit, false, capped);

impl AggregateUDFImpl for FieldFit {
    kernel_udaf_common!();

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.shape().coerce(arg_types)?;
        Ok(crate::model::model_type())
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        let mut fields: Vec<FieldRef> = vec![Arc::new(Field::new(
            format_state_name(args.name, "field_keys"),
            list_type(DataType::Utf8),
            true,
        ))];
        fields.extend(fit_state_fields(args.name).into_iter().map(|f| {
            Arc::new(Field::new(f.name(), list_type(f.data_type().clone()), true)) as FieldRef
        }));
        Ok(fields)
    }

    fn documentation(&self) -> Option<&Documentation> {
        if self.method == FitMethod::FieldCalib {
            FitFieldCalibDoc.doc()
        } else {
            FitConfCalibDoc.doc()
        }
    }
}

/// The field values of one group: each value's inner group, in first-seen order.
#[derive(Debug, Default)]
struct GroupKeys {
    index: HashMap<String, usize>,
    order: Vec<(String, usize)>,
}

impl GroupKeys {
    fn inner(&mut self, key: &str, next: &mut usize) -> usize {
        if let Some(&i) = self.index.get(key) {
            return i;
        }
        let i = *next;
        *next += 1;
        self.index.insert(key.to_string(), i);
        self.order.push((key.to_string(), i));
        i
    }

    fn bytes(&self) -> usize {
        self.order
            .iter()
            .map(|(k, _)| 2 * k.capacity() + 48)
            .sum::<usize>()
    }
}

#[derive(Debug)]
pub(crate) struct FieldFitKernel {
    method: FitMethod,
    bins: usize,
    lambda: f64,
    /// One fit state per (group, field value).
    inner: FitKernel,
    keys: Vec<GroupKeys>,
}

impl FieldFitKernel {
    fn func(&self) -> &'static str {
        self.method.function_name()
    }

    /// Inner groups for `keys` of outer group `g`, created as needed.
    fn inner_groups<'k>(
        &mut self,
        g: usize,
        keys: impl Iterator<Item = Option<&'k str>>,
    ) -> Vec<usize> {
        let mut next = self.inner.num_groups();
        let out = keys
            .map(|k| match k {
                Some(k) => self.keys[g].inner(k, &mut next),
                None => 0,
            })
            .collect();
        self.inner.resize(next.max(1));
        out
    }

    fn finish(&self, g: usize) -> Option<Model> {
        let keys = &self.keys[g];
        // Sorted by value, so the model does not depend on the order rows arrived in.
        let mut states: Vec<(&str, &FitState)> = keys
            .order
            .iter()
            .map(|(k, i)| (k.as_str(), &self.inner.groups[*i]))
            .filter(|(_, st)| st.rows > 0)
            .collect();
        states.sort_by(|a, b| a.0.cmp(b.0));
        if states.is_empty() {
            return None;
        }
        if self.method == FitMethod::FieldCalib {
            let rows: i64 = states.iter().map(|(_, st)| st.rows).sum();
            let (lo, hi) = states
                .iter()
                .fold((f64::INFINITY, f64::NEG_INFINITY), |acc, (_, st)| {
                    (acc.0.min(st.s_min), acc.1.max(st.s_max))
                });
            let mut m = Model::new(self.method.model_name(), rows, lo, hi);
            super::field_calib::field_calib(&states, self.bins, self.lambda, &mut m);
            return Some(m);
        }
        Some(confcalib(&states, self.bins, self.lambda))
    }
}

impl Kernel for FieldFitKernel {
    fn empty(&self) -> Result<Self> {
        Ok(Self {
            method: self.method,
            bins: self.bins,
            lambda: self.lambda,
            inner: self.inner.empty()?,
            keys: vec![],
        })
    }

    fn resize(&mut self, n: usize) {
        if self.keys.len() < n {
            self.keys.resize_with(n, GroupKeys::default);
        }
    }

    fn num_groups(&self) -> usize {
        self.keys.len()
    }

    fn update(
        &mut self,
        values: &[ArrayRef],
        groups: &[usize],
        filter: Option<&BooleanArray>,
    ) -> Result<()> {
        let field = cast(&values[2], &DataType::Utf8)?;
        let field = field.as_string::<i32>();
        let mut next = self.inner.num_groups();
        let keys = &mut self.keys;
        let inner: Vec<usize> = groups
            .iter()
            .enumerate()
            .map(|(i, &g)| {
                if field.is_valid(i) {
                    keys[g].inner(field.value(i), &mut next)
                } else {
                    0
                }
            })
            .collect();
        self.inner.resize(next.max(1));
        // Rows with a NULL field are skipped, as rows with any NULL data argument.
        let valid = is_not_null(&values[2])?;
        let filter = match filter {
            Some(f) => and(f, &valid)?,
            None => valid,
        };
        self.inner.update(&values[..2], &inner, Some(&filter))
    }

    fn merge(&mut self, states: &[ArrayRef], groups: &[usize]) -> Result<()> {
        let keys = states[0].as_list::<i32>();
        let key_values = keys.values().as_string::<i32>();
        let offsets = keys.value_offsets();
        let mut inner = vec![0; key_values.len()];
        for (r, &g) in groups.iter().enumerate() {
            let span = offsets[r] as usize..offsets[r + 1] as usize;
            let ids = self.inner_groups(g, span.clone().map(|j| Some(key_values.value(j))));
            for (j, id) in span.zip(ids) {
                inner[j] = id;
            }
        }
        let mut children = Vec::with_capacity(states.len() - 1);
        for s in &states[1..] {
            let l = s.as_list::<i32>();
            if l.value_offsets() != offsets {
                return internal_err!("{}: malformed partial state", self.func());
            }
            children.push(Arc::clone(l.values()));
        }
        self.inner.merge(&children, &inner)
    }

    fn state(&self, range: Range<usize>) -> Result<Vec<ArrayRef>> {
        let groups = &self.keys[range];
        let order: Vec<u32> = groups
            .iter()
            .flat_map(|k| k.order.iter().map(|(_, i)| *i as u32))
            .collect();
        let offsets = OffsetBuffer::from_lengths(groups.iter().map(|k| k.order.len()));
        let names: StringArray = groups
            .iter()
            .flat_map(|k| k.order.iter().map(|(s, _)| Some(s.as_str())))
            .collect();
        let wrap = |values: ArrayRef| list_array(offsets.clone(), values);
        let inner = self.inner.state(0..self.inner.num_groups())?;
        let indices = UInt32Array::from(order);
        let mut out = vec![wrap(Arc::new(names))];
        for column in inner {
            out.push(wrap(take(&column, &indices, None)?));
        }
        Ok(out)
    }

    fn evaluate(&mut self, range: Range<usize>) -> Result<ArrayRef> {
        let models: Vec<Option<Model>> = range.map(|g| self.finish(g)).collect();
        crate::model::models_to_array(&models)
    }

    fn drain(&mut self, n: usize) {
        // The drained groups' inner states are emptied (their memory returned); their slots
        // stay, so the other groups' inner indices remain valid.
        for keys in self.keys.drain(..n) {
            for (_, i) in keys.order {
                self.inner.clear_group(i);
            }
        }
    }

    fn size(&self) -> usize {
        self.inner.size()
            + self.keys.iter().map(GroupKeys::bytes).sum::<usize>()
            + self.keys.capacity() * size_of::<GroupKeys>()
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
    let mut m = Model::new(FitMethod::ConfCalib.model_name(), rows, s_min, s_max);
    let (mut keys, mut edges_all, mut multipliers) = (vec![], vec![], vec![]);
    let mut loss_sum = 0.0;
    for (key, st) in states {
        let pts = st.sorted_points();
        let edges = quantile_edges_of_points(&pts, bins);
        let inner = &edges[1..bins];
        let bin_of = |p: f64| inner.partition_point(|&e| e < p);
        let (mut n, mut sp, mut t) = (vec![0.0; bins], vec![0.0; bins], vec![0.0; bins]);
        for &(p, pn, pt) in &pts {
            let b = bin_of(p);
            n[b] += pn;
            sp[b] += pn * p;
            t[b] += pt;
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
        loss_sum += points_loss(&pts, |i| {
            let p = pts[i].0;
            (p * mult[bin_of(p)]).clamp(0.0, 1.0)
        }) * st.rows as f64;
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

/// `numpy.percentile` edges (the 'quantile' rule) of the rows behind sorted points
/// (score, rows, positives).
pub(super) fn quantile_edges_of_points(pts: &[(f64, f64, f64)], bins: usize) -> Vec<f64> {
    let mut cumulative = Vec::with_capacity(pts.len());
    let mut total = 0.0;
    for &(_, n, _) in pts {
        total += n;
        cumulative.push(total);
    }
    let rows = total.round() as usize;
    let at = |r: usize| {
        pts[cumulative
            .partition_point(|&c| c <= r as f64)
            .min(pts.len() - 1)]
        .0
    };
    unweighted_quantile_edges(rows, &quantile_levels(bins), at)
}
