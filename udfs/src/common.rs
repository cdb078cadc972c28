//! What every function shares: argument coercion, literal arguments, row masks and the
//! validation of probabilities, labels, weights and propensities.
//!
//! Errors follow one shape so users can grep them: `<function>: argument <name> must be
//! <rule>, got <value>`. Planning mistakes use `plan_err!`, bad data `exec_err!`.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, Float64Array, ListArray, RecordBatch};
use arrow::buffer::{BooleanBuffer, OffsetBuffer};
use arrow::datatypes::{DataType, Float64Type, Schema};
use datafusion_common::{exec_err, plan_datafusion_err, plan_err, Result, ScalarValue};
use datafusion_expr::{ColumnarValue, Signature, TypeSignature, Volatility};
use datafusion_physical_expr_common::physical_expr::PhysicalExpr;

/// The role of an argument, which decides how it is coerced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Arg {
    /// A numeric data column read as Float64 (p, score, weight, propensity, n, …).
    Num(&'static str),
    /// A label: Boolean or numeric, 0/1 (Boolean and integer labels are not coerced).
    Label(&'static str),
    /// Any hashable column, kept as is (a field for field-level metrics).
    Any(&'static str),
    /// A constant integer (n_bins).
    LitInt(&'static str),
    /// A constant string (strategy).
    LitStr(&'static str),
    /// A constant number (eps, clip, lambda, eta).
    LitNum(&'static str),
}

impl Arg {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Arg::Num(n) | Arg::Label(n) | Arg::Any(n) => n,
            Arg::LitInt(n) | Arg::LitStr(n) | Arg::LitNum(n) => n,
        }
    }
}

/// The call shape of a function: its name, its required and optional arguments.
#[derive(Debug)]
pub(crate) struct CallShape {
    pub name: &'static str,
    pub required: &'static [Arg],
    pub optional: &'static [Arg],
}

impl CallShape {
    /// `ece(p, y [, n_bins [, strategy [, w]]])`
    pub(crate) fn usage(&self) -> String {
        let req: Vec<&str> = self.required.iter().map(Arg::name).collect();
        let mut s = format!("{}({}", self.name, req.join(", "));
        for a in self.optional {
            s.push_str(" [, ");
            s.push_str(a.name());
        }
        s.push_str(&"]".repeat(self.optional.len()));
        s.push(')');
        s
    }

    /// The signature: user-defined coercion ([`CallShape::coerce_lenient`]) first, then one
    /// exact example per arity, which is what `SHOW FUNCTIONS` and `information_schema`
    /// list (a user-defined signature alone shows no parameters there).
    pub(crate) fn signature(&self) -> Signature {
        let example = |a: &Arg| match a {
            Arg::Num(_) | Arg::Label(_) | Arg::LitNum(_) => DataType::Float64,
            Arg::LitInt(_) => DataType::Int64,
            Arg::LitStr(_) | Arg::Any(_) => DataType::Utf8,
        };
        let all: Vec<DataType> = self
            .required
            .iter()
            .chain(self.optional)
            .map(example)
            .collect();
        let mut variants = vec![TypeSignature::UserDefined];
        variants.extend(
            (self.required.len()..=all.len()).map(|n| TypeSignature::Exact(all[..n].to_vec())),
        );
        let mut signature = Signature::one_of(variants, Volatility::Immutable);
        // Named arguments (`ece(p, y, n_bins => 10)`). Set directly: `with_parameter_names`
        // refuses a signature whose arity is variable, as a user-defined one is.
        signature.parameter_names = Some(self.parameter_names());
        signature
    }

    /// Every argument's name, in order: what named arguments (`name => value`) refer to.
    pub(crate) fn parameter_names(&self) -> Vec<String> {
        self.required
            .iter()
            .chain(self.optional)
            .map(|a| a.name().to_string())
            .collect()
    }

    /// The coercion `coerce_types` does: [`CallShape::coerce`] when the call is valid, else
    /// the types unchanged, so that `return_type` (which calls [`CallShape::coerce`]) reports
    /// the mistake with the function's own message instead of DataFusion's generic one.
    pub(crate) fn coerce_lenient(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        Ok(self
            .coerce(arg_types)
            .unwrap_or_else(|_| arg_types.to_vec()))
    }

    /// Numbers and labels to Float64, the rest unchanged; a wrong arity or type is a
    /// planning error that shows the signature.
    pub(crate) fn coerce(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        let n = arg_types.len();
        let (lo, hi) = (
            self.required.len(),
            self.required.len() + self.optional.len(),
        );
        if n < lo || n > hi {
            return plan_err!(
                "{}: takes {} arguments, got {n}; the signature is {}",
                self.name,
                if lo == hi {
                    format!("{lo}")
                } else {
                    format!("{lo} to {hi}")
                },
                self.usage()
            );
        }
        self.required
            .iter()
            .chain(self.optional.iter())
            .zip(arg_types)
            .map(|(arg, t)| coerce_one(self, *arg, t))
            .collect()
    }
}

/// The SQL literal an optional argument stands for when a call leaves it out, or None for an
/// argument that has no literal default (a data column such as `propensity`, or `sigma`
/// whose absence means "choose it"). Named calls that skip an optional argument
/// (`ece(p, y, w => weight)`) are completed with these by the engine (see
/// `calibsql::named_args`), since DataFusion 55 itself cannot skip one; a test checks that
/// every default here gives the same result as leaving the argument out.
pub fn argument_default(func: &str, arg: &str) -> Option<&'static str> {
    // `ece_state` takes `ece`'s arguments.
    let func = func.strip_suffix("_state").unwrap_or(func);
    Some(match (func, arg) {
        ("ace", "strategy") => "'quantile'",
        ("fit_confcalib", "n_bins") => "10",
        (_, "n_knots") => "100",
        ("mvce", "rounds") => "10",
        (_, "replicates") => "200",
        (_, "l2") => "1.0",
        (_, "strategy") => "'uniform'",
        (_, "n_bins") => "15",
        ("field_rce", "eps") => "0.01",
        (_, "eps") => "2.220446049250313e-16",
        (_, "clip") => "0.1",
        (_, "w") => "1.0",
        (_, "level") => "0.95",
        (_, "lambda") => "1.96",
        (_, "eta") => "0.5",
        _ => return None,
    })
}

/// The position of an optional weight argument `i`, or None when the call has none. A
/// constant weight of 1 (the default a named call fills in) is the same as no weight.
pub(crate) fn weight_col(exprs: &[Arc<dyn PhysicalExpr>], i: usize) -> Option<usize> {
    let e = exprs.get(i)?;
    let batch = RecordBatch::new_empty(Arc::new(Schema::empty()));
    match e.evaluate(&batch) {
        Ok(ColumnarValue::Scalar(s)) if !s.is_null() => match s.cast_to(&DataType::Float64) {
            Ok(ScalarValue::Float64(Some(1.0))) => None,
            _ => Some(i),
        },
        _ => Some(i),
    }
}

fn coerce_one(shape: &CallShape, arg: Arg, t: &DataType) -> Result<DataType> {
    let ok = match arg {
        Arg::Num(_) | Arg::LitNum(_) => t.is_numeric() || t.is_null(),
        Arg::Label(_) => t.is_numeric() || t.is_null() || *t == DataType::Boolean,
        Arg::Any(_) => return Ok(t.clone()),
        Arg::LitInt(_) => t.is_numeric() || t.is_null(),
        Arg::LitStr(_) => matches!(
            t,
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Null
        ),
    };
    if !ok {
        let want = match arg {
            Arg::Label(_) => "a Boolean or numeric 0/1 column",
            Arg::LitStr(_) => "a string literal",
            Arg::LitInt(_) => "an integer literal",
            _ => "numeric",
        };
        return plan_err!(
            "{}: argument {} must be {want}, got type {t}; the signature is {}",
            shape.name,
            arg.name(),
            shape.usage()
        );
    }
    Ok(match (arg, t) {
        // Boolean labels stay Boolean (DataFusion refuses an implicit Boolean→Float64
        // coercion) and integer labels stay integers, so that no Float64 copy of the column
        // is made before the kernels that read them natively (see labels.rs); the others get
        // them as 0.0/1.0 (kernel.rs).
        (Arg::Label(_), t) if *t == DataType::Boolean || t.is_integer() => t.clone(),
        (Arg::Num(_) | Arg::Label(_), _) => DataType::Float64,
        _ => t.clone(),
    })
}

/// Evaluates a literal argument (as `functions-aggregate/src/utils.rs` does): an expression
/// that evaluates to a scalar against an empty batch is a constant; anything else is rejected.
pub(crate) fn literal(func: &str, arg: &str, expr: &Arc<dyn PhysicalExpr>) -> Result<ScalarValue> {
    let batch = RecordBatch::new_empty(Arc::new(Schema::empty()));
    match expr.evaluate(&batch) {
        Ok(ColumnarValue::Scalar(s)) if !s.is_null() => Ok(s),
        Ok(ColumnarValue::Scalar(_)) => {
            plan_err!("{func}: argument {arg} must be a constant, got NULL")
        }
        _ => plan_err!("{func}: argument {arg} must be a constant, got {expr}"),
    }
}

/// `F(DISTINCT …)` would silently count every row: calibsql's aggregates refuse it.
pub(crate) fn no_distinct(
    func: &str,
    args: &datafusion_expr::function::AccumulatorArgs,
) -> Result<()> {
    if args.is_distinct {
        return plan_err!(
            "{func}: DISTINCT is not supported; deduplicate the rows first, e.g. FROM (SELECT DISTINCT …)"
        );
    }
    Ok(())
}

/// A constant number argument as f64.
pub(crate) fn literal_f64(func: &str, arg: &str, v: &ScalarValue) -> Result<f64> {
    let cast = v
        .cast_to(&DataType::Float64)
        .map_err(|_| plan_datafusion_err!("{func}: argument {arg} must be a number, got {v}"))?;
    match cast {
        ScalarValue::Float64(Some(x)) => Ok(x),
        _ => plan_err!("{func}: argument {arg} must be a number, got {v}"),
    }
}

/// Largest number of bins a binned metric accepts.
pub(crate) const MAX_BINS: i64 = 10_000;

/// `n_bins`: an integer in [1, 10000] (an integral float literal such as `15.0` is accepted).
pub(crate) fn n_bins(func: &str, expr: &Arc<dyn PhysicalExpr>) -> Result<usize> {
    let v = literal(func, "n_bins", expr)?;
    let x = literal_f64(func, "n_bins", &v)?;
    if x.fract() != 0.0 || !(1.0..=MAX_BINS as f64).contains(&x) {
        return plan_err!("{func}: argument n_bins must be an integer in [1, {MAX_BINS}], got {v}");
    }
    Ok(x as usize)
}

/// A constant number argument checked against a rule described in words.
pub(crate) fn literal_checked(
    func: &str,
    arg: &str,
    expr: &Arc<dyn PhysicalExpr>,
    rule: &str,
    ok: impl Fn(f64) -> bool,
) -> Result<f64> {
    let v = literal(func, arg, expr)?;
    let x = literal_f64(func, arg, &v)?;
    if !ok(x) {
        return plan_err!("{func}: argument {arg} must be {rule}, got {v}");
    }
    Ok(x)
}

/// The Float64 values of a coerced argument.
pub(crate) fn f64s(a: &ArrayRef) -> &Float64Array {
    a.as_primitive::<Float64Type>()
}

/// The rows an aggregate uses: those where every data column is non-NULL and the
/// filter (if any) is true. `None` means every row.
pub(crate) fn usable_rows(
    data: &[&ArrayRef],
    filter: Option<&BooleanArray>,
) -> Option<BooleanBuffer> {
    let mut mask: Option<BooleanBuffer> = None;
    let mut and = |b: &BooleanBuffer| {
        mask = Some(match mask.take() {
            None => b.clone(),
            Some(m) => &m & b,
        })
    };
    for a in data {
        if let Some(nulls) = a.logical_nulls() {
            if nulls.null_count() > 0 {
                and(nulls.inner());
            }
        }
    }
    if let Some(f) = filter {
        and(f.values());
        if let Some(nulls) = f.nulls() {
            and(nulls.inner());
        }
    }
    mask
}

/// Calls `f` for each usable row index, stopping at the first error.
#[inline]
pub(crate) fn for_each_row(
    len: usize,
    mask: &Option<BooleanBuffer>,
    mut f: impl FnMut(usize) -> Result<()>,
) -> Result<()> {
    match mask {
        None => (0..len).try_for_each(f),
        Some(m) => m.set_indices().try_for_each(&mut f),
    }
}

/// Validation of row values. Each returns the value when it is good. The checks are
/// branch-light and the error paths are out of line, so the hot loops stay tight.
#[inline(always)]
pub(crate) fn check_p(func: &str, arg: &str, p: f64) -> Result<f64> {
    if (0.0..=1.0).contains(&p) {
        Ok(p)
    } else {
        bad_value(func, arg, "in [0, 1]", p)
    }
}

#[inline(always)]
pub(crate) fn check_y(func: &str, y: f64) -> Result<f64> {
    if (y == 0.0) | (y == 1.0) {
        Ok(y)
    } else {
        bad_value(func, "y", "0 or 1", y)
    }
}

#[inline(always)]
pub(crate) fn check_w(func: &str, w: f64) -> Result<f64> {
    if (w >= 0.0) & w.is_finite() {
        Ok(w)
    } else {
        bad_value(func, "w", "finite and >= 0", w)
    }
}

#[inline(always)]
pub(crate) fn check_propensity(func: &str, q: f64) -> Result<f64> {
    if (q > 0.0) & (q <= 1.0) {
        Ok(q)
    } else {
        bad_value(func, "propensity", "in (0, 1]", q)
    }
}

/// Whole-column checks for the common case of no NULLs and no filter: branch-free folds the
/// compiler vectorises. When one fails, the per-row path finds the bad value and reports it.
pub(crate) fn all_probabilities(v: &[f64]) -> bool {
    v.iter().fold(true, |ok, &x| ok & (0.0..=1.0).contains(&x))
}

pub(crate) fn all_weights(v: &[f64]) -> bool {
    v.iter()
        .fold(true, |ok, &x| ok & (0.0..f64::INFINITY).contains(&x))
}

#[cold]
#[inline(never)]
pub(crate) fn bad_value(func: &str, arg: &str, rule: &str, v: f64) -> Result<f64> {
    exec_err!("{func}: argument {arg} must be {rule}, got {v}")
}

/// Appends an f64 list state built from consecutive chunks of `values` of length `width`.
pub(crate) fn fixed_lists(values: Vec<f64>, width: usize) -> ArrayRef {
    use arrow::array::ListArray;
    use arrow::buffer::OffsetBuffer;
    use arrow::datatypes::Field;
    let n = values.len().checked_div(width).unwrap_or(0);
    let offsets = OffsetBuffer::from_lengths(std::iter::repeat_n(width, n));
    Arc::new(ListArray::new(
        Arc::new(Field::new_list_field(DataType::Float64, true)),
        offsets,
        Arc::new(Float64Array::from(values)),
        None,
    ))
}

/// The list type of items `t` that every list-valued state and model field uses.
pub(crate) fn list_type(t: DataType) -> DataType {
    DataType::List(Arc::new(arrow::datatypes::Field::new_list_field(t, true)))
}

/// The list state type used by every list-valued state field of floats.
pub(crate) fn f64_list_type() -> DataType {
    list_type(DataType::Float64)
}

/// A list column (no null lists) of `values` cut by `offsets`; its item type is the values'.
pub(crate) fn list_array(offsets: OffsetBuffer<i32>, values: ArrayRef) -> ArrayRef {
    Arc::new(ListArray::new(
        Arc::new(arrow::datatypes::Field::new_list_field(
            values.data_type().clone(),
            true,
        )),
        offsets,
        values,
        None,
    ))
}

/// Reads a list state column as (offsets, values) for merging.
pub(crate) fn list_parts(a: &ArrayRef) -> (&[i32], &[f64]) {
    let l = a.as_list::<i32>();
    let v = l.values().as_primitive::<Float64Type>();
    (l.value_offsets(), v.values())
}
