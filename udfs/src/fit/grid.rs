//! The fixed grid a fit's state switches to past its exact cap (see the module
//! documentation of `fit`): cells of relative width 2⁻⁸ (the non-parametric fits) or 2⁻⁷
//! (the parametric ones), in blocks allocated when first touched.

/// Grid cells per power of two of |s| are 2^bits: `FINE_BITS` for the fits compared with
/// their references point by point (their knots move with the cells), `COARSE_BITS` for the
/// parametric ones, whose objective is as exact at either (see the module documentation of `fit`).
pub(super) const FINE_BITS: u32 = 8;
pub(super) const COARSE_BITS: u32 = 7;
/// Below this |s| the grid is linear: 2 blocks of 2^bits cells of width 2⁻¹⁶ / 2^bits.
pub(super) const LINEAR_LIMIT: f64 = 1.0 / 65536.0; // 2^-16
/// Block ids: sign × 2048 binary exponents, then the negative and positive linear blocks.
pub(super) const LOG_IDS: u32 = 4096;
pub(super) const N_IDS: usize = LOG_IDS as usize + 2;
use crate::labels::Label;

/// One distinct score (exact mode) or one grid cell: sums of 1 and t, and the first two
/// moments of the offset from `lo` under both.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Entry {
    pub(super) lo: f64,
    pub(super) n: f64,
    pub(super) t: f64,
    pub(super) nd: f64,
    pub(super) nd2: f64,
    pub(super) td: f64,
    pub(super) td2: f64,
}

impl Entry {
    /// The same sums with offsets taken from `lo` instead: d' = d + δ, δ = self.lo − lo, so
    /// Σw·d' = Σw·d + δ·Σw and Σw·d'² = Σw·d² + 2δ·Σw·d + δ²·Σw for both weights.
    pub(super) fn reanchored(&self, lo: f64) -> Entry {
        let delta = self.lo - lo;
        let shift =
            |w: f64, wd: f64, wd2: f64| (wd + delta * w, wd2 + delta * (2.0 * wd + delta * w));
        let (nd, nd2) = shift(self.n, self.nd, self.nd2);
        let (td, td2) = shift(self.t, self.td, self.td2);
        Entry {
            lo,
            n: self.n,
            t: self.t,
            nd,
            nd2,
            td,
            td2,
        }
    }
}

/// The sums of one grid cell (its start is implied by its position), as pairs under the
/// weights (1, t): [Σn, Σt], [Σn·d, Σt·d], [Σn·d², Σt·d²]. Paired so that a row's update is
/// three two-lane multiply-adds: three 16-byte loads and stores instead of six of 8 bytes,
/// in a row loop whose speed out of a query is set by its instruction count. The
/// products are formed as (w·d)·d, the order of the unpaired sums, so pairing changes no
/// bit of them.
#[derive(Debug, Clone, Copy, Default)]
#[repr(C, align(16))]
pub(super) struct Cell {
    sums: [Pair; 3],
}

/// Two sums side by side, aligned to 16 bytes so that the row loop's loads fold into its
/// additions (SSE2 folds only aligned loads; with `[f64; 2]` the compiler lost the cell's
/// alignment and loaded each pair on its own).
#[derive(Debug, Clone, Copy, Default)]
#[repr(C, align(16))]
struct Pair([f64; 2]);

impl Pair {
    #[inline(always)]
    fn plus(self, o: [f64; 2]) -> Pair {
        Pair([self.0[0] + o[0], self.0[1] + o[1]])
    }
}

impl Cell {
    /// Adds the weights `w` = (n, t) at offset `d` from the cell's anchor.
    #[inline(always)]
    pub(super) fn add(&mut self, w: [f64; 2], d: f64) {
        let wd = [w[0] * d, w[1] * d];
        let wd2 = [wd[0] * d, wd[1] * d];
        let [s0, s1, s2] = self.sums;
        self.sums = [s0.plus(w), s1.plus(wd), s2.plus(wd2)];
    }

    /// Adds another cell's sums (a partial state's entry), its offsets taken from the same
    /// anchor.
    pub(super) fn merge(&mut self, e: &Entry) {
        let [s0, s1, s2] = self.sums;
        self.sums = [
            s0.plus([e.n, e.t]),
            s1.plus([e.nd, e.td]),
            s2.plus([e.nd2, e.td2]),
        ];
    }

    /// The rows in the cell (Σn).
    pub(super) fn n(&self) -> f64 {
        self.sums[0].0[0]
    }

    /// The cell as an entry anchored at `lo`.
    pub(super) fn entry(&self, lo: f64) -> Entry {
        let [Pair([n, t]), Pair([nd, td]), Pair([nd2, td2])] = self.sums;
        Entry {
            lo,
            n,
            t,
            nd,
            nd2,
            td,
            td2,
        }
    }
}

/// Where a block not yet touched starts (see [`Grid::base_of`]): past every cell (a grid
/// has at most N_IDS blocks of at most 2^8 cells, about 2^20), so a row of an untouched
/// block fails the bounds check of its index.
const UNTOUCHED: u32 = 1 << 31;

/// The flag of a coarse grid's cell keys in a partial state (see [`Grid::key`]).
const COARSE_KEY: i64 = 1 << 19;

/// |s| below this (as bits) lies in the linear blocks.
pub(super) const LINEAR_LIMIT_BITS: u64 = LINEAR_LIMIT.to_bits();

/// For the top bits of s (sign, exponent and `bits` of mantissa): the block id (2048 × sign
/// plus the binary exponent), the index in the block, and the cell's anchor (s with the lower
/// mantissa bits cleared, i.e. truncated toward zero).
#[inline(always)]
fn log_cell(top: u64, bits: u32) -> (u32, usize, f64) {
    (
        (top >> bits) as u32,
        (top as usize) & ((1 << bits) - 1),
        f64::from_bits(top << (52 - bits)),
    )
}

/// The IPS target y / max(q, clip) of a row whose propensity has been checked (so not NaN).
/// Not `f64::max`, which handles NaN: in the grid's row loop this is one instruction
/// instead of five.
#[inline(always)]
pub(super) fn ips_target(y: f64, q: f64, clip: f64) -> f64 {
    y / if q < clip { clip } else { q }
}

/// The smallest and largest of `v`, or None when one is not finite. One pass in
/// independent lanes that vectorises: x · 0 is ±0 for a finite x and NaN otherwise, so the
/// check is float arithmetic (SSE2 has no 64-bit integer compare). Four lanes, not eight:
/// with eight, the twelve accumulators and the copies SSE2's two-operand min/max need do
/// not fit the sixteen registers, and the loop spilled to the stack (0.40 ns a value
/// against 0.23 in a standalone measurement of 8,192-value slices).
pub(super) fn finite_range(v: &[f64]) -> Option<(f64, f64)> {
    const L: usize = 4;
    let mut lo = [f64::INFINITY; L];
    let mut hi = [f64::NEG_INFINITY; L];
    let mut nan = [0.0f64; L];
    let chunks = v.chunks_exact(L);
    let rest = chunks.remainder();
    for c in chunks {
        for k in 0..L {
            let x = c[k];
            nan[k] += x * 0.0;
            lo[k] = if x < lo[k] { x } else { lo[k] };
            hi[k] = if x > hi[k] { x } else { hi[k] };
        }
    }
    let mut out = (f64::INFINITY, f64::NEG_INFINITY);
    for k in 0..L {
        if nan[k] != 0.0 {
            return None;
        }
        out = (out.0.min(lo[k]), out.1.max(hi[k]));
    }
    for &x in rest {
        if !x.is_finite() {
            return None;
        }
        out = (out.0.min(x), out.1.max(x));
    }
    Some(out)
}

/// The fixed grid: 2^bits cells per power of two of |s| (relative width 2^-bits) and two
/// linear blocks of as many cells below 2⁻¹⁶, in blocks allocated when first touched and
/// found by direct indexing (one memory access per row instead of a hash probe).
#[derive(Debug, Clone)]
pub(super) struct Grid {
    /// `FINE_BITS` or `COARSE_BITS` (see `Method::grid_bits`).
    bits: u32,
    /// Per block id: the index in `cells` of the block's first cell ([`UNTOUCHED`] for a
    /// block not yet touched) minus the id's own part of a score's top bits (`id << bits`,
    /// wrapping in u32). The row loop then finds a cell as base + top bits: one addition
    /// that folds into the table's load, where start | (top & mask) took three
    /// instructions. Wrapping u32 arithmetic, exact on every pointer width: the true sum is
    /// below 2^32.
    base_of: Box<[u32; N_IDS]>,
    /// The touched blocks' ids, in allocation order.
    ids: Vec<u32>,
    /// The touched blocks' cells, 2^bits a block.
    cells: Vec<Cell>,
}

impl Grid {
    pub(super) fn new(bits: u32) -> Self {
        debug_assert!(bits == FINE_BITS || bits == COARSE_BITS);
        Self {
            bits,
            base_of: Box::new(std::array::from_fn(|id| {
                UNTOUCHED.wrapping_sub((id as u32) << bits)
            })),
            ids: vec![],
            cells: vec![],
        }
    }

    fn block_len(&self) -> usize {
        1 << self.bits
    }

    /// The key of a cell in a partial state: block id << 20 | index, with `COARSE_KEY` set
    /// on a coarse grid's keys. Stored states written before the parametric fits' grid
    /// became coarse carry 256-cell keys without the flag; [`Grid::unkey`] tells them apart.
    pub(super) fn key(&self, id: u32, idx: usize) -> i64 {
        let flag = if self.bits == COARSE_BITS {
            COARSE_KEY
        } else {
            0
        };
        ((id as i64) << 20) | flag | idx as i64
    }

    /// Where a partial state's cell goes in this grid: `Some((id, idx, None))` for one of
    /// its own keys, `Some((id, idx, Some(lo)))` for a fine key met by a coarse grid (the
    /// fine cell lies in coarse cell idx, whose anchor is `lo`), None when the key cannot be
    /// one of this grid's (out of range, a coarse key met by a fine grid, or a log block
    /// below 2⁻¹⁶, where scores go to the linear blocks).
    pub(super) fn unkey(&self, key: i64) -> Option<(u32, usize, Option<f64>)> {
        let coarse_key = key & COARSE_KEY != 0;
        let (id, idx) = ((key >> 20) as usize, (key & 0x7_FFFF) as usize);
        let near_zero = id < LOG_IDS as usize && (id & 2047) < (LINEAR_LIMIT_BITS >> 52) as usize;
        if key < 0 || id >= N_IDS || near_zero {
            return None;
        }
        let id = id as u32;
        match (self.bits == COARSE_BITS, coarse_key) {
            (true, false) if idx < 1 << FINE_BITS => {
                // A fine cell lies in the coarse cell of its index's top bits (the linear
                // blocks too: the negative block's index counts from its far end in both).
                let idx = idx >> (FINE_BITS - COARSE_BITS);
                Some((id, idx, Some(self.cell_start(id, idx))))
            }
            (_, _) if coarse_key == (self.bits == COARSE_BITS) && idx < self.block_len() => {
                Some((id, idx, None))
            }
            _ => None,
        }
    }

    /// The grid position of a score: block id, cell index in the block, and the cell's
    /// anchor (its bound nearer zero; offsets in the cell are taken from it).
    #[inline]
    fn cell_pos(&self, s: f64) -> (u32, usize, f64) {
        if s.to_bits() & !(1 << 63) < LINEAR_LIMIT_BITS {
            let n = self.block_len() as i64;
            let width = LINEAR_LIMIT / n as f64;
            let k = ((s / width).floor() as i64).clamp(-n, n - 1);
            let lo = k as f64 * width;
            if k < 0 {
                (LOG_IDS, (k + n) as usize, lo)
            } else {
                (LOG_IDS + 1, k as usize, lo)
            }
        } else {
            log_cell(s.to_bits() >> (52 - self.bits), self.bits)
        }
    }

    /// The anchor of cell `idx` of block `id`.
    pub(super) fn cell_start(&self, id: u32, idx: usize) -> f64 {
        let n = self.block_len();
        let width = LINEAR_LIMIT / n as f64;
        match id {
            LOG_IDS => (idx as i64 - n as i64) as f64 * width,
            i if i == LOG_IDS + 1 => idx as f64 * width,
            _ => log_cell(((id as u64) << self.bits) | idx as u64, self.bits).2,
        }
    }

    #[inline(always)]
    pub(super) fn cell(&mut self, id: u32, idx: usize) -> &mut Cell {
        let mut start = self.base_of[id as usize].wrapping_add(id << self.bits);
        if start == UNTOUCHED {
            start = self.new_block(id);
        }
        let start = start as usize;
        let at = start | (idx & (self.block_len() - 1));
        &mut self.cells[at]
    }

    #[cold]
    #[inline(never)]
    fn new_block(&mut self, id: u32) -> u32 {
        // Exact growth: a fit touches a few dozen blocks, and doubling would hold up to
        // twice the memory for the rest of the query.
        let start = self.cells.len();
        self.cells.reserve_exact(self.block_len());
        self.cells.resize(start + self.block_len(), Cell::default());
        self.ids.push(id);
        // At most N_IDS blocks of at most 2^8 cells: far below UNTOUCHED.
        self.base_of[id as usize] = (start as u32).wrapping_sub(id << self.bits);
        start as u32
    }

    /// Adds `n` rows of score `s` and total target `t`.
    #[inline(always)]
    pub(super) fn add(&mut self, s: f64, n: f64, t: f64) {
        let (id, idx, lo) = self.cell_pos(s);
        self.cell(id, idx).add([n, t], s - lo);
    }

    /// Adds one row per score, `target(i)` the target of row i: the hot loop of a fit over
    /// many distinct scores (`cargo bench --bench aggregates -- grid_update`), compiled once
    /// per resolution so that its shifts are constants.
    #[inline(always)]
    fn add_rows_by(&mut self, s: &[f64], target: impl Fn(usize) -> f64) {
        if self.bits == COARSE_BITS {
            self.add_rows_at::<COARSE_BITS>(s, target)
        } else {
            self.add_rows_at::<FINE_BITS>(s, target)
        }
    }

    /// [`Grid::add_rows_by`] at 2^BITS cells per power of two. Scores of |s| ≥ 2⁻¹⁶ in
    /// blocks already touched (nearly all rows) take their cell straight from their bit
    /// pattern in an inner loop that holds the grid as plain slices (so nothing is reloaded
    /// per row); the rest (a new block, the linear cells near zero) go through
    /// [`Grid::add`].
    #[inline(always)]
    fn add_rows_at<const BITS: u32>(&mut self, s: &[f64], target: impl Fn(usize) -> f64) {
        let shift = 52 - BITS;
        // The row's weight, opaque to the compiler: knowing it is 1, the compiler would
        // take 1·d as d and split the cell's two-lane products into scalar ones joined by
        // shuffles (three instructions more a row in a loop whose speed is its count).
        let one = std::hint::black_box(1.0);
        let mut i = 0;
        while i < s.len() {
            let base_of: &[u32; N_IDS] = &self.base_of;
            let cells: &mut [Cell] = &mut self.cells;
            while i < s.len() {
                let bits = s[i].to_bits();
                let top = bits >> shift;
                // top < 2^20: its id bits cancel the base's, leaving start + index.
                let at = base_of[(top >> BITS) as usize].wrapping_add(top as u32);
                // UNTOUCHED + idx lies past the end of the cells: a block not yet touched
                // (and those of |s| < 2⁻¹⁶, which stay untouched: their scores go to the
                // linear blocks) leaves the loop on the bounds check the index needs anyway.
                let Some(cell) = cells.get_mut(at as usize) else {
                    break;
                };
                let d = s[i] - f64::from_bits(top << shift);
                cell.add([one, target(i)], d);
                i += 1;
            }
            if i < s.len() {
                self.add(s[i], 1.0, target(i));
                i += 1;
            }
        }
    }

    /// Adds one row per score, each with target `t` (a class's kept rows).
    pub(super) fn add_rows(&mut self, s: &[f64], t: f64) {
        self.add_rows_by(s, |_| t);
    }

    /// Adds one row per (s, y), the label as the target.
    pub(super) fn add_labelled<Y: Label>(&mut self, s: &[f64], y: &[Y]) {
        let y = &y[..s.len()];
        self.add_rows_by(s, |i| y[i].to_f64());
    }

    /// Adds one row per (s, y, q), the target y / max(q, clip), for propensities already
    /// checked to lie in (0, 1]. The division is done here rather than in a vectorised pass
    /// of its own: it adds about 0.5 ns a row to this loop, where the pass took about 1 ns
    /// a row and wrote and read back 8 bytes a row.
    pub(super) fn add_weighted<Y: Label>(&mut self, s: &[f64], y: &[Y], q: &[f64], clip: f64) {
        let (y, q) = (&y[..s.len()], &q[..s.len()]);
        self.add_rows_by(s, |i| ips_target(y[i].to_f64(), q[i], clip));
    }

    /// Adds another grid's cells (of the same resolution) to this one's.
    pub(super) fn absorb(&mut self, other: &Grid) {
        debug_assert_eq!(self.bits, other.bits);
        for (id, idx, c) in other.iter() {
            if c.n() != 0.0 {
                self.cell(id, idx).merge(&c.entry(0.0));
            }
        }
    }

    /// The touched cells: (block id, index, cell), in ascending order of block id, not the
    /// order the blocks were first touched (in a merged state, the order the partial states
    /// arrived in), so that sums over the cells do not change from one run to the next.
    pub(super) fn iter(&self) -> impl Iterator<Item = (u32, usize, &Cell)> + '_ {
        let mut blocks: Vec<(u32, &[Cell])> = self
            .ids
            .iter()
            .copied()
            .zip(self.cells.chunks_exact(self.block_len()))
            .collect();
        blocks.sort_unstable_by_key(|&(id, _)| id);
        blocks
            .into_iter()
            .flat_map(|(id, block)| block.iter().enumerate().map(move |(i, c)| (id, i, c)))
    }

    pub(super) fn bytes(&self) -> usize {
        size_of::<[u32; N_IDS]>()
            + self.ids.capacity() * size_of::<u32>()
            + self.cells.capacity() * size_of::<Cell>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fit::state::FitState;

    #[test]
    fn finite_range_rejects_every_non_finite_value_in_any_lane() {
        let base: Vec<f64> = (0..37).map(|i| i as f64 * 0.25 - 3.0).collect();
        assert_eq!(finite_range(&base), Some((-3.0, 6.0)));
        assert_eq!(finite_range(&[-0.0; 20]), Some((-0.0, -0.0)));
        assert_eq!(finite_range(&[]), Some((f64::INFINITY, f64::NEG_INFINITY)));
        for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            // Every position: in the vectorised lanes and in the remainder.
            for at in 0..base.len() {
                let mut v = base.clone();
                v[at] = bad;
                assert_eq!(finite_range(&v), None, "{bad} at {at}");
            }
        }
    }

    /// Scores over the linear blocks and both signs' log blocks, as a stored state of
    /// either resolution would see them.
    fn scores() -> Vec<(f64, f64)> {
        (0..20_000)
            .map(|i| {
                let u = (((i * 7919) % 10_007) as f64 + 0.5) / 10_007.0;
                let s = if i % 10 == 0 {
                    (u - 0.5) * 3e-5 // |s| < 2^-16: the linear blocks
                } else {
                    (u / (1.0 - u)).ln()
                };
                (s, ((i * 31) % 7 < 2) as i64 as f64 / (0.1 + u * 0.9))
            })
            .collect()
    }

    fn state_of(bits: u32, rows: &[(f64, f64)]) -> FitState {
        let mut st = FitState::new(0, bits, false);
        st.switch_to_grid();
        for &(s, t) in rows {
            st.add_point(s, 1.0, t);
        }
        st
    }

    /// A state written at 256 cells (every fit's resolution before the parametric ones
    /// became coarse, so what a stored `fit_gaussian_calib_state` of that time holds) merged
    /// into a coarse grid gives the coarse grid of the same rows: the same cells, Σn and Σt
    /// exact, the re-anchored moments to rounding. An equivalence of two routes through this
    /// code (not an independent value); the fits on the coarse grid are checked against the
    /// exact objective in tests/fits/fit_grid.rs.
    #[test]
    fn a_fine_state_merges_into_a_coarse_grid_as_its_own_rows() {
        let rows = scores();
        let fine = state_of(FINE_BITS, &rows);
        let direct = state_of(COARSE_BITS, &rows);
        let mut merged = state_of(COARSE_BITS, &[]);
        for (key, e) in fine.keyed_entries() {
            assert_eq!(key & COARSE_KEY, 0, "a fine key carries no flag");
            merged.add_cell(key, &e).unwrap();
        }
        let (a, b) = (direct.keyed_entries(), merged.keyed_entries());
        assert_eq!(a.len(), b.len());
        assert!(a.len() > 500, "the rows span many cells: {}", a.len());
        let close = |x: f64, y: f64, scale: f64| (x - y).abs() <= 1e-12 * scale.max(1e-300);
        for ((ka, ea), (kb, eb)) in a.iter().zip(&b) {
            assert_eq!(ka, kb);
            assert_eq!(ea.lo, eb.lo);
            assert!(
                close(ea.n, eb.n, ea.n) && close(ea.t, eb.t, ea.t),
                "{ea:?} {eb:?}"
            );
            // Offsets are at most the cell's width from its anchor.
            let width = ea.lo.abs().max(LINEAR_LIMIT) / 64.0;
            assert!(close(ea.nd, eb.nd, ea.n * width), "{ea:?} {eb:?}");
            assert!(close(ea.nd2, eb.nd2, ea.n * width * width), "{ea:?} {eb:?}");
            assert!(close(ea.td, eb.td, ea.t * width), "{ea:?} {eb:?}");
            assert!(close(ea.td2, eb.td2, ea.t * width * width), "{ea:?} {eb:?}");
        }
    }

    /// The row loop (`add_labelled`, cells found as base + top bits) and the per-row path
    /// (`add`, cells found through `cell_pos` and the block's start) put every score in the
    /// same cell with the same sums, at both resolutions, for scores over the whole range:
    /// both signs, the largest and smallest normal magnitudes, subnormals, both sides of
    /// 2⁻¹⁶ (the linear blocks), and blocks first touched in the middle of a batch. An
    /// equivalence of two routes (not an independent value): it guards the index
    /// arithmetic; the fits' values are checked against the exact objective in
    /// tests/fits/fit_grid.rs.
    #[test]
    fn the_row_loop_and_the_per_row_path_fill_the_same_cells() {
        let mut s: Vec<f64> = scores().into_iter().map(|(s, _)| s).collect();
        for x in [
            f64::MAX,
            f64::MIN_POSITIVE,
            5e-324,
            LINEAR_LIMIT,
            LINEAR_LIMIT.next_down(),
            1.0,
            1e300,
            1e-300,
        ] {
            s.extend([x, -x, x, -x]);
        }
        let y: Vec<i8> = (0..s.len()).map(|i| ((i * 31) % 7 < 2) as i8).collect();
        for bits in [COARSE_BITS, FINE_BITS] {
            let mut by_rows = Grid::new(bits);
            for (sc, yc) in s.chunks(1000).zip(y.chunks(1000)) {
                by_rows.add_labelled(sc, yc);
            }
            let mut one_by_one = Grid::new(bits);
            for (&si, &yi) in s.iter().zip(&y) {
                one_by_one.add(si, 1.0, f64::from(yi));
            }
            let cells = |g: &Grid| {
                let mut c: Vec<(u32, usize, Entry)> = g
                    .iter()
                    .filter(|(_, _, c)| c.n() > 0.0)
                    .map(|(id, idx, c)| (id, idx, c.entry(g.cell_start(id, idx))))
                    .collect();
                c.sort_by_key(|&(id, idx, _)| (id, idx));
                c
            };
            let (a, b) = (cells(&by_rows), cells(&one_by_one));
            assert!(a.len() > 500, "the scores span many cells: {}", a.len());
            assert_eq!(a.len(), b.len());
            for ((ia, xa, ea), (ib, xb, eb)) in a.iter().zip(&b) {
                assert_eq!((ia, xa), (ib, xb));
                assert_eq!(format!("{ea:?}"), format!("{eb:?}"), "block {ia} cell {xa}");
            }
        }
    }

    #[test]
    fn keys_that_are_not_the_grids_are_refused() {
        let coarse = state_of(COARSE_BITS, &[(1.5, 1.0)]);
        let fine = state_of(FINE_BITS, &[(1.5, 1.0)]);
        let (kc, _) = coarse.keyed_entries()[0];
        let (kf, _) = fine.keyed_entries()[0];
        let g = |st: &FitState| {
            st.grid
                .as_deref()
                .map(|g| (g.unkey(kc), g.unkey(kf)))
                .unwrap()
        };
        let (c_c, c_f) = g(&coarse);
        assert!(matches!(c_c, Some((_, _, None))) && matches!(c_f, Some((_, _, Some(_)))));
        let (f_c, f_f) = g(&fine);
        assert!(f_c.is_none() && matches!(f_f, Some((_, _, None))));
        let fine_grid = fine.grid.as_deref().unwrap();
        // Out of range, negative, and a log block below 2^-16 (exponent 1000).
        for key in [
            -1,
            (N_IDS as i64) << 20,
            (1000 << 20) | 3,
            (1023 << 20) | 256,
        ] {
            assert!(fine_grid.unkey(key).is_none(), "{key}");
        }
    }
}
