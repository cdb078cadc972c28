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
//! across partitions and machines; the state is R·T counts and sums per group.

use std::ops::Range;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Float64Array};
use arrow::compute::cast;
use arrow::datatypes::{DataType, FieldRef, Int64Type};
use datafusion_common::{internal_err, Result};
use datafusion_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion_expr::{AggregateUDFImpl, Documentation, Signature};
use datafusion_macros::user_doc;

use crate::common::{
    args, check_p, check_y, f64_list_state_fields, f64s, fixed_lists, for_each_row, list_parts,
    usable_rows, Arg, CallShape,
};
use crate::kernel::Filter;
use crate::kernel::{kernel_aggregate, kernel_udaf_common, signature_from_shape, Kernel};

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

/// The 64-bit words of a key column (None where NULL).
fn key_words(keys: &ArrayRef) -> Result<Vec<Option<u64>>> {
    let t = keys.data_type();
    if t.is_integer() {
        let k = cast(keys, &DataType::Int64)?;
        return Ok(k
            .as_primitive::<Int64Type>()
            .iter()
            .map(|v| v.map(|v| v as u64))
            .collect());
    }
    let text = cast(keys, &DataType::Utf8)?;
    Ok(text
        .as_string::<i32>()
        .iter()
        .map(|v| v.map(|s| fnv1a(s.as_bytes())))
        .collect())
}

#[derive(Debug)]
struct MvceKernel {
    bins: usize,
    rounds: usize,
    /// Per group, R·T cells (round-major): rows and Σ(y − p).
    count: Vec<f64>,
    gap: Vec<f64>,
}

impl MvceKernel {
    fn cells(&self) -> usize {
        self.bins * self.rounds
    }
}

impl Kernel for MvceKernel {
    fn empty(&self) -> Result<Self> {
        Ok(Self {
            bins: self.bins,
            rounds: self.rounds,
            count: vec![],
            gap: vec![],
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
        let y = f64s(&values[1]).values();
        let keys = key_words(&values[2])?;
        let mask = usable_rows(&[&values[0], &values[1], &values[2]], filter);
        let (bins, rounds, cells) = (self.bins, self.rounds, self.cells());
        let (count, gap) = (&mut self.count, &mut self.gap);
        for_each_row(p.len(), &mask, |i| {
            let (pi, yi) = (check_p("mvce", "p", p[i])?, check_y("mvce", y[i])?);
            let Some(k) = keys[i] else {
                return Ok(());
            };
            let base = groups[i] * cells;
            for r in 0..rounds {
                let c = base + r * bins + bin_of(k, r, bins);
                count[c] += 1.0;
                gap[c] += yi - pi;
            }
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
        let cells = self.cells();
        let span = range.start * cells..range.end * cells;
        Ok(vec![
            fixed_lists(self.count[span.clone()].to_vec(), cells),
            fixed_lists(self.gap[span].to_vec(), cells),
        ])
    }

    fn evaluate(&mut self, range: Range<usize>) -> Result<ArrayRef> {
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
        let len = n * self.cells();
        self.count.drain(..len);
        self.gap.drain(..len);
    }

    fn size(&self) -> usize {
        (self.count.capacity() + self.gap.capacity()) * size_of::<f64>()
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
}
