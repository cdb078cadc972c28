//! Shared by tests and benches (`#[path]`-included): one of calibsql's aggregates called on
//! columns of a schema, with the accumulator arguments the planner would build; the
//! registered aggregates without a call in a list.
#![allow(dead_code)] // each including target uses part of it

use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::Float64Type;
use datafusion::common::ScalarValue;

use datafusion::arrow::datatypes::{DataType, Field, FieldRef, SchemaRef};
use datafusion::logical_expr::function::AccumulatorArgs;
use datafusion::logical_expr::{Accumulator, AggregateUDF, GroupsAccumulator};
use datafusion::physical_expr::expressions::col;
use datafusion::physical_expr::PhysicalExpr;

/// The registered aggregates (their `_state`/`_merge` twins aside) that no call of `calls`
/// (`"name(…)"`) calls.
pub fn aggregates_without_a_call<'a>(calls: impl Iterator<Item = &'a str> + Clone) -> Vec<String> {
    calibsql::udfs::all_aggregate_functions()
        .iter()
        .map(|f| f.name().to_string())
        .filter(|n| !n.ends_with("_state") && !n.ends_with("_merge"))
        .filter(|n| !calls.clone().any(|c| c.starts_with(&format!("{n}("))))
        .collect()
}

pub struct UdafCall {
    pub udaf: Arc<AggregateUDF>,
    schema: SchemaRef,
    pub exprs: Vec<Arc<dyn PhysicalExpr>>,
    fields: Vec<FieldRef>,
    ret: FieldRef,
}

impl UdafCall {
    /// `name(exprs…)` over `schema`.
    pub fn new(name: &str, schema: SchemaRef, exprs: Vec<Arc<dyn PhysicalExpr>>) -> Self {
        let udaf = calibsql::udfs::all_aggregate_functions()
            .into_iter()
            .find(|f| f.name() == name)
            .unwrap_or_else(|| panic!("no aggregate {name}"));
        let fields: Vec<FieldRef> = exprs
            .iter()
            .map(|e| e.return_field(&schema).unwrap())
            .collect();
        let types: Vec<DataType> = fields.iter().map(|f| f.data_type().clone()).collect();
        let ret = Arc::new(Field::new("r", udaf.return_type(&types).unwrap(), true));
        Self {
            udaf,
            schema,
            exprs,
            fields,
            ret,
        }
    }

    /// `name(col1, col2, …)` over the named columns of `schema`.
    pub fn columns(name: &str, schema: SchemaRef, cols: &[&str]) -> Self {
        let exprs = cols.iter().map(|c| col(c, &schema).unwrap()).collect();
        Self::new(name, schema, exprs)
    }

    /// `name(…)` over Float64 columns `cols` (a schema of just those).
    pub fn float_columns(name: &str, cols: &[&str]) -> Self {
        let fields: Vec<Field> = cols
            .iter()
            .map(|c| Field::new(*c, DataType::Float64, true))
            .collect();
        let schema = Arc::new(datafusion::arrow::datatypes::Schema::new(fields));
        Self::columns(name, schema, cols)
    }

    pub fn args(&self) -> AccumulatorArgs<'_> {
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

    pub fn accumulator(&self) -> Box<dyn Accumulator> {
        self.udaf.accumulator(self.args()).unwrap()
    }

    pub fn groups_accumulator(&self) -> Box<dyn GroupsAccumulator> {
        self.udaf.create_groups_accumulator(self.args()).unwrap()
    }
}

/// Every float inside a result (for lists of structs: every field of every bin; for a model
/// struct: every numeric field and knot).
pub fn leaves(v: &ScalarValue) -> Vec<Option<f64>> {
    match v {
        ScalarValue::Struct(s) => {
            if s.is_null(0) {
                return vec![None];
            }
            s.columns()
                .iter()
                .zip(s.fields())
                .filter(|(_, f)| f.name() != "iterations")
                .flat_map(|(c, _)| match c.data_type() {
                    DataType::Utf8 => vec![],
                    // Text lists (a field-aware model's keys) are not numbers.
                    DataType::List(f) if *f.data_type() == DataType::Utf8 => vec![],
                    DataType::List(_) => {
                        let l = c.as_list::<i32>();
                        if l.is_null(0) {
                            vec![None]
                        } else {
                            l.value(0).as_primitive::<Float64Type>().iter().collect()
                        }
                    }
                    _ => {
                        let c = cast(c, &DataType::Float64).unwrap();
                        c.as_primitive::<Float64Type>().iter().collect()
                    }
                })
                .collect()
        }
        ScalarValue::List(l) => {
            if l.is_null(0) {
                return vec![None];
            }
            // Each struct of the list (a bin, a class's model) as a struct of its own.
            let inner = l.value(0);
            (0..inner.len())
                .flat_map(|i| leaves(&ScalarValue::try_from_array(&inner, i).unwrap()))
                .collect()
        }
        other => match other.cast_to(&DataType::Float64).unwrap() {
            ScalarValue::Float64(x) => vec![x],
            _ => unreachable!(),
        },
    }
}

/// The tests' one tolerance check: `|got - want| <= tol`. A NaN on either side fails it (a check
/// written `if (got - want).abs() > tol { fail }` lets a NaN through, since every comparison
/// with NaN is false); equal values pass, so an infinity matches itself. Write every tolerance
/// comparison through this or [`close_rel`] / [`close_mixed`], never as a `> tol` failure test.
pub fn close(got: f64, want: f64, tol: f64) -> bool {
    got == want || (got - want).abs() <= tol
}

/// [`close`] relative to the reference: `|got - want| <= rel * |want|`.
pub fn close_rel(got: f64, want: f64, rel: f64) -> bool {
    close(got, want, rel * want.abs())
}

/// [`close`] with a mixed tolerance, symmetric in the two values:
/// `|a - b| <= rel * max(|a|, |b|) + abs`.
pub fn close_mixed(a: f64, b: f64, rel: f64, abs: f64) -> bool {
    close(a, b, rel * a.abs().max(b.abs()) + abs)
}

/// Equal up to summation order. Metrics: 1e-12 relative, plus 1e-12 absolute because an
/// IPS loss can be a near-zero mean of O(1) terms of both signs (cancellation). Models: the
/// Newton iteration stops once the loss is within 1e-14 of its optimum, so a different
/// summation order can stop one step apart; parameters then agree to ~1e-7 (checked at 1e-6)
/// and the iteration count may differ (not compared).
pub fn assert_close(what: &str, a: &ScalarValue, b: &ScalarValue) {
    let (rel, abs) = if matches!(a, ScalarValue::Struct(_)) {
        (1e-6, 1e-9)
    } else {
        (1e-12, 1e-12)
    };
    let (la, lb) = (leaves(a), leaves(b));
    assert_eq!(la.len(), lb.len(), "{what}: {a:?} vs {b:?}");
    for (x, y) in la.iter().zip(&lb) {
        match (x, y) {
            (None, None) => {}
            // An estimate that does not exist on this data (a test's p-value with df < 1,
            // calibration_slope on separable rows) is NaN both ways: the same result.
            (Some(x), Some(y)) if x.is_nan() && y.is_nan() => {}
            (Some(x), Some(y)) => assert!(close_mixed(*x, *y, rel, abs), "{what}: {x} vs {y}"),
            _ => panic!("{what}: {a:?} vs {b:?}"),
        }
    }
}
