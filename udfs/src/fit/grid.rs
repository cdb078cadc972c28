//! The fixed grid a fit's state switches to past `EXACT_CAP` distinct scores (see the
//! module documentation of `fit`): cells of relative width 2⁻⁸, in blocks allocated when
//! first touched.

use super::*;
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

/// The sums of one grid cell (its start is implied by its position).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Cell {
    pub(super) n: f64,
    pub(super) t: f64,
    pub(super) nd: f64,
    pub(super) nd2: f64,
    pub(super) td: f64,
    pub(super) td2: f64,
}

/// The grid position of a score: block id, cell index in the block, and the cell's anchor
/// (its bound nearer zero; offsets in the cell are taken from it).
#[inline]
pub(super) fn cell_pos(s: f64) -> (u32, usize, f64) {
    if s.to_bits() & !(1 << 63) < LINEAR_LIMIT_BITS {
        let k = ((s / LINEAR_WIDTH).floor() as i64).clamp(-(BLOCK as i64), BLOCK as i64 - 1);
        let lo = k as f64 * LINEAR_WIDTH;
        if k < 0 {
            (LOG_IDS, (k + BLOCK as i64) as usize, lo)
        } else {
            (LOG_IDS + 1, k as usize, lo)
        }
    } else {
        log_cell(s.to_bits() >> SHIFT)
    }
}

/// Bits below the cell index in a score's bit pattern.
pub(super) const SHIFT: u32 = 52 - CELL_BITS;
/// |s| below this (as bits) lies in the linear blocks.
pub(super) const LINEAR_LIMIT_BITS: u64 = LINEAR_LIMIT.to_bits();

/// For the top bits (sign, exponent and `CELL_BITS` of mantissa) of s: the block id (sign ×
/// 2048 + binary exponent), the index in the block, and the cell's anchor (s with the lower
/// mantissa bits cleared, i.e. truncated toward zero).
#[inline(always)]
pub(super) fn log_cell(top: u64) -> (u32, usize, f64) {
    (
        (top >> CELL_BITS) as u32,
        (top as usize) & (BLOCK - 1),
        f64::from_bits(top << SHIFT),
    )
}

/// The smallest and largest of `s`, or None when one is not finite. One pass in independent
/// lanes, so that it vectorises.
pub(super) fn finite_range(s: &[f64]) -> Option<(f64, f64)> {
    const L: usize = 8;
    const EXP: u64 = 0x7ff0_0000_0000_0000;
    let mut lo = [f64::INFINITY; L];
    let mut hi = [f64::NEG_INFINITY; L];
    let mut bad = [0u64; L];
    let chunks = s.chunks_exact(L);
    let rest = chunks.remainder();
    for c in chunks {
        for k in 0..L {
            let x = c[k];
            bad[k] |= u64::from(x.to_bits() & EXP == EXP);
            lo[k] = if x < lo[k] { x } else { lo[k] };
            hi[k] = if x > hi[k] { x } else { hi[k] };
        }
    }
    let mut out = (f64::INFINITY, f64::NEG_INFINITY);
    for k in 0..L {
        if bad[k] != 0 {
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

/// The IPS targets y / max(q, clip) into `t`; false when a label is not 0/1 or a propensity
/// is not in (0, 1]. One branch-free pass that vectorises.
pub(super) fn ips_targets<Y: Label>(y: &[Y], q: &[f64], clip: f64, t: &mut [f64]) -> bool {
    let mut ok = true;
    for ((t, &y), &q) in t.iter_mut().zip(y).zip(q) {
        ok &= y.is_label() & (q > 0.0) & (q <= 1.0);
        *t = y.to_f64() / q.max(clip);
    }
    ok
}

/// The anchor of cell `idx` of block `id`.
pub(super) fn cell_start(id: u32, idx: usize) -> f64 {
    match id {
        LOG_IDS => (idx as i64 - BLOCK as i64) as f64 * LINEAR_WIDTH,
        i if i == LOG_IDS + 1 => idx as f64 * LINEAR_WIDTH,
        _ => log_cell(((id as u64) << CELL_BITS) | idx as u64).2,
    }
}

/// The fixed grid: blocks of `BLOCK` cells allocated when first touched, found by direct
/// indexing (one memory access per row instead of a hash probe).
#[derive(Debug)]
pub(super) struct Grid {
    /// Per block id: 1 + the block's position in `cells` (in blocks), or 0 when untouched.
    pub(super) block_of: Vec<u32>,
    /// The touched blocks' ids, in allocation order.
    pub(super) ids: Vec<u32>,
    pub(super) cells: Vec<Cell>,
}

impl Grid {
    pub(super) fn new() -> Self {
        Self {
            block_of: vec![0; N_IDS],
            ids: vec![],
            cells: vec![],
        }
    }

    #[inline(always)]
    pub(super) fn cell(&mut self, id: u32, idx: usize) -> &mut Cell {
        let mut b = self.block_of[id as usize] as usize;
        if b == 0 {
            b = self.new_block(id);
        }
        &mut self.cells[(b - 1) * BLOCK + (idx & (BLOCK - 1))]
    }

    #[cold]
    #[inline(never)]
    pub(super) fn new_block(&mut self, id: u32) -> usize {
        self.ids.push(id);
        // Exact growth: a fit touches a few dozen blocks, and doubling would hold up to
        // twice the memory for the rest of the query.
        self.cells.reserve_exact(BLOCK);
        self.cells.resize(self.ids.len() * BLOCK, Cell::default());
        self.block_of[id as usize] = self.ids.len() as u32;
        self.ids.len()
    }

    #[inline(always)]
    pub(super) fn add(&mut self, s: f64, n: f64, t: f64) {
        let (id, idx, lo) = cell_pos(s);
        let d = s - lo;
        let c = self.cell(id, idx);
        c.n += n;
        c.t += t;
        c.nd += n * d;
        c.nd2 += n * d * d;
        c.td += t * d;
        c.td2 += t * d * d;
    }

    /// Adds one row per (s, t): the hot loop of a fit over many distinct scores (about 2.5 ns
    /// a row, `cargo bench --bench aggregates -- grid_update`). With 256 cells per power of
    /// two the cells of scores spanning [-20, 20] fit in a core's L2 cache; at 1024 this loop
    /// was bound by cache misses.
    pub(super) fn add_rows(&mut self, s: &[f64], t: &[f64]) {
        for (&si, &ti) in s.iter().zip(t) {
            self.add(si, 1.0, ti);
        }
    }

    /// The touched cells: (block id, index, cell).
    pub(super) fn iter(&self) -> impl Iterator<Item = (u32, usize, &Cell)> + '_ {
        self.ids.iter().enumerate().flat_map(move |(b, &id)| {
            self.cells[b * BLOCK..(b + 1) * BLOCK]
                .iter()
                .enumerate()
                .map(move |(i, c)| (id, i, c))
        })
    }

    pub(super) fn bytes(&self) -> usize {
        (self.block_of.capacity() + self.ids.capacity()) * size_of::<u32>()
            + self.cells.capacity() * size_of::<Cell>()
    }
}
