//! Counting distinct scores without sorting them: a lower bound from a bitmap, which proves
//! "at least k distinct" in one pass over part of the rows. Used where the exact count only
//! decides which way to go on (`ece_debiased`'s binning, a fit's switch to its grid); either
//! answer leaves the result exact, the proof only spares the sort.

/// Whether the scores hold at least `k` distinct values, proven without sorting: each score
/// sets one bit of a bitmap of about n bits, picked by a multiplicative hash of its bit
/// pattern (−0 read as 0), so the bits set never outnumber the distinct scores. Reads rows
/// until `k` bits are set; false when they never are, or early when the scores read so far
/// repeat so much (under one new bit in 8 rows) that few distinct scores are likely (the
/// caller then counts by sorting: either answer is exact, this one only picks the way).
/// With n distinct scores among n rows it stops after about 0.29·n rows (k = n/4).
pub(crate) fn at_least_distinct(parts: &[&[f64]], n: usize, k: usize) -> bool {
    /// Rows between two looks at how often the scores repeat.
    const LOOK: usize = 1 << 16;
    let bits = n.next_power_of_two().max(64);
    let shift = 64 - bits.trailing_zeros();
    let mut words = vec![0u64; bits / 64];
    let (mut set, mut read) = (0usize, 0usize);
    for part in parts {
        for chunk in part.chunks(LOOK) {
            for &p in chunk {
                let h = ((p + 0.0).to_bits().wrapping_mul(0x9E37_79B9_7F4A_7C15) >> shift) as usize;
                let (word, bit) = (&mut words[h >> 6], 1u64 << (h & 63));
                set += usize::from(*word & bit == 0);
                *word |= bit;
                if set >= k {
                    return true;
                }
            }
            read += chunk.len();
            if set * 8 < read {
                return false;
            }
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bitmap never claims more distinct scores than there are (it is a lower bound),
    /// and finds them among distinct scores: counted against the scores' exact distinct
    /// count in the test.
    #[test]
    fn the_bitmap_is_a_lower_bound_that_finds_distinct_scores() {
        let n = 1 << 20;
        let distinct: Vec<f64> = (0..n).map(|i| i as f64 / n as f64).collect();
        assert!(at_least_distinct(
            &[&distinct[..n / 2], &distinct[n / 2..]],
            n,
            n / 4
        ));
        // 100 distinct values, far under n/4: never proven, and given up early.
        let few: Vec<f64> = (0..n).map(|i| (i % 100) as f64 / 100.0).collect();
        assert!(!at_least_distinct(&[&few], n, n / 4));
        assert!(
            at_least_distinct(&[&few], n, 60),
            "60 of the 100 are proven"
        );
        assert!(
            !at_least_distinct(&[&few], n, 101),
            "never more than there are"
        );
        // Exactly n/4 distinct values, each 4 times in a row: never more proven.
        let quarter: Vec<f64> = (0..n).map(|i| (i / 4) as f64 / n as f64).collect();
        let exact = quarter.windows(2).filter(|w| w[0] != w[1]).count() + 1;
        assert_eq!(exact, n / 4);
        assert!(!at_least_distinct(&[&quarter], n, exact + 1));
        // Signed zeros are one score.
        assert!(!at_least_distinct(&[&[0.0, -0.0, 0.0]], 3, 2));
    }
}
