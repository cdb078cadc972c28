//! The top-label calibration metrics of a multiclass model: `ece_top_label`, `mce_top_label`
//! and `reliability_top_label` (Guo et al. 2017; Kumar et al. 2019, "top-label").
//!
//! Each row's confidence is its largest class probability and it is correct when that class
//! (the first, on a tie) is the label; the binary metrics of the same name then take the
//! confidence as p and the correctness as y. So each is `ece`'s kernel (`binned`'s
//! `BinnedKernel`) behind a conversion of its first two arguments: the same bins, the same
//! strategies, the same mergeable state.

use std::ops::Range;
use std::sync::Arc;

use arrow::array::{ArrayRef, Float64Array};
use arrow::datatypes::{DataType, FieldRef};
use datafusion_common::Result;
use datafusion_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion_expr::{AggregateUDFImpl, Documentation, Signature};
use datafusion_macros::user_doc;

use super::binned::{reliability_type, state_fields, BinnedKernel, BinnedKind};
use crate::common::{args, Arg, CallShape};
use crate::kernel::{delegate_to_inner, kernel_aggregate, kernel_udaf_common, Filter, Kernel};
use crate::multiclass;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TopLabelKind {
    Ece,
    Mce,
    Reliability,
}

const N_BINS: Arg =
    args::N_BINS.doc("Number of bins, an integer constant in [1, 10000]. Default 15.");
const STRATEGY: Arg = args::STRATEGY.doc(
    "The binning rule, a constant: any of `ece`'s (`'uniform'`, `'quantile'`, `'sklearn'`, \
`'netcal'`, `'torchmetrics'`, `'relplot'`, `'kumar'`; docs/SEMANTICS.md#binning-strategies), applied to the \
confidence. Default `'uniform'`.",
);
const W: Arg = args::W;
/// The optional arguments of `ece_top_label` and `mce_top_label` (and `ece_classwise`).
pub(super) const OPTIONAL: &[Arg] = &[N_BINS, STRATEGY, W];
const OPTIONAL_RELIABILITY: &[Arg] = &[
    N_BINS,
    STRATEGY,
    W,
    Arg::lit_num("level")
        .or("0.95")
        .doc("Confidence level of the Wilson intervals, a constant in (0, 1). Default 0.95."),
];

impl TopLabelKind {
    fn shape(self) -> CallShape {
        let (name, optional) = match self {
            TopLabelKind::Ece => ("ece_top_label", OPTIONAL),
            TopLabelKind::Mce => ("mce_top_label", OPTIONAL),
            TopLabelKind::Reliability => ("reliability_top_label", OPTIONAL_RELIABILITY),
        };
        CallShape {
            name,
            required: &[args::PROBS, args::LABEL],
            optional,
        }
    }

    /// The binary metric computed over (confidence, correct).
    fn binned(self) -> BinnedKind {
        match self {
            TopLabelKind::Ece => BinnedKind::Ece,
            TopLabelKind::Mce => BinnedKind::Mce,
            TopLabelKind::Reliability => BinnedKind::Reliability,
        }
    }
}

#[user_doc(
    doc_section(label = "Multiclass Metrics"),
    description = "Top-label expected calibration error of a multiclass model: `ece` of each row's confidence \
(its largest probability) against whether that class (the first, on a tie) is the label. With \
`strategy => 'torchmetrics'` it is torchmetrics 1.9 `multiclass_calibration_error(norm='l1')`, with `'kumar'` \
uncertainty-calibration 0.1 `get_ece`. Rows with a NULL `probs` (or a NULL in it), `label` or `w` are skipped.",
    syntax_example = "ece_top_label(probs, label [, n_bins [, strategy [, w]]])",
    sql_example = r#"```sql
> SELECT ece_top_label(probs, label, 2) AS ece FROM (VALUES ([0.75, 0.25, 0.0], 0), ([0.25, 0.5, 0.25], 2)) AS t(probs, label);
+-------+
| ece   |
+-------+
| 0.125 |
+-------+
```"#
)]
struct EceTopLabelDoc;

#[user_doc(
    doc_section(label = "Multiclass Metrics"),
    description = "Top-label maximum calibration error: `mce` of each row's confidence against whether its \
predicted class is the label (torchmetrics `multiclass_calibration_error(norm='max')` with `'torchmetrics'`).",
    syntax_example = "mce_top_label(probs, label [, n_bins [, strategy [, w]]])",
    sql_example = r#"```sql
> SELECT mce_top_label(probs, label, 2) AS mce FROM (VALUES ([0.75, 0.25, 0.0], 0), ([0.25, 0.5, 0.25], 2)) AS t(probs, label);
+-------+
| mce   |
+-------+
| 0.125 |
+-------+
```"#
)]
struct MceTopLabelDoc;

#[user_doc(
    doc_section(label = "Multiclass Metrics"),
    description = "The top-label reliability diagram as data: `reliability` of each row's confidence against \
whether its predicted class is the label, one struct per bin (`frac_pos` is the bin's accuracy, `mean_p` its \
mean confidence).",
    syntax_example = "reliability_top_label(probs, label [, n_bins [, strategy [, w [, level]]]])",
    sql_example = r#"```sql
> SELECT r['bin'] AS bin, r['count'] AS n, r['mean_p'] AS confidence, r['frac_pos'] AS accuracy
  FROM (SELECT unnest(reliability_top_label(probs, label, 2)) AS r
        FROM (VALUES ([0.75, 0.25, 0.0], 0), ([0.25, 0.5, 0.25], 2)) AS t(probs, label));
+-----+---+------------+----------+
| bin | n | confidence | accuracy |
+-----+---+------------+----------+
| 0   | 0 |            |          |
| 1   | 2 | 0.625      | 0.5      |
+-----+---+------------+----------+
```"#
)]
struct ReliabilityTopLabelDoc;

/// `ece_top_label`, `mce_top_label` or `reliability_top_label`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct TopLabel {
    kind: TopLabelKind,
    signature: Signature,
}

crate::kernel::signature_from_shape!(TopLabel, kind: TopLabelKind);

impl TopLabel {
    fn kernel(&self, args: &AccumulatorArgs) -> Result<TopLabelKernel> {
        let func = self.shape().name;
        Ok(TopLabelKernel {
            func,
            inner: BinnedKernel::new(func, self.kind.binned(), args)?,
        })
    }
}

kernel_aggregate!(TopLabel, true);

impl AggregateUDFImpl for TopLabel {
    kernel_udaf_common!();

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.shape().coerce(arg_types)?;
        Ok(match self.kind {
            TopLabelKind::Reliability => reliability_type(),
            _ => DataType::Float64,
        })
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(state_fields(args.name))
    }

    fn documentation(&self) -> Option<&Documentation> {
        let doc = match self.kind {
            TopLabelKind::Ece => EceTopLabelDoc.doc(),
            TopLabelKind::Mce => MceTopLabelDoc.doc(),
            TopLabelKind::Reliability => ReliabilityTopLabelDoc.doc(),
        };
        crate::common::documented(doc, &self.shape())
    }
}

/// [`BinnedKernel`] over each row's (confidence, correct).
#[derive(Debug)]
struct TopLabelKernel {
    func: &'static str,
    inner: BinnedKernel,
}

impl TopLabelKernel {
    /// `values` with its first two columns, probs and label, replaced by the confidence and
    /// the correctness (1 or 0) of each row; NULL where a row is skipped (a NULL list, a list
    /// holding a NULL, a NULL label, or outside `filter`).
    fn as_binary(&self, values: &[ArrayRef], filter: Filter) -> Result<Vec<ArrayRef>> {
        let n = values[0].len();
        let mut confidence = Vec::with_capacity(n);
        let mut correct = Vec::with_capacity(n);
        multiclass::for_each_row(self.func, &values[0], &values[1], filter, |_, row| {
            let Some((probs, label)) = row else {
                confidence.push(None);
                correct.push(None);
                return Ok(());
            };
            // The first largest probability: its class is the prediction.
            let mut best = 0;
            for (c, &v) in probs.iter().enumerate() {
                if v > probs[best] {
                    best = c;
                }
            }
            confidence.push(Some(probs[best]));
            correct.push(Some(if best == label { 1.0 } else { 0.0 }));
            Ok(())
        })?;
        let mut out: Vec<ArrayRef> = vec![
            Arc::new(Float64Array::from(confidence)),
            Arc::new(Float64Array::from(correct)),
        ];
        out.extend(values[2..].iter().cloned());
        Ok(out)
    }
}

impl Kernel for TopLabelKernel {
    fn empty(&self) -> Result<Self> {
        Ok(Self {
            func: self.func,
            inner: self.inner.empty()?,
        })
    }

    fn update(&mut self, values: &[ArrayRef], groups: &[usize], filter: Filter) -> Result<()> {
        let binary = self.as_binary(values, filter)?;
        self.inner.update(&binary, groups, None)
    }

    fn evaluate(&mut self, range: Range<usize>) -> Result<ArrayRef> {
        self.inner.evaluate(range)
    }

    fn take_state(&mut self, range: Range<usize>) -> Result<Vec<ArrayRef>> {
        self.inner.take_state(range)
    }

    fn retractable(&self) -> bool {
        self.inner.retractable()
    }

    delegate_to_inner!(inner: resize, num_groups, merge, check_stored, state, drain, size);
}
