//! What every function shares: argument coercion, literal arguments, row masks and the
//! validation of probabilities, labels, weights and propensities.
//!
//! Errors follow one shape so users can grep them: `<function>: argument <name> must be
//! <rule>, got <value>`. Planning mistakes use `plan_err!`, bad data `exec_err!`.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, Float64Array, ListArray, RecordBatch};
use arrow::buffer::{BooleanBuffer, OffsetBuffer};
use arrow::datatypes::{DataType, Field, FieldRef, Float64Type, Schema};
use datafusion_common::{exec_err, plan_datafusion_err, plan_err, Result, ScalarValue};
use datafusion_expr::utils::format_state_name;
use datafusion_expr::{ColumnarValue, Signature, TypeSignature, Volatility};
use datafusion_physical_expr_common::physical_expr::PhysicalExpr;

/// The role of an argument, which decides how it is coerced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// A numeric data column read as Float64 (p, score, weight, propensity, n, …).
    Num,
    /// A label: Boolean or numeric, 0/1 (Boolean and integer labels are not coerced).
    Label,
    /// Any hashable column, kept as is (a field for field-level metrics).
    Any,
    /// A list of numbers per row (a multiclass model's probabilities), read as
    /// `List<Float64>`.
    NumList,
    /// A constant integer (n_bins).
    LitInt,
    /// A constant string (strategy).
    LitStr,
    /// A constant number (eps, clip, lambda, eta).
    LitNum,
}

/// One argument of a function's signature: its name, its role and, for an optional argument
/// that has one, its default — the SQL literal a call that leaves it out stands for
/// (`Arg::lit_int("n_bins").or("15")`). The defaults are what
/// [`argument_default`](crate::argument_default) reports, what the `_state` functions spell
/// out in a state's parameters, and what named calls that skip the argument are completed
/// with; a test checks that each gives the same result as leaving the argument out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Arg {
    pub name: &'static str,
    pub role: Role,
    pub default: Option<&'static str>,
    /// Must be a constant although coerced as data (a scalar's `eta`): see [`Arg::is_literal`].
    constant: bool,
    /// The argument's documentation: shared by the functions that use this `Arg` as it is, or
    /// the function's own, given where its shape names the argument (see
    /// [`with_argument_docs`]).
    pub doc: Option<&'static str>,
}

impl Arg {
    const fn new(name: &'static str, role: Role) -> Self {
        Arg {
            name,
            role,
            default: None,
            constant: false,
            doc: None,
        }
    }
    pub(crate) const fn num(name: &'static str) -> Self {
        Arg::new(name, Role::Num)
    }
    pub(crate) const fn label(name: &'static str) -> Self {
        Arg::new(name, Role::Label)
    }
    pub(crate) const fn any(name: &'static str) -> Self {
        Arg::new(name, Role::Any)
    }
    pub(crate) const fn num_list(name: &'static str) -> Self {
        Arg::new(name, Role::NumList)
    }
    pub(crate) const fn lit_int(name: &'static str) -> Self {
        Arg::new(name, Role::LitInt)
    }
    pub(crate) const fn lit_str(name: &'static str) -> Self {
        Arg::new(name, Role::LitStr)
    }
    pub(crate) const fn lit_num(name: &'static str) -> Self {
        Arg::new(name, Role::LitNum)
    }
    /// This argument with `sql` (a SQL literal) as its default.
    pub(crate) const fn or(self, sql: &'static str) -> Self {
        Arg {
            default: Some(sql),
            ..self
        }
    }
    /// A numeric argument coerced as data (to Float64, which the scalars' kernels read) that
    /// must nevertheless be a constant, checked by the function itself.
    pub(crate) const fn constant(self) -> Self {
        Arg {
            constant: true,
            ..self
        }
    }
    /// This argument with `text` as its documentation.
    pub(crate) const fn doc(self, text: &'static str) -> Self {
        Arg {
            doc: Some(text),
            ..self
        }
    }
    pub(crate) fn name(&self) -> &'static str {
        self.name
    }
    /// Whether the argument must be a constant.
    pub(crate) fn is_literal(&self) -> bool {
        self.constant || matches!(self.role, Role::LitInt | Role::LitStr | Role::LitNum)
    }
}

/// The arguments many functions share, declared once with their defaults.
pub(crate) mod args {
    use super::Arg;

    /// The predicted probability.
    pub(crate) const P: Arg = Arg::num("p").doc("Predicted probability in [0, 1].");
    /// The observed label.
    pub(crate) const Y: Arg = Arg::label("y").doc("Observed label: Boolean or a number 0/1.");
    /// A raw score.
    pub(crate) const SCORE: Arg = Arg::num("score").doc("Raw ranking score, any finite number.");
    /// A logit.
    pub(crate) const LOGIT: Arg = Arg::num("logit").doc("The model's logit (any finite number).");
    /// A multiclass model's probabilities, one list per row.
    pub(crate) const PROBS: Arg = Arg::num_list("probs").doc(
        "Predicted class probabilities, a list per row (any numeric list type), each in [0, 1] and \
summing to 1 within 1e-6.",
    );
    /// A multiclass model's logits, one list per row.
    pub(crate) const LOGITS: Arg = Arg::num_list("logits")
        .doc("The model's logits, a list per row (any numeric list type), each finite.");
    /// The observed class of a multiclass row.
    pub(crate) const LABEL: Arg = Arg::num("label")
        .doc("Observed class: an integer index into `probs`, from 0 to the list's length − 1.");
    /// The field of the field-level metrics and fits.
    pub(crate) const FIELD: Arg =
        Arg::any("field").doc("The field: a column of any hashable type.");
    /// The row weight; 1 is no weight.
    pub(crate) const W: Arg = Arg::num("w")
        .or("1.0")
        .doc("Optional row weight, finite and >= 0. Default 1.");
    /// The exposure propensity (no default: leaving it out means no debiasing).
    pub(crate) const PROPENSITY: Arg = Arg::num("propensity")
        .doc("Optional exposure propensity in (0, 1]: fit the debiased IPS loss.");
    /// A fit's exposure propensity: its default 1 is no debiasing (y / 1 = y), so that a
    /// fit's weight can be given by name without a propensity.
    pub(crate) const FIT_PROPENSITY: Arg = Arg::num("propensity").or("1.0").doc(
        "Optional exposure propensity in (0, 1]: fit the debiased IPS loss. Default 1 (no debiasing).",
    );
    /// A fit's row weight: each row counts `w` times in the fit's loss (a negative kept at
    /// rate r of a downsampled log gets w = 1/r).
    pub(crate) const FIT_W: Arg = Arg::num("w").or("1.0").doc(
        "Optional row weight, finite and >= 0: the row counts w times in the loss. Default 1. For a log whose \
negatives were kept at rate r, `w => CASE WHEN y = 1 THEN 1 ELSE 1 / r END` fits the model of the full log \
(docs/SEMANTICS.md#negative-downsampling).",
    );
    /// The lower clip of the propensity.
    pub(crate) const CLIP: Arg = Arg::lit_num("clip")
        .or("0.1")
        .doc("Lower clip of the propensity, a constant in [0, 1]. Default 0.1.");
    /// The number of bins of the binned metrics and fits.
    pub(crate) const N_BINS: Arg = Arg::lit_int("n_bins").or("15");
    /// The binning strategy (the binned metrics and `fit_histogram`).
    pub(crate) const STRATEGY: Arg = Arg::lit_str("strategy").or("'uniform'");
    /// The log loss's clip of p away from 0 and 1.
    pub(crate) const EPS: Arg = Arg::lit_num("eps").or("2.220446049250313e-16");
    /// The number of knots of `fit_ilps` and `fit_field_calib`.
    pub(crate) const N_KNOTS: Arg = Arg::lit_int("n_knots").or("100");
    /// ConfCalib's Wilson z.
    pub(crate) const LAMBDA: Arg = Arg::lit_num("lambda").or("1.96");
}

/// `doc` with its argument table in `shape`'s order, each argument's text from its [`Arg`]
/// (`Arg::doc`: the shared text of `args::P`, or the function's own, given where its shape
/// names the argument). An argument without one keeps the text `doc` gives it, if any.
fn with_argument_docs(
    doc: &datafusion_expr::Documentation,
    shape: &CallShape,
) -> datafusion_expr::Documentation {
    let own = doc.arguments.clone().unwrap_or_default();
    let arguments = shape
        .required
        .iter()
        .chain(shape.optional)
        .filter_map(|a| {
            let text = a.doc.map(str::to_string).or_else(|| {
                own.iter()
                    .find(|(n, _)| n == a.name)
                    .map(|(_, d)| d.clone())
            })?;
            Some((a.name.to_string(), text))
        })
        .collect();
    datafusion_expr::Documentation {
        arguments: Some(arguments),
        ..doc.clone()
    }
}

/// [`with_argument_docs`] of a function's documentation, made once per function name and
/// kept for the life of the process (what `documentation()` returns is borrowed).
pub(crate) fn documented(
    doc: Option<&datafusion_expr::Documentation>,
    shape: &CallShape,
) -> Option<&'static datafusion_expr::Documentation> {
    type Docs = std::collections::HashMap<&'static str, &'static datafusion_expr::Documentation>;
    static DOCS: std::sync::OnceLock<std::sync::Mutex<Docs>> = std::sync::OnceLock::new();
    let doc = doc?;
    let mut docs = DOCS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    Some(
        docs.entry(shape.name)
            .or_insert_with(|| Box::leak(Box::new(with_argument_docs(doc, shape)))),
    )
}

/// A function whose arguments a [`CallShape`] describes (its defaults included); `None` for
/// one whose arguments no fixed list names (`multi_field_rce`'s variable number of fields),
/// which so has no named arguments.
pub(crate) trait Shaped {
    fn call_shape(&self) -> Option<CallShape>;
}

/// The call shape of a function: its name, its required and optional arguments.
#[derive(Debug, Clone, Copy)]
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
        let example = |a: &Arg| match a.role {
            Role::Num | Role::Label | Role::LitNum => DataType::Float64,
            Role::LitInt => DataType::Int64,
            Role::LitStr | Role::Any => DataType::Utf8,
            Role::NumList => f64_list_type(),
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
    let ok = match arg.role {
        Role::Num | Role::LitNum => t.is_numeric() || t.is_null(),
        Role::Label => t.is_numeric() || t.is_null() || *t == DataType::Boolean,
        Role::Any => return Ok(t.clone()),
        Role::NumList => match t {
            DataType::List(item)
            | DataType::LargeList(item)
            | DataType::ListView(item)
            | DataType::LargeListView(item)
            | DataType::FixedSizeList(item, _) => {
                item.data_type().is_numeric() || item.data_type().is_null()
            }
            DataType::Null => true,
            _ => false,
        },
        Role::LitInt => t.is_numeric() || t.is_null(),
        Role::LitStr => matches!(
            t,
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Null
        ),
    };
    if !ok {
        let want = match arg.role {
            Role::Label => "a Boolean or numeric 0/1 column",
            Role::LitStr => "a string literal",
            Role::LitInt => "an integer literal",
            Role::NumList => "a list of numbers",
            _ => "numeric",
        };
        return plan_err!(
            "{}: argument {} must be {want}, got type {t}; the signature is {}",
            shape.name,
            arg.name(),
            shape.usage()
        );
    }
    Ok(match (arg.role, t) {
        // Boolean labels stay Boolean (DataFusion refuses an implicit Boolean→Float64
        // coercion) and integer labels stay integers, so that no Float64 copy of the column
        // is made before the kernels that read them natively (see labels.rs); the others get
        // them as 0.0/1.0 (kernel.rs).
        (Role::Label, t) if *t == DataType::Boolean || t.is_integer() => t.clone(),
        (Role::Num | Role::Label, _) => DataType::Float64,
        (Role::NumList, _) => f64_list_type(),
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
pub(crate) const MAX_BINS: usize = 10_000;

/// `n_bins`: an integer in [1, 10000] (an integral float literal such as `15.0` is accepted).
pub(crate) fn n_bins(func: &str, expr: &Arc<dyn PhysicalExpr>) -> Result<usize> {
    literal_int_in(func, "n_bins", expr, 1, MAX_BINS)
}

/// A constant integer argument in `[lo, hi]`.
pub(crate) fn literal_int_in(
    func: &str,
    arg: &str,
    expr: &Arc<dyn PhysicalExpr>,
    lo: usize,
    hi: usize,
) -> Result<usize> {
    let rule = format!("an integer in [{lo}, {hi}]");
    let x = literal_checked(func, arg, expr, &rule, |x| {
        x.fract() == 0.0 && (lo as f64..=hi as f64).contains(&x)
    })?;
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

/// `arg_types` with the first `n`, when numeric, as Float64 and the rest unchanged: the
/// coercion of a function that checks its own arguments in `return_type`.
pub(crate) fn leading_numbers_as_f64(arg_types: &[DataType], n: usize) -> Vec<DataType> {
    arg_types
        .iter()
        .enumerate()
        .map(|(i, t)| match t {
            t if i < n && t.is_numeric() => DataType::Float64,
            t => t.clone(),
        })
        .collect()
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

/// [`usable_rows`] of the columns `p` and `y` of `values` and, when given, the weight (or
/// propensity) column `w`: the data columns of most aggregates.
pub(crate) fn usable_rows_pyw(
    values: &[ArrayRef],
    (p, y): (usize, usize),
    w: Option<usize>,
    filter: Option<&BooleanArray>,
) -> Option<BooleanBuffer> {
    let mut data = vec![&values[p], &values[y]];
    data.extend(w.map(|c| &values[c]));
    usable_rows(&data, filter)
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

/// Row `i`'s weight, checked, when there is a weight column; 1 without.
#[inline(always)]
pub(crate) fn weight_at(func: &str, w: Option<&[f64]>, i: usize) -> Result<f64> {
    match w {
        Some(w) => check_w(func, w[i]),
        None => Ok(1.0),
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

/// State fields `<name>[<part>]`, one nullable field of type `data_type` per part.
pub(crate) fn state_fields_of(name: &str, parts: &[&str], data_type: &DataType) -> Vec<FieldRef> {
    parts
        .iter()
        .map(|part| {
            Arc::new(Field::new(
                format_state_name(name, part),
                data_type.clone(),
                true,
            ))
        })
        .collect()
}

/// [`state_fields_of`] with a list of Float64 per part.
pub(crate) fn f64_list_state_fields(name: &str, parts: &[&str]) -> Vec<FieldRef> {
    state_fields_of(name, parts, &f64_list_type())
}

/// A `List<Float64>` array of one list a vector: a single vector becomes the values buffer
/// without a copy; several are concatenated, each freed once copied (a kernel's rows moved
/// out as its partial state).
pub(crate) fn f64_lists(lists: Vec<Vec<f64>>) -> ArrayRef {
    let offsets = OffsetBuffer::from_lengths(lists.iter().map(Vec::len));
    let mut lists = lists;
    let values = if lists.len() == 1 {
        lists.pop().unwrap_or_default()
    } else {
        let mut all = Vec::with_capacity(lists.iter().map(Vec::len).sum());
        let mut freed = 0;
        for v in lists {
            all.extend_from_slice(&v);
            freed += v.capacity() * size_of::<f64>();
            drop(v);
            if freed >= RELEASE_EVERY {
                release_freed_memory();
                freed = 0;
            }
        }
        if freed > 0 && all.len() * size_of::<f64>() >= RELEASE_EVERY {
            release_freed_memory();
        }
        all
    };
    list_array(offsets, Arc::new(Float64Array::from(values)))
}

/// Bytes of freed lists after which [`f64_lists`] gives freed memory back to the system.
const RELEASE_EVERY: usize = 16 << 20;

/// Gives memory the allocator holds free back to the system (glibc's `malloc_trim`; nothing
/// elsewhere). glibc keeps freed blocks below its mmap threshold, which rises to 32 MiB
/// once a large block is freed, in its per-thread arenas: a kernel that copies many lists
/// into one (a field-aware fit's partial state: thousands of field values' rows) would
/// otherwise hold its rows twice in resident memory. A few milliseconds a call.
pub(crate) fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free memory of the allocator's own arenas.
    #[allow(unsafe_code)]
    unsafe {
        libc::malloc_trim(0);
    }
}

/// The sum of `terms` added in ascending order: the same whatever order they came in (a
/// group's per-value or per-cell sums, met in the order partial states arrive).
pub(crate) fn sum_in_order(mut terms: Vec<f64>) -> f64 {
    terms.sort_unstable_by(f64::total_cmp);
    terms.iter().sum()
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

/// The values the rows of a list state column hold (those of [`list_parts`] between its
/// first and last offsets), for checking a stored state (`Kernel::check_stored`).
pub(crate) fn list_values(a: &ArrayRef) -> &[f64] {
    let (offsets, values) = list_parts(a);
    match (offsets.first(), offsets.last()) {
        (Some(&a), Some(&b)) => &values[a as usize..b as usize],
        _ => &[],
    }
}
