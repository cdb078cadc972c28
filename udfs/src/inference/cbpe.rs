//! `cbpe`: the performance that calibrated probabilities imply before the labels arrive,
//! NannyML's confidence-based performance estimation (CBPE) for a binary classifier.
//!
//! When p is calibrated, a row with probability p is a positive with probability p, so every
//! count of a confusion matrix has an expectation: above the threshold `TP = Σ w·p` and
//! `FP = Σ w·(1 − p)`, below it `FN = Σ w·p` and `TN = Σ w·(1 − p)`; accuracy, precision,
//! recall and F1 follow from them. The expected ROC curve puts each row's p on the positives'
//! side and 1 − p on the negatives' at its own score, so the expected AUC is the weighted
//! Mann–Whitney statistic of those two halves (ties, a row with itself included, one half):
//! NannyML's trapezoids under the curve of the cumulative sums of p and 1 − p in descending
//! order.
//!
//! The AUC needs every row in order, so `cbpe` keeps `auc`'s state (`crate::metrics::auc`:
//! the rows, 8 bytes each, or a count per distinct score once they repeat, as calibrated
//! probabilities from a step calibrator do) with every row on the negatives' side, and
//! sweeps the distinct scores once at the end. Its partial states merge across partitions
//! and executors as `auc`'s do; its `_state` / `_merge` twins store that state (the rows, or
//! the counts per distinct score), so a day's state is as large as the day's distinct
//! probabilities allow.

use std::ops::Range;
use std::sync::{Arc, OnceLock};

use arrow::array::{Array, ArrayRef, Int8Array};
use datafusion_common::Result;
use datafusion_doc::DocSection;
use datafusion_expr::function::AccumulatorArgs;
use datafusion_expr::{Documentation, Signature};

use super::f64_struct_fields;
use super::rows::{rows_udaf, RowsStructKernel};
use crate::common::{args, literal_checked, weight_col, Arg, CallShape};
use crate::kernel::{signature_from_shape, Filter, Kernel};
use crate::metrics::auc::AucKernel;
use crate::values::spill::ReadBehind;
use crate::values::{for_each_score, Rows, Tally};

const SHAPE: CallShape = CallShape {
    name: "cbpe",
    required: &[args::P],
    optional: &[
        Arg::lit_num("threshold").or("0.5").doc(
            "A row is predicted positive when `p >= threshold`, a constant in [0, 1]. Default 0.5.",
        ),
        args::W,
    ],
};

/// The fields of `cbpe`'s struct, in order.
pub const FIELDS: [&str; 5] = ["roc_auc", "accuracy", "precision", "recall", "f1"];

/// `cbpe(p [, threshold [, w]])`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Cbpe {
    signature: Signature,
}

signature_from_shape!(Cbpe, SHAPE);

impl Cbpe {
    fn kernel(&self, args: &AccumulatorArgs) -> Result<CbpeKernel> {
        let threshold = match args.exprs.get(1) {
            Some(e) => literal_checked(SHAPE.name, "threshold", e, "in [0, 1]", |x| {
                (0.0..=1.0).contains(&x)
            })?,
            None => 0.5,
        };
        let w_col = weight_col(args.exprs, 2);
        Ok(CbpeKernel {
            inner: RowsStructKernel {
                // The kernel's columns: p, the all-negative label, the weight.
                auc: AucKernel::named(SHAPE.name, w_col.map(|_| 2)),
                fields: f64_struct_fields(&FIELDS),
                finish: Arc::new(move |rows, tally| expected(rows, tally, threshold)),
            },
            w_col,
            zeros: Arc::new(Int8Array::from(Vec::<i8>::new())),
        })
    }
}

crate::kernel::kernel_aggregate!(Cbpe, false);

rows_udaf!(
    Cbpe,
    SHAPE,
    f64_struct_fields(&FIELDS),
    crate::common::documented(Some(documentation()), &SHAPE)
);

/// The expected ROC AUC, accuracy, precision, recall and F1 of a group's rows (every row on
/// the negatives' side: its score is its p); None when the group has no weight. A field is
/// None where its denominator is 0 (the AUC with no expected positive or no expected
/// negative, precision with no row predicted positive, recall with no expected positive).
fn expected(rows: &mut Rows, tally: &[Tally; 2], threshold: f64) -> Option<[Option<f64>; 5]> {
    let mut sums = Sums::default();
    // One sorted part and no tally (a group read in one partition, its scores distinct
    // enough never to be counted): a loop of its own over the slice, the form `auc` reads
    // its rows in; otherwise the generic sweep over the parts and tallies.
    if !rows.weighted() && tally.iter().all(|t| t.len() == 0) {
        let [negs, poss] = rows.sorted_parts();
        if let ([part], []) = (&negs[..], &poss[..]) {
            let part: &[f64] = part;
            let mut behind = ReadBehind::new(part);
            let mut i = 0;
            while i < part.len() {
                let v = part[i];
                let start = i;
                while i < part.len() && part[i] == v {
                    i += 1;
                }
                sums.add(v, (i - start) as f64, threshold);
                behind.advance(part, i);
            }
            return sums.finish();
        }
    }
    for_each_score(rows, tally, |p, w, _| sums.add(p, w, threshold));
    sums.finish()
}

/// The sums `cbpe` reads off its rows in ascending p: the expected Mann–Whitney count, the
/// expected confusion cells and the totals.
#[derive(Default, Clone, Copy)]
struct Sums {
    neg_below: f64,
    pairs: f64,
    pos_total: f64,
    total: f64,
    tp: f64,
    fp: f64,
    tn: f64,
}

impl Sums {
    /// Adds weight `w` of rows with probability `p` (the largest so far).
    #[inline(always)]
    fn add(&mut self, p: f64, w: f64, threshold: f64) {
        let (pos, neg) = (w * p, w * (1.0 - p));
        self.pairs += pos * (self.neg_below + 0.5 * neg);
        self.neg_below += neg;
        self.pos_total += pos;
        self.total += w;
        if p >= threshold {
            self.tp += pos;
            self.fp += neg;
        } else {
            self.tn += neg;
        }
    }

    fn finish(&self) -> Option<[Option<f64>; 5]> {
        if self.total <= 0.0 {
            return None;
        }
        let Sums {
            neg_below,
            pairs,
            pos_total,
            total,
            tp,
            fp,
            tn,
        } = *self;
        let fn_ = pos_total - tp;
        let ratio = |num: f64, den: f64| (den > 0.0).then(|| num / den);
        Some([
            ratio(pairs, pos_total * neg_below),
            ratio(tp + tn, total),
            ratio(tp, tp + fp),
            ratio(tp, pos_total),
            ratio(2.0 * tp, 2.0 * tp + fp + fn_),
        ])
    }
}

/// `auc`'s kernel fed each row as a negative with score p: `cbpe`'s columns (p, threshold,
/// w) become (p, 0, w).
#[derive(Debug)]
struct CbpeKernel {
    inner: RowsStructKernel<5>,
    w_col: Option<usize>,
    /// Zero labels, as many as the largest batch so far (sliced to each batch).
    zeros: ArrayRef,
}

impl Kernel for CbpeKernel {
    crate::kernel::delegate_to_inner!(inner: resize, num_groups, merge, state, take_state, drain, size);

    fn empty(&self) -> Result<Self> {
        Ok(Self {
            inner: self.inner.empty()?,
            w_col: self.w_col,
            zeros: Arc::clone(&self.zeros),
        })
    }

    fn update(&mut self, values: &[ArrayRef], groups: &[usize], filter: Filter) -> Result<()> {
        let n = values[0].len();
        if self.zeros.len() < n {
            self.zeros = Arc::new(Int8Array::from(vec![0i8; n]));
        }
        let mut columns = vec![Arc::clone(&values[0]), self.zeros.slice(0, n)];
        columns.extend(self.w_col.map(|i| Arc::clone(&values[i])));
        self.inner.update(&columns, groups, filter)
    }

    fn evaluate(&mut self, range: Range<usize>) -> Result<ArrayRef> {
        self.inner.evaluate(range)
    }

    fn native_labels(&self) -> bool {
        true
    }
}

/// `cbpe`'s documentation (its argument table comes from the shape: `common::documented`).
fn documentation() -> &'static Documentation {
    static DOC: OnceLock<Documentation> = OnceLock::new();
    DOC.get_or_init(|| {
        Documentation::builder(
            DocSection {
                include: true,
                label: "Performance Estimates",
                description: Some(
                    "What a model's calibrated probabilities say its performance is, before the labels arrive.",
                ),
            },
            "Confidence-based performance estimation (NannyML's CBPE): the ROC AUC, accuracy, precision, recall \
and F1 that calibrated probabilities imply, with no label. Each row counts as a positive with weight `w·p` and as a \
negative with weight `w·(1 − p)`: the expected confusion counts above the threshold are `TP = Σ w·p`, \
`FP = Σ w·(1 − p)`, below it `FN = Σ w·p`, `TN = Σ w·(1 − p)`; `roc_auc` is the area under the expected ROC curve \
(the weighted Mann–Whitney statistic of the two halves, ties one half). The estimate is only as good as the \
calibration: check it on the rows whose labels have arrived (`ece`), and calibrate first (`calibrate`). Returns \
`{roc_auc, accuracy, precision, recall, f1}`, a field NULL where its denominator is 0; NULL when no row is usable. \
Keeps what `auc` keeps (8 bytes a row, or a count per distinct score when scores repeat); its stored state \
(`cbpe_state`, merged by `cbpe_merge`) is that too, so daily states merge into a month's estimate exactly. In a \
window, use whole partitions (`OVER (PARTITION BY day)`), not sliding frames.",
            SHAPE.usage(),
        )
        .with_sql_example(
            r#"```sql
> SELECT round(e['roc_auc'], 6) AS auc, round(e['accuracy'], 6) AS accuracy, round(e['precision'], 6) AS precision,
         round(e['recall'], 6) AS recall, round(e['f1'], 6) AS f1
  FROM (SELECT cbpe(p) AS e FROM (VALUES (0.2), (0.6), (0.9)) AS t(p));
+----------+----------+-----------+----------+----------+
| auc      | accuracy | precision | recall   | f1       |
+----------+----------+-----------+----------+----------+
| 0.816742 | 0.766667 | 0.75      | 0.882353 | 0.810811 |
+----------+----------+-----------+----------+----------+
```"#,
        )
        .build()
    })
}
