//! `ece_debiased`: the debiased L2 calibration error of Kumar, Liang & Ma (2019), exactly
//! uncertainty-calibration 0.1.4's `calibration.get_calibration_error(p, y)` (p = 2,
//! debias = True) on binary probabilities.
//!
//! Its binning needs the whole data — whether there are few distinct values (then each is a
//! bin), else 15 equal-mass bins whose edges are midpoints between order statistics — so a
//! group keeps its rows (`crate::values`, 8 bytes a row).

use arrow::datatypes::{DataType, FieldRef};
use datafusion_common::Result;
use datafusion_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion_expr::{AggregateUDFImpl, Documentation, Signature};
use datafusion_macros::user_doc;

use crate::common::{args, CallShape};
use crate::kernel::kernel_udaf_common;
use crate::kernel::signature_from_shape;
use crate::values::{self, class_runs, sweep, Rows, RowsKernel, Tally, ValueStore};

const SHAPE: CallShape = CallShape {
    name: "ece_debiased",
    required: &[args::P, args::Y],
    optional: &[],
};

/// Equal-mass bins used when there are many distinct values.
const BINS: usize = 15;

#[user_doc(
    doc_section(label = "Calibration Metrics"),
    description = "Debiased L2 calibration error (Kumar, Liang & Ma 2019, \"Verified uncertainty \
calibration\"): `sqrt(max(0, Σ_b n_b/N · [(mean_p_b − mean_y_b)² − mean_y_b(1 − mean_y_b)/(n_b − 1)]))` over bins \
with at least 2 rows, which removes the upward bias of the plug-in binned estimate. Exactly \
uncertainty-calibration 0.1.4's `get_calibration_error(p, y)`: when the number D of distinct p satisfies \
4·D < N each distinct value is a bin, else 15 equal-mass bins with edges at midpoints between neighbouring \
order statistics; a p equal to an edge goes to the lower bin. Keeps every row in memory (8 bytes each). NULL \
when no row is usable.",
    syntax_example = "ece_debiased(p, y)",
    sql_example = r#"```sql
> SELECT round(ece_debiased(p, y), 6) AS ece FROM (VALUES (0.2, 1), (0.2, 1), (0.2, 0), (0.2, 1), (0.2, 0), (0.7, 1), (0.7, 1), (0.7, 1), (0.7, 1)) AS t(p, y);
+----------+
| ece      |
+----------+
| 0.309121 |
+----------+
```"#
)]
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct EceDebiased {
    signature: Signature,
}

signature_from_shape!(EceDebiased, SHAPE);

impl EceDebiased {
    fn kernel(&self, _args: &AccumulatorArgs) -> Result<RowsKernel> {
        Ok(RowsKernel {
            store: ValueStore::new("ece_debiased", 0, 1, None).sorted_on_emit(),
            finish: ece_debiased_of,
        })
    }
}

impl crate::registry::Shaped for EceDebiased {
    fn call_shape(&self) -> Option<CallShape> {
        Some(SHAPE)
    }
}

impl AggregateUDFImpl for EceDebiased {
    kernel_udaf_common!(returns DataType::Float64);

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(values::state_fields(args.name))
    }

    fn documentation(&self) -> Option<&Documentation> {
        crate::common::documented(self.doc(), &self.shape())
    }
}

/// Calls `f(score, rows, positives)` at each distinct score of a group's rows, ascending:
/// its sorted parts (its own rows and the sorted partial states it merged, read where they
/// lie) swept in step.
fn for_each_distinct(rows: &mut Rows, mut f: impl FnMut(f64, u64, u64)) {
    let none = Tally::default();
    let [negs, poss] = rows.sorted_parts();
    sweep(
        class_runs(&negs, &none),
        class_runs(&poss, &none),
        |v, _, n_eq, _, p_eq| f(v, n_eq + p_eq, p_eq),
    );
}

/// The debiased L2 calibration error of a group's rows; None without rows. Two sweeps over
/// the sorted rows: the distinct scores and the order statistics the equal-mass edges need,
/// then the bins' sums. Its memory is the rows the store holds (reported to the pool) and
/// the bins' edges.
fn ece_debiased_of(rows: &mut Rows) -> Option<f64> {
    let n = rows.len();
    if n == 0 {
        return None;
    }
    // The equal-mass rule's order statistics: ranks start(i) − 1 and start(i), i = 1..k.
    let k = BINS.min(n);
    let (q, r) = (n / k, n % k);
    let start = |i: usize| i * q + i.min(r);
    let ranks: Vec<usize> = (1..k).flat_map(|i| [start(i) - 1, start(i)]).collect();
    let mut order_stats = Vec::with_capacity(ranks.len());
    let (mut distinct, mut below) = (0usize, 0usize);
    for_each_distinct(rows, |v, count, _| {
        distinct += 1;
        below += count as usize;
        while order_stats.len() < ranks.len() && ranks[order_stats.len()] < below {
            order_stats.push(v);
        }
    });
    let mut edges: Vec<f64> = if 4 * distinct < n {
        // Midpoints between consecutive distinct scores.
        let mut e = Vec::with_capacity(distinct);
        let mut previous: Option<f64> = None;
        for_each_distinct(rows, |v, _, _| {
            if let Some(q) = previous {
                e.push((q + v) / 2.0);
            }
            previous = Some(v);
        });
        e
    } else {
        order_stats
            .chunks(2)
            .map(|pair| (pair[0] + pair[1]) / 2.0)
            .collect()
    };
    edges.push(1.0);
    edges.sort_by(f64::total_cmp);
    edges.dedup();
    // Per bin: count, Σp, Σy. A row goes to the number of edges strictly below its p.
    let mut bins = vec![(0.0f64, 0.0f64, 0.0f64); edges.len() + 1];
    let mut b = 0;
    for_each_distinct(rows, |v, count, positives| {
        while b < edges.len() && edges[b] < v {
            b += 1;
        }
        let (count, positives) = (count as f64, positives as f64);
        bins[b].0 += count;
        bins[b].1 += v * count;
        bins[b].2 += positives;
    });
    let total = n as f64;
    let t: f64 = bins
        .iter()
        .filter(|(cnt, _, _)| *cnt >= 2.0)
        .map(|&(cnt, sp, sy)| {
            let (mp, my) = (sp / cnt, sy / cnt);
            let err = (mp - my).abs().powi(2) - my * (1.0 - my) / (cnt - 1.0);
            cnt / total * err
        })
        .sum();
    Some(t.max(0.0).sqrt())
}
