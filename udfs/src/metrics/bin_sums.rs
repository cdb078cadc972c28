//! The per-bin sums of the binned metrics (`ece`, `mce`, `reliability`, `ace`,
//! `rmsce`): `m` bins per group, group-major.
//!
//! A bin's full sums ([`BinStats`]) are the row count, Σw, Σw·p, Σw·y, Σw·(y − p) and Σw².
//! An unweighted row touches only three of them (count, Σp, Σy): with w = 1 the other three
//! follow (Σw = Σw² = count, Σ(y − p) = Σy − Σp), and the count and Σy are integers. So an
//! unweighted kernel keeps 16 bytes a bin on its hot path instead of 48: the count and the
//! positives packed in one u64, and Σp. That is what decides the speed of a `GROUP BY` with
//! thousands of groups, where every row's bin is a cache miss (docs/performance.md has the
//! profile). The packed counts move to f64 sums before either half could reach
//! 2^32; merged states go to those f64 sums directly.

use crate::labels::Label;

/// A bin's sums. The state of a fixed-edge binned metric is these six fields as six list
/// columns, in this order ([`BinStats::to_array`]).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct BinStats {
    /// Rows.
    pub(crate) count: f64,
    /// Σw.
    pub(crate) w: f64,
    /// Σw·p.
    pub(crate) wp: f64,
    /// Σw·y.
    pub(crate) wy: f64,
    /// Σw·(y − p).
    pub(crate) wd: f64,
    /// Σw².
    pub(crate) ww: f64,
}

impl BinStats {
    /// The number of sums: the state's columns.
    pub(crate) const LEN: usize = 6;

    #[inline(always)]
    fn of_row(p: f64, y: f64, w: f64) -> Self {
        Self {
            count: 1.0,
            w,
            wp: w * p,
            wy: w * y,
            wd: w * (y - p),
            ww: w * w,
        }
    }

    #[inline(always)]
    pub(crate) fn add(&mut self, s: &BinStats) {
        self.count += s.count;
        self.w += s.w;
        self.wp += s.wp;
        self.wy += s.wy;
        self.wd += s.wd;
        self.ww += s.ww;
    }

    /// Adds a row of weight `w`.
    #[inline(always)]
    pub(crate) fn add_row(&mut self, p: f64, y: f64, w: f64) {
        self.add(&Self::of_row(p, y, w));
    }

    /// The sums in the state's column order.
    pub(crate) fn to_array(self) -> [f64; Self::LEN] {
        [self.count, self.w, self.wp, self.wy, self.wd, self.ww]
    }

    pub(crate) fn from_array([count, w, wp, wy, wd, ww]: [f64; Self::LEN]) -> Self {
        Self {
            count,
            w,
            wp,
            wy,
            wd,
            ww,
        }
    }
}

/// An unweighted bin on the hot path: `n` = count + positives·2^32, and Σp.
#[derive(Debug, Clone, Copy, Default)]
struct Hot {
    n: u64,
    p: f64,
}

const POSITIVE: u64 = 1 << 32;

#[inline(always)]
fn add_hot<Y: Label>(into: &mut Hot, p: f64, y: Y) {
    // y is a checked label, 0 or 1, except in the one-group loop, which discards the sums
    // of a batch with a bad label (so wrapping, never an overflow panic).
    into.n = into.n.wrapping_add(1 + (y.bit() << 32));
    into.p += p;
}

impl Hot {
    /// The full sums of an unweighted bin.
    fn stats(self) -> BinStats {
        let (count, positives) = ((self.n & (POSITIVE - 1)) as f64, (self.n >> 32) as f64);
        BinStats {
            count,
            w: count,
            wp: self.p,
            wy: positives,
            wd: positives - self.p,
            ww: count,
        }
    }
}

#[derive(Debug, Clone)]
enum Storage {
    /// `hot`: the packed counts and Σp of the rows added since the last spill. `cold`: full
    /// sums of spilled bins and merged states, empty until the first of them.
    Unweighted {
        hot: Vec<Hot>,
        cold: Vec<BinStats>,
        /// Rows added to `hot` since the last spill (no bin's count can be larger).
        unspilled: u64,
    },
    /// All six sums per bin.
    Weighted(Vec<BinStats>),
}

/// The copies of the one-group loop ([`BinSums::try_add_unweighted_one_group`]).
const LANES: usize = 4;
/// The most bins the one-group loop takes: a row's bin is masked to this many, so the loop
/// needs no bounds check and a bad row's bin stays in the copies.
const LANE_BINS: usize = 256;
type Lanes = [[Hot; LANES]; LANE_BINS];

/// The sums of `m` bins per group.
#[derive(Debug, Clone)]
pub(crate) struct BinSums {
    m: usize,
    storage: Storage,
    /// The one-group loop's copies, all zero between batches (allocated at its first batch;
    /// 16 KiB, reused, so a batch clears only the bins it used).
    lanes: Option<Box<Lanes>>,
}

impl BinSums {
    pub(crate) fn new(m: usize, weighted: bool) -> Self {
        let storage = if weighted {
            Storage::Weighted(vec![])
        } else {
            Storage::Unweighted {
                hot: vec![],
                cold: vec![],
                unspilled: 0,
            }
        };
        Self {
            m,
            storage,
            lanes: None,
        }
    }

    /// The same shape with no groups.
    pub(crate) fn empty(&self) -> Self {
        Self::new(self.m, matches!(self.storage, Storage::Weighted(_)))
    }

    pub(crate) fn num_groups(&self) -> usize {
        let bins = match &self.storage {
            Storage::Unweighted { hot, .. } => hot.len(),
            Storage::Weighted(full) => full.len(),
        };
        bins / self.m
    }

    pub(crate) fn resize(&mut self, groups: usize) {
        let n = groups * self.m;
        match &mut self.storage {
            Storage::Unweighted { hot, cold, .. } => {
                if hot.len() < n {
                    hot.resize(n, Hot::default());
                }
                if !cold.is_empty() && cold.len() < n {
                    cold.resize(n, BinStats::default());
                }
            }
            Storage::Weighted(full) => {
                if full.len() < n {
                    full.resize(n, BinStats::default());
                }
            }
        }
    }

    /// Drops the first `groups` groups.
    pub(crate) fn drain(&mut self, groups: usize) {
        let n = groups * self.m;
        match &mut self.storage {
            Storage::Unweighted { hot, cold, .. } => {
                hot.drain(..n);
                if !cold.is_empty() {
                    cold.drain(..n);
                }
            }
            Storage::Weighted(full) => {
                full.drain(..n);
            }
        }
    }

    /// Bytes reserved.
    pub(crate) fn size(&self) -> usize {
        let lanes = self.lanes.as_ref().map_or(0, |_| size_of::<Lanes>());
        lanes
            + match &self.storage {
                Storage::Unweighted { hot, cold, .. } => {
                    hot.capacity() * size_of::<Hot>() + cold.capacity() * size_of::<BinStats>()
                }
                Storage::Weighted(full) => full.capacity() * size_of::<BinStats>(),
            }
    }

    /// To call before adding up to `rows` rows: moves the packed counts to the f64 sums when
    /// they could otherwise overflow 32 bits.
    pub(crate) fn reserve_rows(&mut self, rows: usize) {
        if let Storage::Unweighted {
            hot,
            cold,
            unspilled,
        } = &mut self.storage
        {
            if *unspilled + rows as u64 >= POSITIVE - 1 {
                if cold.is_empty() {
                    cold.resize(hot.len(), BinStats::default());
                }
                for (h, c) in hot.iter_mut().zip(cold.iter_mut()) {
                    c.add(&h.stats());
                    *h = Hot::default();
                }
                *unspilled = 0;
            }
            *unspilled += rows as u64;
        }
    }

    /// The full sums of bin `b` of group `g`.
    pub(crate) fn stats(&self, g: usize, b: usize) -> BinStats {
        let i = g * self.m + b;
        match &self.storage {
            Storage::Unweighted { hot, cold, .. } => {
                let mut s = hot[i].stats();
                if let Some(c) = cold.get(i) {
                    s.add(c);
                }
                s
            }
            Storage::Weighted(full) => full[i],
        }
    }

    /// Adds the full sums `s` (a merged state's bin) to bin `b` of group `g`.
    pub(crate) fn merge_bin(&mut self, g: usize, b: usize, s: &BinStats) {
        let i = g * self.m + b;
        match &mut self.storage {
            Storage::Unweighted { hot, cold, .. } => {
                if cold.is_empty() {
                    cold.resize(hot.len(), BinStats::default());
                }
                cold[i].add(s);
            }
            Storage::Weighted(full) => full[i].add(s),
        }
    }

    /// Adds one checked row (weight `w`; 1 for an unweighted kernel) to group `g`'s bins
    /// (after [`Self::reserve_rows`]).
    #[inline(always)]
    pub(crate) fn add_row(&mut self, g: usize, b: usize, p: f64, y: f64, w: f64) {
        let i = g * self.m + b;
        match &mut self.storage {
            Storage::Unweighted { hot, .. } => add_hot(&mut hot[i], p, y),
            Storage::Weighted(full) => full[i].add_row(p, y, w),
        }
    }

    /// Adds checked rows (p in [0, 1], labels 0/1, weights ≥ 0; after
    /// [`Self::reserve_rows`]) of a `GROUP BY`, row i to group `groups[i]`, `bin` giving each
    /// p its bin and the p it counts. One tight loop per storage, with nothing between the
    /// rows but their own loads and stores, so the processor overlaps the cache misses of the
    /// rows in flight (the profile showed a call per row here before).
    pub(crate) fn add_rows_grouped<Y: Label>(
        &mut self,
        bin: impl Fn(f64) -> (usize, f64),
        groups: &[usize],
        p: &[f64],
        y: &[Y],
        w: Option<&[f64]>,
    ) {
        let m = self.m;
        match &mut self.storage {
            Storage::Unweighted { hot, .. } => {
                // An unweighted kernel is given no weights.
                for ((&g, &pi), &yi) in groups.iter().zip(p).zip(y) {
                    let (b, pi) = bin(pi);
                    add_hot(&mut hot[g * m + b], pi, yi);
                }
            }
            Storage::Weighted(full) => {
                for (i, (&g, &pi)) in groups.iter().zip(p).enumerate() {
                    let (b, pi) = bin(pi);
                    full[g * m + b].add_row(pi, y[i].to_f64(), w.map_or(1.0, |w| w[i]));
                }
            }
        }
    }

    /// Adds checked rows of the one group there is (group 0; after [`Self::reserve_rows`]).
    /// Consecutive rows often land in the same bin, and each addition would wait for the
    /// previous one to reach memory; so row i goes to copy i mod `LANES` of the bins, and the
    /// copies are summed in at the end (one more rounding of Σp per bin and batch, well inside
    /// the 1e-12 relative the round-trip tests allow). With many bins collisions are rare and
    /// the copies would cost more to clear than they save: past 256 bins rows go straight to
    /// the bins.
    pub(crate) fn add_rows_one_group<Y: Label>(
        &mut self,
        bin: impl Fn(f64) -> (usize, f64),
        p: &[f64],
        y: &[Y],
        w: Option<&[f64]>,
    ) {
        const WEIGHTED_LANES: usize = 8;
        let m = self.m;
        if m > LANE_BINS {
            for i in 0..p.len() {
                let (b, pi) = bin(p[i]);
                self.add_row(0, b, pi, y[i].to_f64(), w.map_or(1.0, |w| w[i]));
            }
            return;
        }
        if self.try_add_unweighted_one_group(&bin, p, y) {
            return;
        }
        match &mut self.storage {
            Storage::Unweighted { .. } => {
                for i in 0..p.len() {
                    let (b, pi) = bin(p[i]);
                    self.add_row(0, b, pi, y[i].to_f64(), 1.0);
                }
            }
            Storage::Weighted(full) => {
                let mut lanes = vec![BinStats::default(); WEIGHTED_LANES * m];
                for i in 0..p.len() {
                    let (b, pi) = bin(p[i]);
                    lanes[i % WEIGHTED_LANES * m + b].add_row(
                        pi,
                        y[i].to_f64(),
                        w.map_or(1.0, |w| w[i]),
                    );
                }
                for (b, into) in full[..m].iter_mut().enumerate() {
                    for k in 0..WEIGHTED_LANES {
                        into.add(&lanes[k * m + b]);
                    }
                }
            }
        }
    }

    /// The unweighted, at most 256 bins case of [`Self::add_rows_one_group`], which also
    /// checks the rows as it goes (p in [0, 1], y 0 or 1) instead of in passes of their own:
    /// false, with nothing added, when a row fails (the caller then takes the checked path,
    /// which names the bad value) or the kernel is weighted or has more bins. `bin` must give
    /// every p in [0, 1] and NaN a bin below m, and a NaN p a NaN to sum; it may give p
    /// outside [0, 1] any bin (the rows are discarded).
    pub(crate) fn try_add_unweighted_one_group<Y: Label>(
        &mut self,
        bin: impl Fn(f64) -> (usize, f64),
        p: &[f64],
        y: &[Y],
    ) -> bool {
        // Four copies, not the eight of the weighted path: with eight, the unrolled loop
        // kept eight labels live for the chunk's checks beside the copies' addresses and
        // reloaded pointers from the stack every row; with four it needs no stack, and a row
        // waits at most on the one four before it (perf samples of this loop in `ece(p, y)`
        // over the realistic bench file, median of 12 runs: 478 -> 428).
        let m = self.m;
        let Storage::Unweighted { hot, .. } = &mut self.storage else {
            return false;
        };
        if m > LANE_BINS {
            return false;
        }
        // Copy j of bin b at lanes[b][j]: one base address for all copies, so the unrolled
        // loop finds a row's copy at a constant offset from its bin's. A bin is masked to
        // the 256 the copies have (no bounds check: a bad p's bin can be anything).
        let lanes: &mut Lanes = self
            .lanes
            .get_or_insert_with(|| Box::new([[Hot::default(); LANES]; LANE_BINS]));
        // The checks, folded as the rows go: the least and the greatest p per copy, and the
        // OR of the labels' check bits. A NaN p passes the first two but makes its bin's Σp
        // NaN (`bin` gives a NaN a bin below m), which the fold below finds.
        let (mut lo, mut hi, mut labels) = ([0.0; LANES], [1.0; LANES], 0);
        let n = p.len() / LANES * LANES;
        // Lane j of every chunk of LANES rows goes to copy j: a constant offset, unrolled by
        // the compiler.
        for (pc, yc) in p[..n].chunks_exact(LANES).zip(y[..n].chunks_exact(LANES)) {
            for j in 0..LANES {
                // `minpd`/`maxpd`: two copies at a time, no branch.
                lo[j] = if lo[j] < pc[j] { lo[j] } else { pc[j] };
                hi[j] = if hi[j] > pc[j] { hi[j] } else { pc[j] };
                labels |= yc[j].check_bits();
                let (b, pi) = bin(pc[j]);
                add_hot(&mut lanes[b % LANE_BINS][j], pi, yc[j]);
            }
        }
        for i in n..p.len() {
            lo[0] = if lo[0] < p[i] { lo[0] } else { p[i] };
            hi[0] = if hi[0] > p[i] { hi[0] } else { p[i] };
            labels |= y[i].check_bits();
            let (b, pi) = bin(p[i]);
            add_hot(&mut lanes[b % LANE_BINS][0], pi, y[i]);
        }
        let in_range = lo.iter().all(|&l| l >= 0.0) && hi.iter().all(|&h| h <= 1.0);
        // Σp over every copy of the m bins: finite values in [0, 1] cannot overflow, so NaN
        // only from a NaN p.
        let no_nan = !lanes[..m]
            .iter()
            .flatten()
            .map(|lane| lane.p)
            .sum::<f64>()
            .is_nan();
        if !(in_range && no_nan && labels <= 1) {
            // A bad row may have used any bin.
            *lanes = [[Hot::default(); LANES]; LANE_BINS];
            return false;
        }
        // A good row's bin is below m: only those copies are summed and cleared.
        for (into, copies) in hot[..m].iter_mut().zip(lanes.iter_mut()) {
            for lane in copies {
                into.n += lane.n;
                into.p += lane.p;
                *lane = Hot::default();
            }
        }
        true
    }
}

/// One bin of a finished group, with the edges `reliability` reports.
pub(super) struct Bin {
    pub(super) stats: BinStats,
    pub(super) lower: Option<f64>,
    pub(super) upper: Option<f64>,
}

/// The copies of per-slot sums that a row loop keeps — row i of each quad to copy i, so
/// that rows of one slot (a bin, or a place among brackets) do not wait for each other's
/// addition — laid out copy-major: copy k of slot j at `k * slots + j`.
pub(super) const COPIES: usize = 4;

/// Per slot, the [rows, Σp] of its [`COPIES`] copies, summed in copy order.
pub(super) fn sum_copies(copies: &[[f64; 2]], slots: usize) -> Vec<[f64; 2]> {
    (0..slots)
        .map(|j| {
            (0..COPIES).fold([0.0, 0.0], |[n, sp], k| {
                let s = copies[k * slots + j];
                [n + s[0], sp + s[1]]
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The unweighted storage gives the same full sums as adding the rows with weight 1, also
    /// after merging a weighted state (the `extra` part).
    #[test]
    fn unweighted_storage_gives_the_full_sums() {
        let rows = [(0.1, 0.0), (0.35, 1.0), (0.4, 0.0), (0.9, 1.0), (0.95, 1.0)];
        let mut sums = BinSums::new(2, false);
        sums.resize(2);
        sums.reserve_rows(rows.len());
        let mut expected = [BinStats::default(); 4];
        for (g, &(p, y)) in rows.iter().enumerate() {
            let (g, b) = (g % 2, usize::from(p >= 0.5));
            sums.add_row(g, b, p, y, 1.0);
            expected[g * 2 + b].add_row(p, y, 1.0);
        }
        let weighted = BinStats::from_array([2.0, 0.5, 0.2, 0.25, 0.05, 0.125]);
        sums.merge_bin(1, 0, &weighted);
        expected[2].add(&weighted);
        for g in 0..2 {
            for b in 0..2 {
                let (ours, want) = (sums.stats(g, b).to_array(), expected[g * 2 + b].to_array());
                for k in 0..BinStats::LEN {
                    assert!(
                        (ours[k] - want[k]).abs() < 1e-15,
                        "{g} {b} {k}: {ours:?} {want:?}"
                    );
                }
            }
        }
        // One group's rows through the lanes equal the rows one by one.
        let p: Vec<f64> = (0..1003).map(|i| (i as f64 * 0.618).fract()).collect();
        let y: Vec<f64> = (0..1003).map(|i| (i % 3 == 0) as u8 as f64).collect();
        let mut lanes = BinSums::new(15, false);
        lanes.resize(1);
        lanes.reserve_rows(p.len());
        lanes.add_rows_one_group(|p| (((p * 15.0) as usize).min(14), p), &p, &y, None);
        let mut one = BinSums::new(15, false);
        one.resize(1);
        one.reserve_rows(p.len());
        for i in 0..p.len() {
            one.add_row(0, ((p[i] * 15.0) as usize).min(14), p[i], y[i], 1.0);
        }
        for b in 0..15 {
            let (a, c) = (lanes.stats(0, b).to_array(), one.stats(0, b).to_array());
            for k in 0..BinStats::LEN {
                assert!((a[k] - c[k]).abs() <= 1e-12 * c[k].abs().max(1.0));
            }
        }
    }

    /// The packed counts move to f64 sums before they could overflow: near 2^32 rows the next
    /// batch spills them first, and the sums are unchanged by it.
    #[test]
    fn packed_counts_spill_before_overflowing() {
        let mut sums = BinSums::new(1, false);
        sums.resize(1);
        sums.reserve_rows(3);
        for (p, y) in [(0.25, 1.0), (0.5, 0.0), (0.75, 1.0)] {
            sums.add_row(0, 0, p, y, 1.0);
        }
        if let Storage::Unweighted { unspilled, .. } = &mut sums.storage {
            *unspilled = POSITIVE - 3;
        }
        sums.reserve_rows(2);
        let Storage::Unweighted {
            hot,
            cold,
            unspilled,
        } = &sums.storage
        else {
            unreachable!()
        };
        assert_eq!((hot[0].n, *unspilled), (0, 2));
        assert_eq!(cold[0].to_array(), [3.0, 3.0, 1.5, 2.0, 0.5, 3.0]);
        sums.add_row(0, 0, 0.5, 1.0, 1.0);
        assert_eq!(sums.stats(0, 0).to_array(), [4.0, 4.0, 2.0, 3.0, 1.0, 4.0]);
    }

    /// A batch with one bad row (p NaN, below 0 or above 1; label 2 or −1) adds nothing
    /// through the one-group loop and leaves its copies clear, so the next good batch gives
    /// the sums of its rows added one by one (−0.0 is a good p) — under every fixed-edge
    /// rule, whose `bin` must give a NaN a bin below M for the loop to find it. The good
    /// batch is an equivalence of two routes through this file, not an independent value
    /// (the metrics' values are checked against the reference tools in tests/slt); what is
    /// tested is that the loop's folded checks catch each bad row, tail rows included.
    #[test]
    fn one_group_loop_discards_a_batch_with_a_bad_row() {
        use crate::metrics::binning::{FixedBins, Strategy};
        let good_p: Vec<f64> = (0..1003).map(|i| (i as f64 * 0.618).fract()).collect();
        let good_y: Vec<i8> = (0..1003).map(|i| (i % 3 == 0) as i8).collect();
        for strategy in [
            Strategy::Uniform,
            Strategy::Sklearn,
            Strategy::Netcal,
            Strategy::Torchmetrics,
            Strategy::Relplot,
            Strategy::Kumar,
        ] {
            let fixed = FixedBins::new(strategy, 15);
            let (n, bin) = (fixed.n(), |p: f64| fixed.bin(p));
            let mut sums = BinSums::new(n, false);
            sums.resize(1);
            for (k, bad_p, bad_y) in [
                (7, f64::NAN, 0),
                (1001, f64::NAN, 1),
                (1000, -1e-300, 1),
                (3, 1.0 + f64::EPSILON, 0),
                (1002, -5.0, 0),
                (500, 0.5, 2),
                (2, 0.5, -1),
            ] {
                let (mut p, mut y) = (good_p.clone(), good_y.clone());
                (p[k], y[k]) = (bad_p, bad_y);
                sums.reserve_rows(p.len());
                let added = sums.try_add_unweighted_one_group(bin, &p, &y);
                assert!(!added, "{strategy:?} row {k}");
                assert!((0..n).all(|b| sums.stats(0, b) == BinStats::default()));
            }
            let mut p = good_p.clone();
            p[10] = -0.0;
            sums.reserve_rows(p.len());
            assert!(sums.try_add_unweighted_one_group(bin, &p, &good_y));
            let mut one = BinSums::new(n, false);
            one.resize(1);
            one.reserve_rows(p.len());
            for i in 0..p.len() {
                let (b, pi) = bin(p[i]);
                one.add_row(0, b, pi, f64::from(good_y[i]), 1.0);
            }
            for b in 0..n {
                let (a, c) = (sums.stats(0, b).to_array(), one.stats(0, b).to_array());
                for k in 0..BinStats::LEN {
                    let close = (a[k] - c[k]).abs() <= 1e-12 * c[k].abs().max(1.0);
                    assert!(close, "{strategy:?} {b} {k}");
                }
            }
        }
    }
}
