//! Functions whose results grow with an argument's *value* stay within `--memory-limit`.
//!
//! DataFusion's memory pool counts what operators hold (sorts, joins, aggregations), not the
//! batch a scalar function returns. Most functions return about as much as they read, but a
//! few make as much as an argument says: `repeat('x', 2000000000)` is 2 GB of text from a
//! 20-byte statement. Under a memory limit, calibsql registers those functions wrapped
//! ([`bound_value_functions`]): before the built-in runs, the wrapper computes an upper bound
//! of the bytes its result would take for the batch, and refuses the batch when that passes
//! the ceiling: a quarter of the limit (the result, and the copies the next step makes of it,
//! stay within about 1.5 times the limit). The functions and their bounds are listed in
//! docs/SEMANTICS.md ("Memory limit").

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, Int64Array};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, FieldRef, Int64Type};
use datafusion::common::config::ConfigOptions;
use datafusion::common::{DataFusionError, ExprSchema, Result, ScalarValue};
use datafusion::logical_expr::interval_arithmetic::Interval;
use datafusion::logical_expr::preimage::PreimageResult;
use datafusion::logical_expr::simplify::{ExprSimplifyResult, SimplifyContext};
use datafusion::logical_expr::sort_properties::{ExprProperties, SortProperties};
use datafusion::logical_expr::{
    ColumnarValue, Documentation, Expr, ExpressionPlacement, ReturnFieldArgs, ScalarFunctionArgs,
    ScalarUDF, ScalarUDFImpl, Signature, StructFieldMapping,
};
use datafusion::prelude::SessionContext;

use crate::errors::Plain;

mod aggregates;

/// How a function's result grows with its arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Growth {
    /// `repeat(text, n)`: the text's bytes times n.
    Repeat,
    /// `lpad`/`rpad(text, n [, fill])`: n characters of up to 4 bytes.
    Pad,
    /// `array_repeat(element, n)`: the element's bytes times n.
    ArrayRepeat,
    /// `array_resize(list, n [, value])`: n elements of the list's element size.
    ArrayResize,
    /// `range`/`generate_series(start, stop [, step])` on integers: 8 bytes an element.
    Range,
    /// `replace(text, from, to)`: each occurrence of `from` (none when it is empty) becomes
    /// `to`.
    Replace,
    /// `regexp_replace(text, pattern, to [, flags])`: a pattern that matches the empty string
    /// puts `to` at every character boundary.
    RegexpReplace,
}

/// The functions bounded, by DataFusion name, and how each grows.
const BOUNDED: [(&str, Growth); 9] = [
    ("repeat", Growth::Repeat),
    ("lpad", Growth::Pad),
    ("rpad", Growth::Pad),
    ("array_repeat", Growth::ArrayRepeat),
    ("array_resize", Growth::ArrayResize),
    ("range", Growth::Range),
    ("generate_series", Growth::Range),
    ("replace", Growth::Replace),
    ("regexp_replace", Growth::RegexpReplace),
];

/// The part of the memory limit one batch of a function's result may take.
pub const CEILING_DIVISOR: usize = 4;

/// The most one batch of a function's result, or an aggregate's state
/// ([`aggregates`]), may take under `memory_limit`: a quarter of it.
fn ceiling(memory_limit: usize) -> usize {
    (memory_limit / CEILING_DIVISOR).max(1)
}

/// The error of a function (`name`) that would take more than the ceiling under
/// `memory_limit`: `what` says what and how much, `advice` is appended to the rule.
fn refusal(name: &str, what: &str, memory_limit: usize, advice: &str) -> DataFusionError {
    Plain::error(format!(
        "{name}: {what}, more than the {} a function's result may take under --memory-limit {} \
         (a quarter of it{advice}; docs/SEMANTICS.md, \"Memory limit\")",
        size(ceiling(memory_limit) as f64),
        size(memory_limit as f64),
    ))
}

/// Replaces the built-in functions whose results grow with an argument's value by wrappers
/// that refuse a batch whose result would take more than `memory_limit /`
/// [`CEILING_DIVISOR`] bytes, and the aggregates whose state grows with their values
/// (`string_agg`, `array_agg`) by wrappers that refuse to hold more (`aggregates`).
/// Functions the session does not have are skipped.
pub fn bound_value_functions(ctx: &SessionContext, memory_limit: usize) {
    aggregates::bound_aggregates(ctx, memory_limit);
    let ceiling = ceiling(memory_limit);
    for (name, growth) in BOUNDED {
        let Some(udf) = ctx.state().scalar_functions().get(name).cloned() else {
            continue;
        };
        let inner = Arc::clone(udf.inner());
        ctx.register_udf(ScalarUDF::new_from_impl(Bounded {
            inner,
            growth,
            ceiling,
            memory_limit,
        }));
    }
}

/// A built-in function with a bound on its result's bytes; everything else is the
/// built-in's.
#[derive(Debug)]
struct Bounded {
    inner: Arc<dyn ScalarUDFImpl>,
    growth: Growth,
    ceiling: usize,
    memory_limit: usize,
}

impl PartialEq for Bounded {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner) && self.ceiling == other.ceiling
    }
}

impl Eq for Bounded {}

impl std::hash::Hash for Bounded {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.inner.name().hash(state);
        self.ceiling.hash(state);
    }
}

/// Bytes in a human unit.
fn size(bytes: f64) -> String {
    const UNITS: [&str; 5] = ["bytes", "KB", "MB", "GB", "TB"];
    let mut value = bytes;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{value:.0} {}", UNITS[0])
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// One argument, row by row, without materialising a constant into a column (a NULL counts
/// 0).
enum PerRow {
    Const(i64),
    Values(Int64Array),
}

impl PerRow {
    /// An argument cast to 64-bit integers.
    fn of(values: &ArrayRef) -> Result<PerRow> {
        Ok(PerRow::Values(
            cast(values, &DataType::Int64)?
                .as_primitive::<Int64Type>()
                .clone(),
        ))
    }

    fn at(&self, row: usize) -> i64 {
        match self {
            PerRow::Const(v) => *v,
            PerRow::Values(values) if values.is_null(row) => 0,
            PerRow::Values(values) => values.value(row),
        }
    }
}

/// An integer argument as 64-bit integers (a NULL counts 0).
fn integers(arg: &ColumnarValue) -> Result<PerRow> {
    Ok(match arg {
        ColumnarValue::Scalar(s) => match s.cast_to(&DataType::Int64)? {
            ScalarValue::Int64(Some(v)) => PerRow::Const(v),
            _ => PerRow::Const(0),
        },
        ColumnarValue::Array(a) => PerRow::of(a)?,
    })
}

/// The bytes of each value of a text or binary argument; of any other argument, its
/// element's bytes (a fixed width, or the column's average).
fn value_bytes(arg: &ColumnarValue) -> Result<PerRow> {
    Ok(match arg {
        ColumnarValue::Scalar(s) => PerRow::Const(scalar_bytes(s)? as i64),
        ColumnarValue::Array(a) => match a.data_type() {
            DataType::Utf8
            | DataType::LargeUtf8
            | DataType::Utf8View
            | DataType::Binary
            | DataType::LargeBinary
            | DataType::BinaryView => {
                PerRow::of(&datafusion::arrow::compute::kernels::length::length(a)?)?
            }
            other => PerRow::Const(match other.primitive_width() {
                Some(width) => width as i64,
                None => (a.get_array_memory_size() / a.len().max(1)) as i64 + 1,
            }),
        },
    })
}

fn scalar_bytes(s: &ScalarValue) -> Result<usize> {
    Ok(match s {
        ScalarValue::Utf8(v) | ScalarValue::LargeUtf8(v) | ScalarValue::Utf8View(v) => {
            v.as_ref().map_or(0, String::len)
        }
        ScalarValue::Binary(v) | ScalarValue::LargeBinary(v) | ScalarValue::BinaryView(v) => {
            v.as_ref().map_or(0, Vec::len)
        }
        other => match other.data_type().primitive_width() {
            Some(width) => width,
            None => other.to_array()?.get_array_memory_size(),
        },
    })
}

/// The element bytes of a list argument (its values' average).
fn element_bytes(arg: &ColumnarValue) -> Result<i64> {
    let array = match arg {
        ColumnarValue::Scalar(s) => s.to_array()?,
        ColumnarValue::Array(a) => Arc::clone(a),
    };
    let values = match array.data_type() {
        DataType::List(_) => array.as_list::<i32>().values().clone(),
        DataType::LargeList(_) => array.as_list::<i64>().values().clone(),
        DataType::FixedSizeList(..) => array.as_fixed_size_list().values().clone(),
        _ => return Ok(8),
    };
    Ok(match values.data_type().primitive_width() {
        Some(width) => width as i64,
        None => (values.get_array_memory_size() / values.len().max(1)) as i64 + 1,
    })
}

/// The largest row's driving value and the bound of the batch's result bytes.
struct Estimate {
    bytes: f64,
    /// The argument (1-based) whose value drives the size, and its largest value.
    argument: usize,
    value: i64,
}

impl Bounded {
    fn estimate(&self, args: &ScalarFunctionArgs) -> Result<Option<Estimate>> {
        let all_constant = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let rows = if all_constant { 1 } else { args.number_rows };
        let arg = |i: usize| args.args.get(i);
        let mut estimate = Estimate {
            bytes: 0.0,
            argument: 2,
            value: 0,
        };
        let mut add = |bytes: f64, value: i64| {
            estimate.bytes += bytes.max(0.0);
            estimate.value = estimate.value.max(value);
        };
        match self.growth {
            Growth::Repeat | Growth::ArrayRepeat => {
                let (Some(value), Some(count)) = (arg(0), arg(1)) else {
                    return Ok(None);
                };
                let (value, count) = (value_bytes(value)?, integers(count)?);
                for row in 0..rows {
                    let n = count.at(row);
                    add(value.at(row) as f64 * n.max(0) as f64, n);
                }
            }
            Growth::Pad => {
                let Some(count) = arg(1) else {
                    return Ok(None);
                };
                let count = integers(count)?;
                for row in 0..rows {
                    let n = count.at(row);
                    add(4.0 * n.max(0) as f64, n);
                }
            }
            Growth::ArrayResize => {
                let (Some(list), Some(count)) = (arg(0), arg(1)) else {
                    return Ok(None);
                };
                let (element, count) = (element_bytes(list)?, integers(count)?);
                for row in 0..rows {
                    let n = count.at(row);
                    add(element as f64 * n.max(0) as f64, n);
                }
            }
            Growth::Range => {
                // Integers only: dates and timestamps step by intervals.
                if !args.args.iter().all(|a| a.data_type() == DataType::Int64) {
                    return Ok(None);
                }
                let bounds: Vec<PerRow> = args.args.iter().map(integers).collect::<Result<_>>()?;
                estimate.argument = bounds.len().min(2);
                for row in 0..rows {
                    let (start, stop, step) = match bounds.len() {
                        1 => (0, bounds[0].at(row), 1),
                        2 => (bounds[0].at(row), bounds[1].at(row), 1),
                        _ => (bounds[0].at(row), bounds[1].at(row), bounds[2].at(row)),
                    };
                    let span = (stop as f64 - start as f64).abs();
                    let count = if step == 0 {
                        0.0
                    } else {
                        span / (step as f64).abs() + 1.0
                    };
                    add(8.0 * count, stop);
                }
            }
            Growth::Replace | Growth::RegexpReplace => {
                let (Some(text), Some(from), Some(to)) = (arg(0), arg(1), arg(2)) else {
                    return Ok(None);
                };
                estimate.argument = 3;
                let (text, from, to) = (value_bytes(text)?, value_bytes(from)?, value_bytes(to)?);
                for row in 0..rows {
                    let (t, r) = (text.at(row) as f64, to.at(row));
                    let occurrences = match self.growth {
                        Growth::Replace if from.at(row) == 0 => 0.0,
                        Growth::Replace => (t / from.at(row) as f64).floor(),
                        _ => t + 1.0,
                    };
                    add(t + occurrences * r as f64, r);
                }
            }
        }
        Ok(Some(estimate))
    }

    fn check(&self, args: &ScalarFunctionArgs) -> Result<()> {
        let Some(estimate) = self.estimate(args)? else {
            return Ok(());
        };
        if estimate.bytes <= self.ceiling as f64 {
            return Ok(());
        }
        let what = match self.growth {
            Growth::Replace | Growth::RegexpReplace => format!(
                "its replacement ({} bytes at the most) at every match",
                estimate.value
            ),
            _ => format!(
                "argument {} = {}{}",
                estimate.argument,
                estimate.value,
                if args.number_rows > 1 {
                    " at the most"
                } else {
                    ""
                }
            ),
        };
        let smaller_batches = if args.number_rows > 1 {
            format!(
                "; for {} rows at once: SET datafusion.execution.batch_size to fewer",
                args.number_rows
            )
        } else {
            String::new()
        };
        Err(refusal(
            self.inner.name(),
            &format!(
                "the result would take up to {} ({what})",
                size(estimate.bytes)
            ),
            self.memory_limit,
            &smaller_batches,
        ))
    }
}

// Delegates every method to the built-in, so that the wrapper plans, simplifies and orders
// exactly as the built-in does; only `invoke_with_args` checks first.
#[warn(clippy::missing_trait_methods)]
impl ScalarUDFImpl for Bounded {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn display_name(&self, args: &[Expr]) -> Result<String> {
        #[expect(deprecated)]
        self.inner.display_name(args)
    }

    fn schema_name(&self, args: &[Expr]) -> Result<String> {
        self.inner.schema_name(args)
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.inner.return_type(arg_types)
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        self.inner.return_field_from_args(args)
    }

    fn is_nullable(&self, args: &[Expr], schema: &dyn ExprSchema) -> bool {
        #[expect(deprecated)]
        self.inner.is_nullable(args, schema)
    }

    fn is_strict(&self) -> bool {
        self.inner.is_strict()
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        self.check(&args)?;
        self.inner.invoke_with_args(args)
    }

    fn with_updated_config(&self, _config: &ConfigOptions) -> Option<ScalarUDF> {
        None
    }

    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }

    fn simplify(&self, args: Vec<Expr>, info: &SimplifyContext) -> Result<ExprSimplifyResult> {
        self.inner.simplify(args, info)
    }

    fn preimage(
        &self,
        args: &[Expr],
        lit_expr: &Expr,
        info: &SimplifyContext,
    ) -> Result<PreimageResult> {
        self.inner.preimage(args, lit_expr, info)
    }

    fn conditional_arguments<'a>(
        &self,
        args: &'a [Expr],
    ) -> Option<(Vec<&'a Expr>, Vec<&'a Expr>)> {
        self.inner.conditional_arguments(args)
    }

    fn short_circuits(&self) -> bool {
        self.inner.short_circuits()
    }

    fn evaluate_bounds(&self, input: &[&Interval]) -> Result<Interval> {
        self.inner.evaluate_bounds(input)
    }

    fn propagate_constraints(
        &self,
        interval: &Interval,
        inputs: &[&Interval],
    ) -> Result<Option<Vec<Interval>>> {
        self.inner.propagate_constraints(interval, inputs)
    }

    fn struct_field_mapping(
        &self,
        literal_args: &[Option<ScalarValue>],
    ) -> Option<StructFieldMapping> {
        self.inner.struct_field_mapping(literal_args)
    }

    fn output_ordering(&self, inputs: &[ExprProperties]) -> Result<SortProperties> {
        self.inner.output_ordering(inputs)
    }

    fn preserves_lex_ordering(&self, inputs: &[ExprProperties]) -> Result<bool> {
        self.inner.preserves_lex_ordering(inputs)
    }

    fn strictly_order_preserving(&self, inputs: &[ExprProperties]) -> Result<bool> {
        self.inner.strictly_order_preserving(inputs)
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        self.inner.coerce_types(arg_types)
    }

    fn documentation(&self) -> Option<&Documentation> {
        self.inner.documentation()
    }

    fn placement(&self, args: &[ExpressionPlacement]) -> ExpressionPlacement {
        self.inner.placement(args)
    }
}
