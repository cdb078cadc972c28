//! `auc`: exact ROC AUC as the (weighted) Mann–Whitney statistic, ties counted one half.
//!
//! AUC needs every value, so the state is the rows (see `crate::values`: 8 bytes an
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
            store: ValueStore::new("auc", 0, 1, weight_col(args.exprs, 2)).sorted_on_emit(),
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
    let weighted = !rows.w[0].is_empty() || !rows.w[1].is_empty();
    if !weighted {
        // Each class is a few ascending parts (the group's own rows and the sorted partial
        // states it merged, read where they lie): every pair of a negative part and a
        // positive part is swept in step, and the pair counts add up.
        let [negs, poss] = rows.sorted_parts();
        let num2: u128 = negs
            .iter()
            .flat_map(|neg| poss.iter().map(move |pos| pair_count2(neg, pos)))
            .sum();
        let n: u128 = negs.iter().map(|x| x.len() as u128).sum();
        let p: u128 = poss.iter().map(|x| x.len() as u128).sum();
        return (n > 0 && p > 0).then(|| num2 as f64 / (2 * n * p) as f64);
    }
    rows.sort();
    let [neg, pos] = &rows.p;
    // Sweep both sorted classes in step, one distinct score at a time.
    let (mut i, mut j) = (0, 0);
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

/// Twice the Mann–Whitney count of ascending negatives `neg` against ascending positives
/// `pos`: Σ over positives of 2·(negatives below) + (negatives equal), in exact integers.
fn pair_count2(neg: &[f64], pos: &[f64]) -> u128 {
    let (mut below, mut j, mut num2) = (0, 0, 0u128);
    while j < pos.len() {
        let v = pos[j];
        while below < neg.len() && neg[below] < v {
            below += 1;
        }
        let mut equal = below;
        while equal < neg.len() && neg[equal] == v {
            equal += 1;
        }
        let j0 = j;
        while j < pos.len() && pos[j] == v {
            j += 1;
        }
        num2 += (j - j0) as u128 * (2 * below + (equal - below)) as u128;
    }
    num2
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{ArrayRef, Float64Array};

    use super::*;
    use crate::kernel::Kernel;

    /// `n` rows with many ties (scores rounded to 1/500) and a label that depends on them.
    fn data(n: usize, seed: u64) -> (Vec<f64>, Vec<f64>) {
        let mut s = seed;
        let mut next = move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 11) as f64 / (1u64 << 53) as f64
        };
        let p: Vec<f64> = (0..n).map(|_| (next() * 500.0).floor() / 500.0).collect();
        let y = p.iter().map(|&p| f64::from(next() < p)).collect();
        (p, y)
    }

    fn kernel() -> RowsKernel {
        RowsKernel {
            store: ValueStore::new("auc", 0, 1, None).sorted_on_emit(),
            finish: auc_of,
        }
    }

    fn fed(k: &mut RowsKernel, p: &[f64], y: &[f64]) {
        k.resize(1);
        let cols: Vec<ArrayRef> = vec![
            Arc::new(Float64Array::from(p.to_vec())),
            Arc::new(Float64Array::from(y.to_vec())),
        ];
        k.update(&cols, &vec![0; p.len()], None).unwrap();
    }

    fn value(k: &mut RowsKernel) -> f64 {
        let a = k.evaluate(0..1).unwrap();
        a.as_any().downcast_ref::<Float64Array>().unwrap().value(0)
    }

    /// Merged partial states, kept as runs (sorted, unsorted, more than the parts read in
    /// place, mixed with copied small ones), give exactly the AUC of all rows in one group.
    /// An invariance test: the value itself is checked against scikit-learn in tests/slt.
    #[test]
    fn runs_give_the_auc_of_all_rows() {
        let (p, y) = data(60_000, 0x9E37_79B9_7F4A_7C15);
        let mut all = kernel();
        fed(&mut all, &p, &y);
        let want = value(&mut all);
        for splits in [
            vec![30_000],
            vec![1_000, 20_000, 45_000],
            (1..6).map(|i| i * 10_000).collect(),
        ] {
            for sort_on_emit in [true, false] {
                let mut bounds = vec![0];
                bounds.extend(&splits);
                bounds.push(p.len());
                let mut fin = kernel();
                fin.resize(1);
                for w in bounds.windows(2) {
                    let mut part = if sort_on_emit {
                        kernel()
                    } else {
                        RowsKernel {
                            store: ValueStore::new("auc", 0, 1, None),
                            finish: auc_of,
                        }
                    };
                    fed(&mut part, &p[w[0]..w[1]], &y[w[0]..w[1]]);
                    let state = part.take_state(0..1).unwrap();
                    fin.merge(&state, &[0]).unwrap();
                }
                let runs: usize = fin.store.groups[0].runs.iter().map(Vec::len).sum();
                assert!(runs > 0, "{splits:?}: no state was kept as a run");
                assert_eq!(value(&mut fin), want, "{splits:?} sorted {sort_on_emit}");
            }
        }
    }
}
