//! A fit's per-group state: the distinct scores with their sums (exact), or the grid.
//!
//! The exact mode holds its points one of two ways. The parametric fits (a cap of 65,536)
//! hash each row into its point. The fits that keep millions of distinct scores (the
//! non-parametric ones, [`super::NONPARAMETRIC_EXACT_CAP`]) and the field-aware ones (one
//! state per field value, thousands of them) keep rows ([`Appended`]): hashing each row into
//! a table of millions of entries (or into the table of one of thousands of field values) is
//! a cache miss a row, and appending is not.
//!
//! A kept row whose target is 0 or 1 is its 8-byte score in its class's list, a third of a
//! point (score, Σ1, Σt). The lists stay rows while their scores are mostly distinct, and are
//! handed on one list a class, sorted unless the state is large ([`FitState::settle`]: the
//! reader may then go to the grid without sorting them) or its fit reads rows in any order
//! (`fit_confcalib`: [`FitState::rows_only`]); a merged state's lists are kept where they
//! lie, in the state's Arrow buffer. Rows whose scores repeat are collapsed into ascending points, and so
//! are rows with an IPS target and merged states' points.

use std::borrow::Cow;

use arrow::buffer::ScalarBuffer;
use datafusion_common::{internal_err, Result};
use hashbrown::{DefaultHashBuilder, HashTable};
use std::hash::BuildHasher;

use super::grid::{Entry, Grid};
use crate::labels::Label;
use crate::values::{
    at_least_distinct, class_runs, is_sorted_f64, make_room, push_by_label, sort_f64, Tally,
};

/// Points of merged states and rows with an IPS target are sorted into the points when they
/// are this many times the points (or [`MIN_APPENDED`], if more): each is merged about 1.25
/// times over the state's life.
const APPENDED_PER_POINT: usize = 4;
/// See [`APPENDED_PER_POINT`] and [`Appended::due`].
const MIN_APPENDED: usize = 4096;
/// Newest rows of each class a state sorts to see whether its rows repeat their scores.
const SAMPLE_ROWS: usize = 1 << 15;
/// Smallest span of a merged state's rows that a state keeps where it lies, as a run (a
/// buffer reference of 24 bytes); shorter spans are copied. Small, because a field-aware
/// fit's partial state holds thousands of field values' rows in one buffer, which its
/// large values' runs keep alive anyway: copying the small values' rows (most of the 5,000
/// sites of a Zipf field) would hold them twice.
const MIN_RUN: usize = 64;
/// Most ascending parts (the own list and merged runs) a class is read in where they lie;
/// past it they are copied into the own list and sorted with it.
const MAX_PARTS: usize = 4;
/// Rows from which a state hands its rows on unsorted ([`FitState::settle`]): the state that
/// reads them proves most such states past the cap without sorting, and sorts the rest on
/// all cores, in place when it holds the only reference to a run.
const UNSORTED_FROM: usize = 1 << 20;
/// Grids that many kept rows are dealt to, one part after another, when they go to the grid
/// (filled on all cores, then added in order): a constant, so the sums do not depend on the
/// cores.
const PARALLEL_GRIDS: usize = 4;

/// A class's kept rows as they lie: its own list and the merged runs
/// ([`FitState::rows_only`]).
pub(crate) type ClassParts<'a> = (&'a [f64], Vec<&'a [f64]>);

/// One distinct score of an exact-mode state and its sums.
#[derive(Debug, Clone, Copy)]
pub(super) struct Point {
    pub(super) s: f64,
    pub(super) n: f64,
    pub(super) t: f64,
}

/// The single rows of one class (target 0 or 1) that a state keeps as rows.
#[derive(Debug, Default, Clone)]
struct ClassRows {
    /// Scores appended as they come (ascending once the state is settled).
    own: Vec<f64>,
    /// Ascending slices of merged states' buffers, kept without a copy.
    runs: Vec<ScalarBuffer<f64>>,
}

impl ClassRows {
    fn len(&self) -> usize {
        self.own.len() + self.runs.iter().map(|r| r.len()).sum::<usize>()
    }

    fn bytes(&self) -> usize {
        (self.own.capacity() + self.runs.iter().map(|r| r.len()).sum::<usize>()) * size_of::<f64>()
    }

    /// The own list, then the runs.
    fn parts(&self) -> Vec<&[f64]> {
        std::iter::once(&self.own[..])
            .chain(self.runs.iter().map(|r| &r[..]))
            .filter(|p| !p.is_empty())
            .collect()
    }

    /// Takes out the lists that need sorting: each run that is not ascending (a stored
    /// state is user data, and a large state hands its rows on unsorted), moved out of its
    /// buffer where this state holds the only reference to it and copied into the own list
    /// otherwise; then the own list, last. Past [`MAX_PARTS`], every run is copied in.
    fn take_unsorted(&mut self) -> Vec<Vec<f64>> {
        let runs = std::mem::take(&mut self.runs);
        let merge_all = runs.len() + 1 > MAX_PARTS;
        let mut out = vec![];
        for run in runs {
            if merge_all {
                make_room(&mut self.own, run.len());
                self.own.extend_from_slice(&run);
            } else if is_sorted_f64(&run) {
                self.runs.push(run);
            } else {
                match run.into_inner().into_vec::<f64>() {
                    Ok(v) => out.push(v),
                    Err(shared) => {
                        let run = ScalarBuffer::<f64>::from(shared);
                        make_room(&mut self.own, run.len());
                        self.own.extend_from_slice(&run);
                    }
                }
            }
        }
        out.push(std::mem::take(&mut self.own));
        out
    }

    /// Puts back what [`Self::take_unsorted`] took, sorted: the own list last.
    fn put_sorted(&mut self, mut sorted: Vec<Vec<f64>>) {
        self.own = sorted.pop().unwrap_or_default();
        self.runs.extend(sorted.into_iter().map(ScalarBuffer::from));
    }

    /// The rows as one list, borrowed when they are one part: ascending (merged) when the
    /// parts are, else the parts one after the other.
    fn joined(&self, ascending: bool) -> Cow<'_, [f64]> {
        match self.parts()[..] {
            [] => Cow::Borrowed(&[]),
            [one] => Cow::Borrowed(one),
            ref parts => {
                let mut out = Vec::with_capacity(self.len());
                if ascending {
                    let none = Tally::default();
                    for (s, k) in class_runs(parts, &none) {
                        out.extend(std::iter::repeat_n(s, k as usize));
                    }
                } else {
                    parts.iter().for_each(|p| out.extend_from_slice(p));
                }
                Cow::Owned(out)
            }
        }
    }
}

/// What a state that keeps rows holds besides its points.
#[derive(Debug, Default, Clone)]
pub(super) struct Appended {
    /// Single rows with target 0, and with target 1.
    class: [ClassRows; 2],
    /// Own rows (both classes) when the state last looked at them and found their scores
    /// mostly distinct.
    looked: usize,
    /// Whether the state is as it is handed on: `other` sorted into the points, and each
    /// class's parts ascending unless the state has [`UNSORTED_FROM`] rows or more.
    settled: bool,
    /// Whether each class's parts are ascending (at most [`MAX_PARTS`] of them).
    sorted: bool,
    /// Every other (score, Σ1, Σt), unsorted: rows with an IPS target, merged states'
    /// points.
    other: Vec<Point>,
}

impl Appended {
    fn rows(&self) -> usize {
        self.class[0].len() + self.class[1].len()
    }

    fn own(&self) -> usize {
        self.class[0].own.len() + self.class[1].own.len()
    }

    fn len(&self) -> usize {
        self.rows() + self.other.len()
    }

    fn bytes(&self) -> usize {
        self.class[0].bytes() + self.class[1].bytes() + self.other.capacity() * size_of::<Point>()
    }

    #[inline]
    fn push(&mut self, s: f64, n: f64, t: f64) {
        if n == 1.0 && (t == 0.0 || t == 1.0) {
            // Grown by an eighth past 1M rows: the pool is told the capacity.
            let own = &mut self.class[(t == 1.0) as usize].own;
            make_room(own, 1);
            own.push(s);
            self.sorted = false;
        } else {
            self.other.push(Point { s, n, t });
        }
        self.settled = false;
    }

    /// Whether the state should look at what it appended ([`FitState::look`]): its own rows
    /// have doubled since it last looked (at least [`MIN_APPENDED`] new ones), or `other`
    /// has reached [`APPENDED_PER_POINT`] times the points.
    #[inline]
    fn due(&self, points: usize) -> bool {
        self.own().saturating_sub(self.looked) >= MIN_APPENDED.max(self.looked)
            || self.other.len() >= MIN_APPENDED.max(APPENDED_PER_POINT * points)
    }

    /// Whether the newest own rows repeat their scores enough that points would take less
    /// room than rows (a point is three rows' bytes): the newest [`SAMPLE_ROWS`] of each
    /// class, sorted on a copy, hold at most a third as many distinct scores as rows.
    fn rows_repeat(&self) -> bool {
        let newest = |c: usize| {
            let own = &self.class[c].own;
            &own[own.len().saturating_sub(SAMPLE_ROWS)..]
        };
        let mut sample = [newest(0).to_vec(), newest(1).to_vec()];
        sample.iter_mut().for_each(|v| sort_f64(v));
        let none = Tally::default();
        let distinct: usize = sample
            .iter()
            .map(|v| class_runs(&[&v[..]], &none).count())
            .sum();
        3 * distinct <= sample[0].len() + sample[1].len()
    }

    /// Sorts each class and `other` (stably: merged states' points come as ascending runs,
    /// which the sort merges as they are). A state of [`UNSORTED_FROM`] rows or more sorts
    /// its lists on all cores.
    fn sort(&mut self) {
        if !self.sorted {
            let threads = match self.rows() >= UNSORTED_FROM {
                true => crate::parallel::cores(),
                false => 1,
            };
            let mut lists = self.class.each_mut().map(ClassRows::take_unsorted);
            let mut all: Vec<&mut Vec<f64>> = lists.iter_mut().flatten().collect();
            all.sort_by_key(|v| std::cmp::Reverse(v.len()));
            crate::parallel::for_each_mut(&mut all, threads, |v| sort_f64(v));
            for (class, sorted) in self.class.iter_mut().zip(lists) {
                class.put_sorted(sorted);
            }
            self.sorted = true;
        }
        self.other.sort_by(|a, b| a.s.total_cmp(&b.s));
    }

    /// The class rows' parts, in any order.
    fn parts(&self) -> Vec<&[f64]> {
        let [neg, pos] = &self.class;
        neg.parts().into_iter().chain(pos.parts()).collect()
    }
}

/// Calls `out` with one point per distinct score of the ascending sources, in ascending
/// order, their sums added, until it returns false: `points` (distinct), each class's
/// ascending parts (a row each: Σ1 = 1, Σt = its class) and `other`.
fn merge_sorted(
    points: &[Point],
    classes: [&[&[f64]]; 2],
    other: &[Point],
    mut out: impl FnMut(Point) -> bool,
) {
    // Scores are finite, so infinity marks a source read to its end.
    const END: f64 = f64::INFINITY;
    if points.is_empty() && other.is_empty() && classes.iter().all(|c| c.len() <= 1) {
        // Rows only, one list a class (a settled state's usual form): the two lists read in
        // step, each score's rows counted as they come.
        let [neg, pos] = classes.map(|c| c.first().copied().unwrap_or(&[]));
        let (mut i, mut j) = (0, 0);
        loop {
            let s = neg
                .get(i)
                .map_or(END, |&v| v)
                .min(pos.get(j).map_or(END, |&v| v));
            if s == END {
                return;
            }
            let (i0, j0) = (i, j);
            while i < neg.len() && neg[i] == s {
                i += 1;
            }
            while j < pos.len() && pos[j] == s {
                j += 1;
            }
            let t = (j - j0) as f64;
            if !out(Point {
                s,
                n: (i - i0) as f64 + t,
                t,
            }) {
                return;
            }
        }
    }
    let none = Tally::default();
    let mut neg = class_runs(classes[0], &none).peekable();
    let mut pos = class_runs(classes[1], &none).peekable();
    let (mut i, mut l) = (0, 0);
    loop {
        let s = points
            .get(i)
            .map_or(END, |p| p.s)
            .min(neg.peek().map_or(END, |r| r.0))
            .min(pos.peek().map_or(END, |r| r.0))
            .min(other.get(l).map_or(END, |p| p.s));
        if s == END {
            return;
        }
        let mut p = Point { s, n: 0.0, t: 0.0 };
        while let Some(q) = points.get(i).filter(|q| q.s == s) {
            p.n += q.n;
            p.t += q.t;
            i += 1;
        }
        if let Some((_, k)) = neg.next_if(|r| r.0 == s) {
            p.n += k as f64;
        }
        if let Some((_, k)) = pos.next_if(|r| r.0 == s) {
            p.n += k as f64;
            p.t += k as f64;
        }
        while let Some(q) = other.get(l).filter(|q| q.s == s) {
            p.n += q.n;
            p.t += q.t;
            l += 1;
        }
        if !out(p) {
            return;
        }
    }
}

/// The distinct scores of the ascending sources (as [`merge_sorted`] takes them), counted up
/// to `cap + 1`: past the cap, the count stops there.
fn distinct_up_to(cap: usize, points: &[Point], classes: [&[&[f64]]; 2], other: &[Point]) -> usize {
    let mut distinct = 0;
    merge_sorted(points, classes, other, |_| {
        distinct += 1;
        distinct <= cap
    });
    distinct
}

#[derive(Debug, Clone)]
pub(crate) struct FitState {
    /// Exact mode: one point per distinct score. Hashed, they are found through `index`
    /// (positions in `points`, hashed by the score's bits) — about 30 bytes a score, since
    /// per-group fits (`GROUP BY advertiser`) can hold many groups in exact mode at once.
    /// In a state that keeps rows, `index` stays empty and `points` are ascending.
    pub(super) index: HashTable<u32>,
    pub(super) points: Vec<Point>,
    /// A state that keeps rows: its rows, and what waits to be sorted into its points
    /// (`None` for a hashed state, and in grid mode).
    pub(super) appended: Option<Box<Appended>>,
    pub(super) hasher: DefaultHashBuilder,
    /// Distinct scores kept exactly before the grid (see `Method::exact_cap`).
    pub(super) cap: usize,
    /// The grid's resolution (`Method::grid_bits`).
    pub(super) grid_bits: u32,
    /// Grid mode (past `cap` distinct scores).
    pub(super) grid: Option<Box<Grid>>,
    pub(crate) rows: i64,
    pub(super) s_min: f64,
    pub(super) s_max: f64,
}

impl FitState {
    /// An empty state that keeps up to `cap` distinct scores exactly, then switches to a
    /// grid of 2^`grid_bits` cells per power of two; `keeps_rows`: rows kept rather than
    /// hashed (see the module documentation).
    pub(super) fn new(cap: usize, grid_bits: u32, keeps_rows: bool) -> Self {
        Self {
            cap,
            grid_bits,
            index: HashTable::new(),
            points: vec![],
            appended: keeps_rows.then(Box::default),
            hasher: DefaultHashBuilder::default(),
            grid: None,
            rows: 0,
            s_min: f64::INFINITY,
            s_max: f64::NEG_INFINITY,
        }
    }

    /// Makes room for every distinct score the exact mode can hold, so that it fills
    /// without rehashing. For the single group of the whole-batch path, on its first large
    /// batch, when the cap is [`EXACT_CAP`]: about 2 MiB, where growing step by step cost
    /// about 1.5% of a fit's time over 20M rows.
    pub(super) fn reserve_exact_cap(&mut self) {
        let more = (self.cap + 1).saturating_sub(self.points.len());
        self.points.reserve_exact(more);
        let hasher = &self.hasher;
        let points = &self.points;
        self.index
            .reserve(more, |&i| hasher.hash_one(points[i as usize].s.to_bits()));
    }

    pub(crate) fn is_grid(&self) -> bool {
        self.grid.is_some()
    }

    /// Adds one row (or an exact point of `n` rows).
    #[inline]
    pub(crate) fn add_point(&mut self, s: f64, n: f64, t: f64) {
        if let Some(grid) = &mut self.grid {
            grid.add(s, n, t);
            return;
        }
        let s = if s == 0.0 { 0.0 } else { s }; // -0.0 and 0.0 are one score
        if let Some(a) = &mut self.appended {
            a.push(s, n, t);
            if a.due(self.points.len()) {
                self.look();
            }
            return;
        }
        let bits = s.to_bits();
        let hash = self.hasher.hash_one(bits);
        let points = &mut self.points;
        match self
            .index
            .find(hash, |&i| points[i as usize].s.to_bits() == bits)
        {
            Some(&i) => {
                let x = &mut points[i as usize];
                x.n += n;
                x.t += t;
            }
            None => {
                let hasher = &self.hasher;
                self.index.insert_unique(hash, points.len() as u32, |&i| {
                    hasher.hash_one(points[i as usize].s.to_bits())
                });
                points.push(Point { s, n, t });
                if points.len() > self.cap {
                    self.switch_to_grid();
                }
            }
        }
    }

    /// Adds one row of label `class` (0 or 1, checked) and finite score `s` (checked),
    /// counting it in `rows` and the range: the row loop of a batch spread over many groups
    /// (a field-aware fit's thousands of field values). Returns the change in
    /// [`Self::len_bytes`], read only when a list grew or the state looked at its rows.
    #[inline]
    pub(super) fn add_labelled_row(&mut self, s: f64, class: usize) -> isize {
        self.rows += 1;
        self.observe_range(s, s);
        let Some(a) = self.appended.as_deref_mut().filter(|_| self.grid.is_none()) else {
            let before = self.len_bytes();
            self.add_point(s, 1.0, class as f64);
            return self.len_bytes() as isize - before as isize;
        };
        let capacity = a.class[class].own.capacity();
        a.push(s + 0.0, 1.0, class as f64); // -0.0 and 0.0 are one score
        let grown = (a.class[class].own.capacity() - capacity) * size_of::<f64>();
        if !a.due(self.points.len()) {
            return grown as isize;
        }
        let before = self.len_bytes();
        self.look();
        grown as isize + self.len_bytes() as isize - before as isize
    }

    /// Appends a batch of rows whose targets are labels already checked to be 0 or 1 to a
    /// state that keeps rows (exact): each score to its class's list, with no branch on the
    /// label, which is random and mispredicted; then looks once if due. False, with nothing
    /// added, for any other state.
    pub(super) fn append_labelled<Y: Label>(&mut self, s: &[f64], y: &[Y]) -> bool {
        let Some(a) = &mut self.appended else {
            return false;
        };
        let [neg, pos] = &mut a.class;
        // `+ 0.0`: -0.0 and 0.0 are one score.
        push_by_label(s, &y[..s.len()], &mut neg.own, &mut pos.own, |si| si + 0.0);
        a.settled = false;
        a.sorted = false;
        if a.due(self.points.len()) {
            self.look();
        }
        true
    }

    /// Adds a partial state's grid cell (key = block id << 20 | index).
    pub(super) fn add_cell(&mut self, key: i64, e: &Entry) -> Result<()> {
        let Some(grid) = &mut self.grid else {
            return internal_err!("fit: a grid cell merged into an exact state");
        };
        match grid.unkey(key) {
            Some((id, idx, None)) => grid.cell(id, idx).merge(e),
            // A finer cell: its offsets move to the coarse cell's anchor.
            Some((id, idx, Some(lo))) => grid.cell(id, idx).merge(&e.reanchored(lo)),
            None => {
                return internal_err!("fit: grid cell key {key} out of range in a partial state")
            }
        }
        Ok(())
    }

    /// Adds a merged state's rows of class `c` (finite scores, ascending unless the state
    /// was tampered with): `values[span]`. A span of at least [`MIN_RUN`] rows is kept
    /// where it lies, as a run; a shorter one is copied.
    pub(super) fn add_class_rows(
        &mut self,
        c: usize,
        values: &ScalarBuffer<f64>,
        span: (usize, usize),
    ) {
        let (start, len) = span;
        if len == 0 {
            return;
        }
        if let Some(grid) = &mut self.grid {
            grid.add_rows(&values[start..start + len], c as f64);
            return;
        }
        let Some(a) = &mut self.appended else {
            for i in start..start + len {
                self.add_point(values[i], 1.0, c as f64);
            }
            return;
        };
        if len >= MIN_RUN {
            a.class[c].runs.push(values.slice(start, len));
        } else {
            make_room(&mut a.class[c].own, len);
            a.class[c]
                .own
                .extend_from_slice(&values[start..start + len]);
        }
        a.settled = false;
        a.sorted = false;
        if a.due(self.points.len()) {
            self.look();
        }
    }

    /// Looks at what a state that keeps rows has appended ([`Appended::due`]): past the cap
    /// it counts its distinct scores (switching to the grid past it); rows whose scores
    /// repeat are collapsed into points ([`Appended::rows_repeat`]), and so is `other`
    /// when it is due; mostly distinct rows stay rows.
    fn look(&mut self) {
        let Some(a) = &mut self.appended else {
            return;
        };
        let own = a.own();
        let rows_due = own.saturating_sub(a.looked) >= MIN_APPENDED.max(a.looked);
        let collapse_rows = rows_due && a.rows_repeat();
        if rows_due && !collapse_rows {
            a.looked = own;
        }
        if self.points.len() + a.len() > self.cap && self.over_cap() {
            self.switch_to_grid();
            return;
        }
        let Some(a) = &self.appended else {
            return;
        };
        if collapse_rows
            || a.other.len() >= MIN_APPENDED.max(APPENDED_PER_POINT * self.points.len())
        {
            self.collapse(collapse_rows);
        }
    }

    /// Whether the points, the rows and `other` hold more than `cap` distinct scores: proven
    /// from the rows without sorting them when they hold that many
    /// ([`crate::values::at_least_distinct`], a bitmap of twice the rows' bits), else
    /// counted after sorting (either answer is exact; the proof spares the sort).
    fn over_cap(&mut self) -> bool {
        if self.proven_over_cap() {
            return true;
        }
        if let Some(a) = &mut self.appended {
            a.sort();
        }
        self.past_cap()
    }

    /// Whether the rows prove more than `cap` distinct scores without sorting (see
    /// [`Self::over_cap`]); false says nothing.
    fn proven_over_cap(&self) -> bool {
        let Some(a) = &self.appended else {
            return false;
        };
        // The bits that all rows could set were every score distinct: m·(1 − e^(−rows/m))
        // in expectation for a bitmap of m bits. When that is not clearly past the cap (the
        // rows are barely more than it), the bitmap is not tried.
        // The smaller of the two bitmaps (about the rows' bits, or twice) that could.
        let (rows, k) = (a.rows(), self.cap + 1);
        let reachable = |m: usize| m as f64 * -(-(rows as f64) / m as f64).exp_m1();
        let small = rows.next_power_of_two();
        let bits = if reachable(small) >= 1.05 * k as f64 {
            small
        } else {
            2 * small
        };
        reachable(bits) >= 1.05 * k as f64 && at_least_distinct(&a.parts(), bits, k)
    }

    /// Whether the points, the sorted rows and `other` hold more than `cap` distinct scores
    /// (call after [`Appended::sort`]; the count stops past the cap).
    fn past_cap(&self) -> bool {
        let Some(a) = &self.appended else {
            return self.points.len() > self.cap;
        };
        let classes = [a.class[0].parts(), a.class[1].parts()];
        distinct_up_to(self.cap, &self.points, [&classes[0], &classes[1]], &a.other) > self.cap
    }

    /// Sorts `other` (and, with `rows_too`, the rows) into the points; past the cap, switches
    /// to the grid instead.
    fn collapse(&mut self, rows_too: bool) {
        let Some(a) = &mut self.appended else {
            return;
        };
        if rows_too {
            a.sort();
        } else {
            a.other.sort_by(|p, q| p.s.total_cmp(&q.s));
        }
        let classes = match rows_too {
            true => [a.class[0].parts(), a.class[1].parts()],
            false => [vec![], vec![]],
        };
        // Counted first: the merged list is reserved exactly (rows that repeat collapse to
        // far fewer points), and a state past the cap goes to the grid without building it.
        let distinct = distinct_up_to(self.cap, &self.points, [&classes[0], &classes[1]], &a.other);
        if distinct > self.cap {
            self.switch_to_grid();
            return;
        }
        let mut merged = Vec::with_capacity(distinct);
        merge_sorted(&self.points, [&classes[0], &classes[1]], &a.other, |p| {
            merged.push(p);
            true
        });
        drop(classes);
        a.other.clear();
        if rows_too {
            a.class = Default::default();
            a.looked = 0;
            a.sorted = true;
        }
        self.points = merged;
    }

    /// Brings a state that keeps rows to the form it is handed on in: `other` sorted into
    /// the points, each class's rows ascending, and past the cap the grid. A state of
    /// [`UNSORTED_FROM`] rows or more is not sorted: it goes to the grid if its rows prove
    /// it past the cap without sorting ([`Self::over_cap`]'s bitmap), and is otherwise
    /// handed on unsorted, for the state that reads it to decide ([`Self::settle_sorted`]).
    /// Called before the state is handed on.
    pub(crate) fn settle(&mut self) {
        self.settle_as(true);
    }

    /// [`Self::settle`] for a reader that takes the rows in any order (`fit_confcalib`): the
    /// rows stay as they came, however few.
    pub(crate) fn settle_unsorted(&mut self) {
        self.settle_as(false);
    }

    fn settle_as(&mut self, sort_small: bool) {
        let Some(a) = &mut self.appended else {
            return;
        };
        if a.settled {
            return;
        }
        let large = a.rows() >= UNSORTED_FROM;
        if self.points.len() + a.len() > self.cap {
            let past = match large {
                true => self.proven_over_cap(),
                false => self.over_cap(),
            };
            if past {
                self.switch_to_grid();
                return;
            }
        }
        let Some(a) = &mut self.appended else {
            return;
        };
        if !large && sort_small {
            a.sort();
        }
        if !a.other.is_empty() {
            self.collapse(false);
        }
        if let Some(a) = &mut self.appended {
            a.settled = true;
        }
    }

    /// [`Self::settle`]s the state and sorts its rows, the form it is read in; a state whose
    /// rows were left unsorted counts its distinct scores once sorted (past the cap, the
    /// grid).
    pub(crate) fn settle_sorted(&mut self) {
        self.settle();
        let Some(a) = &mut self.appended else {
            return;
        };
        if a.sorted {
            return;
        }
        a.sort();
        if self.points.len() + a.len() > self.cap && self.past_cap() {
            self.switch_to_grid();
        }
    }

    /// The state as it is handed on: itself when settled (and, with `sorted`, sorted), or
    /// when hashed or a grid; else a copy brought to that form.
    pub(super) fn settled(&self, sorted: bool) -> Cow<'_, FitState> {
        match &self.appended {
            Some(a) if !a.settled || (sorted && !a.sorted) => {
                let mut copy = self.clone();
                match sorted {
                    true => copy.settle_sorted(),
                    false => copy.settle(),
                }
                Cow::Owned(copy)
            }
            _ => Cow::Borrowed(self),
        }
    }

    /// A settled state's rows of class `c`: ascending, unless it hands them on unsorted
    /// ([`Self::settle`]); empty for a hashed or grid state.
    pub(super) fn class_rows(&self, c: usize) -> Cow<'_, [f64]> {
        match &self.appended {
            Some(a) => a.class[c].joined(a.sorted),
            None => Cow::Borrowed(&[]),
        }
    }

    /// A state that holds kept rows and nothing else (no points, not a grid): each class's
    /// own rows and its merged runs, as they lie (ascending only if the state sorted them).
    pub(crate) fn rows_only(&self) -> Option<[ClassParts<'_>; 2]> {
        let a = self.appended.as_ref()?;
        if self.grid.is_some() || !self.points.is_empty() || !a.other.is_empty() {
            return None;
        }
        Some(
            a.class
                .each_ref()
                .map(|c| (&c.own[..], c.runs.iter().map(|r| &r[..]).collect())),
        )
    }

    /// Moves a settled state's rows out when each class is one own list (the common case of
    /// a partition's state): the lists, ascending, without a copy.
    pub(super) fn take_class_rows(&mut self) -> Option<[Vec<f64>; 2]> {
        let a = self.appended.as_mut()?;
        if !a.settled || a.class.iter().any(|c| !c.runs.is_empty()) {
            return None;
        }
        a.looked = 0;
        Some(a.class.each_mut().map(|c| std::mem::take(&mut c.own)))
    }

    /// Adds a merged state's exact points (ascending, one per score) to a state that keeps
    /// rows: they become the points of a state that has none yet, or wait in `other` as one
    /// run, which the sort finds and merges as it is.
    pub(super) fn add_sorted_points(&mut self, s: &[f64], n: &[f64], t: &[f64]) {
        if let Some(a) = &mut self.appended {
            if self.points.is_empty() && a.other.is_empty() && s.windows(2).all(|w| w[0] < w[1]) {
                self.points = (0..s.len())
                    .map(|i| Point {
                        s: s[i],
                        n: n[i],
                        t: t[i],
                    })
                    .collect();
                if self.points.len() > self.cap {
                    self.switch_to_grid();
                }
                return;
            }
            a.other.extend((0..s.len()).map(|i| Point {
                s: s[i],
                n: n[i],
                t: t[i],
            }));
            a.settled = false;
            if a.due(self.points.len()) {
                self.look();
            }
        } else {
            for i in 0..s.len() {
                self.add_point(s[i], n[i], t[i]);
            }
        }
    }

    /// Switches from exact points (and kept rows) to the grid.
    pub(super) fn switch_to_grid(&mut self) {
        let old = std::mem::take(&mut self.points);
        let appended = self.appended.take();
        self.index = HashTable::new();
        let mut grid = Box::new(Grid::new(self.grid_bits));
        for p in old {
            grid.add(p.s, p.n, p.t);
        }
        if let Some(a) = appended {
            // Each class's parts in an order of their own, not the order the partial states
            // arrived in, so the cells' sums are the same from one run to the next; many
            // rows are added on all cores, the parts dealt out in turn to
            // [`PARALLEL_GRIDS`] grids, and those grids added in order.
            let mut parts: Vec<(&[f64], f64)> = vec![];
            for (c, rows) in a.class.iter().enumerate() {
                let mut own = rows.parts();
                own.sort_by_key(|p| (p.len(), p[0].to_bits(), p[p.len() - 1].to_bits()));
                parts.extend(own.into_iter().map(|p| (p, c as f64)));
            }
            // How many grids the parts are dealt to: fixed by the rows, not by the cores, so
            // the cells' sums do not depend on the machine's thread count.
            let grid_count = if a.rows() >= UNSORTED_FROM {
                PARALLEL_GRIDS.min(parts.len())
            } else {
                1
            };
            if grid_count <= 1 {
                for &(part, c) in &parts {
                    grid.add_rows(part, c);
                }
            } else {
                let bits = self.grid_bits;
                let cores = crate::parallel::cores();
                let grids = crate::parallel::map_in_order(grid_count, cores, |w| {
                    let mut g = Grid::new(bits);
                    for &(part, c) in parts.iter().skip(w).step_by(grid_count) {
                        g.add_rows(part, c);
                    }
                    g
                });
                for g in &grids {
                    grid.absorb(g);
                }
            }
            for p in &a.other {
                grid.add(p.s, p.n, p.t);
            }
        }
        self.grid = Some(grid);
    }

    /// Calls `f` with each exact point: ascending in a state that keeps rows (its rows and
    /// `other` merged in, sorted on a copy unless settled), in arrival order in a hashed one.
    fn for_each_exact_point(&self, mut f: impl FnMut(Point)) {
        match &self.appended {
            Some(a) if a.len() > 0 => {
                let sorted;
                let a = if a.settled && a.sorted {
                    a
                } else {
                    let mut copy = (**a).clone();
                    copy.sort();
                    sorted = copy;
                    &sorted
                };
                let classes = [a.class[0].parts(), a.class[1].parts()];
                merge_sorted(&self.points, [&classes[0], &classes[1]], &a.other, |p| {
                    f(p);
                    true
                });
            }
            _ => self.points.iter().for_each(|&p| f(p)),
        }
    }

    /// A grid state's non-empty cells with their keys (key = block id << 20 | index, `lo` =
    /// cell start); none in exact mode.
    pub(super) fn keyed_entries(&self) -> Vec<(i64, Entry)> {
        let Some(g) = &self.grid else {
            return vec![];
        };
        g.iter()
            .filter(|(_, _, c)| c.n() > 0.0)
            .map(|(id, i, c)| (g.key(id, i), c.entry(g.cell_start(id, i))))
            .collect()
    }

    /// Heap bytes held (allocated, not just used: a doubling vector holds up to twice what
    /// it uses, and that is what the memory pool must be told).
    pub(crate) fn len_bytes(&self) -> usize {
        self.points.capacity() * size_of::<Point>()
            + self.index.allocation_size()
            + self.appended.as_ref().map_or(0, |a| a.bytes())
            + self.grid.as_ref().map_or(0, |g| g.bytes())
    }

    pub(crate) fn observe_range(&mut self, lo: f64, hi: f64) {
        // `+ 0.0` makes a -0.0 bound 0.0, whatever order the zeros came in.
        self.s_min = self.s_min.min(lo) + 0.0;
        self.s_max = self.s_max.max(hi) + 0.0;
    }

    /// The points (score, Σ1, Σt) in score order: exact scores, or each cell's mean.
    pub(crate) fn sorted_points(&self) -> Vec<(f64, f64, f64)> {
        if !self.is_grid() {
            let mut pts = vec![];
            self.for_each_exact_point(|p| {
                if p.n > 0.0 {
                    pts.push((p.s, p.n, p.t));
                }
            });
            if self.appended.is_none() {
                pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            }
            return pts;
        }
        let mut pts: Vec<(f64, f64, f64)> = self
            .keyed_entries()
            .into_iter()
            .filter(|(_, e)| e.n > 0.0)
            .map(|(_, e)| {
                let s = (e.lo + e.nd / e.n).clamp(self.s_min, self.s_max);
                (s, e.n, e.t)
            })
            .collect();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        pts
    }

    /// At least as many as [`Self::nodes`] gives: a node per point and kept row, or four per
    /// grid cell.
    pub(crate) fn nodes_bound(&self) -> usize {
        match &self.grid {
            Some(g) => 4 * g.iter().filter(|(_, _, c)| c.n() > 0.0).count(),
            None => self.points.len() + self.appended.as_ref().map_or(0, |a| a.len()),
        }
    }

    /// [`Self::nodes`] in ascending order of score (then weight), each handed to `f`: read in
    /// order, without a copy, from a state that keeps rows; sorted first otherwise.
    pub(crate) fn for_each_node_ascending(&self, mut f: impl FnMut(f64, f64, f64)) {
        if !self.is_grid() && self.appended.is_some() {
            self.for_each_exact_point(|p| f(p.s, p.n, p.t));
            return;
        }
        let mut raw = self.nodes();
        raw.sort_by(|x, y| x.0.total_cmp(&y.0).then(x.1.total_cmp(&y.1)));
        raw.into_iter().for_each(|(s, n, t)| f(s, n, t));
    }

    /// Quadrature nodes (score, weight on softplus, weight on t) for the parametric fits:
    /// exact points in ascending order of score (a hashed state's are kept in the order they
    /// were first met, which in a merged state depends on the order partial states arrive
    /// in: the fits' sums over the nodes would change in their last digits from run to
    /// run), a grid's in its cells' order.
    pub(crate) fn nodes(&self) -> Vec<(f64, f64, f64)> {
        if !self.is_grid() {
            let mut out = Vec::with_capacity(self.nodes_bound());
            self.for_each_exact_point(|p| out.push((p.s, p.n, p.t)));
            if self.appended.is_none() {
                out.sort_unstable_by(|a, b| a.0.total_cmp(&b.0));
            }
            return out;
        }
        let entries = self.keyed_entries();
        let mut out = Vec::with_capacity(entries.len() * 2);
        let clamp = |s: f64| s.clamp(self.s_min, self.s_max);
        for (_, e) in &entries {
            let mut two_point = |w: f64, m1: f64, m2: f64, is_t: bool| {
                if w <= 0.0 {
                    return;
                }
                let mean = m1 / w;
                let sd = (m2 / w - mean * mean).max(0.0).sqrt();
                for s in [e.lo + mean - sd, e.lo + mean + sd] {
                    if is_t {
                        out.push((clamp(s), 0.0, w / 2.0));
                    } else {
                        out.push((clamp(s), w / 2.0, 0.0));
                    }
                }
            };
            two_point(e.n, e.nd, e.nd2, false);
            two_point(e.t, e.td, e.td2, true);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fit::grid::FINE_BITS;

    /// Rows (score, n, t): 60,000 of them, a third repeating 50 scores, the rest distinct
    /// (±0.0 among them), targets 0 and 1 and, every seventh row, an IPS target.
    fn rows() -> Vec<(f64, f64, f64)> {
        (0..60_000u64)
            .map(|i| {
                let u = ((i * 7919) % 60_013) as f64 / 60_013.0;
                let s = match i % 3 {
                    0 => (i % 50) as f64 * 0.125 - 3.0,
                    _ if i % 1000 == 1 => -0.0,
                    _ => (u / (1.0 - u + 1e-9)).ln(),
                };
                let y = ((i * 31) % 7 < 3) as u8 as f64;
                let t = if i % 7 == 0 { y / (0.2 + u) } else { y };
                (s, 1.0, t)
            })
            .collect()
    }

    /// The state that keeps rows against the hashed state, which is the code the fits used
    /// before: its rows added one by one; three partial states' exact points merged as
    /// sorted runs; and the same partial states handed on as they are (their points, and
    /// each class's sorted rows merged where they lie: runs of at least `MIN_RUN` rows,
    /// shorter spans copied). The same points, counts exactly and targets to 1e-12 (float
    /// sums in another order). This compares representations in this crate with each other;
    /// the fits' values are checked against scikit-learn, numpy and netcal in tests/fits.
    #[test]
    fn kept_rows_give_the_hashed_points() {
        let rows = rows();
        let cap = 1_000_000;
        let mut hashed = FitState::new(cap, FINE_BITS, false);
        let mut appended = FitState::new(cap, FINE_BITS, true);
        for &(s, n, t) in &rows {
            hashed.add_point(s, n, t);
            appended.add_point(s, n, t);
        }
        appended.settle();
        let mut merged = FitState::new(cap, FINE_BITS, true);
        let mut handed_on = FitState::new(cap, FINE_BITS, true);
        for part in rows.chunks(25_000) {
            let mut st = FitState::new(cap, FINE_BITS, true);
            for &(s, n, t) in part {
                st.add_point(s, n, t);
            }
            st.settle();
            let columns = |p: &[Point]| -> [Vec<f64>; 3] {
                [
                    p.iter().map(|p| p.s).collect(),
                    p.iter().map(|p| p.n).collect(),
                    p.iter().map(|p| p.t).collect(),
                ]
            };
            let mut exact = vec![];
            st.for_each_exact_point(|p| exact.push(p));
            let [s, n, t] = columns(&exact);
            merged.add_sorted_points(&s, &n, &t);
            let [s, n, t] = columns(&st.points);
            handed_on.add_sorted_points(&s, &n, &t);
            let [neg, pos] = st.take_class_rows().expect("one own list a class");
            assert!(
                neg.len() + pos.len() > part.len() / 2,
                "distinct rows stay rows"
            );
            for (c, v) in [neg, pos].into_iter().enumerate() {
                let v = ScalarBuffer::from(v);
                let short = v.len().min(MIN_RUN - 1);
                handed_on.add_class_rows(c, &v, (0, short));
                handed_on.add_class_rows(c, &v, (short, v.len() - short));
            }
        }
        merged.settle();
        handed_on.settle();
        let want = hashed.sorted_points();
        assert!(want.len() > 30_000, "mostly distinct: {}", want.len());
        for got in [
            appended.sorted_points(),
            merged.sorted_points(),
            handed_on.sorted_points(),
        ] {
            assert_eq!(got.len(), want.len());
            for (g, w) in got.iter().zip(&want) {
                assert_eq!((g.0.to_bits(), g.1), (w.0.to_bits(), w.1), "{g:?} {w:?}");
                assert!((g.2 - w.2).abs() <= 1e-12 * w.2.abs(), "{g:?} {w:?}");
            }
        }
        assert!(
            appended.len_bytes() < hashed.len_bytes(),
            "{} {}",
            appended.len_bytes(),
            hashed.len_bytes()
        );
    }

    /// Rows that repeat few scores are collapsed into points as they come.
    #[test]
    fn repeated_scores_collapse_into_points() {
        let cap = 1_000_000;
        // 200,000 rows of 1,000 scores: collapsed into 1,000 points as they come.
        let mut repeating = FitState::new(cap, FINE_BITS, true);
        for i in 0..200_000u64 {
            repeating.add_point(
                (i * 7 % 1000) as f64 / 1000.0,
                1.0,
                (i % 3 == 0) as u8 as f64,
            );
        }
        let kept = repeating.appended.as_ref().map_or(0, |a| a.rows());
        assert!(kept < 2 * MIN_APPENDED, "rows kept: {kept}");
        repeating.settle();
        let pts = repeating.sorted_points();
        assert_eq!(pts.len(), 1000);
        assert_eq!(pts.iter().map(|p| p.1).sum::<f64>(), 200_000.0);
    }

    /// Past the cap, an appended state switches to the grid at the same count of distinct
    /// scores as a hashed one, whether it sees its rows one by one or sorted in at once.
    #[test]
    fn appended_rows_switch_to_the_grid_past_the_cap() {
        let rows = rows();
        for cap in [100, 30_000] {
            let mut hashed = FitState::new(cap, FINE_BITS, false);
            let mut appended = FitState::new(cap, FINE_BITS, true);
            for &(s, n, t) in &rows {
                for st in [&mut hashed, &mut appended] {
                    st.add_point(s, n, t);
                    st.observe_range(s, s);
                }
            }
            appended.settle();
            assert!(hashed.is_grid() && appended.is_grid(), "cap {cap}");
            let (a, b) = (hashed.sorted_points(), appended.sorted_points());
            assert_eq!(a.len(), b.len(), "cap {cap}");
            for (x, y) in a.iter().zip(&b) {
                assert_eq!(x.1, y.1, "cap {cap}");
                assert!(
                    (x.0 - y.0).abs() <= 1e-12 * x.0.abs().max(1.0),
                    "{x:?} {y:?}"
                );
                assert!((x.2 - y.2).abs() <= 1e-12 * x.2.abs(), "{x:?} {y:?}");
            }
        }
        // Below the cap it stays exact, however the rows came.
        let mut st = FitState::new(rows.len(), FINE_BITS, true);
        for &(s, n, t) in &rows {
            st.add_point(s, n, t);
        }
        st.settle();
        assert!(!st.is_grid());
    }

    /// A state of [`UNSORTED_FROM`] rows or more hands its rows on unsorted, and the state
    /// that reads them decides: below the cap it sorts them (in place when it holds the only
    /// reference to a run, else on a copy) and gives the points of the rows, counted here
    /// from a plain sort of (score, target) pairs; past the cap the bitmap sends it to the
    /// grid without sorting, with the cells of a hashed state fed the same rows (that part
    /// compares two of this crate's layouts, as above).
    #[test]
    fn large_states_hand_on_unsorted_rows_and_the_reader_decides() {
        let per_state = UNSORTED_FROM + 1000;
        let rows: Vec<(f64, f64)> = (0..2 * per_state as u64)
            .map(|i| {
                let h = i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
                let s = (h >> 11) as f64 / (1u64 << 53) as f64 * 20.0 - 10.0;
                (s, (h >> 7 & 1) as f64)
            })
            .collect();
        // The points of the rows: sorted pairs, grouped by score.
        let mut sorted = rows.clone();
        sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut want: Vec<(f64, f64, f64)> = vec![];
        for &(s, t) in &sorted {
            match want.last_mut() {
                Some(p) if p.0 == s => {
                    p.1 += 1.0;
                    p.2 += t;
                }
                _ => want.push((s, 1.0, t)),
            }
        }
        // Two partial states' rows as handed on: each class one unsorted list.
        let handed_on = |cap: usize| -> Vec<[ScalarBuffer<f64>; 2]> {
            rows.chunks(per_state)
                .map(|part| {
                    let mut st = FitState::new(cap, FINE_BITS, true);
                    for &(s, t) in part {
                        st.add_point(s, 1.0, t);
                    }
                    st.settle();
                    assert!(!st.is_grid() && st.points.is_empty());
                    let lists = st.take_class_rows().expect("one own list a class");
                    assert!(
                        lists.iter().all(|v| !is_sorted_f64(v)),
                        "handed on unsorted"
                    );
                    lists.map(ScalarBuffer::from)
                })
                .collect()
        };
        for keep_a_reference in [false, true] {
            let cap = 10 * per_state;
            let mut reader = FitState::new(cap, FINE_BITS, true);
            let mut kept = vec![];
            for lists in handed_on(cap) {
                for (c, v) in lists.iter().enumerate() {
                    reader.add_class_rows(c, v, (0, v.len()));
                }
                if keep_a_reference {
                    kept.push(lists);
                }
            }
            reader.settle_sorted();
            let a = reader.appended.as_ref().expect("exact");
            let in_place = a
                .class
                .iter()
                .all(|c| c.own.is_empty() && c.runs.len() == 2);
            assert_eq!(in_place, !keep_a_reference, "sorted where the runs lie");
            let got = reader.sorted_points();
            assert_eq!(got.len(), want.len());
            assert!(
                got.iter().zip(&want).all(|(g, w)| g == w),
                "{keep_a_reference}"
            );
        }
        // Past the cap: the grid, as a hashed state makes it.
        let cap = per_state;
        let mut reader = FitState::new(cap, FINE_BITS, true);
        let mut hashed = FitState::new(cap, FINE_BITS, false);
        for lists in handed_on(cap) {
            for (c, v) in lists.iter().enumerate() {
                reader.add_class_rows(c, v, (0, v.len()));
            }
        }
        for &(s, t) in &rows {
            hashed.add_point(s, 1.0, t);
            hashed.observe_range(s, s);
            reader.observe_range(s, s);
        }
        reader.settle_sorted();
        assert!(reader.is_grid() && hashed.is_grid());
        let (a, b) = (hashed.sorted_points(), reader.sorted_points());
        assert_eq!(a.len(), b.len());
        for (x, y) in a.iter().zip(&b) {
            assert_eq!(x.1, y.1);
            assert!(
                (x.0 - y.0).abs() <= 1e-12 * x.0.abs().max(1.0),
                "{x:?} {y:?}"
            );
            assert!((x.2 - y.2).abs() <= 1e-12 * x.2.abs(), "{x:?} {y:?}");
        }
    }
}
