//! Named arguments that skip optional ones: `ece(p, y, w => weight)`.
//!
//! Every calibsql function declares its parameter names, so DataFusion 55 accepts
//! `name => value` arguments. But DataFusion 55 only reorders them: a named argument must not
//! leave a gap before it (`ece(p, y, w => weight)` fails with "Missing required parameter
//! 'n_bins'"). calibsql closes the gaps before planning: each left-out optional argument
//! before the last one given is filled in by name with its documented default
//! ([`calibsql_udfs::argument_default`]), so the call means exactly what leaving the argument
//! out means. An argument without a literal default (a data column such as `propensity`)
//! cannot be skipped; that is a planning error naming it.
//!
//! [`crate::sql`], the CLI and the Python module do this for every statement. Embedders who
//! plan SQL themselves call [`fill_skipped_arguments`] on the parsed statement.

use std::collections::HashSet;
use std::ops::ControlFlow;
use std::sync::OnceLock;

use datafusion::common::{plan_datafusion_err, DataFusionError, Result};
use datafusion::execution::session_state::SessionState;
use datafusion::sql::parser::{CopyToSource, Statement};
use datafusion::sql::sqlparser::ast::{
    visit_expressions_mut, Expr, FunctionArg, FunctionArgExpr, FunctionArgOperator,
    FunctionArguments, Ident, ObjectNamePart,
};
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::parser::Parser;

/// Fills the optional arguments that named arguments skip, in every calibsql function call of
/// `statement` (functions of other libraries are left alone).
pub fn fill_skipped_arguments(statement: &mut Statement, state: &SessionState) -> Result<()> {
    match statement {
        Statement::Statement(s) => fill_in(s.as_mut(), state),
        Statement::CopyTo(copy) => match &mut copy.source {
            CopyToSource::Query(q) => fill_in(q.as_mut(), state),
            CopyToSource::Relation(_) => Ok(()),
        },
        Statement::Explain(explain) => fill_skipped_arguments(&mut explain.statement, state),
        _ => Ok(()),
    }
}

fn fill_in<V: datafusion::sql::sqlparser::ast::VisitMut>(
    node: &mut V,
    state: &SessionState,
) -> Result<()> {
    let mut error = None;
    let _ = visit_expressions_mut(node, |expr| {
        if let Expr::Function(f) = expr {
            if let Err(e) = fill_call(f, state) {
                error = Some(e);
                return ControlFlow::Break(());
            }
        }
        ControlFlow::<()>::Continue(())
    });
    error.map_or(Ok(()), Err)
}

fn fill_call(
    f: &mut datafusion::sql::sqlparser::ast::Function,
    state: &SessionState,
) -> Result<()> {
    let FunctionArguments::List(list) = &mut f.args else {
        return Ok(());
    };
    if !list
        .args
        .iter()
        .any(|a| matches!(a, FunctionArg::Named { .. }))
    {
        return Ok(());
    }
    let [ObjectNamePart::Identifier(ident)] = f.name.0.as_slice() else {
        return Ok(());
    };
    let func = ident.value.to_lowercase();
    // Only calibsql's functions: they are the ones whose defaults we know.
    if !is_calibsql_function(&func) {
        return Ok(());
    }
    let names = match state
        .aggregate_functions()
        .get(&func)
        .map(|u| u.signature().parameter_names.clone())
        .or_else(|| {
            state
                .scalar_functions()
                .get(&func)
                .map(|u| u.signature().parameter_names.clone())
        })
        .flatten()
    {
        Some(n) => n,
        None => return Ok(()),
    };
    // Which parameter positions the call fills.
    let mut given = vec![false; names.len()];
    for (i, arg) in list.args.iter().enumerate() {
        let pos = match arg {
            FunctionArg::Named { name, .. } => names
                .iter()
                .position(|n| n.eq_ignore_ascii_case(&name.value)),
            _ => Some(i),
        };
        // Unknown names and surplus arguments: DataFusion reports them.
        if let Some(pos) = pos.filter(|&p| p < names.len()) {
            given[pos] = true;
        }
    }
    let Some(last) = given.iter().rposition(|&g| g) else {
        return Ok(());
    };
    for (pos, name) in names.iter().enumerate().take(last) {
        if given[pos] {
            continue;
        }
        let Some(default) = calibsql_udfs::argument_default(&func, name) else {
            let after = names[pos + 1..=last]
                .iter()
                .zip(&given[pos + 1..=last])
                .find(|(_, g)| **g)
                .map(|(n, _)| n.as_str())
                .unwrap_or("");
            return Err(plan_datafusion_err!(
                "{func}: argument {name} must be given when {after} is (it has no default to skip to)"
            ));
        };
        let value = Parser::new(&GenericDialect {})
            .try_with_sql(default)
            .and_then(|mut p| p.parse_expr())
            .map_err(|e| DataFusionError::Internal(format!("default of {func}.{name}: {e}")))?;
        list.args.push(FunctionArg::Named {
            name: Ident::new(name.clone()),
            arg: FunctionArgExpr::Expr(value),
            operator: FunctionArgOperator::RightArrow,
        });
    }
    Ok(())
}

fn is_calibsql_function(name: &str) -> bool {
    static NAMES: OnceLock<HashSet<String>> = OnceLock::new();
    NAMES
        .get_or_init(|| {
            let aggregates = calibsql_udfs::all_aggregate_functions();
            let scalars = calibsql_udfs::all_scalar_functions();
            aggregates
                .iter()
                .map(|f| f.name().to_string())
                .chain(scalars.iter().map(|f| f.name().to_string()))
                .collect()
        })
        .contains(name)
}
