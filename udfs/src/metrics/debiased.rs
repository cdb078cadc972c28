//! `ece_debiased`: the debiased L2 calibration error of Kumar, Liang & Ma (2019), exactly
//! uncertainty-calibration 0.1.4's `calibration.get_calibration_error(p, y)` (p = 2,
//! debias = True) on binary probabilities.
//!
//! Its binning needs the whole data — whether there are few distinct values (then each is a
//! bin), else 15 equal-mass bins whose edges are midpoints between order statistics — so a
//! group keeps its rows (`crate::values`, 8 bytes a row). Many rows with many distinct
//! scores are binned without sorting them: a bitmap proves there are at least N/4 distinct
//! scores (`values::at_least_distinct`), and the equal-mass bins' edges and sums come from one pass
//! over the rows (`quantile_pass`); otherwise the rows are sorted and walked.

use arrow::datatypes::{DataType, FieldRef};
use datafusion_common::Result;
use datafusion_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion_expr::{AggregateUDFImpl, Documentation, Signature};
use datafusion_macros::user_doc;

use super::binning::kth_of_two;
use super::quantile_pass::{self, one_pass, EdgeRule};
use crate::common::{args, CallShape};
use crate::kernel::kernel_udaf_common;
use crate::kernel::signature_from_shape;
use crate::values::{self, at_least_distinct, Rows, RowsKernel, ValueStore};

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
order statistics; a p equal to an edge goes to the lower bin. Keeps every row (8 bytes each; spilled to disk under a memory limit). NULL \
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
            store: ValueStore::new("ece_debiased", 0, 1, None),
            finish: ece_debiased_of,
        })
    }
}

crate::kernel::kernel_source!(EceDebiased);

impl crate::common::Shaped for EceDebiased {
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

/// The scores of both classes in ascending order, merged as they are read (no copy).
fn merged<'a>(neg: &'a [f64], pos: &'a [f64]) -> impl Iterator<Item = f64> + 'a {
    let (mut i, mut j) = (0, 0);
    std::iter::from_fn(move || {
        if j >= pos.len() || (i < neg.len() && neg[i] <= pos[j]) {
            i += 1;
            neg.get(i - 1).copied()
        } else {
            j += 1;
            Some(pos[j - 1])
        }
    })
}

/// The debiased error over bins of (rows, Σp, Σy): `sqrt(max(0, Σ n_b/N · [(p̄_b − ȳ_b)² −
/// ȳ_b(1 − ȳ_b)/(n_b − 1)]))` over the bins of at least 2 rows.
fn debiased_error(bins: impl Iterator<Item = (f64, f64, f64)>, n: usize) -> f64 {
    let total = n as f64;
    let t: f64 = bins
        .filter(|(cnt, _, _)| *cnt >= 2.0)
        .map(|(cnt, sp, sy)| {
            let (mp, my) = (sp / cnt, sy / cnt);
            let err = (mp - my).abs().powi(2) - my * (1.0 - my) / (cnt - 1.0);
            cnt / total * err
        })
        .sum();
    t.max(0.0).sqrt()
}

/// The debiased L2 calibration error of a group's rows; None without rows. Many rows with
/// at least N/4 distinct scores take the one pass (no sort); the rest are sorted where they
/// lie. Its memory is the rows the store holds (reported to the pool), and the bitmap (n/8
/// bytes) and the pass's bracket rows or the bins' edges while it runs.
fn ece_debiased_of(rows: &mut Rows) -> Option<f64> {
    let n = rows.len();
    if n == 0 {
        return None;
    }
    if n >= quantile_pass::MIN_ROWS {
        let mut parts = rows.parts(0);
        parts.extend(rows.parts(1));
        if at_least_distinct(&parts, n, n.div_ceil(4)) {
            if let Some(pass) = one_pass(rows, BINS, EdgeRule::Midpoints) {
                let [neg, pos] = &pass.sums;
                let bins = neg
                    .iter()
                    .zip(pos)
                    .map(|(a, b)| (a[0] + b[0], a[1] + b[1], b[0]));
                return Some(debiased_error(bins, n));
            }
        }
    }
    let [neg, pos] = rows.sorted();
    let mut distinct = 0usize;
    let mut last = f64::NAN;
    for p in merged(neg, pos) {
        if p != last {
            distinct += 1;
            last = p;
        }
    }
    let edges: Vec<f64> = if 4 * distinct < n {
        // Midpoints between consecutive distinct scores.
        let mut e = Vec::with_capacity(distinct);
        let mut previous: Option<f64> = None;
        for p in merged(neg, pos) {
            match previous {
                Some(q) if q == p => {}
                Some(q) => {
                    e.push((q + p) / 2.0);
                    previous = Some(p);
                }
                None => previous = Some(p),
            }
        }
        e.push(1.0);
        e
    } else {
        let k = BINS.min(n);
        let start = |i: usize| quantile_pass::equal_mass_start(n, k, i);
        let x = |i: usize| kth_of_two(neg, pos, i);
        let mut e: Vec<f64> = (1..k)
            .map(|i| (x(start(i) - 1) + x(start(i))) / 2.0)
            .collect();
        e.push(1.0);
        e.sort_by(f64::total_cmp);
        e.dedup();
        e
    };
    // Per bin: count, Σp, Σy. A row goes to the number of edges strictly below its p.
    let mut bins = vec![(0.0f64, 0.0f64, 0.0f64); edges.len() + 1];
    let mut b = 0;
    for p in merged(neg, pos) {
        while b < edges.len() && edges[b] < p {
            b += 1;
        }
        bins[b].0 += 1.0;
        bins[b].1 += p;
    }
    // Labels per bin: walk the positives alone.
    let mut b = 0;
    for &p in pos {
        while b < edges.len() && edges[b] < p {
            b += 1;
        }
        bins[b].2 += 1.0;
    }
    Some(debiased_error(bins.into_iter(), n))
}
