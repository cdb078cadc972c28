//! `hosmer_lemeshow(p, y [, n_groups])`: the Hosmer–Lemeshow goodness-of-fit test as R
//! ResourceSelection's `hoslem.test(y, p, g = n_groups)` computes it.
//!
//! Breaks `unique(quantile(p, seq(0, 1, 1/g)))` (R's type 7: `(1 − h)·x[lo] + h·x[hi]` at
//! `1 + (N − 1)·k/g`), groups `cut(p, breaks, include.lowest = TRUE)` (right-closed, the lowest
//! break included), and `X² = Σ_groups (O₁ − E₁)²/E₁ + (O₀ − E₀)²/E₀` over the non-empty groups
//! (O₁ = Σy, E₁ = Σp, O₀ = Σ(1 − y), E₀ = Σ(1 − p)), which is `Σ (O − E)² / (E (1 − E/n))`;
//! `df = G − 2` with G the non-empty groups, and the chi-square p-value.
//!
//! Where calibsql and R differ: R's `df` is `g − 2` whatever the ties leave, and an empty
//! group (a quantile interval without data, possible with fewer distinct p than groups) makes
//! R's statistic NaN; here empty groups are left out and counted out of `df`. As in R, a group
//! whose p are all 0 (or all 1) has `E₁ = 0` (or `E₀ = 0`): the statistic is NaN when its
//! labels agree (0/0) and +Infinity otherwise.
//!
//! The state is `auc`'s (the rows, or a count per distinct p once p repeats), so the test is
//! exact at any size: at the end the quantiles' order statistics are found by bisection in
//! the sorted parts (`crate::values::rank_of_sorted`), and one sweep over the distinct p in
//! ascending order (`crate::values::for_each_score`) adds up the groups.

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Fields};
use datafusion_common::Result;
use datafusion_expr::function::AccumulatorArgs;
use datafusion_macros::user_doc;

use super::rows::{rows_udaf, RowsStructKernel};
use crate::common::{args, literal_int_in, Arg, CallShape};
use crate::kernel::{kernel_aggregate, signature_from_shape};
use crate::metrics::auc::AucKernel;
use crate::stats::chi_square_sf;
use crate::values::{for_each_score, rank_of_sorted};

/// Default number of groups (R's `hoslem.test` default `g = 10`).
pub const DEFAULT_HL_GROUPS: usize = 10;
/// Most groups accepted.
pub const MAX_HL_GROUPS: usize = 10_000;

#[user_doc(
    doc_section(label = "Calibration Tests"),
    description = "The Hosmer–Lemeshow goodness-of-fit test, as R ResourceSelection `hoslem.test(y, p, g = n_groups)`: \
the rows are cut into groups at the type-7 quantiles of p (`unique(quantile(p, seq(0, 1, 1/g)))`; groups closed on the \
right, the lowest break included), and `statistic = Σ_g (O_g − E_g)² / (E_g (1 − E_g/n_g))` over the non-empty groups \
(O_g positives, E_g = Σ p, n_g rows), `df = G − 2` with G the non-empty groups (R uses g − 2 whatever the ties leave), \
and the chi-square `p_value` (NaN when df < 1), as `{statistic, df, p_value}`. A group whose p are all 0 or all 1 \
makes the statistic NaN (its labels agree with p) or +Infinity, as in R. Exact: keeps what `auc` keeps (8 bytes a \
row, or a count per distinct p when p repeats). NULL when no row is usable.",
    syntax_example = "hosmer_lemeshow(p, y [, n_groups])",
    sql_example = r#"```sql
> SELECT h['df'] AS df, round(h['statistic'], 6) AS statistic FROM (SELECT hosmer_lemeshow(p, y, 4) AS h FROM (VALUES (0.1, 0), (0.2, 0), (0.3, 1), (0.4, 0), (0.5, 1), (0.6, 0), (0.7, 1), (0.8, 1)) AS t(p, y));
+----+-----------+
| df | statistic |
+----+-----------+
| 2  | 1.237612  |
+----+-----------+
```"#
)]
struct HosmerLemeshowDoc;

fn out_fields() -> Fields {
    Fields::from(vec![
        Field::new("statistic", DataType::Float64, true),
        Field::new("df", DataType::Int64, true),
        Field::new("p_value", DataType::Float64, true),
    ])
}

/// The number of groups (`g` of `hoslem.test`).
const N_GROUPS: Arg = Arg::lit_int("n_groups")
    .or("10")
    .doc("Number of quantile groups g, an integer constant in [3, 10000]. Default 10.");

const SHAPE: CallShape = CallShape {
    name: "hosmer_lemeshow",
    required: &[args::P, args::Y],
    optional: &[N_GROUPS],
};

/// `hosmer_lemeshow`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct HosmerLemeshow {
    signature: datafusion_expr::Signature,
}

signature_from_shape!(HosmerLemeshow, SHAPE);
kernel_aggregate!(HosmerLemeshow, false);

impl HosmerLemeshow {
    fn kernel(&self, args: &AccumulatorArgs) -> Result<RowsStructKernel<3>> {
        let func = SHAPE.name;
        let groups = match args.exprs.get(2) {
            Some(e) => literal_int_in(func, "n_groups", e, 3, MAX_HL_GROUPS)?,
            None => DEFAULT_HL_GROUPS,
        };
        Ok(RowsStructKernel {
            auc: AucKernel::named(func, None),
            fields: out_fields(),
            finish: Arc::new(move |rows, tally| {
                let rows_total = rows.len() as f64 + (tally[0].rows() + tally[1].rows()) as f64;
                if rows_total <= 0.0 {
                    return None;
                }
                let breaks = {
                    let [negs, poss] = rows.sorted_parts();
                    let parts: Vec<&[f64]> = negs.into_iter().chain(poss).collect();
                    let counted = tally.each_ref().map(|t| (&t.p[..], &t.n[..]));
                    quantile_breaks(rows_total, groups, |rank| {
                        rank_of_sorted(&parts, &counted, rank)
                    })
                };
                let (stat, df, p) = hoslem(&breaks, |f: &mut dyn FnMut(f64, f64, f64)| {
                    for_each_score(rows, tally, |p, n0, n1| f(p, n0 + n1, n1))
                });
                Some([Some(stat), Some(df as f64), Some(p)])
            }),
        })
    }
}

rows_udaf!(
    HosmerLemeshow,
    SHAPE,
    out_fields(),
    crate::common::documented(HosmerLemeshowDoc.doc(), &SHAPE)
);

/// R's breaks `unique(quantile(p, seq(0, 1, 1/g)))` (type 7) of `total` rows (at least one),
/// from the value at each 0-based rank (`order_statistic`).
fn quantile_breaks(total: f64, g: usize, order_statistic: impl Fn(u64) -> f64) -> Vec<f64> {
    // R's quantile type 7 at probs k/g (seq(0, 1, 1/g): k·(1/g), the last clipped to 1), from
    // the order statistics at 0-based ranks ⌊index⌋ − 1 and ⌈index⌉ − 1.
    let by = 1.0 / g as f64;
    let mut breaks: Vec<f64> = (0..=g)
        .map(|k| {
            let index = 1.0 + (total - 1.0) * (k as f64 * by).min(1.0);
            // The rounding of h is R's.
            let h = index - index.floor();
            let (xl, xh) = (
                order_statistic(index.floor() as u64 - 1),
                order_statistic(index.ceil() as u64 - 1),
            );
            if h > 0.0 && xh != xl {
                (1.0 - h) * xl + h * xh
            } else {
                xl
            }
        })
        .collect();
    breaks.dedup();
    breaks
}

/// The test of the rows whose distinct p `sweep(f)` hands to `f(p, rows, positives)` in
/// ascending order, grouped by `breaks` (see [`quantile_breaks`]): statistic, df, p-value.
fn hoslem(breaks: &[f64], mut sweep: impl FnMut(&mut dyn FnMut(f64, f64, f64))) -> (f64, i64, f64) {
    let inner = &breaks[1..breaks.len().saturating_sub(1).max(1)];
    // Per group: rows, Σy, Σp, Σ(1 − p).
    let mut sums = vec![[0.0; 4]; inner.len() + 1];
    // The group of p: the inner breaks below it (p ascends, so the group only moves up).
    let mut group = 0;
    sweep(&mut |p, n, t| {
        while group < inner.len() && inner[group] < p {
            group += 1;
        }
        let s = &mut sums[group];
        s[0] += n;
        s[1] += t;
        s[2] += n * p;
        s[3] += n * (1.0 - p);
    });
    let mut stat = 0.0;
    let mut used = 0i64;
    for &[n, o1, e1, e0] in &sums {
        if n == 0.0 {
            continue;
        }
        used += 1;
        let o0 = n - o1;
        stat += (o1 - e1) * (o1 - e1) / e1 + (o0 - e0) * (o0 - e0) / e0;
    }
    let df = used - 2;
    (stat, df, chi_square_sf(stat, df as f64))
}
