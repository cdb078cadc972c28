//! A direct index of small integer keys (sites, apps, advertisers): a key's slot holds what
//! a slower map gave for it the first time it was met, so a row costs a subtraction and a
//! load instead of a hash probe (or, for the field-aware fits, formatting the key as text).

use arrow::datatypes::DataType;

/// Whether a field of this type is keyed as an i64 (every integer type that casts to Int64
/// without loss).
pub(crate) fn is_small_int(t: &DataType) -> bool {
    use DataType::*;
    matches!(t, Int8 | Int16 | Int32 | Int64 | UInt8 | UInt16 | UInt32)
}

/// Most slots of a [`DenseIndex`] (4 bytes each: 256 KiB).
pub(crate) const DENSE_MAX_SLOTS: i64 = 1 << 16;
/// A slot whose key has not been met.
pub(crate) const NO_ENTRY: u32 = u32::MAX;

/// Slots for the keys `base..base + slots.len()`, each [`NO_ENTRY`] or the number its key's
/// first lookup in the owner's map returned. The owner asks the map when a slot is empty, so
/// entries the index never saw (merged ones, say) are found, not made twice.
#[derive(Debug, Default)]
pub(crate) struct DenseIndex {
    pub(crate) base: i64,
    pub(crate) slots: Vec<u32>,
}

impl DenseIndex {
    /// Widens the index to cover `lo..=hi`; false (unchanged) when that span would be wider
    /// than [`DENSE_MAX_SLOTS`]. A widened index at least doubles (within the limit, on the
    /// side it grows), so keys that creep up or down a batch at a time copy the slots a
    /// logarithmic number of times, not once a batch.
    pub(crate) fn cover(&mut self, lo: i64, hi: i64) -> bool {
        let end = self.base.saturating_add(self.slots.len() as i64);
        if !self.slots.is_empty() && lo >= self.base && hi < end {
            return true;
        }
        let (mut new_lo, mut new_end) = if self.slots.is_empty() {
            (lo, hi.saturating_add(1))
        } else {
            (lo.min(self.base), hi.saturating_add(1).max(end))
        };
        if new_end.saturating_sub(new_lo) > DENSE_MAX_SLOTS {
            return false;
        }
        let doubled = (2 * self.slots.len() as i64).min(DENSE_MAX_SLOTS);
        let short = doubled - (new_end - new_lo);
        if short > 0 {
            if new_lo < self.base {
                new_lo = new_lo.saturating_sub(short);
            } else {
                new_end = new_end.saturating_add(short);
            }
        }
        let mut slots = vec![NO_ENTRY; (new_end - new_lo) as usize];
        if !self.slots.is_empty() {
            let shift = (self.base - new_lo) as usize;
            slots[shift..shift + self.slots.len()].copy_from_slice(&self.slots);
        }
        (self.base, self.slots) = (new_lo, slots);
        true
    }

    /// Covers the smallest and largest of `keys`; false when there are none or their span is
    /// too wide.
    pub(crate) fn cover_all(&mut self, keys: &[i64]) -> bool {
        // Four lanes: one running minimum and maximum would wait on each other every key.
        const LANES: usize = 4;
        let (mut lo, mut hi) = ([i64::MAX; LANES], [i64::MIN; LANES]);
        let chunks = keys.chunks_exact(LANES);
        for &k in chunks.remainder() {
            (lo[0], hi[0]) = (lo[0].min(k), hi[0].max(k));
        }
        for c in chunks {
            for j in 0..LANES {
                (lo[j], hi[j]) = (lo[j].min(c[j]), hi[j].max(c[j]));
            }
        }
        let (lo, hi) = (lo.into_iter().min(), hi.into_iter().max());
        !keys.is_empty() && self.cover(lo.unwrap_or(0), hi.unwrap_or(0))
    }

    /// The slot of a covered key.
    #[inline(always)]
    pub(crate) fn slot(&mut self, key: i64) -> &mut u32 {
        &mut self.slots[(key - self.base) as usize]
    }

    pub(crate) fn bytes(&self) -> usize {
        self.slots.capacity() * size_of::<u32>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn widening_keeps_the_slots_and_refuses_wide_spans() {
        let mut d = DenseIndex::default();
        assert!(!d.cover_all(&[]));
        assert!(d.cover_all(&[10, 12]));
        *d.slot(11) = 7;
        assert!(d.cover(-5, 11));
        assert_eq!((d.base, d.slots.len()), (-5, 18));
        assert!(d.cover(0, 100));
        assert_eq!((d.base, d.slots.len()), (-5, 106));
        // Creeping up a key at a time: doubled, so covered again without a copy.
        assert!(d.cover(101, 101));
        assert_eq!((d.base, d.slots.len()), (-5, 212));
        assert!(d.cover(150, 206));
        assert_eq!(d.slots.len(), 212);
        // Down: doubled below.
        assert!(d.cover(-6, 0));
        assert_eq!((d.base, d.slots.len()), (-217, 424));
        assert_eq!(*d.slot(11), 7);
        assert_eq!(*d.slot(12), NO_ENTRY);
        assert!(!d.cover(0, DENSE_MAX_SLOTS));
        assert!(!d.cover_all(&[i64::MIN, i64::MAX]));
        assert_eq!(
            (d.base, d.slots.len()),
            (-217, 424),
            "a refused span changes nothing"
        );
        // Doubling stops at the limit.
        let mut e = DenseIndex::default();
        assert!(e.cover(0, 40_000));
        assert!(e.cover(40_001, 40_001));
        assert_eq!((e.base, e.slots.len() as i64), (0, DENSE_MAX_SLOTS));
    }
}
