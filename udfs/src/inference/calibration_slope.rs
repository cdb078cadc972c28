//! `calibration_slope(p, y [, w])`: logistic recalibration (Cox 1958; rms `val.prob`'s
//! "Intercept" and "Slope") and calibration-in-the-large, with standard errors.
//!
//! - `logit P(y = 1) = a + b·logit(p)`: intercept a, slope b (1 and 0 when calibrated);
//! - `logit P(y = 1) = citl + logit(p)` (an offset): calibration-in-the-large (0 when calibrated);
//!
//! by maximum likelihood (Newton's method with step halving, from the calibrated (0, 1) and 0),
//! standard errors the square roots of the inverse observed information's diagonal at the
//! optimum, as statsmodels `GLM(Binomial)`'s `params` / `bse` with `freq_weights = w`. Rows with
//! p = 0 or 1 are skipped (their logit is infinite, as rms drops them) and not counted in `n`.
//!
//! The state is the parametric fits' (`fit_platt`'s), with the score logit(p): exact up to
//! [`EXACT_CAP`] distinct logits per group, then each grid cell enters the likelihood as the
//! fits' two-point rule (see the `fit` module): the terms linear in y are exact, the softplus
//! term's error is of order (b·width)³ per row (below 1e-12 of the log-likelihood in the fits'
//! measurements). So the state is bounded (about 2 MB a group) whatever the rows, as a
//! parametric fit's is; the session's `calibsql.fit_exact_cap` does not apply.

use arrow::array::ArrayRef;
use arrow::datatypes::{DataType, Field, FieldRef, Fields};
use datafusion_common::Result;
use datafusion_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion_expr::Signature;
use datafusion_macros::user_doc;

use super::points::PointsKernel;
use super::struct_column;
use crate::common::{args, weight_col, CallShape};
use crate::fit::{FitState, Method, EXACT_CAP};
use crate::kernel::{kernel_aggregate, kernel_udaf_common, signature_from_shape};
use crate::scalars::sigmoid;

#[user_doc(
    doc_section(label = "Calibration Tests"),
    description = "Logistic recalibration of the predictions: `logit P(y) = intercept + slope·logit(p)` (a calibrated \
model has intercept 0 and slope 1; a slope below 1 means overconfident, too extreme predictions), and the \
calibration-in-the-large `citl` of `logit P(y) = citl + logit(p)` (0 when the mean prediction is right), by weighted \
maximum likelihood, each with its standard error from the observed information, as \
`{intercept, slope, citl, intercept_se, slope_se, citl_se, n}` — statsmodels `GLM(Binomial)` `params` and `bse`. \
Rows with p = 0 or 1 are skipped and not counted in `n` (as R `rms::val.prob`). Exact up to \
65,536 distinct p per group; past it p's logits are pooled into the parametric fits' grid (relative error of the \
likelihood below about 1e-12), so the state stays small on any number of rows. NaN estimates when the maximum likelihood estimate does \
not exist (one class only, perfect separation, or for intercept and slope a single distinct p). NULL when no row \
is usable or every weight is 0.",
    syntax_example = "calibration_slope(p, y [, w])",
    sql_example = r#"```sql
> SELECT round(c['slope'], 6) AS slope, round(c['citl'], 6) AS citl, c['n'] AS n FROM (SELECT calibration_slope(p, y) AS c FROM (VALUES (0.2, 0), (0.2, 1), (0.4, 0), (0.6, 1), (0.8, 1), (0.8, 0), (0.9, 1), (1.0, 1)) AS t(p, y));
+---------+---------+---+
| slope   | citl    | n |
+---------+---------+---+
| 0.47349 | 0.08286 | 7 |
+---------+---------+---+
```"#
)]
struct CalibrationSlopeDoc;

const F64_OUT: [&str; 6] = [
    "intercept",
    "slope",
    "citl",
    "intercept_se",
    "slope_se",
    "citl_se",
];

fn out_fields() -> Fields {
    let mut f: Vec<Field> = F64_OUT
        .iter()
        .map(|n| Field::new(*n, DataType::Float64, true))
        .collect();
    f.push(Field::new("n", DataType::Int64, true));
    Fields::from(f)
}

/// `calibration_slope`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct CalibrationSlope {
    signature: Signature,
}

const SHAPE: CallShape = CallShape {
    name: "calibration_slope",
    required: &[args::P, args::Y],
    optional: &[args::W],
};

signature_from_shape!(CalibrationSlope, SHAPE);

impl CalibrationSlope {
    /// A parametric fit's state: [`EXACT_CAP`] distinct logits exactly, then Platt's grid.
    fn kernel(&self, args: &AccumulatorArgs) -> Result<PointsKernel> {
        Ok(PointsKernel::new(
            "calibration_slope",
            weight_col(args.exprs, 2),
            (Method::Platt, EXACT_CAP),
            evaluate,
        ))
    }
}

kernel_aggregate!(CalibrationSlope, false);

impl datafusion_expr::AggregateUDFImpl for CalibrationSlope {
    kernel_udaf_common!(returns DataType::Struct(out_fields()));

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(crate::fit::fit_state_fields(args.name))
    }

    fn documentation(&self) -> Option<&datafusion_expr::Documentation> {
        crate::common::documented(CalibrationSlopeDoc.doc(), &SHAPE)
    }
}

/// `ln(1 + eˣ)` without overflow.
fn softplus(x: f64) -> f64 {
    x.max(0.0) + (-x.abs()).exp().ln_1p()
}

/// Quadrature nodes (score, weight of the softplus term, weight of the linear term).
type Nodes = [(f64, f64, f64)];

/// The log-likelihood `Σ t·η − n·softplus(η)` of `η = a + b·s`.
fn log_lik(nodes: &Nodes, a: f64, b: f64) -> f64 {
    nodes
        .iter()
        .map(|&(s, n, t)| {
            let eta = a + b * s;
            t * eta - n * softplus(eta)
        })
        .sum()
}

/// Gradient and (negated) Hessian of [`log_lik`] in (a, b): `[g_a, g_b]`, `[h_aa, h_ab, h_bb]`.
fn derivatives(nodes: &Nodes, a: f64, b: f64) -> ([f64; 2], [f64; 3]) {
    let (mut g, mut h) = ([0.0; 2], [0.0; 3]);
    for &(s, n, t) in nodes {
        let mu = sigmoid(a + b * s);
        let r = t - n * mu;
        let v = n * mu * (1.0 - mu);
        g[0] += r;
        g[1] += r * s;
        h[0] += v;
        h[1] += v * s;
        h[2] += v * s * s;
    }
    (g, h)
}

const MAX_ITERATIONS: usize = 200;

/// Whether the labels are separated by the score: one class only, or every point with
/// negatives at or below every point with positives, or the reverse. Then the likelihood has
/// no finite maximum in (a, b) (and none in citl with one class only).
fn separated(pts: &[(f64, f64, f64)]) -> (bool, bool) {
    let (mut neg, mut pos) = (
        [f64::INFINITY, f64::NEG_INFINITY],
        [f64::INFINITY, f64::NEG_INFINITY],
    );
    for &(s, n, t) in pts {
        if t > 0.0 {
            pos = [pos[0].min(s), pos[1].max(s)];
        }
        if n - t > 0.0 {
            neg = [neg[0].min(s), neg[1].max(s)];
        }
    }
    let one_class = pos[0] > pos[1] || neg[0] > neg[1];
    (one_class, one_class || neg[1] <= pos[0] || pos[1] <= neg[0])
}

/// Newton's method with step halving for `max log_lik` over (a, b), or over a alone with b
/// fixed at 1 (`with_slope` false), for data that are not separated. It stops once the Newton
/// decrement `g·H⁻¹g` (twice the likelihood still to gain) is within rounding of the
/// likelihood, after that full step and one more (the convergence is quadratic, so that step leaves
/// the estimates at rounding level). Returns the optimum and the negated Hessian there, or
/// None when the Hessian is singular (a single distinct score) or it does not converge.
fn maximise(nodes: &Nodes, with_slope: bool) -> Option<([f64; 2], [f64; 3])> {
    let (mut a, mut b) = (0.0, 1.0);
    let mut ll = log_lik(nodes, a, b);
    let mut last = false;
    for _ in 0..MAX_ITERATIONS {
        let (g, h) = derivatives(nodes, a, b);
        let (da, db) = if with_slope {
            let det = h[0] * h[2] - h[1] * h[1];
            if det.is_nan() || det <= 0.0 {
                return None;
            }
            (
                (h[2] * g[0] - h[1] * g[1]) / det,
                (h[0] * g[1] - h[1] * g[0]) / det,
            )
        } else {
            if h[0].is_nan() || h[0] <= 0.0 {
                return None;
            }
            (g[0] / h[0], 0.0)
        };
        if !(da.is_finite() && db.is_finite()) {
            return None;
        }
        if last {
            a += da;
            b += db;
            return Some(([a, b], derivatives(nodes, a, b).1));
        }
        let decrement = g[0] * da + g[1] * db;
        if decrement <= 1e-12 * ll.abs().max(1.0) {
            a += da;
            b += db;
            last = true;
            continue;
        }
        let mut step = 1.0;
        loop {
            let (na, nb) = (a + step * da, b + step * db);
            let nll = log_lik(nodes, na, nb);
            // Accept any step that does not lower the likelihood beyond rounding.
            if nll >= ll - 1e-12 * ll.abs() || step < 1e-10 {
                a = na;
                b = nb;
                ll = nll;
                break;
            }
            step /= 2.0;
        }
    }
    None
}

/// The recalibration of one group's state: the six estimates, or None (NULL) when no row has
/// weight.
fn recalibrate(st: &FitState) -> Option<[f64; 6]> {
    let nodes = st.nodes();
    if !nodes.iter().any(|node| node.1 > 0.0) {
        return None;
    }
    let nan = f64::NAN;
    let (one_class, separated) = separated(&st.sorted_points());
    let fit = |with_slope: bool| {
        let exists = if with_slope { !separated } else { !one_class };
        exists.then(|| maximise(&nodes, with_slope)).flatten()
    };
    let (a, b, a_se, b_se) = match fit(true) {
        Some(([a, b], h)) => {
            let det = h[0] * h[2] - h[1] * h[1];
            (a, b, (h[2] / det).sqrt(), (h[0] / det).sqrt())
        }
        None => (nan, nan, nan, nan),
    };
    let (c, c_se) = match fit(false) {
        Some(([c, _], h)) => (c, 1.0 / h[0].sqrt()),
        None => (nan, nan),
    };
    Some([a, b, c, a_se, b_se, c_se])
}

/// The values of groups' states (None: no usable row, NULL).
fn evaluate(states: &[Option<&FitState>]) -> Result<ArrayRef> {
    let rows: Vec<Option<[Option<f64>; 7]>> = states
        .iter()
        .map(|st| {
            let st = (*st)?;
            let [a, b, c, d, e, f] = recalibrate(st)?;
            // n, a row count, is exact in a double below 2⁵³ and cast to Int64.
            Some([a, b, c, d, e, f, st.rows as f64].map(Some))
        })
        .collect();
    struct_column(&out_fields(), &rows)
}
