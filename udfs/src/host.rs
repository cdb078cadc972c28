//! The functions as a host engine other than DataFusion drives them (the DuckDB extension,
//! `duckdb/`), in Arrow arrays and plain values only:
//!
//! - [`host_functions`]: each registered function's name and arguments by kind (with the
//!   constants' defaults), so that a host can declare its own overloads (one per arity and
//!   argument type) and pass constants as constants. The list is the registry's
//!   ([`crate::all_aggregate_functions`], [`crate::all_scalar_functions`]): a function added
//!   there reaches every host.
//! - [`AggregateCall`]: an aggregate called with given argument types and constants, made
//!   from those plain parameters; its [`Groups`] are the function's kernel (the one its
//!   `GROUP BY` accumulator drives), updated with rows by group number, read and merged as
//!   partial states, evaluated.
//! - [`invoke_scalar`]: a scalar function over arrays and constants.
//!
//! DataFusion's planner is not involved: a host checks and coerces nothing itself, and what
//! DataFusion's planner would refuse (a wrong type, a bad constant) is an error here, with
//! the function's own message.

use std::ops::Range;
use std::sync::Arc;

use arrow::array::ArrayRef;
use arrow::datatypes::{DataType, Field, FieldRef, Schema};
use datafusion_common::config::ConfigOptions;
use datafusion_common::{internal_err, Result, ScalarValue};
use datafusion_expr::function::AccumulatorArgs;
use datafusion_expr::{
    AggregateUDF, ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF,
};
use datafusion_physical_expr::expressions::{Column, Literal};
use datafusion_physical_expr::PhysicalExpr;

use crate::common::{CallShape, Role};
use crate::kernel::{labels_for, DynKernel};

/// What a host passes for an argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArgumentKind {
    /// A number per row (read as Float64).
    Number,
    /// A label per row: Boolean or a number 0/1.
    Label,
    /// A column of any type (a field), passed as it is.
    Column,
    /// A list of numbers per row (read as a list of Float64).
    NumberList,
    /// A constant integer (`n_bins`).
    ConstantInteger,
    /// A constant string (`strategy`).
    ConstantText,
    /// A constant number (`eps`, `clip`).
    ConstantNumber,
    /// A partial state as the named `_state` aggregate returns it (the `_merge` twins).
    StateOf(String),
}

impl ArgumentKind {
    /// Whether the argument must be the same constant on every row.
    pub fn is_constant(&self) -> bool {
        matches!(
            self,
            Self::ConstantInteger | Self::ConstantText | Self::ConstantNumber
        )
    }
}

/// One argument of a [`HostFunction`].
#[derive(Debug, Clone)]
pub struct HostArgument {
    pub name: &'static str,
    pub kind: ArgumentKind,
    /// The value a call that leaves a constant out stands for (`15`, `'uniform'`).
    pub default: Option<ScalarValue>,
}

/// A function's DataFusion implementation.
#[derive(Debug, Clone)]
pub enum Implementation {
    Aggregate(Arc<AggregateUDF>),
    Scalar(Arc<ScalarUDF>),
}

/// A registered function as a host declares it: every prefix of `arguments` at least
/// `required` long is a valid call.
#[derive(Debug, Clone)]
pub struct HostFunction {
    pub name: String,
    pub implementation: Implementation,
    pub arguments: Vec<HostArgument>,
    pub required: usize,
}

/// Every function a host can declare, in registry order. Left out: `multi_field_rce`,
/// whose number of field arguments is not fixed.
pub fn host_functions() -> Vec<HostFunction> {
    let aggregates = crate::all_aggregate_functions()
        .into_iter()
        .map(|f| (f.name().to_string(), Implementation::Aggregate(f)));
    let scalars = crate::all_scalar_functions()
        .into_iter()
        .map(|f| (f.name().to_string(), Implementation::Scalar(f)));
    aggregates
        .chain(scalars)
        .filter_map(|(name, implementation)| {
            let (arguments, required) = arguments_of(&name)?;
            Some(HostFunction {
                name,
                implementation,
                arguments,
                required,
            })
        })
        .collect()
}

fn arguments_of(name: &str) -> Option<(Vec<HostArgument>, usize)> {
    if let Some(shape) = crate::registry::shape_of(name) {
        return Some(from_shape(&shape));
    }
    if let Some(stem) = name.strip_suffix("_merge") {
        let state = format!("{stem}_state");
        crate::registry::shape_of(&state)?;
        let arg = HostArgument {
            name: "state",
            kind: ArgumentKind::StateOf(state),
            default: None,
        };
        return Some((vec![arg], 1));
    }
    // `calibrate` checks its model argument itself (any calibrator's model struct).
    (name == "calibrate").then(|| {
        let arg = |name, kind| HostArgument {
            name,
            kind,
            default: None,
        };
        let arguments = vec![
            arg("score", ArgumentKind::Number),
            arg("model", ArgumentKind::Column),
            arg("field", ArgumentKind::Column),
        ];
        (arguments, 2)
    })
}

fn from_shape(shape: &CallShape) -> (Vec<HostArgument>, usize) {
    let arguments = shape
        .required
        .iter()
        .chain(shape.optional)
        .map(|a| HostArgument {
            name: a.name,
            default: a.default.and_then(literal_value),
            kind: match (a.role, a.is_literal()) {
                (Role::LitInt, _) => ArgumentKind::ConstantInteger,
                (Role::LitStr, _) => ArgumentKind::ConstantText,
                (Role::LitNum, _) | (_, true) => ArgumentKind::ConstantNumber,
                (Role::Num, false) => ArgumentKind::Number,
                (Role::Label, false) => ArgumentKind::Label,
                (Role::Any, false) => ArgumentKind::Column,
                (Role::NumList, false) => ArgumentKind::NumberList,
            },
        })
        .collect();
    (arguments, shape.required.len())
}

/// The value of a SQL literal as the signatures write defaults: `15`, `'uniform'`, `1e-7`.
fn literal_value(sql: &str) -> Option<ScalarValue> {
    if let Some(text) = sql.strip_prefix('\'').and_then(|s| s.strip_suffix('\'')) {
        return Some(ScalarValue::Utf8(Some(text.to_string())));
    }
    if let Ok(i) = sql.parse::<i64>() {
        return Some(ScalarValue::Int64(Some(i)));
    }
    sql.parse::<f64>()
        .ok()
        .map(|x| ScalarValue::Float64(Some(x)))
}

impl HostFunction {
    /// What the function returns for arguments of `types` (checked as the planner checks
    /// them).
    pub fn return_type(&self, types: &[DataType]) -> Result<DataType> {
        match &self.implementation {
            Implementation::Aggregate(a) => a.return_type(&a.coerce_types(types)?),
            Implementation::Scalar(s) => {
                let fields = fields_of(types);
                let scalars: Vec<Option<&ScalarValue>> = vec![None; types.len()];
                let args = ReturnFieldArgs {
                    arg_fields: &fields,
                    scalar_arguments: &scalars,
                };
                Ok(s.return_field_from_args(args)?.data_type().clone())
            }
        }
    }
}

fn fields_of(types: &[DataType]) -> Vec<FieldRef> {
    types
        .iter()
        .enumerate()
        .map(|(i, t)| Arc::new(Field::new(format!("a{i}"), t.clone(), true)))
        .collect()
}

/// An aggregate called with arguments of given types, its constant arguments given by value
/// (`None` for a data column): what the planner would make of `ece(p, y, 20)`, built from
/// those plain parameters.
#[derive(Debug)]
pub struct AggregateCall {
    udaf: Arc<AggregateUDF>,
    schema: Schema,
    exprs: Vec<Arc<dyn PhysicalExpr>>,
    fields: Vec<FieldRef>,
    ret: FieldRef,
    constants: Vec<Option<ScalarValue>>,
}

/// Groups of one [`AggregateCall`], numbered from 0: every group's state is its entries in the
/// vectors of the function's kernel, as calibsql's own `GROUP BY` keeps them, so a group
/// costs what it costs there. A host keeps one per call (and thread) and hands its groups
/// out by number.
#[derive(Debug)]
pub struct Groups(Box<dyn DynKernel>);

impl Groups {
    /// A new, empty group; its number.
    pub fn add(&mut self) -> usize {
        let n = self.0.num_groups();
        self.0.resize(n + 1);
        n
    }

    /// Adds rows: one coerced array per argument ([`AggregateCall::coerce`]), row `i` to
    /// group `groups[i]`.
    pub fn update(&mut self, values: &[ArrayRef], groups: &[usize]) -> Result<()> {
        let values = labels_for(self.0.as_ref(), values)?;
        self.0.update(&values, groups, None)
    }

    /// The partial state of the groups in `range`, one array per state field, a row per
    /// group; the groups are left as they were.
    pub fn state(&self, range: Range<usize>) -> Result<Vec<ArrayRef>> {
        self.0.state(range)
    }

    /// The partial state of the groups in `range`, as [`Groups::state`], when nothing will
    /// read those groups again: a kernel that keeps rows moves them out instead of copying
    /// them, leaving the groups empty; others leave them as they were.
    pub fn take_state(&mut self, range: Range<usize>) -> Result<Vec<ArrayRef>> {
        self.0.take_state(range)
    }

    /// Adds partial states (as [`Groups::state`] gives them), row `i` to group `groups[i]`.
    pub fn merge(&mut self, states: &[ArrayRef], groups: &[usize]) -> Result<()> {
        self.0.merge(states, groups)
    }

    /// The values of the groups in `range` (the groups stay usable).
    pub fn evaluate(&mut self, range: Range<usize>) -> Result<ArrayRef> {
        self.0.evaluate(range)
    }
}

impl AggregateCall {
    pub fn new(
        udaf: &Arc<AggregateUDF>,
        types: &[DataType],
        constants: Vec<Option<ScalarValue>>,
    ) -> Result<Self> {
        let coerced = udaf.coerce_types(types)?;
        let fields = fields_of(&coerced);
        let exprs = constants
            .iter()
            .enumerate()
            .map(|(i, c)| match c {
                Some(v) => Arc::new(Literal::new(v.clone())) as Arc<dyn PhysicalExpr>,
                None => Arc::new(Column::new(&format!("a{i}"), i)) as Arc<dyn PhysicalExpr>,
            })
            .collect();
        let ret = Arc::new(Field::new(udaf.name(), udaf.return_type(&coerced)?, true));
        Ok(Self {
            udaf: Arc::clone(udaf),
            schema: Schema::new(fields.clone()),
            exprs,
            fields,
            ret,
            constants,
        })
    }

    pub fn name(&self) -> &str {
        self.udaf.name()
    }

    /// The constant arguments, as given.
    pub fn constants(&self) -> &[Option<ScalarValue>] {
        &self.constants
    }

    fn args(&self) -> AccumulatorArgs<'_> {
        AccumulatorArgs {
            return_field: Arc::clone(&self.ret),
            schema: &self.schema,
            ignore_nulls: false,
            order_bys: &[],
            is_reversed: false,
            name: self.udaf.name(),
            is_distinct: false,
            exprs: &self.exprs,
            expr_fields: &self.fields,
        }
    }

    /// No groups yet, for this call.
    pub fn groups(&self) -> Result<Groups> {
        let Some(source) = crate::registry::kernel_source(self.udaf.name()) else {
            return internal_err!("{}: not a registered aggregate", self.udaf.name());
        };
        Ok(Groups(source.dyn_kernel(&self.args())?))
    }

    /// `values` (one array per argument, constants included) as the function reads them.
    pub fn coerce(&self, values: &[ArrayRef]) -> Result<Vec<ArrayRef>> {
        values
            .iter()
            .zip(&self.fields)
            .map(|(v, f)| {
                if v.data_type() == f.data_type() {
                    Ok(Arc::clone(v))
                } else {
                    Ok(arrow::compute::cast(v, f.data_type())?)
                }
            })
            .collect()
    }
}

/// Scalar function `f` over `args`: an array per row, or a constant, with `rows` rows.
pub fn invoke_scalar(
    f: &ScalarUDF,
    args: Vec<ColumnarValue>,
    rows: usize,
    returns: &DataType,
    config: &Arc<ConfigOptions>,
) -> Result<ArrayRef> {
    let types: Vec<DataType> = args.iter().map(|a| a.data_type()).collect();
    f.invoke_with_args(ScalarFunctionArgs {
        args,
        arg_fields: fields_of(&types),
        number_rows: rows,
        return_field: Arc::new(Field::new(f.name(), returns.clone(), true)),
        config_options: Arc::clone(config),
    })?
    .into_array(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_function_but_multi_field_rce_is_declared() {
        let declared: Vec<String> = host_functions().into_iter().map(|f| f.name).collect();
        for f in crate::all_aggregate_functions() {
            assert_eq!(
                declared.contains(&f.name().to_string()),
                f.name() != "multi_field_rce",
                "{}",
                f.name()
            );
        }
        for f in crate::all_scalar_functions() {
            assert!(declared.contains(&f.name().to_string()), "{}", f.name());
        }
        // Every aggregate (the twins too) has the kernel source `AggregateCall::groups` uses.
        for f in crate::all_aggregate_functions() {
            assert!(
                crate::registry::kernel_source(f.name()).is_some(),
                "{}",
                f.name()
            );
        }
        let merge = host_functions()
            .into_iter()
            .find(|f| f.name == "ece_merge")
            .unwrap();
        assert_eq!(
            merge.arguments[0].kind,
            ArgumentKind::StateOf("ece_state".into())
        );
    }

    #[test]
    fn groups_of_a_call_are_evaluated_by_number() {
        // Expected values by hand (ECE with 2 uniform bins, one bin used per group).
        use arrow::array::{Float64Array, Int64Array};
        let ece = crate::all_aggregate_functions()
            .into_iter()
            .find(|f| f.name() == "ece")
            .unwrap();
        let types = [DataType::Float64, DataType::Float64, DataType::Int64];
        let constants = vec![None, None, Some(ScalarValue::Int64(Some(2)))];
        let call = AggregateCall::new(&ece, &types, constants).unwrap();
        let mut groups = call.groups().unwrap();
        let (a, b) = (groups.add(), groups.add());
        let p: ArrayRef = Arc::new(Float64Array::from(vec![0.2, 0.8, 0.3, 0.9]));
        let y: ArrayRef = Arc::new(Float64Array::from(vec![0.0, 1.0, 1.0, 1.0]));
        let n: ArrayRef = Arc::new(Int64Array::from(vec![2; 4]));
        groups.update(&[p, y, n], &[a, b, a, b]).unwrap();
        let values = groups.evaluate(0..2).unwrap();
        let values = values
            .as_any()
            .downcast_ref::<Float64Array>()
            .unwrap()
            .values()
            .to_vec();
        // Group a: bin [0, 0.5) holds p 0.2, 0.3 and y 0, 1: |0.25 - 0.5| = 0.25.
        // Group b: bin [0.5, 1] holds p 0.8, 0.9 and y 1, 1: |0.85 - 1| = 0.15.
        assert!((values[0] - 0.25).abs() <= 1e-12, "{values:?}");
        assert!((values[1] - 0.15).abs() <= 1e-12, "{values:?}");
        // A group's state, merged into a new group, gives the same value.
        let state = groups.state(a..a + 1).unwrap();
        let c = groups.add();
        groups.merge(&state, &[c]).unwrap();
        let again = groups.evaluate(c..c + 1).unwrap();
        let again = again
            .as_any()
            .downcast_ref::<Float64Array>()
            .unwrap()
            .value(0);
        assert!((again - 0.25).abs() <= 1e-12, "{again}");
    }
}
