//! `auc`: exact ROC AUC as the (weighted) Mann–Whitney statistic, ties counted one half.
//!
//! AUC needs every value, so the state is the rows (see [`crate::values`]: 8 bytes an
//! unweighted row); `size()` reports them to the memory pool.

use arrow::datatypes::{DataType, FieldRef};
use datafusion_common::Result;
use datafusion_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion_expr::{AggregateUDFImpl, Documentation, Signature};
use datafusion_macros::user_doc;

use crate::common::{weight_col, Arg, CallShape};
use crate::kernel::kernel_udaf_common;
use crate::values::{self, Rows, RowsKernel, ValueStore};

const SHAPE: CallShape = CallShape {
    name: "auc",
    required: &[Arg::Num("p"), Arg::Label("y")],
    optional: &[Arg::Num("w")],
};

#[user_doc(
    doc_section(label = "Calibration Metrics"),
    description = "Exact area under the ROC curve: the probability that a random positive scores above a random \
negative (Mann–Whitney), ties counted one half, weighted by `w` when given (as scikit-learn's `roc_auc_score` \
with `sample_weight`). NULL when only one class is present. Keeps every row in memory.",
    syntax_example = "auc(p, y [, w])",
    sql_example = r#"```sql
> SELECT auc(p, y) AS auc FROM (VALUES (0.1, 0), (0.4, 1), (0.4, 0), (0.8, 1)) AS t(p, y);
+-------+
| auc   |
+-------+
| 0.875 |
+-------+
```"#,
    argument(name = "p", description = "Predicted probability in [0, 1]."),
    argument(name = "y", description = "Observed label: Boolean or a number 0/1."),
    argument(
        name = "w",
        description = "Optional row weight, finite and >= 0. Default 1."
    )
)]
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Auc {
    signature: Signature,
}

impl Default for Auc {
    fn default() -> Self {
        Self::new()
    }
}

impl Auc {
    pub fn new() -> Self {
        Self {
            signature: SHAPE.signature(),
        }
    }

    fn shape(&self) -> CallShape {
        SHAPE
    }

    fn kernel(&self, args: &AccumulatorArgs) -> Result<RowsKernel> {
        Ok(RowsKernel {
            store: ValueStore::new("auc", 0, 1, weight_col(args.exprs, 2)),
            finish: auc_of,
        })
    }
}

impl AggregateUDFImpl for Auc {
    kernel_udaf_common!();

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        SHAPE.coerce(arg_types)?;
        Ok(DataType::Float64)
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(values::state_fields(args.name))
    }

    fn documentation(&self) -> Option<&Documentation> {
        self.doc()
    }
}

/// Mann–Whitney AUC of a group's rows, ties counted one half; None when a class has no
/// weight. Unweighted, the count is exact (integers); weighted, sums of weights.
pub(crate) fn auc_of(rows: &mut Rows) -> Option<f64> {
    rows.sort();
    let [neg, pos] = &rows.p;
    let weighted = !rows.w[0].is_empty() || !rows.w[1].is_empty();
    // Sweep both sorted classes in step, one distinct score at a time.
    let (mut i, mut j) = (0, 0);
    if !weighted {
        let (mut neg_below, mut num2) = (0u128, 0u128);
        while i < neg.len() || j < pos.len() {
            let v = match (neg.get(i), pos.get(j)) {
                (Some(a), Some(b)) => a.min(*b),
                (Some(a), None) => *a,
                (None, Some(b)) => *b,
                (None, None) => unreachable!(),
            };
            let (i0, j0) = (i, j);
            while i < neg.len() && neg[i] == v {
                i += 1;
            }
            while j < pos.len() && pos[j] == v {
                j += 1;
            }
            let (n_eq, p_eq) = ((i - i0) as u128, (j - j0) as u128);
            num2 += p_eq * (2 * neg_below + n_eq);
            neg_below += n_eq;
        }
        let (n, p) = (neg.len() as u128, pos.len() as u128);
        return (n > 0 && p > 0).then(|| num2 as f64 / (2 * n * p) as f64);
    }
    let [wn, wp] = &rows.w;
    let (mut neg_below, mut num, mut pos_total, mut neg_total) = (0.0, 0.0, 0.0, 0.0);
    while i < neg.len() || j < pos.len() {
        let v = match (neg.get(i), pos.get(j)) {
            (Some(a), Some(b)) => a.min(*b),
            (Some(a), None) => *a,
            (None, Some(b)) => *b,
            (None, None) => unreachable!(),
        };
        let (mut n_eq, mut p_eq) = (0.0, 0.0);
        while i < neg.len() && neg[i] == v {
            n_eq += wn[i];
            i += 1;
        }
        while j < pos.len() && pos[j] == v {
            p_eq += wp[j];
            j += 1;
        }
        num += p_eq * (neg_below + 0.5 * n_eq);
        neg_below += n_eq;
        pos_total += p_eq;
        neg_total += n_eq;
    }
    (pos_total > 0.0 && neg_total > 0.0).then(|| num / (pos_total * neg_total))
}
