//! `ece`, `mce` and `reliability`: the binned calibration metrics [Kweon et al. eq. 5–6].
//!
//! The three share their binning and their state: per bin the row count, Σw, Σw·p, Σw·y and
//! Σw·(y − p) (kept apart from the other two so a nearly calibrated bin loses no digits to
//! cancellation). `'uniform'` bins keep O(n_bins) state per group; `'quantile'` bins need the
//! rows themselves (see [`crate::values`]).

use std::ops::Range;
use std::sync::Arc;

use arrow::array::{
    ArrayRef, BooleanArray, Float64Array, Int32Array, Int64Array, ListArray, StructArray,
};
use arrow::buffer::{NullBuffer, OffsetBuffer};
use arrow::datatypes::{DataType, Field, FieldRef, Fields};
use datafusion_common::{internal_err, plan_err, Result};
use datafusion_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion_expr::utils::format_state_name;
use datafusion_expr::{AggregateUDFImpl, Documentation, Signature, Volatility};
use datafusion_macros::user_doc;

use crate::common::{
    all_labels, all_probabilities, all_weights, check_p, check_w, check_y, f64_list_type, f64s,
    fixed_lists, for_each_row, list_parts, literal, n_bins, usable_rows, Arg, CallShape,
};
use crate::kernel::{kernel_udaf_common, Kernel};
use crate::values::{sort_rows, ValueStore};

/// Default number of bins, as in Kweon et al. and Guo et al.
pub const DEFAULT_BINS: usize = 15;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BinnedKind {
    Ece,
    Mce,
    Reliability,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Strategy {
    Uniform,
    Quantile,
}

const fn shape(name: &'static str) -> CallShape {
    CallShape {
        name,
        required: &[Arg::Num("p"), Arg::Label("y")],
        optional: &[
            Arg::LitInt("n_bins"),
            Arg::LitStr("strategy"),
            Arg::Num("w"),
        ],
    }
}

#[user_doc(
    doc_section(label = "Calibration Metrics"),
    description = "Expected calibration error (Kweon et al. eq. 5): `Σ_m |Σ_{i∈B_m} w_i (y_i − p_i)| / Σ w` over \
n_bins bins of the predicted probability. `'uniform'` bins are `[k/M, (k+1)/M)` (the last one closed at 1); \
`'quantile'` bins hold equal numbers of rows (numpy `array_split` of the rows sorted by (p, y)), or equal weight \
when `w` is given. Rows with a NULL `p`, `y` or `w` are skipped; NULL when no row is usable or the total weight is 0.",
    syntax_example = "ece(p, y [, n_bins [, strategy [, w]]])",
    sql_example = r#"```sql
> SELECT ece(p, y) AS ece FROM (VALUES (0.1, 0), (0.2, 0), (0.8, 1), (0.9, 0)) AS t(p, y);
+------+
| ece  |
+------+
| 0.35 |
+------+
```"#,
    argument(name = "p", description = "Predicted probability in [0, 1]."),
    argument(name = "y", description = "Observed label: Boolean or a number 0/1."),
    argument(
        name = "n_bins",
        description = "Number of bins, an integer constant in [1, 10000]. Default 15."
    ),
    argument(
        name = "strategy",
        description = "`'uniform'` (default) or `'quantile'`, a constant."
    ),
    argument(
        name = "w",
        description = "Optional row weight, finite and >= 0. Default 1."
    )
)]
struct EceDoc;

#[user_doc(
    doc_section(label = "Calibration Metrics"),
    description = "Maximum calibration error (Kweon et al. eq. 6): the largest `|Σ w (y − p)| / Σ w` over the \
non-empty bins. Binning as in `ece`. NULL when no row is usable.",
    syntax_example = "mce(p, y [, n_bins [, strategy [, w]]])",
    sql_example = r#"```sql
> SELECT mce(p, y) AS mce FROM (VALUES (0.1, 0), (0.2, 0), (0.8, 1), (0.9, 0)) AS t(p, y);
+-----+
| mce |
+-----+
| 0.9 |
+-----+
```"#,
    argument(name = "p", description = "Predicted probability in [0, 1]."),
    argument(name = "y", description = "Observed label: Boolean or a number 0/1."),
    argument(
        name = "n_bins",
        description = "Number of bins, an integer constant in [1, 10000]. Default 15."
    ),
    argument(
        name = "strategy",
        description = "`'uniform'` (default) or `'quantile'`, a constant."
    ),
    argument(
        name = "w",
        description = "Optional row weight, finite and >= 0. Default 1."
    )
)]
struct MceDoc;

#[user_doc(
    doc_section(label = "Calibration Metrics"),
    description = "The reliability diagram as data: a list with one struct per bin, in bin order, \
`{bin, lower, upper, count, weight, mean_p, frac_pos}`. Every bin is listed; an empty bin has count 0 and NULL \
means. `'uniform'` bins report `lower = k/M`, `upper = (k+1)/M`; `'quantile'` bins the smallest and largest p in \
the bin. Use `unnest` to get one row per bin.",
    syntax_example = "reliability(p, y [, n_bins [, strategy [, w]]])",
    sql_example = r#"```sql
> SELECT r['bin'] AS bin, r['count'] AS n, r['mean_p'] AS mean_p, r['frac_pos'] AS frac_pos
  FROM (SELECT unnest(reliability(p, y, 2)) AS r FROM (VALUES (0.25, 0), (0.75, 1), (0.75, 0)) AS t(p, y));
+-----+---+--------+----------+
| bin | n | mean_p | frac_pos |
+-----+---+--------+----------+
| 0   | 1 | 0.25   | 0.0      |
| 1   | 2 | 0.75   | 0.5      |
+-----+---+--------+----------+
```"#,
    argument(name = "p", description = "Predicted probability in [0, 1]."),
    argument(name = "y", description = "Observed label: Boolean or a number 0/1."),
    argument(
        name = "n_bins",
        description = "Number of bins, an integer constant in [1, 10000]. Default 15."
    ),
    argument(
        name = "strategy",
        description = "`'uniform'` (default) or `'quantile'`, a constant."
    ),
    argument(
        name = "w",
        description = "Optional row weight, finite and >= 0. Default 1."
    )
)]
struct ReliabilityDoc;

/// `ece`, `mce` or `reliability`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Binned {
    kind: BinnedKind,
    signature: Signature,
}

impl Binned {
    pub fn new(kind: BinnedKind) -> Self {
        let mut f = Self {
            kind,
            signature: Signature::user_defined(Volatility::Immutable),
        };
        f.signature = f.shape().signature();
        f
    }

    fn shape(&self) -> CallShape {
        shape(self.name_str())
    }

    fn name_str(&self) -> &'static str {
        match self.kind {
            BinnedKind::Ece => "ece",
            BinnedKind::Mce => "mce",
            BinnedKind::Reliability => "reliability",
        }
    }

    fn kernel(&self, args: &AccumulatorArgs) -> Result<BinnedKernel> {
        let func = self.name_str();
        let m = match args.exprs.get(2) {
            Some(e) => n_bins(func, e)?,
            None => DEFAULT_BINS,
        };
        let strategy = match args.exprs.get(3) {
            None => Strategy::Uniform,
            Some(e) => {
                let v = literal(func, "strategy", e)?;
                match v.try_as_str().flatten() {
                    Some("uniform") => Strategy::Uniform,
                    Some("quantile") => Strategy::Quantile,
                    _ => {
                        return plan_err!(
                            "{func}: argument strategy must be 'uniform' or 'quantile', got {v}"
                        )
                    }
                }
            }
        };
        let w_col = (args.exprs.len() > 4).then_some(4);
        Ok(BinnedKernel {
            func,
            kind: self.kind,
            m,
            strategy,
            w_col,
            bins: vec![],
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
    ])
}

fn reliability_item() -> FieldRef {
    Arc::new(Field::new_list_field(
        DataType::Struct(reliability_fields()),
        true,
    ))
}

impl AggregateUDFImpl for Binned {
    kernel_udaf_common!();

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.shape().coerce(arg_types)?;
        Ok(match self.kind {
            BinnedKind::Ece | BinnedKind::Mce => DataType::Float64,
            BinnedKind::Reliability => DataType::List(reliability_item()),
        })
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok([
            "bin_count",
            "bin_weight",
            "bin_wp",
            "bin_wy",
            "bin_wd",
            "p",
            "y",
            "w",
        ]
        .iter()
        .map(|s| {
            Arc::new(Field::new(
                format_state_name(args.name, s),
                f64_list_type(),
                true,
            ))
        })
        .collect())
    }

    fn documentation(&self) -> Option<&Documentation> {
        match self.kind {
            BinnedKind::Ece => EceDoc.doc(),
            BinnedKind::Mce => MceDoc.doc(),
            BinnedKind::Reliability => ReliabilityDoc.doc(),
        }
    }
}

/// Per-bin sums: row count, Σw, Σw·p, Σw·y, Σw·(y − p).
type BinStats = [f64; 5];
const CNT: usize = 0;
const W: usize = 1;
const WP: usize = 2;
const WY: usize = 3;
const WD: usize = 4;

#[inline]
fn stats_of(p: f64, y: f64, w: f64) -> BinStats {
    [1.0, w, w * p, w * y, w * (y - p)]
}

#[inline]
fn add(into: &mut BinStats, s: &BinStats) {
    for k in 0..5 {
        into[k] += s[k];
    }
}

/// Adds checked rows to the `m = bins.len()` uniform bins of a single group. Consecutive
/// rows often land in the same bin, and each addition would wait for the previous one to
/// reach memory; so row i goes to copy i mod `LANES` of the bins, and the copies are summed
/// into `bins` at the end (one more rounding per bin and batch, well inside the 1e-12
/// relative the round-trip tests allow). With many bins collisions are rare and the copies
/// would cost more to clear than they save: past 256 bins rows go straight to `bins`.
fn add_rows_one_group(bins: &mut [BinStats], p: &[f64], y: &[f64], w: Option<&[f64]>) {
    const LANES: usize = 4;
    let (m, mf) = (bins.len(), bins.len() as f64);
    let mut lanes = vec![[0.0; 5]; LANES * m];
    let bin = |pi: f64| ((pi * mf) as usize).min(m - 1);
    for i in 0..p.len() {
        let wi = w.map_or(1.0, |w| w[i]);
        add(
            &mut lanes[i % LANES * m + bin(p[i])],
            &stats_of(p[i], y[i], wi),
        );
    }
    for (b, into) in bins.iter_mut().enumerate() {
        for k in 0..LANES {
            add(into, &lanes[k * m + b]);
        }
    }
}

/// One bin of a finished group, with the edges `reliability` reports.
struct Bin {
    stats: BinStats,
    lower: Option<f64>,
    upper: Option<f64>,
}

#[derive(Debug)]
struct BinnedKernel {
    func: &'static str,
    kind: BinnedKind,
    m: usize,
    strategy: Strategy,
    w_col: Option<usize>,
    /// `'uniform'`: `m` bins per group, group-major.
    bins: Vec<BinStats>,
    /// `'quantile'`: the rows.
    values: ValueStore,
}

impl BinnedKernel {
    fn update_uniform(
        &mut self,
        values: &[ArrayRef],
        groups: &[usize],
        filter: Option<&BooleanArray>,
    ) -> Result<()> {
        let func = self.func;
        let (m, mf) = (self.m, self.m as f64);
        let p = f64s(&values[0]).values();
        let y = f64s(&values[1]).values();
        let w = self.w_col.map(|c| f64s(&values[c]).values());
        let mut data = vec![&values[0], &values[1]];
        if let Some(c) = self.w_col {
            data.push(&values[c]);
        }
        let mask = usable_rows(&data, filter);
        // Without GROUP BY every row goes to group 0: skip reading the group indices.
        let one_group = self.bins.len() == m;
        let bins = &mut self.bins;
        let mut add_row = |i: usize, pi: f64, yi: f64, wi: f64| {
            let g = if one_group { 0 } else { groups[i] };
            let b = ((pi * mf) as usize).min(m - 1);
            add(&mut bins[g * m + b], &stats_of(pi, yi, wi));
        };
        let fast = mask.is_none()
            && all_probabilities(p)
            && all_labels(y)
            && w.is_none_or(|w| all_weights(w));
        if fast && one_group && m <= 256 {
            add_rows_one_group(bins, p, y, w.map(|w| &w[..]));
            return Ok(());
        }
        if fast {
            match w {
                None => (0..p.len()).for_each(|i| add_row(i, p[i], y[i], 1.0)),
                Some(w) => (0..p.len()).for_each(|i| add_row(i, p[i], y[i], w[i])),
            }
            return Ok(());
        }
        for_each_row(p.len(), &mask, |i| {
            let pi = check_p(func, "p", p[i])?;
            let yi = check_y(func, y[i])?;
            let wi = match w {
                Some(w) => check_w(func, w[i])?,
                None => 1.0,
            };
            add_row(i, pi, yi, wi);
            Ok(())
        })
    }

    /// The bins of group `g`, in bin order.
    fn group_bins(&mut self, g: usize) -> Vec<Bin> {
        let m = self.m;
        match self.strategy {
            Strategy::Uniform => self.bins[g * m..(g + 1) * m]
                .iter()
                .enumerate()
                .map(|(k, s)| Bin {
                    stats: *s,
                    lower: Some(k as f64 / m as f64),
                    upper: Some((k + 1) as f64 / m as f64),
                })
                .collect(),
            Strategy::Quantile => {
                let rows = &mut self.values.groups[g];
                quantile_bins(rows, m, self.w_col.is_some())
            }
        }
    }
}

/// Cuts rows into `m` quantile bins: sorted by (p, y, w), then numpy `array_split` sizes
/// (unweighted) or by cumulative weight (weighted); see docs/SEMANTICS.md.
fn quantile_bins(rows: &mut [[f64; 3]], m: usize, weighted: bool) -> Vec<Bin> {
    sort_rows(rows);
    let mut out: Vec<Bin> = (0..m)
        .map(|_| Bin {
            stats: [0.0; 5],
            lower: None,
            upper: None,
        })
        .collect();
    let n = rows.len();
    let (q, r) = (n / m, n % m);
    let total: f64 = if weighted {
        rows.iter().map(|r| r[2]).sum()
    } else {
        0.0
    };
    let mut before = 0.0;
    for (i, row) in rows.iter().enumerate() {
        let b = if weighted {
            let b = if total > 0.0 {
                ((m as f64 * before / total).floor() as usize).min(m - 1)
            } else {
                0
            };
            before += row[2];
            b
        } else if i < r * (q + 1) {
            i / (q + 1)
        } else {
            r + (i - r * (q + 1)) / q
        };
        let bin = &mut out[b];
        add(&mut bin.stats, &stats_of(row[0], row[1], row[2]));
        bin.lower = Some(bin.lower.map_or(row[0], |l| l.min(row[0])));
        bin.upper = Some(bin.upper.map_or(row[0], |u| u.max(row[0])));
    }
    out
}

fn ece_of(bins: &[Bin]) -> Option<f64> {
    let n: f64 = bins.iter().map(|b| b.stats[W]).sum();
    (n > 0.0).then(|| bins.iter().map(|b| b.stats[WD].abs()).sum::<f64>() / n)
}

fn mce_of(bins: &[Bin]) -> Option<f64> {
    bins.iter()
        .filter(|b| b.stats[W] > 0.0)
        .map(|b| b.stats[WD].abs() / b.stats[W])
        .reduce(f64::max)
}

/// A list of reliability structs, one list per group (NULL for a group with no rows).
fn reliability_array(groups: Vec<Vec<Bin>>) -> Result<ArrayRef> {
    let mut valid = Vec::with_capacity(groups.len());
    let mut lens = Vec::with_capacity(groups.len());
    let (mut bin, mut lower, mut upper, mut count) = (vec![], vec![], vec![], vec![]);
    let (mut weight, mut mean_p, mut frac_pos) = (vec![], vec![], vec![]);
    for bins in &groups {
        // NULL like ece/mce when no row is usable or the total weight is 0.
        let has_rows = bins.iter().any(|b| b.stats[W] > 0.0);
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
            count.push(s[CNT] as i64);
            weight.push(s[W]);
            let nonempty = s[W] > 0.0;
            mean_p.push(nonempty.then(|| s[WP] / s[W]));
            frac_pos.push(nonempty.then(|| s[WY] / s[W]));
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
    Arc::new(ListArray::new(
        Arc::new(Field::new_list_field(DataType::Float64, true)),
        OffsetBuffer::new_zeroed(n),
        Arc::new(Float64Array::from(Vec::<f64>::new())),
        None,
    ))
}

impl Kernel for BinnedKernel {
    fn empty(&self) -> Result<Self> {
        Ok(Self {
            func: self.func,
            kind: self.kind,
            m: self.m,
            strategy: self.strategy,
            w_col: self.w_col,
            bins: vec![],
            values: self.values.empty(),
        })
    }

    fn resize(&mut self, n: usize) {
        match self.strategy {
            Strategy::Uniform => {
                if self.bins.len() < n * self.m {
                    self.bins.resize(n * self.m, [0.0; 5]);
                }
            }
            Strategy::Quantile => self.values.resize(n),
        }
    }

    fn num_groups(&self) -> usize {
        match self.strategy {
            Strategy::Uniform => self.bins.len() / self.m,
            Strategy::Quantile => self.values.num_groups(),
        }
    }

    fn update(
        &mut self,
        values: &[ArrayRef],
        groups: &[usize],
        filter: Option<&BooleanArray>,
    ) -> Result<()> {
        match self.strategy {
            Strategy::Uniform => self.update_uniform(values, groups, filter),
            Strategy::Quantile => self.values.update(values, groups, filter),
        }
    }

    fn merge(&mut self, states: &[ArrayRef], groups: &[usize]) -> Result<()> {
        match self.strategy {
            Strategy::Uniform => {
                let m = self.m;
                let parts: Vec<(&[i32], &[f64])> = states[..5].iter().map(list_parts).collect();
                for (r, &g) in groups.iter().enumerate() {
                    let (start, end) = (parts[0].0[r] as usize, parts[0].0[r + 1] as usize);
                    if end == start {
                        continue;
                    }
                    if end - start != m || parts.iter().any(|(o, _)| o[r] != parts[0].0[r]) {
                        return internal_err!(
                            "{}: a partial state has {} bins, expected {m}",
                            self.func,
                            end - start
                        );
                    }
                    for b in 0..m {
                        let bin = &mut self.bins[g * m + b];
                        for (k, (_, v)) in parts.iter().enumerate() {
                            bin[k] += v[start + b];
                        }
                    }
                }
                Ok(())
            }
            Strategy::Quantile => self.values.merge(&states[5..8], groups),
        }
    }

    fn state(&self, range: Range<usize>) -> Result<Vec<ArrayRef>> {
        let n = range.len();
        Ok(match self.strategy {
            Strategy::Uniform => {
                let m = self.m;
                let bins = &self.bins[range.start * m..range.end * m];
                let mut out: Vec<ArrayRef> = (0..5)
                    .map(|k| fixed_lists(bins.iter().map(|s| s[k]).collect(), m))
                    .collect();
                out.extend((0..3).map(|_| empty_lists(n)));
                out
            }
            Strategy::Quantile => {
                let mut out: Vec<ArrayRef> = (0..5).map(|_| empty_lists(n)).collect();
                out.extend(self.values.state(range));
                out
            }
        })
    }

    fn evaluate(&mut self, range: Range<usize>) -> Result<ArrayRef> {
        let groups: Vec<Vec<Bin>> = range.map(|g| self.group_bins(g)).collect();
        Ok(match self.kind {
            BinnedKind::Ece => Arc::new(groups.iter().map(|b| ece_of(b)).collect::<Float64Array>()),
            BinnedKind::Mce => Arc::new(groups.iter().map(|b| mce_of(b)).collect::<Float64Array>()),
            BinnedKind::Reliability => reliability_array(groups)?,
        })
    }

    fn drain(&mut self, n: usize) {
        match self.strategy {
            Strategy::Uniform => {
                self.bins.drain(..n * self.m);
            }
            Strategy::Quantile => self.values.drain(n),
        }
    }

    fn size(&self) -> usize {
        self.bins.capacity() * size_of::<BinStats>() + self.values.size()
    }
}
