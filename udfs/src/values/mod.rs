//! Per-group storage of the rows themselves, for the metrics that need every value:
//! `auc`, and the data-dependent bins of `ece`/`mce`/`reliability`/`ace`/`rmsce`
//! (`'quantile'`, `'kumar'`).
//!
//! A row is kept in as little room as it needs: the label is not stored at all — rows go to
//! one vector of scores per class — so an unweighted row costs its 8-byte score; a weighted
//! row adds its 8-byte weight. [`ValueStore::size`] reports the bytes actually reserved so
//! DataFusion's memory pool sees them.
//!
//! The partial state is four `List<Float64>` columns: the scores of the negatives and of the
//! positives, and their weights (empty lists when the call has no weight). `auc_test` keeps a
//! second score in the weights' place ([`ValueStore::paired`]): it is sorted, spilled and
//! handed on with its row as a weight is.
//!
//! Merging does not copy a large state: a group keeps the incoming Arrow buffer's slice as a
//! *run* ([`Rows::runs`], and its weights' slice in [`Rows::runs_w`]), so a final
//! aggregation over a few big partial states holds each row once instead of once in the
//! states and once more in its own vectors. `auc` sorts its rows before it hands them on
//! ([`ValueStore::sort_on_emit`], in place), and every store its weighted rows, so those
//! runs arrive sorted and are read in order where they lie ([`Rows::sorted_parts`],
//! [`Rows::sorted_weighted_parts`]); `'quantile'` edges select order statistics across the
//! runs without sorting. The readers that need one sorted slice a class ([`Rows::sorted`])
//! first copy the runs into the group's own vectors.
//!
//! Under a memory limit, rows that no longer fit are sorted and spilled to disk (weights
//! beside their scores), and read back through a memory map as sorted runs of their own
//! ([`Rows::spilled`]; see [`spill`]). A class with more spilled runs than a reader reads at
//! once is merged into one spilled run instead of read back into memory. The readers that
//! read spilled runs in order let the pages they have read go from the process's resident
//! memory ([`spill::ReadBehind`]).

use std::ops::Range;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Float64Array};
use arrow::buffer::{OffsetBuffer, ScalarBuffer};
use arrow::datatypes::FieldRef;
use arrow::datatypes::Float64Type;
use datafusion_common::{exec_err, internal_err, Result};

use crate::common::{
    all_probabilities, all_weights, check_p, check_w, check_y, f64_list_state_fields, f64_lists,
    f64s, for_each_row, list_array, list_parts, list_values, usable_rows_pyw,
};
use crate::kernel::Filter;
use crate::kernel::Kernel;
use crate::labels::{all_labels, f64_labels, with_labels, Label};

mod distinct;
mod order;
pub(crate) mod spill;
mod sweep;
mod tally;
pub(crate) use distinct::at_least_distinct;
pub(crate) use order::{is_sorted_f64, rank_of_sorted, select_ranks, sort_f64};
pub(crate) use sweep::{
    class_runs, for_each_score, for_each_weighted_score, lower, sweep, WeightedRuns,
};
pub(crate) use tally::{distinct_in, runs_of, Tally};

/// Rows a vector holds before it grows by an eighth rather than doubling (8 MiB of f64).
const LARGE_ROWS: usize = 1 << 20;

/// Makes room for `extra` more values. A vector of [`LARGE_ROWS`] or more grows by an eighth
/// (or `extra`, if more) instead of doubling: the memory pool is told each vector's capacity,
/// and a doubled vector would claim up to twice what it holds, so a query that fits under
/// `--memory-limit` would fail. Blocks that large are mapped pages that the allocator
/// resizes in place (`mremap`), so the smaller steps copy little. Smaller vectors double as
/// usual.
#[inline]
pub(crate) fn make_room(v: &mut Vec<f64>, extra: usize) {
    if v.len() + extra > v.capacity() && v.len() >= LARGE_ROWS {
        v.reserve_exact(extra.max(v.len() / 8));
    }
}

/// Rows a batch is split at a time by [`push_by_label`] (two stack buffers of 8 KiB).
const SPLIT_ROWS: usize = 1024;

/// Appends `f` of each value of `values` to `neg` or `pos` by its label (0 or 1, checked),
/// without a branch on the label, which is random and mispredicted: a piece of the batch is
/// written to two small buffers at once (the buffer's end moved by the label), and each
/// list takes its buffer by one copy. The lists are written once, not zeroed first.
pub(crate) fn push_by_label<Y: Label>(
    values: &[f64],
    y: &[Y],
    neg: &mut Vec<f64>,
    pos: &mut Vec<f64>,
    f: impl Fn(f64) -> f64,
) {
    make_room(neg, values.len());
    make_room(pos, values.len());
    let (mut zeros, mut ones) = ([0.0; SPLIT_ROWS], [0.0; SPLIT_ROWS]);
    for (vs, ys) in values.chunks(SPLIT_ROWS).zip(y.chunks(SPLIT_ROWS)) {
        let (mut n0, mut n1) = (0, 0);
        for (&v, &yi) in vs.iter().zip(ys) {
            let v = f(v);
            zeros[n0] = v;
            ones[n1] = v;
            let one = yi.bit() as usize;
            n1 += one;
            n0 += 1 - one;
        }
        neg.extend_from_slice(&zeros[..n0]);
        pos.extend_from_slice(&ones[..n1]);
    }
}

/// The names of the four state fields of a [`ValueStore`].
pub(crate) const STATE_NAMES: [&str; 4] = ["neg_p", "pos_p", "neg_w", "pos_w"];

/// The state fields of an aggregate whose state is a [`ValueStore`].
pub(crate) fn state_fields(name: &str) -> Vec<FieldRef> {
    f64_list_state_fields(name, &STATE_NAMES)
}

/// A kernel whose state is the rows and whose value is `finish(rows)` (`auc`,
/// `ece_debiased`).
#[derive(Debug)]
pub(crate) struct RowsKernel {
    pub store: ValueStore,
    pub finish: fn(&mut Rows) -> Option<f64>,
}

impl Kernel for RowsKernel {
    crate::kernel::delegate_to_inner!(store: resize, num_groups, update, merge, check_stored, drain, size);

    fn empty(&self) -> Result<Self> {
        Ok(RowsKernel {
            store: self.store.empty(),
            finish: self.finish,
        })
    }
    fn state(&self, range: Range<usize>) -> Result<Vec<ArrayRef>> {
        Ok(self.store.state(range))
    }
    fn take_state(&mut self, range: Range<usize>) -> Result<Vec<ArrayRef>> {
        Ok(self.store.take_state(range))
    }
    fn evaluate(&mut self, range: Range<usize>) -> Result<ArrayRef> {
        let finish = self.finish;
        Ok(Arc::new(
            range
                .map(|g| finish(&mut self.store.groups[g]))
                .collect::<Float64Array>(),
        ))
    }
    fn native_labels(&self) -> bool {
        true
    }
}

/// The rows of one group, split by label: index 0 the negatives, 1 the positives.
#[derive(Debug, Default, Clone)]
pub(crate) struct Rows {
    /// Scores per class.
    pub p: [Vec<f64>; 2],
    /// Weights per class, parallel to `p`; empty when the call has no weight.
    pub w: [Vec<f64>; 2],
    /// More scores per class: slices of merged states' buffers, kept without a copy (see
    /// the module documentation).
    pub runs: [Vec<ScalarBuffer<f64>>; 2],
    /// The weights of the runs, a slice each, parallel to `runs`; empty in an unweighted
    /// group.
    pub runs_w: [Vec<ScalarBuffer<f64>>; 2],
    /// More scores per class, ascending: runs spilled to disk and mapped (by this store, or
    /// by the partial state it merged). Their bytes are not memory ([`spill`]).
    pub spilled: [Vec<ScalarBuffer<f64>>; 2],
    /// The weights of the spilled runs, a run each, parallel to `spilled`; empty in an
    /// unweighted group.
    pub spilled_w: [Vec<ScalarBuffer<f64>>; 2],
}

/// Appends `runs` to `own`, reserving their length once.
fn append(own: &mut Vec<f64>, runs: Vec<ScalarBuffer<f64>>) {
    if runs.is_empty() {
        return;
    }
    own.reserve_exact(runs.iter().map(|r| r.len()).sum());
    for r in runs {
        own.extend_from_slice(&r);
    }
}

/// The order of two runs (scores and weights) by their contents alone: length, then the
/// scores' bits, then the weights'. Runs equal in all three are interchangeable.
pub(crate) fn run_order(a: (&[f64], &[f64]), b: (&[f64], &[f64])) -> std::cmp::Ordering {
    fn bits(s: &[f64]) -> impl Iterator<Item = u64> + '_ {
        s.iter().map(|x| x.to_bits())
    }
    // The ends first: runs of different rows differ there but for rare ties.
    let ends = |s: &[f64]| {
        (
            s.first().map(|x| x.to_bits()),
            s.last().map(|x| x.to_bits()),
        )
    };
    a.0.len()
        .cmp(&b.0.len())
        .then_with(|| ends(a.0).cmp(&ends(b.0)))
        .then_with(|| bits(a.0).cmp(bits(b.0)))
        .then_with(|| bits(a.1).cmp(bits(b.1)))
}

/// Puts each run of equal `key`s of sorted `rows` in the order of `tie` (a weight's bits),
/// so that their order does not depend on the order the rows came in. One pass; runs of
/// ties are rare where scores are distinct, and sorting by both at once would slow every
/// comparison of the main sort.
fn order_ties<T>(rows: &mut [T], key: impl Fn(&T) -> u64, tie: impl Fn(&T) -> u64) {
    let mut start = 0;
    while start < rows.len() {
        let k = key(&rows[start]);
        let mut end = start + 1;
        while end < rows.len() && key(&rows[end]) == k {
            end += 1;
        }
        if end - start > 1 {
            rows[start..end].sort_unstable_by_key(&tie);
        }
        start = end;
    }
}

/// Sorts scores `p` ascending in `total_cmp` order, each weight of `w` following its score,
/// in 24 bytes a row at most where a copy of the pairs beside them would take 32: `p` grows
/// to hold (order-preserving key, weight) pairs, `w` is freed, the pairs are sorted in place
/// (equal scores by their weights' bits, so the order does not depend on the order the rows
/// came in) and split back.
fn sort_weighted(p: &mut Vec<f64>, w: &mut Vec<f64>) {
    let n = p.len();
    if n < 2 {
        return;
    }
    p.resize(2 * n, 0.0);
    // Backwards, so that no score is overwritten before it is read (2i ≥ i).
    for i in (0..n).rev() {
        p[2 * i] = f64::from_bits(order::key(p[i]));
        p[2 * i + 1] = w[i];
    }
    *w = vec![];
    let (pairs, _) = p.as_chunks_mut::<2>();
    pairs.sort_unstable_by_key(|pair| pair[0].to_bits());
    order_ties(pairs, |pair| pair[0].to_bits(), |pair| pair[1].to_bits());
    w.reserve_exact(n);
    w.extend(pairs.iter().map(|pair| pair[1]));
    // Forwards, so that no pair is overwritten before it is read (i ≤ 2i).
    for i in 0..n {
        p[i] = order::unkey(p[2 * i].to_bits());
    }
    p.truncate(n);
    p.shrink_to_fit();
}

/// Rows of a weighted class's own rows sorted at a time for a spill to merge
/// ([`sort_weighted_pieces`]): 1M rows, a 16 MiB scratch of pairs, where sorting them whole
/// takes 8 bytes a row more than the rows hold ([`sort_weighted`]).
const SPILL_SORT_PIECE: usize = 1 << 20;

/// Sorts each piece of `piece` rows of scores `p` ([`SPILL_SORT_PIECE`]) ascending in
/// `total_cmp` order, each weight of `w` following its score, through one scratch of
/// (key, weight) pairs the size of a piece.
fn sort_weighted_pieces(p: &mut [f64], w: &mut [f64], piece: usize) {
    let mut scratch: Vec<(u64, f64)> = Vec::with_capacity(p.len().min(piece));
    for (ps, ws) in p.chunks_mut(piece).zip(w.chunks_mut(piece)) {
        scratch.clear();
        scratch.extend(ps.iter().zip(ws.iter()).map(|(&s, &x)| (order::key(s), x)));
        scratch.sort_unstable_by_key(|pair| pair.0);
        order_ties(&mut scratch, |pair| pair.0, |pair| pair.1.to_bits());
        for ((s, x), &(k, weight)) in ps.iter_mut().zip(ws.iter_mut()).zip(&scratch) {
            *s = order::unkey(k);
            *x = weight;
        }
    }
}

/// Sorts scores `p` ascending, the weights of `w` (empty: unweighted) following them.
fn sort_rows(p: &mut Vec<f64>, w: &mut Vec<f64>) {
    if w.is_empty() {
        sort_f64(p);
    } else {
        sort_weighted(p, w);
    }
}

/// Rows a piece of a group's own rows needs to be sorted beside another, a piece a core.
const PARALLEL_SORT_ROWS: usize = 1 << 16;

/// Rows from which an unweighted class is sorted in two pieces ([`Rows::sort_own_both`]).
const SPLIT_SORT_ROWS: usize = 1 << 20;

/// A piece of a group's own rows to sort: keys of an unweighted class split in two, or a
/// whole class's scores and weights.
enum SortPiece<'a> {
    Keys(&'a mut [f64]),
    Rows(&'a mut Vec<f64>, &'a mut Vec<f64>),
}

impl SortPiece<'_> {
    fn len(&self) -> usize {
        match self {
            SortPiece::Keys(k) => k.len(),
            SortPiece::Rows(p, _) => p.len(),
        }
    }

    fn sort(&mut self) {
        match self {
            SortPiece::Keys(k) => k.sort_unstable_by_key(|x| x.to_bits()),
            SortPiece::Rows(p, w) => sort_rows(p, w),
        }
    }
}

/// Most sources (own rows and runs) per class that [`Rows::sorted_parts`] reads in place;
/// past it the runs are copied into the group's own vectors and sorted with them.
const MAX_SORTED_PARTS: usize = 4;

impl Rows {
    pub(crate) fn len(&self) -> usize {
        self.p[0].len()
            + self.p[1].len()
            + self.runs.iter().flatten().map(|r| r.len()).sum::<usize>()
            + self
                .spilled
                .iter()
                .flatten()
                .map(|r| r.len())
                .sum::<usize>()
    }

    fn has_spilled(&self) -> bool {
        self.spilled.iter().any(|s| !s.is_empty())
    }

    /// Whether the rows carry weights (held, in runs or spilled).
    pub(crate) fn weighted(&self) -> bool {
        self.w.iter().any(|w| !w.is_empty())
            || self
                .runs_w
                .iter()
                .chain(&self.spilled_w)
                .any(|w| !w.is_empty())
    }

    fn bytes(&self) -> usize {
        let runs: usize = self
            .runs
            .iter()
            .chain(&self.runs_w)
            .flatten()
            .map(|r| r.len())
            .sum();
        (self.p[0].capacity()
            + self.p[1].capacity()
            + self.w[0].capacity()
            + self.w[1].capacity()
            + runs)
            * size_of::<f64>()
    }

    /// Class `c`'s sources, each scores with their weights (an empty slice unweighted): the
    /// own vector, then the runs in memory and spilled in an order of their contents (see
    /// [`run_order`]), not the order the partial states arrived in, so that what is summed
    /// over the parts one after the other does not change from one run to the next.
    fn sources(&self, c: usize) -> Vec<(&[f64], &[f64])> {
        fn with_weights<'a>(
            runs: &'a [ScalarBuffer<f64>],
            weights: &'a [ScalarBuffer<f64>],
        ) -> impl Iterator<Item = (&'a [f64], &'a [f64])> {
            (0..runs.len()).map(|i| (&runs[i][..], weights.get(i).map_or(&[][..], |w| &w[..])))
        }
        let mut runs: Vec<_> = with_weights(&self.runs[c], &self.runs_w[c])
            .chain(with_weights(&self.spilled[c], &self.spilled_w[c]))
            .collect();
        runs.sort_by(|a, b| run_order(*a, *b));
        std::iter::once((&self.p[c][..], &self.w[c][..]))
            .chain(runs)
            .collect()
    }

    /// Class `c`'s scores: the own vector, then the runs ([`Self::sources`]).
    pub(crate) fn parts(&self, c: usize) -> Vec<&[f64]> {
        self.sources(c).into_iter().map(|(p, _)| p).collect()
    }

    /// Class `c`'s weights, parallel to [`Self::parts`] (empty slices unweighted).
    fn weight_parts(&self, c: usize) -> Vec<&[f64]> {
        self.sources(c).into_iter().map(|(_, w)| w).collect()
    }

    /// Copies the runs, spilled ones too, into the own vectors (a state handed on from
    /// memory: one list a class).
    fn absorb_runs(&mut self) {
        for c in 0..2 {
            self.absorb_class(c);
        }
    }

    fn absorb_class(&mut self, c: usize) {
        self.absorb_runs_of(c);
        self.absorb_spilled_of(c);
    }

    /// Copies class `c`'s runs (and their weights) into its own vectors.
    fn absorb_runs_of(&mut self, c: usize) {
        append(&mut self.p[c], std::mem::take(&mut self.runs[c]));
        append(&mut self.w[c], std::mem::take(&mut self.runs_w[c]));
    }

    /// Copies class `c`'s spilled runs (and their weights) into its own vectors.
    fn absorb_spilled_of(&mut self, c: usize) {
        append(&mut self.p[c], std::mem::take(&mut self.spilled[c]));
        append(&mut self.w[c], std::mem::take(&mut self.spilled_w[c]));
    }

    /// Sorts class `c`'s own rows by score, weights following their scores.
    fn sort_own(&mut self, c: usize) {
        sort_rows(&mut self.p[c], &mut self.w[c]);
    }

    /// Sorts both classes' own rows, side by side (a piece a core) when there is more than
    /// one large piece: an unweighted class of [`SPLIT_SORT_ROWS`] rows or more is split in
    /// two at a sampled median of its keys ([`order::split_keys`]) and each side sorted on its
    /// own, so that one large class (`cbpe`'s, or `auc`'s negatives) keeps two cores busy.
    fn sort_own_both(&mut self) {
        let cores = crate::parallel::cores();
        let mut keyed = [false; 2];
        let mut pieces: Vec<SortPiece> = vec![];
        for (c, (p, w)) in self.p.iter_mut().zip(&mut self.w).enumerate() {
            // A class already sorted (a second reading of a group) is left as it is: a split
            // would undo its order.
            if cores > 1 && w.is_empty() && p.len() >= SPLIT_SORT_ROWS && !is_sorted_f64(p) {
                for x in p.iter_mut() {
                    *x = f64::from_bits(order::key(*x));
                }
                let at = order::split_keys(p);
                let (below, rest) = p.split_at_mut(at);
                pieces.extend([SortPiece::Keys(below), SortPiece::Keys(rest)]);
                keyed[c] = true;
            } else {
                pieces.push(SortPiece::Rows(p, w));
            }
        }
        pieces.sort_by_key(|piece| std::cmp::Reverse(piece.len()));
        let large = pieces
            .iter()
            .filter(|p| p.len() >= PARALLEL_SORT_ROWS)
            .count();
        let threads = if large > 1 { cores } else { 1 };
        crate::parallel::for_each_mut(&mut pieces, threads, SortPiece::sort);
        drop(pieces);
        for (p, keyed) in self.p.iter_mut().zip(keyed) {
            if keyed {
                for x in p.iter_mut() {
                    *x = order::unkey(x.to_bits());
                }
            }
        }
    }

    /// Makes every source of class `c` ascending for a spill to merge ([`Self::spill_sources`]):
    /// the merged runs that did not arrive sorted are copied into the own rows, which are
    /// sorted (weighted ones a piece at a time). The class holds the same rows.
    fn sort_parts(&mut self, c: usize) {
        let runs = std::mem::take(&mut self.runs[c]);
        let mut weights = std::mem::take(&mut self.runs_w[c]).into_iter();
        for run in runs {
            let w = weights.next();
            if is_sorted_f64(&run) {
                self.runs[c].push(run);
                self.runs_w[c].extend(w);
            } else {
                append(&mut self.p[c], vec![run]);
                append(&mut self.w[c], w.into_iter().collect());
            }
        }
        if self.w[c].is_empty() {
            sort_f64(&mut self.p[c]);
        } else {
            sort_weighted_pieces(&mut self.p[c], &mut self.w[c], SPILL_SORT_PIECE);
        }
    }

    /// Class `c`'s ascending sources for a spill to merge, once [`Self::sort_parts`] has made
    /// them so: the own rows (weighted ones in their sorted pieces), the runs and, with
    /// `spilled`, the spilled runs; and their weights, parallel (empty slices unweighted).
    fn spill_sources(&self, c: usize, spilled: bool) -> (Vec<&[f64]>, Vec<&[f64]>) {
        let (mut scores, mut weights): (Vec<&[f64]>, Vec<&[f64]>) = if self.w[c].is_empty() {
            (vec![&self.p[c][..]], vec![&[][..]])
        } else {
            (
                self.p[c].chunks(SPILL_SORT_PIECE).collect(),
                self.w[c].chunks(SPILL_SORT_PIECE).collect(),
            )
        };
        let weighted = self.weighted();
        let mut sources = vec![(&self.runs[c], &self.runs_w[c])];
        if spilled {
            sources.push((&self.spilled[c], &self.spilled_w[c]));
        }
        for (runs, runs_w) in sources {
            for (i, run) in runs.iter().enumerate() {
                scores.push(run);
                weights.push(if weighted { &runs_w[i][..] } else { &[] });
            }
        }
        (scores, weights)
    }

    /// Class `c`'s own rows and runs merged, with its spilled runs when `all` (else beside
    /// them), into one spilled run (the own rows' memory freed); false when there is no
    /// spill target or the write fails (the class then holds the same rows).
    fn spill_class(&mut self, c: usize, func: &'static str, all: bool) -> bool {
        let Some(target) = spill::target() else {
            return false;
        };
        self.sort_parts(c);
        let weighted = self.weighted();
        let written = (|| {
            let mut w = spill::RunWriter::new(&target, func)?;
            let (scores, weights) = self.spill_sources(c, all);
            w.push_merged(&scores)?;
            if weighted {
                w.push_merged_weights(&scores, &weights)?;
            }
            w.finish()
        })();
        match written {
            Ok(Some((written, at))) => {
                let run = |k: usize| written.slice(at[k].0, at[k].1);
                if all {
                    self.spilled[c].clear();
                    self.spilled_w[c].clear();
                }
                self.spilled[c].push(run(0));
                if weighted {
                    self.spilled_w[c].push(run(1));
                }
                self.runs[c] = vec![];
                self.runs_w[c] = vec![];
                self.p[c] = vec![];
                self.w[c] = vec![];
                true
            }
            Ok(None) => true,
            Err(_) => false,
        }
    }

    /// The scores of each class as ascending slices, sorting where needed: the own vector in
    /// place, and runs that arrived sorted read where they lie. Runs that are not sorted, or
    /// more than [`MAX_SORTED_PARTS`] sources, are absorbed and sorted. A group with
    /// spilled runs and more sources than that merges them all into one spilled run instead
    /// (its memory stays free).
    pub(crate) fn sorted_parts(&mut self) -> [Vec<&[f64]>; 2] {
        self.make_parts_sorted(true);
        [self.parts(0), self.parts(1)]
    }

    /// [`Self::sorted_parts`], taking the merged runs' order on trust: a merged run is not
    /// read to check that it is ascending (a pass over every row, from memory: the runs are
    /// rarely in a cache by then). For a reader that checks the order as it reads the parts,
    /// and calls [`Self::sorted_parts`] when one is out of order.
    pub(crate) fn parts_runs_trusted(&mut self) -> [Vec<&[f64]>; 2] {
        self.make_parts_sorted(false);
        [self.parts(0), self.parts(1)]
    }

    /// [`Self::sorted_parts`] with each part's weights (empty slices in an unweighted group).
    pub(crate) fn sorted_weighted_parts(&mut self) -> [Vec<(&[f64], &[f64])>; 2] {
        self.make_parts_sorted(true);
        [0, 1].map(|c| self.sources(c))
    }

    /// Sorts the own rows, and absorbs into them the runs that are not ascending (checked
    /// when `check_runs`) or too many to read in place.
    fn make_parts_sorted(&mut self, check_runs: bool) {
        for c in 0..2 {
            // Under a memory limit (the class has spilled), weighted rows too many to sort
            // in memory without 8 bytes a row more are written out beside the spilled runs.
            if !self.spilled[c].is_empty()
                && !self.w[c].is_empty()
                && self.p[c].len() >= SPILL_SORT_PIECE
            {
                self.spill_class(c, "spilled rows", false);
            }
            let sources = 1 + self.runs[c].len() + self.spilled[c].len();
            if !self.spilled[c].is_empty()
                && sources > MAX_SORTED_PARTS
                && self.spill_class(c, "spilled rows", true)
            {
                continue;
            }
            let sorted = !check_runs || self.runs[c].iter().all(|r| is_sorted_f64(r));
            if !sorted || sources > MAX_SORTED_PARTS {
                self.absorb_runs_of(c);
                if self.spilled[c].len() + 1 > MAX_SORTED_PARTS {
                    // No spill target any more: back in memory.
                    self.absorb_spilled_of(c);
                }
            }
        }
        self.sort_own_both();
    }

    /// Each class's scores as one ascending slice, for the readers of unweighted rows that
    /// need one (weighted readers take [`Self::sorted_weighted_parts`]). A class with spilled
    /// runs is merged into one spilled run (its memory stays free; in memory if the disk
    /// fails); any other is sorted in memory, its runs absorbed first.
    pub(crate) fn sorted(&mut self) -> [&[f64]; 2] {
        debug_assert!(!self.weighted(), "Rows::sorted of weighted rows");
        for c in 0..2 {
            let one_spilled =
                self.spilled[c].len() == 1 && self.p[c].is_empty() && self.runs[c].is_empty();
            if !self.spilled[c].is_empty()
                && (one_spilled || self.spill_class(c, "spilled rows", true))
            {
                continue;
            }
            self.absorb_class(c);
        }
        self.sort_own_both();
        [0, 1].map(|c| match self.spilled[c].first() {
            Some(run) => &run[..],
            None => &self.p[c][..],
        })
    }
}

#[derive(Debug)]
pub(crate) struct ValueStore {
    func: &'static str,
    /// Positions of p, y and (optional) w among the call's arguments.
    p_col: usize,
    y_col: usize,
    w_col: Option<usize>,
    /// The column beside the scores is a second score (`auc_test`: checked as a
    /// probability), named with the first as the call names them; None: a weight.
    paired: Option<[&'static str; 2]>,
    pub(crate) groups: Vec<Rows>,
    bytes: usize,
    /// Sort each class before handing the rows on as a partial state (`auc`: the final
    /// aggregation then reads the states in order where they lie). Weighted rows are always
    /// sorted before they are handed on.
    sort_on_emit: bool,
    /// The reservation that holds `bytes` when a spill target is installed
    /// ([`spill::Held`]; [`Self::size`] then leaves `bytes` out).
    held: spill::Held,
    /// Where unweighted rows spill to, when a target is installed.
    spill_to: Option<spill::SpillTarget>,
    /// Spill files written since the spilled runs were last merged into one file
    /// ([`MAX_SPILL_FILES`]).
    spill_files: usize,
    /// Rows' bytes past which the store spills even when the pool has room
    /// ([`Self::spilling_early`]).
    spill_above: usize,
    /// Spill files written in all (the tests).
    #[cfg(test)]
    files_written: usize,
}

/// A group's class written by [`ValueStore::write_runs`]: the group, the class, the run of
/// its scores and, weighted, the run of their weights.
type Written = (usize, usize, ScalarBuffer<f64>, Option<ScalarBuffer<f64>>);

/// Spill files a store writes before it merges its groups' spilled runs into one file: each
/// file holds an open descriptor and a mapping, and a group reads its runs in one pass.
const MAX_SPILL_FILES: usize = 16;

/// Smallest span of a merged state that a group keeps as a run instead of copying: smaller
/// ones are copied (a run costs a buffer reference, and keeps the whole incoming buffer
/// alive while any group holds a slice of it).
pub(crate) const MIN_RUN: usize = 4096;

impl ValueStore {
    pub(crate) fn new(
        func: &'static str,
        p_col: usize,
        y_col: usize,
        w_col: Option<usize>,
    ) -> Self {
        Self {
            func,
            p_col,
            y_col,
            w_col,
            paired: None,
            groups: vec![],
            bytes: 0,
            sort_on_emit: false,
            spill_files: 0,
            spill_above: usize::MAX,
            #[cfg(test)]
            files_written: 0,
            held: spill::Held::new(func),
            spill_to: spill::target(),
        }
    }

    /// The same store, spilling to `target` (the tests: [`spill::spill_to`] is the process's).
    #[cfg(test)]
    fn spilling_to(mut self, target: spill::SpillTarget) -> Self {
        self.held = target.held(self.func);
        self.spill_to = Some(target);
        self
    }

    /// The same store, sorting its rows before handing them on (see [`Self::sort_on_emit`]).
    pub(crate) fn sorted_on_emit(mut self) -> Self {
        self.sort_on_emit = true;
        self
    }

    /// The same store, spilling whenever its rows pass a quarter of the pool's limit: a
    /// store that a kernel fills while it evaluates (`auc_test`'s rows by their second
    /// score), which would otherwise take all the room the pool has left, leaving none for
    /// the memory the pool does not see (the scan's batches).
    pub(crate) fn spilling_early(mut self) -> Self {
        if let Some(limit) = self.spill_to.as_ref().and_then(spill::SpillTarget::limit) {
            self.spill_above = limit / 4;
        }
        self
    }

    /// The same store, keeping a second score beside each score in place of a weight (in
    /// the weights' place: sorted, spilled and handed on with the scores), the two checked
    /// as probabilities named `names`.
    pub(crate) fn paired(mut self, names: [&'static str; 2]) -> Self {
        self.paired = Some(names);
        self
    }

    pub(crate) fn empty(&self) -> Self {
        Self {
            sort_on_emit: self.sort_on_emit,
            paired: self.paired,
            spill_above: self.spill_above,
            ..Self::new(self.func, self.p_col, self.y_col, self.w_col)
        }
    }

    pub(crate) fn weighted(&self) -> bool {
        self.w_col.is_some()
    }

    crate::kernel::groups_in_vec!(pub(crate) groups);

    #[inline]
    fn push(&mut self, g: usize, p: f64, y: f64, w: Option<f64>) {
        let rows = &mut self.groups[g];
        let c = (y == 1.0) as usize;
        let before = rows.p[c].capacity() + rows.w[c].capacity();
        make_room(&mut rows.p[c], 1);
        rows.p[c].push(p);
        if let Some(w) = w {
            make_room(&mut rows.w[c], 1);
            rows.w[c].push(w);
        }
        let after = rows.p[c].capacity() + rows.w[c].capacity();
        self.bytes += (after - before) * size_of::<f64>();
    }

    /// The fast path of one group and checked rows (weights too, when given): every score
    /// (and weight) is written to the end of both classes' vectors and only its own class's
    /// length advances, so there is no branch on the label (which real labels would
    /// mispredict half the time).
    fn push_all<Y: Label>(&mut self, p: &[f64], y: &[Y], w: Option<&[f64]>) {
        let rows = &mut self.groups[0];
        let capacity = |r: &Rows| r.p.iter().chain(&r.w).map(Vec::capacity).sum::<usize>();
        let before = capacity(rows);
        let columns = std::iter::once((&mut rows.p, p)).chain(w.map(|w| (&mut rows.w, w)));
        for ([neg, pos], values) in columns {
            push_by_label(values, y, neg, pos, |x| x);
        }
        self.bytes += (capacity(&self.groups[0]) - before) * size_of::<f64>();
    }

    /// Appends rows of class `c` to the store's one group, each score of `p` with the value
    /// of `w` beside it (a kernel that fills a store itself: `auc_test`'s rows by their
    /// second score), spilling as [`Self::update`] does when the pool refuses them.
    pub(crate) fn extend_class(&mut self, c: usize, p: &[f64], w: &[f64]) -> Result<()> {
        self.resize(1);
        let rows = &mut self.groups[0];
        let before = rows.p[c].capacity() + rows.w[c].capacity();
        make_room(&mut rows.p[c], p.len());
        rows.p[c].extend_from_slice(p);
        make_room(&mut rows.w[c], w.len());
        rows.w[c].extend_from_slice(w);
        let after = rows.p[c].capacity() + rows.w[c].capacity();
        self.bytes += (after - before) * size_of::<f64>();
        self.fit_budget()
    }

    /// Adds the usable rows; the label column may be any of `crate::labels::is_native`'s
    /// types (the kernels that keep rows read labels natively).
    pub(crate) fn update(
        &mut self,
        values: &[ArrayRef],
        groups: &[usize],
        filter: Filter,
    ) -> Result<()> {
        let func = self.func;
        let p = f64s(&values[self.p_col]).values().clone();
        let w = self.w_col.map(|i| f64s(&values[i]).values().clone());
        let mask = usable_rows_pyw(values, (self.p_col, self.y_col), self.w_col, filter);
        let w_ok = w.as_ref().is_none_or(|w| match self.paired {
            Some(_) => all_probabilities(w),
            None => all_weights(w),
        });
        if mask.is_none() && self.groups.len() == 1 && w_ok && all_probabilities(&p) {
            let added = with_labels!(&values[self.y_col], |y| {
                let ok = all_labels(y);
                if ok {
                    self.push_all(&p, y, w.as_deref());
                }
                ok
            });
            if added == Some(true) {
                return self.fit_budget();
            }
        }
        let y = f64_labels(&values[self.y_col])?;
        let paired = self.paired;
        for_each_row(p.len(), &mask, |i| {
            let pi = check_p(func, paired.map_or("p", |n| n[0]), p[i])?;
            let yi = check_y(func, y[i])?;
            let wi = match (&w, paired) {
                (Some(w), Some([_, second])) => Some(check_p(func, second, w[i])?),
                (Some(w), None) => Some(check_w(func, w[i])?),
                (None, _) => None,
            };
            self.push(groups[i], pi, yi, wi);
            Ok(())
        })?;
        self.fit_budget()
    }

    /// Grows or shrinks the reservation to the rows held ([`Self::held_bytes`]); when the
    /// pool refuses and the rows can spill, spills every group's rows and tries again (the
    /// pool's error if even that does not fit).
    fn fit_budget(&mut self) -> Result<()> {
        if self.bytes > self.spill_above && self.spill_to.is_some() {
            self.spill()?;
        }
        match self.held.follow(self.held_bytes()) {
            Err(_) if self.spill_to.is_some() => {
                self.spill()?;
                self.held.follow(self.held_bytes())
            }
            other => other,
        }
    }

    /// The bytes the reservation holds: the rows', and in a weighted store that can spill
    /// the scratch its spill sorts them through ([`sort_weighted_pieces`]: 16 bytes a row of
    /// a piece, no more than the rows take).
    fn held_bytes(&self) -> usize {
        let scratch = if self.weighted() && self.spill_to.is_some() {
            self.bytes.min(SPILL_SORT_PIECE * 2 * size_of::<f64>())
        } else {
            0
        };
        self.bytes + scratch
    }

    /// Writes every group's own rows and merged runs, each class sorted, to one spilled
    /// file, and keeps them as a spilled run of the group (the memory freed).
    fn spill(&mut self) -> Result<()> {
        // Runs that arrived sorted are merged where they lie; others are sorted with the
        // own rows.
        for rows in &mut self.groups {
            for c in 0..2 {
                if !rows.p[c].is_empty() || !rows.runs[c].is_empty() {
                    rows.sort_parts(c);
                }
            }
        }
        let written = self.write_runs(|rows, c| rows.spill_sources(c, false))?;
        for (g, c, run, weights) in written {
            let rows = &mut self.groups[g];
            rows.p[c] = vec![];
            rows.w[c] = vec![];
            rows.runs[c] = vec![];
            rows.runs_w[c] = vec![];
            rows.spilled[c].push(run);
            rows.spilled_w[c].extend(weights);
        }
        self.bytes = self.groups.iter().map(Rows::bytes).sum();
        self.spill_files += 1;
        #[cfg(test)]
        {
            self.files_written += 1;
        }
        if self.spill_files >= MAX_SPILL_FILES {
            self.merge_spilled()?;
        }
        Ok(())
    }

    /// Merges each group's spilled runs, class by class, into one run, all in one new file
    /// (the old files go with their runs).
    fn merge_spilled(&mut self) -> Result<()> {
        let written = self.write_runs(|rows, c| {
            (
                rows.spilled[c].iter().map(|r| &r[..]).collect(),
                rows.spilled_w[c].iter().map(|r| &r[..]).collect(),
            )
        })?;
        for (g, c, run, weights) in written {
            let rows = &mut self.groups[g];
            rows.spilled[c] = vec![run];
            rows.spilled_w[c] = weights.into_iter().collect();
        }
        self.spill_files = 0;
        Ok(())
    }

    /// Writes the ascending merge of the scores of `parts(rows, c)` (each part ascending),
    /// and in a weighted store their weights in the same order, of every group and class
    /// that has rows there to one spill file; the (group, class, scores' run, weights' run)
    /// written.
    fn write_runs<'a>(
        &'a self,
        parts: impl Fn(&'a Rows, usize) -> (Vec<&'a [f64]>, Vec<&'a [f64]>),
    ) -> Result<Vec<Written>> {
        let Some(target) = &self.spill_to else {
            return Ok(vec![]);
        };
        let weighted = self.weighted();
        let mut writer = spill::RunWriter::new(target, self.func)?;
        let mut written = vec![];
        for (g, rows) in self.groups.iter().enumerate() {
            for c in 0..2 {
                let (scores, weights) = parts(rows, c);
                if scores.iter().any(|p| !p.is_empty()) {
                    writer.push_merged(&scores)?;
                    if weighted {
                        writer.push_merged_weights(&scores, &weights)?;
                    }
                    written.push((g, c));
                }
            }
        }
        let Some((all, at)) = writer.finish()? else {
            return Ok(vec![]);
        };
        let per = 1 + weighted as usize;
        let run = |k: usize| all.slice(at[k].0, at[k].1);
        Ok(written
            .into_iter()
            .enumerate()
            .map(|(k, (g, c))| (g, c, run(per * k), weighted.then(|| run(per * k + 1))))
            .collect())
    }

    /// Four list columns (negative scores, positive scores, their weights) for `range`.
    pub(crate) fn state(&self, range: Range<usize>) -> Vec<ArrayRef> {
        let groups = &self.groups[range];
        let list = |get: &dyn Fn(&Rows) -> Vec<&[f64]>| -> ArrayRef {
            let offsets = OffsetBuffer::from_lengths(
                groups
                    .iter()
                    .map(|r| get(r).iter().map(|s| s.len()).sum::<usize>()),
            );
            let mut vals = Vec::with_capacity(*offsets.last().unwrap_or(&0) as usize);
            for r in groups {
                for part in get(r) {
                    vals.extend_from_slice(part);
                }
            }
            list_array(offsets, Arc::new(Float64Array::from(vals)))
        };
        vec![
            list(&|r| r.parts(0)),
            list(&|r| r.parts(1)),
            list(&|r| r.weight_parts(0)),
            list(&|r| r.weight_parts(1)),
        ]
    }

    /// [`ValueStore::state`], moving the rows out: one group's rows become the lists'
    /// buffers without a copy; several are concatenated, each group freed once copied.
    /// Groups with spilled runs hand on one spilled run a class (all of `range` is then
    /// written to one file, each class's rows merged in order).
    pub(crate) fn take_state(&mut self, range: Range<usize>) -> Vec<ArrayRef> {
        let mut groups: Vec<Rows> = self.groups[range].iter_mut().map(std::mem::take).collect();
        if groups.iter().any(Rows::has_spilled) || !self.room_to_sort(&groups) {
            let mut bytes = 0;
            for rows in &groups {
                bytes += rows.bytes();
            }
            self.bytes = self.bytes.saturating_sub(bytes);
            self.shrink_budget();
            match self.spilled_state(&mut groups) {
                Ok(columns) => return columns,
                // The disk failed: handed on from memory.
                Err(_) => groups.iter_mut().for_each(Rows::absorb_runs),
            }
        }
        for rows in groups.iter_mut() {
            self.bytes = self.bytes.saturating_sub(rows.bytes());
            rows.absorb_runs();
            if self.sort_on_emit || self.weighted() {
                // Every reader of weighted rows needs them sorted: sorted on the partitions'
                // cores, the final aggregation reads them where they lie, as runs.
                (0..2).for_each(|c| rows.sort_own(c));
            }
        }
        let mut columns: [Vec<Vec<f64>>; 4] = Default::default();
        for rows in groups {
            let Rows {
                p: [p0, p1],
                w: [w0, w1],
                ..
            } = rows;
            for (k, v) in [p0, p1, w0, w1].into_iter().enumerate() {
                columns[k].push(v);
            }
        }
        let out = columns.into_iter().map(f64_lists).collect();
        self.shrink_budget();
        out
    }

    /// Whether the pool grants the 8 bytes a row more that sorting `groups`' weighted rows
    /// in memory takes ([`sort_weighted`]), for a state handed on; the reservation grows by
    /// them (and shrinks once the rows are handed on). Always true without a spill target,
    /// unweighted, or below [`SPILL_SORT_PIECE`] rows a class.
    fn room_to_sort(&mut self, groups: &[Rows]) -> bool {
        if !self.weighted() || self.spill_to.is_none() {
            return true;
        }
        let class_rows = |r: &Rows, c: usize| {
            r.p[c].len() + r.runs[c].iter().map(|run| run.len()).sum::<usize>()
        };
        let most = groups
            .iter()
            .flat_map(|r| [class_rows(r, 0), class_rows(r, 1)])
            .max()
            .unwrap_or(0);
        most < SPILL_SORT_PIECE
            || self
                .held
                .follow(self.bytes + most * size_of::<f64>())
                .is_ok()
    }

    /// The four state columns of `groups` with each class's rows merged into one spilled
    /// run, all in one file: the negatives' scores, the positives', then (weighted) their
    /// weights in the same order; unweighted, empty weight lists.
    fn spilled_state(&self, groups: &mut [Rows]) -> Result<Vec<ArrayRef>> {
        let target = match &self.spill_to {
            Some(t) => t.clone(),
            None => match spill::target() {
                Some(t) => t,
                None => return internal_err!("{}: spilled rows without a target", self.func),
            },
        };
        let mut writer = spill::RunWriter::new(&target, self.func)?;
        for c in 0..2 {
            for rows in groups.iter_mut() {
                rows.sort_parts(c);
                writer.push_merged(&rows.spill_sources(c, true).0)?;
            }
        }
        let weighted = self.weighted();
        if weighted {
            for c in 0..2 {
                for rows in groups.iter() {
                    let (scores, weights) = rows.spill_sources(c, true);
                    writer.push_merged_weights(&scores, &weights)?;
                }
            }
        }
        let n = groups.len();
        let (all, at) = match writer.finish()? {
            Some(written) => written,
            None => (ScalarBuffer::from(Vec::<f64>::new()), vec![(0, 0); 4 * n]),
        };
        // The k-th column's runs, one a group.
        let column = |k: usize| -> ArrayRef {
            let runs = &at[k * n..(k + 1) * n];
            let offsets = OffsetBuffer::from_lengths(runs.iter().map(|r| r.1));
            let start = runs.first().map_or(0, |r| r.0);
            let len = runs.iter().map(|r| r.1).sum();
            list_array(
                offsets,
                Arc::new(Float64Array::new(all.slice(start, len), None)),
            )
        };
        let empty = || -> ArrayRef {
            let offsets = OffsetBuffer::from_lengths(std::iter::repeat_n(0, n));
            list_array(offsets, Arc::new(Float64Array::from(Vec::<f64>::new())))
        };
        Ok(if weighted {
            vec![column(0), column(1), column(2), column(3)]
        } else {
            vec![column(0), column(1), empty(), empty()]
        })
    }

    /// Refuses a stored state ([`Kernel::check_stored`]) whose scores are not probabilities
    /// or whose weights are not finite and non-negative (`auc_test`'s second scores, in the
    /// weights' place, are probabilities): what the rows' readers are defined for, and what
    /// [`Self::update`] lets in.
    pub(crate) fn check_stored(&self, states: &[ArrayRef]) -> Result<()> {
        for (k, state) in states.iter().take(STATE_NAMES.len()).enumerate() {
            let values = list_values(state);
            let (ok, rule): (fn(&[f64]) -> bool, &str) = if k < 2 || self.paired.is_some() {
                (all_probabilities, "a probability in [0, 1]")
            } else {
                (all_weights, "a weight (finite and >= 0)")
            };
            if !ok(values) {
                let bad = values.iter().find(|&&x| !ok(&[x])).copied();
                return exec_err!(
                    "{}: a stored state's {} holds {}, not {rule}",
                    self.func,
                    STATE_NAMES[k],
                    bad.unwrap_or(f64::NAN)
                );
            }
        }
        Ok(())
    }

    /// Merges four list columns as produced by [`ValueStore::state`]. An unweighted span of
    /// at least [`MIN_RUN`] scores is kept as a run (a slice of the state's buffer, no copy).
    pub(crate) fn merge(&mut self, states: &[ArrayRef], groups: &[usize]) -> Result<()> {
        let weighted = self.weighted();
        let cols: Vec<(&[i32], &[f64])> = states[..4].iter().map(list_parts).collect();
        let buffers: [&ScalarBuffer<f64>; 4] = std::array::from_fn(|k| {
            states[k]
                .as_list::<i32>()
                .values()
                .as_primitive::<Float64Type>()
                .values()
        });
        let mapped = buffers.map(spill::is_spilled);
        // Groups whose own rows took a second state's: sorted below.
        let mut mixed = vec![];
        for (r, &g) in groups.iter().enumerate() {
            if states[0].is_null(r) {
                continue;
            }
            for c in 0..2 {
                let (op, p) = cols[c];
                let (ow, w) = cols[2 + c];
                let span = op[r] as usize..op[r + 1] as usize;
                let wspan = ow[r] as usize..ow[r + 1] as usize;
                let ok = if weighted {
                    wspan.len() == span.len()
                } else {
                    wspan.is_empty()
                };
                if !ok {
                    return internal_err!("{}: malformed value state", self.func);
                }
                let rows = &mut self.groups[g];
                if mapped[c] && (!weighted || mapped[2 + c]) && !span.is_empty() {
                    // A spilled run handed on: it stays on disk. Only a spill writes a mapped
                    // buffer, and a spill writes ascending runs (`RunWriter::push_merged`),
                    // their weights beside them.
                    let run = buffers[c].slice(span.start, span.len());
                    debug_assert!(
                        is_sorted_f64(&run),
                        "{}: a spilled run out of order",
                        self.func
                    );
                    rows.spilled[c].push(run);
                    if weighted {
                        rows.spilled_w[c].push(buffers[2 + c].slice(wspan.start, wspan.len()));
                    }
                    continue;
                }
                if span.len() >= MIN_RUN {
                    rows.runs[c].push(buffers[c].slice(span.start, span.len()));
                    self.bytes += span.len() * size_of::<f64>();
                    if weighted {
                        rows.runs_w[c].push(buffers[2 + c].slice(wspan.start, wspan.len()));
                        self.bytes += wspan.len() * size_of::<f64>();
                    }
                    continue;
                }
                let before = rows.p[c].capacity() + rows.w[c].capacity();
                if rows.p[c].is_empty() {
                    // The first state of a group sets its size exactly (one partition's
                    // rows); later ones grow it by doubling, which then fits two exactly.
                    rows.p[c].reserve_exact(span.len());
                    rows.w[c].reserve_exact(wspan.len());
                } else if !span.is_empty() {
                    mixed.push(g);
                }
                rows.p[c].extend_from_slice(&p[span]);
                rows.w[c].extend_from_slice(&w[wspan]);
                let after = rows.p[c].capacity() + rows.w[c].capacity();
                self.bytes += (after - before) * size_of::<f64>();
            }
        }
        // Own rows gathered from several states lie in the order the states arrived in;
        // sorted, they are the same whatever that order (and a reader that sums them as
        // they lie gives the same result from one run to the next).
        mixed.sort_unstable();
        mixed.dedup();
        for g in mixed {
            self.with_group(g, |rows| (0..2).for_each(|c| rows.sort_own(c)));
        }
        self.fit_budget()
    }

    pub(crate) fn drain(&mut self, n: usize) {
        for rows in self.groups.drain(..n) {
            // Saturating: a group whose rows were sorted or absorbed for its result may hold
            // a little more capacity than was counted.
            self.bytes = self.bytes.saturating_sub(rows.bytes());
        }
        self.shrink_budget();
    }

    /// Gives back what the reservation holds beyond the rows (after rows leave).
    fn shrink_budget(&mut self) {
        // Shrinking cannot fail.
        let _ = self.held.follow(self.held_bytes());
    }

    /// The bytes DataFusion is told of: the rows' unless a reservation of the store's own
    /// holds them ([`Self::fit_budget`]), and the groups' vector.
    pub(crate) fn size(&self) -> usize {
        let rows = if self.held.holds() { 0 } else { self.bytes };
        rows + self.groups.capacity() * size_of::<Rows>()
    }

    /// Runs `f` on group `g`'s rows, keeping the bytes reported to the pool in step with
    /// what `f` frees or reserves.
    pub(crate) fn with_group<R>(&mut self, g: usize, f: impl FnOnce(&mut Rows) -> R) -> R {
        let rows = &mut self.groups[g];
        let before = rows.bytes();
        let out = f(rows);
        self.bytes = (self.bytes + rows.bytes()).saturating_sub(before);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int32Array;

    /// A class large enough to be sorted in two pieces comes out as one sort of it does,
    /// beside a small class and beside a weighted one (never split).
    #[test]
    fn a_class_sorted_in_two_pieces_is_sorted() {
        let n = SPLIT_SORT_ROWS + 12_345;
        let scores: Vec<f64> = (0..n as u64)
            .map(|i| ((i * 2654435761) % 1_000_003) as f64 / 1_000_003.0)
            .chain([-0.0, 0.0, 0.5, 0.5])
            .collect();
        let mut want = scores.clone();
        sort_f64(&mut want);
        let small: Vec<f64> = scores.iter().take(1000).copied().collect();
        let mut want_small = small.clone();
        sort_f64(&mut want_small);
        let mut rows = Rows {
            p: [scores.clone(), small],
            ..Rows::default()
        };
        rows.sort_own_both();
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&rows.p[0]), bits(&want));
        assert_eq!(bits(&rows.p[1]), bits(&want_small));
        let mut weighted = Rows {
            p: [scores.clone(), vec![]],
            w: [scores.iter().map(|x| 1.0 + x).collect(), vec![]],
            ..Rows::default()
        };
        weighted.sort_own_both();
        assert_eq!(bits(&weighted.p[0]), bits(&want));
        let paired = weighted.p[0].iter().zip(&weighted.w[0]);
        assert!(paired.into_iter().all(|(p, w)| *w == 1.0 + p));
    }

    /// Three groups' rows through two partial stores and a final one, each spilling many
    /// times under an 8 KiB pool (more than [`MAX_SPILL_FILES`] files, so their runs are
    /// merged too), read back as each group's and class's scores, and weights in a weighted
    /// store: the same multiset as the rows given (a plain sort of them is the reference),
    /// and nothing left reserved.
    #[test]
    fn spilled_rows_read_back_as_the_rows_given() {
        spilled_rows_read_back(false);
        spilled_rows_read_back(true);
    }

    fn spilled_rows_read_back(weighted: bool) {
        let target = spill::SpillTarget::for_tests(8 << 10);
        let rows = 120_000;
        // Distinct scores (2654435761 is prime to 1000003), so a weight's place is its score's.
        let p: Vec<f64> = (0..rows)
            .map(|i| ((i as u64 * 2654435761) % 1_000_003) as f64 / 1_000_003.0)
            .collect();
        let w: Vec<f64> = (0..rows).map(|i| 0.5 + (i % 7) as f64).collect();
        let y: Vec<i32> = (0..rows).map(|i| (i % 3 == 0) as i32).collect();
        let g: Vec<usize> = (0..rows).map(|i| (i / 7) % 3).collect();
        let mut want: [[Vec<(f64, f64)>; 2]; 3] = Default::default();
        for i in 0..rows {
            want[g[i]][y[i] as usize].push((p[i], if weighted { w[i] } else { 1.0 }));
        }
        let store = || {
            let mut s =
                ValueStore::new("auc", 0, 1, weighted.then_some(2)).spilling_to(target.clone());
            s.resize(3);
            s
        };
        let mut fin = store();
        for half in [0..rows / 2, rows / 2..rows] {
            let mut part = store();
            for batch in half.clone().step_by(1000) {
                let end = (batch + 1000).min(half.end);
                let values: Vec<ArrayRef> = vec![
                    Arc::new(Float64Array::from(p[batch..end].to_vec())),
                    Arc::new(Int32Array::from(y[batch..end].to_vec())),
                    Arc::new(Float64Array::from(w[batch..end].to_vec())),
                ];
                part.update(&values, &g[batch..end], None).unwrap();
            }
            assert!(part.groups.iter().any(Rows::has_spilled), "nothing spilled");
            assert!(
                part.files_written > MAX_SPILL_FILES,
                "{} files",
                part.files_written
            );
            let state = part.take_state(0..3);
            fin.merge(&state, &[0, 1, 2]).unwrap();
        }
        assert!(fin.groups.iter().all(Rows::has_spilled), "runs not kept");
        for (gi, want) in want.iter_mut().enumerate() {
            assert_eq!(fin.groups[gi].weighted(), weighted);
            let classes = fin.groups[gi].sorted_weighted_parts();
            for (c, parts) in classes.into_iter().enumerate() {
                want[c].sort_by(|a, b| a.0.total_cmp(&b.0));
                let mut got: Vec<(f64, f64)> = vec![];
                for (ps, ws) in parts {
                    assert!(is_sorted_f64(ps));
                    if weighted {
                        assert_eq!(ws.len(), ps.len());
                        got.extend(ps.iter().copied().zip(ws.iter().copied()));
                    } else {
                        assert!(ws.is_empty());
                        got.extend(ps.iter().map(|&x| (x, 1.0)));
                    }
                }
                got.sort_by(|a, b| a.0.total_cmp(&b.0));
                assert_eq!(got, want[c], "weighted {weighted}, group {gi}, class {c}");
            }
        }
        fin.drain(3);
        assert_eq!(target.reserved(), 0);
    }

    /// Weighted rows sorted in place read as the (score, weight) pairs given, sorted by
    /// score (a plain sort of the pairs is the reference; the scores are distinct, so the
    /// order is one), −0 before +0.
    #[test]
    fn weighted_rows_sort_with_their_weights() {
        let n = 100_003;
        let mut p: Vec<f64> = (0..n)
            .map(|i| ((i as u64 * 2654435761) % 1_000_003) as f64 / 1_000_003.0)
            .collect();
        p[7] = -0.0;
        let mut w: Vec<f64> = (0..n).map(|i| i as f64).collect();
        let mut want: Vec<(f64, f64)> = p.iter().copied().zip(w.iter().copied()).collect();
        want.sort_by(|a, b| a.0.total_cmp(&b.0));
        sort_weighted(&mut p, &mut w);
        let got: Vec<(f64, f64)> = p.iter().copied().zip(w.iter().copied()).collect();
        assert_eq!(got.len(), n);
        assert!(got
            .iter()
            .zip(&want)
            .all(|(a, b)| a.0.to_bits() == b.0.to_bits() && a.1 == b.1));
        assert_eq!((p.capacity(), w.capacity()), (n, n));
        let (mut one, mut none) = (vec![0.5], vec![2.0]);
        sort_weighted(&mut one, &mut none);
        assert_eq!((one, none), (vec![0.5], vec![2.0]));
    }

    /// Weighted rows sorted a piece at a time (for a spill to merge): each piece holds its
    /// own rows, sorted by score with their weights (a plain sort of each piece's pairs is
    /// the reference), the last piece shorter.
    #[test]
    fn weighted_rows_sort_a_piece_at_a_time() {
        let (n, piece) = (10_007, 1_000);
        let mut p: Vec<f64> = (0..n)
            .map(|i| ((i as u64 * 2654435761) % 1_000_003) as f64 / 1_000_003.0)
            .collect();
        // p[0] is +0.
        p[3] = -0.0;
        p[4] = 1.0;
        let mut w: Vec<f64> = (0..n).map(|i| i as f64).collect();
        let pairs: Vec<(f64, f64)> = p.iter().copied().zip(w.iter().copied()).collect();
        sort_weighted_pieces(&mut p, &mut w, piece);
        for (k, want) in pairs.chunks(piece).enumerate() {
            let mut want = want.to_vec();
            want.sort_by(|a, b| a.0.total_cmp(&b.0));
            let span = k * piece..(k * piece + want.len());
            let got: Vec<(f64, f64)> = p[span.clone()]
                .iter()
                .copied()
                .zip(w[span].iter().copied())
                .collect();
            assert!(
                got.iter()
                    .zip(&want)
                    .all(|(a, b)| a.0.to_bits() == b.0.to_bits() && a.1 == b.1),
                "piece {k}"
            );
        }
    }

    /// A spilled store whose disk fails when it hands its rows on hands them on from memory,
    /// each row once (the rows given, sorted, are the reference); a store that must spill
    /// to a disabled disk fails with the disk manager's error instead of losing rows.
    #[test]
    fn a_failing_disk_loses_no_row() {
        let p: Vec<f64> = (0..20_000)
            .map(|i| ((i * 7919) % 20_000) as f64 / 2e4)
            .collect();
        let y: Vec<i32> = (0..20_000).map(|i| i % 2).collect();
        let values: Vec<ArrayRef> = vec![
            Arc::new(Float64Array::from(p.clone())),
            Arc::new(Int32Array::from(y.clone())),
        ];
        let mut store =
            ValueStore::new("auc", 0, 1, None).spilling_to(spill::SpillTarget::for_tests(16 << 10));
        store.resize(1);
        store.update(&values, &[0; 20_000], None).unwrap();
        assert!(store.groups[0].has_spilled());
        // More rows, not spilled, then the disk goes.
        store.spill_to = Some(spill::SpillTarget::without_disk(1 << 30));
        store.held = store.spill_to.as_ref().unwrap().held("auc");
        let more: Vec<ArrayRef> = vec![
            Arc::new(Float64Array::from(vec![0.25, 0.75])),
            Arc::new(Int32Array::from(vec![0, 1])),
        ];
        store.update(&more, &[0, 0], None).unwrap();
        let state = store.take_state(0..1);
        for c in 0..2 {
            let (_, got) = list_parts(&state[c]);
            let mut got = got.to_vec();
            got.sort_by(f64::total_cmp);
            let mut want: Vec<f64> = p
                .iter()
                .zip(&y)
                .filter(|(_, &yi)| yi as usize == c)
                .map(|(&pi, _)| pi)
                .chain([[0.25, 0.75][c]])
                .collect();
            want.sort_by(f64::total_cmp);
            assert_eq!(got, want, "class {c}");
        }
        let mut full = ValueStore::new("auc", 0, 1, None)
            .spilling_to(spill::SpillTarget::without_disk(16 << 10));
        full.resize(1);
        let err = full.update(&values, &[0; 20_000], None).unwrap_err();
        assert!(err.to_string().contains("DiskManager is disabled"), "{err}");
    }
}
