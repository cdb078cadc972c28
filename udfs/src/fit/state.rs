//! A fit's per-group state: the distinct scores with their sums (exact), or the grid.

use datafusion_common::{internal_err, Result};
use hashbrown::{DefaultHashBuilder, HashTable};
use std::hash::BuildHasher;

use super::grid::{Entry, Grid};

/// One distinct score of an exact-mode state and its sums.
#[derive(Debug, Clone, Copy)]
pub(super) struct Point {
    pub(super) s: f64,
    pub(super) n: f64,
    pub(super) t: f64,
}

#[derive(Debug)]
pub(crate) struct FitState {
    /// Exact mode: one point per distinct score, found through `index` (positions in
    /// `points`, hashed by the score's bits) — about 30 bytes a score, since per-group fits
    /// (`GROUP BY advertiser`) can hold many groups in exact mode at once.
    pub(super) index: HashTable<u32>,
    pub(super) points: Vec<Point>,
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
    /// grid of 2^`grid_bits` cells per power of two.
    pub(super) fn new(cap: usize, grid_bits: u32) -> Self {
        Self {
            cap,
            grid_bits,
            index: HashTable::new(),
            points: vec![],
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

    /// Switches from exact points to the grid.
    pub(super) fn switch_to_grid(&mut self) {
        let old = std::mem::take(&mut self.points);
        self.index = HashTable::new();
        self.grid = Some(Box::new(Grid::new(self.grid_bits)));
        for p in old {
            self.add_point(p.s, p.n, p.t);
        }
    }

    /// The state's entries with their keys: exact points (key = score bits), or the
    /// non-empty grid cells (key = block id << 20 | index, `lo` = cell start).
    pub(super) fn keyed_entries(&self) -> Vec<(i64, Entry)> {
        match &self.grid {
            None => self
                .points
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
            + self.grid.as_ref().map_or(0, |g| g.bytes())
    }

    pub(crate) fn observe_range(&mut self, lo: f64, hi: f64) {
        // `+ 0.0` makes a -0.0 bound 0.0, whatever order the zeros came in.
        self.s_min = self.s_min.min(lo) + 0.0;
        self.s_max = self.s_max.max(hi) + 0.0;
    }

    /// The points (score, Σ1, Σt) in score order: exact scores, or each cell's mean.
    pub(crate) fn sorted_points(&self) -> Vec<(f64, f64, f64)> {
        let grid = self.is_grid();
        let mut pts: Vec<(f64, f64, f64)> = self
            .keyed_entries()
            .into_iter()
            .filter(|(_, e)| e.n > 0.0)
            .map(|(_, e)| {
                let s = if grid {
                    (e.lo + e.nd / e.n).clamp(self.s_min, self.s_max)
                } else {
                    e.lo
                };
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
