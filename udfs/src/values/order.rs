//! Ordering f64 scores: the order-preserving bit pattern, an in-place sort, and the selection
//! of a few order statistics without sorting (the `'quantile'` edges).

/// The order-preserving bit pattern of an f64: unsigned comparison of the keys is
/// `f64::total_cmp` of the values.
#[inline]
pub(super) fn key(x: f64) -> u64 {
    let b = x.to_bits();
    if b >> 63 == 1 {
        !b
    } else {
        b | (1 << 63)
    }
}

#[inline]
pub(super) fn unkey(k: u64) -> f64 {
    f64::from_bits(if k >> 63 == 1 { k & !(1 << 63) } else { !k })
}

/// Sorts f64 values ascending in `total_cmp` order, in place (no scratch buffer: the
/// rows are often most of a query's memory): the values are replaced by their
/// order-preserving bit patterns, sorted as integers by the standard library's unstable sort
/// (pattern-defeating quicksort), and turned back (why not a radix sort:
/// `docs/performance.md`).
pub(crate) fn sort_f64(v: &mut [f64]) {
    for x in v.iter_mut() {
        *x = f64::from_bits(key(*x));
    }
    v.sort_unstable_by_key(|x| x.to_bits());
    for x in v.iter_mut() {
        *x = unkey(x.to_bits());
    }
}

/// Splits `v`, holding order-preserving keys ([`key`]'s bits), in place around the median of
/// a sample of them: the keys below it first. Returns where the others begin (0 when the
/// median is the smallest key, as when most values are one). One pass, without a branch on
/// the keys.
pub(crate) fn split_keys(v: &mut [f64]) -> usize {
    let step = (v.len() / 1024).max(1);
    let mut sample: Vec<u64> = v.iter().step_by(step).map(|x| x.to_bits()).collect();
    if sample.is_empty() {
        return 0;
    }
    let middle = sample.len() / 2;
    let pivot = *sample.select_nth_unstable(middle).1;
    let mut below = 0;
    for j in 0..v.len() {
        let is_below = v[j].to_bits() < pivot;
        v.swap(below, j);
        below += usize::from(is_below);
    }
    below
}

/// The value of 0-based rank `k` (in `total_cmp` order) among ascending `parts` and
/// `counted` (ascending distinct values, each with its rows), without a pass over them: a
/// bisection of the order-preserving keys, counting the rows at or below a key by binary
/// searches (64 steps, each a search of every source). `k` must be below the rows in all.
pub(crate) fn rank_of_sorted(parts: &[&[f64]], counted: &[(&[f64], &[u64])], k: u64) -> f64 {
    // Prefix sums of the counted rows, so a search gives the rows below a value.
    let prefixes: Vec<Vec<u64>> = counted
        .iter()
        .map(|(_, n)| {
            n.iter()
                .scan(0u64, |acc, &x| {
                    *acc += x;
                    Some(*acc)
                })
                .collect()
        })
        .collect();
    let at_or_below = |k: u64| -> u64 {
        let rows: u64 = parts
            .iter()
            .map(|p| p.partition_point(|&x| key(x) <= k) as u64)
            .sum();
        let tallied: u64 = counted
            .iter()
            .zip(&prefixes)
            .map(|((p, _), pre)| match p.partition_point(|&x| key(x) <= k) {
                0 => 0,
                i => pre[i - 1],
            })
            .sum();
        rows + tallied
    };
    // The smallest key with more than k rows at or below it: a key of the data.
    let (mut lo, mut hi) = (0u64, u64::MAX);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if at_or_below(mid) > k {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    unkey(lo)
}

/// Whether `v` is ascending in `total_cmp` order.
pub(crate) fn is_sorted_f64(v: &[f64]) -> bool {
    v.windows(2).all(|w| w[0].total_cmp(&w[1]).is_le())
}

/// Most ranks [`select_ranks`] takes (two per `'quantile'` edge: 64 bins).
const SELECT_MAX_RANKS: usize = 130;
/// The first digit of a key the selection counts, in bits; every later digit has
/// [`DIGIT_BITS`] (16 + 6 × 8 = 64).
const TOP_BITS: u32 = 16;
/// A later digit: 256 counters (2 KiB) per bucket still searched, so a pass's counters stay
/// in a core's L1 cache (wider digits: `docs/performance.md`).
const DIGIT_BITS: u32 = 8;
const DIGIT_MASK: usize = (1 << DIGIT_BITS) - 1;
/// Buckets of at most this many rows are collected and sorted rather than counted again.
const COLLECT_LIMIT: u64 = 1 << 14;
/// No bucket: no wanted rank has this prefix.
const NONE: u32 = u32::MAX;

/// The buckets a selection still searches: the chain of tables from a key's digits to the
/// slot of its bucket at the deepest level counted so far. Every level has one more slot
/// than it searches, the *discard* slot (the last), where keys outside the searched buckets
/// go: the passes read every key without a branch on whether it is wanted, a branch that
/// distinct scores would take at random.
struct Buckets {
    /// The top digit → a slot of level 0.
    top: Vec<u32>,
    /// Level l ≥ 1: (slot of level l − 1) × 2^8 + digit → a slot of level l.
    levels: Vec<Vec<u32>>,
}

impl Buckets {
    /// The slot (at the deepest level) of the bucket holding key `k`; the discard slot if
    /// it is not searched.
    #[inline(always)]
    fn slot(&self, k: u64) -> usize {
        let mut s = self.top[(k >> (64 - TOP_BITS)) as usize] as usize;
        let mut shift = 64 - TOP_BITS;
        for table in &self.levels {
            shift -= DIGIT_BITS;
            s = table[(s << DIGIT_BITS) | ((k >> shift) as usize & DIGIT_MASK)] as usize;
        }
        s
    }

    /// How many leading bits of a key the deepest level has fixed.
    fn bits(&self) -> u32 {
        TOP_BITS + DIGIT_BITS * self.levels.len() as u32
    }
}

/// The digit of `hist` (a histogram of one bucket's next digit) holding the `rank`-th key
/// of the bucket, and the rank inside that digit's bucket.
fn locate(hist: &[u64], rank: u64) -> (usize, u64) {
    let mut below = 0;
    for (d, &c) in hist.iter().enumerate() {
        if rank < below + c {
            return (d, rank - below);
        }
        below += c;
    }
    unreachable!("a rank inside its bucket")
}

/// A wanted rank, while it is searched: its bucket's slot, its rank inside the bucket.
struct Target {
    slot: usize,
    rank: u64,
}

/// Order statistics of the union of `parts` (unsorted, left untouched): the values of
/// ascending `ranks` (0-based, each < the total length), in `total_cmp` order, by a radix
/// select on the order-preserving bit patterns — read-only passes over the data, no copy.
///
/// Pass 1 counts the top 16 bits of every key. Each later pass counts the next 8 bits of
/// the keys in the buckets that hold a wanted rank (from the third pass on it also tracks
/// each bucket's smallest and largest key: a bucket of one repeated value is answered at
/// once). When every such bucket has at most 2^14 keys, a last pass collects and sorts them.
/// Distinct scores in [0, 1] take three passes. Returns None when more than
/// [`SELECT_MAX_RANKS`] ranks are wanted (sorting is then as cheap).
pub(crate) fn select_ranks(parts: &[&[f64]], ranks: &[usize]) -> Option<Vec<f64>> {
    if ranks.len() > SELECT_MAX_RANKS {
        return None;
    }
    let mut answers: Vec<Option<f64>> = vec![None; ranks.len()];

    // Pass 1: the top digit.
    let mut hist = vec![0u64; 1 << TOP_BITS];
    for part in parts {
        for &x in part.iter() {
            hist[(key(x) >> (64 - TOP_BITS)) as usize] += 1;
        }
    }
    // Per searched slot of the deepest level: its row count and its key prefix.
    let mut counts: Vec<u64> = vec![];
    let mut prefixes: Vec<u64> = vec![];
    let mut top = vec![NONE; 1 << TOP_BITS];
    let mut targets: Vec<Target> = ranks
        .iter()
        .map(|&r| {
            let (d, rank) = locate(&hist, r as u64);
            if top[d] == NONE {
                top[d] = counts.len() as u32;
                counts.push(hist[d]);
                prefixes.push(d as u64);
            }
            Target {
                slot: top[d] as usize,
                rank,
            }
        })
        .collect();
    let discard = counts.len() as u32;
    top.iter_mut()
        .filter(|s| **s == NONE)
        .for_each(|s| *s = discard);
    let mut buckets = Buckets {
        top,
        levels: vec![],
    };

    // Count the next digit while a searched bucket is too big to collect.
    while buckets.bits() < 64
        && targets
            .iter()
            .zip(&answers)
            .any(|(t, a)| a.is_none() && counts[t.slot] > COLLECT_LIMIT)
    {
        let shift = 64 - buckets.bits() - DIGIT_BITS;
        let slots = counts.len() + 1; // and the discard slot
        let mut hist = vec![0u64; slots << DIGIT_BITS];
        let track_range = !buckets.levels.is_empty();
        let mut range = vec![(u64::MAX, 0u64); slots];
        for part in parts {
            for &x in part.iter() {
                let k = key(x);
                let s = buckets.slot(k);
                hist[(s << DIGIT_BITS) | ((k >> shift) as usize & DIGIT_MASK)] += 1;
                if track_range && s < slots - 1 {
                    let r = &mut range[s];
                    r.0 = r.0.min(k);
                    r.1 = r.1.max(k);
                }
            }
        }
        let mut table = vec![NONE; slots << DIGIT_BITS];
        let (mut next_counts, mut next_prefixes) = (vec![], vec![]);
        for (t, answer) in targets.iter_mut().zip(answers.iter_mut()) {
            if answer.is_some() {
                continue;
            }
            let (lo, hi) = range[t.slot];
            if track_range && lo == hi {
                *answer = Some(unkey(lo));
                continue;
            }
            let at = t.slot << DIGIT_BITS;
            let (d, rank) = locate(&hist[at..at + (1 << DIGIT_BITS)], t.rank);
            if table[at | d] == NONE {
                table[at | d] = next_counts.len() as u32;
                next_counts.push(hist[at | d]);
                next_prefixes.push((prefixes[t.slot] << DIGIT_BITS) | d as u64);
            }
            *t = Target {
                slot: table[at | d] as usize,
                rank,
            };
        }
        let discard = next_counts.len() as u32;
        table
            .iter_mut()
            .filter(|s| **s == NONE)
            .for_each(|s| *s = discard);
        buckets.levels.push(table);
        counts = next_counts;
        prefixes = next_prefixes;
    }

    if buckets.bits() == 64 {
        // Every key of a 64-bit bucket is its prefix.
        for (t, answer) in targets.iter().zip(answers.iter_mut()) {
            answer.get_or_insert_with(|| unkey(prefixes[t.slot]));
        }
    } else if answers.iter().any(Option::is_none) {
        // Last pass: collect the searched buckets' keys and sort them.
        let mut collected: Vec<Vec<u64>> = counts
            .iter()
            .map(|&c| Vec::with_capacity(c as usize))
            .collect();
        let discard = counts.len();
        for part in parts {
            for &x in part.iter() {
                let k = key(x);
                let s = buckets.slot(k);
                if s != discard {
                    collected[s].push(k);
                }
            }
        }
        for c in collected.iter_mut() {
            c.sort_unstable();
        }
        for (t, answer) in targets.iter().zip(answers.iter_mut()) {
            answer.get_or_insert_with(|| unkey(collected[t.slot][t.rank as usize]));
        }
    }
    Some(
        answers
            .into_iter()
            .map(|a| a.expect("every rank answered"))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every rank of sorted parts with repeated values, ±0 and counted values, against the
    /// rows written out one by one and sorted with `total_cmp`.
    #[test]
    fn rank_of_sorted_is_the_value_at_that_rank() {
        let mut a = vec![0.5, 0.1, 0.1, 0.9, -0.0, 0.3, 1.0];
        let mut b = vec![0.3, 0.3, 0.0, 0.7, 0.2];
        a.sort_by(f64::total_cmp);
        b.sort_by(f64::total_cmp);
        let (tp, tn) = (vec![0.1, 0.4, 0.95], vec![3u64, 1, 2]);
        let mut all: Vec<f64> = a.iter().chain(&b).copied().collect();
        for (&p, &n) in tp.iter().zip(&tn) {
            all.extend(std::iter::repeat_n(p, n as usize));
        }
        all.sort_by(f64::total_cmp);
        let counted = [(&tp[..], &tn[..]), (&[][..], &[][..])];
        for (k, want) in all.iter().enumerate() {
            let got = rank_of_sorted(&[&a, &b, &[]], &counted, k as u64);
            assert_eq!(got.to_bits(), want.to_bits(), "rank {k}");
        }
        assert_eq!(rank_of_sorted(&[&[0.25]], &[], 0), 0.25);
    }

    /// `split_keys` puts every key below the sampled median before every other, keeps the
    /// keys, and splits nothing off when most keys are one value.
    #[test]
    fn split_keys_splits_at_a_sampled_median() {
        let keyed = |v: &[f64]| -> Vec<f64> { v.iter().map(|&x| f64::from_bits(key(x))).collect() };
        let bits = |v: &[f64]| -> Vec<u64> {
            let mut b: Vec<u64> = v.iter().map(|x| x.to_bits()).collect();
            b.sort_unstable();
            b
        };
        let values: Vec<f64> = (0..100_000u64)
            .map(|i| ((i * 7919) % 10_007) as f64 / 10_007.0 - 0.25)
            .chain([-0.0, 0.0, f64::MIN_POSITIVE])
            .collect();
        let mut v = keyed(&values);
        let before = bits(&v);
        let at = split_keys(&mut v);
        assert!(at > 30_000 && at < 70_000, "split at {at} of {}", v.len());
        let low = v[..at].iter().map(|x| x.to_bits()).max().unwrap();
        let high = v[at..].iter().map(|x| x.to_bits()).min().unwrap();
        assert!(low < high);
        assert_eq!(bits(&v), before);
        let mut same = keyed(&[0.5; 5000]);
        assert_eq!(split_keys(&mut same), 0);
        assert_eq!(split_keys(&mut []), 0);
    }

    #[test]
    fn sort_f64_matches_comparison_sort() {
        let mut s = 0x9E37_79B9_7F4A_7C15u64;
        let mut v: Vec<f64> = (0..20_000)
            .map(|i| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                match i % 5 {
                    0 => (s % 1000) as f64 / 1000.0,
                    1 => -((s % 77) as f64),
                    2 => 0.0,
                    3 => -0.0,
                    _ => f64::from_bits(s) % 1e6,
                }
            })
            .filter(|x| !x.is_nan())
            .collect();
        let mut expected = v.clone();
        expected.sort_by(f64::total_cmp);
        sort_f64(&mut v);
        assert!(v
            .iter()
            .zip(&expected)
            .all(|(a, b)| a.to_bits() == b.to_bits()));
    }

    #[test]
    fn select_ranks_matches_sorting() {
        let mut s = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        // Distinct scores, heavy ties, a constant, ties that differ only in low bits.
        let sets: Vec<Vec<f64>> = vec![
            (0..300_000)
                .map(|_| (next() >> 11) as f64 / (1u64 << 53) as f64)
                .collect(),
            (0..300_000).map(|_| (next() % 7) as f64 / 7.0).collect(),
            vec![0.25; 200_000],
            (0..200_000)
                .map(|_| f64::from_bits(0.5f64.to_bits() + next() % 3))
                .collect(),
            vec![0.0, -0.0, 1.0],
            // Distinct, but within 2^20 ulps: four counting passes before a bucket is small.
            (0..300_000)
                .map(|_| f64::from_bits(0.5f64.to_bits() + next() % (1 << 20)))
                .collect(),
            // Negative and positive, a few heavy values among distinct ones.
            (0..100_000)
                .map(|i| match i % 4 {
                    0 => -1.5,
                    1 => 0.75,
                    _ => (next() >> 11) as f64 / (1u64 << 50) as f64 - 4.0,
                })
                .collect(),
        ];
        for v in sets {
            let (a, b) = v.split_at(v.len() / 3);
            let mut sorted = v.clone();
            sorted.sort_by(f64::total_cmp);
            let n = v.len();
            let ranks: Vec<usize> = [0, 1, n / 7, n / 2, n / 2 + 1, n - 2, n - 1]
                .into_iter()
                .filter(|&r| r < n)
                .collect();
            let got = select_ranks(&[a, b], &ranks).unwrap();
            for (r, g) in ranks.iter().zip(got) {
                assert_eq!(g.to_bits(), sorted[*r].to_bits(), "rank {r} of {n}");
            }
        }
    }
}
