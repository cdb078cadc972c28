//! The binned calibration metrics: `ece`, `mce` [Kweon et al. eq. 5–6], `reliability`, `ace`
//! (adaptive calibration error, netcal) and `rmsce` (torchmetrics `norm='l2'`).
//!
//! All five share their binning ([`super::binning`]) and their state: per bin the row count,
//! Σw, Σw·p, Σw·y, Σw·(y − p) (kept apart so a nearly calibrated bin loses no digits to
//! cancellation) and Σw² (for the Kish effective size of `reliability`'s intervals).
//! Fixed-edge strategies keep O(n_bins) sums per group; data-dependent ones (`'quantile'`,
//! `'kumar'`) keep the rows (`crate::values`) and bin them when the group is finished.

use std::ops::Range;
use std::sync::{Arc, OnceLock};

use arrow::array::{
    ArrayRef, BooleanArray, Float64Array, Int32Array, Int64Array, ListArray, StructArray,
};
use arrow::buffer::{NullBuffer, OffsetBuffer};
use arrow::datatypes::{DataType, Field, FieldRef, Fields};
use datafusion_common::{exec_err, Result};
use datafusion_doc::DocSection;
use datafusion_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion_expr::{AggregateUDFImpl, Documentation, Signature};

use super::bin_sums::{Bin, BinStats, BinSums};
use super::binning::{uniform_bin, FixedBins, Strategy};
use super::quantile_bins::quantile_bins;
use crate::common::{
    all_probabilities, all_weights, args, check_p, check_y, f64_list_state_fields, f64s,
    fixed_lists, for_each_row, list_array, list_parts, literal, literal_checked, n_bins,
    usable_rows_pyw, weight_at, weight_col, Arg, CallShape,
};
use crate::kernel::Filter;
use crate::kernel::{kernel_aggregate, kernel_udaf_common, Kernel};
use crate::labels::{all_labels, f64_labels, with_labels, Label};
use crate::scalars::wilson;
use crate::stats::normal_quantile;
use crate::values::{self, ValueStore};

/// Default number of bins, as in Kweon et al. and Guo et al.
pub const DEFAULT_BINS: usize = 15;
/// Default confidence level of `reliability`'s intervals.
pub const DEFAULT_LEVEL: f64 = 0.95;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BinnedKind {
    Ece,
    Mce,
    Reliability,
    Ace,
    Rmsce,
}

impl BinnedKind {
    fn name(self) -> &'static str {
        match self {
            BinnedKind::Ece => "ece",
            BinnedKind::Mce => "mce",
            BinnedKind::Reliability => "reliability",
            BinnedKind::Ace => "ace",
            BinnedKind::Rmsce => "rmsce",
        }
    }

    pub(crate) fn default_strategy(self) -> Strategy {
        match self {
            BinnedKind::Ace => Strategy::Quantile,
            _ => Strategy::Uniform,
        }
    }
}

const OPTIONAL: &[Arg] = &[args::N_BINS, args::STRATEGY, args::W];
/// `ace` bins by quantile unless told otherwise: adaptive bins are what it measures.
const OPTIONAL_ACE: &[Arg] = &[args::N_BINS, args::STRATEGY.or("'quantile'"), args::W];
const OPTIONAL_RELIABILITY: &[Arg] = &[
    args::N_BINS,
    args::STRATEGY,
    args::W,
    Arg::lit_num("level").or("0.95"),
];

impl BinnedKind {
    /// This function's name and arguments.
    fn shape(self) -> CallShape {
        CallShape {
            name: self.name(),
            required: &[args::P, args::Y],
            optional: match self {
                BinnedKind::Reliability => OPTIONAL_RELIABILITY,
                BinnedKind::Ace => OPTIONAL_ACE,
                _ => OPTIONAL,
            },
        }
    }
}

pub(crate) const STRATEGY_DOC: &str = "The binning rule, a constant; each reproduces one tool's bins exactly, \
including where values on a bin edge go (docs/SEMANTICS.md#binning-strategies): \
`'uniform'` — bin `min(floor(p·M), M−1)`, i.e. `[k/M, (k+1)/M)` with the last bin closed; \
`'quantile'` — equal-mass bins, edges `numpy.percentile(p, linspace(0, 1, M+1)·100)` (weighted: \
`method='inverted_cdf'`), right-closed, = scikit-learn 1.9 `calibration_curve(strategy='quantile')`; \
`'sklearn'` — `numpy.linspace(0, 1, M+1)` edges, right-closed, = scikit-learn 1.9 `calibration_curve(strategy='uniform')`; \
`'netcal'` — netcal 1.4 `ECE(bins=M)`: p clipped to [ε, 1−ε], `linspace` edges, left-closed; \
`'torchmetrics'` — torchmetrics 1.9 `binary_calibration_error(n_bins=M)`: `torch.linspace` edges, left-closed, \
p = 1.0 in an (M+1)-th bin of its own; `'relplot'` — relplot 1.0 `binnedECE`: bin `int(p / (1/M))`, p = 1.0 in \
an extra bin for most M; `'kumar'` — uncertainty-calibration 0.1 `get_ece(num_bins=M)`: edges `k/M`, \
right-closed.";

fn documentation(kind: BinnedKind) -> Documentation {
    let (description, example) = match kind {
        BinnedKind::Ece => (
            "Expected calibration error (Kweon et al. eq. 5): `Σ_m |Σ_{i∈B_m} w_i (y_i − p_i)| / Σ w` over \
n_bins bins of the predicted probability, i.e. `Σ_m W_m/N · |frac_pos_m − mean_p_m|`. The `strategy` names the \
tool whose bins (and so whose number) it reproduces. Rows with a NULL `p`, `y` or `w` are skipped; NULL when no \
row is usable or the total weight is 0.",
            r#"```sql
> SELECT ece(p, y) AS ece FROM (VALUES (0.1, 0), (0.2, 0), (0.8, 1), (0.9, 0)) AS t(p, y);
+------+
| ece  |
+------+
| 0.35 |
+------+
```"#,
        ),
        BinnedKind::Mce => (
            "Maximum calibration error (Kweon et al. eq. 6): the largest `|Σ w (y − p)| / Σ w` over the \
non-empty bins (torchmetrics `norm='max'`). Binning as in `ece`. NULL when no row is usable.",
            r#"```sql
> SELECT mce(p, y) AS mce FROM (VALUES (0.1, 0), (0.2, 0), (0.8, 1), (0.9, 0)) AS t(p, y);
+-----+
| mce |
+-----+
| 0.9 |
+-----+
```"#,
        ),
        BinnedKind::Reliability => (
            "The reliability diagram as data: a list with one struct per bin, in bin order, \
`{bin, lower, upper, count, weight, mean_p, frac_pos, frac_pos_lower, frac_pos_upper}`. Every bin is listed; an \
empty bin has count 0 and NULL means. `lower`/`upper` are the bin's edges under the strategy's rule. \
`frac_pos_lower`/`frac_pos_upper` are the Wilson score interval at confidence `level` around `frac_pos`, with n \
the bin's row count (weighted: the Kish effective size `(Σw)²/Σw²`). Use `unnest` to get one row per bin.",
            r#"```sql
> SELECT r['bin'] AS bin, r['count'] AS n, r['mean_p'] AS mean_p, r['frac_pos'] AS frac_pos
  FROM (SELECT unnest(reliability(p, y, 2)) AS r FROM (VALUES (0.25, 0), (0.75, 1), (0.75, 0)) AS t(p, y));
+-----+---+--------+----------+
| bin | n | mean_p | frac_pos |
+-----+---+--------+----------+
| 0   | 1 | 0.25   | 0.0      |
| 1   | 2 | 0.75   | 0.5      |
+-----+---+--------+----------+
```"#,
        ),
        BinnedKind::Ace => (
            "Adaptive calibration error (Nixon et al. 2019): the mean over non-empty bins of \
`|frac_pos − mean_p|`, every bin counting the same whatever its size. Default 15 equal-mass (`'quantile'`, \
scikit-learn's percentile edges) bins; `ace(p, y, M, 'netcal')` is exactly netcal 1.4's `ACE(bins=M)`, which bins \
by equal width. NULL when no row is usable.",
            r#"```sql
> SELECT ace(p, y, 2) AS ace FROM (VALUES (0.1, 0), (0.2, 0), (0.8, 1), (0.9, 0)) AS t(p, y);
+------+
| ace  |
+------+
| 0.25 |
+------+
```"#,
        ),
        BinnedKind::Rmsce => (
            "Root-mean-square calibration error: `sqrt(Σ_m W_m/N · (frac_pos_m − mean_p_m)²)` \
(torchmetrics `binary_calibration_error(norm='l2')`). Binning as in `ece`. NULL when no row is usable.",
            r#"```sql
> SELECT round(rmsce(p, y, 2), 6) AS rmsce FROM (VALUES (0.1, 0), (0.3, 0), (0.8, 1), (0.6, 1)) AS t(p, y);
+----------+
| rmsce    |
+----------+
| 0.254951 |
+----------+
```"#,
        ),
    };
    let default_strategy = match kind.default_strategy() {
        Strategy::Quantile => "Default `'quantile'`.",
        _ => "Default `'uniform'`.",
    };
    let mut b = Documentation::builder(
        DocSection {
            include: true,
            label: "Calibration Metrics",
            description: None,
        },
        description,
        kind.shape().usage(),
    )
    .with_sql_example(example)
    .with_argument("p", "Predicted probability in [0, 1].")
    .with_argument("y", "Observed label: Boolean or a number 0/1.")
    .with_argument(
        "n_bins",
        "Number of bins, an integer constant in [1, 10000]. Default 15.",
    )
    .with_argument("strategy", format!("{STRATEGY_DOC} {default_strategy}"))
    .with_argument("w", "Optional row weight, finite and >= 0. Default 1.");
    if kind == BinnedKind::Reliability {
        b = b.with_argument(
            "level",
            "Confidence level of the Wilson intervals, a constant in (0, 1). Default 0.95; usually \
given by name: `reliability(p, y, level => 0.9)`.",
        );
    }
    b.build()
}

/// `ece`, `mce`, `reliability`, `ace` or `rmsce`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Binned {
    kind: BinnedKind,
    signature: Signature,
}

crate::kernel::signature_from_shape!(Binned, kind: BinnedKind);

impl Binned {
    fn kernel(&self, args: &AccumulatorArgs) -> Result<BinnedKernel> {
        BinnedKernel::new(self.kind.name(), self.kind, args)
    }
}

impl BinnedKernel {
    /// The kernel of `kind` for a call of `func` whose arguments after the first two are
    /// `n_bins`, `strategy`, `w` and (for `Reliability`) `level`, as `ece`'s are: the first
    /// two reach [`Kernel::update`] as p and y.
    pub(crate) fn new(
        func: &'static str,
        kind: BinnedKind,
        args: &AccumulatorArgs,
    ) -> Result<Self> {
        let m = match args.exprs.get(2) {
            Some(e) => n_bins(func, e)?,
            None => DEFAULT_BINS,
        };
        let strategy = match args.exprs.get(3) {
            None => kind.default_strategy(),
            Some(e) => Strategy::parse(func, &literal(func, "strategy", e)?)?,
        };
        let w_col = weight_col(args.exprs, 4);
        let level = match args.exprs.get(5) {
            Some(e) => literal_checked(func, "level", e, "in (0, 1)", |x| x > 0.0 && x < 1.0)?,
            None => DEFAULT_LEVEL,
        };
        let fixed = (!strategy.data_dependent()).then(|| FixedBins::new(strategy, m));
        let m = fixed.as_ref().map_or(m, FixedBins::n);
        Ok(BinnedKernel {
            func,
            kind,
            m,
            strategy,
            fixed,
            z: normal_quantile(1.0 - (1.0 - level) / 2.0),
            w_col,
            sums: BinSums::new(m, w_col.is_some()),
            values: ValueStore::new(func, 0, 1, w_col),
        })
    }
}

/// The struct type of one `reliability` bin.
pub fn reliability_fields() -> Fields {
    Fields::from(vec![
        Field::new("bin", DataType::Int32, false),
        Field::new("lower", DataType::Float64, true),
        Field::new("upper", DataType::Float64, true),
        Field::new("count", DataType::Int64, false),
        Field::new("weight", DataType::Float64, false),
        Field::new("mean_p", DataType::Float64, true),
        Field::new("frac_pos", DataType::Float64, true),
        Field::new("frac_pos_lower", DataType::Float64, true),
        Field::new("frac_pos_upper", DataType::Float64, true),
    ])
}

/// The type `reliability` returns: a list of [`reliability_fields`] structs.
pub(crate) fn reliability_type() -> DataType {
    DataType::List(reliability_item())
}

fn reliability_item() -> FieldRef {
    Arc::new(Field::new_list_field(
        DataType::Struct(reliability_fields()),
        true,
    ))
}

/// The state fields: six per-bin sum lists (fixed edges), then the four row lists of
/// [`ValueStore`] (data-dependent edges); the unused half holds empty lists.
const BIN_FIELDS: &[&str] = &[
    "bin_count",
    "bin_weight",
    "bin_wp",
    "bin_wy",
    "bin_wd",
    "bin_ww",
];

/// The state fields of [`BinnedKernel`] in an aggregate named `name`.
pub(crate) fn state_fields(name: &str) -> Vec<FieldRef> {
    let mut fields = f64_list_state_fields(name, BIN_FIELDS);
    fields.extend(values::state_fields(name));
    fields
}

kernel_aggregate!(Binned, true);

impl AggregateUDFImpl for Binned {
    kernel_udaf_common!();

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.shape().coerce(arg_types)?;
        Ok(match self.kind {
            BinnedKind::Reliability => reliability_type(),
            _ => DataType::Float64,
        })
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(state_fields(args.name))
    }

    fn documentation(&self) -> Option<&Documentation> {
        static DOCS: [OnceLock<Documentation>; 5] = [const { OnceLock::new() }; 5];
        Some(DOCS[self.kind as usize].get_or_init(|| documentation(self.kind)))
    }
}

/// The state and arithmetic of the binned metrics, over p and y (the top-label metrics hand it
/// their confidence and correctness as p and y: `super::top_label`).
#[derive(Debug)]
pub(crate) struct BinnedKernel {
    func: &'static str,
    kind: BinnedKind,
    /// Bins per group: `n_bins`, or one more for the rules that give p = 1.0 its own bin.
    m: usize,
    strategy: Strategy,
    /// The rule of a fixed-edge strategy; None for data-dependent ones.
    fixed: Option<FixedBins>,
    /// `reliability`'s Wilson z for its `level`.
    z: f64,
    w_col: Option<usize>,
    /// Fixed edges: `m` bins per group.
    sums: BinSums,
    /// Data-dependent edges: the rows.
    values: ValueStore,
}

impl BinnedKernel {
    fn update_fixed(
        &mut self,
        values: &[ArrayRef],
        groups: &[usize],
        filter: Option<&BooleanArray>,
    ) -> Result<()> {
        // Borrowed out of `self` for the batch (no copy of its edges per batch), put back after.
        let fixed = self.fixed.take().expect("fixed-edge strategy");
        // One copy of the loops per rule, so the uniform rule stays a multiply and a cast.
        let result = match fixed.strategy() {
            Strategy::Uniform => {
                let (mf, top) = (fixed.n() as f64, (fixed.n() - 1) as f64);
                self.update_with(values, groups, filter, move |p| {
                    (uniform_bin(p, mf, top), p)
                })
            }
            _ => self.update_with(values, groups, filter, |p| fixed.bin(p)),
        };
        self.fixed = Some(fixed);
        result
    }

    fn update_with(
        &mut self,
        values: &[ArrayRef],
        groups: &[usize],
        filter: Option<&BooleanArray>,
        bin: impl Fn(f64) -> (usize, f64),
    ) -> Result<()> {
        let func = self.func;
        let p = f64s(&values[0]).values();
        let w: Option<&[f64]> = self.w_col.map(|c| &f64s(&values[c]).values()[..]);
        let mask = usable_rows_pyw(values, (0, 1), self.w_col, filter);
        // Without GROUP BY every row goes to group 0: skip reading the group indices.
        let one_group = self.sums.num_groups() == 1;
        let sums = &mut self.sums;
        sums.reserve_rows(p.len());
        // The common case: no NULLs, no filter, every row good. Labels as they are stored.
        if mask.is_none()
            && with_labels!(&values[1], |y| {
                add_good_rows(sums, &bin, one_group, groups, p, y, w)
            }) == Some(true)
        {
            return Ok(());
        }
        let y = f64_labels(&values[1])?;
        let mut add_row = |i: usize, pi: f64, yi: f64, wi: f64| {
            let g = if one_group { 0 } else { groups[i] };
            let (b, pi) = bin(pi);
            sums.add_row(g, b, pi, yi, wi);
        };
        for_each_row(p.len(), &mask, |i| {
            let pi = check_p(func, "p", p[i])?;
            let yi = check_y(func, y[i])?;
            let wi = weight_at(func, w, i)?;
            add_row(i, pi, yi, wi);
            Ok(())
        })
    }

    /// The bins of group `g`, in bin order.
    fn group_bins(&mut self, g: usize) -> Vec<Bin> {
        let m = self.m;
        match &self.fixed {
            Some(fixed) => (0..m)
                .map(|k| {
                    let (lower, upper) = fixed.edges(k);
                    Bin {
                        stats: self.sums.stats(g, k),
                        lower: Some(lower),
                        upper: Some(upper),
                    }
                })
                .collect(),
            None => quantile_bins(&mut self.values.groups[g], m),
        }
    }
}

/// Adds a batch's rows (no NULLs, no filter) when every one is good — p in [0, 1], y 0 or 1,
/// w finite and ≥ 0 — and returns true; false, with nothing added, when one is not (the
/// checked path then finds it and names it). The unweighted one-group case checks the rows
/// as it bins them instead of in passes of their own.
fn add_good_rows<Y: Label>(
    sums: &mut BinSums,
    bin: &impl Fn(f64) -> (usize, f64),
    one_group: bool,
    groups: &[usize],
    p: &[f64],
    y: &[Y],
    w: Option<&[f64]>,
) -> bool {
    if one_group && w.is_none() && sums.try_add_unweighted_one_group(bin, p, y) {
        return true;
    }
    if !(all_probabilities(p) && all_labels(y) && w.is_none_or(all_weights)) {
        return false;
    }
    if one_group {
        // Weighted, or more than 256 bins.
        sums.add_rows_one_group(bin, p, y, w);
    } else {
        sums.add_rows_grouped(bin, groups, p, y, w);
    }
    true
}

fn total_weight(bins: &[Bin]) -> f64 {
    bins.iter().map(|b| b.stats.w).sum()
}

/// The non-empty bins' `|frac_pos − mean_p|`.
fn gaps(bins: &[Bin]) -> impl Iterator<Item = f64> + '_ {
    bins.iter()
        .filter(|b| b.stats.w > 0.0)
        .map(|b| b.stats.wd.abs() / b.stats.w)
}

fn ece_of(bins: &[Bin]) -> Option<f64> {
    let n = total_weight(bins);
    (n > 0.0).then(|| bins.iter().map(|b| b.stats.wd.abs()).sum::<f64>() / n)
}

fn mce_of(bins: &[Bin]) -> Option<f64> {
    gaps(bins).reduce(f64::max)
}

fn ace_of(bins: &[Bin]) -> Option<f64> {
    let (sum, k) = gaps(bins).fold((0.0, 0usize), |(s, k), g| (s + g, k + 1));
    (k > 0).then(|| sum / k as f64)
}

fn rmsce_of(bins: &[Bin]) -> Option<f64> {
    let n = total_weight(bins);
    (n > 0.0).then(|| {
        let s: f64 = bins
            .iter()
            .filter(|b| b.stats.w > 0.0)
            .map(|b| b.stats.wd * b.stats.wd / b.stats.w)
            .sum();
        (s / n).sqrt()
    })
}

/// A list of reliability structs, one list per group (NULL for a group with no rows).
fn reliability_array(groups: Vec<Vec<Bin>>, z: f64) -> Result<ArrayRef> {
    let mut valid = Vec::with_capacity(groups.len());
    let mut lens = Vec::with_capacity(groups.len());
    let (mut bin, mut lower, mut upper, mut count) = (vec![], vec![], vec![], vec![]);
    let (mut weight, mut mean_p, mut frac_pos) = (vec![], vec![], vec![]);
    let (mut frac_lo, mut frac_hi) = (vec![], vec![]);
    for bins in &groups {
        // NULL like ece/mce when no row is usable or the total weight is 0.
        let has_rows = bins.iter().any(|b| b.stats.w > 0.0);
        valid.push(has_rows);
        if !has_rows {
            lens.push(0);
            continue;
        }
        lens.push(bins.len());
        for (k, b) in bins.iter().enumerate() {
            let s = &b.stats;
            bin.push(k as i32);
            lower.push(b.lower);
            upper.push(b.upper);
            count.push(s.count as i64);
            weight.push(s.w);
            let nonempty = s.w > 0.0;
            let rate = s.wy / s.w;
            mean_p.push(nonempty.then(|| s.wp / s.w));
            frac_pos.push(nonempty.then_some(rate));
            // Kish effective size; equal to the count when every weight is 1.
            let n_eff = s.w * s.w / s.ww;
            let interval = nonempty.then(|| wilson(rate.clamp(0.0, 1.0), n_eff, z));
            frac_lo.push(interval.map(|i| i.0));
            frac_hi.push(interval.map(|i| i.1));
        }
    }
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int32Array::from(bin)),
        Arc::new(Float64Array::from(lower)),
        Arc::new(Float64Array::from(upper)),
        Arc::new(Int64Array::from(count)),
        Arc::new(Float64Array::from(weight)),
        Arc::new(Float64Array::from(mean_p)),
        Arc::new(Float64Array::from(frac_pos)),
        Arc::new(Float64Array::from(frac_lo)),
        Arc::new(Float64Array::from(frac_hi)),
    ];
    let structs = StructArray::try_new(reliability_fields(), columns, None)?;
    Ok(Arc::new(ListArray::try_new(
        reliability_item(),
        OffsetBuffer::from_lengths(lens),
        Arc::new(structs),
        Some(NullBuffer::from(valid)),
    )?))
}

/// `n` empty lists (the unused half of the state).
fn empty_lists(n: usize) -> ArrayRef {
    list_array(
        OffsetBuffer::new_zeroed(n),
        Arc::new(Float64Array::from(Vec::<f64>::new())),
    )
}

impl Kernel for BinnedKernel {
    fn empty(&self) -> Result<Self> {
        Ok(Self {
            func: self.func,
            kind: self.kind,
            m: self.m,
            strategy: self.strategy,
            fixed: self.fixed.clone(),
            z: self.z,
            w_col: self.w_col,
            sums: self.sums.empty(),
            values: self.values.empty(),
        })
    }

    fn resize(&mut self, n: usize) {
        if self.fixed.is_some() {
            self.sums.resize(n);
        } else {
            self.values.resize(n)
        }
    }

    fn num_groups(&self) -> usize {
        if self.fixed.is_some() {
            self.sums.num_groups()
        } else {
            self.values.num_groups()
        }
    }

    fn update(&mut self, values: &[ArrayRef], groups: &[usize], filter: Filter) -> Result<()> {
        if self.fixed.is_some() {
            self.update_fixed(values, groups, filter)
        } else {
            self.values.update(values, groups, filter)
        }
    }

    fn check_stored(&self, states: &[ArrayRef]) -> Result<()> {
        // The rows' lists (read by the strategies whose edges depend on the rows).
        self.values.check_stored(&states[BinStats::LEN..])
    }

    fn merge(&mut self, states: &[ArrayRef], groups: &[usize]) -> Result<()> {
        if self.fixed.is_none() {
            return self.values.merge(&states[BinStats::LEN..], groups);
        }
        let m = self.m;
        let parts: Vec<(&[i32], &[f64])> = states[..BinStats::LEN].iter().map(list_parts).collect();
        for (r, &g) in groups.iter().enumerate() {
            let (start, end) = (parts[0].0[r] as usize, parts[0].0[r + 1] as usize);
            if end == start {
                continue;
            }
            if end - start != m || parts.iter().any(|(o, _)| o[r] != parts[0].0[r]) {
                return exec_err!(
                    "{}: a partial state has {} bins, expected {m} (a stored state edited by hand?)",
                    self.func,
                    end - start
                );
            }
            for b in 0..m {
                let state = BinStats::from_array(std::array::from_fn(|k| parts[k].1[start + b]));
                self.sums.merge_bin(g, b, &state);
            }
        }
        Ok(())
    }

    fn state(&self, range: Range<usize>) -> Result<Vec<ArrayRef>> {
        let n = range.len();
        Ok(if self.fixed.is_some() {
            let m = self.m;
            let bins: Vec<BinStats> = range
                .clone()
                .flat_map(|g| (0..m).map(move |b| (g, b)))
                .map(|(g, b)| self.sums.stats(g, b))
                .collect();
            let mut out: Vec<ArrayRef> = (0..BinStats::LEN)
                .map(|k| fixed_lists(bins.iter().map(|s| s.to_array()[k]).collect(), m))
                .collect();
            out.extend((0..4).map(|_| empty_lists(n)));
            out
        } else {
            let mut out: Vec<ArrayRef> = (0..BinStats::LEN).map(|_| empty_lists(n)).collect();
            out.extend(self.values.state(range));
            out
        })
    }

    fn take_state(&mut self, range: Range<usize>) -> Result<Vec<ArrayRef>> {
        if self.fixed.is_some() {
            return self.state(range);
        }
        let mut out: Vec<ArrayRef> = (0..BinStats::LEN)
            .map(|_| empty_lists(range.len()))
            .collect();
        out.extend(self.values.take_state(range));
        Ok(out)
    }

    fn evaluate(&mut self, range: Range<usize>) -> Result<ArrayRef> {
        let groups: Vec<Vec<Bin>> = range.map(|g| self.group_bins(g)).collect();
        let scalar = |f: fn(&[Bin]) -> Option<f64>| -> ArrayRef {
            Arc::new(groups.iter().map(|b| f(b)).collect::<Float64Array>())
        };
        Ok(match self.kind {
            BinnedKind::Ece => scalar(ece_of),
            BinnedKind::Mce => scalar(mce_of),
            BinnedKind::Ace => scalar(ace_of),
            BinnedKind::Rmsce => scalar(rmsce_of),
            BinnedKind::Reliability => reliability_array(groups, self.z)?,
        })
    }

    fn drain(&mut self, n: usize) {
        if self.fixed.is_some() {
            self.sums.drain(n);
        } else {
            self.values.drain(n)
        }
    }

    fn size(&self) -> usize {
        self.sums.size() + self.values.size()
    }

    fn native_labels(&self) -> bool {
        true
    }

    fn retractable(&self) -> bool {
        self.fixed.is_some()
    }
}
