//! The functions as a host engine other than DataFusion sees them (the DuckDB extension,
//! `duckdb/`): each registered function's name, its DataFusion implementation and its
//! arguments by kind, so that a host can declare its own overloads (one per arity and
//! argument type) and pass constants as constants. The list is the registry's
//! ([`crate::all_aggregate_functions`], [`crate::all_scalar_functions`]): a function added
//! there reaches every host.

use std::sync::Arc;

use datafusion_expr::{AggregateUDF, ScalarUDF};

use crate::common::{CallShape, Role};

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
        };
        return Some((vec![arg], 1));
    }
    // `calibrate` checks its model argument itself (any calibrator's model struct).
    (name == "calibrate").then(|| {
        let arg = |name, kind| HostArgument { name, kind };
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
        let merge = host_functions()
            .into_iter()
            .find(|f| f.name == "ece_merge")
            .unwrap();
        assert_eq!(
            merge.arguments[0].kind,
            ArgumentKind::StateOf("ece_state".into())
        );
    }
}
