//! Stored partial states: `F_state(…)` returns an aggregate's partial state as one storable
//! Arrow value, `F_merge(state)` merges stored states and returns exactly what `F` returns
//! over the union of their rows — ClickHouse's `-State` / `-Merge` combinators for
//! calibsql's metrics and fits, so a 30-day report reads 30 daily states instead of the logs.
//!
//! A state is a struct `{format, function, params, state}`:
//! - `format` (Int32) is [`STATE_FORMAT`]; a state of another format is refused clearly;
//! - `function` is the aggregate that made it (`ece`), `params` its parameters in canonical
//!   form (`ece(n_bins => 15.0, strategy => 'uniform', w => 1.0)`, every default spelled
//!   out), so states made with different parameters, or by another function, are never
//!   merged silently;
//! - `state` is the aggregate's own partial state (its `state_fields`, with plain names).
//!
//! Both wrappers reuse the aggregate's [`Kernel`]: `F_state` is `F` whose final value is its
//! state; `F_merge` builds `F`'s kernel from the first state's `params` and merges.

use std::fmt::Debug;
use std::ops::Range;
use std::sync::Arc;

use arrow::array::{
    new_null_array, Array, ArrayRef, AsArray, BooleanArray, Int32Array, StringArray, StructArray,
    UInt32Array,
};
use arrow::compute::take;
use arrow::datatypes::{DataType, Field, FieldRef, Fields, Schema};
use datafusion_common::{exec_err, plan_err, Result, ScalarValue};
use datafusion_doc::DocSection;
use datafusion_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion_expr::utils::format_state_name;
use datafusion_expr::{
    AggregateUDF, AggregateUDFImpl, Documentation, Signature, TypeSignature, Volatility,
};
use datafusion_physical_expr::expressions::{Column, Literal};
use datafusion_physical_expr_common::physical_expr::PhysicalExpr;

use crate::common::{argument_default, literal, Arg, CallShape};
use crate::kernel::{DynKernel, Kernel, KernelAggregate};

/// The state format this version writes and reads.
pub const STATE_FORMAT: i32 = 1;

/// `F_state` or `F_merge` of a fit whose exact cap is a setting, with that cap.
pub(crate) fn capped_wrapper(
    udaf: &dyn AggregateUDFImpl,
    cap: usize,
) -> Option<Arc<dyn AggregateUDFImpl>> {
    if let Some(f) = udaf.downcast_ref::<StateOf>() {
        let inner = f.inner.with_exact_cap(cap)?;
        return Some(Arc::new(StateOf::new(inner)));
    }
    if let Some(f) = udaf.downcast_ref::<MergeOf>() {
        let inner = f.inner.with_exact_cap(cap)?;
        return Some(Arc::new(MergeOf::new(inner)));
    }
    None
}

/// The `_state` and `_merge` aggregates of every aggregate whose state is bounded.
pub fn state_functions() -> Vec<Arc<AggregateUDF>> {
    use crate::binned::{Binned, BinnedKind};
    use crate::field::{FieldKind, FieldMetric};
    use crate::fit::{Fit, FitMethod};
    use crate::loss::{LossKind, MeanLoss};
    use crate::metrics::smooth::SmoothEce;
    let inners: Vec<Arc<dyn KernelAggregate>> = vec![
        Arc::new(Binned::new(BinnedKind::Ece)),
        Arc::new(Binned::new(BinnedKind::Mce)),
        Arc::new(Binned::new(BinnedKind::Reliability)),
        Arc::new(Binned::new(BinnedKind::Ace)),
        Arc::new(Binned::new(BinnedKind::Rmsce)),
        Arc::new(MeanLoss::new(LossKind::LogLoss)),
        Arc::new(MeanLoss::new(LossKind::Brier)),
        Arc::new(MeanLoss::new(LossKind::IpsLogLoss)),
        Arc::new(MeanLoss::new(LossKind::NormalizedEntropy)),
        Arc::new(FieldMetric::new(FieldKind::Ece)),
        Arc::new(FieldMetric::new(FieldKind::Rce)),
        Arc::new(SmoothEce::new()),
        Arc::new(Fit::new(FitMethod::Platt)),
        Arc::new(Fit::new(FitMethod::Temperature)),
        Arc::new(Fit::new(FitMethod::Beta)),
        Arc::new(Fit::new(FitMethod::Gaussian)),
        Arc::new(Fit::new(FitMethod::Gamma)),
        Arc::new(Fit::new(FitMethod::Isotonic)),
        Arc::new(Fit::new(FitMethod::Histogram)),
        Arc::new(Fit::new(FitMethod::Ilps)),
        Arc::new(Fit::new(FitMethod::Bbq)),
        Arc::new(crate::fit::FieldFit::new(FitMethod::ConfCalib)),
        Arc::new(crate::fit::FieldFit::new(FitMethod::FieldCalib)),
        Arc::new(crate::metrics::mvce::Mvce::new()),
    ];
    inners
        .into_iter()
        .flat_map(|inner| {
            [
                Arc::new(AggregateUDF::new_from_shared_impl(Arc::new(StateOf::new(
                    Arc::clone(&inner),
                )))),
                Arc::new(AggregateUDF::new_from_shared_impl(Arc::new(MergeOf::new(
                    inner,
                )))),
            ]
        })
        .collect()
}

/// `F`'s partial state fields with plain names (`bin_count`, not `ece(p,y)[bin_count]`).
fn plain_state_fields(inner: &dyn KernelAggregate, arg_types: &[DataType]) -> Result<Fields> {
    let input_fields: Vec<FieldRef> = arg_types
        .iter()
        .enumerate()
        .map(|(i, t)| Arc::new(Field::new(format!("a{i}"), t.clone(), true)))
        .collect();
    let fields = inner.state_fields(StateFieldsArgs {
        name: "",
        input_fields: &input_fields,
        return_field: Arc::new(Field::new("r", DataType::Float64, true)),
        ordering_fields: &[],
        is_distinct: false,
    })?;
    Ok(fields
        .iter()
        .map(|f| {
            let name = f.name().trim_start_matches('[').trim_end_matches(']');
            Field::new(name, f.data_type().clone(), true)
        })
        .collect())
}

/// The argument types `F` is planned with in `F_merge`: numbers as Float64, a field as the
/// type recorded in the state (only its bytes are stored, so any type will do for planning).
fn canonical_types(shape: &CallShape) -> Vec<DataType> {
    shape
        .required
        .iter()
        .map(|a| match a {
            Arg::Any(_) => DataType::Utf8,
            _ => DataType::Float64,
        })
        .collect()
}

/// The struct type of a stored state of `F`.
fn state_type(inner: &dyn KernelAggregate) -> Result<DataType> {
    let state = plain_state_fields(inner, &canonical_types(&inner.call_shape()))?;
    Ok(DataType::Struct(Fields::from(vec![
        Field::new("format", DataType::Int32, true),
        Field::new("function", DataType::Utf8, true),
        Field::new("params", DataType::Utf8, true),
        Field::new("state", DataType::Struct(state), true),
    ])))
}

/// A literal as canonical text: strings quoted, numbers as Float64 (`15` and `15.0` agree).
fn canonical_literal(v: &ScalarValue) -> String {
    if let Some(s) = v.try_as_str().flatten() {
        return format!("'{}'", s.replace('\'', "''"));
    }
    match v.cast_to(&DataType::Float64) {
        Ok(ScalarValue::Float64(Some(x))) => format!("{x:?}"),
        _ => v.to_string(),
    }
}

/// A default's SQL text as canonical text.
fn canonical_default(sql: &str) -> String {
    match sql.parse::<f64>() {
        Ok(x) => format!("{x:?}"),
        Err(_) => sql.to_string(),
    }
}

/// What defines a state of `F` called with `args`: `F(param => value, …)` with every
/// optional argument up to the last one that has a value (defaults spelled out), a data
/// argument by its name, and a field argument with its type.
fn describe(shape: &CallShape, args: &AccumulatorArgs) -> Result<String> {
    let func = shape.name;
    let mut parts = vec![];
    for (i, a) in shape.required.iter().enumerate() {
        if let Arg::Any(name) = a {
            parts.push(format!("{name}: {}", args.expr_fields[i].data_type()));
        }
    }
    for (j, a) in shape.optional.iter().enumerate() {
        let name = a.name();
        match args.exprs.get(shape.required.len() + j) {
            Some(e) => match a {
                Arg::LitInt(_) | Arg::LitStr(_) | Arg::LitNum(_) => {
                    parts.push(format!(
                        "{name} => {}",
                        canonical_literal(&literal(func, name, e)?)
                    ));
                }
                _ => match literal(func, name, e) {
                    // A constant in a data position (a weight of 1.0): its value.
                    Ok(v) => parts.push(format!("{name} => {}", canonical_literal(&v))),
                    Err(_) => parts.push(name.to_string()),
                },
            },
            None => match argument_default(func, name) {
                Some(d) => parts.push(format!("{name} => {}", canonical_default(d))),
                None => break,
            },
        }
    }
    Ok(format!("{func}({})", parts.join(", ")))
}

/// The accumulator arguments of `F` for a state described by `params` (see [`describe`]).
struct Rebuilt {
    schema: Schema,
    exprs: Vec<Arc<dyn PhysicalExpr>>,
    fields: Vec<FieldRef>,
    ret: FieldRef,
}

fn rebuild(inner: &dyn KernelAggregate, merge_name: &str, params: &str) -> Result<Rebuilt> {
    let shape = inner.call_shape();
    let body = params
        .strip_prefix(shape.name)
        .and_then(|s| s.strip_prefix('('))
        .and_then(|s| s.strip_suffix(')'))
        .ok_or_else(|| {
            datafusion_common::DataFusionError::Execution(format!(
                "{merge_name}: state parameters {params:?} are not a {} state's",
                shape.name
            ))
        })?;
    let parts: Vec<&str> = if body.is_empty() {
        vec![]
    } else {
        body.split(", ").collect()
    };
    let mut fields: Vec<FieldRef> = vec![];
    let mut exprs: Vec<Arc<dyn PhysicalExpr>> = vec![];
    fn column(
        name: &str,
        t: DataType,
        fields: &mut Vec<FieldRef>,
        exprs: &mut Vec<Arc<dyn PhysicalExpr>>,
    ) {
        exprs.push(Arc::new(Column::new(name, fields.len())));
        fields.push(Arc::new(Field::new(name, t, true)));
    }
    let mut parts = parts.into_iter().peekable();
    for a in shape.required {
        match a {
            Arg::Any(name) => {
                let t = parts
                    .next()
                    .and_then(|p| p.strip_prefix(&format!("{name}: ")))
                    .and_then(|t| t.parse::<DataType>().ok())
                    .ok_or_else(|| {
                        datafusion_common::DataFusionError::Execution(format!(
                            "{merge_name}: state parameters {params:?} lack the type of {name}"
                        ))
                    })?;
                column(name, t, &mut fields, &mut exprs);
            }
            other => column(other.name(), DataType::Float64, &mut fields, &mut exprs),
        }
    }
    for part in parts {
        match part.split_once(" => ") {
            Some((_, v)) => {
                let value = if let Some(s) = v.strip_prefix('\'').and_then(|s| s.strip_suffix('\''))
                {
                    ScalarValue::Utf8(Some(s.replace("''", "'")))
                } else {
                    ScalarValue::Float64(Some(v.parse::<f64>().map_err(|_| {
                        datafusion_common::DataFusionError::Execution(format!(
                            "{merge_name}: bad value {v:?} in state parameters {params:?}"
                        ))
                    })?))
                };
                // Literals take a slot in the argument list (and none in the schema).
                fields.push(Arc::new(Field::new(
                    format!("lit{}", fields.len()),
                    value.data_type(),
                    true,
                )));
                exprs.push(Arc::new(Literal::new(value)));
            }
            None => column(part, DataType::Float64, &mut fields, &mut exprs),
        }
    }
    let types: Vec<DataType> = fields.iter().map(|f| f.data_type().clone()).collect();
    let ret = Arc::new(Field::new(
        shape.name,
        inner.return_type(&types[..shape.required.len()])?,
        true,
    ));
    Ok(Rebuilt {
        schema: Schema::new(fields.clone()),
        exprs,
        fields,
        ret,
    })
}

impl Rebuilt {
    fn kernel(&self, inner: &dyn KernelAggregate) -> Result<Box<dyn DynKernel>> {
        inner.dyn_kernel(&AccumulatorArgs {
            return_field: Arc::clone(&self.ret),
            schema: &self.schema,
            ignore_nulls: false,
            order_bys: &[],
            is_reversed: false,
            name: inner.name(),
            is_distinct: false,
            exprs: &self.exprs,
            expr_fields: &self.fields,
        })
    }
}

fn section() -> DocSection {
    DocSection {
        include: true,
        label: "Stored States",
        description: Some(
            "Partial states of the metrics and fits as storable values, merged later.",
        ),
    }
}

/// Equality and hashing by name: a wrapper is defined by the function it wraps (and that
/// function's settings, e.g. a fit's exact cap, which its `Debug` text shows).
macro_rules! identified_by_name {
    ($t:ty) => {
        impl PartialEq for $t {
            fn eq(&self, other: &Self) -> bool {
                self.name == other.name
                    && format!("{:?}", self.inner) == format!("{:?}", other.inner)
            }
        }
        impl Eq for $t {}
        impl std::hash::Hash for $t {
            fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
                self.name.hash(state)
            }
        }
    };
}

/// `F_state`: `F` whose value is its partial state.
#[derive(Debug)]
struct StateOf {
    inner: Arc<dyn KernelAggregate>,
    name: String,
    signature: Signature,
    doc: Documentation,
}

identified_by_name!(StateOf);

impl StateOf {
    fn new(inner: Arc<dyn KernelAggregate>) -> Self {
        let f = inner.name().to_string();
        let name = format!("{f}_state");
        let usage = inner.call_shape().usage().replacen(&f, &name, 1);
        let doc = Documentation::builder(
            section(),
            format!(
                "The partial state of `{f}` as one storable value: a struct `{{format, function, params, \
state}}` whose `params` record `{f}`'s arguments (defaults spelled out). Store it (`COPY … TO 'states.parquet'`), \
then `{f}_merge(state)` over any set of such states returns exactly what `{f}` returns over the union of their \
rows. Same arguments as `{f}`."
            ),
            usage,
        )
        .with_sql_example(format!(
            r#"```sql
> SELECT s['function'] AS function, s['format'] AS format FROM (SELECT {name}({args}) AS s FROM (VALUES (0.2, 0, 'a', 0.5), (0.7, 1, 'b', 0.9)) AS t(p, y, f, q));
+{dash}+--------+
| function{pad} | format |
+{dash}+--------+
| {f}{fpad} | 1      |
+{dash}+--------+
```"#,
            args = example_args(&inner.call_shape()),
            dash = "-".repeat(f.len().max(8) + 2),
            pad = " ".repeat(f.len().max(8) - 8),
            fpad = " ".repeat(f.len().max(8) - f.len()),
        ))
        .build();
        Self {
            signature: inner.signature().clone(),
            inner,
            name,
            doc,
        }
    }

    fn kernel(&self, args: &AccumulatorArgs) -> Result<StateKernel> {
        let shape = self.inner.call_shape();
        let params = describe(&shape, args)?;
        // The binned metrics keep every row for 'quantile' bins; fit_histogram keeps its
        // bounded fit state whatever the strategy.
        if params.contains("strategy => 'quantile'") && !shape.name.starts_with("fit_") {
            return plan_err!(
                "{}: strategy 'quantile' keeps every row, so its state is not bounded; store the state of a \
fixed-edge strategy ('uniform', 'sklearn', …) or compute {} over the rows",
                self.name,
                shape.name
            );
        }
        let types: Vec<DataType> = args
            .expr_fields
            .iter()
            .map(|f| f.data_type().clone())
            .collect();
        Ok(StateKernel {
            kernel: self.inner.dyn_kernel(args)?,
            function: shape.name,
            params,
            fields: plain_state_fields(self.inner.as_ref(), &types)?,
        })
    }
}

/// The first example arguments a function's shape takes over `t(p, y, f, q)` (with fixed
/// bins where the default strategy keeps rows).
fn example_args(shape: &CallShape) -> String {
    let mut args: Vec<&str> = shape
        .required
        .iter()
        .map(|a| match a.name() {
            "field" => "f",
            "propensity" => "q",
            _ => match a {
                Arg::Label(_) => "y",
                _ => "p",
            },
        })
        .collect();
    if argument_default(shape.name, "strategy") == Some("'quantile'") {
        args.extend(["10", "'uniform'"]);
    }
    args.join(", ")
}

impl AggregateUDFImpl for StateOf {
    fn name(&self) -> &str {
        &self.name
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        self.inner.coerce_types(arg_types)
    }
    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.inner.call_shape().coerce(arg_types)?;
        state_type(self.inner.as_ref())
    }
    crate::kernel::kernel_accumulators!();
    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        self.inner.state_fields(args)
    }
    fn documentation(&self) -> Option<&Documentation> {
        Some(&self.doc)
    }
}

/// `F`'s kernel, evaluated to its state struct.
#[derive(Debug)]
struct StateKernel {
    kernel: Box<dyn DynKernel>,
    function: &'static str,
    params: String,
    fields: Fields,
}

impl Kernel for StateKernel {
    fn empty(&self) -> Result<Self> {
        Ok(Self {
            kernel: self.kernel.empty_box()?,
            function: self.function,
            params: self.params.clone(),
            fields: self.fields.clone(),
        })
    }
    fn resize(&mut self, n: usize) {
        self.kernel.resize(n)
    }
    fn num_groups(&self) -> usize {
        self.kernel.num_groups()
    }
    fn update(
        &mut self,
        values: &[ArrayRef],
        groups: &[usize],
        filter: Option<&BooleanArray>,
    ) -> Result<()> {
        self.kernel.update(values, groups, filter)
    }
    fn merge(&mut self, states: &[ArrayRef], groups: &[usize]) -> Result<()> {
        self.kernel.merge(states, groups)
    }
    fn state(&self, range: Range<usize>) -> Result<Vec<ArrayRef>> {
        self.kernel.state(range)
    }
    fn evaluate(&mut self, range: Range<usize>) -> Result<ArrayRef> {
        let n = range.len();
        let parts = self.kernel.state(range)?;
        let state = StructArray::try_new(self.fields.clone(), parts, None)?;
        let DataType::Struct(outer) = DataType::Struct(Fields::from(vec![
            Field::new("format", DataType::Int32, true),
            Field::new("function", DataType::Utf8, true),
            Field::new("params", DataType::Utf8, true),
            Field::new("state", state.data_type().clone(), true),
        ])) else {
            unreachable!()
        };
        Ok(Arc::new(StructArray::try_new(
            outer,
            vec![
                Arc::new(Int32Array::from(vec![STATE_FORMAT; n])),
                Arc::new(StringArray::from(vec![self.function; n])),
                Arc::new(StringArray::from(vec![self.params.as_str(); n])),
                Arc::new(state),
            ],
            None,
        )?))
    }
    fn drain(&mut self, n: usize) {
        self.kernel.drain(n)
    }
    fn size(&self) -> usize {
        self.kernel.size()
    }
    fn retractable(&self) -> bool {
        self.kernel.retractable()
    }
    fn retract(&mut self, values: &[ArrayRef], groups: &[usize]) -> Result<()> {
        self.kernel.retract(values, groups)
    }
}

/// `F_merge(state)`: merges stored states of `F` and returns `F`'s value.
#[derive(Debug)]
struct MergeOf {
    inner: Arc<dyn KernelAggregate>,
    name: String,
    signature: Signature,
    doc: Documentation,
}

identified_by_name!(MergeOf);

impl MergeOf {
    fn new(inner: Arc<dyn KernelAggregate>) -> Self {
        let f = inner.name().to_string();
        let name = format!("{f}_merge");
        let retract = if inner.states_retractable() {
            " Works over sliding window frames (`OVER (ORDER BY day ROWS BETWEEN 6 PRECEDING AND CURRENT ROW)`): \
states leaving the frame are subtracted."
        } else {
            ""
        };
        let doc = Documentation::builder(
            section(),
            format!(
                "Merges states made by `{f}_state` (e.g. one per day, read back from Parquet) and returns exactly what \
`{f}` returns over the union of their rows (to summation order). States made with other parameters, by another \
function, or in another format are an error naming both.{retract}"
            ),
            format!("{name}(state)"),
        )
        .with_sql_example(format!(
            r#"```sql
> WITH t(day, p, y, f, q) AS (VALUES (1, 0.2, 0, 'a', 0.5), (1, 0.7, 1, 'b', 0.9), (2, 0.4, 1, 'a', 0.3), (2, 0.9, 0, 'b', 0.6)),
  daily AS (SELECT day, {f}_state({args}) AS s FROM t GROUP BY day)
  SELECT arrow_typeof({name}(s)) = arrow_typeof({f}({args})) AS same_type, count(*) AS days FROM daily, (SELECT * FROM t LIMIT 1) AS t;
+-----------+------+
| same_type | days |
+-----------+------+
| true      | 2    |
+-----------+------+
```"#,
            args = example_args(&inner.call_shape()),
        ))
        .with_argument("state", format!("A state made by `{f}_state`."))
        .build();
        // User-defined coercion (a state read back from Parquet), then the exact state type so
        // that SHOW FUNCTIONS lists it (a user-defined signature alone lists nothing).
        let mut variants = vec![TypeSignature::UserDefined];
        if let Ok(t) = state_type(inner.as_ref()) {
            variants.push(TypeSignature::Exact(vec![t]));
        }
        let mut signature = Signature::one_of(variants, Volatility::Immutable);
        signature.parameter_names = Some(vec!["state".to_string()]);
        Self {
            inner,
            name,
            signature,
            doc,
        }
    }

    /// The state type a call's argument is cast to, or the error that says what is wrong.
    fn state_arg(&self, arg_types: &[DataType]) -> Result<DataType> {
        let expected = state_type(self.inner.as_ref())?;
        let [DataType::Struct(fields)] = arg_types else {
            return plan_err!(
                "{}: argument state must be a state made by {}_state, got type {}; the signature is {}(state)",
                self.name,
                self.inner.name(),
                arg_types
                    .iter()
                    .map(|t| t.to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                self.name
            );
        };
        let names = |t: &DataType| -> Vec<String> {
            match t {
                DataType::Struct(f) => f.iter().map(|f| f.name().clone()).collect(),
                _ => vec![],
            }
        };
        let DataType::Struct(want) = &expected else {
            unreachable!()
        };
        let same_layout = names(&arg_types[0]) == names(&expected)
            && fields.find("state").map(|(_, f)| names(f.data_type()))
                == want.find("state").map(|(_, f)| names(f.data_type()));
        if !same_layout {
            let state = fields.find("state").map(|(_, f)| f.data_type().to_string());
            return plan_err!(
                "{}: the state's layout is not {}'s (got {}); was it made by another function's _state?",
                self.name,
                self.inner.name(),
                state.unwrap_or_else(|| arg_types[0].to_string())
            );
        }
        Ok(expected)
    }

    fn kernel(&self, args: &AccumulatorArgs) -> Result<MergeKernel> {
        let shape = self.inner.call_shape();
        Ok(MergeKernel {
            inner: Arc::clone(&self.inner),
            name: self.name.clone(),
            function: shape.name,
            kernel: None,
            params: None,
            groups: 0,
            state_fields: plain_state_fields(self.inner.as_ref(), &canonical_types(&shape))?,
            return_type: args.return_field.data_type().clone(),
            retractable: self.inner.states_retractable(),
        })
    }
}

impl AggregateUDFImpl for MergeOf {
    fn name(&self) -> &str {
        &self.name
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    /// A state read back from Parquet may differ in string view types and nullability:
    /// cast it to `F`'s state type when its layout (field names) is `F`'s. Anything else is
    /// left as is, for `return_type` to report with this function's own message.
    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        Ok(match self.state_arg(arg_types) {
            Ok(t) => vec![t],
            Err(_) => arg_types.to_vec(),
        })
    }
    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.state_arg(arg_types)?;
        self.inner
            .return_type(&canonical_types(&self.inner.call_shape()))
    }
    crate::kernel::kernel_accumulators!();
    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        let mut out: Vec<FieldRef> = vec![Arc::new(Field::new(
            format_state_name(args.name, "params"),
            DataType::Utf8,
            true,
        ))];
        for f in plain_state_fields(
            self.inner.as_ref(),
            &canonical_types(&self.inner.call_shape()),
        )?
        .iter()
        {
            out.push(Arc::new(Field::new(
                format_state_name(args.name, f.name()),
                f.data_type().clone(),
                true,
            )));
        }
        Ok(out)
    }
    fn documentation(&self) -> Option<&Documentation> {
        Some(&self.doc)
    }
}

/// Merges states into `F`'s kernel, built from the first state's parameters.
#[derive(Debug)]
struct MergeKernel {
    inner: Arc<dyn KernelAggregate>,
    name: String,
    function: &'static str,
    kernel: Option<Box<dyn DynKernel>>,
    params: Option<String>,
    groups: usize,
    state_fields: Fields,
    return_type: DataType,
    retractable: bool,
}

impl MergeKernel {
    /// Checks a state's parameters against the ones merged so far (building the kernel on
    /// the first).
    fn accept(&mut self, params: &str) -> Result<()> {
        match &self.params {
            Some(p) if p == params => Ok(()),
            Some(p) => exec_err!(
                "{}: cannot merge states made with different parameters: {p} and {params}",
                self.name
            ),
            None => {
                let mut kernel = rebuild(self.inner.as_ref(), &self.name, params)?
                    .kernel(self.inner.as_ref())?;
                kernel.resize(self.groups);
                self.kernel = Some(kernel);
                self.params = Some(params.to_string());
                Ok(())
            }
        }
    }

    /// The rows of stored states to merge: their indices, after checking each one.
    fn stored_rows(&mut self, s: &StructArray, filter: Option<&BooleanArray>) -> Result<Vec<u32>> {
        let format = s
            .column_by_name("format")
            .and_then(|c| c.as_primitive_opt::<arrow::datatypes::Int32Type>());
        let function = s.column_by_name("function").map(|c| c.as_string::<i32>());
        let params = s.column_by_name("params").map(|c| c.as_string::<i32>());
        let (Some(format), Some(function), Some(params)) = (format, function, params) else {
            return exec_err!("{}: malformed state struct", self.name);
        };
        let mut rows = vec![];
        for r in 0..s.len() {
            if s.is_null(r) || filter.is_some_and(|f| !f.is_valid(r) || !f.value(r)) {
                continue;
            }
            if format.is_null(r) || format.value(r) != STATE_FORMAT {
                return exec_err!(
                    "{}: state format {} is not one this calibsql reads (format {STATE_FORMAT}); recompute it \
with {}_state",
                    self.name,
                    if format.is_null(r) { "NULL".to_string() } else { format.value(r).to_string() },
                    self.function
                );
            }
            if function.is_null(r) || function.value(r) != self.function {
                return exec_err!(
                    "{}: got a state of {}, made by {}_state; {} merges only {}_state states",
                    self.name,
                    if function.is_null(r) {
                        "NULL"
                    } else {
                        function.value(r)
                    },
                    if function.is_null(r) {
                        "?"
                    } else {
                        function.value(r)
                    },
                    self.name,
                    self.function
                );
            }
            if params.is_null(r) {
                return exec_err!("{}: a state without parameters", self.name);
            }
            self.accept(params.value(r))?;
            rows.push(r as u32);
        }
        Ok(rows)
    }

    /// `f(kernel, states, groups)` over the chosen rows.
    fn apply(
        &mut self,
        children: &[ArrayRef],
        rows: Vec<u32>,
        groups: &[usize],
        unmerge: bool,
    ) -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let idx = UInt32Array::from(rows);
        let taken = children
            .iter()
            .map(|c| take(c.as_ref(), &idx, None))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let g: Vec<usize> = idx.values().iter().map(|&r| groups[r as usize]).collect();
        let kernel = self.kernel.as_mut().expect("built by accept");
        if unmerge {
            kernel.unmerge(&taken, &g)
        } else {
            kernel.merge(&taken, &g)
        }
    }

    fn stored(
        &mut self,
        values: &[ArrayRef],
        groups: &[usize],
        filter: Option<&BooleanArray>,
        unmerge: bool,
    ) -> Result<()> {
        let s = values[0].as_struct();
        let rows = self.stored_rows(s, filter)?;
        let Some(state) = s.column_by_name("state") else {
            return exec_err!("{}: malformed state struct", self.name);
        };
        let children = state.as_struct().columns().to_vec();
        self.apply(&children, rows, groups, unmerge)
    }
}

impl Kernel for MergeKernel {
    fn empty(&self) -> Result<Self> {
        Ok(Self {
            inner: Arc::clone(&self.inner),
            name: self.name.clone(),
            function: self.function,
            kernel: None,
            params: None,
            groups: 0,
            state_fields: self.state_fields.clone(),
            return_type: self.return_type.clone(),
            retractable: self.retractable,
        })
    }
    fn resize(&mut self, n: usize) {
        self.groups = self.groups.max(n);
        if let Some(k) = &mut self.kernel {
            k.resize(n);
        }
    }
    fn num_groups(&self) -> usize {
        self.groups
    }
    fn update(
        &mut self,
        values: &[ArrayRef],
        groups: &[usize],
        filter: Option<&BooleanArray>,
    ) -> Result<()> {
        self.stored(values, groups, filter, false)
    }
    fn merge(&mut self, states: &[ArrayRef], groups: &[usize]) -> Result<()> {
        let params = states[0].as_string::<i32>();
        let mut rows = vec![];
        for r in 0..params.len() {
            if params.is_valid(r) {
                self.accept(params.value(r))?;
                rows.push(r as u32);
            }
        }
        self.apply(&states[1..], rows, groups, false)
    }
    fn state(&self, range: Range<usize>) -> Result<Vec<ArrayRef>> {
        let n = range.len();
        let params: ArrayRef = Arc::new(StringArray::from(vec![self.params.as_deref(); n]));
        let mut out = vec![params];
        match &self.kernel {
            Some(k) => out.extend(k.state(range)?),
            None => out.extend(
                self.state_fields
                    .iter()
                    .map(|f| new_null_array(f.data_type(), n)),
            ),
        }
        Ok(out)
    }
    fn evaluate(&mut self, range: Range<usize>) -> Result<ArrayRef> {
        match &mut self.kernel {
            Some(k) => k.evaluate(range),
            None => Ok(new_null_array(&self.return_type, range.len())),
        }
    }
    fn drain(&mut self, n: usize) {
        self.groups -= n.min(self.groups);
        if let Some(k) = &mut self.kernel {
            k.drain(n);
        }
    }
    fn size(&self) -> usize {
        self.kernel.as_ref().map_or(0, |k| k.size())
    }
    fn retractable(&self) -> bool {
        self.retractable
    }
    fn retract(&mut self, values: &[ArrayRef], groups: &[usize]) -> Result<()> {
        self.stored(values, groups, None, true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_state_function_has_a_unique_name() {
        let names: Vec<String> = state_functions()
            .iter()
            .map(|f| f.name().to_string())
            .collect();
        let mut sorted = names.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), names.len());
        assert!(names.contains(&"ece_state".to_string()));
        assert!(names.contains(&"fit_platt_merge".to_string()));
    }
}
