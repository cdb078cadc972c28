//! Equal-mass bins of many unweighted rows in one pass over them: `'quantile'` bins and
//! `ece_debiased`'s bins.
//!
//! Each inner edge lies between two neighbouring order statistics of the rows (see
//! [`EdgeRule`]): numpy's percentiles interpolate between them, `ece_debiased` takes their
//! midpoint. A sorted sample of the rows (every (n/S)-th) tells, for each edge, a *bracket* of
//! scores that holds both of its order statistics with near certainty: the sample's values
//! a few standard deviations of a sample rank below and above where the edge's rank falls
//! in the sample (the outer edges, the smallest and largest row, are bracketed from the
//! ends). The steps, in [`one_pass`]:
//! 1. `brackets`: one per edge, from the sample;
//! 2. `Pass::run`, the one pass over the rows: every row that lies between two brackets is
//!    counted and summed into its bin at once — its bin does not depend on where inside the
//!    brackets the edges end up (a row below bracket k's lowest score lies below edge k, one
//!    above its highest score above it) — and the rows inside the brackets are collected
//!    (about 0.5% of the rows a bracket);
//! 3. `Pass::edges`: the order statistics selected among each bracket's rows (their ranks
//!    there are the global ranks less the rows counted below the bracket);
//! 4. `Pass::bin_sums`: the bracket rows binned against their edge.
//!
//! The result is exact: when a bracket misses its ranks (unlikely unless the rows are
//! ordered adversarially to the sampling stride), when ties make the brackets overlap or
//! hold too many rows, or when a bracket fills the room its sample promised, [`one_pass`]
//! returns None and the caller finds the order statistics another way: the `'quantile'`
//! bins by radix passes (see `values::select_ranks`), `ece_debiased` by sorting.
//!
//! A row's place among the brackets comes from a table over the bit patterns of the
//! sample's range (`PlaceTable`: 16,384 one-byte cells, in a core's L1 cache); only the rows
//! in a cell that a bracket bound crosses compare against the bounds.

use super::bin_sums::{sum_copies, COPIES};
use super::binning::{quantile_levels, unweighted_quantile_edges};
use crate::values::Rows;

/// Rows from which the pass is used; below, the radix selection is as fast.
pub(super) const MIN_ROWS: usize = 1 << 19;
/// Sample size: every (n/S)-th row, sorted (about 10 ms).
const SAMPLE: usize = 1 << 19;
/// Most bins: a row's place among the 2(M+1) bracket bounds fits in a byte.
const MAX_BINS: usize = 64;
/// The standard deviations of a sample rank a bracket reaches on each side of its edge's
/// expected sample position (the sample rank of a quantile q has standard deviation
/// √(S·q(1−q)) under random sampling): a miss costs the fallback, not the result.
const SDS: f64 = 4.0;
/// At most this share of the rows is collected into brackets (memory used at the end of the
/// query beyond the rows themselves); past it (ties, many bins) the caller selects instead.
const MAX_COLLECTED_SHARE: f64 = 0.25;
/// The sample positions the outer edges' brackets reach into the sample from its ends.
const OUTER_REACH: usize = 16;
/// Rows between two checks that no bracket has filled its region.
const CHUNK: usize = 4096;
/// Cells of the table from a score's bit pattern to its place among the bracket bounds.
const CELLS: usize = 1 << 14;
/// A table cell that a bracket bound crosses: the row compares against the bounds.
const NEAR: u8 = u8::MAX;

/// How a bin's inner edge comes from two neighbouring order statistics of the n rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum EdgeRule {
    /// numpy's `percentile(p, linspace(0, 1, M+1) * 100)` (method `'linear'`): the
    /// `'quantile'` bins of scikit-learn's `calibration_curve`.
    Percentiles,
    /// uncertainty-calibration's equal-mass bins (`ece_debiased`): the rows split into M runs
    /// of ⌊n/M⌋ or ⌈n/M⌉ in order (the longer first); inner edge i is the midpoint
    /// `(x₍ₛ₋₁₎ + x₍ₛ₎) / 2` around the first rank s of run i.
    Midpoints,
}

impl EdgeRule {
    /// Per inner edge (1..M−1): the lower of its two order statistics' ranks, and the level
    /// (≈ rank / n) that tells how far its rank strays in a sample.
    fn inner_ranks(self, n: usize, m: usize) -> Vec<(usize, f64)> {
        match self {
            EdgeRule::Percentiles => quantile_levels(m)[1..m]
                .iter()
                .map(|&q| {
                    // numpy's virtual index (n − 1)·q: the edge reads ranks ⌊vi⌋ and ⌊vi⌋ + 1.
                    let vi = (n - 1) as f64 * q;
                    ((vi.floor() as usize).min(n - 1), q)
                })
                .collect(),
            EdgeRule::Midpoints => (1..m)
                .map(|i| {
                    let s = equal_mass_start(n, m, i);
                    (s - 1, s as f64 / n as f64)
                })
                .collect(),
        }
    }
}

/// The first rank of run i when n sorted rows are split into m runs of ⌊n/m⌋ or ⌈n/m⌉ (the
/// longer first), as numpy's `array_split`.
pub(super) fn equal_mass_start(n: usize, m: usize, i: usize) -> usize {
    let (q, r) = (n / m, n % m);
    i * q + i.min(r)
}

/// What the pass finds: the M+1 edges and, per class, each bin's row count and Σp.
pub(super) struct QuantilePass {
    pub edges: Vec<f64>,
    pub sums: [Vec<[f64; 2]>; 2],
}

/// The rows' M+1 edges by `rule` (the outer two the smallest and largest row) and bin sums
/// in one pass, or None when the rows are weighted, fewer than [`MIN_ROWS`], the bins more
/// than 64 or fewer than 2, or the sample cannot bracket the edges (see the module
/// documentation). The rows are probabilities, checked in [0, 1] when they were stored (the
/// keys order p ≥ −0 only).
pub(super) fn one_pass(rows: &Rows, m: usize, rule: EdgeRule) -> Option<QuantilePass> {
    let n = rows.len();
    if n < MIN_ROWS || !(2..=MAX_BINS).contains(&m) || rows.weighted() {
        return None;
    }
    let parts = [rows.parts(0), rows.parts(1)];
    let inner = rule.inner_ranks(n, m);
    let (brackets, table) = {
        let sample = sample_keys(&parts, n);
        let brackets = brackets(&sample, n, &inner)?;
        let table = PlaceTable::new(&brackets, sample[0], sample[sample.len() - 1]);
        (brackets, table) // the sample's room is the collected rows' before they arrive
    };
    let pass = Pass::run(&parts, &brackets, &table)?;
    let edges = pass.edges(&brackets, n, m, rule)?;
    let sums = pass.bin_sums(&edges);
    Some(QuantilePass { edges, sums })
}

/// The scores around one edge that hold the order statistics it reads.
struct Bracket {
    /// The ranks (0-based, in the order of all rows) of the edge's order statistics.
    ranks: [usize; 2],
    /// The lowest and highest key ([`place_key`]) of the bracket, inclusive.
    lo: u64,
    hi: u64,
    /// The rows the bracket may collect (estimated from the sample, with room to spare).
    cap: usize,
}

/// One bracket per edge (M + 1, the inner ones from `inner`: see
/// [`EdgeRule::inner_ranks`]) from the sorted sample keys, or None when they overlap, reach
/// past the sample, or would collect more than [`MAX_COLLECTED_SHARE`] of the rows. The
/// outer edges are the smallest and largest rows: their brackets run from the lowest key to
/// the sample's 17th value, and from its 17th-largest to the highest key, so they always hold
/// their rank.
fn brackets(sample: &[u64], n: usize, inner: &[(usize, f64)]) -> Option<Vec<Bracket>> {
    let s = sample.len();
    if sample[s - 1] >> 63 == 1 {
        return None; // not probabilities (the keys need p ≥ 0)
    }
    let m = inner.len() + 1;
    let stride = n.div_ceil(s);
    let mut out: Vec<Bracket> = Vec::with_capacity(m + 1);
    for k in 0..=m {
        let (ranks, lo, hi) = if k == 0 {
            ([0, 0], 0, sample[OUTER_REACH])
        } else if k == m {
            ([n - 1, n - 1], sample[s - 1 - OUTER_REACH], u64::MAX)
        } else {
            let (r, q) = inner[k - 1];
            let at = r as f64 * s as f64 / n as f64;
            let reach = (SDS * (s as f64 * q * (1.0 - q)).sqrt()).ceil() + 2.0;
            let (lo, hi) = (at - reach, at + 1.0 + reach);
            if lo < 0.0 || hi > (s - 1) as f64 {
                return None;
            }
            (
                [r, (r + 1).min(n - 1)],
                sample[lo as usize],
                sample[hi as usize],
            )
        };
        if out.last().is_some_and(|prev| prev.hi >= lo) {
            return None; // brackets overlap: ties, or bins too many for the sample
        }
        let in_sample = sample.partition_point(|&k| k <= hi) - sample.partition_point(|&k| k < lo);
        let cap = (in_sample + 5 * (in_sample as f64).sqrt() as usize + 64) * stride;
        out.push(Bracket { ranks, lo, hi, cap });
    }
    let total: usize = out.iter().map(|b| b.cap).sum();
    (total as f64 <= MAX_COLLECTED_SHARE * n as f64).then_some(out)
}

/// The pass over the rows: per class, the row count and Σp of every place (see
/// [`PlaceTable`]), and the rows inside the brackets.
struct Pass {
    /// Per class, per place: [rows, Σp].
    place_sums: [Vec<[f64; 2]>; 2],
    /// The collected rows: bracket b's in `collected[starts[b]..next[b]]`, class 0's before
    /// `class_starts[b]`, class 1's from it.
    collected: Vec<f64>,
    starts: Vec<usize>,
    class_starts: Vec<usize>,
    next: Vec<usize>,
}

impl Pass {
    /// Reads every row once; None when a bracket collects more rows than its capacity.
    fn run(parts: &[Vec<&[f64]>; 2], brackets: &[Bracket], table: &PlaceTable) -> Option<Pass> {
        let places = table.thresholds.len() + 1;
        // Bracket b's region starts at starts[b] and has CHUNK slots to spare past its
        // capacity, so that every row can write its score to the next slot of region j / 2
        // without a check (only a bracket's rows advance it; the region past the last
        // bracket is written, never advanced) and the regions are checked once a chunk.
        let mut starts = Vec::with_capacity(brackets.len() + 1);
        let mut at = 0;
        for cap in brackets.iter().map(|b| b.cap).chain([0]) {
            starts.push(at);
            at += cap + CHUNK;
        }
        let ends: Vec<usize> = starts
            .iter()
            .zip(brackets)
            .map(|(&a, b)| a + b.cap)
            .collect();
        let full = |next: &[usize]| next.iter().zip(&ends).any(|(&a, &e)| a > e);
        let mut collected = vec![0.0f64; at];
        let mut next = starts.clone();
        let mut class_starts = vec![];
        let mut place_sums = [vec![], vec![]];
        for (c, class_parts) in parts.iter().enumerate() {
            let mut copies = vec![[0.0f64; 2]; COPIES * places];
            macro_rules! add {
                ($copy:expr, $p:expr) => {{
                    let p: f64 = $p;
                    let j = table.place(place_key(p));
                    let sum = &mut copies[$copy * places + j];
                    sum[0] += 1.0;
                    sum[1] += p;
                    let b = j >> 1;
                    collected[next[b]] = p;
                    next[b] += j & 1;
                }};
            }
            for part in class_parts {
                for chunk in part.chunks(CHUNK) {
                    let quads = chunk.chunks_exact(COPIES);
                    let rest = quads.remainder();
                    for quad in quads {
                        for (copy, &p) in quad.iter().enumerate() {
                            add!(copy, p);
                        }
                    }
                    for &p in rest {
                        add!(0, p);
                    }
                    if full(&next) {
                        return None; // a bracket holds more rows than its sample promised
                    }
                }
            }
            place_sums[c] = sum_copies(&copies, places);
            if c == 0 {
                class_starts = next.clone();
            }
        }
        Some(Pass {
            place_sums,
            collected,
            starts,
            class_starts,
            next,
        })
    }

    /// The rows at place j, both classes.
    fn count(&self, j: usize) -> usize {
        (self.place_sums[0][j][0] + self.place_sums[1][j][0]) as usize
    }

    /// The M + 1 edges by `rule` from the order statistics selected among each bracket's
    /// rows (their rank there is the global rank less the rows counted below the bracket);
    /// None when a bracket missed its ranks.
    fn edges(&self, brackets: &[Bracket], n: usize, m: usize, rule: EdgeRule) -> Option<Vec<f64>> {
        let mut selected: Vec<(usize, f64)> = Vec::with_capacity(2 * brackets.len());
        let mut below = 0usize;
        let mut scratch = vec![];
        for (b, bracket) in brackets.iter().enumerate() {
            below += self.count(2 * b);
            let rows_in = &self.collected[self.starts[b]..self.next[b]];
            if rows_in.len() != self.count(2 * b + 1) {
                return None; // cannot happen: every counted bracket row was collected
            }
            let [r0, r1] = bracket.ranks;
            if r0 < below || r1 >= below + rows_in.len() {
                return None; // the bracket missed its ranks
            }
            scratch.clear();
            scratch.extend_from_slice(rows_in);
            let (_, &mut v, rest) = scratch.select_nth_unstable_by(r0 - below, f64::total_cmp);
            selected.push((r0, v));
            if r1 != r0 {
                let next_v = rest.iter().copied().min_by(f64::total_cmp).unwrap_or(v);
                selected.push((r1, next_v));
            }
            below += rows_in.len();
        }
        let value_at = |rank: usize| {
            selected
                .iter()
                .find(|&&(r, _)| r == rank)
                .map(|&(_, v)| v)
                .expect("an edge's order statistic is selected")
        };
        // numpy's edge at q = 0 is lerp(x₍₀₎, x₍₁₎, 0) = x₍₀₎ + 0·(x₍₁₎ − x₍₀₎): the smallest
        // score plus +0 (so −0 becomes 0); at q = 1 the largest.
        let mut edges = Vec::with_capacity(m + 1);
        edges.push(value_at(0) + 0.0);
        match rule {
            EdgeRule::Percentiles => {
                edges.extend(unweighted_quantile_edges(
                    n,
                    &quantile_levels(m)[1..m],
                    value_at,
                ));
            }
            EdgeRule::Midpoints => edges.extend(
                brackets[1..m]
                    .iter()
                    .map(|b| (value_at(b.ranks[0]) + value_at(b.ranks[1])) / 2.0),
            ),
        }
        edges.push(value_at(n - 1));
        Some(edges)
    }

    /// Per class, each bin's [rows, Σp]: the rows between brackets by place (between
    /// brackets b − 1 and b: above edges 1..b−1, below edge b: bin b − 1), then each
    /// bracket's rows against its edge (a row of inner bracket b lies above edges 1..b−1 and
    /// below edges b + 1..: bin b − 1, or b when strictly above edge b; the outer brackets'
    /// rows are in the outer bins).
    fn bin_sums(&self, edges: &[f64]) -> [Vec<[f64; 2]>; 2] {
        let m = edges.len() - 1;
        let mut sums = [vec![[0.0f64; 2]; m], vec![[0.0f64; 2]; m]];
        for (c, class_sums) in sums.iter_mut().enumerate() {
            for b in 1..=m {
                class_sums[b - 1] = self.place_sums[c][2 * b];
            }
            for (b, &edge) in edges.iter().enumerate() {
                let (from, to) = if c == 0 {
                    (self.starts[b], self.class_starts[b])
                } else {
                    (self.class_starts[b], self.next[b])
                };
                let base = b.saturating_sub(1).min(m - 1);
                let inner = b > 0 && b < m;
                for &p in &self.collected[from..to] {
                    let s = &mut class_sums[base + usize::from(inner && edge < p)];
                    s[0] += 1.0;
                    s[1] += p;
                }
            }
        }
        sums
    }
}

/// A row's key in the pass: the bit pattern of p + 0 (−0 becomes 0), in the order of the
/// values for p ≥ 0.
#[inline(always)]
fn place_key(p: f64) -> u64 {
    (p + 0.0).to_bits()
}

/// The keys ([`place_key`]) of every (n/S)-th row (class 0's parts, then class 1's), sorted.
fn sample_keys(parts: &[Vec<&[f64]>; 2], n: usize) -> Vec<u64> {
    let s = SAMPLE.min(n / 4);
    let mut out = Vec::with_capacity(s);
    let mut want = 0usize; // the sample's next row, as an index into all rows
    let mut offset = 0usize; // all rows before the current part
    for part in parts.iter().flatten() {
        while out.len() < s {
            let i = want - offset;
            if i >= part.len() {
                break;
            }
            out.push(place_key(part[i]));
            want = (out.len() as u128 * n as u128 / s as u128) as usize;
        }
        offset += part.len();
    }
    out.sort_unstable();
    out
}

/// A row's place among the brackets: the number of bracket bounds at or below its key k
/// (lo_b counts when lo_b ≤ k, hi_b when hi_b < k), so bracket b's rows are at the odd place
/// 2b + 1 and the rows between brackets b − 1 and b at the even place 2b (places 0 and
/// 2(M+1), outside the outer brackets, stay empty). One table lookup for all but the keys in
/// cells a bound crosses.
struct PlaceTable {
    /// lo_0, hi_0 + 1, lo_1, hi_1 + 1, …: ascending.
    thresholds: Vec<u64>,
    /// The sample's smallest key: cell 0 starts there (keys below it fall in cell 0 too).
    base: u64,
    /// Key bits per cell.
    shift: u32,
    cells: Vec<u8>,
}

impl PlaceTable {
    /// The table over `[lo, hi]` (the sample's range) in cells 0..CELLS−1, the last cell
    /// holding every key above it.
    fn new(brackets: &[Bracket], lo: u64, hi: u64) -> Self {
        let thresholds: Vec<u64> = brackets
            .iter()
            .flat_map(|b| [b.lo, b.hi.saturating_add(1)])
            .collect();
        debug_assert!(thresholds.len() < usize::from(NEAR));
        let span = hi - lo;
        let mut shift = 0;
        while (span >> shift) > (CELLS - 2) as u64 {
            shift += 1;
        }
        let place = |k: u64| thresholds.partition_point(|&t| t <= k);
        let cells = (0..CELLS)
            .map(|c| {
                let start = |c: usize| lo.saturating_add((c as u64) << shift);
                let first = if c == 0 { 0 } else { start(c) };
                let last = if c == CELLS - 1 {
                    u64::MAX
                } else {
                    start(c + 1) - 1
                };
                let (a, b) = (place(first), place(last));
                if a == b {
                    a as u8
                } else {
                    NEAR
                }
            })
            .collect();
        Self {
            thresholds,
            base: lo,
            shift,
            cells,
        }
    }

    #[inline(always)]
    fn place(&self, k: u64) -> usize {
        let cell = ((k.saturating_sub(self.base) >> self.shift) as usize).min(CELLS - 1);
        match self.cells[cell] {
            NEAR => self.exact(k),
            j => usize::from(j),
        }
    }

    #[cold]
    fn exact(&self, k: u64) -> usize {
        self.thresholds.partition_point(|&t| t <= k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deterministic stream of uniform numbers in [0, 1) (splitmix64).
    fn uniforms(n: usize, seed: u64) -> Vec<f64> {
        let mut x = seed;
        (0..n)
            .map(|_| {
                x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
                let mut z = x;
                z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
                (z ^ (z >> 31)) as f64 / 2f64.powi(64)
            })
            .collect()
    }

    /// The reference, computed independently of the pass: all scores sorted, numpy's
    /// `percentile(p, linspace(0, 1, M+1) * 100)` (linear: x[i] + (x[i+1] − x[i])·t, from the
    /// far end when t ≥ 0.5; the levels are numpy's linspace as `quantile_levels` computes
    /// them, checked against numpy in binning's tests), each row in the bin of the number of inner edges strictly below
    /// it (scikit-learn's `searchsorted(side='left')`).
    ///
    /// With [`EdgeRule::Midpoints`], uncertainty-calibration's `get_equal_mass_bins`: the
    /// sorted scores split as `np.array_split(sorted, m)` (the first n mod m runs one longer),
    /// inner edge i the midpoint of the last score of run i − 1 and the first of run i.
    fn reference(
        classes: &[Vec<f64>; 2],
        m: usize,
        rule: EdgeRule,
    ) -> (Vec<f64>, [Vec<[f64; 2]>; 2]) {
        let mut all: Vec<f64> = classes.iter().flatten().copied().collect();
        all.sort_by(f64::total_cmp);
        let n = all.len();
        let edges: Vec<f64> = if rule == EdgeRule::Midpoints {
            let mut runs = vec![n / m; m];
            for r in runs.iter_mut().take(n % m) {
                *r += 1;
            }
            let mut e = vec![all[0] + 0.0];
            let mut at = 0;
            for r in &runs[..m - 1] {
                at += r;
                e.push((all[at - 1] + all[at]) / 2.0);
            }
            e.push(all[n - 1]);
            e
        } else {
            quantile_levels(m)
                .into_iter()
                .map(|q| {
                    let vi = (n - 1) as f64 * q;
                    if vi >= (n - 1) as f64 {
                        return all[n - 1];
                    }
                    let i = vi.floor() as usize;
                    let (a, b, t) = (all[i], all[i + 1], vi - vi.floor());
                    if t >= 0.5 {
                        b - (b - a) * (1.0 - t)
                    } else {
                        a + (b - a) * t
                    }
                })
                .collect()
        };
        let mut sums = [vec![[0.0; 2]; m], vec![[0.0; 2]; m]];
        for c in 0..2 {
            for &p in &classes[c] {
                let bin = edges[1..m].iter().filter(|&&e| e < p).count();
                sums[c][bin][0] += 1.0;
                sums[c][bin][1] += p;
            }
        }
        (edges, sums)
    }

    fn rows_of(classes: &[Vec<f64>; 2], runs: usize) -> Rows {
        let mut rows = Rows::default();
        for (c, v) in classes.iter().enumerate() {
            // The first half in the group's own vector, the rest in `runs` merged states.
            let own = v.len() / 2;
            rows.p[c] = v[..own].to_vec();
            let rest = &v[own..];
            let len = rest.len().div_ceil(runs.max(1));
            for chunk in rest.chunks(len.max(1)) {
                rows.runs[c].push(chunk.to_vec().into());
            }
        }
        rows
    }

    fn split(p: &[f64], labels: impl Fn(usize, f64) -> bool) -> [Vec<f64>; 2] {
        let mut out = [vec![], vec![]];
        for (i, &x) in p.iter().enumerate() {
            out[usize::from(labels(i, x))].push(x);
        }
        out
    }

    /// Checks the pass against the reference; false when it declined.
    fn check(name: &str, classes: [Vec<f64>; 2], m: usize, runs: usize) -> bool {
        check_rule(name, classes, m, runs, EdgeRule::Percentiles)
    }

    fn check_rule(
        name: &str,
        classes: [Vec<f64>; 2],
        m: usize,
        runs: usize,
        rule: EdgeRule,
    ) -> bool {
        let rows = rows_of(&classes, runs);
        let Some(pass) = one_pass(&rows, m, rule) else {
            return false;
        };
        let (edges, sums) = reference(&classes, m, rule);
        assert_eq!(pass.edges.len(), m + 1, "{name}");
        for (a, b) in pass.edges.iter().zip(&edges) {
            assert_eq!(
                a.to_bits(),
                b.to_bits(),
                "{name}: edges {:?} vs {edges:?}",
                pass.edges
            );
        }
        for (c, (got, want)) in pass.sums.iter().zip(&sums).enumerate() {
            for (bin, (a, b)) in got.iter().zip(want).enumerate() {
                assert_eq!(a[0], b[0], "{name}: class {c} bin {bin} count");
                assert!(
                    (a[1] - b[1]).abs() <= 1e-9 * b[1].abs().max(1.0),
                    "{name}: class {c} bin {bin} Σp {} vs {}",
                    a[1],
                    b[1]
                );
            }
        }
        true
    }

    const N: usize = 700_000;

    #[test]
    fn distinct_scores_take_the_pass_and_match_sorting() {
        let u = uniforms(N, 1);
        let label = |i: usize, x: f64| (i * 2_654_435_761) % 1000 < (x * 1000.0) as usize;
        for m in [2, 10, 15, 20] {
            assert!(check("uniform", split(&u, label), m, 3), "uniform M={m}");
        }
        // Concentrated as a click model's scores: most mass near 0.
        let ctr: Vec<f64> = u.iter().map(|x| x.powi(6) * 0.3).collect();
        assert!(check("ctr", split(&ctr, label), 15, 1));
        // Few positives, all among the highest scores.
        assert!(check("rare", split(&ctr, |_, x| x > 0.25), 15, 2));
        // Sorted either way: the stride sample is then the quantiles themselves.
        let mut sorted = u.clone();
        sorted.sort_by(f64::total_cmp);
        assert!(check("ascending", split(&sorted, label), 15, 1));
        sorted.reverse();
        assert!(check("descending", split(&sorted, label), 15, 4));
    }

    #[test]
    fn midpoint_edges_match_sorting() {
        let u = uniforms(N + 7, 4);
        let label = |i: usize, x: f64| (i * 2_654_435_761) % 1000 < (x * 1000.0) as usize;
        let ctr: Vec<f64> = u.iter().map(|x| x.powi(6) * 0.3).collect();
        for m in [2, 15, 16] {
            let classes = split(&u, label);
            assert!(
                check_rule("uniform", classes, m, 2, EdgeRule::Midpoints),
                "M={m}"
            );
            let classes = split(&ctr, label);
            assert!(
                check_rule("ctr", classes, m, 1, EdgeRule::Midpoints),
                "M={m}"
            );
        }
    }

    #[test]
    fn ties_within_brackets_match_sorting() {
        // 101 distinct values (p rounded to 0.01) and signed zeros.
        let u = uniforms(N, 2);
        let mut r: Vec<f64> = u.iter().map(|x| (x * 100.0).round() / 100.0).collect();
        for (i, x) in r.iter_mut().enumerate().take(5000) {
            if i % 2 == 0 {
                *x = -0.0;
            }
        }
        let label = |i: usize, _| i.is_multiple_of(7);
        assert!(check("rounded", split(&r, label), 10, 2));
        // A score held by 3% of the rows (under half a bin): its bracket holds them all.
        let heavy: Vec<f64> = u.iter().map(|&x| if x < 0.03 { 0.5 } else { x }).collect();
        assert!(check("heavy", split(&heavy, label), 15, 2));
        // Held by a tenth: two edges fall in it, their brackets overlap, the pass declines.
        let heavier: Vec<f64> = u.iter().map(|&x| if x < 0.1 { 0.5 } else { x }).collect();
        assert!(!check("heavier", split(&heavier, label), 15, 2));
    }

    #[test]
    fn declines_what_it_cannot_bracket_and_never_answers_wrongly() {
        let u = uniforms(N, 3);
        let label = |i: usize, _| i.is_multiple_of(3);
        // One value everywhere: the brackets overlap.
        assert!(!check("constant", split(&vec![0.25; N], label), 10, 1));
        // Too many bins for the sample, too few rows, weights.
        assert!(!check("bins", split(&u, label), 64, 1));
        assert!(!check("few", split(&u[..MIN_ROWS - 1], label), 10, 1));
        let mut weighted = rows_of(&split(&u, label), 1);
        weighted.w[0] = vec![1.0; weighted.p[0].len()];
        assert!(one_pass(&weighted, 10, EdgeRule::Percentiles).is_none());
        // Adversarial to the stride: the rows the sample reads are all the smallest
        // scores, so its brackets sit far from the ranks. The pass must decline or match.
        let n = N;
        let stride = n / SAMPLE.min(n / 4);
        let mut order: Vec<f64> = u.clone();
        order.sort_by(f64::total_cmp);
        let (low, high) = order.split_at(n.div_ceil(stride));
        let mut adversarial = vec![0.0; n];
        let (mut l, mut h) = (low.iter(), high.iter());
        for (i, x) in adversarial.iter_mut().enumerate() {
            *x = if i % stride == 0 {
                *l.next().unwrap()
            } else {
                *h.next().unwrap()
            };
        }
        let classes = [adversarial, vec![]];
        check("adversarial", classes, 10, 0);
    }
}
