//! Calibrators fitted as aggregates, one file each, listed once in `calibrators!` below:
//! `fit_platt` (platt.rs), `fit_temperature` (temperature.rs), `fit_beta_calib` (beta.rs),
//! `fit_gaussian_calib` (gaussian.rs), `fit_gamma_calib` (gamma.rs), `fit_isotonic`
//! (isotonic.rs), `fit_histogram` (histogram.rs), `fit_ilps` (ilps.rs), `fit_bbq` (bbq.rs),
//! and the field-aware `fit_confcalib` (confcalib.rs) and `fit_field_calib`
//! (field_calib.rs). Each is a `calibrator::Calibrator`: its signature, documentation, fit
//! and application. Each fit returns the one model struct of [`crate::model`], which
//! `calibrate(score, model [, field])` applies through the model's [`Method`].
//!
//! The aggregates themselves are shared: [`Fit`] (this file) and [`FieldFit`] (field.rs)
//! around the kernel of kernel.rs, which keeps the state of state.rs (exact points, then the
//! grid of grid.rs); the parametric fits share parametric.rs's solver, the non-parametric
//! ones nonparametric.rs's loss and quantile edges.
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
//! score: Σ1 and Σt (hashed, or appended and sorted: see state.rs). Up to [`EXACT_CAP`] distinct scores per group this is exact
//! ([`NONPARAMETRIC_EXACT_CAP`] for the fits compared point by point). Beyond that the state
//! switches to a fixed grid of cells — 2^k cells per power of two of |s| (relative width
//! 2⁻ᵏ) and two linear blocks of 2^k cells of width 2⁻¹⁶⁻ᵏ for |s| < 2⁻¹⁶, k =
//! [`Method::grid_bits`] — keeping per cell Σ1, Σt and the first two moments of the
//! offset d = s − a from the cell's anchor a (its bound nearer zero) under both weights. A
//! cell enters the objective as the two-point rule m ± σ that matches those moments, which
//! is exact for the terms linear in t (f is quadratic in s for Platt and Gaussian) and leaves
//! an error of order max|softplus‴|·(f′·width)³ per row in the softplus term (measured on
//! 100,000 distinct logits, `tests/fits/fit_grid.rs`: at most 4e-12 relative at 128 cells, 1.6e-12
//! at 256, 1e-14 at 1024). The parametric fits use 128 cells, which keeps the cells a batch
//! touches in cache between the Parquet decoding's evictions (the measurements are in
//! `docs/performance.md`). The non-parametric fits' knots move with the cells, so they keep
//! 256.
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

use crate::common::{
    args, documented, f64_list_type, list_type, literal, literal_checked, n_bins, weight_col,
    CallShape,
};
use crate::kernel::{kernel_aggregate, kernel_udaf_common};
use crate::metrics::binning::Strategy;

mod bbq;
mod beta;
pub(crate) mod calibrator;
mod confcalib;
mod field;
mod field_calib;
mod gamma;
mod gaussian;
mod grid;
mod histogram;
mod ilps;
mod isotonic;
mod kernel;
mod nonparametric;
mod ovr;
mod parametric;
mod platt;
mod softmax;
mod state;
mod temperature;

pub use field::FieldFit;
pub use ovr::FitOvr;

use calibrator::{Calibrator, Settings};
use grid::{COARSE_BITS, FINE_BITS};
// The fits' kernel and state: the inference functions that need every distinct score
// (`crate::inference`) keep them in these too.
pub(crate) use calibrator::Settings as FitSettings;
pub(crate) use kernel::FitKernel;
pub(crate) use softmax::softmax_at;
pub(crate) use state::FitState;

/// Distinct scores the parametric fits keep exactly per group before switching to the fixed
/// grid (their objective on the grid is within 4e-12 of the exact one, and the grid is
/// faster to update).
pub const EXACT_CAP: usize = 1 << 16;
/// Distinct scores the non-parametric fits (isotonic, histogram, BBQ, ConfCalib) keep
/// exactly per group: they are compared with scikit-learn / numpy / netcal point by point,
/// and pooling scores into grid cells moves their knots. About 24 bytes a distinct score and
/// 8 a row not yet sorted in (see `state`), reported to the memory pool (10M distinct scores:
/// about 300 MB in one group while it sorts).
pub const NONPARAMETRIC_EXACT_CAP: usize = 10_000_000;

/// Lists the calibrators: each line `Variant = "stored method" => calibrator,` defines a
/// value of the model's `method` and the [`Calibrator`] that writes and applies it. A
/// calibrator whose fit can write two methods (`fit_histogram`) has a line for each; the
/// first line of a calibrator names its fitting aggregate.
macro_rules! calibrators {
    ($($variant:ident = $stored:literal => $calibrator:expr,)*) => {
        /// A model's calibration method: the `method` field of the model struct, stored as
        /// text ([`Method::as_str`]; models written by earlier versions keep loading, see
        /// `tests/fits/stored_models.rs`).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Method {
            $($variant,)*
        }

        impl Method {
            /// Every method, in registry order.
            pub const ALL: &'static [Method] = &[$(Method::$variant,)*];

            /// The stored text.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Method::$variant => $stored,)*
                }
            }

            /// The method stored as `s`, if any.
            pub fn parse(s: &str) -> Option<Method> {
                match s {
                    $($stored => Some(Method::$variant),)*
                    _ => None,
                }
            }

            pub(crate) fn calibrator(self) -> &'static dyn Calibrator {
                match self {
                    $(Method::$variant => &$calibrator,)*
                }
            }
        }
    };
}

calibrators! {
    Platt = "platt" => platt::Platt,
    Temperature = "temperature" => temperature::Temperature,
    Beta = "beta" => beta::Beta,
    Gaussian = "gaussian" => gaussian::Gaussian,
    Gamma = "gamma" => gamma::Gamma,
    Isotonic = "isotonic" => isotonic::Isotonic,
    Histogram = "histogram" => histogram::Histogram,
    HistogramQuantile = "histogram_quantile" => histogram::Histogram,
    Ilps = "ilps" => ilps::Ilps,
    Bbq = "bbq" => bbq::Bbq,
    FieldCalib = "field_calib" => field_calib::FieldCalib,
    ConfCalib = "confcalib" => confcalib::ConfCalib,
}

impl Method {
    /// The aggregate that fits it (`fit_platt`).
    pub fn function_name(self) -> &'static str {
        self.calibrator().shape().name
    }

    /// The methods that name a fitting aggregate (all but the second method of a
    /// calibrator, `histogram_quantile`), in registry order.
    pub fn fitted() -> impl Iterator<Item = Method> {
        Method::ALL.iter().copied().filter(|m| {
            Method::ALL
                .iter()
                .find(|o| o.function_name() == m.function_name())
                == Some(m)
        })
    }

    /// Distinct scores kept exactly per group before the grid.
    pub fn exact_cap(self) -> usize {
        self.calibrator().exact_cap()
    }

    /// The grid's resolution past the exact cap: 2^bits cells per power of two.
    pub fn grid_bits(self) -> u32 {
        if self.exact_cap() == NONPARAMETRIC_EXACT_CAP {
            FINE_BITS
        } else {
            COARSE_BITS
        }
    }

    /// Whether the session setting `calibsql.fit_exact_cap` applies (the non-parametric fits,
    /// compared with their references point by point).
    pub fn cap_is_a_setting(self) -> bool {
        self.exact_cap() == NONPARAMETRIC_EXACT_CAP
    }

    /// Whether the score is a probability (checked to lie in [0, 1]).
    pub fn takes_probability(self) -> bool {
        self.calibrator().takes_probability()
    }

    /// The fitting aggregate's documentation: the calibrator's, its argument table completed
    /// with the shared argument texts (`crate::common::args`).
    pub(crate) fn documentation(self) -> Option<&'static Documentation> {
        let c = self.calibrator();
        documented(c.documentation(), &c.shape())
    }

    /// Whether the fit and `calibrate` take a field.
    pub fn is_field_aware(self) -> bool {
        self.calibrator().field_aware()
    }
}

/// The fields of [`fit_state_fields`] added after the first stored states: each class's kept
/// rows (`neg_s`, `pos_s`). A stored state without them merges as one whose rows are all in
/// its points.
pub(crate) const STATE_FIELDS_ADDED: usize = 2;

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
        f("neg_s", f64_list_type()),
        f("pos_s", f64_list_type()),
    ]
}

/// Most knots `fit_ilps` takes (its Newton system is dense in the knots).
pub const MAX_KNOTS: usize = 1000;

/// `n_knots`: an integer constant in [1, MAX_KNOTS].
fn n_knots(
    func: &str,
    expr: &Arc<dyn datafusion_physical_expr_common::physical_expr::PhysicalExpr>,
) -> Result<usize> {
    crate::common::literal_int_in(func, "n_knots", expr, 1, MAX_KNOTS)
}

/// One of the `fit_*` aggregates.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Fit {
    method: Method,
    signature: Signature,
    /// Distinct scores kept exactly per group; `None`: the method's default.
    exact_cap: Option<usize>,
}

/// `new(method)` and `capped(cap)` of a fitting aggregate: a struct with fields `method`,
/// `signature` and `exact_cap`, and a `shape()`.
macro_rules! fit_constructors {
    ($t:ident) => {
        impl $t {
            pub fn new(method: Method) -> Self {
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

/// What a fit's call says beyond [`Settings`]: its propensity and weight columns and the
/// propensity's clip.
struct Columns {
    propensity: Option<usize>,
    w: Option<usize>,
    clip: f64,
}

/// The settings and columns of a call of `shape`'s function that gives no optional argument.
fn default_settings(shape: &CallShape) -> (Settings, Columns) {
    let default = |name: &str| -> f64 {
        shape
            .optional
            .iter()
            .find(|a| a.name == name)
            .and_then(|a| a.default)
            .and_then(|d| d.parse().ok())
            .unwrap_or(0.0)
    };
    let settings = Settings {
        count: default("n_bins").max(default("n_knots")) as usize,
        quantile: false,
        ips: false,
        lambda: default("lambda").max(default("l2")),
    };
    let columns = Columns {
        propensity: None,
        w: None,
        clip: default("clip"),
    };
    (settings, columns)
}

/// The settings of a call of `shape`'s function (see [`Settings`]) and its [`Columns`], read
/// from its optional arguments by name; an argument left out takes the default its signature
/// declares (a propensity or weight that is the constant 1 is no column: no debiasing, no
/// weight).
fn settings(shape: &CallShape, args: &AccumulatorArgs) -> Result<(Settings, Columns)> {
    let func = shape.name;
    let (mut settings, mut columns) = default_settings(shape);
    for (j, a) in shape.optional.iter().enumerate() {
        let i = shape.required.len() + j;
        let Some(e) = args.exprs.get(i) else {
            break;
        };
        match a.name {
            "n_bins" => settings.count = n_bins(func, e)?,
            "n_knots" => settings.count = n_knots(func, e)?,
            "strategy" => {
                let v = literal(func, "strategy", e)?;
                settings.quantile = match Strategy::parse(func, &v)? {
                    Strategy::Uniform => false,
                    Strategy::Quantile => true,
                    _ => {
                        return plan_err!(
                            "{func}: argument strategy must be 'uniform' or 'quantile', got {v}"
                        )
                    }
                };
            }
            "propensity" => {
                columns.propensity = weight_col(args.exprs, i);
                settings.ips = columns.propensity.is_some();
            }
            "w" => columns.w = weight_col(args.exprs, i),
            "clip" => {
                columns.clip =
                    literal_checked(func, "clip", e, "in [0, 1]", |x| (0.0..=1.0).contains(&x))?
            }
            name @ ("lambda" | "l2") => {
                settings.lambda = literal_checked(func, name, e, "finite and >= 0", |x| {
                    x.is_finite() && x >= 0.0
                })?
            }
            _ => {}
        }
    }
    Ok((settings, columns))
}

impl Fit {
    fn shape(&self) -> CallShape {
        self.method.calibrator().shape()
    }

    /// Whether a call with these argument types is `fit_temperature` on a list of logits.
    fn on_list(&self, arg_types: &[DataType]) -> bool {
        self.method == Method::Temperature
            && arg_types.first().is_some_and(crate::multiclass::is_list)
    }

    /// The shape of a call with these argument types: `fit_temperature`'s on a list of
    /// logits when it is one (the same optional arguments, so that `w => …` names the same
    /// position).
    fn shape_for(&self, arg_types: &[DataType]) -> CallShape {
        if self.on_list(arg_types) {
            CallShape {
                required: &[args::LOGITS, args::LABEL],
                ..self.shape()
            }
        } else {
            self.shape()
        }
    }

    fn kernel(&self, args: &AccumulatorArgs) -> Result<FitCall> {
        let types: Vec<DataType> = args
            .expr_fields
            .iter()
            .map(|f| f.data_type().clone())
            .collect();
        let (settings, columns) = settings(&self.shape(), args)?;
        if self.on_list(&types) {
            if columns.propensity.is_some() {
                return plan_err!(
                    "fit_temperature: argument propensity is not taken on a list of logits (IPS debiasing is binary)"
                );
            }
            return Ok(FitCall::Softmax(softmax::SoftmaxKernel::new(columns.w)));
        }
        Ok(FitCall::Binary(FitKernel {
            method: self.method,
            cap: self.exact_cap.unwrap_or(self.method.exact_cap()),
            settings,
            prop_col: columns.propensity,
            w_col: columns.w,
            reported_as: None,
            clip: columns.clip,
            groups: vec![],
            bytes: 0,
            held: crate::values::spill::Held::new(self.method.function_name()),
        }))
    }
}

crate::kernel::either_kernel!(
    /// A fit's kernel for a call: on a score, or `fit_temperature` on a list of logits.
    FitCall {
        Binary(FitKernel),
        Softmax(softmax::SoftmaxKernel),
    }
);

kernel_aggregate!(Fit, false, capped);

impl AggregateUDFImpl for Fit {
    kernel_udaf_common!(returns crate::model::model_type(), shape_for);

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        let types: Vec<DataType> = args
            .input_fields
            .iter()
            .map(|f| f.data_type().clone())
            .collect();
        Ok(if self.on_list(&types) {
            softmax::softmax_state_fields(args.name)
        } else {
            fit_state_fields(args.name)
        })
    }

    fn documentation(&self) -> Option<&Documentation> {
        self.method.documentation()
    }
}
