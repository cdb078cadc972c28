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
//! Both wrappers reuse the aggregate's `Kernel`: `F_state` (`state_of`) is `F` whose final
//! value is its state; `F_merge` (`merge_of`) builds `F`'s kernel from the first state's
//! `params` and merges. This file holds what both share: the state's type and the canonical
//! parameter text. Which aggregates have twins is the registry's (`crate::registry`).

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, FieldRef, Fields, Schema};
use datafusion_common::{Result, ScalarValue};
use datafusion_doc::DocSection;
use datafusion_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion_expr::{AggregateUDF, AggregateUDFImpl};
use datafusion_physical_expr::expressions::{Column, Literal};
use datafusion_physical_expr_common::physical_expr::PhysicalExpr;

use crate::common::{literal, CallShape, Role};
use crate::kernel::{DynKernel, KernelAggregate, KernelSource};

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

/// `F_state` and `F_merge` of the aggregate `inner`, each with its kernel source (the
/// registry makes them for every aggregate it registers `with_states`).
pub(crate) fn twins(
    inner: Arc<dyn KernelAggregate>,
) -> [(Arc<AggregateUDF>, Arc<dyn KernelSource>); 2] {
    let state = Arc::new(StateOf::new(Arc::clone(&inner)));
    let merge = Arc::new(MergeOf::new(inner));
    [
        (
            Arc::new(AggregateUDF::new_from_shared_impl(
                Arc::clone(&state) as Arc<dyn AggregateUDFImpl>
            )),
            state,
        ),
        (
            Arc::new(AggregateUDF::new_from_shared_impl(
                Arc::clone(&merge) as Arc<dyn AggregateUDFImpl>
            )),
            merge,
        ),
    ]
}

/// The `_state` and `_merge` aggregates of every aggregate whose state is bounded.
pub fn state_functions() -> Vec<Arc<AggregateUDF>> {
    crate::registry::twins()
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
        .map(|a| match a.role {
            Role::Any => DataType::Utf8,
            Role::NumList => crate::common::f64_list_type(),
            _ => DataType::Float64,
        })
        .collect()
}

/// Argument types as an error message lists them: `Float64, Utf8`.
fn type_list(arg_types: &[DataType]) -> String {
    arg_types
        .iter()
        .map(|t| t.to_string())
        .collect::<Vec<_>>()
        .join(", ")
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
        if a.role == Role::Any {
            parts.push(format!("{}: {}", a.name, args.expr_fields[i].data_type()));
        }
    }
    for (j, a) in shape.optional.iter().enumerate() {
        let name = a.name();
        match args.exprs.get(shape.required.len() + j) {
            Some(e) if a.is_literal() => {
                parts.push(format!(
                    "{name} => {}",
                    canonical_literal(&literal(func, name, e)?)
                ));
            }
            Some(e) => match literal(func, name, e) {
                // A constant in a data position (a weight of 1.0): its value.
                Ok(v) => parts.push(format!("{name} => {}", canonical_literal(&v))),
                Err(_) => parts.push(name.to_string()),
            },
            None => match a.default {
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
        match a.role {
            Role::Any => {
                let name = a.name;
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
            Role::NumList => column(
                a.name,
                crate::common::f64_list_type(),
                &mut fields,
                &mut exprs,
            ),
            _ => column(a.name, DataType::Float64, &mut fields, &mut exprs),
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

/// The first example arguments a function's shape takes over `t(p, y, f, q)` (with fixed
/// bins where the default strategy keeps rows).
fn example_args(shape: &CallShape) -> String {
    let mut args: Vec<&str> = shape
        .required
        .iter()
        .map(|a| match a.name() {
            "field" | "key" => "f",
            "propensity" => "q",
            // A two-class model's probabilities, and its class.
            "label" => "y",
            _ => match a.role {
                Role::Label => "y",
                Role::NumList => "make_array(1 - p, p)",
                _ => "p",
            },
        })
        .collect();
    let strategy = shape.optional.iter().find(|a| a.name == "strategy");
    if strategy.and_then(|a| a.default) == Some("'quantile'") {
        args.extend(["10", "'uniform'"]);
    }
    args.join(", ")
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

mod merge_of;
mod state_of;
use merge_of::MergeOf;
use state_of::StateOf;

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
