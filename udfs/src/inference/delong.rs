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
//! placements' variances, from integer sums. `auc_test` needs each row's two scores together (the covariance
//! of the two models' placements is over rows), so it keeps the pairs side by side, 16 bytes a
//! row (what `auc` keeps for each of the two scores), moved into and out of its partial states
//! without a copy. At the end it sorts both classes by the first score (one a core) and
//! sweeps them in step, which gives every row its placement count under that score; then it
//! sorts a copy of each row's (second score, count) and sweeps those in step, and adds up the
//! counts, their squares and products in exact integers. Beyond the rows it takes 16 bytes a
//! row while it finishes (the copies); the rows keep their scores.

use std::ops::Range;
use std::sync::{Arc, OnceLock};

use arrow::array::{ArrayRef, AsArray, Float64Array};
use arrow::buffer::{OffsetBuffer, ScalarBuffer};
use arrow::datatypes::{DataType, FieldRef, Float64Type};
use datafusion_common::{internal_err, plan_err, Result};
use datafusion_doc::DocSection;
use datafusion_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion_expr::{AggregateUDFImpl, Documentation, Signature};

use super::rows::{rows_udaf, RowsStructKernel};
use super::{f64_struct_column, f64_struct_fields};
use crate::common::{
    args, check_p, check_y, f64_list_state_fields, f64s, for_each_row, list_array, list_parts,
    literal_checked, usable_rows, Arg, CallShape,
};
use crate::kernel::Filter;
use crate::kernel::{kernel_udaf_common, signature_from_shape, Kernel};
use crate::labels::f64_labels;
use crate::metrics::auc::AucKernel;
use crate::stats::{normal_quantile, two_sided_p};
use crate::values::{class_runs, sweep, Rows, Tally, MIN_RUN};

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
const TEST_STATE: [&str; 2] = ["neg_pairs", "pos_pairs"];

/// `auc_test(p_a, p_b, y)`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct AucTest {
    signature: Signature,
}

signature_from_shape!(AucTest, TEST);

impl AucTest {
    fn kernel(&self, _args: &AccumulatorArgs) -> Result<PairKernel> {
        Ok(PairKernel {
            groups: vec![],
            bytes: 0,
        })
    }
}

impl AggregateUDFImpl for AucTest {
    kernel_udaf_common!(returns DataType::Struct(f64_struct_fields(&TEST_FIELDS)));

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(f64_list_state_fields(args.name, &TEST_STATE))
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
(16 bytes a row).",
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

/// One group's rows, per class (0 negatives, 1 positives), each row's two scores side by side
/// (`a₀, b₀, a₁, b₁, …`: the layout of the state's lists, so a state moves in and out
/// without a copy): the group's own rows, and runs, the merged partial states' slices kept
/// where they arrived until the group is evaluated.
#[derive(Debug, Default)]
struct Pairs {
    own: [Vec<f64>; 2],
    runs: [Vec<ScalarBuffer<f64>>; 2],
}

/// `auc_test`'s kernel: per group its [`Pairs`], and the bytes they hold.
#[derive(Debug)]
struct PairKernel {
    groups: Vec<Pairs>,
    bytes: usize,
}

impl Pairs {
    fn bytes(&self) -> usize {
        let runs: usize = self.runs.iter().flatten().map(|r| r.len()).sum();
        (self.own[0].capacity() + self.own[1].capacity() + runs) * size_of::<f64>()
    }

    /// Puts class `c`'s runs into its own vector, taking the first over without a copy when
    /// the group holds nothing else of it and nobody else holds it (a partial state whose
    /// batch DataFusion has dropped).
    fn absorb_runs(&mut self, c: usize) {
        let runs = std::mem::take(&mut self.runs[c]);
        let own = &mut self.own[c];
        for run in runs {
            if own.is_empty() {
                match run.into_inner().into_vec::<f64>() {
                    Ok(v) => *own = v,
                    Err(buffer) => own.extend_from_slice(buffer.typed_data::<f64>()),
                }
            } else {
                own.reserve_exact(run.len());
                own.extend_from_slice(&run);
            }
        }
    }
}

/// Sorts the two classes, one a core.
fn sort_both<T: Send>(neg: &mut [T], pos: &mut [T], sort: impl Fn(&mut [T]) + Sync) {
    let mut classes = [neg, pos];
    crate::parallel::for_each_mut(&mut classes, crate::parallel::cores(), |rows| sort(rows));
}

/// One sweep of both classes, each sorted by `score`, in step: `f(positive, i, k)` for every
/// row i of each class with twice its placement count, `2·below + equal` among the negatives
/// for a positive, `2·above + equal` among the positives for a negative (ties count one half,
/// as `auc`). Rows whose scores are equal (−0 and +0 among them: adjacent in either order)
/// are one tie group.
fn sweep_placements<T>(
    neg: &[T],
    pos: &[T],
    score: impl Fn(&T) -> f64,
    mut f: impl FnMut(bool, usize, u64),
) {
    let (mut i, mut k) = (0, 0);
    loop {
        let v = match (neg.get(i).map(&score), pos.get(k).map(&score)) {
            (Some(a), Some(b)) => {
                if a.total_cmp(&b).is_le() {
                    a
                } else {
                    b
                }
            }
            (Some(a), None) => a,
            (None, Some(b)) => b,
            (None, None) => return,
        };
        let i_end = i + neg[i..].iter().take_while(|r| score(r) == v).count();
        let k_end = k + pos[k..].iter().take_while(|r| score(r) == v).count();
        if i_end == i && k_end == k {
            // Only a NaN score, which the row checks keep out, equals nothing; never loop.
            return;
        }
        let (equal_neg, equal_pos) = ((i_end - i) as u64, (k_end - k) as u64);
        let for_pos = 2 * i as u64 + equal_neg;
        let for_neg = 2 * (pos.len() - k_end) as u64 + equal_pos;
        (k..k_end).for_each(|r| f(true, r, for_pos));
        (i..i_end).for_each(|r| f(false, r, for_neg));
        (i, k) = (i_end, k_end);
    }
}

fn sort_by_score(rows: &mut [[f64; 2]], j: usize) {
    rows.sort_unstable_by(|a, b| a[j].total_cmp(&b[j]));
}

/// Each class's sums of its rows' placement counts under both scores (ka under a, kb under
/// b), in exact integers: `[Σka, Σkb, Σka², Σka·kb, Σkb²]`, negatives first. Both classes are
/// sorted by a (one a core) and swept in step, which gives every row its ka (4 bytes a row);
/// then each row's (b, ka) is copied out (16 bytes a row: the rows keep their scores, so the
/// group can be evaluated again), both copies are sorted by b and swept in step, which gives
/// every row its kb beside its ka. An error when a count does not fit in 32 bits (over 2³¹
/// rows of a class).
fn placement_sums(neg: &mut [[f64; 2]], pos: &mut [[f64; 2]]) -> Result<[[u128; 5]; 2]> {
    if u32::try_from(2 * neg.len().max(pos.len()) as u64).is_err() {
        return plan_err!(
            "auc_test: a group holds {} rows of one class, more than the 2147483647 it can count",
            neg.len().max(pos.len())
        );
    }
    sort_both(neg, pos, |rows| sort_by_score(rows, 0));
    let mut ka = [vec![0u32; neg.len()], vec![0u32; pos.len()]];
    sweep_placements(
        neg,
        pos,
        |r| r[0],
        |positive, i, k| {
            ka[usize::from(positive)][i] = k as u32;
        },
    );
    let [ka_neg, ka_pos] = ka;
    let by_b = |rows: &[[f64; 2]], ka: Vec<u32>| -> Vec<(f64, u32)> {
        rows.iter().zip(ka).map(|(r, k)| (r[1], k)).collect()
    };
    let mut neg_b = by_b(neg, ka_neg);
    let mut pos_b = by_b(pos, ka_pos);
    sort_both(&mut neg_b, &mut pos_b, |rows| {
        rows.sort_unstable_by(|x, y| x.0.total_cmp(&y.0))
    });
    let mut sums = [[0u128; 5]; 2];
    sweep_placements(
        &neg_b,
        &pos_b,
        |r| r.0,
        |positive, i, kb| {
            let ka = if positive { pos_b[i].1 } else { neg_b[i].1 };
            let (ka, kb) = (u128::from(ka), u128::from(kb));
            let s = &mut sums[usize::from(positive)];
            s[0] += ka;
            s[1] += kb;
            s[2] += ka * ka;
            s[3] += ka * kb;
            s[4] += kb * kb;
        },
    );
    Ok(sums)
}

/// DeLong's paired test of a group: [auc_a, auc_b, diff, se, z, p_value].
fn paired_test(neg: &mut [[f64; 2]], pos: &mut [[f64; 2]]) -> Result<Option<[Option<f64>; 6]>> {
    let (n, m) = (neg.len() as u64, pos.len() as u64);
    if n == 0 || m == 0 {
        return Ok(None);
    }
    // θ as `auc` counts it: Σ over positives of 2·below + equal, exact integers.
    let [neg_sums, pos_sums] = placement_sums(neg, pos)?;
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
    fn empty(&self) -> Result<Self> {
        Ok(Self {
            groups: vec![],
            bytes: 0,
        })
    }

    crate::kernel::groups_in_vec!(groups);

    fn update(&mut self, values: &[ArrayRef], groups: &[usize], filter: Filter) -> Result<()> {
        let func = TEST.name;
        let (a, b) = (f64s(&values[0]).values(), f64s(&values[1]).values());
        let y = f64_labels(&values[2])?;
        let mask = usable_rows(&[&values[0], &values[1], &values[2]], filter);
        let one_group = self.groups.len() == 1;
        for_each_row(a.len(), &mask, |i| {
            let pa = check_p(func, "p_a", a[i])?;
            let pb = check_p(func, "p_b", b[i])?;
            let c = (check_y(func, y[i])? == 1.0) as usize;
            let g = if one_group { 0 } else { groups[i] };
            let rows = &mut self.groups[g].own[c];
            let before = rows.capacity();
            rows.extend_from_slice(&[pa, pb]);
            self.bytes += (rows.capacity() - before) * size_of::<f64>();
            Ok(())
        })
    }

    fn merge(&mut self, states: &[ArrayRef], groups: &[usize]) -> Result<()> {
        if states.len() != 2 {
            return internal_err!("auc_test: malformed partial state");
        }
        for (c, state) in states.iter().enumerate() {
            let (offsets, values) = list_parts(state);
            let buffer = state
                .as_list::<i32>()
                .values()
                .as_primitive::<Float64Type>()
                .values();
            for (r, &g) in groups.iter().enumerate() {
                let span = offsets[r] as usize..offsets[r + 1] as usize;
                if span.len() % 2 != 0 {
                    return internal_err!("auc_test: malformed partial state");
                }
                let pairs = &mut self.groups[g];
                if span.len() >= MIN_RUN {
                    pairs.runs[c].push(buffer.slice(span.start, span.len()));
                    self.bytes += span.len() * size_of::<f64>();
                    continue;
                }
                let rows = &mut pairs.own[c];
                let before = rows.capacity();
                rows.extend_from_slice(&values[span]);
                self.bytes += (rows.capacity() - before) * size_of::<f64>();
            }
        }
        Ok(())
    }

    fn state(&self, range: Range<usize>) -> Result<Vec<ArrayRef>> {
        let groups = &self.groups[range];
        Ok((0..2)
            .map(|c| -> ArrayRef {
                let lengths = groups
                    .iter()
                    .map(|p| p.own[c].len() + p.runs[c].iter().map(|r| r.len()).sum::<usize>());
                let offsets = OffsetBuffer::from_lengths(lengths);
                let mut values = Vec::with_capacity(*offsets.last().unwrap_or(&0) as usize);
                for p in groups {
                    values.extend_from_slice(&p.own[c]);
                    for run in &p.runs[c] {
                        values.extend_from_slice(run);
                    }
                }
                list_array(offsets, Arc::new(Float64Array::from(values)))
            })
            .collect())
    }

    /// [`Kernel::state`], moving the rows out: a single group's own rows become the lists'
    /// buffers without a copy.
    fn take_state(&mut self, range: Range<usize>) -> Result<Vec<ArrayRef>> {
        let single = range.len() == 1 && self.groups[range.start].runs.iter().all(Vec::is_empty);
        let out = if single {
            let pairs = std::mem::take(&mut self.groups[range.start]);
            self.bytes = self.bytes.saturating_sub(pairs.bytes());
            pairs
                .own
                .into_iter()
                .map(|rows| -> ArrayRef {
                    let offsets = OffsetBuffer::from_lengths([rows.len()]);
                    list_array(offsets, Arc::new(Float64Array::from(rows)))
                })
                .collect()
        } else {
            self.state(range.clone())?
        };
        for p in &mut self.groups[range] {
            self.bytes = self.bytes.saturating_sub(p.bytes());
            *p = Default::default();
        }
        Ok(out)
    }

    fn evaluate(&mut self, range: Range<usize>) -> Result<ArrayRef> {
        let mut rows: Vec<Option<[Option<f64>; 6]>> = Vec::with_capacity(range.len());
        for g in range {
            let pairs = &mut self.groups[g];
            let before = pairs.bytes();
            pairs.absorb_runs(0);
            pairs.absorb_runs(1);
            self.bytes = (self.bytes + pairs.bytes()).saturating_sub(before);
            let [neg, pos] = &mut pairs.own;
            rows.push(paired_test(
                neg.as_chunks_mut::<2>().0,
                pos.as_chunks_mut::<2>().0,
            )?);
        }
        f64_struct_column(&TEST_FIELDS, &rows)
    }

    fn drain(&mut self, n: usize) {
        for p in self.groups.drain(..n) {
            self.bytes = self.bytes.saturating_sub(p.bytes());
        }
    }

    fn size(&self) -> usize {
        self.bytes + self.groups.capacity() * size_of::<Pairs>()
    }

    fn native_labels(&self) -> bool {
        true
    }
}

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
        let mut neg = [[0.1, 0.1], [0.4, 0.4], [0.3, 0.3]];
        let mut pos = [[0.35, 0.35], [0.8, 0.8], [0.4, 0.4]];
        let r = paired_test(&mut neg, &mut pos).unwrap().unwrap();
        assert_eq!(r[2], Some(0.0));
        assert_eq!(r[3], Some(0.0));
        assert_eq!(r[4], Some(0.0));
        assert_eq!(r[5], Some(1.0));
        // θ: positives 0.35 (above 0.1, 0.3), 0.8 (above all 3), 0.4 (above 2, ties 1).
        assert_eq!(r[0], Some((2.0 + 3.0 + 2.5) / 9.0));
    }
}
