//! `auc`: exact ROC AUC as the (weighted) Mann–Whitney statistic, ties counted one half.
//!
//! AUC needs every value, so the state is the rows (see `crate::values`: 8 bytes an
//! unweighted row); `size()` reports them to the memory pool. An unweighted group whose
//! scores repeat is counted instead: once a group holds `COMPACT_FROM` rows of its own, it
//! sorts them and, when they hold at most a quarter as many distinct scores as rows, keeps a
//! `Tally` per class (distinct score and rows, 16 bytes a distinct score) and clears its
//! rows (keeping their room for the next ones); it counts again whenever its new rows reach
//! `COMPACT_FROM` or four times the tally. A group whose rows are mostly distinct keeps
//! them and tries again when they have grown fourfold (looking at a sample of its newest
//! rows first, so that distinct scores cost one sort of 65,536 rows each time). Merged partial
//! states bring their tallies, and their sorted rows are counted too when they repeat. The
//! count is exact either way (integers), so the value does not depend on which groups were
//! counted.

use std::ops::Range;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Float64Array, Int64Array};
use arrow::buffer::OffsetBuffer;
use arrow::datatypes::{DataType, Field, FieldRef, Int64Type};
use datafusion_common::{internal_err, Result};
use datafusion_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion_expr::utils::format_state_name;
use datafusion_expr::{AggregateUDFImpl, Documentation, Signature};
use datafusion_macros::user_doc;

use crate::common::{
    args, f64_list_type, list_array, list_parts, list_type, weight_col, CallShape,
};
use crate::kernel::Filter;
use crate::kernel::{signature_from_shape, Kernel};
use crate::metrics::classwise::{per_class_fields, PerClass};
use crate::multiclass;
use crate::values::{
    self, distinct_in, for_each_score, is_sorted_f64, runs_of, sort_f64, Rows, Tally, ValueStore,
};

const SHAPE: CallShape = CallShape {
    name: "auc",
    required: &[args::P, args::Y],
    optional: &[args::W],
};

#[user_doc(
    doc_section(label = "Calibration Metrics"),
    description = "Exact area under the ROC curve: the probability that a random positive scores above a random \
negative (Mann–Whitney), ties counted one half, weighted by `w` when given (as scikit-learn's `roc_auc_score` \
with `sample_weight`). NULL when only one class is present. On a multiclass model's list of class probabilities, \
`auc(probs, label [, w])` is the one-vs-rest macro average, the mean over the classes k of \
`auc(probs[k], label = k)` (scikit-learn's `roc_auc_score(multi_class='ovr')`), NULL when a class has no row \
or every row. Keeps every row (8 bytes a row, 16 weighted; spilled to disk under a memory limit), or, \
unweighted and once a group has 65,536 rows whose scores repeat (at most a quarter as many distinct scores as \
rows), a count per distinct score.",
    syntax_example = "auc(p, y [, w])",
    sql_example = r#"```sql
> SELECT auc(p, y) AS auc FROM (VALUES (0.1, 0), (0.4, 1), (0.4, 0), (0.8, 1)) AS t(p, y);
+-------+
| auc   |
+-------+
| 0.875 |
+-------+
```"#
)]
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Auc {
    signature: Signature,
}

signature_from_shape!(Auc, SHAPE);

/// `auc` on a multiclass model's list of class probabilities: one-vs-rest, macro-averaged.
const MULTICLASS: CallShape = CallShape {
    name: "auc",
    required: &[args::PROBS, args::LABEL],
    optional: &[args::W],
};

impl Auc {
    /// The shape of a call with these argument types: the multiclass one when the first is
    /// a list.
    fn shape_for(&self, arg_types: &[DataType]) -> CallShape {
        match arg_types.first() {
            Some(t) if multiclass::is_list(t) => MULTICLASS,
            _ => SHAPE,
        }
    }

    fn kernel(&self, args: &AccumulatorArgs) -> Result<AucCall> {
        let binary = AucKernel::new(weight_col(args.exprs, 2));
        Ok(match args.expr_fields.first() {
            Some(f) if multiclass::is_list(f.data_type()) => {
                AucCall::OneVsRest(PerClass::new(SHAPE.name, binary))
            }
            _ => AucCall::Binary(binary),
        })
    }
}

crate::kernel::either_kernel!(
    /// `auc`'s kernel for a call: on a score, or one-vs-rest on a list of class probabilities.
    AucCall {
        Binary(AucKernel),
        OneVsRest(PerClass<AucKernel>),
    }
);

crate::kernel::kernel_source!(Auc);

impl crate::common::Shaped for Auc {
    fn call_shape(&self) -> Option<CallShape> {
        Some(SHAPE)
    }
}

impl AggregateUDFImpl for Auc {
    crate::kernel::kernel_udaf_common!(returns DataType::Float64, shape_for);

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(match args.input_fields.first() {
            Some(f) if multiclass::is_list(f.data_type()) => {
                per_class_fields(state_fields(args.name))
            }
            _ => state_fields(args.name),
        })
    }

    fn documentation(&self) -> Option<&Documentation> {
        crate::common::documented(self.doc(), &self.shape())
    }
}

/// The state fields of [`AucKernel`] (`auc`, `auc_interval`): the rows' four, then the
/// tallies' four.
pub(crate) fn state_fields(name: &str) -> Vec<FieldRef> {
    let mut fields = values::state_fields(name);
    for (field, t) in TALLY_STATE_NAMES.iter().zip([
        f64_list_type(),
        f64_list_type(),
        list_type(DataType::Int64),
        list_type(DataType::Int64),
    ]) {
        fields.push(Arc::new(Field::new(
            format_state_name(name, field),
            t,
            true,
        )));
    }
    fields
}

/// The state fields after the rows' four: the tallies' scores and row counts per class.
const TALLY_STATE_NAMES: [&str; 4] = ["neg_tally_p", "pos_tally_p", "neg_tally_n", "pos_tally_n"];

/// Rows of its own at which a group first tries counting its scores (512 KiB of rows).
pub(crate) const COMPACT_FROM: usize = 1 << 16;

/// `auc`'s kernel (and `auc_interval`'s, which reads the same rows): the rows (a [`ValueStore`]), and per unweighted group the tallies of the
/// rows it has counted (see the module documentation).
#[derive(Debug)]
pub(crate) struct AucKernel {
    pub(crate) store: ValueStore,
    pub(crate) tallies: Vec<[Tally; 2]>,
    /// Per group, the rows of its own at which it next tries counting (four times as many
    /// after a try that did not pay); `usize::MAX` when the call is weighted (or, in the
    /// tests, counting is turned off).
    next_count: Vec<usize>,
    tally_bytes: usize,
}

impl AucKernel {
    fn new(w_col: Option<usize>) -> Self {
        Self::named("auc", w_col)
    }

    /// The kernel of function `func` (the name its errors give), weighted by column `w_col`.
    pub(crate) fn named(func: &'static str, w_col: Option<usize>) -> Self {
        Self {
            store: ValueStore::new(func, 0, 1, w_col).sorted_on_emit(),
            tallies: vec![],
            next_count: vec![],
            tally_bytes: 0,
        }
    }

    /// Group `g`'s own rows (not the merged runs, not the counted ones).
    #[inline]
    fn own_rows(&self, g: usize) -> usize {
        let rows = &self.store.groups[g];
        rows.p[0].len() + rows.p[1].len()
    }

    /// Counts group `g`'s own rows into its tallies when it has enough of them and that
    /// saves at least half their room. The newest rows are looked at first (sorted in place:
    /// the order of a group's rows does not matter): when a sample of [`COMPACT_FROM`] rows
    /// holds more than a quarter as many distinct scores, the group is not sorted whole,
    /// and tries again when its rows have grown fourfold.
    fn maybe_count(&mut self, g: usize) {
        let own = self.own_rows(g);
        if own < self.next_count[g] {
            return;
        }
        let tallies = &mut self.tallies[g];
        let before = tallies[0].bytes() + tallies[1].bytes();
        let counted = self.store.with_group(g, |rows| {
            let mut sampled = 0;
            let mut sample_distinct = 0;
            for p in rows.p.iter_mut() {
                let share = (COMPACT_FROM as u128 * p.len() as u128 / own as u128) as usize;
                let tail = p.len() - share.min(p.len());
                sort_f64(&mut p[tail..]);
                sampled += p.len() - tail;
                sample_distinct += distinct_in(&p[tail..]);
            }
            if sample_distinct * 4 > sampled {
                return false;
            }
            rows.p.iter_mut().for_each(|p| sort_f64(p));
            let distinct: usize = rows.p.iter().map(|p| distinct_in(p)).sum();
            if distinct * 4 > own {
                return false;
            }
            for (tally, p) in tallies.iter_mut().zip(rows.p.iter_mut()) {
                *tally = tally.merged(runs_of(p));
                // Kept for the next rows: DataFusion's aggregate without GROUP BY only grows
                // its reservation, so memory freed and taken again would count twice.
                p.clear();
            }
            true
        });
        let after = tallies[0].bytes() + tallies[1].bytes();
        self.tally_bytes = (self.tally_bytes + after).saturating_sub(before);
        self.next_count[g] = if counted {
            COMPACT_FROM.max(4 * (tallies[0].len() + tallies[1].len()))
        } else {
            own.saturating_mul(4)
        };
    }

    /// Counts the merged runs of group `g` from position `from` on (per class) whose scores
    /// repeat: a run arrives sorted, so one pass tells its distinct scores and another adds
    /// them to the tally, and the run (a slice of an incoming state) is let go. A partial
    /// state that could not count its rows itself (say it was emitted early, under memory
    /// pressure, before 65,536 rows) is counted here instead of kept.
    fn count_runs(&mut self, g: usize, from: [usize; 2]) {
        let tallies = &mut self.tallies[g];
        let before = tallies[0].bytes() + tallies[1].bytes();
        self.store.with_group(g, |rows| {
            for (c, tally) in tallies.iter_mut().enumerate() {
                let mut i = from[c];
                while i < rows.runs[c].len() {
                    let run = &rows.runs[c][i];
                    // Its first rows first: a run of distinct scores costs no full pass.
                    let head = &run[..run.len().min(COMPACT_FROM)];
                    if distinct_in(head) * 4 <= head.len()
                        && is_sorted_f64(run)
                        && distinct_in(run) * 4 <= run.len()
                    {
                        *tally = tally.merged(runs_of(run));
                        rows.runs[c].remove(i);
                    } else {
                        i += 1;
                    }
                }
            }
        });
        let after = tallies[0].bytes() + tallies[1].bytes();
        self.tally_bytes = (self.tally_bytes + after).saturating_sub(before);
    }

    /// The tally lists of groups in `range`: scores per class, then row counts per class.
    fn tally_state(tallies: &[[Tally; 2]]) -> Vec<ArrayRef> {
        let offsets = |c: usize| OffsetBuffer::from_lengths(tallies.iter().map(|t| t[c].len()));
        let scores = |c: usize| -> ArrayRef {
            let v: Float64Array = tallies
                .iter()
                .flat_map(|t| t[c].p.iter().copied())
                .collect();
            list_array(offsets(c), Arc::new(v))
        };
        let counts = |c: usize| -> ArrayRef {
            let v: Int64Array = tallies
                .iter()
                .flat_map(|t| t[c].n.iter().map(|&n| n as i64))
                .collect();
            list_array(offsets(c), Arc::new(v))
        };
        vec![scores(0), scores(1), counts(0), counts(1)]
    }
}

impl Kernel for AucKernel {
    fn empty(&self) -> Result<Self> {
        Ok(Self {
            store: self.store.empty(),
            tallies: vec![],
            next_count: vec![],
            tally_bytes: 0,
        })
    }

    fn resize(&mut self, n: usize) {
        self.store.resize(n);
        if self.tallies.len() < n {
            let first = if self.store.weighted() {
                usize::MAX
            } else {
                COMPACT_FROM
            };
            self.tallies.resize_with(n, Default::default);
            self.next_count.resize(n, first);
        }
    }

    fn num_groups(&self) -> usize {
        self.store.num_groups()
    }

    fn update(&mut self, values: &[ArrayRef], groups: &[usize], filter: Filter) -> Result<()> {
        self.store.update(values, groups, filter)?;
        if self.store.weighted() {
            return Ok(());
        }
        if self.store.num_groups() == 1 {
            self.maybe_count(0);
        } else {
            // A row's group is rarely due: the check stays in the loop, the counting not.
            for &g in groups {
                if self.own_rows(g) >= self.next_count[g] {
                    self.maybe_count(g);
                }
            }
        }
        Ok(())
    }

    fn merge(&mut self, states: &[ArrayRef], groups: &[usize]) -> Result<()> {
        if states.len() != 8 {
            return internal_err!("auc: malformed partial state");
        }
        // The groups this call touches, with how many runs each had before it.
        let mut touched: Vec<usize> = groups.to_vec();
        touched.sort_unstable();
        touched.dedup();
        let runs_before: Vec<[usize; 2]> = touched
            .iter()
            .map(|&g| {
                let runs = &self.store.groups[g].runs;
                [runs[0].len(), runs[1].len()]
            })
            .collect();
        self.store.merge(&states[..4], groups)?;
        let scores: [(&[i32], &[f64]); 2] = std::array::from_fn(|c| list_parts(&states[4 + c]));
        let counts: [(&[i32], &[i64]); 2] = std::array::from_fn(|c| {
            let l = states[6 + c].as_list::<i32>();
            (
                l.value_offsets(),
                l.values().as_primitive::<Int64Type>().values().as_ref(),
            )
        });
        for (r, &g) in groups.iter().enumerate() {
            if states[4].is_null(r) {
                continue;
            }
            for c in 0..2 {
                let (op, p) = scores[c];
                let (on, n) = counts[c];
                let span = op[r] as usize..op[r + 1] as usize;
                if span.is_empty() {
                    continue;
                }
                if self.store.weighted() {
                    // A weighted call keeps its rows: a tally here was not written by it.
                    return internal_err!("auc: malformed partial state");
                }
                let (p, n) = (&p[span.clone()], &n[on[r] as usize..on[r + 1] as usize]);
                // Distinct probabilities, ascending (NaN fails both checks), each with rows.
                let ascending = p.windows(2).all(|w| w[0] < w[1]);
                let probabilities = p.iter().all(|x| (0.0..=1.0).contains(x));
                if p.len() != n.len() || !ascending || !probabilities || n.iter().any(|&k| k < 1) {
                    return internal_err!("auc: malformed partial state");
                }
                let tally = &mut self.tallies[g][c];
                let before = tally.bytes();
                *tally = tally.merged(p.iter().copied().zip(n.iter().map(|&k| k as u64)));
                self.tally_bytes = (self.tally_bytes + tally.bytes()).saturating_sub(before);
            }
        }
        for (&g, &from) in touched.iter().zip(&runs_before) {
            // usize::MAX: weighted (or counting turned off, in the tests).
            if self.next_count[g] != usize::MAX {
                self.count_runs(g, from);
                self.maybe_count(g);
            }
        }
        Ok(())
    }

    fn check_stored(&self, states: &[ArrayRef]) -> Result<()> {
        // The tallies are checked where they are merged.
        self.store.check_stored(states)
    }

    fn state(&self, range: Range<usize>) -> Result<Vec<ArrayRef>> {
        let mut out = self.store.state(range.clone());
        out.extend(Self::tally_state(&self.tallies[range]));
        Ok(out)
    }

    fn take_state(&mut self, range: Range<usize>) -> Result<Vec<ArrayRef>> {
        let mut out = self.store.take_state(range.clone());
        out.extend(Self::tally_state(&self.tallies[range.clone()]));
        for t in &mut self.tallies[range] {
            self.tally_bytes = self.tally_bytes.saturating_sub(t[0].bytes() + t[1].bytes());
            *t = Default::default();
        }
        Ok(out)
    }

    fn evaluate(&mut self, range: Range<usize>) -> Result<ArrayRef> {
        Ok(Arc::new(
            range
                .map(|g| auc_of(&mut self.store.groups[g], &self.tallies[g]))
                .collect::<Float64Array>(),
        ))
    }

    fn drain(&mut self, n: usize) {
        self.store.drain(n);
        for t in self.tallies.drain(..n) {
            self.tally_bytes = self.tally_bytes.saturating_sub(t[0].bytes() + t[1].bytes());
        }
        self.next_count.drain(..n);
    }

    fn size(&self) -> usize {
        self.store.size()
            + self.tally_bytes
            + self.tallies.capacity() * size_of::<[Tally; 2]>()
            + self.next_count.capacity() * size_of::<usize>()
    }

    fn native_labels(&self) -> bool {
        true
    }
}

/// Mann–Whitney AUC of a group's rows and tallies, ties counted one half; None when a
/// class has no weight. Unweighted, the count is exact (integers); weighted, sums of
/// weights (weighted groups have no tallies).
pub(crate) fn auc_of(rows: &mut Rows, tally: &[Tally; 2]) -> Option<f64> {
    if !rows.weighted() {
        // Each class is a few ascending parts (the group's own rows, the sorted partial
        // states it merged, read where they lie, and its tally): the count is bilinear in
        // the two classes, so every pair of a negative part and a positive part is swept in
        // step and the pair counts add up.
        let [negs, poss] = rows.sorted_parts();
        let mut num2: u128 = 0;
        for neg in &negs {
            for pos in &poss {
                num2 += pair_count2_sorted(neg, pos);
            }
        }
        // A group that never counted (distinct scores) has empty tallies: no pass over its
        // rows for them.
        let [neg_tally, pos_tally] = tally;
        if pos_tally.len() > 0 {
            for neg in &negs {
                num2 += pair_count2(runs_of(neg), pos_tally.runs());
            }
        }
        if neg_tally.len() > 0 {
            for pos in &poss {
                num2 += pair_count2(neg_tally.runs(), runs_of(pos));
            }
            num2 += pair_count2(neg_tally.runs(), pos_tally.runs());
        }
        let n: u128 = negs.iter().map(|x| x.len() as u128).sum::<u128>() + tally[0].rows();
        let p: u128 = poss.iter().map(|x| x.len() as u128).sum::<u128>() + tally[1].rows();
        return (n > 0 && p > 0).then(|| num2 as f64 / (2 * n * p) as f64);
    }
    let (mut neg_below, mut num, mut pos_total) = (0.0, 0.0, 0.0);
    for_each_score(rows, tally, |_, n_eq, p_eq| {
        num += p_eq * (neg_below + 0.5 * n_eq);
        neg_below += n_eq;
        pos_total += p_eq;
    });
    let neg_total = neg_below;
    (pos_total > 0.0 && neg_total > 0.0).then(|| num / (pos_total * neg_total))
}

/// Twice the Mann–Whitney count of ascending negatives `neg` against ascending positives
/// `pos`: Σ over positives of 2·(negatives below) + (negatives equal), in exact integers.
/// The rows' own loop: the hot path of `auc` over rows kept as rows, several times faster
/// than [`pair_count2`] over `runs_of` the same slices.
fn pair_count2_sorted(neg: &[f64], pos: &[f64]) -> u128 {
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

/// Twice the Mann–Whitney count of negatives against positives, each given as ascending
/// (score, rows) pairs with distinct scores: Σ over positives of 2·(negatives below) +
/// (negatives equal), in exact integers.
fn pair_count2(
    neg: impl Iterator<Item = (f64, u64)>,
    pos: impl Iterator<Item = (f64, u64)>,
) -> u128 {
    let mut neg = neg.peekable();
    let (mut below, mut num2) = (0u128, 0u128);
    for (v, k) in pos {
        while let Some(&(x, m)) = neg.peek() {
            if x < v {
                below += m as u128;
                neg.next();
            } else {
                break;
            }
        }
        let equal = match neg.peek() {
            Some(&(x, m)) if x == v => m as u128,
            _ => 0,
        };
        num2 += k as u128 * (2 * below + equal);
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

    fn kernel() -> AucKernel {
        AucKernel::new(None)
    }

    fn fed(k: &mut AucKernel, p: &[f64], y: &[f64]) {
        k.resize(1);
        let cols: Vec<ArrayRef> = vec![
            Arc::new(Float64Array::from(p.to_vec())),
            Arc::new(Float64Array::from(y.to_vec())),
        ];
        k.update(&cols, &vec![0; p.len()], None).unwrap();
    }

    fn value(k: &mut AucKernel) -> f64 {
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
                // Rows kept as rows: counting them is tested below.
                fin.next_count[0] = usize::MAX;
                for w in bounds.windows(2) {
                    let mut part = kernel();
                    if !sort_on_emit {
                        part.store = ValueStore::new("auc", 0, 1, None);
                    }
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

    /// Feeds `p`, `y` in batches of 8,192 rows, as a scan does.
    fn fed_in_batches(k: &mut AucKernel, p: &[f64], y: &[f64]) {
        for (p, y) in p.chunks(8192).zip(y.chunks(8192)) {
            fed(k, p, y);
        }
    }

    /// A group whose scores repeat (500 distinct) is counted once it has 65,536 rows: its
    /// state shrinks to the tallies and the value is exactly that of the rows kept as rows
    /// (counting turned off). An invariance test; the value itself is checked against
    /// scikit-learn in tests/slt/auc.slt (on rows that are counted there too).
    #[test]
    fn counted_rows_give_the_same_auc_in_a_small_state() {
        let (p, y) = data(300_000, 0x2545_F491_4F6C_DD1D);
        let mut counted = kernel();
        fed_in_batches(&mut counted, &p, &y);
        let mut kept = kernel();
        kept.resize(1);
        kept.next_count[0] = usize::MAX;
        fed_in_batches(&mut kept, &p, &y);
        assert!(counted.tallies[0][0].len() + counted.tallies[0][1].len() <= 1000);
        assert_eq!(kept.tallies[0], [Tally::default(), Tally::default()]);
        // At most the rows since the last count (with the vectors' doubling slack) and the
        // tallies, against every row.
        assert!(
            counted.size() <= 4 * COMPACT_FROM * 8 && kept.size() >= 300_000 * 8,
            "counted {} bytes, kept {}",
            counted.size(),
            kept.size()
        );
        assert_eq!(value(&mut counted), value(&mut kept));

        // Partial states that carry tallies, rows, or both merge to the same value.
        let mut fin = kernel();
        fin.resize(1);
        for (a, b) in [(0, 100_000), (100_000, 130_000), (130_000, 300_000)] {
            let mut part = kernel();
            fed_in_batches(&mut part, &p[a..b], &y[a..b]);
            let state = part.take_state(0..1).unwrap();
            assert_eq!(part.tally_bytes, 0, "taking the state frees the tallies");
            fin.merge(&state, &[0]).unwrap();
        }
        assert_eq!(value(&mut fin), value(&mut kept));
    }

    /// Partial states that kept their rows (emitted before they could count them) are
    /// counted where they are merged, when their sorted rows repeat: the final group keeps
    /// tallies instead of runs, and the value is unchanged.
    #[test]
    fn merged_rows_that_repeat_are_counted() {
        let (p, y) = data(200_000, 11);
        let mut all = kernel();
        all.resize(1);
        all.next_count[0] = usize::MAX;
        fed_in_batches(&mut all, &p, &y);
        let mut fin = kernel();
        fin.resize(1);
        for (a, b) in [(0, 40_000), (40_000, 90_000), (90_000, 200_000)] {
            let mut part = kernel();
            part.resize(1);
            part.next_count[0] = usize::MAX;
            fed_in_batches(&mut part, &p[a..b], &y[a..b]);
            fin.merge(&part.take_state(0..1).unwrap(), &[0]).unwrap();
        }
        assert_eq!(fin.store.groups[0].len(), 0, "every merged run was counted");
        assert!(fin.tallies[0][0].len() > 0 && fin.tallies[0][1].len() > 0);
        assert_eq!(value(&mut fin), value(&mut all));
    }

    /// Distinct scores are not counted (it would not save room), and are tried again only
    /// when the rows have grown fourfold.
    #[test]
    fn distinct_rows_stay_rows() {
        let p: Vec<f64> = (0..100_000).map(|i| (i as f64 + 0.5) / 100_000.0).collect();
        let y: Vec<f64> = (0..100_000)
            .map(|i| ((i * 7919) % 3 == 0) as u8 as f64)
            .collect();
        let mut k = kernel();
        fed_in_batches(&mut k, &p, &y);
        assert!(k.next_count[0] >= 4 * COMPACT_FROM, "{}", k.next_count[0]);
        assert_eq!(k.tallies[0], [Tally::default(), Tally::default()]);
        assert_eq!(k.store.groups[0].len(), 100_000);
    }

    /// A state whose tally is not ascending is refused, not summed into a wrong value.
    #[test]
    fn malformed_tallies_are_refused() {
        let (p, y) = data(100_000, 7);
        let mut part = kernel();
        fed_in_batches(&mut part, &p, &y);
        let mut state = part.take_state(0..1).unwrap();
        let part_state = state.clone();
        let scores = state[5].as_list::<i32>();
        let mut values = scores
            .values()
            .as_primitive::<arrow::datatypes::Float64Type>()
            .values()
            .to_vec();
        values.reverse();
        state[5] = list_array(
            scores.offsets().clone(),
            Arc::new(Float64Array::from(values)),
        );
        let mut fin = kernel();
        fin.resize(1);
        let err = fin.merge(&state, &[0]).unwrap_err().to_string();
        assert!(err.contains("auc: malformed partial state"), "{err}");

        // Ascending but not probabilities (each score + 1), and a single NaN score.
        for bad in [None, Some(f64::NAN)] {
            let mut state = part_state.clone();
            let scores = state[5].as_list::<i32>();
            let values: Vec<f64> = match bad {
                None => scores
                    .values()
                    .as_primitive::<arrow::datatypes::Float64Type>()
                    .values()
                    .iter()
                    .map(|v| v + 1.0)
                    .collect(),
                Some(x) => vec![x],
            };
            let offsets = match bad {
                None => scores.offsets().clone(),
                Some(_) => OffsetBuffer::from_lengths([1]),
            };
            let counts: ArrayRef = match bad {
                None => Arc::clone(&state[7]),
                Some(_) => list_array(
                    OffsetBuffer::from_lengths([1]),
                    Arc::new(Int64Array::from(vec![3])),
                ),
            };
            state[5] = list_array(offsets, Arc::new(Float64Array::from(values)));
            state[7] = counts;
            let mut fin = kernel();
            fin.resize(1);
            let err = fin.merge(&state, &[0]).unwrap_err().to_string();
            assert!(
                err.contains("auc: malformed partial state"),
                "{bad:?}: {err}"
            );
        }

        // Counts are refused by a weighted call (it never writes them).
        let mut counted = kernel();
        fed_in_batches(&mut counted, &p[..COMPACT_FROM], &y[..COMPACT_FROM]);
        assert_eq!(counted.store.groups[0].len(), 0, "all rows counted");
        let state = counted.take_state(0..1).unwrap();
        let mut weighted = AucKernel::new(Some(2));
        weighted.resize(1);
        let err = weighted.merge(&state, &[0]).unwrap_err().to_string();
        assert!(err.contains("auc: malformed partial state"), "{err}");
    }
}
