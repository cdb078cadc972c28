//! A fit's per-group state: the distinct scores with their sums (exact), or the grid.
//!
//! The exact mode holds its points one of two ways. The parametric fits (a cap of 65,536)
//! hash each row into its point. The fits that keep millions of distinct scores (the
//! non-parametric ones, [`super::NONPARAMETRIC_EXACT_CAP`]) and the field-aware ones (one
//! state per field value, thousands of them) append rows as they come
//! ([`Appended`]: 8 bytes a row whose target is 0 or 1) and sort them into their ascending
//! points only when the appended rows are [`APPENDED_PER_POINT`] times the points, or the
//! state is handed on or read: hashing each row into a table of millions of entries (or into
//! the table of one of thousands of field values) is a cache miss a row, and sorting is not.

use std::borrow::Cow;

use datafusion_common::{internal_err, Result};
use hashbrown::{DefaultHashBuilder, HashTable};
use std::hash::BuildHasher;

use super::grid::{Entry, Grid};
use crate::values::sort_f64;

/// A state that keeps rows sorts its appended rows into its points when they are this many
/// times its points (or [`MIN_APPENDED`], if more): each row is merged about 1.25 times
/// over the state's life, and rows that repeat a few scores are collapsed before they take
/// more room than the points would.
const APPENDED_PER_POINT: usize = 4;
/// See [`APPENDED_PER_POINT`].
const MIN_APPENDED: usize = 4096;

/// One distinct score of an exact-mode state and its sums.
#[derive(Debug, Clone, Copy)]
pub(super) struct Point {
    pub(super) s: f64,
    pub(super) n: f64,
    pub(super) t: f64,
}

/// Rows appended to an exact state that keeps rows, not yet sorted into its points.
#[derive(Debug, Default)]
pub(super) struct Appended {
    /// Scores of single rows with target 0, and with target 1.
    class: [Vec<f64>; 2],
    /// Every other (score, Σ1, Σt): rows with an IPS target, points of merged states.
    other: Vec<Point>,
}

impl Appended {
    fn len(&self) -> usize {
        self.class[0].len() + self.class[1].len() + self.other.len()
    }

    fn bytes(&self) -> usize {
        (self.class[0].capacity() + self.class[1].capacity()) * size_of::<f64>()
            + self.other.capacity() * size_of::<Point>()
    }

    #[inline]
    fn push(&mut self, s: f64, n: f64, t: f64) {
        if n == 1.0 && (t == 0.0 || t == 1.0) {
            self.class[(t == 1.0) as usize].push(s);
        } else {
            self.other.push(Point { s, n, t });
        }
    }

    fn sort(&mut self) {
        sort_f64(&mut self.class[0]);
        sort_f64(&mut self.class[1]);
        // Stable: the merged states' points come as ascending runs, which it merges as they
        // are rather than sorting them again.
        self.other.sort_by(|a, b| a.s.total_cmp(&b.s));
    }

    fn clear(&mut self) {
        self.class[0].clear();
        self.class[1].clear();
        self.other.clear();
    }
}

/// Calls `out` with one point per distinct score of `points` (ascending, distinct) and of
/// the sorted appended rows `a`, in ascending order, their sums added.
fn merge_sorted(points: &[Point], a: &Appended, mut out: impl FnMut(Point)) {
    // Scores are finite, so infinity marks a source read to its end.
    const END: f64 = f64::INFINITY;
    let [neg, pos] = &a.class;
    let other = &a.other;
    let (mut i, mut j, mut k, mut l) = (0, 0, 0, 0);
    loop {
        let s = points
            .get(i)
            .map_or(END, |p| p.s)
            .min(neg.get(j).copied().unwrap_or(END))
            .min(pos.get(k).copied().unwrap_or(END))
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
        while neg.get(j) == Some(&s) {
            p.n += 1.0;
            j += 1;
        }
        while pos.get(k) == Some(&s) {
            p.n += 1.0;
            p.t += 1.0;
            k += 1;
        }
        while let Some(q) = other.get(l).filter(|q| q.s == s) {
            p.n += q.n;
            p.t += q.t;
            l += 1;
        }
        out(p);
    }
}

#[derive(Debug)]
pub(crate) struct FitState {
    /// Exact mode: one point per distinct score. Hashed, they are found through `index`
    /// (positions in `points`, hashed by the score's bits) — about 30 bytes a score, since
    /// per-group fits (`GROUP BY advertiser`) can hold many groups in exact mode at once.
    /// In a state that keeps rows, `index` stays empty and `points` are ascending.
    pub(super) index: HashTable<u32>,
    pub(super) points: Vec<Point>,
    /// A state that keeps rows: the rows appended since its points were last sorted
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
    /// grid of 2^`grid_bits` cells per power of two; `keeps_rows`: appended and sorted
    /// rather than hashed (see the module documentation).
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
            self.sort_appended_if_due();
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

    /// Sorts the appended rows into the points of a state that keeps rows, or, when that
    /// makes more than `cap` distinct scores, switches to the grid. Called when the appended
    /// rows are due (see [`APPENDED_PER_POINT`]), and before the state is handed on or read.
    pub(crate) fn sort_appended(&mut self) {
        let Some(a) = &mut self.appended else {
            return;
        };
        if a.len() == 0 {
            return;
        }
        a.sort();
        // Counted first when the points may pass the cap, so that a state about to switch
        // to the grid does not first build the list it would drop.
        if self.points.len() + a.len() > self.cap {
            let mut distinct = 0;
            merge_sorted(&self.points, a, |_| distinct += 1);
            if distinct > self.cap {
                self.switch_to_grid();
                return;
            }
        }
        let mut merged = Vec::with_capacity(self.points.len() + a.len());
        merge_sorted(&self.points, a, |p| merged.push(p));
        a.clear();
        self.points = merged;
    }

    /// Sorts the appended rows in once they are [`APPENDED_PER_POINT`] times the points.
    #[inline]
    fn sort_appended_if_due(&mut self) {
        if let Some(a) = &self.appended {
            if a.len() >= (APPENDED_PER_POINT * self.points.len()).max(MIN_APPENDED) {
                self.sort_appended();
            }
        }
    }

    /// Adds a merged state's exact points (ascending, one per score) to a state that keeps
    /// rows: they become the points of a state that has none yet, or are appended as one
    /// run, which the sort finds and merges as it is.
    pub(super) fn add_sorted_points(&mut self, s: &[f64], n: &[f64], t: &[f64]) {
        if let Some(a) = &mut self.appended {
            if self.points.is_empty() && a.len() == 0 && s.windows(2).all(|w| w[0] < w[1]) {
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
            self.sort_appended_if_due();
        } else {
            for i in 0..s.len() {
                self.add_point(s[i], n[i], t[i]);
            }
        }
    }

    /// Switches from exact points (and appended rows) to the grid.
    pub(super) fn switch_to_grid(&mut self) {
        let old = std::mem::take(&mut self.points);
        let appended = self.appended.take();
        self.index = HashTable::new();
        let mut grid = Box::new(Grid::new(self.grid_bits));
        for p in old {
            grid.add(p.s, p.n, p.t);
        }
        if let Some(a) = appended {
            for (c, scores) in a.class.iter().enumerate() {
                for &s in scores {
                    grid.add(s, 1.0, c as f64);
                }
            }
            for p in &a.other {
                grid.add(p.s, p.n, p.t);
            }
        }
        self.grid = Some(grid);
    }

    /// The exact points: ascending in a state that keeps rows (the appended rows sorted in,
    /// on a copy, when there are any), in arrival order in a hashed one.
    pub(super) fn exact_points(&self) -> Cow<'_, [Point]> {
        match &self.appended {
            Some(a) if a.len() > 0 => {
                let mut a = Appended {
                    class: a.class.clone(),
                    other: a.other.clone(),
                };
                a.sort();
                let mut merged = Vec::with_capacity(self.points.len() + a.len());
                merge_sorted(&self.points, &a, |p| merged.push(p));
                Cow::Owned(merged)
            }
            _ => Cow::Borrowed(&self.points),
        }
    }

    /// The state's entries with their keys: exact points (key = score bits), or the
    /// non-empty grid cells (key = block id << 20 | index, `lo` = cell start).
    pub(super) fn keyed_entries(&self) -> Vec<(i64, Entry)> {
        match &self.grid {
            None => self
                .exact_points()
                .iter()
                .map(|p| {
                    let e = Entry {
                        lo: p.s,
                        n: p.n,
                        t: p.t,
                        ..Default::default()
                    };
                    (p.s.to_bits() as i64, e)
                })
                .collect(),
            Some(g) => g
                .iter()
                .filter(|(_, _, c)| c.n() > 0.0)
                .map(|(id, i, c)| (g.key(id, i), c.entry(g.cell_start(id, i))))
                .collect(),
        }
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
            let mut pts: Vec<(f64, f64, f64)> = self
                .exact_points()
                .iter()
                .filter(|p| p.n > 0.0)
                .map(|p| (p.s, p.n, p.t))
                .collect();
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

    /// Quadrature nodes (score, weight on softplus, weight on t) for the parametric fits.
    pub(crate) fn nodes(&self) -> Vec<(f64, f64, f64)> {
        let entries = self.keyed_entries();
        let mut out = Vec::with_capacity(entries.len() * 2);
        let clamp = |s: f64| s.clamp(self.s_min, self.s_max);
        for (_, e) in &entries {
            if !self.is_grid() {
                out.push((e.lo, e.n, e.t));
                continue;
            }
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

    /// The appended state (its rows added one by one, and as three partial states merged as
    /// sorted runs) against the hashed state, which is the code the fits used before: the
    /// same points, counts exactly and targets to 1e-12 (float sums in another order). This
    /// compares two representations in this crate with each other; the fits' values are
    /// checked against scikit-learn, numpy and netcal in tests/fits.
    #[test]
    fn appended_rows_sort_into_the_hashed_points() {
        let rows = rows();
        let cap = 1_000_000;
        let mut hashed = FitState::new(cap, FINE_BITS, false);
        let mut appended = FitState::new(cap, FINE_BITS, true);
        for &(s, n, t) in &rows {
            hashed.add_point(s, n, t);
            appended.add_point(s, n, t);
        }
        appended.sort_appended();
        let mut merged = FitState::new(cap, FINE_BITS, true);
        for part in rows.chunks(25_000) {
            let mut st = FitState::new(cap, FINE_BITS, true);
            for &(s, n, t) in part {
                st.add_point(s, n, t);
            }
            st.sort_appended();
            let p = st.exact_points();
            let col = |f: fn(&Point) -> f64| p.iter().map(f).collect::<Vec<_>>();
            merged.add_sorted_points(&col(|p| p.s), &col(|p| p.n), &col(|p| p.t));
        }
        merged.sort_appended();
        let want = hashed.sorted_points();
        assert!(want.len() > 30_000, "mostly distinct: {}", want.len());
        for got in [appended.sorted_points(), merged.sorted_points()] {
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
            appended.sort_appended();
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
        st.sort_appended();
        assert!(!st.is_grid());
    }
}
