//! `logloss`, `brier`, `ips_logloss` and `normalized_entropy`: means of a per-row loss.
//!
//! State per group: Σw and Σw·loss (two Float64 fields); the result is their ratio, NULL when
//! Σw is 0 (no usable row, or every weight 0). `normalized_entropy` also keeps Σw·y, for the
//! entropy of the base rate it divides by.

use std::ops::Range;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Float64Array};
use arrow::datatypes::{DataType, FieldRef, Float64Type};
use datafusion_common::Result;
use datafusion_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion_expr::{AggregateUDFImpl, Documentation, Signature};
use datafusion_macros::user_doc;

use crate::common::{
    all_probabilities, all_weights, args, check_p, check_propensity, check_w, check_y, f64s,
    for_each_row, literal_checked, state_fields_of, usable_rows_pyw, weight_col, CallShape,
};
use crate::fastmath::{
    ips_loss_sum, ln, ln_1m, log_loss, log_loss_sums, log_loss_sums_grouped,
    log_loss_sums_unweighted,
};
use crate::kernel::Filter;
use crate::kernel::{kernel_aggregate, Kernel};
use crate::labels::{all_labels, f64_labels, with_labels};
use crate::multiclass;

/// Default clipping of p in log losses: the Float64 machine epsilon, as scikit-learn.
pub const DEFAULT_EPS: f64 = f64::EPSILON;
/// Default lower clip of propensities in IPS losses [Kweon et al.].
pub const DEFAULT_CLIP: f64 = 0.1;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LossKind {
    LogLoss,
    Brier,
    IpsLogLoss,
    NormalizedEntropy,
}

#[user_doc(
    doc_section(label = "Calibration Metrics"),
    description = "Mean log loss `Σ w·−[y ln p + (1−y) ln(1−p)] / Σ w`, with p clipped to [eps, 1−eps] \
(eps default the Float64 machine epsilon, as scikit-learn's `log_loss`). On a multiclass model's list of class \
probabilities, `logloss(probs, label [, eps [, w]])` is scikit-learn's multiclass `log_loss` (with `labels` the \
list's K classes): the mean of `−ln probs[label]`, probs clipped the same way; `label` is the class index 0 to \
K − 1, each list sums to 1 within 1e-6. NULL when no row is usable.",
    syntax_example = "logloss(p, y [, eps [, w]])",
    sql_example = r#"```sql
> SELECT round(logloss(p, y), 6) AS ll FROM (VALUES (0.5, 1), (0.5, 0)) AS t(p, y);
+----------+
| ll       |
+----------+
| 0.693147 |
+----------+
```"#
)]
struct LogLossDoc;

#[user_doc(
    doc_section(label = "Calibration Metrics"),
    description = "Brier score `Σ w (y − p)² / Σ w`. On a multiclass model's list of class probabilities, \
`brier(probs, label [, w])` is the mean over rows of the squared error summed over the K classes, \
`Σ_k (probs[k] − [k = label])²` (scikit-learn's multiclass `brier_score_loss` with `scale_by_half=False`; for two \
classes that is twice the binary score of either class). NULL when no row is usable.",
    syntax_example = "brier(p, y [, w])",
    sql_example = r#"```sql
> SELECT brier(p, y) AS brier FROM (VALUES (0.5, 1), (0.5, 0)) AS t(p, y);
+-------+
| brier |
+-------+
| 0.25  |
+-------+
```"#
)]
struct BrierDoc;

#[user_doc(
    doc_section(label = "Calibration Metrics"),
    description = "Mean inverse-propensity-scored log loss L_IPS (Kweon et al.): with `ω = max(propensity, clip)`, \
the mean of `−[(y/ω) ln p + (1 − y/ω) ln(1 − p)]`, p clipped as in `logloss`. Its expectation equals the loss on \
true preferences when ω is the true exposure probability. It can be negative for a single row. NULL when no row \
is usable.",
    syntax_example = "ips_logloss(p, y, propensity [, clip [, eps]])",
    sql_example = r#"```sql
> SELECT round(ips_logloss(p, y, q), 6) AS l FROM (VALUES (0.5, 1, 0.5), (0.5, 0, 1.0)) AS t(p, y, q);
+----------+
| l        |
+----------+
| 0.693147 |
+----------+
```"#
)]
struct IpsLogLossDoc;

#[user_doc(
    doc_section(label = "Calibration Metrics"),
    description = "Normalized entropy, the CTR models' \"NE\" (He et al. 2014): the mean log loss divided by the \
entropy of the base rate `r = Σ w·y / Σ w`, i.e. `logloss / −[r ln r + (1−r) ln(1−r)]`; below 1 the model beats \
predicting the base rate. Equal to 1 − scikit-learn's `d2_log_loss_score`. p is clipped as in `logloss` (eps = \
2.220446049250313e-16). NULL when no row is usable or the base rate is 0 or 1.",
    syntax_example = "normalized_entropy(p, y [, w])",
    sql_example = r#"```sql
> SELECT round(normalized_entropy(p, y), 6) AS ne FROM (VALUES (0.2, 0), (0.6, 1), (0.3, 0), (0.9, 1)) AS t(p, y);
+----------+
| ne       |
+----------+
| 0.431367 |
+----------+
```"#
)]
struct NormalizedEntropyDoc;

/// `logloss`, `brier` or `ips_logloss`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct MeanLoss {
    kind: LossKind,
    signature: Signature,
}

crate::kernel::signature_from_shape!(MeanLoss, kind: LossKind);

impl LossKind {
    /// This function's name and arguments.
    fn shape(self) -> CallShape {
        match self {
            LossKind::LogLoss => CallShape {
                name: "logloss",
                required: &[args::P, args::Y],
                optional: const {
                    &[
                        args::EPS
                            .doc("Clipping constant in [0, 0.5). Default 2.220446049250313e-16."),
                        args::W,
                    ]
                },
            },
            LossKind::Brier => CallShape {
                name: "brier",
                required: &[args::P, args::Y],
                optional: &[args::W],
            },
            LossKind::IpsLogLoss => {
                CallShape {
                    name: "ips_logloss",
                    required: const {
                        &[
                            args::P,
                            args::Y,
                            args::PROPENSITY.doc("Exposure propensity in (0, 1]."),
                        ]
                    },
                    optional: const {
                        &[
                        args::CLIP,
                        args::EPS.doc("Clipping constant of p in [0, 0.5). Default 2.220446049250313e-16."),
                    ]
                    },
                }
            }
            LossKind::NormalizedEntropy => CallShape {
                name: "normalized_entropy",
                required: &[args::P, args::Y],
                optional: &[args::W],
            },
        }
    }
}

impl LossKind {
    /// The call shape of the multiclass form, on a list of class probabilities and a class
    /// index (`logloss` and `brier`; None for the others).
    fn multiclass_shape(self) -> Option<CallShape> {
        matches!(self, LossKind::LogLoss | LossKind::Brier).then(|| CallShape {
            required: &[args::PROBS, args::LABEL],
            ..self.shape()
        })
    }
}

impl MeanLoss {
    /// The shape of a call with these argument types: the multiclass one when the first is a
    /// list and this loss has one.
    fn shape_for(&self, arg_types: &[DataType]) -> CallShape {
        match (arg_types.first(), self.kind.multiclass_shape()) {
            (Some(t), Some(multiclass)) if multiclass::is_list(t) => multiclass,
            _ => self.shape(),
        }
    }

    fn kernel(&self, args: &AccumulatorArgs) -> Result<LossKernel> {
        let func = self.shape().name;
        let multiclass = match args.exprs.first() {
            Some(e) => {
                self.kind.multiclass_shape().is_some()
                    && multiclass::is_list(&e.data_type(args.schema)?)
            }
            None => false,
        };
        let eps_at = |i: usize| -> Result<f64> {
            match args.exprs.get(i) {
                Some(e) => {
                    literal_checked(func, "eps", e, "in [0, 0.5)", |x| (0.0..0.5).contains(&x))
                }
                None => Ok(DEFAULT_EPS),
            }
        };
        let (eps, clip, w_col) = match self.kind {
            LossKind::LogLoss => (eps_at(2)?, 0.0, weight_col(args.exprs, 3)),
            LossKind::Brier => (0.0, 0.0, weight_col(args.exprs, 2)),
            LossKind::NormalizedEntropy => (DEFAULT_EPS, 0.0, weight_col(args.exprs, 2)),
            LossKind::IpsLogLoss => {
                let clip = match args.exprs.get(3) {
                    Some(e) => {
                        literal_checked(func, "clip", e, "in [0, 1]", |x| (0.0..=1.0).contains(&x))?
                    }
                    None => DEFAULT_CLIP,
                };
                (eps_at(4)?, clip, None)
            }
        };
        Ok(LossKernel {
            func,
            kind: self.kind,
            multiclass,
            eps,
            clip,
            w_col,
            sw: vec![],
            sl: vec![],
            sy: vec![],
        })
    }
}

kernel_aggregate!(MeanLoss, true);

impl AggregateUDFImpl for MeanLoss {
    crate::kernel::kernel_udaf_common!(returns DataType::Float64, shape_for);

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        let names: &[&str] = match self.kind {
            LossKind::NormalizedEntropy => &["sum_w", "sum_loss", "sum_wy"],
            _ => &["sum_w", "sum_loss"],
        };
        Ok(state_fields_of(args.name, names, &DataType::Float64))
    }

    fn documentation(&self) -> Option<&Documentation> {
        let doc = match self.kind {
            LossKind::LogLoss => LogLossDoc.doc(),
            LossKind::Brier => BrierDoc.doc(),
            LossKind::IpsLogLoss => IpsLogLossDoc.doc(),
            LossKind::NormalizedEntropy => NormalizedEntropyDoc.doc(),
        };
        crate::common::documented(doc, &self.shape())
    }
}

#[derive(Debug)]
struct LossKernel {
    func: &'static str,
    kind: LossKind,
    /// The call's first two arguments are a list of class probabilities and a class index
    /// (`crate::multiclass`), the loss a row's: `−ln probs[label]` (probs clipped to [eps,
    /// 1 − eps]) or `Σ_k (probs[k] − [k = label])²`.
    multiclass: bool,
    eps: f64,
    clip: f64,
    w_col: Option<usize>,
    sw: Vec<f64>,
    sl: Vec<f64>,
    /// Σw·y per group (`normalized_entropy` only; empty for the others).
    sy: Vec<f64>,
}

/// The entropy of a base rate r in (0, 1), in nats.
fn entropy(r: f64) -> f64 {
    -(r * r.ln() + (1.0 - r) * (-r).ln_1p())
}

/// `−[y ln p + (1−y) ln(1−p)]` for a label y in {0, 1} and p clipped to [eps, 1−eps].
#[inline]
pub(crate) fn log_loss_row(p: f64, y: f64, eps: f64) -> f64 {
    log_loss(p, y, eps)
}

/// `−[(y/ω) ln p + (1 − y/ω) ln(1 − p)]` with p clipped to [eps, 1−eps].
#[inline]
pub(crate) fn ips_loss_row(p: f64, y: f64, omega: f64, eps: f64) -> f64 {
    let p = p.clamp(eps, 1.0 - eps);
    let t = y / omega;
    let mut l = 0.0;
    if t != 0.0 {
        l -= t * ln(p);
    }
    if t != 1.0 {
        l -= (1.0 - t) * ln_1m(p);
    }
    l
}

impl LossKernel {
    /// [`Kernel::update`] of the multiclass form: each checked row's loss, weighted.
    fn update_multiclass(
        &mut self,
        values: &[ArrayRef],
        groups: &[usize],
        filter: Filter,
    ) -> Result<()> {
        let (func, kind, eps) = (self.func, self.kind, self.eps);
        let w = self.w_col.map(|c| f64s(&values[c]));
        let one_group = self.sw.len() == 1;
        let (sw, sl) = (&mut self.sw, &mut self.sl);
        multiclass::for_each_row(func, &values[0], &values[1], filter, |i, row| {
            let Some((probs, label)) = row else {
                return Ok(());
            };
            let wi = match w {
                Some(w) if w.is_null(i) => return Ok(()),
                Some(w) => check_w(func, w.value(i))?,
                None => 1.0,
            };
            let loss = match kind {
                LossKind::Brier => probs
                    .iter()
                    .enumerate()
                    .map(|(k, &p)| {
                        let d = p - if k == label { 1.0 } else { 0.0 };
                        d * d
                    })
                    .sum::<f64>(),
                _ => -ln(probs[label].clamp(eps, 1.0 - eps)),
            };
            let g = if one_group { 0 } else { groups[i] };
            sw[g] += wi;
            sl[g] += wi * loss;
            Ok(())
        })
    }
}

/// Most groups for which a batch of many groups keeps a running product per group (56 bytes
/// a group while the batch is added) rather than taking a logarithm a row.
const GROUPED_PRODUCTS: usize = 4096;

impl Kernel for LossKernel {
    fn empty(&self) -> Result<Self> {
        Ok(Self {
            sw: vec![],
            sl: vec![],
            sy: vec![],
            ..*self
        })
    }

    fn resize(&mut self, n: usize) {
        if self.sw.len() < n {
            self.sw.resize(n, 0.0);
            self.sl.resize(n, 0.0);
            if self.kind == LossKind::NormalizedEntropy {
                self.sy.resize(n, 0.0);
            }
        }
    }

    fn num_groups(&self) -> usize {
        self.sw.len()
    }

    fn update(&mut self, values: &[ArrayRef], groups: &[usize], filter: Filter) -> Result<()> {
        if self.multiclass {
            return self.update_multiclass(values, groups, filter);
        }
        let (func, eps, clip, kind) = (self.func, self.eps, self.clip, self.kind);
        let p = f64s(&values[0]).values();
        // The third data column: the weight, or ips_logloss's propensity.
        let extra_col = match kind {
            LossKind::IpsLogLoss => Some(2),
            _ => self.w_col,
        };
        let extra = extra_col.map(|c| f64s(&values[c]).values());
        let mask = usable_rows_pyw(values, (0, 1), extra_col, filter);
        let one_group = self.sw.len() == 1;
        let ne = kind == LossKind::NormalizedEntropy;
        let (sw, sl, sy) = (&mut self.sw, &mut self.sl, &mut self.sy);
        // (p, y, weight or propensity) of a checked row → (weight, loss).
        let row_loss = |pi: f64, yi: f64, xi: f64| -> (f64, f64) {
            match kind {
                LossKind::LogLoss | LossKind::NormalizedEntropy => (xi, log_loss_row(pi, yi, eps)),
                LossKind::Brier => (xi, (yi - pi) * (yi - pi)),
                LossKind::IpsLogLoss => (1.0, ips_loss_row(pi, yi, xi.max(clip), eps)),
            }
        };
        let extra_ok = |x: &[f64]| match kind {
            LossKind::IpsLogLoss => x.iter().fold(true, |ok, &q| ok & (q > 0.0) & (q <= 1.0)),
            _ => all_weights(x),
        };
        let log_kind = matches!(kind, LossKind::LogLoss | LossKind::NormalizedEntropy);
        if mask.is_none() && one_group && log_kind && extra.is_none() && eps >= f64::EPSILON {
            // Checks the rows as it adds them up; a bad row falls through to the checked path.
            // Labels as they are stored.
            if let Some(Some([l, yw])) =
                with_labels!(&values[1], |y| log_loss_sums_unweighted(p, y, eps))
            {
                sw[0] += p.len() as f64;
                sl[0] += l;
                if ne {
                    sy[0] += yw;
                }
                return Ok(());
            }
        }
        let y_f64 = f64_labels(&values[1])?;
        let y = &y_f64[..];
        let fast = mask.is_none()
            && all_probabilities(p)
            && all_labels(y)
            && extra.is_none_or(|x| extra_ok(x));
        if fast && one_group && log_kind {
            let [w, l, yw] = log_loss_sums(p, y, extra.map(|x| &x[..]), eps);
            sw[0] += w;
            sl[0] += l;
            if ne {
                sy[0] += yw;
            }
            return Ok(());
        }
        if let (true, true, LossKind::IpsLogLoss, Some(q)) =
            (fast && one_group, eps >= f64::EPSILON, kind, extra)
        {
            sw[0] += p.len() as f64;
            sl[0] += ips_loss_sum(p, y, q, clip, eps);
            return Ok(());
        }
        if fast && one_group {
            // Four running sums instead of one, so rows do not wait for each other's
            // addition (one more rounding per batch, far inside 1e-12).
            let (mut w4, mut l4, mut y4) = ([0.0; 4], [0.0; 4], [0.0; 4]);
            for i in 0..p.len() {
                let (w, l) = row_loss(p[i], y[i], extra.map_or(1.0, |x| x[i]));
                w4[i % 4] += w;
                l4[i % 4] += w * l;
                y4[i % 4] += w * y[i];
            }
            sw[0] += w4.iter().sum::<f64>();
            sl[0] += l4.iter().sum::<f64>();
            if ne {
                sy[0] += y4.iter().sum::<f64>();
            }
            return Ok(());
        }
        if fast
            && !one_group
            && log_kind
            && extra.is_none()
            && eps >= f64::EPSILON
            && sw.len() <= GROUPED_PRODUCTS
        {
            // Many groups (a daily state): a product a group instead of a logarithm a row.
            if let Some(sums) = log_loss_sums_grouped(p, y, groups, sw.len(), eps) {
                for (g, [w, l, yw]) in sums.into_iter().enumerate() {
                    if w > 0.0 {
                        sw[g] += w;
                        sl[g] += l;
                        if ne {
                            sy[g] += yw;
                        }
                    }
                }
                return Ok(());
            }
        }
        let mut add_row = |i: usize, pi: f64, yi: f64, xi: f64| {
            let g = if one_group { 0 } else { groups[i] };
            let (w, l) = row_loss(pi, yi, xi);
            sw[g] += w;
            sl[g] += w * l;
            if ne {
                sy[g] += w * yi;
            }
        };
        if fast {
            match extra {
                None => (0..p.len()).for_each(|i| add_row(i, p[i], y[i], 1.0)),
                Some(x) => (0..p.len()).for_each(|i| add_row(i, p[i], y[i], x[i])),
            }
            return Ok(());
        }
        for_each_row(p.len(), &mask, |i| {
            let (pi, yi) = (check_p(func, "p", p[i])?, check_y(func, y[i])?);
            let xi = match (kind, extra) {
                (LossKind::IpsLogLoss, Some(q)) => check_propensity(func, q[i])?,
                (_, Some(w)) => check_w(func, w[i])?,
                (_, None) => 1.0,
            };
            add_row(i, pi, yi, xi);
            Ok(())
        })
    }

    fn merge(&mut self, states: &[ArrayRef], groups: &[usize]) -> Result<()> {
        let w = states[0].as_primitive::<Float64Type>();
        let l = states[1].as_primitive::<Float64Type>();
        for (r, &g) in groups.iter().enumerate() {
            if w.is_valid(r) {
                self.sw[g] += w.value(r);
                self.sl[g] += l.value(r);
            }
        }
        if let Some(y) = states.get(2) {
            let y = y.as_primitive::<Float64Type>();
            for (r, &g) in groups.iter().enumerate() {
                if y.is_valid(r) {
                    self.sy[g] += y.value(r);
                }
            }
        }
        Ok(())
    }

    fn state(&self, range: Range<usize>) -> Result<Vec<ArrayRef>> {
        let mut out: Vec<ArrayRef> = vec![
            Arc::new(Float64Array::from(self.sw[range.clone()].to_vec())),
            Arc::new(Float64Array::from(self.sl[range.clone()].to_vec())),
        ];
        if self.kind == LossKind::NormalizedEntropy {
            out.push(Arc::new(Float64Array::from(self.sy[range].to_vec())));
        }
        Ok(out)
    }

    fn evaluate(&mut self, range: Range<usize>) -> Result<ArrayRef> {
        let value = |g: usize| -> Option<f64> {
            let (w, l) = (self.sw[g], self.sl[g]);
            if w <= 0.0 {
                return None;
            }
            if self.kind != LossKind::NormalizedEntropy {
                return Some(l / w);
            }
            let r = self.sy[g] / w;
            (r > 0.0 && r < 1.0).then(|| (l / w) / entropy(r))
        };
        Ok(Arc::new(range.map(value).collect::<Float64Array>()))
    }

    fn drain(&mut self, n: usize) {
        self.sw.drain(..n);
        self.sl.drain(..n);
        if self.kind == LossKind::NormalizedEntropy {
            self.sy.drain(..n);
        }
    }

    fn size(&self) -> usize {
        (self.sw.capacity() + self.sl.capacity() + self.sy.capacity()) * size_of::<f64>()
    }

    fn native_labels(&self) -> bool {
        true
    }

    fn retractable(&self) -> bool {
        true
    }
}
