//! Scalar helpers: `sigmoid`, `logit`, the Wilson interval and ConfCalib's deviation score and
//! multiplier [Zhao et al. eq. 1–3], the popularity propensity [Kweon et al.; Liang eq. 6.6],
//! and the correction of a model trained on downsampled negatives [He et al. 2014, §6.3].
//!
//! Every argument is read as Float64; a NULL argument gives NULL; a bad value is an execution
//! error naming the function, the argument and the value.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, Float64Array, StructArray};
use arrow::datatypes::{DataType, Field, FieldRef, Fields};
use datafusion_common::{exec_err, internal_err, plan_err, Result, ScalarValue};
use datafusion_expr::{
    ColumnarValue, Documentation, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDFImpl, Signature,
};
use datafusion_macros::user_doc;

use crate::common::{check_p, literal_f64, Arg, CallShape};

/// Default bound of ConfCalib's shrunk deviation (the 95% two-sided normal quantile).
pub const DEFAULT_LAMBDA: f64 = 1.96;
/// Default exponent of the popularity propensity [Kweon et al.].
pub const DEFAULT_ETA: f64 = 0.5;
/// Default lower clip of the popularity propensity.
pub const DEFAULT_PROPENSITY_CLIP: f64 = 0.1;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ScalarKind {
    Sigmoid,
    Logit,
    WilsonInterval,
    WilsonZ,
    ConfCalibMultiplier,
    PopularityPropensity,
    DownsampleCorrect,
}

#[user_doc(
    doc_section(label = "Calibration Helpers"),
    description = "The logistic function `1/(1+e^{−x})`, computed without overflow for any x.",
    syntax_example = "sigmoid(x)",
    sql_example = r#"```sql
> SELECT sigmoid(0) AS a, sigmoid(-1000) AS b;
+-----+-----+
| a   | b   |
+-----+-----+
| 0.5 | 0.0 |
+-----+-----+
```"#
)]
struct SigmoidDoc;

#[user_doc(
    doc_section(label = "Calibration Helpers"),
    description = "The log-odds `ln(p/(1−p))`; −Infinity at 0 and +Infinity at 1.",
    syntax_example = "logit(p)",
    sql_example = r#"```sql
> SELECT logit(0.5) AS a, logit(1) AS b;
+-----+-----+
| a   | b   |
+-----+-----+
| 0.0 | inf |
+-----+-----+
```"#
)]
struct LogitDoc;

#[user_doc(
    doc_section(label = "Calibration Helpers"),
    description = "The Wilson score interval (Zhao et al. eq. 1) of an observed positive rate over n samples at \
normal quantile z, as a struct `{lower, upper}`: `(r + z²/2n)/(1 + z²/n) ∓ z/(1 + z²/n)·sqrt(r(1−r)/n + z²/4n²)`. \
NULL when n <= 0.",
    syntax_example = "wilson_interval(pos_rate, n, z)",
    sql_example = r#"```sql
> SELECT round(w['lower'], 4) AS lower, round(w['upper'], 4) AS upper FROM (SELECT wilson_interval(0.5, 100, 1.96) AS w);
+--------+--------+
| lower  | upper  |
+--------+--------+
| 0.4038 | 0.5962 |
+--------+--------+
```"#
)]
struct WilsonIntervalDoc;

#[user_doc(
    doc_section(label = "Calibration Helpers"),
    description = "ConfCalib's deviation score (Zhao et al. §3.2): the z >= 0 at which `p_hat` is a bound of the \
Wilson interval around the observed `pos_rate` with n samples, `|pos_rate − p_hat|·sqrt(n/(p_hat(1 − p_hat)))`. \
0 when they are equal or n = 0; +Infinity when p_hat is 0 or 1 and differs from pos_rate.",
    syntax_example = "wilson_z(p_hat, pos_rate, n)",
    sql_example = r#"```sql
> SELECT wilson_z(0.5, 0.75, 100) AS z;
+-----+
| z   |
+-----+
| 5.0 |
+-----+
```"#
)]
struct WilsonZDoc;

#[user_doc(
    doc_section(label = "Calibration Helpers"),
    description = "ConfCalib's per-subset scale (Zhao et al. eq. 2–3): with `z = wilson_z(p_hat, pos_rate, n)` and \
the bounded `z' = λ(2/(1+e^{−z/2}) − 1)`, the Wilson bound at z' around pos_rate on the side of p_hat, divided by \
p_hat. 1 when p_hat equals pos_rate or n = 0. Multiply predictions of the subset by it; fuse fields with \
`p · Π m_k^{w_k}`. p_hat = 0 with pos_rate > 0 is an error (0 cannot be rescaled).",
    syntax_example = "confcalib_multiplier(p_hat, pos_rate, n [, lambda])",
    sql_example = r#"```sql
> SELECT round(confcalib_multiplier(0.5, 0.5, 100), 6) AS same, confcalib_multiplier(0.2, 0.1, 0) AS no_data;
+------+---------+
| same | no_data |
+------+---------+
| 1.0  | 1.0     |
+------+---------+
```"#
)]
struct ConfCalibMultiplierDoc;

#[user_doc(
    doc_section(label = "Calibration Helpers"),
    description = "The popularity exposure estimate (Kweon et al.; Liang eq. 6.6): `max((count/max_count)^eta, clip)`, \
the probability that an item with `count` interactions was shown, relative to the most popular item.",
    syntax_example = "popularity_propensity(count, max_count [, eta [, clip]])",
    sql_example = r#"```sql
> SELECT popularity_propensity(25, 100) AS a, popularity_propensity(0, 100) AS b;
+-----+-----+
| a   | b   |
+-----+-----+
| 0.5 | 0.1 |
+-----+-----+
```"#
)]
struct PopularityPropensityDoc;

#[user_doc(
    doc_section(label = "Calibration Helpers"),
    description = "The probability a model trained on negatives kept at `rate` predicts, corrected to the \
population it was sampled from (He et al. 2014, \"Practical lessons from predicting clicks on ads at \
Facebook\", §6.3): `q = p / (p + (1 − p)/rate)`, the same as `sigmoid(logit(p) + ln(rate))`. 0 and 1 stay; \
rate 1 changes nothing. Apply it before any calibrator fitted on the full population's labels.",
    syntax_example = "downsample_correct(p, rate)",
    sql_example = r#"```sql
> SELECT downsample_correct(0.5, 0.1) AS q, downsample_correct(0.2, 1) AS same;
+---------------------+------+
| q                   | same |
+---------------------+------+
| 0.09090909090909091 | 0.2  |
+---------------------+------+
```"#
)]
struct DownsampleCorrectDoc;

/// One of the scalar helpers.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct CalibScalar {
    kind: ScalarKind,
    signature: Signature,
}

crate::kernel::signature_from_shape!(CalibScalar, kind: ScalarKind);

impl ScalarKind {
    /// This function's name and arguments.
    fn shape(self) -> CallShape {
        const fn num(name: &'static str) -> Arg {
            Arg::num(name)
        }
        const NONE: &[Arg] = &[];
        let (name, required, optional): (_, &'static [Arg], &'static [Arg]) = match self {
            ScalarKind::Sigmoid => (
                "sigmoid",
                const { &[num("x").doc("Any number (a logit or raw score).")] },
                NONE,
            ),
            ScalarKind::Logit => (
                "logit",
                const { &[num("p").doc("A probability in [0, 1].")] },
                NONE,
            ),
            ScalarKind::WilsonInterval => (
                "wilson_interval",
                const {
                    &[
                        num("pos_rate").doc("Observed positive rate in [0, 1]."),
                        num("n").doc("Number of samples (may be a weighted count)."),
                        num("z").doc("Normal quantile, finite and >= 0 (1.96 for 95%)."),
                    ]
                },
                NONE,
            ),
            ScalarKind::WilsonZ => (
                "wilson_z",
                const {
                    &[
                        num("p_hat").doc("Mean predicted probability in [0, 1]."),
                        num("pos_rate").doc("Observed positive rate in [0, 1]."),
                        num("n").doc("Number of samples, >= 0."),
                    ]
                },
                NONE,
            ),
            ScalarKind::ConfCalibMultiplier => (
                "confcalib_multiplier",
                const {
                    &[
                        num("p_hat").doc("Mean predicted probability of the subset, in [0, 1]."),
                        num("pos_rate").doc("Observed positive rate of the subset, in [0, 1]."),
                        num("n").doc("Number of samples in the subset, >= 0."),
                    ]
                },
                const {
                    &[num("lambda").or("1.96").constant().doc("Bound of the shrunk deviation, a constant >= 0. Default 1.96; 0 trusts the observed rate entirely (the multiplier is pos_rate / p_hat, Zhao et al.).")]
                },
            ),
            ScalarKind::PopularityPropensity => (
                "popularity_propensity",
                const {
                    &[
                        num("count").doc("Interactions of the item, >= 0."),
                        num("max_count")
                            .doc("Interactions of the most popular item, > 0 and >= count."),
                    ]
                },
                const {
                    &[
                        num("eta")
                            .or("0.5")
                            .constant()
                            .doc("Exponent, a constant >= 0. Default 0.5."),
                        num("clip")
                            .or("0.1")
                            .constant()
                            .doc("Lower clip, a constant in [0, 1]. Default 0.1."),
                    ]
                },
            ),
            ScalarKind::DownsampleCorrect => (
                "downsample_correct",
                const {
                    &[
                        num("p").doc("Probability predicted by the model trained on the sample, in [0, 1]."),
                        num("rate").doc("Share of the negatives kept in the training sample, in (0, 1] (a column or a constant)."),
                    ]
                },
                NONE,
            ),
        };
        CallShape {
            name,
            required,
            optional,
        }
    }
}

impl CalibScalar {
    /// Constant-only arguments of this function.
    fn literal_args(&self) -> &'static [LiteralArg] {
        match self.kind {
            ScalarKind::ConfCalibMultiplier => &[(3, "lambda", "finite and >= 0", |x| {
                x.is_finite() && x >= 0.0
            })],
            ScalarKind::PopularityPropensity => &[
                (2, "eta", "finite and >= 0", |x| x.is_finite() && x >= 0.0),
                (3, "clip", "in [0, 1]", |x| (0.0..=1.0).contains(&x)),
            ],
            _ => &[],
        }
    }
}

/// The value every row of `array` holds, or `None` if the rows differ. `array` is a
/// coerced (Float64) argument and is not empty.
fn constant_of(array: &ArrayRef) -> Result<Option<ScalarValue>> {
    let first = ScalarValue::try_from_array(array, 0)?;
    let same = match array.as_any().downcast_ref::<Float64Array>() {
        Some(values) if values.null_count() == 0 => {
            let bits = values.value(0).to_bits();
            values.values().iter().all(|v| v.to_bits() == bits)
        }
        Some(values) => values.null_count() == values.len(),
        None => false,
    };
    Ok(same.then_some(first))
}

/// Metadata key of the return field: the constant-only arguments were literals at planning.
const LITERALS_CHECKED: &str = "calibsql.literal_arguments_checked";

/// A constant-only argument: position, name, rule in words, check.
type LiteralArg = (usize, &'static str, &'static str, fn(f64) -> bool);

fn wilson_fields() -> Fields {
    Fields::from(vec![
        Field::new("lower", DataType::Float64, true),
        Field::new("upper", DataType::Float64, true),
    ])
}

impl crate::common::Shaped for CalibScalar {
    fn call_shape(&self) -> Option<CallShape> {
        Some(self.shape())
    }
}

impl ScalarUDFImpl for CalibScalar {
    fn name(&self) -> &str {
        self.shape().name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        self.shape().coerce_lenient(arg_types)
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.shape().coerce(arg_types)?;
        Ok(match self.kind {
            ScalarKind::WilsonInterval => DataType::Struct(wilson_fields()),
            _ => DataType::Float64,
        })
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        let func = self.shape().name;
        for &(i, arg, rule, ok) in self.literal_args() {
            if i >= args.arg_fields.len() {
                continue;
            }
            match args.scalar_arguments.get(i).copied().flatten() {
                // Not a literal: rejected when invoked (information_schema also asks for the
                // return type with no literal values, and must get one).
                None => {}
                Some(v) if v.is_null() => {
                    return plan_err!("{func}: argument {arg} must be a constant, got NULL")
                }
                Some(v) => {
                    let x = literal_f64(func, arg, v)?;
                    if !ok(x) {
                        return plan_err!("{func}: argument {arg} must be {rule}, got {v}");
                    }
                }
            }
        }
        let types: Vec<DataType> = args
            .arg_fields
            .iter()
            .map(|f| f.data_type().clone())
            .collect();
        let field = Field::new(func, self.return_type(&types)?, true);
        // Every constant-only argument given is a literal: say so to `invoke_with_args`,
        // which across the FFI sees those literals as arrays (see there).
        let literals_checked = !self.literal_args().is_empty()
            && self
                .literal_args()
                .iter()
                .filter(|&&(i, ..)| i < args.arg_fields.len())
                .all(|&(i, ..)| args.scalar_arguments.get(i).copied().flatten().is_some());
        Ok(Arc::new(if literals_checked {
            field.with_metadata(
                [(LITERALS_CHECKED.to_string(), "true".to_string())]
                    .into_iter()
                    .collect(),
            )
        } else {
            field
        }))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let func = self.shape().name;
        // A constant-only argument arrives as a scalar here, except across the FFI
        // (datafusion-python), where every argument is an array. Planning marked the return
        // field when those arguments were literals (and checked their values): then an array
        // holding one repeated value is that literal. Without the mark, an array is a column.
        let literals_checked = args.return_field.metadata().contains_key(LITERALS_CHECKED);
        let mut args = args;
        for &(i, arg, rule, ok) in self.literal_args() {
            if let Some(ColumnarValue::Array(array)) = args.args.get(i) {
                if !literals_checked {
                    return plan_err!("{func}: argument {arg} must be a constant");
                }
                if array.is_empty() {
                    continue;
                }
                let Some(value) = constant_of(array)? else {
                    return plan_err!("{func}: argument {arg} must be a constant");
                };
                if value.is_null() {
                    return plan_err!("{func}: argument {arg} must be a constant, got NULL");
                }
                let x = literal_f64(func, arg, &value)?;
                if !ok(x) {
                    return plan_err!("{func}: argument {arg} must be {rule}, got {value}");
                }
                args.args[i] = ColumnarValue::Scalar(value);
            }
        }
        let all_scalar = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let cols: Vec<&Float64Array> = arrays
            .iter()
            .map(|a| a.as_any().downcast_ref::<Float64Array>())
            .collect::<Option<_>>()
            .ok_or_else(|| {
                datafusion_common::internal_datafusion_err!(
                    "{func}: arguments not coerced to Float64"
                )
            })?;
        let len = cols.first().map_or(args.number_rows, |c| c.len());
        let out: ArrayRef = match self.kind {
            ScalarKind::WilsonInterval => wilson_interval_array(&cols, len)?,
            kind => {
                let mut vals = Vec::with_capacity(len);
                let mut row = [0.0f64; 4];
                for i in 0..len {
                    if cols.iter().any(|c| c.is_null(i)) {
                        vals.push(None);
                        continue;
                    }
                    for (k, c) in cols.iter().enumerate() {
                        row[k] = c.value(i);
                    }
                    vals.push(Some(scalar_row(kind, &row[..cols.len()])?));
                }
                Arc::new(Float64Array::from(vals))
            }
        };
        Ok(if all_scalar {
            ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?)
        } else {
            ColumnarValue::Array(out)
        })
    }

    fn documentation(&self) -> Option<&Documentation> {
        let doc = match self.kind {
            ScalarKind::Sigmoid => SigmoidDoc.doc(),
            ScalarKind::Logit => LogitDoc.doc(),
            ScalarKind::WilsonInterval => WilsonIntervalDoc.doc(),
            ScalarKind::WilsonZ => WilsonZDoc.doc(),
            ScalarKind::ConfCalibMultiplier => ConfCalibMultiplierDoc.doc(),
            ScalarKind::PopularityPropensity => PopularityPropensityDoc.doc(),
            ScalarKind::DownsampleCorrect => DownsampleCorrectDoc.doc(),
        };
        crate::common::documented(doc, &self.shape())
    }
}

/// `1/(1+e^{−x})` without overflow.
#[inline]
pub fn sigmoid(x: f64) -> f64 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

/// The Wilson interval of rate `r` over `n > 0` samples at quantile `z`, clamped into [0, 1].
pub fn wilson(r: f64, n: f64, z: f64) -> (f64, f64) {
    let z2 = z * z;
    let denom = 1.0 + z2 / n;
    let center = (r + z2 / (2.0 * n)) / denom;
    let half = z / denom * (r * (1.0 - r) / n + z2 / (4.0 * n * n)).sqrt();
    ((center - half).max(0.0), (center + half).min(1.0))
}

fn check_n(func: &str, n: f64) -> Result<f64> {
    if n >= 0.0 {
        Ok(n)
    } else {
        exec_err!("{func}: argument n must be >= 0, got {n}")
    }
}

/// ConfCalib's deviation score; arguments already checked.
pub fn wilson_z(p_hat: f64, pos_rate: f64, n: f64) -> f64 {
    if p_hat == pos_rate || n == 0.0 {
        0.0
    } else if p_hat == 0.0 || p_hat == 1.0 {
        f64::INFINITY
    } else {
        (pos_rate - p_hat).abs() * (n / (p_hat * (1.0 - p_hat))).sqrt()
    }
}

fn scalar_row(kind: ScalarKind, a: &[f64]) -> Result<f64> {
    Ok(match kind {
        ScalarKind::Sigmoid => sigmoid(a[0]),
        ScalarKind::Logit => {
            let p = check_p("logit", "p", a[0])?;
            (p / (1.0 - p)).ln()
        }
        ScalarKind::WilsonZ => {
            let func = "wilson_z";
            let p = check_p(func, "p_hat", a[0])?;
            let r = check_p(func, "pos_rate", a[1])?;
            wilson_z(p, r, check_n(func, a[2])?)
        }
        ScalarKind::ConfCalibMultiplier => {
            let func = "confcalib_multiplier";
            let p = check_p(func, "p_hat", a[0])?;
            let r = check_p(func, "pos_rate", a[1])?;
            let n = check_n(func, a[2])?;
            let lambda = a.get(3).copied().unwrap_or(DEFAULT_LAMBDA);
            match confcalib_multiplier(p, r, n, lambda) {
                Some(m) => m,
                None => {
                    return exec_err!(
                        "{func}: argument p_hat must be > 0 when it differs from pos_rate (0 cannot be rescaled), got 0"
                    )
                }
            }
        }
        ScalarKind::PopularityPropensity => {
            let func = "popularity_propensity";
            let (count, max) = (a[0], a[1]);
            if !(max.is_finite() && max > 0.0) {
                return exec_err!("{func}: argument max_count must be finite and > 0, got {max}");
            }
            if !(count >= 0.0 && count <= max) {
                return exec_err!(
                    "{func}: argument count must be in [0, max_count = {max}], got {count}"
                );
            }
            let eta = a.get(2).copied().unwrap_or(DEFAULT_ETA);
            let clip = a.get(3).copied().unwrap_or(DEFAULT_PROPENSITY_CLIP);
            (count / max).powf(eta).max(clip)
        }
        ScalarKind::DownsampleCorrect => {
            let func = "downsample_correct";
            let p = check_p(func, "p", a[0])?;
            let rate = a[1];
            if !(rate > 0.0 && rate <= 1.0) {
                return exec_err!("{func}: argument rate must be in (0, 1], got {rate}");
            }
            downsample_correct(p, rate)
        }
        ScalarKind::WilsonInterval => {
            return internal_err!("wilson_interval is evaluated by wilson_interval_array")
        }
    })
}

/// `p` of a model trained on negatives kept at `rate`, for the whole population: the odds
/// `p/(1 − p)` times `rate` (He et al. 2014, §6.3). `p` in [0, 1], `rate` in (0, 1].
pub fn downsample_correct(p: f64, rate: f64) -> f64 {
    p / (p + (1.0 - p) / rate)
}

fn wilson_interval_array(cols: &[&Float64Array], len: usize) -> Result<ArrayRef> {
    let func = "wilson_interval";
    let mut lower = Vec::with_capacity(len);
    let mut upper = Vec::with_capacity(len);
    let mut valid = Vec::with_capacity(len);
    for i in 0..len {
        let mut out = None;
        if !cols.iter().any(|c| c.is_null(i)) {
            let r = check_p(func, "pos_rate", cols[0].value(i))?;
            let (n, z) = (cols[1].value(i), cols[2].value(i));
            if n.is_nan() {
                return exec_err!("{func}: argument n must be a number, got NaN");
            }
            if !(z.is_finite() && z >= 0.0) {
                return exec_err!("{func}: argument z must be finite and >= 0, got {z}");
            }
            if n > 0.0 {
                out = Some(wilson(r, n, z));
            }
        }
        valid.push(out.is_some());
        lower.push(out.map(|o| o.0));
        upper.push(out.map(|o| o.1));
    }
    Ok(Arc::new(StructArray::try_new(
        wilson_fields(),
        vec![
            Arc::new(Float64Array::from(lower)),
            Arc::new(Float64Array::from(upper)),
        ],
        Some(valid.into()),
    )?))
}

/// ConfCalib's multiplier (Zhao et al. §3.2): the observed rate r of n rows, moved toward the
/// predicted mean p by the Wilson interval at the shrunk confidence `lambda·(2σ(z/2) − 1)`,
/// divided by p. 1 without rows or when p = r; None when p = 0 differs from r (0 cannot be
/// rescaled).
pub(crate) fn confcalib_multiplier(p: f64, r: f64, n: f64, lambda: f64) -> Option<f64> {
    if n == 0.0 || p == r {
        return Some(1.0);
    }
    if p == 0.0 {
        return None;
    }
    let z = wilson_z(p, r, n);
    let z_shrunk = lambda * (2.0 / (1.0 + (-z / 2.0).exp()) - 1.0);
    let (lo, hi) = wilson(r, n, z_shrunk);
    Some((if p > r { hi } else { lo }) / p)
}
