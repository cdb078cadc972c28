//! The bins of the `'quantile'` rule (scikit-learn's `calibration_curve(strategy='quantile')`)
//! over a group's kept rows: edges from the order statistics numpy's percentiles interpolate
//! between (two per edge, found by a selection, not a sort), then every row counted into its
//! bin. Many unweighted rows take one pass instead (`quantile_pass`).

use super::bin_sums::{sum_copies, Bin, BinStats, COPIES};
use super::binning::{quantile_edges, quantile_edges_unsorted, weighted_quantile_edges};
use super::quantile_pass::{one_pass, EdgeRule};
use crate::values::spill::ReadBehind;
use crate::values::Rows;

/// Rows binned between two looks at whether a spilled part's pages can go.
const BLOCK: usize = 1 << 14;

/// Bins a group's rows by `'quantile'` edges computed from them. A row goes to the number of
/// inner edges strictly below its p (`searchsorted(…, side='left')`), so equal p always
/// share a bin; equal edges leave empty bins between them.
pub(super) fn quantile_bins(rows: &mut Rows, m: usize) -> Vec<Bin> {
    let mut out: Vec<Bin> = (0..m)
        .map(|_| Bin {
            stats: BinStats::default(),
            lower: None,
            upper: None,
        })
        .collect();
    if rows.len() == 0 {
        return out;
    }
    if let Some(pass) = one_pass(rows, m, EdgeRule::Percentiles) {
        add_class_sums(&mut out, &pass.edges, &pass.sums);
        return out;
    }
    if let Some(edges) = quantile_edges_unsorted(rows, m) {
        // Unweighted and many rows: edges by selection, rows binned where they lie.
        let below = EdgeTable::new(&edges[1..m]);
        let sums = [0, 1].map(|c| {
            let mut copies = vec![[0.0; 2]; COPIES * m];
            for part in rows.parts(c) {
                let quads = part.chunks_exact(COPIES);
                let rest = quads.remainder();
                for quad in quads {
                    for (k, &p) in quad.iter().enumerate() {
                        let s = &mut copies[k * m + below.count(p)];
                        s[0] += 1.0;
                        s[1] += p;
                    }
                }
                for &p in rest {
                    let s = &mut copies[below.count(p)];
                    s[0] += 1.0;
                    s[1] += p;
                }
            }
            sum_copies(&copies, m)
        });
        add_class_sums(&mut out, &edges, &sums);
        return out;
    }
    // Each class as ascending parts (scores, weights): a weighted group's are read where
    // they lie; an unweighted group's are sorted into one slice a class.
    let (edges, classes) = if rows.weighted() {
        let [negs, poss] = rows.sorted_weighted_parts();
        (weighted_quantile_edges(&negs, &poss, m), [negs, poss])
    } else {
        let [neg, pos] = rows.sorted();
        (
            quantile_edges(neg, pos, m),
            [vec![(neg, &[][..])], vec![(pos, &[][..])]],
        )
    };
    let inner = &edges[1..m];
    set_edges(&mut out, &edges);
    for (c, parts) in classes.into_iter().enumerate() {
        let y = c as f64;
        for (ps, ws) in parts {
            // A part is sorted: walk the edges along with it, a block at a time, letting
            // a spilled part's pages go behind.
            let mut b = 0;
            let mut behind = [ReadBehind::new(ps), ReadBehind::new(ws)];
            for (block, start) in ps.chunks(BLOCK).zip((0..).step_by(BLOCK)) {
                for (i, &p) in block.iter().enumerate() {
                    while b < inner.len() && inner[b] < p {
                        b += 1;
                    }
                    let w = ws.get(start + i).copied().unwrap_or(1.0);
                    out[b.min(m - 1)].stats.add_row(p, y, w);
                }
                let read = start + block.len();
                behind[0].advance(ps, read);
                behind[1].advance(ws, read);
            }
        }
    }
    out
}

/// Sets the bins' lower and upper edges.
fn set_edges(out: &mut [Bin], edges: &[f64]) {
    for (k, bin) in out.iter_mut().enumerate() {
        bin.lower = Some(edges[k]);
        bin.upper = Some(edges[k + 1]);
    }
}

/// Sets the bins' edges and adds, per class c (its label), each bin's row count and Σp.
fn add_class_sums(out: &mut [Bin], edges: &[f64], sums: &[Vec<[f64; 2]>; 2]) {
    set_edges(out, edges);
    for (c, class_sums) in sums.iter().enumerate() {
        for (bin, &[count, sum_p]) in out.iter_mut().zip(class_sums) {
            let y_sum = count * c as f64;
            let s = &mut bin.stats;
            s.count += count;
            s.w += count;
            s.ww += count;
            s.wp += sum_p;
            s.wy += y_sum;
            s.wd += y_sum - sum_p;
        }
    }
}

/// The number of edges strictly below a probability, for the many rows of `'quantile'`
/// bins: a table over 4,096 equal cells of [0, 1] answers for every cell that no edge comes
/// near (all but a few dozen), the edges themselves for the rest (a branch-free count for few
/// bins; a binary search mispredicts about every other step on distinct scores).
struct EdgeTable<'a> {
    edges: &'a [f64],
    /// Per cell, the count for every p in it, or `NEAR_AN_EDGE`.
    cells: Vec<u16>,
}

impl<'a> EdgeTable<'a> {
    const CELLS: usize = 4096;
    const NEAR_AN_EDGE: u16 = u16::MAX;

    fn new(edges: &'a [f64]) -> Self {
        let below = |x: f64| edges.partition_point(|&e| e < x);
        let t = Self::CELLS as f64;
        // A p that `cell` puts in cell i lies in [i/T, (i+1)/T] up to rounding: the count is
        // the same for all of them when it is the same at both ends of the cell widened by a
        // cell on each side (exact: T is a power of two).
        let cells = (0..Self::CELLS)
            .map(|i| {
                let (lo, hi) = (below((i as f64 - 1.0) / t), below((i as f64 + 2.0) / t));
                if lo == hi && lo < usize::from(Self::NEAR_AN_EDGE) {
                    lo as u16
                } else {
                    Self::NEAR_AN_EDGE
                }
            })
            .collect();
        Self { edges, cells }
    }

    /// The number of edges strictly below p, for p in [0, 1].
    #[inline(always)]
    fn count(&self, p: f64) -> usize {
        let cell = ((p * Self::CELLS as f64) as u32).min(Self::CELLS as u32 - 1);
        match self.cells[cell as usize] {
            Self::NEAR_AN_EDGE => self.exact(p),
            n => usize::from(n),
        }
    }

    #[cold]
    fn exact(&self, p: f64) -> usize {
        if self.edges.len() <= 32 {
            self.edges.iter().fold(0, |n, &e| n + usize::from(e < p))
        } else {
            self.edges.partition_point(|&e| e < p)
        }
    }
}
