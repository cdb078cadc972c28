//! `auc_interval` and `auc_test`: DeLong's variance of the AUC (DeLong, DeLong &
//! Clarke-Pearson 1988), computed from the placements as Sun & Xu (2014) do, and R pROC's
//! interval (`ci.auc(method = "delong")`) and paired test (`roc.test(method = "delong",
//! paired = TRUE)`), with pROC's `direction = "<"` (a higher score means a positive).
//!
//! A positive's placement is `V10 = (negatives below + ½ negatives equal) / n`, a negative's
//! `V01 = (positives above + ½ positives equal) / m`; the AUC θ is their mean and
//! `Var(θ) = S10/m + S01/n`, S10 and S01 the sample variances (denominator m − 1, n − 1) of
//! the placements. Ties count one half, as in `auc`.
//!
//! `auc_interval` keeps what `auc` keeps — the same kernel (`crate::metrics::auc`), rows
//! counted per distinct score when they repeat — and sweeps the two classes' sorted scores
//! once at the end, reading the rows where they lie: θ exactly as `auc` counts it and the
//! placements' variances, from integer sums.
//!
//! `auc_test` needs each row's two scores together (the covariance of the two models'
//! placements is over rows). It keeps them in a `ValueStore` with the second score in a
//! weight's place: 16 bytes a row, sorted by the first score before a partial state is
//! handed on, spilled to disk under a memory limit, as weighted rows are. At the end it
//! sweeps both classes by the first score, which gives every row its placement count under
//! it, and puts each row's (second score, count) into a store of its own (16 bytes a row,
//! spilled as well: the group's rows stay as they are, so it can be evaluated again); that
//! store's classes, sorted by the second score, are swept in step for each row's second
//! count beside its first. The counts, their squares and products are added up in exact
//! integers.

use std::ops::Range;
use std::sync::{Arc, OnceLock};

use arrow::array::ArrayRef;
use arrow::datatypes::{DataType, FieldRef};
use datafusion_common::Result;
use datafusion_doc::DocSection;
use datafusion_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion_expr::{AggregateUDFImpl, Documentation, Signature};

use super::rows::{rows_udaf, RowsStructKernel};
use super::{f64_struct_column, f64_struct_fields};
use crate::common::{args, literal_checked, Arg, CallShape};
use crate::kernel::{kernel_udaf_common, signature_from_shape, Kernel};
use crate::metrics::auc::AucKernel;
use crate::stats::{normal_quantile, two_sided_p};
use crate::values::{class_runs, lower, sweep, Rows, Tally, ValueStore, WeightedRuns};

const INTERVAL: CallShape = CallShape {
    name: "auc_interval",
    required: &[args::P, args::Y],
    optional: &[Arg::lit_num("level").or("0.95")],
};

const TEST: CallShape = CallShape {
    name: "auc_test",
    required: &[Arg::num("p_a"), Arg::num("p_b"), args::Y],
    optional: &[],
};

fn section() -> DocSection {
    DocSection {
        include: true,
        label: "Calibration Tests",
        description: None,
    }
}

// ---------------------------------------------------------------------------------------
// auc_interval

const INTERVAL_FIELDS: [&str; 3] = ["auc", "lower", "upper"];

/// `auc_interval(p, y [, level])`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct AucInterval {
    signature: Signature,
}

signature_from_shape!(AucInterval, INTERVAL);

impl AucInterval {
    fn kernel(&self, args: &AccumulatorArgs) -> Result<RowsStructKernel<3>> {
        let level = match args.exprs.get(2) {
            Some(e) => literal_checked(INTERVAL.name, "level", e, "in (0, 1)", |x| {
                x > 0.0 && x < 1.0
            })?,
            None => 0.95,
        };
        let z = normal_quantile((1.0 + level) / 2.0);
        Ok(RowsStructKernel {
            auc: AucKernel::named(INTERVAL.name, None),
            fields: f64_struct_fields(&INTERVAL_FIELDS),
            finish: Arc::new(move |rows, tally| {
                let (theta, se) = delong_of(rows, tally)?;
                let lower = se.map(|se| (theta - z * se).max(0.0));
                let upper = se.map(|se| (theta + z * se).min(1.0));
                Some([Some(theta), lower, upper])
            }),
        })
    }
}

crate::kernel::kernel_source!(AucInterval);

rows_udaf!(
    AucInterval,
    INTERVAL,
    f64_struct_fields(&INTERVAL_FIELDS),
    Some(interval_doc())
);

/// `auc_interval`'s documentation.
fn interval_doc() -> &'static Documentation {
    static DOC: OnceLock<Documentation> = OnceLock::new();
    DOC.get_or_init(|| {
        Documentation::builder(
            section(),
            "The AUC with DeLong's confidence interval, as R pROC's `ci.auc(method = \"delong\")` \
(with `direction = \"<\"`): `auc ± Φ⁻¹((1 + level)/2) · se`, clipped to [0, 1], where `se² = S10/m + S01/n` \
from the sample variances of the positives' and negatives' placements (DeLong et al. 1988; Sun & Xu 2014). \
`auc` is exactly `auc(p, y)` (ties count one half). Returns `{auc, lower, upper}`; NULL when only one class is \
present; `lower`/`upper` NULL when a class has a single row (its variance is undefined). Keeps what `auc` keeps: \
8 bytes a row, or a count per distinct score when scores repeat.",
            INTERVAL.usage(),
        )
        .with_sql_example(
            r#"```sql
> SELECT r['auc'] AS auc, round(r['lower'], 6) AS lower, round(r['upper'], 6) AS upper
  FROM (SELECT auc_interval(p, y) AS r
        FROM (VALUES (0.1, 0), (0.4, 1), (0.5, 0), (0.8, 1)) AS t(p, y));
+------+----------+-------+
| auc  | lower    | upper |
+------+----------+-------+
| 0.75 | 0.057048 | 1.0   |
+------+----------+-------+
```"#,
        )
        .with_argument("p", "Predicted probability in [0, 1].")
        .with_argument("y", "Observed label: Boolean or a number 0/1.")
        .with_argument(
            "level",
            "Confidence level, a constant in (0, 1). Default 0.95.",
        )
        .build()
    })
}

/// Σ (aᵢ − ā)(bᵢ − b̄) of `count` pairs of integers from Σa, Σb and Σab, as
/// `(count·Σab − Σa·Σb) / count`: exact in integers while they fit in 128 bits.
fn centred_cross_sum(count: u64, sum_a: u128, sum_b: u128, sum_ab: u128) -> f64 {
    let c = u128::from(count);
    match (c.checked_mul(sum_ab), sum_a.checked_mul(sum_b)) {
        (Some(x), Some(y)) if x >= y => (x - y) as f64 / c as f64,
        (Some(x), Some(y)) => -((y - x) as f64) / c as f64,
        _ => sum_ab as f64 - (sum_a as f64) * (sum_b as f64) / c as f64,
    }
}

/// DeLong's (θ, se) of a group's rows and tallies; None with one class, se None when a
/// class has one row. One sweep over both classes' distinct scores adds up each class's
/// placement counts (twice a placement times the other class's size: `2·below + equal` for
/// a positive, `2·above + equal` for a negative) and their squares, in exact integers.
fn delong_of(rows: &mut Rows, tally: &[Tally; 2]) -> Option<(f64, Option<f64>)> {
    let [negs, poss] = rows.sorted_parts();
    let total = |parts: &[&[f64]], t: &Tally| -> u64 {
        parts.iter().map(|p| p.len() as u64).sum::<u64>() + t.rows() as u64
    };
    let (n, m) = (total(&negs, &tally[0]), total(&poss, &tally[1]));
    if n == 0 || m == 0 {
        return None;
    }
    // Per class: Σ rows·k and Σ rows·k² of the placement counts k.
    let (mut pos_k, mut pos_k2, mut neg_k, mut neg_k2) = (0u128, 0u128, 0u128, 0u128);
    sweep(
        class_runs(&negs, &tally[0]),
        class_runs(&poss, &tally[1]),
        |_, nb, ne, pb, pe| {
            if pe > 0 {
                let k = u128::from(2 * nb + ne);
                pos_k += u128::from(pe) * k;
                pos_k2 += u128::from(pe) * k * k;
            }
            if ne > 0 {
                let k = u128::from(2 * (m - pb - pe) + pe);
                neg_k += u128::from(ne) * k;
                neg_k2 += u128::from(ne) * k * k;
            }
        },
    );
    let theta = pos_k as f64 / (2 * u128::from(n) * u128::from(m)) as f64;
    if n < 2 || m < 2 {
        return Some((theta, None));
    }
    let (nf, mf) = (n as f64, m as f64);
    // The placements are the counts over 2n (positives) and 2m (negatives).
    let s10 = centred_cross_sum(m, pos_k, pos_k, pos_k2) / (4.0 * nf * nf);
    let s01 = centred_cross_sum(n, neg_k, neg_k, neg_k2) / (4.0 * mf * mf);
    let var = s10 / (mf - 1.0) / mf + s01 / (nf - 1.0) / nf;
    Some((theta, Some(var.max(0.0).sqrt())))
}

// ---------------------------------------------------------------------------------------
// auc_test

const TEST_FIELDS: [&str; 6] = ["auc_a", "auc_b", "diff", "se", "z", "p_value"];

/// `auc_test(p_a, p_b, y)`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct AucTest {
    signature: Signature,
}

signature_from_shape!(AucTest, TEST);

impl AucTest {
    fn kernel(&self, _args: &AccumulatorArgs) -> Result<PairKernel> {
        Ok(PairKernel::new())
    }
}

impl AggregateUDFImpl for AucTest {
    kernel_udaf_common!(returns DataType::Struct(f64_struct_fields(&TEST_FIELDS)));

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(crate::values::state_fields(args.name))
    }

    fn documentation(&self) -> Option<&Documentation> {
        static DOC: OnceLock<Documentation> = OnceLock::new();
        Some(DOC.get_or_init(|| {
            Documentation::builder(
                section(),
                "DeLong's paired test of two models' AUC on the same rows, as R pROC's \
`roc.test(method = \"delong\", paired = TRUE)` (with `direction = \"<\"`): `diff = auc_a − auc_b`, \
`se² = Var(auc_a) + Var(auc_b) − 2 Cov(auc_a, auc_b)` from the rows' placements under both models (Sun & Xu's \
algorithm), `z = diff / se` and the two-sided `p_value = 2Φ(−|z|)`; a model against itself gives z = 0 and \
p_value = 1 (pROC's rule for diff = se = 0). Ties count one half, as in `auc`. Returns \
`{auc_a, auc_b, diff, se, z, p_value}`; NULL when only one class is present; `se`, `z`, `p_value` NULL when a \
class has a single row. Rows with a NULL `p_a`, `p_b` or `y` are skipped. Keeps both scores of every row \
(16 bytes a row) and, while it finishes, a copy of them by `p_b`; under a memory limit both spill to disk.",
                TEST.usage(),
            )
            .with_sql_example(
                r#"```sql
> SELECT r['auc_a'] AS auc_a, r['auc_b'] AS auc_b, r['z'] AS z, r['p_value'] AS p_value
  FROM (SELECT auc_test(p, p, y) AS r FROM (VALUES (0.1, 0), (0.4, 1), (0.5, 0), (0.8, 1)) AS t(p, y));
+-------+-------+-----+---------+
| auc_a | auc_b | z   | p_value |
+-------+-------+-----+---------+
| 0.75  | 0.75  | 0.0 | 1.0     |
+-------+-------+-----+---------+
```"#,
            )
            .with_argument("p_a", "Model A's predicted probability in [0, 1].")
            .with_argument("p_b", "Model B's predicted probability in [0, 1].")
            .with_argument("y", "Observed label: Boolean or a number 0/1.")
            .build()
        }))
    }
}

/// `auc_test`'s kernel: a store of each row's two scores, the second in a weight's place
/// (sorted by the first before a state is handed on, spilled under a memory limit).
#[derive(Debug)]
struct PairKernel {
    store: ValueStore,
}

impl PairKernel {
    fn new() -> Self {
        PairKernel {
            store: ValueStore::new(TEST.name, 0, 2, Some(1)).paired(["p_a", "p_b"]),
        }
    }
}

/// Values a class gathers before [`BySecond`] adds them to its store.
const GATHER: usize = 1 << 16;

/// The rows again, each by its second score with its placement count under the first
/// beside it (as an f64: exact, the counts are below 2⁵³), in a store of their own that
/// spills as the group's own rows do.
struct BySecond {
    store: ValueStore,
    gathered: [(Vec<f64>, Vec<f64>); 2],
    failed: Result<()>,
}

impl BySecond {
    fn new() -> Self {
        BySecond {
            store: ValueStore::new(TEST.name, 0, 2, Some(1)).spilling_early(),
            gathered: Default::default(),
            failed: Ok(()),
        }
    }

    #[inline]
    fn push(&mut self, c: usize, score: f64, count: u64) {
        let (p, k) = &mut self.gathered[c];
        p.push(score);
        k.push(count as f64);
        if p.len() >= GATHER {
            self.flush(c);
        }
    }

    fn flush(&mut self, c: usize) {
        let (p, k) = &mut self.gathered[c];
        if self.failed.is_ok() && !p.is_empty() {
            self.failed = self.store.extend_class(c, p, k);
        }
        p.clear();
        k.clear();
    }

    /// The store, once every row is in (the first error of a push, if any).
    fn finish(mut self) -> Result<ValueStore> {
        self.flush(0);
        self.flush(1);
        self.failed.map(|()| self.store)
    }
}

/// Sweeps both classes' rows, each class's parts ascending by a score, in step, one
/// distinct score at a time: `f(positive, count, rows)` once a class and score
/// present, with twice the rows' placement count under that score (`2·below + equal` among
/// the negatives for a positive, `2·above + equal` among the positives for a negative; ties
/// count one half, as in `auc`), and the class's rows, whose rows of that score (found) `f`
/// reads past with [`WeightedRuns::take_each`]. `m` is the number of positives. Equal scores
/// (−0 and +0 among them) are one tie group.
fn sweep_placements(
    negs: &[(&[f64], &[f64])],
    poss: &[(&[f64], &[f64])],
    m: u64,
    mut f: impl FnMut(bool, u64, &mut WeightedRuns),
) {
    let (mut neg, mut pos) = (WeightedRuns::new(negs), WeightedRuns::new(poss));
    let (mut neg_below, mut pos_below) = (0u64, 0u64);
    loop {
        let Some(v) = lower(neg.peek(), pos.peek()) else {
            return;
        };
        let (neg_equal, pos_equal) = (neg.equal(v), pos.equal(v));
        if neg_equal + pos_equal == 0 {
            // Only a NaN score, which the row checks keep out, equals nothing; never loop.
            return;
        }
        if pos_equal > 0 {
            f(true, 2 * neg_below + neg_equal, &mut pos);
        }
        if neg_equal > 0 {
            let above = m - pos_below - pos_equal;
            f(false, 2 * above + pos_equal, &mut neg);
        }
        neg_below += neg_equal;
        pos_below += pos_equal;
    }
}

/// Each class's sums of its rows' placement counts under both scores (ka under a, kb under
/// b), in exact integers: `[Σka, Σkb, Σka², Σka·kb, Σkb²]`, negatives first. The group's
/// rows, each class sorted by a with b beside, are swept in step, which gives every row
/// its ka; each row's (b, ka) goes to a store of its own ([`BySecond`]: 16 bytes a row, or
/// spilled), whose classes, sorted by b, are swept in step again for every row's kb beside
/// its ka. The group's rows stay as they are, so it can be evaluated again.
fn placement_sums(rows: &mut Rows, m: u64) -> Result<[[u128; 5]; 2]> {
    let mut sums = [[0u128; 5]; 2];
    let mut by_b = BySecond::new();
    {
        let [negs, poss] = rows.sorted_weighted_parts();
        sweep_placements(&negs, &poss, m, |positive, ka, class| {
            let c = usize::from(positive);
            let mut rows = 0u128;
            class.take_each(|b| {
                by_b.push(c, b, ka);
                rows += 1;
            });
            let ka = u128::from(ka);
            sums[c][0] += rows * ka;
            sums[c][2] += rows * ka * ka;
        });
    }
    let mut by_b = by_b.finish()?;
    by_b.with_group(0, |rows| {
        let [negs, poss] = rows.sorted_weighted_parts();
        sweep_placements(&negs, &poss, m, |positive, kb, class| {
            let (mut rows, mut ka_sum) = (0u128, 0u128);
            class.take_each(|ka| {
                // Exact: a count below 2⁵³.
                ka_sum += u128::from(ka as u64);
                rows += 1;
            });
            let kb = u128::from(kb);
            let s = &mut sums[usize::from(positive)];
            s[1] += rows * kb;
            s[3] += ka_sum * kb;
            s[4] += rows * kb * kb;
        });
    });
    Ok(sums)
}

/// DeLong's paired test of a group: [auc_a, auc_b, diff, se, z, p_value].
fn paired_test(rows: &mut Rows) -> Result<Option<[Option<f64>; 6]>> {
    let count = |c: usize| rows.parts(c).iter().map(|p| p.len() as u64).sum::<u64>();
    let (n, m) = (count(0), count(1));
    if n == 0 || m == 0 {
        return Ok(None);
    }
    // θ as `auc` counts it: Σ over positives of 2·below + equal, exact integers.
    let [neg_sums, pos_sums] = placement_sums(rows, m)?;
    let pairs = 2 * u128::from(n) * u128::from(m);
    let theta = [
        pos_sums[0] as f64 / pairs as f64,
        pos_sums[1] as f64 / pairs as f64,
    ];
    let diff = theta[0] - theta[1];
    if n < 2 || m < 2 {
        return Ok(Some([
            Some(theta[0]),
            Some(theta[1]),
            Some(diff),
            None,
            None,
            None,
        ]));
    }
    let (nf, mf) = (n as f64, m as f64);
    // A class's share of DeLong's covariance matrix, [(a, a), (a, b), (b, b)]: the sample
    // covariances of its `size` placements (its counts over `denom`), over `size`.
    let covariance = |k: &[u128; 5], size: u64, denom: f64| {
        let c = |sa, sb, sab| centred_cross_sum(size, sa, sb, sab) / (denom * denom);
        let size = size as f64;
        [
            c(k[0], k[0], k[2]),
            c(k[0], k[1], k[3]),
            c(k[1], k[1], k[4]),
        ]
        .map(|x| x / (size - 1.0) / size)
    };
    let s10 = covariance(&pos_sums, m, 2.0 * nf);
    let s01 = covariance(&neg_sums, n, 2.0 * mf);
    let s: [f64; 3] = std::array::from_fn(|k| s10[k] + s01[k]);
    let var = s[0] + s[2] - 2.0 * s[1];
    let se = var.max(0.0).sqrt();
    // pROC: no difference and no variance of the difference is z = 0.
    let z = if diff == 0.0 && se == 0.0 {
        0.0
    } else {
        diff / se
    };
    Ok(Some([
        Some(theta[0]),
        Some(theta[1]),
        Some(diff),
        Some(se),
        Some(z),
        Some(two_sided_p(z)),
    ]))
}

impl Kernel for PairKernel {
    crate::kernel::delegate_to_inner!(store: resize, num_groups, update, merge, drain, size);

    fn empty(&self) -> Result<Self> {
        Ok(PairKernel {
            store: self.store.empty(),
        })
    }

    fn state(&self, range: Range<usize>) -> Result<Vec<ArrayRef>> {
        Ok(self.store.state(range))
    }

    fn take_state(&mut self, range: Range<usize>) -> Result<Vec<ArrayRef>> {
        Ok(self.store.take_state(range))
    }

    fn evaluate(&mut self, range: Range<usize>) -> Result<ArrayRef> {
        let mut rows: Vec<Option<[Option<f64>; 6]>> = Vec::with_capacity(range.len());
        for g in range {
            rows.push(self.store.with_group(g, paired_test)?);
        }
        f64_struct_column(&TEST_FIELDS, &rows)
    }

    fn native_labels(&self) -> bool {
        true
    }
}

crate::kernel::kernel_source!(AucTest);

impl crate::common::Shaped for AucTest {
    fn call_shape(&self) -> Option<CallShape> {
        Some(TEST)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Identical scores: diff and se exactly 0, so z = 0 and p = 1 (pROC's rule), and θ is
    /// the Mann–Whitney count by hand.
    #[test]
    fn a_model_against_itself_has_no_difference() {
        let mut rows = Rows::default();
        rows.p = [vec![0.1, 0.4, 0.3], vec![0.35, 0.8, 0.4]];
        rows.w = rows.p.clone();
        let r = paired_test(&mut rows).unwrap().unwrap();
        assert_eq!(r[2], Some(0.0));
        assert_eq!(r[3], Some(0.0));
        assert_eq!(r[4], Some(0.0));
        assert_eq!(r[5], Some(1.0));
        // θ: positives 0.35 (above 0.1, 0.3), 0.8 (above all 3), 0.4 (above 2, ties 1).
        assert_eq!(r[0], Some((2.0 + 3.0 + 2.5) / 9.0));
    }
}
