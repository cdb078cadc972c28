//! Calibrators fitted as aggregates: `fit_platt`, `fit_gaussian_calib`, `fit_gamma_calib`,
//! `fit_isotonic`, `fit_histogram`. Each returns the one model struct of [`crate::model`],
//! which `calibrate(score, model)` applies.
//!
//! ## Objective
//! Every row has a score s and a target t: the label y, or with a propensity the IPS
//! pseudo-label y/ω, ω = max(propensity, clip) (UERM, Kweon et al.). The parametric fits
//! minimise the mean of `softplus(f(s)) − t·f(s)`, which is the log loss `−[t ln σ(f) + (1−t)
//! ln(1−σ(f))]` (the loss of `logloss` / `ips_logloss`, without the clipping at machine
//! epsilon, which only matters where |f| > 36).
//!
//! ## State: exact points, then a fixed fine grid
//! Rows with the same score contribute the same way, so the state is one entry per distinct
//! score: Σ1 and Σt. Up to [`EXACT_CAP`] distinct scores per group this is exact. Beyond that
//! the state switches to a fixed grid of cells — 256 cells per power of two of |s| (relative
//! width 2⁻⁸) and 512 linear cells of width 2⁻²⁴ for |s| < 2⁻¹⁶ — keeping per cell Σ1, Σt
//! and the first two moments of the offset d = s − a from the cell's anchor a (its bound
//! nearer zero) under both weights. A cell enters the objective as the two-point rule m ± σ
//! that matches those moments, which is exact for the terms linear in t (f is quadratic in s
//! for Platt and Gaussian) and leaves an error of order max|softplus‴|·(f′·width)³ per row in
//! the softplus term (measured: at most 2e-12 relative on 100,000 distinct logits,
//! `tests/fit_grid.rs`; 1024 cells per power of two gave 1e-14 but put the cells out of the
//! L2 cache and made the 20M-row fit about 15% slower). The grid is fixed, so merging states
//! is exact and the result does not depend on partitioning. Cells live in blocks of 256
//! (12 KiB) allocated when first touched and found by direct indexing, so memory is bounded
//! by the powers of two the data spans, not by rows: scores in [−20, 20] touch at most 43
//! blocks, about 0.5 MiB per group. Isotonic and histogram fits in
//! grid mode use each cell's mean score.

use std::ops::Range;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, Float64Array, Int64Array, ListArray};
use arrow::buffer::OffsetBuffer;
use arrow::datatypes::{DataType, Field, FieldRef, Float64Type, Int64Type};
use datafusion_common::{exec_err, internal_err, Result};
use datafusion_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion_expr::utils::format_state_name;
use datafusion_expr::{AggregateUDFImpl, Documentation, Signature, Volatility};
use datafusion_macros::user_doc;
use hashbrown::{DefaultHashBuilder, HashTable};
use std::hash::BuildHasher;

use crate::common::{
    all_labels, check_propensity, check_y, f64_list_type, f64s, for_each_row, list_parts,
    literal_checked, n_bins, usable_rows, Arg, CallShape,
};
use crate::kernel::{kernel_aggregate, kernel_udaf_common, Kernel};
use crate::model::Model;
use crate::optim::{minimise, objective, Node};

/// Distinct scores kept exactly per group before switching to the fixed grid.
pub const EXACT_CAP: usize = 1 << 16;
/// Default number of bins of `fit_histogram`.
pub const DEFAULT_HISTOGRAM_BINS: usize = 15;
/// Default lower clip of propensities.
pub const DEFAULT_FIT_CLIP: f64 = 0.1;
/// Gamma calibration's shift lies this fraction of the score range below the smallest score.
pub const GAMMA_SHIFT_FRACTION: f64 = 1e-3;

/// Grid cells per power of two of |s|: 2^CELL_BITS.
const CELL_BITS: u32 = 8;
const BLOCK: usize = 1 << CELL_BITS;
/// Below this |s| the grid is linear: 2 blocks of `BLOCK` cells of width `LINEAR_WIDTH`.
const LINEAR_LIMIT: f64 = 1.0 / 65536.0; // 2^-16
const LINEAR_WIDTH: f64 = LINEAR_LIMIT / BLOCK as f64; // 2^-26
/// Block ids: sign × 2048 binary exponents, then the negative and positive linear blocks.
const LOG_IDS: u32 = 4096;
const N_IDS: usize = LOG_IDS as usize + 2;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FitMethod {
    Platt,
    Gaussian,
    Gamma,
    Isotonic,
    Histogram,
}

impl FitMethod {
    pub fn function_name(&self) -> &'static str {
        match self {
            FitMethod::Platt => "fit_platt",
            FitMethod::Gaussian => "fit_gaussian_calib",
            FitMethod::Gamma => "fit_gamma_calib",
            FitMethod::Isotonic => "fit_isotonic",
            FitMethod::Histogram => "fit_histogram",
        }
    }

    /// The `method` field of the model.
    pub fn model_name(&self) -> &'static str {
        match self {
            FitMethod::Platt => "platt",
            FitMethod::Gaussian => "gaussian",
            FitMethod::Gamma => "gamma",
            FitMethod::Isotonic => "isotonic",
            FitMethod::Histogram => "histogram",
        }
    }
}

const FIT_ARGS: &[Arg] = &[Arg::Num("score"), Arg::Label("y")];
const FIT_OPTIONAL: &[Arg] = &[Arg::Num("propensity"), Arg::LitNum("clip")];

#[user_doc(
    doc_section(label = "Calibrators"),
    description = "Fits Platt scaling `σ(b·s + c)` (Kweon et al. eq. 7) with b >= 0, by minimising the mean log loss \
— or, with `propensity`, the mean IPS log loss (UERM) with ω = max(propensity, clip). Returns a model struct for \
`calibrate(score, model)`.",
    syntax_example = "fit_platt(score, y [, propensity [, clip]])",
    sql_example = r#"```sql
> SELECT m['method'] AS method, m['converged'] AS converged, round(calibrate(0, m), 6) AS p0
  FROM (SELECT fit_platt(s, y) AS m FROM (VALUES (-2.0, 0), (-1.0, 0), (-1.0, 1), (0.0, 0), (0.0, 1), (1.0, 1), (1.0, 0), (2.0, 1)) AS t(s, y));
+--------+-----------+-----+
| method | converged | p0  |
+--------+-----------+-----+
| platt  | true      | 0.5 |
+--------+-----------+-----+
```"#,
    argument(name = "score", description = "Raw ranking score, any finite number."),
    argument(name = "y", description = "Observed label: Boolean or a number 0/1."),
    argument(
        name = "propensity",
        description = "Optional exposure propensity in (0, 1]: fit the debiased IPS loss."
    ),
    argument(
        name = "clip",
        description = "Lower clip of the propensity, a constant in [0, 1]. Default 0.1."
    )
)]
struct FitPlattDoc;

#[user_doc(
    doc_section(label = "Calibrators"),
    description = "Fits Gaussian calibration `σ(a·s² + b·s + c)` (Kweon et al. eq. 10) under the monotonicity \
constraints `2a·s + b >= 0` at the smallest and largest fitted score, by minimising the mean log loss (or the IPS \
log loss with `propensity`). `calibrate` clamps scores into [s_min, s_max].",
    syntax_example = "fit_gaussian_calib(score, y [, propensity [, clip]])",
    sql_example = r#"```sql
> SELECT m['method'] AS method, m['s_min'] AS s_min, m['s_max'] AS s_max
  FROM (SELECT fit_gaussian_calib(s, y) AS m FROM (VALUES (-2.0, 0), (-1.0, 0), (-1.0, 1), (0.0, 0), (0.0, 1), (1.0, 1), (1.0, 0), (2.0, 1)) AS t(s, y));
+----------+-------+-------+
| method   | s_min | s_max |
+----------+-------+-------+
| gaussian | -2.0  | 2.0   |
+----------+-------+-------+
```"#,
    argument(name = "score", description = "Raw ranking score, any finite number."),
    argument(name = "y", description = "Observed label: Boolean or a number 0/1."),
    argument(
        name = "propensity",
        description = "Optional exposure propensity in (0, 1]: fit the debiased IPS loss."
    ),
    argument(
        name = "clip",
        description = "Lower clip of the propensity, a constant in [0, 1]. Default 0.1."
    )
)]
struct FitGaussianDoc;

#[user_doc(
    doc_section(label = "Calibrators"),
    description = "Fits Gamma calibration `σ(a·ln s' + b·s' + c)` with `s' = s − shift` (Kweon et al. eq. 12) under \
the monotonicity constraints `a/s' + b >= 0` at both ends of the fitted range. `shift` lies 0.1% of the score \
range below the smallest score (1 below it when all scores are equal) and is stored in the model. `calibrate` \
clamps scores into [s_min, s_max].",
    syntax_example = "fit_gamma_calib(score, y [, propensity [, clip]])",
    sql_example = r#"```sql
> SELECT m['method'] AS method, m['shift'] AS shift
  FROM (SELECT fit_gamma_calib(s, y) AS m FROM (VALUES (0.0, 0), (1.0, 0), (1.0, 1), (2.0, 0), (2.0, 1), (3.0, 1), (3.0, 0), (4.0, 1)) AS t(s, y));
+--------+--------+
| method | shift  |
+--------+--------+
| gamma  | -0.004 |
+--------+--------+
```"#,
    argument(name = "score", description = "Raw ranking score, any finite number."),
    argument(name = "y", description = "Observed label: Boolean or a number 0/1."),
    argument(
        name = "propensity",
        description = "Optional exposure propensity in (0, 1]: fit the debiased IPS loss."
    ),
    argument(
        name = "clip",
        description = "Lower clip of the propensity, a constant in [0, 1]. Default 0.1."
    )
)]
struct FitGammaDoc;

#[user_doc(
    doc_section(label = "Calibrators"),
    description = "Fits isotonic regression (pool-adjacent-violators) of the label on the score, kept as the points \
`knots_x`/`knots_y`; `calibrate` interpolates linearly between them and clips outside, exactly as scikit-learn's \
`IsotonicRegression(out_of_bounds='clip')`. With `propensity`, PAV runs on the IPS pseudo-labels y/ω and the fitted \
values are clipped to [0, 1].",
    syntax_example = "fit_isotonic(score, y [, propensity [, clip]])",
    sql_example = r#"```sql
> SELECT m['knots_x'] AS x, m['knots_y'] AS y
  FROM (SELECT fit_isotonic(s, y) AS m FROM (VALUES (1.0, 0), (2.0, 1), (3.0, 0), (4.0, 1)) AS t(s, y));
+----------------------+----------------------+
| x                    | y                    |
+----------------------+----------------------+
| [1.0, 2.0, 3.0, 4.0] | [0.0, 0.5, 0.5, 1.0] |
+----------------------+----------------------+
```"#,
    argument(name = "score", description = "Raw ranking score, any finite number."),
    argument(name = "y", description = "Observed label: Boolean or a number 0/1."),
    argument(
        name = "propensity",
        description = "Optional exposure propensity in (0, 1]: PAV on y/ω."
    ),
    argument(
        name = "clip",
        description = "Lower clip of the propensity, a constant in [0, 1]. Default 0.1."
    )
)]
struct FitIsotonicDoc;

#[user_doc(
    doc_section(label = "Calibrators"),
    description = "Histogram binning: n_bins equal-width bins over [s_min, s_max], each predicting the positive rate \
of its rows; an empty bin predicts the overall positive rate. The model keeps the n_bins + 1 edges in `knots_x` and \
the rates in `knots_y`; `calibrate` clamps scores into the range.",
    syntax_example = "fit_histogram(score, y [, n_bins])",
    sql_example = r#"```sql
> SELECT m['knots_y'] AS rates
  FROM (SELECT fit_histogram(s, y, 2) AS m FROM (VALUES (0.0, 0), (1.0, 0), (2.0, 1), (3.0, 1), (4.0, 0)) AS t(s, y));
+---------------------------+
| rates                     |
+---------------------------+
| [0.0, 0.6666666666666666] |
+---------------------------+
```"#,
    argument(name = "score", description = "Raw ranking score, any finite number."),
    argument(name = "y", description = "Observed label: Boolean or a number 0/1."),
    argument(
        name = "n_bins",
        description = "Number of bins, an integer constant in [1, 10000]. Default 15."
    )
)]
struct FitHistogramDoc;

/// One of the `fit_*` aggregates.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Fit {
    method: FitMethod,
    signature: Signature,
}

impl Fit {
    pub fn new(method: FitMethod) -> Self {
        let mut f = Self {
            method,
            signature: Signature::user_defined(Volatility::Immutable),
        };
        f.signature = f.shape().signature();
        f
    }

    fn shape(&self) -> CallShape {
        CallShape {
            name: self.method.function_name(),
            required: FIT_ARGS,
            optional: match self.method {
                FitMethod::Histogram => &[Arg::LitInt("n_bins")],
                _ => FIT_OPTIONAL,
            },
        }
    }

    fn kernel(&self, args: &AccumulatorArgs) -> Result<FitKernel> {
        let func = self.method.function_name();
        let (bins, prop_col, clip) = match self.method {
            FitMethod::Histogram => (
                match args.exprs.get(2) {
                    Some(e) => n_bins(func, e)?,
                    None => DEFAULT_HISTOGRAM_BINS,
                },
                None,
                0.0,
            ),
            _ => (
                0,
                (args.exprs.len() > 2).then_some(2),
                match args.exprs.get(3) {
                    Some(e) => {
                        literal_checked(func, "clip", e, "in [0, 1]", |x| (0.0..=1.0).contains(&x))?
                    }
                    None => DEFAULT_FIT_CLIP,
                },
            ),
        };
        Ok(FitKernel {
            method: self.method,
            bins,
            prop_col,
            clip,
            groups: vec![],
            bytes: 0,
            targets: vec![],
        })
    }
}

kernel_aggregate!(Fit, false);

impl AggregateUDFImpl for Fit {
    kernel_udaf_common!();

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.shape().coerce(arg_types)?;
        Ok(crate::model::model_type())
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        let f =
            |n: &str, t: DataType| Arc::new(Field::new(format_state_name(args.name, n), t, true));
        Ok(vec![
            f("grid", DataType::Boolean),
            f("rows", DataType::Int64),
            f("s_min", DataType::Float64),
            f("s_max", DataType::Float64),
            f(
                "keys",
                DataType::List(Arc::new(Field::new_list_field(DataType::Int64, true))),
            ),
            f("lo", f64_list_type()),
            f("n", f64_list_type()),
            f("t", f64_list_type()),
            f("nd", f64_list_type()),
            f("nd2", f64_list_type()),
            f("td", f64_list_type()),
            f("td2", f64_list_type()),
        ])
    }

    fn documentation(&self) -> Option<&Documentation> {
        match self.method {
            FitMethod::Platt => FitPlattDoc.doc(),
            FitMethod::Gaussian => FitGaussianDoc.doc(),
            FitMethod::Gamma => FitGammaDoc.doc(),
            FitMethod::Isotonic => FitIsotonicDoc.doc(),
            FitMethod::Histogram => FitHistogramDoc.doc(),
        }
    }
}

/// One distinct score (exact mode) or one grid cell: sums of 1 and t, and the first two
/// moments of the offset from `lo` under both.
#[derive(Debug, Clone, Copy, Default)]
struct Entry {
    lo: f64,
    n: f64,
    t: f64,
    nd: f64,
    nd2: f64,
    td: f64,
    td2: f64,
}

/// The sums of one grid cell (its start is implied by its position).
#[derive(Debug, Clone, Copy, Default)]
struct Cell {
    n: f64,
    t: f64,
    nd: f64,
    nd2: f64,
    td: f64,
    td2: f64,
}

/// The grid position of a score: block id, cell index in the block, and the cell's anchor
/// (its bound nearer zero; offsets in the cell are taken from it).
#[inline]
fn cell_pos(s: f64) -> (u32, usize, f64) {
    if s.to_bits() & !(1 << 63) < LINEAR_LIMIT_BITS {
        let k = ((s / LINEAR_WIDTH).floor() as i64).clamp(-(BLOCK as i64), BLOCK as i64 - 1);
        let lo = k as f64 * LINEAR_WIDTH;
        if k < 0 {
            (LOG_IDS, (k + BLOCK as i64) as usize, lo)
        } else {
            (LOG_IDS + 1, k as usize, lo)
        }
    } else {
        log_cell(s.to_bits() >> SHIFT)
    }
}

/// Bits below the cell index in a score's bit pattern.
const SHIFT: u32 = 52 - CELL_BITS;
/// |s| below this (as bits) lies in the linear blocks.
const LINEAR_LIMIT_BITS: u64 = LINEAR_LIMIT.to_bits();

/// For the top bits (sign, exponent and `CELL_BITS` of mantissa) of s: the block id (sign ×
/// 2048 + binary exponent), the index in the block, and the cell's anchor (s with the lower
/// mantissa bits cleared, i.e. truncated toward zero).
#[inline(always)]
fn log_cell(top: u64) -> (u32, usize, f64) {
    (
        (top >> CELL_BITS) as u32,
        (top as usize) & (BLOCK - 1),
        f64::from_bits(top << SHIFT),
    )
}

/// The smallest and largest of `s`, or None when one is not finite. One pass in independent
/// lanes, so that it vectorises.
fn finite_range(s: &[f64]) -> Option<(f64, f64)> {
    const L: usize = 8;
    const EXP: u64 = 0x7ff0_0000_0000_0000;
    let mut lo = [f64::INFINITY; L];
    let mut hi = [f64::NEG_INFINITY; L];
    let mut bad = [0u64; L];
    let chunks = s.chunks_exact(L);
    let rest = chunks.remainder();
    for c in chunks {
        for k in 0..L {
            let x = c[k];
            bad[k] |= u64::from(x.to_bits() & EXP == EXP);
            lo[k] = if x < lo[k] { x } else { lo[k] };
            hi[k] = if x > hi[k] { x } else { hi[k] };
        }
    }
    let mut out = (f64::INFINITY, f64::NEG_INFINITY);
    for k in 0..L {
        if bad[k] != 0 {
            return None;
        }
        out = (out.0.min(lo[k]), out.1.max(hi[k]));
    }
    for &x in rest {
        if !x.is_finite() {
            return None;
        }
        out = (out.0.min(x), out.1.max(x));
    }
    Some(out)
}

/// The IPS targets y / max(q, clip) into `t`; false when a label is not 0/1 or a propensity
/// is not in (0, 1]. One branch-free pass that vectorises.
fn ips_targets(y: &[f64], q: &[f64], clip: f64, t: &mut [f64]) -> bool {
    let mut ok = true;
    for ((t, &y), &q) in t.iter_mut().zip(y).zip(q) {
        ok &= ((y == 0.0) | (y == 1.0)) & (q > 0.0) & (q <= 1.0);
        *t = y / q.max(clip);
    }
    ok
}

/// The anchor of cell `idx` of block `id`.
fn cell_start(id: u32, idx: usize) -> f64 {
    match id {
        LOG_IDS => (idx as i64 - BLOCK as i64) as f64 * LINEAR_WIDTH,
        i if i == LOG_IDS + 1 => idx as f64 * LINEAR_WIDTH,
        _ => log_cell(((id as u64) << CELL_BITS) | idx as u64).2,
    }
}

/// The fixed grid: blocks of `BLOCK` cells allocated when first touched, found by direct
/// indexing (one memory access per row instead of a hash probe).
#[derive(Debug)]
struct Grid {
    /// Per block id: 1 + the block's position in `cells` (in blocks), or 0 when untouched.
    block_of: Vec<u32>,
    /// The touched blocks' ids, in allocation order.
    ids: Vec<u32>,
    cells: Vec<Cell>,
}

impl Grid {
    fn new() -> Self {
        Self {
            block_of: vec![0; N_IDS],
            ids: vec![],
            cells: vec![],
        }
    }

    #[inline(always)]
    fn cell(&mut self, id: u32, idx: usize) -> &mut Cell {
        let mut b = self.block_of[id as usize] as usize;
        if b == 0 {
            b = self.new_block(id);
        }
        &mut self.cells[(b - 1) * BLOCK + (idx & (BLOCK - 1))]
    }

    #[cold]
    #[inline(never)]
    fn new_block(&mut self, id: u32) -> usize {
        self.ids.push(id);
        // Exact growth: a fit touches a few dozen blocks, and doubling would hold up to
        // twice the memory for the rest of the query.
        self.cells.reserve_exact(BLOCK);
        self.cells.resize(self.ids.len() * BLOCK, Cell::default());
        self.block_of[id as usize] = self.ids.len() as u32;
        self.ids.len()
    }

    #[inline(always)]
    fn add(&mut self, s: f64, n: f64, t: f64) {
        let (id, idx, lo) = cell_pos(s);
        let d = s - lo;
        let c = self.cell(id, idx);
        c.n += n;
        c.t += t;
        c.nd += n * d;
        c.nd2 += n * d * d;
        c.td += t * d;
        c.td2 += t * d * d;
    }

    /// Adds one row per (s, t): the hot loop of a fit over many distinct scores (about 2.5 ns
    /// a row, `cargo bench --bench aggregates -- grid_update`). With 256 cells per power of
    /// two the cells of scores spanning [-20, 20] fit in a core's L2 cache; at 1024 this loop
    /// was bound by cache misses.
    fn add_rows(&mut self, s: &[f64], t: &[f64]) {
        for (&si, &ti) in s.iter().zip(t) {
            self.add(si, 1.0, ti);
        }
    }

    /// The touched cells: (block id, index, cell).
    fn iter(&self) -> impl Iterator<Item = (u32, usize, &Cell)> + '_ {
        self.ids.iter().enumerate().flat_map(move |(b, &id)| {
            self.cells[b * BLOCK..(b + 1) * BLOCK]
                .iter()
                .enumerate()
                .map(move |(i, c)| (id, i, c))
        })
    }

    fn bytes(&self) -> usize {
        (self.block_of.capacity() + self.ids.capacity()) * size_of::<u32>()
            + self.cells.capacity() * size_of::<Cell>()
    }
}

/// One distinct score of an exact-mode state and its sums.
#[derive(Debug, Clone, Copy)]
struct Point {
    s: f64,
    n: f64,
    t: f64,
}

#[derive(Debug)]
struct FitState {
    /// Exact mode: one point per distinct score, found through `index` (positions in
    /// `points`, hashed by the score's bits) — about 30 bytes a score, since per-group fits
    /// (`GROUP BY advertiser`) can hold many groups in exact mode at once.
    index: HashTable<u32>,
    points: Vec<Point>,
    hasher: DefaultHashBuilder,
    /// Grid mode (past `EXACT_CAP` distinct scores).
    grid: Option<Box<Grid>>,
    rows: i64,
    s_min: f64,
    s_max: f64,
}

impl FitState {
    fn new() -> Self {
        Self {
            index: HashTable::new(),
            points: vec![],
            hasher: DefaultHashBuilder::default(),
            grid: None,
            rows: 0,
            s_min: f64::INFINITY,
            s_max: f64::NEG_INFINITY,
        }
    }

    fn is_grid(&self) -> bool {
        self.grid.is_some()
    }

    /// Adds one row (or an exact point of `n` rows).
    #[inline]
    fn add_point(&mut self, s: f64, n: f64, t: f64) {
        if let Some(grid) = &mut self.grid {
            grid.add(s, n, t);
            return;
        }
        let s = if s == 0.0 { 0.0 } else { s }; // -0.0 and 0.0 are one score
        let bits = s.to_bits();
        let hash = self.hasher.hash_one(bits);
        let points = &mut self.points;
        match self
            .index
            .find(hash, |&i| points[i as usize].s.to_bits() == bits)
        {
            Some(&i) => {
                let x = &mut points[i as usize];
                x.n += n;
                x.t += t;
            }
            None => {
                let hasher = &self.hasher;
                self.index.insert_unique(hash, points.len() as u32, |&i| {
                    hasher.hash_one(points[i as usize].s.to_bits())
                });
                points.push(Point { s, n, t });
                if points.len() > EXACT_CAP {
                    self.switch_to_grid();
                }
            }
        }
    }

    /// Adds a partial state's grid cell (key = block id << 20 | index).
    fn add_cell(&mut self, key: i64, e: &Entry) -> Result<()> {
        let (id, idx) = ((key >> 20) as usize, (key & 0xF_FFFF) as usize);
        if id >= N_IDS || idx >= BLOCK {
            return internal_err!("fit: grid cell key {key} out of range in a partial state");
        }
        let Some(grid) = &mut self.grid else {
            return internal_err!("fit: a grid cell merged into an exact state");
        };
        let c = grid.cell(id as u32, idx);
        c.n += e.n;
        c.t += e.t;
        c.nd += e.nd;
        c.nd2 += e.nd2;
        c.td += e.td;
        c.td2 += e.td2;
        Ok(())
    }

    /// Switches from exact points to the grid.
    fn switch_to_grid(&mut self) {
        let old = std::mem::take(&mut self.points);
        self.index = HashTable::new();
        self.grid = Some(Box::new(Grid::new()));
        for p in old {
            self.add_point(p.s, p.n, p.t);
        }
    }

    /// The state's entries with their keys: exact points (key = score bits), or the
    /// non-empty grid cells (key = block id << 20 | index, `lo` = cell start).
    fn keyed_entries(&self) -> Vec<(i64, Entry)> {
        match &self.grid {
            None => self
                .points
                .iter()
                .map(|p| {
                    let e = Entry {
                        lo: p.s,
                        n: p.n,
                        t: p.t,
                        ..Default::default()
                    };
                    (p.s.to_bits() as i64, e)
                })
                .collect(),
            Some(g) => g
                .iter()
                .filter(|(_, _, c)| c.n > 0.0)
                .map(|(id, i, c)| {
                    (
                        ((id as i64) << 20) | i as i64,
                        Entry {
                            lo: cell_start(id, i),
                            n: c.n,
                            t: c.t,
                            nd: c.nd,
                            nd2: c.nd2,
                            td: c.td,
                            td2: c.td2,
                        },
                    )
                })
                .collect(),
        }
    }

    /// Heap bytes held (allocated, not just used: a doubling vector holds up to twice what
    /// it uses, and that is what the memory pool must be told).
    fn len_bytes(&self) -> usize {
        self.points.capacity() * size_of::<Point>()
            + self.index.allocation_size()
            + self.grid.as_ref().map_or(0, |g| g.bytes())
    }

    fn observe_range(&mut self, lo: f64, hi: f64) {
        // `+ 0.0` makes a -0.0 bound 0.0, whatever order the zeros came in.
        self.s_min = self.s_min.min(lo) + 0.0;
        self.s_max = self.s_max.max(hi) + 0.0;
    }

    /// The points (score, Σ1, Σt) in score order: exact scores, or each cell's mean.
    fn sorted_points(&self) -> Vec<(f64, f64, f64)> {
        let grid = self.is_grid();
        let mut pts: Vec<(f64, f64, f64)> = self
            .keyed_entries()
            .into_iter()
            .filter(|(_, e)| e.n > 0.0)
            .map(|(_, e)| {
                let s = if grid {
                    (e.lo + e.nd / e.n).clamp(self.s_min, self.s_max)
                } else {
                    e.lo
                };
                (s, e.n, e.t)
            })
            .collect();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        pts
    }

    /// Quadrature nodes (score, weight on softplus, weight on t) for the parametric fits.
    fn nodes(&self) -> Vec<(f64, f64, f64)> {
        let entries = self.keyed_entries();
        let mut out = Vec::with_capacity(entries.len() * 2);
        let clamp = |s: f64| s.clamp(self.s_min, self.s_max);
        for (_, e) in &entries {
            if !self.is_grid() {
                out.push((e.lo, e.n, e.t));
                continue;
            }
            let mut two_point = |w: f64, m1: f64, m2: f64, is_t: bool| {
                if w <= 0.0 {
                    return;
                }
                let mean = m1 / w;
                let sd = (m2 / w - mean * mean).max(0.0).sqrt();
                for s in [e.lo + mean - sd, e.lo + mean + sd] {
                    if is_t {
                        out.push((clamp(s), 0.0, w / 2.0));
                    } else {
                        out.push((clamp(s), w / 2.0, 0.0));
                    }
                }
            };
            two_point(e.n, e.nd, e.nd2, false);
            two_point(e.t, e.td, e.td2, true);
        }
        out
    }
}

#[derive(Debug)]
struct FitKernel {
    method: FitMethod,
    bins: usize,
    prop_col: Option<usize>,
    clip: f64,
    groups: Vec<FitState>,
    bytes: usize,
    /// Scratch: the targets of the batch on the fast path.
    targets: Vec<f64>,
}

impl FitKernel {
    fn func(&self) -> &'static str {
        self.method.function_name()
    }

    /// The fast path of one group with every row usable (no `GROUP BY`, no NULLs, no
    /// filter): the columns are checked in bulk, the targets computed in one vectorised pass,
    /// and the rows added in a tight loop. Returns false, having changed nothing, when a value
    /// is bad: the per-row path then finds the first bad row and reports it.
    fn update_whole(&mut self, s: &[f64], y: &[f64], q: Option<&[f64]>) -> bool {
        let Some((lo, hi)) = finite_range(s) else {
            return false;
        };
        let t: &[f64] = match q {
            None if all_labels(y) => y,
            None => return false,
            Some(q) => {
                self.targets.resize(s.len(), 0.0);
                if !ips_targets(y, q, self.clip, &mut self.targets) {
                    return false;
                }
                &self.targets
            }
        };
        let st = &mut self.groups[0];
        let before = st.len_bytes();
        st.rows += s.len() as i64;
        st.observe_range(lo, hi);
        let mut i = 0;
        while i < s.len() && !st.is_grid() {
            st.add_point(s[i], 1.0, t[i]);
            i += 1;
        }
        if let Some(grid) = &mut st.grid {
            grid.add_rows(&s[i..], &t[i..]);
        }
        self.bytes = self.bytes + st.len_bytes() - before;
        true
    }

    fn finish(&self, st: &FitState) -> Option<Model> {
        if st.rows == 0 {
            return None;
        }
        let mut m = Model::new(self.method.model_name(), st.rows, st.s_min, st.s_max);
        match self.method {
            FitMethod::Platt | FitMethod::Gaussian | FitMethod::Gamma => {
                fit_parametric(self.method, st, &mut m)
            }
            FitMethod::Isotonic => fit_isotonic(st, self.prop_col.is_some(), &mut m),
            FitMethod::Histogram => fit_histogram(st, self.bins, &mut m),
        }
        Some(m)
    }
}

impl Kernel for FitKernel {
    fn empty(&self) -> Result<Self> {
        Ok(Self {
            method: self.method,
            bins: self.bins,
            prop_col: self.prop_col,
            clip: self.clip,
            groups: vec![],
            bytes: 0,
            targets: vec![],
        })
    }

    fn resize(&mut self, n: usize) {
        if self.groups.len() < n {
            self.groups.resize_with(n, FitState::new);
        }
    }

    fn num_groups(&self) -> usize {
        self.groups.len()
    }

    fn update(
        &mut self,
        values: &[ArrayRef],
        groups: &[usize],
        filter: Option<&BooleanArray>,
    ) -> Result<()> {
        let func = self.func();
        let s = f64s(&values[0]).values();
        let y = f64s(&values[1]).values();
        let q = self.prop_col.map(|pc| &f64s(&values[pc]).values()[..]);
        let mut cols = vec![&values[0], &values[1]];
        cols.extend(self.prop_col.map(|pc| &values[pc]));
        let mask = usable_rows(&cols, filter);
        if mask.is_none() && self.groups.len() == 1 && self.update_whole(s, y, q) {
            return Ok(());
        }
        let clip = self.clip;
        let states = &mut self.groups;
        let bytes = &mut self.bytes;
        let mut add = |g: usize, si: f64, t: f64| -> Result<()> {
            if !si.is_finite() {
                return exec_err!("{func}: argument score must be finite, got {si}");
            }
            let st = &mut states[g];
            let before = st.len_bytes();
            st.add_point(si, 1.0, t);
            st.rows += 1;
            st.observe_range(si, si);
            *bytes = *bytes + st.len_bytes() - before;
            Ok(())
        };
        match q {
            None => for_each_row(s.len(), &mask, |i| {
                add(groups[i], s[i], check_y(func, y[i])?)
            }),
            Some(q) => for_each_row(s.len(), &mask, |i| {
                let yi = check_y(func, y[i])?;
                let omega = check_propensity(func, q[i])?.max(clip);
                add(groups[i], s[i], yi / omega)
            }),
        }
    }

    fn merge(&mut self, states: &[ArrayRef], groups: &[usize]) -> Result<()> {
        let grid = states[0].as_boolean();
        let rows = states[1].as_primitive::<Int64Type>();
        let s_min = states[2].as_primitive::<Float64Type>();
        let s_max = states[3].as_primitive::<Float64Type>();
        // Points (lo, n, t) of every row share one offsets buffer; keys and moments, only
        // present for grid rows, another.
        let keys_list = states[4].as_list::<i32>();
        let keys = keys_list.values().as_primitive::<Int64Type>().values();
        let grid_offsets = keys_list.value_offsets();
        let cols: Vec<(&[i32], &[f64])> = states[5..12].iter().map(list_parts).collect();
        let offsets = cols[0].0;
        if cols[1..3].iter().any(|(o, _)| *o != offsets)
            || cols[3..].iter().any(|(o, _)| *o != grid_offsets)
        {
            return internal_err!("{}: malformed partial state", self.func());
        }
        for (r, &g) in groups.iter().enumerate() {
            if rows.is_null(r) || rows.value(r) == 0 {
                continue;
            }
            let (start, end) = (offsets[r] as usize, offsets[r + 1] as usize);
            let grid_start = grid_offsets[r] as usize;
            let grid_len = grid_offsets[r + 1] as usize - grid_start;
            let incoming_grid = grid.value(r);
            if grid_len != if incoming_grid { end - start } else { 0 } {
                return internal_err!("{}: malformed partial state", self.func());
            }
            let st = &mut self.groups[g];
            let before = st.len_bytes();
            if incoming_grid && !st.is_grid() {
                st.switch_to_grid();
            }
            for j in start..end {
                let (lo, n, t) = (cols[0].1[j], cols[1].1[j], cols[2].1[j]);
                if incoming_grid {
                    let k = grid_start + (j - start);
                    let e = Entry {
                        lo,
                        n,
                        t,
                        nd: cols[3].1[k],
                        nd2: cols[4].1[k],
                        td: cols[5].1[k],
                        td2: cols[6].1[k],
                    };
                    st.add_cell(keys[k], &e)?;
                } else {
                    st.add_point(lo, n, t);
                }
            }
            st.rows += rows.value(r);
            st.observe_range(s_min.value(r), s_max.value(r));
            self.bytes = self.bytes + st.len_bytes() - before;
        }
        Ok(())
    }

    /// The partial state: per group its mode, rows and range; the points' (lo, n, t) lists;
    /// and, for grid groups only, the cell keys and moments (exact groups leave those lists
    /// empty: 24 bytes a point instead of 64).
    fn state(&self, range: Range<usize>) -> Result<Vec<ArrayRef>> {
        let sts = &self.groups[range];
        let entries: Vec<Vec<(i64, Entry)>> = sts.iter().map(FitState::keyed_entries).collect();
        let offsets = OffsetBuffer::from_lengths(entries.iter().map(Vec::len));
        let grid_offsets = OffsetBuffer::from_lengths(sts.iter().zip(&entries).map(|(st, e)| {
            if st.is_grid() {
                e.len()
            } else {
                0
            }
        }));
        let list = |vals: ArrayRef, t: DataType, offsets: &OffsetBuffer<i32>| -> ArrayRef {
            Arc::new(ListArray::new(
                Arc::new(Field::new_list_field(t, true)),
                offsets.clone(),
                vals,
                None,
            ))
        };
        let grid_entries = || {
            sts.iter()
                .zip(&entries)
                .filter(|(st, _)| st.is_grid())
                .flat_map(|(_, e)| e)
        };
        let keys: Vec<i64> = grid_entries().map(|(k, _)| *k).collect();
        let field = |f: fn(&Entry) -> f64| -> ArrayRef {
            let v: Float64Array = entries.iter().flatten().map(|(_, e)| f(e)).collect();
            list(Arc::new(v), DataType::Float64, &offsets)
        };
        let moment = |f: fn(&Entry) -> f64| -> ArrayRef {
            let v: Float64Array = grid_entries().map(|(_, e)| f(e)).collect();
            list(Arc::new(v), DataType::Float64, &grid_offsets)
        };
        Ok(vec![
            Arc::new(BooleanArray::from(
                sts.iter().map(|s| s.is_grid()).collect::<Vec<_>>(),
            )),
            Arc::new(Int64Array::from(
                sts.iter().map(|s| s.rows).collect::<Vec<_>>(),
            )),
            Arc::new(Float64Array::from(
                sts.iter().map(|s| s.s_min).collect::<Vec<_>>(),
            )),
            Arc::new(Float64Array::from(
                sts.iter().map(|s| s.s_max).collect::<Vec<_>>(),
            )),
            list(
                Arc::new(Int64Array::from(keys)),
                DataType::Int64,
                &grid_offsets,
            ),
            field(|e| e.lo),
            field(|e| e.n),
            field(|e| e.t),
            moment(|e| e.nd),
            moment(|e| e.nd2),
            moment(|e| e.td),
            moment(|e| e.td2),
        ])
    }

    fn evaluate(&mut self, range: Range<usize>) -> Result<ArrayRef> {
        let models: Vec<Option<Model>> = self.groups[range]
            .iter()
            .map(|st| self.finish(st))
            .collect();
        crate::model::models_to_array(&models)
    }

    fn drain(&mut self, n: usize) {
        for st in self.groups.drain(..n) {
            self.bytes -= st.len_bytes();
        }
    }

    fn size(&self) -> usize {
        self.bytes + self.groups.capacity() * size_of::<FitState>()
    }
}

/// Mean of the t-weighted log loss of fitted probabilities `p` at the points
/// (clipped to machine epsilon, as `logloss` / `ips_logloss`).
fn points_loss(points: &[(f64, f64, f64)], p: impl Fn(usize) -> f64) -> f64 {
    let eps = crate::loss::DEFAULT_EPS;
    let (mut num, mut den) = (0.0, 0.0);
    for (i, &(_, n, t)) in points.iter().enumerate() {
        let pi = p(i).clamp(eps, 1.0 - eps);
        num += -t * pi.ln() - (n - t) * (-pi).ln_1p();
        den += n;
    }
    num / den
}

fn fit_isotonic(st: &FitState, ips: bool, m: &mut Model) {
    let pts = st.sorted_points();
    // Pool adjacent violators on the means t/n with weights n.
    let mut blocks: Vec<(f64, f64, usize)> = Vec::with_capacity(pts.len()); // (Σn, Σt, len)
    for &(_, n, t) in &pts {
        blocks.push((n, t, 1));
        while blocks.len() > 1 {
            let (n2, t2, l2) = blocks[blocks.len() - 1];
            let (n1, t1, l1) = blocks[blocks.len() - 2];
            if t1 / n1 > t2 / n2 {
                blocks.pop();
                let last = blocks.len() - 1;
                blocks[last] = (n1 + n2, t1 + t2, l1 + l2);
            } else {
                break;
            }
        }
    }
    let mut fitted = Vec::with_capacity(pts.len());
    for (n, t, len) in blocks {
        let v = t / n;
        let v = if ips { v.clamp(0.0, 1.0) } else { v };
        fitted.extend(std::iter::repeat_n(v, len));
    }
    m.loss = Some(points_loss(&pts, |i| fitted[i]));
    // Drop interior points whose value equals both neighbours (as scikit-learn does).
    let k = fitted.len();
    let keep: Vec<bool> = (0..k)
        .map(|i| i == 0 || i + 1 == k || fitted[i] != fitted[i - 1] || fitted[i] != fitted[i + 1])
        .collect();
    m.knots_x = Some((0..k).filter(|&i| keep[i]).map(|i| pts[i].0).collect());
    m.knots_y = Some((0..k).filter(|&i| keep[i]).map(|i| fitted[i]).collect());
    m.converged = Some(true);
}

fn fit_histogram(st: &FitState, bins: usize, m: &mut Model) {
    let pts = st.sorted_points();
    let (lo, hi) = (st.s_min, st.s_max);
    let width = hi - lo;
    let bin_of = |s: f64| {
        if width > 0.0 {
            (((s - lo) / width * bins as f64).floor().max(0.0) as usize).min(bins - 1)
        } else {
            0
        }
    };
    let mut n = vec![0.0; bins];
    let mut t = vec![0.0; bins];
    for &(s, pn, pt) in &pts {
        let b = bin_of(s);
        n[b] += pn;
        t[b] += pt;
    }
    let overall = t.iter().sum::<f64>() / n.iter().sum::<f64>();
    let rates: Vec<f64> = (0..bins)
        .map(|b| if n[b] > 0.0 { t[b] / n[b] } else { overall })
        .collect();
    m.loss = Some(points_loss(&pts, |i| rates[bin_of(pts[i].0)]));
    m.knots_x = Some(
        (0..=bins)
            .map(|k| {
                if k == bins {
                    hi
                } else {
                    lo + width * k as f64 / bins as f64
                }
            })
            .collect(),
    );
    m.knots_y = Some(rates);
    m.converged = Some(true);
}

/// Weighted mean and standard deviation of node scores (softplus weights).
fn moments(nodes: &[(f64, f64, f64)]) -> (f64, f64) {
    let w: f64 = nodes.iter().map(|n| n.1).sum();
    let mean = nodes.iter().map(|n| n.1 * n.0).sum::<f64>() / w;
    let var = nodes
        .iter()
        .map(|n| n.1 * (n.0 - mean).powi(2))
        .sum::<f64>()
        / w;
    (mean, var.sqrt())
}

fn fit_parametric(method: FitMethod, st: &FitState, m: &mut Model) {
    // Sorted, so the sums do not depend on the order in which rows and partitions arrived.
    let mut raw = st.nodes();
    raw.sort_by(|x, y| {
        x.0.total_cmp(&y.0)
            .then(x.1.total_cmp(&y.1))
            .then(x.2.total_cmp(&y.2))
    });
    let n = st.rows as f64;
    let total_t: f64 = raw.iter().map(|x| x.2).sum();
    let rate = (total_t / n).clamp(1e-9, 1.0 - 1e-9);
    let c0 = (rate / (1.0 - rate)).ln();
    let (s_min, s_max) = (st.s_min, st.s_max);
    match method {
        FitMethod::Platt | FitMethod::Gaussian => {
            let (mu, sd) = moments(&raw);
            let sd = if sd > 0.0 && sd.is_finite() { sd } else { 1.0 };
            let u = |s: f64| (s - mu) / sd;
            let (u_min, u_max) = (u(s_min), u(s_max));
            if method == FitMethod::Platt {
                let nodes: Vec<Node<2>> = raw
                    .iter()
                    .map(|&(s, a, t)| Node {
                        phi: [1.0, u(s)],
                        a,
                        t,
                    })
                    .collect();
                let sol = minimise(&nodes, n, &[[0.0, 1.0]], [c0, 0.0]);
                let [cu, bu] = sol.theta;
                let b = bu / sd;
                let c = cu - bu * mu / sd;
                m.b = Some(b);
                m.c = Some(c);
                m.iterations = Some(sol.iterations);
                m.converged = Some(sol.converged);
                let raw_nodes: Vec<Node<2>> = raw
                    .iter()
                    .map(|&(s, a, t)| Node {
                        phi: [1.0, s],
                        a,
                        t,
                    })
                    .collect();
                m.loss = Some(objective(&raw_nodes, n, &[c, b]));
            } else {
                let nodes: Vec<Node<3>> = raw
                    .iter()
                    .map(|&(s, a, t)| {
                        let x = u(s);
                        Node {
                            phi: [1.0, x, x * x],
                            a,
                            t,
                        }
                    })
                    .collect();
                let cons = [[0.0, 1.0, 2.0 * u_min], [0.0, 1.0, 2.0 * u_max]];
                let sol = minimise(&nodes, n, &cons, [c0, 0.0, 0.0]);
                let [cu, bu, au] = sol.theta;
                let a = au / (sd * sd);
                let b = bu / sd - 2.0 * au * mu / (sd * sd);
                let c = cu - bu * mu / sd + au * mu * mu / (sd * sd);
                m.a = Some(a);
                m.b = Some(b);
                m.c = Some(c);
                m.iterations = Some(sol.iterations);
                m.converged = Some(sol.converged);
                let raw_nodes: Vec<Node<3>> = raw
                    .iter()
                    .map(|&(s, a, t)| Node {
                        phi: [1.0, s, s * s],
                        a,
                        t,
                    })
                    .collect();
                m.loss = Some(objective(&raw_nodes, n, &[c, b, a]));
            }
        }
        FitMethod::Gamma => {
            let range = s_max - s_min;
            let shift = if range > 0.0 {
                s_min - GAMMA_SHIFT_FRACTION * range
            } else {
                s_min - 1.0
            };
            let sp = |s: f64| s - shift;
            let kappa = raw.iter().map(|x| x.1 * sp(x.0)).sum::<f64>() / n;
            let kappa = if kappa > 0.0 && kappa.is_finite() {
                kappa
            } else {
                1.0
            };
            let v = |s: f64| sp(s) / kappa;
            let nodes: Vec<Node<3>> = raw
                .iter()
                .map(|&(s, a, t)| {
                    let x = v(s);
                    Node {
                        phi: [1.0, x.ln(), x],
                        a,
                        t,
                    }
                })
                .collect();
            let cons = [[0.0, 1.0, v(s_min)], [0.0, 1.0, v(s_max)]];
            let sol = minimise(&nodes, n, &cons, [c0, 0.0, 0.0]);
            let [cv, av, bv] = sol.theta;
            let a = av;
            let b = bv / kappa;
            let c = cv - av * kappa.ln();
            m.a = Some(a);
            m.b = Some(b);
            m.c = Some(c);
            m.shift = Some(shift);
            m.iterations = Some(sol.iterations);
            m.converged = Some(sol.converged);
            let raw_nodes: Vec<Node<3>> = raw
                .iter()
                .map(|&(s, a, t)| Node {
                    phi: [1.0, sp(s).ln(), sp(s)],
                    a,
                    t,
                })
                .collect();
            m.loss = Some(objective(&raw_nodes, n, &[c, a, b]));
        }
        FitMethod::Isotonic | FitMethod::Histogram => {}
    }
}
