//! `mvce(p, y, key [, n_bins [, rounds]])`: the multi-view calibration error (Huang et al.
//! 2022, as Zhao et al. eq. 7 use it). Round r = 0..R−1 puts every row in bin
//! `h(k, r) mod T` of a random partition given by its key, and
//! `MVCE = mean over the non-empty cells (r, t) of |Σ(y − p)| / rows in the cell`.
//!
//! The hash, so anyone can reproduce a number: the key becomes a 64-bit word k (an integer
//! as its two's complement; text — and any other type, cast to text — as FNV-1a 64 of its
//! UTF-8 bytes: basis 0xcbf29ce484222325, prime 0x100000001b3), and
//! `h(k, r) = mix(k XOR r·0x9E3779B97F4A7C15)` with SplitMix64's finaliser `mix(z)`:
//! `z ^= z >> 30; z *= 0xbf58476d1ce4e5b9; z ^= z >> 27; z *= 0x94d049bb133111eb;
//! z ^= z >> 31` (all mod 2^64). The partition depends only on the key, so states merge
//! across partitions and machines; the state is R·T counts and sums per group. Large batches
//! first sum their rows per (group, key) in a bounded cache (`KeyCache`), which spreads a
//! key's sums onto its R cells when the key is evicted or the state is read.

use std::ops::Range;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Float64Array};
use arrow::buffer::ScalarBuffer;
use arrow::compute::cast;
use arrow::datatypes::{DataType, FieldRef, Int64Type};
use datafusion_common::{internal_err, Result};
use datafusion_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion_expr::{AggregateUDFImpl, Documentation, Signature};
use datafusion_macros::user_doc;

use crate::common::{
    all_probabilities, args, check_p, check_y, f64_list_state_fields, f64s, fixed_lists,
    for_each_row, list_parts, usable_rows, Arg, CallShape,
};
use crate::dense::{DenseIndex, NO_ENTRY};
use crate::kernel::Filter;
use crate::kernel::{kernel_aggregate, kernel_udaf_common, signature_from_shape, Kernel};
use crate::labels::{all_labels, f64_labels, with_labels, Label};

/// Default bins per round.
pub const DEFAULT_MVCE_BINS: usize = 15;
/// Default rounds.
pub const DEFAULT_MVCE_ROUNDS: usize = 10;
/// Most rounds `mvce` takes.
pub const MAX_MVCE_ROUNDS: usize = 1000;

#[user_doc(
    doc_section(label = "Calibration Metrics"),
    description = "Multi-view calibration error (Huang et al. 2022; Zhao et al. 2024 eq. 7): over `rounds` random \
partitions of the rows into `n_bins` bins by a hash of `key`, the mean over the non-empty (round, bin) cells of \
`|Σ(y − p)| / rows`. The hash is documented (docs/SEMANTICS.md) so the number can be reproduced anywhere; it depends \
only on the key, so the result does not depend on partitioning or machines. Rows with a NULL p, y or key are skipped.",
    syntax_example = "mvce(p, y, key [, n_bins [, rounds]])",
    sql_example = r#"```sql
> SELECT mvce(p, y, k, 1, 1) AS one_bin FROM (VALUES (0.5, 1, 1), (0.5, 1, 2)) AS t(p, y, k);
+---------+
| one_bin |
+---------+
| 0.5     |
+---------+
```"#
)]
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Mvce {
    signature: Signature,
}

const SHAPE: CallShape = CallShape {
    name: "mvce",
    required: const {
        &[
            args::P,
            args::Y,
            Arg::any("key").doc("The key whose hash assigns rows to bins (a user or item id): integers or text; other types are cast to text."),
        ]
    },
    optional: const {
        &[
            args::N_BINS.doc("Bins per round, an integer constant in [1, 10000]. Default 15."),
            Arg::lit_int("rounds")
                .or("10")
                .doc("Rounds (random partitions), an integer constant in [1, 1000]. Default 10."),
        ]
    },
};

signature_from_shape!(Mvce, SHAPE);

impl Mvce {
    fn kernel(&self, args: &AccumulatorArgs) -> Result<MvceKernel> {
        let bins = match args.exprs.get(3) {
            Some(e) => crate::common::n_bins("mvce", e)?,
            None => DEFAULT_MVCE_BINS,
        };
        let rounds = match args.exprs.get(4) {
            Some(e) => crate::common::literal_int_in("mvce", "rounds", e, 1, MAX_MVCE_ROUNDS)?,
            None => DEFAULT_MVCE_ROUNDS,
        };
        Ok(MvceKernel {
            bins,
            rounds,
            count: vec![],
            gap: vec![],
            cache: KeyCache::default(),
        })
    }
}

kernel_aggregate!(Mvce, true);

impl AggregateUDFImpl for Mvce {
    kernel_udaf_common!(returns DataType::Float64);

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(f64_list_state_fields(args.name, &["count", "gap"]))
    }

    fn documentation(&self) -> Option<&Documentation> {
        crate::common::documented(self.doc(), &self.shape())
    }
}

/// FNV-1a 64 of bytes.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// SplitMix64's finaliser.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The bin of key word `k` in round `r` of `bins`.
fn bin_of(k: u64, r: usize, bins: usize) -> usize {
    (mix(k ^ (r as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)) % bins as u64) as usize
}

/// The 64-bit words of a key column's rows: integers as their two's complement (an Int64
/// column read where it lies), text as FNV-1a 64 of its bytes. A NULL key's word is never
/// read: `usable_rows` skips its row.
enum KeyWords {
    Ints(ScalarBuffer<i64>),
    Hashed(Vec<u64>),
}

impl KeyWords {
    fn of(keys: &ArrayRef) -> Result<Self> {
        if keys.data_type().is_integer() {
            let k = cast(keys, &DataType::Int64)?;
            return Ok(Self::Ints(k.as_primitive::<Int64Type>().values().clone()));
        }
        let text = cast(keys, &DataType::Utf8)?;
        Ok(Self::Hashed(
            text.as_string::<i32>()
                .iter()
                .map(|v| v.map_or(0, |s| fnv1a(s.as_bytes())))
                .collect(),
        ))
    }

    #[inline]
    fn word(&self, i: usize) -> u64 {
        match self {
            Self::Ints(v) => v[i] as u64,
            Self::Hashed(v) => v[i],
        }
    }
}

/// Slots of [`KeyCache`] (32 bytes each: 512 KiB, in a core's L2 cache).
const CACHE_SLOTS: usize = 1 << 14;
/// Slots a pair may take, from its hash's on: past them it takes its first slot's place.
const CACHE_PROBES: usize = 4;
/// Batches of fewer rows add to the cells directly (a window frame's few rows, a retraction).
const CACHE_MIN_ROWS: usize = 256;
/// An empty slot's group.
const NO_GROUP: usize = usize::MAX;

/// One (group, key) pair's rows not yet spread onto the group's cells.
#[derive(Debug, Clone, Copy)]
struct Slot {
    group: usize,
    key: u64,
    count: f64,
    gap: f64,
}

/// Rows summed per (group, key) before they are spread onto the group's R·T cells: a row's
/// cells depend only on its key, so a key seen again costs one lookup and two additions
/// instead of R hashes and 2R additions. A pair takes the first free slot of the
/// [`CACHE_PROBES`] from its hash's on; when all are taken by other pairs it takes the first,
/// whose sums are spread first, so the table stays [`CACHE_SLOTS`] whatever the keys'
/// cardinality. The cells receive the same counts; Σ(y − p) is added in another order (last
/// bits only).
#[derive(Debug, Default)]
struct KeyCache {
    slots: Vec<Slot>,
    /// The slots in use, so that spreading them all costs what they hold.
    used: Vec<u32>,
    /// Batches of one group whose integer keys span at most `dense::DENSE_MAX_SLOTS`: each
    /// key's sums (rows, Σ(y − p)) of group 0 found by a direct index instead of a probe,
    /// in `dense_sums` (16 bytes a key, so the loop's working set stays small), its key in
    /// `dense_keys`.
    dense: DenseIndex,
    dense_sums: Vec<[f64; 2]>,
    dense_keys: Vec<i64>,
}

impl KeyCache {
    #[inline]
    fn slot_of(group: usize, key: u64) -> usize {
        let h = (key ^ (group as u64).wrapping_mul(0xd6e8_feb8_6659_fd93))
            .wrapping_mul(0x9e37_79b9_7f4a_7c15);
        (h >> (64 - CACHE_SLOTS.trailing_zeros())) as usize
    }

    /// Adds a row of group 0 with key `key` (covered by the direct index) and gap y − p.
    #[inline(always)]
    fn add_dense_row(&mut self, key: i64, gap: f64) {
        let slot = self.dense.slot(key);
        if *slot == NO_ENTRY {
            *slot = self.dense_sums.len() as u32;
            self.dense_sums.push([0.0; 2]);
            self.dense_keys.push(key);
        }
        let s = &mut self.dense_sums[*slot as usize];
        s[0] += 1.0;
        s[1] += gap;
    }

    /// Adds a batch of group 0 whose keys the direct index covers and whose `p` are in
    /// [0, 1]; false, adding nothing, when a label is not 0 or 1.
    fn add_dense<Y: Label>(&mut self, keys: &[i64], p: &[f64], y: &[Y]) -> bool {
        if !all_labels(y) {
            return false;
        }
        for ((&k, &pi), &yi) in keys.iter().zip(p).zip(y) {
            self.add_dense_row(k, yi.to_f64() - pi);
        }
        true
    }

    fn bytes(&self) -> usize {
        self.slots.capacity() * size_of::<Slot>()
            + self.dense_sums.capacity() * size_of::<[f64; 2]>()
            + self.dense_keys.capacity() * size_of::<i64>()
            + self.used.capacity() * size_of::<u32>()
            + self.dense.bytes()
    }

    /// Every pair the cache holds.
    fn pairs(&self) -> impl Iterator<Item = Slot> + '_ {
        let probed = self.used.iter().map(|&i| self.slots[i as usize]);
        let dense = self
            .dense_keys
            .iter()
            .zip(&self.dense_sums)
            .map(|(&k, s)| Slot {
                group: 0,
                key: k as u64,
                count: s[0],
                gap: s[1],
            });
        probed.chain(dense)
    }

    /// Forgets every pair (after they were spread); the tables stay allocated.
    fn clear(&mut self) {
        for &i in &self.used {
            self.slots[i as usize].group = NO_GROUP;
        }
        self.used.clear();
        for &k in &self.dense_keys {
            *self.dense.slot(k) = NO_ENTRY;
        }
        self.dense_keys.clear();
        self.dense_sums.clear();
    }
}

/// The cells of one group's R·T (count, gap) pairs, and how a key's rows spread onto them.
#[derive(Debug, Clone, Copy)]
struct Layout {
    bins: usize,
    rounds: usize,
}

impl Layout {
    /// Adds `n` rows of key `k` with Σ(y − p) = `gap` to the cells starting at `base`.
    #[inline]
    fn spread(self, count: &mut [f64], gaps: &mut [f64], base: usize, k: u64, n: f64, gap: f64) {
        for r in 0..self.rounds {
            let c = base + r * self.bins + bin_of(k, r, self.bins);
            count[c] += n;
            gaps[c] += gap;
        }
    }
}

#[derive(Debug)]
struct MvceKernel {
    bins: usize,
    rounds: usize,
    /// Per group, R·T cells (round-major): rows and Σ(y − p).
    count: Vec<f64>,
    gap: Vec<f64>,
    /// Rows of large batches, summed per (group, key), not yet in the cells.
    cache: KeyCache,
}

impl MvceKernel {
    fn cells(&self) -> usize {
        self.bins * self.rounds
    }

    fn layout(&self) -> Layout {
        Layout {
            bins: self.bins,
            rounds: self.rounds,
        }
    }

    /// Spreads every cached pair onto its group's cells and empties the cache.
    fn spread_cache(&mut self) {
        let (layout, cells) = (self.layout(), self.cells());
        for s in self.cache.pairs() {
            layout.spread(
                &mut self.count,
                &mut self.gap,
                s.group * cells,
                s.key,
                s.count,
                s.gap,
            );
        }
        self.cache.clear();
    }
}

impl Kernel for MvceKernel {
    fn empty(&self) -> Result<Self> {
        Ok(Self {
            bins: self.bins,
            rounds: self.rounds,
            count: vec![],
            gap: vec![],
            cache: KeyCache::default(),
        })
    }

    fn resize(&mut self, n: usize) {
        let len = n * self.cells();
        if self.count.len() < len {
            self.count.resize(len, 0.0);
            self.gap.resize(len, 0.0);
        }
    }

    fn num_groups(&self) -> usize {
        self.count.len() / self.cells()
    }

    fn update(&mut self, values: &[ArrayRef], groups: &[usize], filter: Filter) -> Result<()> {
        let p = f64s(&values[0]).values();
        let keys = KeyWords::of(&values[2])?;
        let mask = usable_rows(&[&values[0], &values[1], &values[2]], filter);
        let (layout, cells) = (self.layout(), self.cells());
        let (count, gap) = (&mut self.count, &mut self.gap);
        if mask.is_none() && p.len() >= CACHE_MIN_ROWS && count.len() == cells {
            if let KeyWords::Ints(ints) = &keys {
                // The one group's batch whose keys a direct index covers, every row usable:
                // its labels as they are stored, checked in one pass (a bad value falls
                // through to the checked paths, which name it).
                let cache = &mut self.cache;
                if cache.dense.cover_all(ints)
                    && all_probabilities(p)
                    && with_labels!(&values[1], |y| cache.add_dense(ints, p, y)) == Some(true)
                {
                    return Ok(());
                }
            }
        }
        let y = f64_labels(&values[1])?;
        let y = &y[..];
        if p.len() < CACHE_MIN_ROWS {
            return for_each_row(p.len(), &mask, |i| {
                let (pi, yi) = (check_p("mvce", "p", p[i])?, check_y("mvce", y[i])?);
                let k = keys.word(i);
                layout.spread(count, gap, groups[i] * cells, k, 1.0, yi - pi);
                Ok(())
            });
        }
        let cache = &mut self.cache;
        if let KeyWords::Ints(ints) = &keys {
            if count.len() == cells && cache.dense.cover_all(ints) {
                return for_each_row(p.len(), &mask, |i| {
                    let (pi, yi) = (check_p("mvce", "p", p[i])?, check_y("mvce", y[i])?);
                    cache.add_dense_row(ints[i], yi - pi);
                    Ok(())
                });
            }
        }
        if cache.slots.is_empty() {
            cache.slots = vec![
                Slot {
                    group: NO_GROUP,
                    key: 0,
                    count: 0.0,
                    gap: 0.0,
                };
                CACHE_SLOTS
            ];
        }
        for_each_row(p.len(), &mask, |i| {
            let (pi, yi) = (check_p("mvce", "p", p[i])?, check_y("mvce", y[i])?);
            let (g, k) = (groups[i], keys.word(i));
            let home = KeyCache::slot_of(g, k);
            let mut at = home;
            for probe in 0..CACHE_PROBES {
                at = (home + probe) & (CACHE_SLOTS - 1);
                let s = &mut cache.slots[at];
                if s.group == g && s.key == k {
                    s.count += 1.0;
                    s.gap += yi - pi;
                    return Ok(());
                }
                if s.group == NO_GROUP {
                    break;
                }
            }
            let s = &mut cache.slots[at];
            if s.group == NO_GROUP {
                cache.used.push(at as u32);
            } else {
                at = home;
                let s = &mut cache.slots[at];
                layout.spread(count, gap, s.group * cells, s.key, s.count, s.gap);
            }
            let s = &mut cache.slots[at];
            *s = Slot {
                group: g,
                key: k,
                count: 1.0,
                gap: yi - pi,
            };
            Ok(())
        })
    }

    fn merge(&mut self, states: &[ArrayRef], groups: &[usize]) -> Result<()> {
        let cells = self.cells();
        let (oc, c) = list_parts(&states[0]);
        let (og, g) = list_parts(&states[1]);
        for (r, &grp) in groups.iter().enumerate() {
            let (start, end) = (oc[r] as usize, oc[r + 1] as usize);
            if end == start {
                continue;
            }
            if end - start != cells || og[r] != oc[r] || og[r + 1] != oc[r + 1] {
                return internal_err!(
                    "mvce: a partial state has {} cells, expected {cells}",
                    end - start
                );
            }
            for j in 0..cells {
                self.count[grp * cells + j] += c[start + j];
                self.gap[grp * cells + j] += g[start + j];
            }
        }
        Ok(())
    }

    fn state(&self, range: Range<usize>) -> Result<Vec<ArrayRef>> {
        let (layout, cells) = (self.layout(), self.cells());
        let span = range.start * cells..range.end * cells;
        let (mut count, mut gap) = (self.count[span.clone()].to_vec(), self.gap[span].to_vec());
        for s in self.cache.pairs() {
            if range.contains(&s.group) {
                let base = (s.group - range.start) * cells;
                layout.spread(&mut count, &mut gap, base, s.key, s.count, s.gap);
            }
        }
        Ok(vec![fixed_lists(count, cells), fixed_lists(gap, cells)])
    }

    fn take_state(&mut self, range: Range<usize>) -> Result<Vec<ArrayRef>> {
        self.spread_cache();
        self.state(range)
    }

    fn evaluate(&mut self, range: Range<usize>) -> Result<ArrayRef> {
        self.spread_cache();
        let cells = self.cells();
        let out: Float64Array = range
            .map(|g| {
                let (mut sum, mut nonempty) = (0.0, 0usize);
                for j in g * cells..(g + 1) * cells {
                    if self.count[j] > 0.0 {
                        sum += self.gap[j].abs() / self.count[j];
                        nonempty += 1;
                    }
                }
                (nonempty > 0).then(|| sum / nonempty as f64)
            })
            .collect();
        Ok(Arc::new(out))
    }

    fn drain(&mut self, n: usize) {
        self.spread_cache();
        let len = n * self.cells();
        self.count.drain(..len);
        self.gap.drain(..len);
    }

    fn native_labels(&self) -> bool {
        true
    }

    fn size(&self) -> usize {
        (self.count.capacity() + self.gap.capacity()) * size_of::<f64>() + self.cache.bytes()
    }

    fn retractable(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Test vectors from tests/slt/gen/field_metrics.py (Python integers).
    #[test]
    fn hash_matches_the_documented_vectors() {
        assert_eq!(mix(1), 0x5692161d100b05e5);
        assert_eq!(bin_of(0, 1, 15), 10);
        assert_eq!(bin_of(u64::MAX, 0, 15), 12);
        assert_eq!(bin_of(42, 9, 15), 13);
        assert_eq!(fnv1a(b"site7"), 0x4884214edcf7467b);
        assert_eq!(fnv1a(b""), 0xcbf29ce484222325);
        assert_eq!(bin_of(fnv1a(b""), 1, 4), 0);
    }

    /// The key cache against the definition computed row by row in the test (cells from
    /// the documented hash, which the test above checks): 200,000 rows in batches large
    /// enough to use the cache, with a state taken halfway. Over 3 groups and 60,000 keys
    /// the pairs are probed (more than the cache holds, so some are evicted); in one group
    /// the same keys take the direct index, and keys 2^40 apart the probes again. Counts are
    /// equal, gaps to 1e-12 relative (another order of addition).
    #[test]
    fn cached_rows_give_the_cells_of_the_definition() {
        let near = |i: usize| ((i * 7919) % 60_000) as i64 - 30_000;
        let far = |i: usize| ((i * 7919) % 60_000) as i64 * (1 << 40);
        check_cache(3, near, false);
        check_cache(1, near, true);
        check_cache(1, far, false);
    }

    fn check_cache(groups_n: usize, key: impl Fn(usize) -> i64, dense: bool) {
        use arrow::array::Int64Array;
        let (bins, rounds) = (7, 5);
        let n = 200_000;
        let p: Vec<f64> = (0..n).map(|i| (i % 997) as f64 / 997.0).collect();
        let y: Vec<f64> = (0..n).map(|i| ((i * 31) % 3 == 0) as u8 as f64).collect();
        let g: Vec<usize> = (0..n).map(|i| (i * 13) % groups_n).collect();
        let cells = bins * rounds;
        let (mut count, mut gap) = (vec![0.0; groups_n * cells], vec![0.0; groups_n * cells]);
        for i in 0..n {
            for r in 0..rounds {
                let c = g[i] * cells + r * bins + bin_of(key(i) as u64, r, bins);
                count[c] += 1.0;
                gap[c] += y[i] - p[i];
            }
        }
        let mut k = MvceKernel {
            bins,
            rounds,
            count: vec![],
            gap: vec![],
            cache: KeyCache::default(),
        };
        k.resize(groups_n);
        let mut halfway = None;
        for start in (0..n).step_by(8192) {
            let end = (start + 8192).min(n);
            let values: Vec<ArrayRef> = vec![
                Arc::new(Float64Array::from(p[start..end].to_vec())),
                Arc::new(Float64Array::from(y[start..end].to_vec())),
                Arc::new(Int64Array::from_iter_values((start..end).map(&key))),
            ];
            k.update(&values, &g[start..end], None).unwrap();
            if start == 98_304 {
                halfway = Some(k.state(0..groups_n).unwrap());
            }
        }
        let (probed, direct) = (k.cache.used.len(), k.cache.dense_keys.len());
        assert!(probed + direct > 1000, "the cache holds pairs");
        assert_eq!(direct > 0, dense, "pairs by the direct index: {direct}");
        let state = k.state(0..groups_n).unwrap();
        k.spread_cache();
        for (got, want) in [(&state[0], &count), (&state[1], &gap)] {
            let (_, v) = list_parts(got);
            for (a, b) in v.iter().zip(want.iter()) {
                assert!(
                    (a - b).abs() <= 1e-12 * b.abs().max(1.0),
                    "state {a} vs {b}"
                );
            }
        }
        for (a, b) in k.count.iter().zip(&count) {
            assert_eq!(a, b);
        }
        for (a, b) in k.gap.iter().zip(&gap) {
            assert!(
                (a - b).abs() <= 1e-12 * b.abs().max(1.0),
                "cells {a} vs {b}"
            );
        }
        // The state taken halfway holds the first half's rows, cached ones included.
        let halfway = halfway.unwrap();
        let (_, half) = list_parts(&halfway[0]);
        let rows: f64 = half.iter().sum::<f64>() / rounds as f64;
        assert_eq!(rows, (98_304 + 8192) as f64);
    }
}
