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
//! score: Σ1 and Σt. Up to [`EXACT_CAP`] distinct scores per group this is exact
//! ([`NONPARAMETRIC_EXACT_CAP`] for the fits compared point by point). Beyond that the state
//! switches to a fixed grid of cells — 2^k cells per power of two of |s| (relative width
//! 2⁻ᵏ) and two linear blocks of 2^k cells of width 2⁻¹⁶⁻ᵏ for |s| < 2⁻¹⁶, k =
//! [`FitMethod::grid_bits`] — keeping per cell Σ1, Σt and the first two moments of the
//! offset d = s − a from the cell's anchor a (its bound nearer zero) under both weights. A
//! cell enters the objective as the two-point rule m ± σ that matches those moments, which
//! is exact for the terms linear in t (f is quadratic in s for Platt and Gaussian) and leaves
//! an error of order max|softplus‴|·(f′·width)³ per row in the softplus term (measured on
//! 100,000 distinct logits, `tests/fits/fit_grid.rs`: at most 4e-12 relative at 128 cells, 1.6e-12
//! at 256, 1e-14 at 1024). The parametric fits use 128 cells: in a query the Parquet decoding
//! evicts the cells between batches, and at 256 the row loop was about 25% slower (1024 was
//! 15% slower again). The non-parametric fits' knots move with the cells, so they keep 256.
//! The grid is fixed, so merging states is exact and the result does not depend on
//! partitioning. Cells live in blocks of 2^k (6 or 12 KiB) allocated when first touched and
//! found by direct indexing, so memory is bounded by the powers of two the data spans, not
//! by rows: scores in [−20, 20] touch at most 43 blocks. Isotonic and histogram fits in
//! grid mode use each cell's mean score.

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, FieldRef};
use datafusion_common::{plan_err, Result};
use datafusion_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion_expr::utils::format_state_name;
use datafusion_expr::{AggregateUDFImpl, Documentation, Signature, Volatility};
use datafusion_macros::user_doc;

use crate::common::{f64_list_type, list_type, literal, literal_checked, n_bins, Arg, CallShape};
use crate::kernel::{kernel_aggregate, kernel_udaf_common};
use crate::metrics::binning::Strategy;

mod bbq;
mod field;
mod field_calib;
pub use field::FieldFit;
mod grid;
mod ilps;
pub use ilps::DEFAULT_KNOTS;
mod kernel;
mod nonparametric;
mod parametric;
pub(crate) use parametric::beta_clip;
mod state;

use bbq::fit_bbq;
use grid::*;
use ilps::fit_ilps;
use nonparametric::*;
use parametric::*;

// The fits' kernel and state; the inference functions (`crate::inference`) keep their rows
// in them too.
pub(crate) use kernel::FitKernel;
pub(crate) use nonparametric::pav;
pub(crate) use state::FitState;

/// Distinct scores the parametric fits keep exactly per group before switching to the fixed
/// grid (their objective on the grid is within 4e-12 of the exact one, and the grid is
/// faster to update).
pub const EXACT_CAP: usize = 1 << 16;
/// Distinct scores the non-parametric fits (isotonic, histogram, BBQ, ConfCalib) keep
/// exactly per group: they are compared with scikit-learn / numpy / netcal point by point,
/// and pooling scores into grid cells moves their knots. About 30 bytes a distinct score,
/// reported to the memory pool (10M distinct scores: about 300 MB in one group).
pub const NONPARAMETRIC_EXACT_CAP: usize = 10_000_000;
/// Default number of bins of `fit_histogram`.
pub const DEFAULT_HISTOGRAM_BINS: usize = 15;
/// Default lower clip of propensities.
pub const DEFAULT_FIT_CLIP: f64 = 0.1;
/// Gamma calibration's shift lies this fraction of the score range below the smallest score.
pub const GAMMA_SHIFT_FRACTION: f64 = 1e-3;

/// Grid cells per power of two of |s| are 2^bits: `FINE_BITS` for the fits compared with
/// their references point by point (their knots move with the cells), `COARSE_BITS` for the
/// parametric ones, whose objective is as exact at either (see the module documentation).
const FINE_BITS: u32 = 8;
const COARSE_BITS: u32 = 7;
/// Below this |s| the grid is linear: 2 blocks of 2^bits cells of width 2⁻¹⁶ / 2^bits.
const LINEAR_LIMIT: f64 = 1.0 / 65536.0; // 2^-16
/// Block ids: sign × 2048 binary exponents, then the negative and positive linear blocks.
const LOG_IDS: u32 = 4096;
const N_IDS: usize = LOG_IDS as usize + 2;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FitMethod {
    Platt,
    Temperature,
    Beta,
    Gaussian,
    Gamma,
    Isotonic,
    Histogram,
    Ilps,
    Bbq,
    ConfCalib,
    FieldCalib,
}

impl FitMethod {
    pub fn function_name(&self) -> &'static str {
        match self {
            FitMethod::Platt => "fit_platt",
            FitMethod::Temperature => "fit_temperature",
            FitMethod::Beta => "fit_beta_calib",
            FitMethod::Gaussian => "fit_gaussian_calib",
            FitMethod::Gamma => "fit_gamma_calib",
            FitMethod::Isotonic => "fit_isotonic",
            FitMethod::Histogram => "fit_histogram",
            FitMethod::Ilps => "fit_ilps",
            FitMethod::Bbq => "fit_bbq",
            FitMethod::ConfCalib => "fit_confcalib",
            FitMethod::FieldCalib => "fit_field_calib",
        }
    }

    /// The `method` field of the model.
    /// Distinct scores kept exactly per group before the grid.
    pub fn exact_cap(&self) -> usize {
        match self {
            FitMethod::Isotonic | FitMethod::Histogram | FitMethod::Bbq | FitMethod::ConfCalib => {
                NONPARAMETRIC_EXACT_CAP
            }
            _ => EXACT_CAP,
        }
    }

    /// The grid's resolution past the exact cap: 2^bits cells per power of two.
    pub fn grid_bits(&self) -> u32 {
        if self.exact_cap() == NONPARAMETRIC_EXACT_CAP {
            FINE_BITS
        } else {
            COARSE_BITS
        }
    }

    /// Whether the session setting `calibsql.fit_exact_cap` applies (the non-parametric fits,
    /// compared with their references point by point).
    pub fn cap_is_a_setting(&self) -> bool {
        self.exact_cap() == NONPARAMETRIC_EXACT_CAP
    }

    /// Whether the score is a probability (checked to lie in [0, 1]).
    pub fn takes_probability(&self) -> bool {
        matches!(
            self,
            FitMethod::Beta | FitMethod::Bbq | FitMethod::ConfCalib
        )
    }

    pub fn model_name(&self) -> &'static str {
        match self {
            FitMethod::Platt => "platt",
            FitMethod::Temperature => "temperature",
            FitMethod::Beta => "beta",
            FitMethod::Gaussian => "gaussian",
            FitMethod::Gamma => "gamma",
            FitMethod::Isotonic => "isotonic",
            FitMethod::Histogram => "histogram",
            FitMethod::Ilps => "ilps",
            FitMethod::Bbq => "bbq",
            FitMethod::ConfCalib => "confcalib",
            FitMethod::FieldCalib => "field_calib",
        }
    }
}

const FIT_ARGS: &[Arg] = &[Arg::Num("score"), Arg::Label("y")];
const TEMPERATURE_ARGS: &[Arg] = &[Arg::Num("logit"), Arg::Label("y")];
const BETA_ARGS: &[Arg] = &[Arg::Num("p"), Arg::Label("y")];
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
    description = "Fits temperature scaling `σ(logit / T)`, T > 0 (Guo et al. 2017; a baseline of Kweon et al. and Zhao \
et al.), by minimising the mean log loss — or, with `propensity`, the mean IPS log loss (UERM) with ω = \
max(propensity, clip). The model keeps T in field `a`. When the logits are not positively associated with the \
label the optimum lies at T = +∞ (every probability 0.5): the model then has `a` = +inf.",
    syntax_example = "fit_temperature(logit, y [, propensity [, clip]])",
    sql_example = r#"```sql
> SELECT m['method'] AS method, round(m['a'], 4) AS temperature
  FROM (SELECT fit_temperature(l, y) AS m FROM (VALUES (-2.0, 0), (-1.0, 0), (-1.0, 1), (1.0, 0), (1.0, 1), (2.0, 1)) AS t(l, y));
+-------------+-------------+
| method      | temperature |
+-------------+-------------+
| temperature | 1.3222      |
+-------------+-------------+
```"#,
    argument(name = "logit", description = "The model's logit (any finite number)."),
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
struct FitTemperatureDoc;

#[user_doc(
    doc_section(label = "Calibrators"),
    description = "Fits beta calibration `σ(a·ln p − b·ln(1−p) + c)` with a, b >= 0 (Kull et al. 2017, the 'abm' \
model; a baseline of Kweon et al.), by minimising the mean log loss — or, with `propensity`, the mean IPS log loss \
with ω = max(propensity, clip). p is clipped to [ε, 1−ε] (ε = 2.2e-16) before the logarithms, as betacal does. \
Unlike betacal, which refits without a feature whose coefficient comes out negative, the constraints are solved \
exactly, so the loss is never higher than betacal's.",
    syntax_example = "fit_beta_calib(p, y [, propensity [, clip]])",
    sql_example = r#"```sql
> SELECT m['method'] AS method, m['a'] >= 0 AND m['b'] >= 0 AS monotone
  FROM (SELECT fit_beta_calib(p, y) AS m FROM (VALUES (0.1, 0), (0.2, 0), (0.3, 1), (0.6, 0), (0.7, 1), (0.9, 1)) AS t(p, y));
+--------+----------+
| method | monotone |
+--------+----------+
| beta   | true     |
+--------+----------+
```"#,
    argument(name = "p", description = "The predicted probability, in [0, 1]."),
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
struct FitBetaDoc;

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
values are clipped to [0, 1]. Exact up to `calibsql.fit_exact_cap` distinct scores per group (a session setting, \
default 10,000,000; docs/SEMANTICS.md says what happens past it).",
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
    description = "Histogram binning: n_bins bins, each predicting the positive rate of its rows; an empty bin \
predicts the overall positive rate. With strategy 'uniform' (the default) the bins have equal width over [s_min, \
s_max] and are closed on the left; with 'quantile' (equal-frequency, the baseline of Zhao et al.) the edges are \
`numpy.percentile` of the scores at `linspace(0, 100, n_bins + 1)`, exactly as the binned metrics' 'quantile', the \
bins closed on the right (equal scores share a bin) and the model's method is `histogram_quantile`. The model keeps \
the n_bins + 1 edges in `knots_x` and the rates in `knots_y`; `calibrate` clamps scores into the range.",
    syntax_example = "fit_histogram(score, y [, n_bins [, strategy]])",
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
    ),
    argument(
        name = "strategy",
        description = "'uniform' (equal width, the default) or 'quantile' (equal frequency)."
    )
)]
struct FitHistogramDoc;

/// The partial state of a fit (see `kernel::FitKernel::state`), one row per group.
pub(crate) fn fit_state_fields(name: &str) -> Vec<FieldRef> {
    let f = |n: &str, t: DataType| Arc::new(Field::new(format_state_name(name, n), t, true));
    vec![
        f("grid", DataType::Boolean),
        f("rows", DataType::Int64),
        f("s_min", DataType::Float64),
        f("s_max", DataType::Float64),
        f("keys", list_type(DataType::Int64)),
        f("lo", f64_list_type()),
        f("n", f64_list_type()),
        f("t", f64_list_type()),
        f("nd", f64_list_type()),
        f("nd2", f64_list_type()),
        f("td", f64_list_type()),
        f("td2", f64_list_type()),
    ]
}

/// Most knots `fit_ilps` takes (its Newton system is dense in the knots).
pub const MAX_KNOTS: usize = 1000;

/// `n_knots`: an integer constant in [1, MAX_KNOTS].
fn n_knots(
    func: &str,
    expr: &Arc<dyn datafusion_physical_expr_common::physical_expr::PhysicalExpr>,
) -> Result<usize> {
    let v = literal(func, "n_knots", expr)?;
    let x = crate::common::literal_f64(func, "n_knots", &v)?;
    if x.fract() != 0.0 || !(1.0..=MAX_KNOTS as f64).contains(&x) {
        return plan_err!(
            "{func}: argument n_knots must be an integer in [1, {MAX_KNOTS}], got {v}"
        );
    }
    Ok(x as usize)
}

#[user_doc(
    doc_section(label = "Calibrators"),
    description = "Fits Isotonic Line-Plot Scaling (Pan et al. 2020, eq. 9–11): `σ(η(logit))` with η piecewise linear \
through the knots `a_k = logit(k/(n_knots+1))`, k = 1..n_knots, with ordered values `b_1 <= … <= b_K` (hard \
constraints: the exact optimum of eq. 11 as λ → ∞) and constant outside [a_1, a_K], by minimising the mean log loss \
— or, with `propensity`, the mean IPS log loss with ω = max(propensity, clip). Knots without data (no row in their \
neighbouring intervals) do not change the loss; they get the linear interpolation between the nearest knots with \
data, and the nearest one's value beyond the outermost. The model keeps the knots in `knots_x` and the values (logits) \
in `knots_y`.",
    syntax_example = "fit_ilps(logit, y [, n_knots [, propensity [, clip]]])",
    sql_example = r#"```sql
> SELECT m['method'] AS method, cardinality(m['knots_x']) AS knots, round(calibrate(0.0, m), 4) AS p0
  FROM (SELECT fit_ilps(l, y, 3) AS m FROM (VALUES (-2.0, 0), (-1.0, 0), (-1.0, 1), (1.0, 0), (1.0, 1), (2.0, 1)) AS t(l, y));
+--------+-------+-----+
| method | knots | p0  |
+--------+-------+-----+
| ilps   | 3     | 0.5 |
+--------+-------+-----+
```"#,
    argument(name = "logit", description = "The model's logit (any finite number)."),
    argument(name = "y", description = "Observed label: Boolean or a number 0/1."),
    argument(
        name = "n_knots",
        description = "Number of knots K, an integer constant in [1, 1000]. Default 100."
    ),
    argument(
        name = "propensity",
        description = "Optional exposure propensity in (0, 1]: fit the debiased IPS loss."
    ),
    argument(
        name = "clip",
        description = "Lower clip of the propensity, a constant in [0, 1]. Default 0.1."
    )
)]
struct FitIlpsDoc;

#[user_doc(
    doc_section(label = "Calibrators"),
    description = "Fits Bayesian Binning into Quantiles exactly as netcal 1.4's `BBQ()` (its default configuration, \
the implementation users compare with): equal-width histograms over [0, 1] for every bin count from \
max(1, floor(N^(1/3)/10)) to min(ceil(N/5), ceil(10·N^(1/3))), each scored by BIC, the best ones kept by netcal's \
elbow rule and averaged with weights exp(−ΔBIC/2). netcal differs from the paper (Naeini et al. 2015: \
equal-frequency bins, BDeu score) and says so; calibsql follows netcal, in float64 where netcal uses float32, so \
probabilities agree with netcal's to about 1e-5. The model is the averaged step function: edges in `knots_x`, the \
value on each (x_i, x_i+1] in `knots_y`; `iterations` holds the number of histograms kept.",
    syntax_example = "fit_bbq(p, y)",
    sql_example = r#"```sql
> SELECT m['method'] AS method, calibrate(0.05, m) < calibrate(0.95, m) AS increasing
  FROM (SELECT fit_bbq(p, y) AS m FROM (VALUES (0.05, 0), (0.1, 0), (0.2, 0), (0.3, 1), (0.6, 0), (0.7, 1), (0.8, 1), (0.95, 1)) AS t(p, y));
+--------+------------+
| method | increasing |
+--------+------------+
| bbq    | true       |
+--------+------------+
```"#,
    argument(name = "p", description = "The predicted probability, in [0, 1]."),
    argument(name = "y", description = "Observed label: Boolean or a number 0/1.")
)]
struct FitBbqDoc;

/// One of the `fit_*` aggregates.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Fit {
    method: FitMethod,
    signature: Signature,
    /// Distinct scores kept exactly per group; `None`: the method's default.
    exact_cap: Option<usize>,
}

/// `new(method)` and `capped(cap)` of a fitting aggregate: a struct with fields `method`,
/// `signature` and `exact_cap`, and a `shape()`.
macro_rules! fit_constructors {
    ($t:ident) => {
        impl $t {
            pub fn new(method: FitMethod) -> Self {
                let mut f = Self {
                    method,
                    signature: Signature::user_defined(Volatility::Immutable),
                    exact_cap: None,
                };
                f.signature = f.shape().signature();
                f
            }

            /// This fit with `cap` distinct scores kept exactly, if its cap is a setting (the
            /// non-parametric fits).
            pub(crate) fn capped(&self, cap: usize) -> Option<Self> {
                self.method.cap_is_a_setting().then(|| Self {
                    method: self.method,
                    signature: self.signature.clone(),
                    exact_cap: Some(cap),
                })
            }
        }
    };
}
pub(crate) use fit_constructors;

fit_constructors!(Fit);

impl Fit {
    fn shape(&self) -> CallShape {
        CallShape {
            name: self.method.function_name(),
            required: match self.method {
                FitMethod::Temperature | FitMethod::Ilps => TEMPERATURE_ARGS,
                FitMethod::Beta | FitMethod::Bbq => BETA_ARGS,
                _ => FIT_ARGS,
            },
            optional: match self.method {
                FitMethod::Histogram => &[Arg::LitInt("n_bins"), Arg::LitStr("strategy")],
                FitMethod::Bbq => &[],
                FitMethod::Ilps => &[
                    Arg::LitInt("n_knots"),
                    Arg::Num("propensity"),
                    Arg::LitNum("clip"),
                ],
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
            FitMethod::Ilps => (
                match args.exprs.get(2) {
                    Some(e) => n_knots(func, e)?,
                    None => DEFAULT_KNOTS,
                },
                (args.exprs.len() > 3).then_some(3),
                match args.exprs.get(4) {
                    Some(e) => {
                        literal_checked(func, "clip", e, "in [0, 1]", |x| (0.0..=1.0).contains(&x))?
                    }
                    None => DEFAULT_FIT_CLIP,
                },
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
        let quantile = match (self.method, args.exprs.get(3)) {
            (FitMethod::Histogram, Some(e)) => {
                let v = literal(func, "strategy", e)?;
                match Strategy::parse(func, &v)? {
                    Strategy::Uniform => false,
                    Strategy::Quantile => true,
                    _ => {
                        return plan_err!(
                            "{func}: argument strategy must be 'uniform' or 'quantile', got {v}"
                        )
                    }
                }
            }
            _ => false,
        };
        Ok(FitKernel {
            method: self.method,
            cap: self.exact_cap.unwrap_or(self.method.exact_cap()),
            bins,
            quantile,
            prop_col,
            clip,
            groups: vec![],
            bytes: 0,
        })
    }
}

kernel_aggregate!(Fit, false, capped);

impl AggregateUDFImpl for Fit {
    kernel_udaf_common!();

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.shape().coerce(arg_types)?;
        Ok(crate::model::model_type())
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(fit_state_fields(args.name))
    }

    fn documentation(&self) -> Option<&Documentation> {
        match self.method {
            FitMethod::Platt => FitPlattDoc.doc(),
            FitMethod::Temperature => FitTemperatureDoc.doc(),
            FitMethod::Beta => FitBetaDoc.doc(),
            FitMethod::Gaussian => FitGaussianDoc.doc(),
            FitMethod::Gamma => FitGammaDoc.doc(),
            FitMethod::Isotonic => FitIsotonicDoc.doc(),
            FitMethod::Histogram => FitHistogramDoc.doc(),
            FitMethod::Ilps => FitIlpsDoc.doc(),
            FitMethod::Bbq => FitBbqDoc.doc(),
            // Served by `field::FieldFit`.
            FitMethod::ConfCalib | FitMethod::FieldCalib => None,
        }
    }
}
