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
    if rows.weighted() {
        return sweep_all(rows, tally, threshold, &[]);
    }
    // Unweighted rows kept as rows in at most two ascending parts with no tally (a group
    // read in one partition, or the final group of two partial states, its scores distinct
    // enough never to be counted): loops of their own over them, a chunk a core; otherwise
    // the generic sweep over the parts and tallies. Both add each distinct score once with
    // its row count, in ascending order, in the same chunks, so the result does not depend
    // on which of them read the rows, nor on the cores. The loops take the merged runs'
    // order on trust and check it as they read: a run out of order (a state not written
    // by `cbpe`) is sorted and the rows read again.
    let counted = [(&tally[0].p[..], &tally[0].n[..])];
    let counted: &[(&[f64], &[u64])] = if tally[0].len() > 0 { &counted } else { &[] };
    let alone = counted.is_empty() && tally[1].len() == 0;
    if alone {
        if let Some(sums) = in_own_loops(rows.parts_runs_trusted(), threshold) {
            return sums.finish();
        }
    }
    let [negs, poss] = rows.sorted_parts();
    if alone {
        if let Some(sums) = in_own_loops([negs.clone(), poss], threshold) {
            return sums.finish();
        }
    }
    let parts: Vec<&[f64]> = negs.into_iter().filter(|p| !p.is_empty()).collect();
    let cuts = chunk_cuts(&parts, counted);
    sweep_all(rows, tally, threshold, &cuts)
}

/// The sums of a group of rows in at most two parts, all on the negatives' side, read in
/// loops of their own, a chunk a core. None when the rows are not such (more parts, or
/// positives), or when a part is not ascending.
fn in_own_loops([negs, poss]: [Vec<&[f64]>; 2], threshold: f64) -> Option<Sums> {
    let parts: Vec<&[f64]> = negs.into_iter().filter(|p| !p.is_empty()).collect();
    if parts.len() > 2 || poss.iter().any(|p| !p.is_empty()) {
        return None;
    }
    let (a, b) = (
        parts.first().copied().unwrap_or(&[]),
        parts.get(1).copied().unwrap_or(&[]),
    );
    // The cuts of parts out of order are some values: the chunks' checks below fail.
    let cuts = chunk_cuts(&parts, &[]);
    let chunk = |k: usize| -> Option<Sums> {
        // The scores chunk k holds: from its cut to the next.
        let (lo, hi) = (
            k.checked_sub(1).map_or(f64::NEG_INFINITY, |i| cuts[i]),
            cuts.get(k).copied().unwrap_or(f64::INFINITY),
        );
        // Chunk k's rows of a part, then those below the threshold among them. The last
        // chunk ends at a part's last row whatever it holds (a NaN is not below infinity: it
        // stays in the last chunk, for the checks).
        let range = |part: &[f64]| {
            let start = below(part, lo);
            let end = if hi == f64::INFINITY {
                part.len()
            } else {
                below(part, hi)
            };
            (start <= end).then(|| (start, start + below(&part[start..end], threshold), end))
        };
        let ((a0, a_cut, a1), (b0, b_cut, b1)) = (range(a)?, range(b)?);
        let first = a[a0..a1].first().into_iter().chain(b[b0..b1].first());
        let first = first.copied().reduce(f64::min);
        let mut sums = Sums::default();
        let mut order = Order::new();
        sums.sweep::<false>(&a[a0..a_cut], &b[b0..b_cut], &mut order);
        sums.sweep::<true>(&a[a_cut..a1], &b[b_cut..b1], &mut order);
        // Each score above the one before, the first and last within the chunk's: the parts
        // are ascending.
        let within = first.is_none_or(|first| first >= lo && order.last < hi);
        (order.ascending && within).then_some(sums)
    };
    let chunks = crate::parallel::map_in_order(cuts.len() + 1, crate::parallel::cores(), chunk);
    chunks
        .into_iter()
        .collect::<Option<Vec<Sums>>>()
        .map(Sums::joined)
}

/// The generic reading of [`expected`]: the distinct scores of the rows and tallies, a new
/// chunk at each of `cuts`.
fn sweep_all(
    rows: &mut Rows,
    tally: &[Tally; 2],
    threshold: f64,
    cuts: &[f64],
) -> Option<[Option<f64>; 5]> {
    let mut chunks = vec![];
    let mut sums = Sums::default();
    let mut next = 0;
    for_each_score(rows, tally, |p, w, _| {
        while next < cuts.len() && p >= cuts[next] {
            chunks.push(std::mem::take(&mut sums));
            next += 1;
        }
        if p >= threshold {
            sums.add::<true>(p, w);
        } else {
            sums.add::<false>(p, w);
        }
        sums.total += w;
    });
    chunks.push(sums);
    Sums::joined(chunks).finish()
}

/// Unweighted rows from which a group is read in [`CHUNKS`] chunks (4M rows; 1,024 in the
/// unit tests, so that they read their groups in chunks).
#[cfg(not(test))]
const CHUNKED_FROM: u64 = 1 << 22;
#[cfg(test)]
const CHUNKED_FROM: u64 = 1 << 10;

/// The chunks of a group of at least [`CHUNKED_FROM`] rows.
const CHUNKS: u64 = 4;

/// Where the chunks of a group with ascending `parts` and `counted` rows begin, after the
/// first: the scores at ranks n/4, n/2 and 3n/4 of its n rows (a chunk holds the scores from
/// its cut to the next, so equal scores are in one chunk); none below [`CHUNKED_FROM`]
/// rows. The same rows give the same cuts however they are split into parts.
fn chunk_cuts(parts: &[&[f64]], counted: &[(&[f64], &[u64])]) -> Vec<f64> {
    let n = parts.iter().map(|p| p.len() as u64).sum::<u64>()
        + counted.iter().flat_map(|(_, n)| n.iter()).sum::<u64>();
    if n < CHUNKED_FROM {
        return vec![];
    }
    (1..CHUNKS)
        .map(|k| crate::values::rank_of_sorted(parts, counted, k * n / CHUNKS))
        .collect()
}

/// The rows of ascending `part` below `cut`.
fn below(part: &[f64], cut: f64) -> usize {
    part.partition_point(|&p| p < cut)
}

/// What a reading of parts taken on trust saw of their order: each score it added above
/// the one before (ties are added once), and the last.
#[derive(Clone, Copy)]
struct Order {
    last: f64,
    ascending: bool,
}

impl Order {
    fn new() -> Self {
        Order {
            last: f64::NEG_INFINITY,
            ascending: true,
        }
    }
}

/// The sums `cbpe` reads off its rows in ascending p: the expected Mann–Whitney count, the
/// expected positives' and negatives' weights so far (the same sums whatever the threshold),
/// and the confusion cells: the weights below the threshold are those so far at its last
/// row below it, the ones at or above it are summed on their own.
#[derive(Default, Clone, Copy)]
struct Sums {
    /// Σ over rows of w·p · (the expected negatives' weight below the row + half its own).
    pairs: f64,
    /// The expected positives' and negatives' weight so far.
    pos: f64,
    neg: f64,
    /// The expected positives' weight below the threshold (FN) and at or above it (TP).
    pos_below: f64,
    pos_above: f64,
    /// The expected negatives' weight below the threshold (TN) and at or above it (FP).
    neg_below: f64,
    neg_above: f64,
    /// The rows' weight.
    total: f64,
}

impl Sums {
    /// Adds weight `w` of rows with probability `p`, the largest so far, on the side of the
    /// threshold `ABOVE` says (every row below it comes before any at or above it).
    #[inline(always)]
    fn add<const ABOVE: bool>(&mut self, p: f64, w: f64) {
        let (pos, neg) = (w * p, w * (1.0 - p));
        self.pairs += pos * (self.neg + 0.5 * neg);
        self.neg += neg;
        self.pos += pos;
        if ABOVE {
            self.neg_above += neg;
            self.pos_above += pos;
        } else {
            (self.neg_below, self.pos_below) = (self.neg, self.pos);
        }
    }

    /// Adds the rows of ascending `a` and `b` (unweighted probabilities, all on the side of
    /// the threshold `ABOVE` says), merged: each distinct score once, with its rows in
    /// both, each score told to `order`. Which part holds the next score is as likely one
    /// as the other, so the merge steps without a branch on it; ties are rare among
    /// distinct scores.
    // The merge's steps negate comparisons so that a NaN, which compares false, still moves it
    // on (and the order check refuses it).
    #[allow(clippy::neg_cmp_op_on_partial_ord)]
    fn sweep<const ABOVE: bool>(&mut self, a: &[f64], b: &[f64], order: &mut Order) {
        let (mut behind_a, mut behind_b) = (ReadBehind::new(a), ReadBehind::new(b));
        let Order {
            mut last,
            mut ascending,
        } = *order;
        let (mut i, mut j) = (0, 0);
        while i < a.len() && j < b.len() {
            let (x, y) = (a[i], b[j]);
            let v = if y < x { y } else { x };
            // A step moves on whatever the values: `!(y < x)` is `x <= y` but for a NaN.
            i += usize::from(!(y < x));
            j += usize::from(!(x < y));
            let mut rows = 1 + usize::from(x == y);
            while i < a.len() && a[i] == v {
                i += 1;
                rows += 1;
            }
            while j < b.len() && b[j] == v {
                j += 1;
                rows += 1;
            }
            self.add::<ABOVE>(v, rows as f64);
            ascending &= v > last;
            last = v;
            behind_a.advance(a, i);
            behind_b.advance(b, j);
        }
        // What is left of one part, alone.
        let (rest, at, mut behind) = if i < a.len() {
            (a, i, behind_a)
        } else {
            (b, j, behind_b)
        };
        let mut i = at;
        while i < rest.len() {
            let v = rest[i];
            let start = i;
            i += 1;
            while i < rest.len() && rest[i] == v {
                i += 1;
            }
            self.add::<ABOVE>(v, (i - start) as f64);
            ascending &= v > last;
            last = v;
            behind.advance(rest, i);
        }
        self.total += (a.len() + b.len()) as f64;
        *order = Order { last, ascending };
    }

    /// The sums of consecutive chunks of rows, each summed from zero, as if summed in one:
    /// a later chunk's positives count every earlier chunk's negatives as below them.
    fn joined(chunks: Vec<Sums>) -> Sums {
        let mut chunks = chunks.into_iter();
        let first = chunks.next().unwrap_or_default();
        chunks.fold(first, |lo, hi| Sums {
            pairs: lo.pairs + hi.pairs + hi.pos * lo.neg,
            pos: lo.pos + hi.pos,
            neg: lo.neg + hi.neg,
            pos_below: lo.pos_below + hi.pos_below,
            pos_above: lo.pos_above + hi.pos_above,
            neg_below: lo.neg_below + hi.neg_below,
            neg_above: lo.neg_above + hi.neg_above,
            total: lo.total + hi.total,
        })
    }

    fn finish(&self) -> Option<[Option<f64>; 5]> {
        if self.total <= 0.0 {
            return None;
        }
        let Sums {
            pairs,
            pos: pos_total,
            neg: neg_total,
            pos_below: fn_,
            pos_above: tp,
            neg_below: tn,
            neg_above: fp,
            total,
        } = *self;
        let ratio = |num: f64, den: f64| (den > 0.0).then(|| num / den);
        Some([
            ratio(pairs, pos_total * neg_total),
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
    crate::kernel::delegate_to_inner!(inner: resize, num_groups, merge, check_stored, state, take_state, drain, size);

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

#[cfg(test)]
mod tests {
    use arrow::buffer::ScalarBuffer;

    use super::*;

    /// Probabilities with ties (300 levels), both zeros and a one.
    fn probabilities() -> Vec<f64> {
        let mut p: Vec<f64> = (0..2000u64)
            .map(|i| ((i * 7919) % 301) as f64 / 300.0)
            .collect();
        p.extend([0.0, -0.0, 1.0]);
        p
    }

    fn sorted(mut v: Vec<f64>) -> Vec<f64> {
        v.sort_by(f64::total_cmp);
        v
    }

    /// The expectations by their definitions, every pair of rows at once: the ROC AUC as
    /// Σ_i Σ_j p_i (1 − p_j) ([p_j < p_i] + ½ [p_j = p_i]) over Σ p · Σ (1 − p).
    fn by_definition(p: &[f64], threshold: f64) -> [f64; 5] {
        let (mut pairs, mut pos, mut neg) = (0.0, 0.0, 0.0);
        let (mut tp, mut fp, mut fn_, mut tn) = (0.0, 0.0, 0.0, 0.0);
        for &a in p {
            pos += a;
            neg += 1.0 - a;
            if a >= threshold {
                tp += a;
                fp += 1.0 - a;
            } else {
                fn_ += a;
                tn += 1.0 - a;
            }
            for &b in p {
                let below = if b < a {
                    1.0
                } else if b == a {
                    0.5
                } else {
                    0.0
                };
                pairs += a * (1.0 - b) * below;
            }
        }
        [
            pairs / (pos * neg),
            (tp + tn) / p.len() as f64,
            tp / (tp + fp),
            tp / pos,
            2.0 * tp / (2.0 * tp + fp + fn_),
        ]
    }

    /// `expected` on `rows` (counted per distinct score in `tally`).
    fn estimate(mut rows: Rows, tally: [Tally; 2], threshold: f64) -> [f64; 5] {
        expected(&mut rows, &tally, threshold)
            .expect("rows")
            .map(|x| x.expect("a denominator"))
    }

    /// One part, two parts (its own loops), two parts out of order, three parts and a tally
    /// (the generic sweep) give the same bits, and the numbers the definitions give; the
    /// threshold at a tie puts the whole tie above it. The groups here are read in chunks (a test's [`CHUNKED_FROM`]); the
    /// one-sided groups below are not.
    #[test]
    fn every_reading_of_the_rows_agrees_with_the_definition() {
        let p = probabilities();
        assert!(p.len() as u64 >= CHUNKED_FROM);
        for threshold in [0.5, 100.0 / 300.0, 0.0, 1.0 - 1e-9] {
            let want = by_definition(&p, threshold);
            let one = estimate(
                Rows {
                    p: [p.clone(), vec![]],
                    ..Rows::default()
                },
                Default::default(),
                threshold,
            );
            let runs = |k: usize| -> Vec<ScalarBuffer<f64>> {
                (0..k)
                    .map(|r| {
                        let part: Vec<f64> = p.iter().skip(r).step_by(k).copied().collect();
                        ScalarBuffer::from(sorted(part))
                    })
                    .collect()
            };
            let in_runs = |k: usize| Rows {
                runs: [runs(k), vec![]],
                ..Rows::default()
            };
            let two = estimate(in_runs(2), Default::default(), threshold);
            // Merged runs out of order (a state not written by `cbpe`), read on trust first:
            // one descending, and one whose halves are swapped, each half ascending (every
            // chunk of it in order, the chunks not).
            let out_of_order = |run: fn(&mut Vec<f64>)| {
                let mut rows = in_runs(2);
                let mut first = rows.runs[0][0].to_vec();
                run(&mut first);
                rows.runs[0][0] = ScalarBuffer::from(first);
                estimate(rows, Default::default(), threshold)
            };
            let reversed = out_of_order(|r| r.reverse());
            let swapped = out_of_order(|r| {
                let half = r.len() / 2;
                r.rotate_left(half)
            });
            let three = estimate(in_runs(3), Default::default(), threshold);
            // The first half counted, the second kept as rows.
            let (counted, kept) = p.split_at(p.len() / 2);
            let tally =
                Tally::default().merged(sorted(counted.to_vec()).into_iter().map(|v| (v, 1)));
            let tallied = estimate(
                Rows {
                    p: [kept.to_vec(), vec![]],
                    ..Rows::default()
                },
                [tally, Tally::default()],
                threshold,
            );
            for (name, got) in [
                ("two", two),
                ("reversed", reversed),
                ("swapped", swapped),
                ("three", three),
                ("tallied", tallied),
            ] {
                let same = got
                    .iter()
                    .zip(&one)
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "{name} parts at {threshold}: {got:?} != {one:?}");
            }
            for (got, want) in one.iter().zip(&want) {
                assert!(
                    (got - want).abs() <= 1e-12 * want.abs(),
                    "at {threshold}: {one:?} != {want:?}"
                );
            }
        }
    }

    /// A group with no row has no estimate; with rows of p = 0 only, no AUC (no expected
    /// positive) but an accuracy of 1.
    #[test]
    fn empty_and_one_sided_groups() {
        assert!(expected(&mut Rows::default(), &Default::default(), 0.5).is_none());
        let mut zeros = Rows {
            p: [vec![0.0; 5], vec![]],
            ..Rows::default()
        };
        let got = expected(&mut zeros, &Default::default(), 0.5).expect("rows");
        assert_eq!(got[0], None);
        assert_eq!(got[1], Some(1.0));
    }
}
