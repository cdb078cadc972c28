//! `ece_interval` and `ece_diff_interval`: the ECE with a Poisson-bootstrap interval, in one
//! pass and a bounded state that merges across partitions and machines.
//!
//! Replicate b gives row i the weight `k = Poisson(1)`, drawn from a 64-bit hash of the row's
//! `key` and b ([`replicate_weight`]; the exact rule is in docs/SEMANTICS.md, "Bootstrap
//! weights", so anyone can reproduce it). A row's weights depend on nothing but its key, so a
//! replicate is the same whichever partition, batch or machine sees the row, and its per-bin
//! sums (Σk, Σk·p, Σk·y) add up like any other sums: the state is, per group, those sums for
//! the point estimate and for every replicate, O(replicates · n_bins). Rows that share a key
//! share their weights (a cluster bootstrap); a unique row id gives the ordinary one.
//!
//! Rows that share a key share their weights, so a row's replicate sums are not added row by
//! row: its (1, p, y) wait in a `Pending` entry of its (group, model, key, bin), and each
//! entry is spread over the replicates once, when the entries reach `PENDING_CAP` or the
//! state is read. A cluster bootstrap over 5,000 sites computes 200 weights for each
//! (site, bin) instead of each row; with a unique row id every row is an entry.
//!
//! Only fixed-edge strategies can be binned in one pass (a `'quantile'` edge depends on every
//! row), so `'quantile'` is refused with an error that says so.

use std::ops::Range;
use std::sync::{Arc, OnceLock};

use hashbrown::HashMap;

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::{
    DataType, Field, FieldRef, Fields, Int16Type, Int32Type, Int64Type, Int8Type, UInt16Type,
    UInt32Type, UInt64Type, UInt8Type,
};
use datafusion_common::{exec_err, plan_err, Result};
use datafusion_doc::DocSection;
use datafusion_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion_expr::utils::format_state_name;
use datafusion_expr::{AggregateUDFImpl, Documentation, Signature};

use super::struct_column;
use crate::common::{
    args, check_p, check_y, f64_list_type, f64s, fixed_lists, for_each_row, list_parts, literal,
    literal_checked, n_bins, usable_rows, Arg, CallShape,
};
use crate::kernel::Filter;
use crate::kernel::{kernel_aggregate, kernel_udaf_common, Kernel};
use crate::labels::f64_labels;
use crate::metrics::binned::DEFAULT_BINS;
use crate::metrics::binning::{FixedBins, Strategy};

/// Default number of bootstrap replicates.
pub const DEFAULT_REPLICATES: usize = 200;
/// Default confidence level of the interval.
pub const DEFAULT_LEVEL: f64 = 0.95;
/// Most replicates a call may ask for.
const MAX_REPLICATES: usize = 10_000;
/// Most sums a group may keep (per model): n_bins · (replicates + 1) bins of three sums.
const MAX_CELLS: usize = 1_000_000;

/// The interval's confidence level.
const LEVEL: Arg = Arg::lit_num("level").or("0.95");
/// The number of bootstrap replicates.
const REPLICATES: Arg = Arg::lit_int("replicates").or("200");
/// The two models of `ece_diff_interval`.
const P_A: Arg = Arg::num("p_a");
const P_B: Arg = Arg::num("p_b");
/// The row key the bootstrap weights are hashed from.
const KEY: Arg = Arg::any("key");

const OPTIONAL: &[Arg] = &[args::N_BINS, args::STRATEGY, LEVEL, REPLICATES];

/// One model (`ece_interval`) or two (`ece_diff_interval`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BootstrapKind {
    Ece,
    EceDiff,
}

impl BootstrapKind {
    fn shape(self) -> CallShape {
        match self {
            BootstrapKind::Ece => CallShape {
                name: "ece_interval",
                required: &[args::P, args::Y, KEY],
                optional: OPTIONAL,
            },
            BootstrapKind::EceDiff => CallShape {
                name: "ece_diff_interval",
                required: &[P_A, P_B, args::Y, KEY],
                optional: OPTIONAL,
            },
        }
    }

    /// Models per row.
    fn models(self) -> usize {
        match self {
            BootstrapKind::Ece => 1,
            BootstrapKind::EceDiff => 2,
        }
    }

    /// The names of the value fields: the estimate, then the interval's ends.
    fn value_name(self) -> &'static str {
        match self {
            BootstrapKind::Ece => "ece",
            BootstrapKind::EceDiff => "diff",
        }
    }
}

fn documentation(kind: BootstrapKind) -> Documentation {
    let (description, example) = match kind {
        BootstrapKind::Ece => (
            "`ece(p, y, n_bins, strategy)` with a Poisson-bootstrap confidence interval, in one pass: \
replicate b weighs row i by a Poisson(1) count drawn from a hash of (`key_i`, b) (docs/SEMANTICS.md, \
\"Bootstrap weights\", gives the rule exactly), so the state is per-bin sums for each replicate \
(O(replicates · n_bins)), merges across partitions and machines, and gives the same interval for any \
partitioning. Returns `{ece, lower, upper}`: `ece` is `ece(p, y, n_bins, strategy)` (the same bins and sums, up to \
the order of the additions), `lower`/`upper` the \
type-7 quantiles (1 − level)/2 and (1 + level)/2 of the replicates' ECEs (a replicate in which every row drew 0 \
is left out). Rows that share a key share their weights (a cluster bootstrap: use a user id to resample users); \
give a unique row id for the ordinary bootstrap. Fixed-edge strategies only. Rows with a NULL `p`, `y` or `key` \
are skipped; NULL when no row is usable.",
            r#"```sql
> SELECT r['ece'] AS ece, r['lower'] <= r['ece'] AS lower_ok, r['upper'] >= r['lower'] AS upper_ok
  FROM (SELECT ece_interval(p, y, k) AS r
        FROM (VALUES (0.1, 0, 1), (0.2, 0, 2), (0.8, 1, 3), (0.9, 0, 4)) AS t(p, y, k));
+------+----------+----------+
| ece  | lower_ok | upper_ok |
+------+----------+----------+
| 0.35 | true     | true     |
+------+----------+----------+
```"#,
        ),
        BootstrapKind::EceDiff => (
            "The paired bootstrap of two models' ECE on the same rows: `diff = ece(p_a) − ece(p_b)` \
(each `ece(·, y, n_bins, strategy)`), and the type-7 quantiles (1 − level)/2 and (1 + level)/2 of the \
replicates' differences, every replicate weighing a row the same for both models (the weights of \
`ece_interval`, from the same `key`). An interval that excludes 0 says the two ECEs differ at that level. A model \
against itself gives exactly `{0, 0, 0}`. Returns `{diff, lower, upper}`; NULL when no row is usable.",
            r#"```sql
> SELECT r['diff'] AS diff, r['lower'] AS lower, r['upper'] AS upper
  FROM (SELECT ece_diff_interval(p, p, y, k) AS r
        FROM (VALUES (0.1, 0, 1), (0.2, 0, 2), (0.8, 1, 3), (0.9, 0, 4)) AS t(p, y, k));
+------+-------+-------+
| diff | lower | upper |
+------+-------+-------+
| 0.0  | 0.0   | 0.0   |
+------+-------+-------+
```"#,
        ),
    };
    let mut b = Documentation::builder(
        DocSection {
            include: true,
            label: "Calibration Tests",
            description: None,
        },
        description,
        kind.shape().usage(),
    )
    .with_sql_example(example);
    b = match kind {
        BootstrapKind::Ece => b.with_argument("p", "Predicted probability in [0, 1]."),
        BootstrapKind::EceDiff => b
            .with_argument("p_a", "Model A's predicted probability in [0, 1].")
            .with_argument("p_b", "Model B's predicted probability in [0, 1]."),
    };
    b.with_argument("y", "Observed label: Boolean or a number 0/1.")
        .with_argument(
            "key",
            "The row's resampling key: an integer or string column (a row id; a user id for a \
cluster bootstrap).",
        )
        .with_argument(
            "n_bins",
            "Number of bins, an integer constant in [1, 10000]. Default 15.",
        )
        .with_argument(
            "strategy",
            "The bins, as in `ece`: a fixed-edge rule, `'uniform'` (default), `'sklearn'`, `'netcal'`, \
`'torchmetrics'`, `'relplot'` or `'kumar'`. `'quantile'` edges depend on every row and cannot be bootstrapped in \
one pass.",
        )
        .with_argument(
            "level",
            "Confidence level, a constant in (0, 1). Default 0.95.",
        )
        .with_argument(
            "replicates",
            "Bootstrap replicates, an integer constant in [1, 10000] (with n_bins · (replicates + 1) at \
most 1,000,000). Default 200.",
        )
        .build()
}

/// `ece_interval` or `ece_diff_interval`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct BootstrapEce {
    kind: BootstrapKind,
    signature: Signature,
}

crate::kernel::signature_from_shape!(BootstrapEce, kind: BootstrapKind);

impl BootstrapEce {
    fn kernel(&self, args: &AccumulatorArgs) -> Result<BootKernel> {
        let shape = self.shape();
        let func = shape.name;
        let at = |j: usize| args.exprs.get(shape.required.len() + j);
        let m = match at(0) {
            Some(e) => n_bins(func, e)?,
            None => DEFAULT_BINS,
        };
        let strategy = match at(1) {
            None => Strategy::Uniform,
            Some(e) => {
                let v = literal(func, "strategy", e)?;
                let s = Strategy::parse(func, &v)?;
                if s.data_dependent() {
                    return plan_err!(
                        "{func}: argument strategy must be a fixed-edge rule ('uniform', 'sklearn', \
'netcal', 'torchmetrics', 'relplot' or 'kumar'): quantile edges depend on every row and cannot be \
bootstrapped in one pass, got {v}"
                    );
                }
                s
            }
        };
        let level = match at(2) {
            Some(e) => literal_checked(func, "level", e, "in (0, 1)", |x| x > 0.0 && x < 1.0)?,
            None => DEFAULT_LEVEL,
        };
        let bins = FixedBins::new(strategy, m);
        let nb = bins.n();
        let replicates = match at(3) {
            Some(e) => {
                let rule = format!(
                    "an integer in [1, {MAX_REPLICATES}] with n_bins · (replicates + 1) at most \
{MAX_CELLS}"
                );
                literal_checked(func, "replicates", e, &rule, |x| {
                    x.fract() == 0.0
                        && (1.0..=MAX_REPLICATES as f64).contains(&x)
                        && nb as f64 * (x + 1.0) <= MAX_CELLS as f64
                })? as usize
            }
            None => DEFAULT_REPLICATES,
        };
        if nb * (replicates + 1) > MAX_CELLS {
            return plan_err!(
                "{func}: argument n_bins must keep n_bins · (replicates + 1) at most {MAX_CELLS}, \
got {m} with {replicates} replicates"
            );
        }
        Ok(BootKernel {
            func,
            kind: self.kind,
            bins,
            nb,
            replicates,
            level,
            salts: (0..replicates as u64).map(splitmix64).collect(),
            sums: vec![],
            groups: 0,
            pending: Pending::default(),
        })
    }
}

/// The struct the functions return: `{ece, lower, upper}` or `{diff, lower, upper}`.
fn value_fields(kind: BootstrapKind) -> Fields {
    Fields::from(vec![
        Field::new(kind.value_name(), DataType::Float64, true),
        Field::new("lower", DataType::Float64, true),
        Field::new("upper", DataType::Float64, true),
    ])
}

/// Whether `t` can be a resampling key: an integer or a string.
fn key_type_ok(t: &DataType) -> bool {
    t.is_integer() || matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
}

kernel_aggregate!(BootstrapEce, false);

impl AggregateUDFImpl for BootstrapEce {
    kernel_udaf_common!();

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        let shape = self.shape();
        let types = shape.coerce(arg_types)?;
        let key = &types[shape.required.len() - 1];
        if !key_type_ok(key) && !key.is_null() {
            return plan_err!(
                "{}: argument key must be an integer or string column, got type {key}; the \
signature is {}",
                shape.name,
                shape.usage()
            );
        }
        Ok(DataType::Struct(value_fields(self.kind)))
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(vec![Arc::new(Field::new(
            format_state_name(args.name, "sums"),
            f64_list_type(),
            true,
        ))])
    }

    fn documentation(&self) -> Option<&Documentation> {
        static DOCS: [OnceLock<Documentation>; 2] = [const { OnceLock::new() }; 2];
        Some(DOCS[self.kind as usize].get_or_init(|| documentation(self.kind)))
    }
}

/// The additive constant of SplitMix64 (⌊2^64/φ⌋, odd).
const GOLDEN_GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// SplitMix64 (Steele, Lea & Flood 2014) as one function of its state: the output of the
/// generator whose state is `x` before the step.
#[inline(always)]
pub fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(GOLDEN_GAMMA);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// FNV-1a 64 of a string's UTF-8 bytes: how a string key becomes a number.
#[inline]
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xCBF2_9CE4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01B3)
    })
}

/// The nearest double to e^-1, written out so the rule does not depend on a libm's `exp`.
const E_INV: f64 = 0.36787944117144233;

/// The Poisson(1) CDF F(0..=20), each `F(j) = F(j−1) + e^-1/j!` with the term computed as
/// `term(j) = term(j−1) / j` in f64, from `term(0) = F(0) = e^-1`.
fn poisson_cdf() -> &'static [f64; 21] {
    static CDF: OnceLock<[f64; 21]> = OnceLock::new();
    CDF.get_or_init(|| {
        let mut cdf = [0.0; 21];
        let (mut term, mut sum) = (E_INV, E_INV);
        cdf[0] = sum;
        for (j, c) in cdf.iter_mut().enumerate().skip(1) {
            term /= j as f64;
            sum += term;
            *c = sum;
        }
        cdf
    })
}

/// The Poisson(1) count of a hash `h`: with `u = (h >> 11) · 2^-53`, the number of
/// F(0..=20) at most u (inversion: the smallest k with u < F(k)).
#[inline(always)]
fn poisson_of(h: u64, cdf: &[f64; 21]) -> u32 {
    let u = (h >> 11) as f64 * (1.0 / (1u64 << 53) as f64);
    if u < cdf[0] {
        return 0;
    }
    cdf.iter().take_while(|&&f| f <= u).count() as u32
}

/// Replicate b's weight of a row whose key's number is `x` (the key as a 64-bit two's
/// complement integer, or FNV-1a 64 of a string): `Poisson(1)` by inversion from the uniform
/// of `splitmix64(splitmix64(x) ^ splitmix64(b))`.
pub fn replicate_weight(x: u64, b: u64) -> u32 {
    poisson_of(splitmix64(splitmix64(x) ^ splitmix64(b)), poisson_cdf())
}

/// The key column's 64-bit numbers, one per row (any value for a NULL key, which is skipped).
fn key_numbers(func: &str, a: &ArrayRef) -> Result<Vec<u64>> {
    macro_rules! ints {
        ($t:ty) => {
            a.as_primitive::<$t>()
                .values()
                .iter()
                .map(|&v| v as i64 as u64)
                .collect()
        };
    }
    Ok(match a.data_type() {
        DataType::Int8 => ints!(Int8Type),
        DataType::Int16 => ints!(Int16Type),
        DataType::Int32 => ints!(Int32Type),
        DataType::Int64 => ints!(Int64Type),
        DataType::UInt8 => ints!(UInt8Type),
        DataType::UInt16 => ints!(UInt16Type),
        DataType::UInt32 => ints!(UInt32Type),
        DataType::UInt64 => a.as_primitive::<UInt64Type>().values().to_vec(),
        DataType::Utf8 => a
            .as_string::<i32>()
            .iter()
            .map(|s| fnv1a64(s.unwrap_or("").as_bytes()))
            .collect(),
        DataType::LargeUtf8 => a
            .as_string::<i64>()
            .iter()
            .map(|s| fnv1a64(s.unwrap_or("").as_bytes()))
            .collect(),
        DataType::Utf8View => a
            .as_string_view()
            .iter()
            .map(|s| fnv1a64(s.unwrap_or("").as_bytes()))
            .collect(),
        DataType::Null => vec![0; a.len()],
        t => {
            return exec_err!(
                "{func}: argument key must be an integer or string column, got type {t}"
            )
        }
    })
}

/// Entries [`Pending`] holds before they are spread over the replicates: as many as a map of
/// 2^18 slots holds at its load factor of 7/8 (about 15 MB), so it never grows past that.
const PENDING_CAP: usize = (1 << 18) / 8 * 7;

/// Rows not yet spread over the replicates, summed per (group, model, key, bin); each entry
/// remembers when it was first met, so that the replicates' sums are added in an order that
/// depends on the rows only.
#[derive(Debug, Default)]
struct Pending {
    /// (group, key number, model · 2^31 + bin; bins number at most [`MAX_CELLS`]) → (when
    /// first met, [count, Σp, Σy]): one probe a row finds the sums it adds to.
    sums: HashMap<(usize, u64, u32), (usize, [f64; 3])>,
    /// The next entry's "when first met": a count, so entries never share one.
    next: usize,
}

/// One (group, model, key, bin)'s rows: their count, Σp and Σy.
#[derive(Debug, Clone, Copy)]
struct PendingEntry {
    group: usize,
    model: usize,
    bin: usize,
    key: u64,
    sums: [f64; 3],
}

impl Pending {
    /// Adds a row of `group` with `key` that `model` puts in `bin`, with its p and y.
    #[inline]
    fn add(&mut self, group: usize, model: usize, bin: usize, key: u64, p: f64, y: f64) {
        let next = &mut self.next;
        let cell = ((model as u32) << 31) | bin as u32;
        let (_, s) = self.sums.entry((group, key, cell)).or_insert_with(|| {
            *next += 1;
            (*next, [0.0; 3])
        });
        s[0] += 1.0;
        s[1] += p;
        s[2] += y;
    }

    fn len(&self) -> usize {
        self.sums.len()
    }

    /// The entries in the order they were first met.
    fn entries(&self) -> Vec<PendingEntry> {
        let mut out: Vec<(usize, PendingEntry)> = self
            .sums
            .iter()
            .map(|(&(group, key, cell), &(first, sums))| {
                let (model, bin) = ((cell >> 31) as usize, (cell & 0x7FFF_FFFF) as usize);
                let e = PendingEntry {
                    group,
                    model,
                    bin,
                    key,
                    sums,
                };
                (first, e)
            })
            .collect();
        out.sort_unstable_by_key(|(first, _)| *first);
        out.into_iter().map(|(_, e)| e).collect()
    }

    fn clear(&mut self) {
        self.sums.clear();
        self.next = 0;
    }

    /// Forgets the entries of groups `0..n` (emitted and drained: their sums are gone) and
    /// numbers the others' groups from 0 again.
    fn drop_groups(&mut self, n: usize) {
        self.sums = std::mem::take(&mut self.sums)
            .into_iter()
            .filter(|((group, _, _), _)| *group >= n)
            .map(|((group, key, cell), v)| ((group - n, key, cell), v))
            .collect();
    }

    fn bytes(&self) -> usize {
        self.sums.allocation_size()
    }
}

/// The kernel: per group, per model, per replicate (0: the point estimate, weight 1; 1..=B:
/// the bootstrap replicates), per bin: Σk, Σk·p, Σk·y; the replicates' share of the rows in
/// `pending` is not in `sums` yet.
#[derive(Debug)]
struct BootKernel {
    func: &'static str,
    kind: BootstrapKind,
    bins: FixedBins,
    /// Bins per model (n_bins, or one more for the rules that give p = 1.0 its own bin).
    nb: usize,
    replicates: usize,
    level: f64,
    /// `splitmix64(b)` for every replicate b.
    salts: Vec<u64>,
    sums: Vec<f64>,
    groups: usize,
    pending: Pending,
}

impl BootKernel {
    /// Sums per group.
    fn width(&self) -> usize {
        self.kind.models() * (self.replicates + 1) * self.nb * 3
    }

    /// Adds the pending entries of groups `range` to `sums`, which holds those groups' sums:
    /// each entry's (n, Σp, Σy) times its key's weight in each replicate.
    fn spread(&self, range: Range<usize>, sums: &mut [f64]) {
        let w = self.width();
        let cdf = poisson_cdf();
        for e in self.pending.entries() {
            if !range.contains(&e.group) {
                continue;
            }
            let base = (e.group - range.start) * w + e.bin * 3;
            let seed = splitmix64(e.key);
            for (r, &salt) in self.salts.iter().enumerate() {
                let k = poisson_of(splitmix64(seed ^ salt), cdf);
                if k == 0 {
                    continue;
                }
                let k = f64::from(k);
                let at = base + self.slot(e.model, 1 + r);
                let s = &mut sums[at..at + 3];
                s[0] += k * e.sums[0];
                s[1] += k * e.sums[1];
                s[2] += k * e.sums[2];
            }
        }
    }

    /// Spreads every pending entry into `sums` and empties `pending`.
    fn flush(&mut self) {
        if self.pending.len() == 0 {
            return;
        }
        let mut sums = std::mem::take(&mut self.sums);
        self.spread(0..self.groups, &mut sums);
        self.sums = sums;
        self.pending.clear();
    }

    /// The offset of (model, replicate slot) in a group's sums.
    fn slot(&self, model: usize, r: usize) -> usize {
        (model * (self.replicates + 1) + r) * self.nb * 3
    }

    /// The ECE of a block of `nb` bins' sums, as `ece` computes it from its bins; None when
    /// the block has no weight.
    fn ece_of(&self, block: &[f64]) -> Option<f64> {
        let n: f64 = block.chunks_exact(3).map(|s| s[0]).sum();
        (n > 0.0).then(|| {
            block
                .chunks_exact(3)
                .map(|s| (s[2] - s[1]).abs())
                .sum::<f64>()
                / n
        })
    }

    fn value_of(&self, g: usize) -> Option<[Option<f64>; 3]> {
        let w = self.width();
        let sums = &self.sums[g * w..(g + 1) * w];
        let block = |model: usize, r: usize| {
            let at = self.slot(model, r);
            &sums[at..at + self.nb * 3]
        };
        let stat = |r: usize| -> Option<f64> {
            match self.kind {
                BootstrapKind::Ece => self.ece_of(block(0, r)),
                BootstrapKind::EceDiff => {
                    Some(self.ece_of(block(0, r))? - self.ece_of(block(1, r))?)
                }
            }
        };
        let point = stat(0)?;
        let mut reps: Vec<f64> = (1..=self.replicates).filter_map(stat).collect();
        reps.sort_by(f64::total_cmp);
        let q = |prob: f64| type7_quantile(&reps, prob);
        Some([
            Some(point),
            q((1.0 - self.level) / 2.0),
            q((1.0 + self.level) / 2.0),
        ])
    }
}

/// The type-7 (numpy's default `'linear'`) quantile of ascending values; None when empty.
pub(crate) fn type7_quantile(sorted: &[f64], q: f64) -> Option<f64> {
    let n = sorted.len();
    if n == 0 {
        return None;
    }
    let h = (n - 1) as f64 * q;
    let lo = h.floor() as usize;
    let hi = (lo + 1).min(n - 1);
    let t = h - lo as f64;
    let (a, b) = (sorted[lo], sorted[hi]);
    Some(a + (b - a) * t)
}

impl Kernel for BootKernel {
    fn empty(&self) -> Result<Self> {
        Ok(Self {
            func: self.func,
            kind: self.kind,
            bins: self.bins.clone(),
            nb: self.nb,
            replicates: self.replicates,
            level: self.level,
            salts: self.salts.clone(),
            sums: vec![],
            groups: 0,
            pending: Pending::default(),
        })
    }

    fn resize(&mut self, n: usize) {
        if n > self.groups {
            self.sums.resize(n * self.width(), 0.0);
            self.groups = n;
        }
    }

    fn num_groups(&self) -> usize {
        self.groups
    }

    fn update(&mut self, values: &[ArrayRef], groups: &[usize], filter: Filter) -> Result<()> {
        let func = self.func;
        let models = self.kind.models();
        let (y_at, key_at) = (models, models + 1);
        let ps: Vec<&[f64]> = (0..models)
            .map(|j| &f64s(&values[j]).values()[..])
            .collect();
        let y = f64_labels(&values[y_at])?;
        let keys = key_numbers(func, &values[key_at])?;
        let data: Vec<&ArrayRef> = values[..=key_at].iter().collect();
        let mask = usable_rows(&data, filter);
        let (w, nb, reps) = (self.width(), self.nb, self.replicates);
        let names = ["p_a", "p_b"];
        let mut cells = [(0usize, 0.0f64); 2];
        for_each_row(y.len(), &mask, |i| {
            for (j, p) in ps.iter().enumerate() {
                let name = if models == 1 { "p" } else { names[j] };
                let pi = check_p(func, name, p[i])?;
                cells[j] = self.bins.bin(pi);
            }
            let yi = check_y(func, y[i])?;
            let base = groups[i] * w;
            for (j, &(b, pi)) in cells[..models].iter().enumerate() {
                let at = base + (j * (reps + 1)) * nb * 3 + b * 3;
                let s = &mut self.sums[at..at + 3];
                s[0] += 1.0;
                s[1] += pi;
                s[2] += yi;
                self.pending.add(groups[i], j, b, keys[i], pi, yi);
            }
            Ok(())
        })?;
        if self.pending.len() >= PENDING_CAP {
            self.flush();
        }
        Ok(())
    }

    fn merge(&mut self, states: &[ArrayRef], groups: &[usize]) -> Result<()> {
        let w = self.width();
        let (offsets, values) = list_parts(&states[0]);
        for (r, &g) in groups.iter().enumerate() {
            let (start, end) = (offsets[r] as usize, offsets[r + 1] as usize);
            if start == end {
                continue;
            }
            if end - start != w {
                return exec_err!(
                    "{}: a partial state has {} sums, expected {w} (a stored state edited by hand?)",
                    self.func,
                    end - start
                );
            }
            for (into, v) in self.sums[g * w..(g + 1) * w]
                .iter_mut()
                .zip(&values[start..end])
            {
                *into += v;
            }
        }
        Ok(())
    }

    fn state(&self, range: Range<usize>) -> Result<Vec<ArrayRef>> {
        let w = self.width();
        let mut sums = self.sums[range.start * w..range.end * w].to_vec();
        self.spread(range, &mut sums);
        Ok(vec![fixed_lists(sums, w)])
    }

    fn evaluate(&mut self, range: Range<usize>) -> Result<ArrayRef> {
        self.flush();
        let values: Vec<Option<[Option<f64>; 3]>> = range.map(|g| self.value_of(g)).collect();
        struct_column(&value_fields(self.kind), &values)
    }

    fn drain(&mut self, n: usize) {
        // The drained groups' pending rows were in the state or value just emitted; the
        // others' stay pending.
        let n = n.min(self.groups);
        self.pending.drop_groups(n);
        self.sums.drain(..n * self.width());
        self.groups -= n;
    }

    fn size(&self) -> usize {
        self.sums.capacity() * size_of::<f64>()
            + self.salts.capacity() * size_of::<u64>()
            + self.pending.bytes()
    }

    fn native_labels(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Float64Array;

    /// The published test vectors: FNV-1a 64 of "" and "a" (Fowler/Noll/Vo's page), and
    /// SplitMix64's first outputs from state 0 (Vigna's `splitmix64.c`).
    #[test]
    fn hashes_match_their_published_vectors() {
        assert_eq!(fnv1a64(b""), 0xcbf29ce484222325);
        assert_eq!(fnv1a64(b"a"), 0xaf63dc4c8601ec8c);
        assert_eq!(splitmix64(0), 0xe220a8397b1dcdaf);
        assert_eq!(splitmix64(GOLDEN_GAMMA), 0x6e789e6aa1b965f4);
    }

    /// The draws have Poisson(1)'s mean and P(0) = e^-1 (within 4 standard errors).
    #[test]
    fn weights_are_poisson_one() {
        let n = 200_000u64;
        let draws: Vec<u32> = (0..n).map(|i| replicate_weight(i, 7)).collect();
        let mean = draws.iter().map(|&k| f64::from(k)).sum::<f64>() / n as f64;
        let zeros = draws.iter().filter(|&&k| k == 0).count() as f64 / n as f64;
        let se = (1.0 / n as f64).sqrt();
        assert!((mean - 1.0).abs() <= 4.0 * se, "mean {mean}");
        assert!((zeros - E_INV).abs() <= 4.0 * (E_INV * (1.0 - E_INV) / n as f64).sqrt());
        let cdf = poisson_cdf();
        assert!(cdf.windows(2).all(|w| w[0] <= w[1]) && cdf[20] <= 1.0 + f64::EPSILON);
        assert_eq!(poisson_of(0, cdf), 0);
        assert!(poisson_of(u64::MAX, cdf) >= 10);
    }

    #[test]
    fn type7_matches_numpy() {
        // numpy.quantile([1, 2, 4, 8], [0, 0.25, 0.5, 0.9, 1]) = 1, 1.75, 3, 6.8, 8
        let v = [1.0, 2.0, 4.0, 8.0];
        let got: Vec<f64> = [0.0, 0.25, 0.5, 0.9, 1.0]
            .iter()
            .map(|&q| type7_quantile(&v, q).unwrap())
            .collect();
        let want = [1.0, 1.75, 3.0, 6.8, 8.0];
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() <= 1e-12, "{got:?}");
        }
        assert_eq!(type7_quantile(&[], 0.5), None);
    }

    use arrow::array::Int64Array;

    fn kernel(kind: BootstrapKind, replicates: usize) -> BootKernel {
        BootKernel {
            func: kind.shape().name,
            kind,
            bins: FixedBins::new(Strategy::Uniform, 15),
            nb: 15,
            replicates,
            level: 0.95,
            salts: (0..replicates as u64).map(splitmix64).collect(),
            sums: vec![],
            groups: 0,
            pending: Pending::default(),
        }
    }

    /// The uniform [0, 1) of counter `i` in stream `seed`.
    fn uniform(seed: u64, i: u64) -> f64 {
        (splitmix64(seed.wrapping_mul(0x1000_0000_01B3) ^ splitmix64(i)) >> 11) as f64
            * (1.0 / (1u64 << 53) as f64)
    }

    /// Feeds columns to group 0 of a fresh kernel and returns its [value, lower, upper].
    fn interval(k: &mut BootKernel, cols: Vec<ArrayRef>) -> [f64; 3] {
        k.resize(1);
        let n = cols[0].len();
        k.update(&cols, &vec![0; n], None).unwrap();
        read(k)
    }

    fn read(k: &mut BootKernel) -> [f64; 3] {
        let out = k.evaluate(0..1).unwrap();
        let s = out.as_struct();
        std::array::from_fn(|c| f64s(s.column(c)).value(0))
    }

    /// The coverage study of docs/SEMANTICS.md: 200 data sets of 4,000 rows, p uniform,
    /// y ~ Bernoulli(p^0.6), whose population ECE is 0.125 with any bins (the gap p^0.6 − p
    /// never changes sign, so it is ∫(p^0.6 − p) dp = 1/1.6 − 1/2); the 95% interval must
    /// cover it in 90–99% of them.
    #[test]
    fn covers_the_population_ece() {
        let (sets, rows) = (200u64, 4000u64);
        let population = 1.0 / 1.6 - 0.5;
        let mut covered = 0;
        for d in 0..sets {
            let p: Vec<f64> = (0..rows).map(|i| uniform(2 * d + 1, i)).collect();
            let y: Vec<f64> = (0..rows)
                .map(|i| f64::from(uniform(2 * d + 2, i) < p[i as usize].powf(0.6)))
                .collect();
            let keys: Vec<i64> = (0..rows as i64).map(|i| i + (d * rows) as i64).collect();
            let mut k = kernel(BootstrapKind::Ece, 200);
            let [_, lower, upper] = interval(
                &mut k,
                vec![
                    Arc::new(Float64Array::from(p)),
                    Arc::new(Float64Array::from(y)),
                    Arc::new(Int64Array::from(keys)),
                ],
            );
            covered += usize::from(lower <= population && population <= upper);
        }
        assert!(
            (180..=198).contains(&covered),
            "the 95% interval covered the population ECE in {covered} of {sets} data sets"
        );
    }

    /// A model against itself: exactly {0, 0, 0}; and any split into partial states merges
    /// to the one-pass interval.
    #[test]
    fn paired_self_is_zero_and_states_merge() {
        let n = 3000u64;
        let p: Vec<f64> = (0..n).map(|i| uniform(9, i)).collect();
        let y: Vec<f64> = (0..n)
            .map(|i| f64::from(uniform(10, i) < p[i as usize]))
            .collect();
        let keys: Vec<i64> = (0..n as i64).collect();
        let cols = |a: &[f64], b: &[f64], y: &[f64], k: &[i64]| -> Vec<ArrayRef> {
            vec![
                Arc::new(Float64Array::from(a.to_vec())),
                Arc::new(Float64Array::from(b.to_vec())),
                Arc::new(Float64Array::from(y.to_vec())),
                Arc::new(Int64Array::from(k.to_vec())),
            ]
        };
        let mut k = kernel(BootstrapKind::EceDiff, 100);
        assert_eq!(interval(&mut k, cols(&p, &p, &y, &keys)), [0.0, 0.0, 0.0]);

        let q: Vec<f64> = p.iter().map(|x| x * 0.9).collect();
        let mut one = kernel(BootstrapKind::EceDiff, 100);
        let want = interval(&mut one, cols(&p, &q, &y, &keys));
        let mut fin = kernel(BootstrapKind::EceDiff, 100);
        fin.resize(1);
        for (a, b) in [(0, 1000), (1000, 1001), (1001, 3000)] {
            let mut part = kernel(BootstrapKind::EceDiff, 100);
            interval(&mut part, cols(&p[a..b], &q[a..b], &y[a..b], &keys[a..b]));
            fin.merge(&part.state(0..1).unwrap(), &[0]).unwrap();
        }
        let got = read(&mut fin);
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() <= 1e-12, "{got:?} vs {want:?}");
        }
    }

    /// The rows' replicate sums, whether they wait in `pending` or were spread: the state
    /// of two groups (a model pair, keys shared by many rows and keys of one row, more rows
    /// than [`PENDING_CAP`] so that some were spread on the way), read before and after
    /// `evaluate` spread the rest, and of the second group after the first was emitted and
    /// drained, against the sums of the definition computed row by row here from
    /// [`replicate_weight`], to 1e-12 relative (sums in another order).
    #[test]
    fn pending_rows_give_the_row_by_row_sums() {
        let (n, reps) = (PENDING_CAP as u64 + 9_000, 3);
        let p: Vec<f64> = (0..n).map(|i| uniform(21, i)).collect();
        let q: Vec<f64> = p.iter().map(|x| x * 0.8).collect();
        let y: Vec<f64> = (0..n)
            .map(|i| f64::from(uniform(22, i) < p[i as usize]))
            .collect();
        let keys: Vec<i64> = (0..n as i64)
            .map(|i| if i % 3 == 0 { i % 41 } else { i })
            .collect();
        let groups: Vec<usize> = (0..n as usize).map(|i| (i / 7) % 2).collect();
        let k = kernel(BootstrapKind::EceDiff, reps);
        let w = k.width();
        let mut want = vec![0.0; 2 * w];
        for i in 0..n as usize {
            for (j, pi) in [p[i], q[i]].into_iter().enumerate() {
                let (b, pi) = k.bins.bin(pi);
                for r in 0..=reps {
                    let weight = match r {
                        0 => 1.0,
                        _ => f64::from(replicate_weight(keys[i] as u64, r as u64 - 1)),
                    };
                    let at = groups[i] * w + k.slot(j, r) + b * 3;
                    want[at] += weight;
                    want[at + 1] += weight * pi;
                    want[at + 2] += weight * y[i];
                }
            }
        }
        let n = n as usize;
        let fed = || {
            let mut k = kernel(BootstrapKind::EceDiff, reps);
            k.resize(2);
            for (a, b) in [(0, 5_000), (5_000, n - 3_000), (n - 3_000, n)] {
                let cols: Vec<ArrayRef> = vec![
                    Arc::new(Float64Array::from(p[a..b].to_vec())),
                    Arc::new(Float64Array::from(q[a..b].to_vec())),
                    Arc::new(Float64Array::from(y[a..b].to_vec())),
                    Arc::new(Int64Array::from(keys[a..b].to_vec())),
                ];
                k.update(&cols, &groups[a..b], None).unwrap();
            }
            k
        };
        let mut k = fed();
        assert!(k.pending.len() > 0 && k.pending.len() < PENDING_CAP);
        let close_to = |got: &[f64], want: &[f64], when: &str| {
            assert_eq!(got.len(), want.len());
            for (g, w) in got.iter().zip(want) {
                let close = (g - w).abs() <= 1e-12 * w.abs().max(1.0);
                assert!(close, "{when}: {g} vs {w}");
            }
        };
        let check = |k: &BootKernel, when: &str| {
            let state = k.state(0..2).unwrap();
            close_to(list_parts(&state[0]).1, &want, when);
        };
        check(&k, "pending");
        k.evaluate(0..2).unwrap();
        assert_eq!(k.pending.len(), 0);
        check(&k, "spread");
        // Group 0 emitted and drained: group 1's rows stay pending, now as group 0.
        let mut k = fed();
        k.take_state(0..1).unwrap();
        k.drain(1);
        assert!(k.pending.len() > 0);
        let state = k.state(0..1).unwrap();
        close_to(list_parts(&state[0]).1, &want[w..], "after the drain");
    }
}
