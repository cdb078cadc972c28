//! What clients' catalog queries send that DataFusion does not plan as PostgreSQL does,
//! rewritten in the statement before it is planned ([`postgres_functions`]).

use datafusion::sql::parser::Statement as DFStatement;
use datafusion::sql::sqlparser::ast::Statement;

/// What clients' catalog queries ask that DataFusion does not plan, rewritten:
/// - `to_regtype(name)`, the oid of the type named (NULL for none), which psycopg's type
///   lookup runs (SQLAlchemy's dialect asks it for `hstore` at connect), becomes a query of
///   `pg_catalog.pg_type`;
/// - a correlated scalar subquery over `pg_catalog` tables only (SQLAlchemy's inspector reads
///   a column's default, identity and collation so), which DataFusion plans only when it
///   aggregates, has its one value taken with `max`: such a subquery finds one row or none.
///   Subqueries over users' tables are left alone (more than one row is an error there).
pub fn postgres_functions(statement: &mut DFStatement) {
    use datafusion::sql::sqlparser::ast::{
        visit_expressions_mut, Expr, FunctionArg, FunctionArgExpr, FunctionArguments, SetExpr,
    };
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser as SqlParser;
    use std::ops::ControlFlow;
    let DFStatement::Statement(statement) = statement else {
        return;
    };
    let _ = visit_expressions_mut(statement.as_mut(), |expr| {
        if let Expr::Subquery(query) = expr {
            if let Some(outer) = adapt_catalog_subquery(query) {
                // Conditions on the outer row alone: DataFusion does not decorrelate them
                // inside the subquery, so they decide around it.
                let subquery = std::mem::replace(
                    expr,
                    Expr::value(datafusion::sql::sqlparser::ast::Value::Null),
                );
                *expr = Expr::Case {
                    case_token: datafusion::sql::sqlparser::ast::helpers::attached_token::AttachedToken::empty(),
                    end_token: datafusion::sql::sqlparser::ast::helpers::attached_token::AttachedToken::empty(),
                    operand: None,
                    conditions: vec![datafusion::sql::sqlparser::ast::CaseWhen {
                        condition: outer,
                        result: subquery,
                    }],
                    else_result: None,
                };
            }
            return ControlFlow::Continue(());
        }
        let Expr::Function(f) = expr else {
            return ControlFlow::<()>::Continue(());
        };
        let is_to_regtype = f
            .name
            .0
            .last()
            .and_then(|part| part.as_ident())
            .is_some_and(|name| name.value.eq_ignore_ascii_case("to_regtype"));
        let FunctionArguments::List(list) = &f.args else {
            return ControlFlow::Continue(());
        };
        let [FunctionArg::Unnamed(FunctionArgExpr::Expr(name))] = list.args.as_slice() else {
            return ControlFlow::Continue(());
        };
        if !is_to_regtype {
            return ControlFlow::Continue(());
        }
        let Ok(mut parsed) = SqlParser::parse_sql(
            &PostgreSqlDialect {},
            "SELECT oid FROM pg_catalog.pg_type WHERE typname = NULL",
        ) else {
            return ControlFlow::Continue(());
        };
        if let Some(Statement::Query(mut query)) = parsed.pop() {
            if let SetExpr::Select(select) = query.body.as_mut() {
                if let Some(Expr::BinaryOp { right, .. }) = select.selection.as_mut() {
                    **right = name.clone();
                }
            }
            *expr = Expr::Subquery(query);
        }
        ControlFlow::Continue(())
    });
}

/// A scalar subquery that reads only `pg_catalog` (see [`postgres_functions`]): its one
/// value wrapped in `max(…)`, and the conditions of its `WHERE` that read only the outer
/// row's columns taken out and returned (ANDed), for the caller to test around it.
fn adapt_catalog_subquery(
    query: &mut datafusion::sql::sqlparser::ast::Query,
) -> Option<datafusion::sql::sqlparser::ast::Expr> {
    use datafusion::sql::sqlparser::ast::{
        BinaryOperator, Expr, Function, FunctionArg, FunctionArgExpr, FunctionArgumentList,
        FunctionArguments, GroupByExpr, Ident, ObjectName, ObjectNamePart, SelectItem, SetExpr,
        TableFactor,
    };
    let SetExpr::Select(select) = query.body.as_mut() else {
        return None;
    };
    let grouped = !matches!(&select.group_by, GroupByExpr::Expressions(e, _) if e.is_empty());
    if grouped || select.projection.len() != 1 || select.from.is_empty() {
        return None;
    }
    let catalog_only = select.from.iter().all(|from| {
        std::iter::once(&from.relation)
            .chain(from.joins.iter().map(|j| &j.relation))
            .all(|relation| match relation {
                TableFactor::Table { name, .. } => {
                    name.0.len() == 2
                        && name.0[0]
                            .as_ident()
                            .is_some_and(|schema| schema.value.eq_ignore_ascii_case("pg_catalog"))
                }
                _ => false,
            })
    });
    if !catalog_only {
        return None;
    }
    // The names the subquery's own columns are qualified with: its tables' and aliases.
    let mut own: Vec<String> = Vec::new();
    for from in &select.from {
        for relation in
            std::iter::once(&from.relation).chain(from.joins.iter().map(|j| &j.relation))
        {
            if let TableFactor::Table { name, alias, .. } = relation {
                if let Some(last) = name.0.last().and_then(|p| p.as_ident()) {
                    own.push(last.value.to_ascii_lowercase());
                }
                if let Some(alias) = alias {
                    own.push(alias.name.value.to_ascii_lowercase());
                }
            }
        }
    }
    let wrap = |value: Expr| {
        Expr::Function(Function {
            name: ObjectName(vec![ObjectNamePart::Identifier(Ident::new("max"))]),
            uses_odbc_syntax: false,
            parameters: FunctionArguments::None,
            args: FunctionArguments::List(FunctionArgumentList {
                duplicate_treatment: None,
                args: vec![FunctionArg::Unnamed(FunctionArgExpr::Expr(value))],
                clauses: vec![],
            }),
            filter: None,
            null_treatment: None,
            over: None,
            within_group: vec![],
        })
    };
    match &mut select.projection[0] {
        SelectItem::UnnamedExpr(value) => *value = wrap(value.clone()),
        SelectItem::ExprWithAlias { expr, .. } => *expr = wrap(expr.clone()),
        _ => {}
    }
    // Split the WHERE into its conjuncts; keep those that read the subquery's own columns.
    let mut conjuncts = Vec::new();
    let mut pending: Vec<Expr> = select.selection.take().into_iter().collect();
    while let Some(e) = pending.pop() {
        match e {
            Expr::BinaryOp {
                left,
                op: BinaryOperator::And,
                right,
            } => {
                pending.push(*right);
                pending.push(*left);
            }
            Expr::Nested(inner)
                if matches!(
                    *inner,
                    Expr::BinaryOp {
                        op: BinaryOperator::And,
                        ..
                    }
                ) =>
            {
                pending.push(*inner)
            }
            other => conjuncts.push(other),
        }
    }
    let reads_outer_only = |e: &Expr| {
        let mut outer = 0;
        let mut inner = 0;
        let _ = datafusion::sql::sqlparser::ast::visit_expressions(e, |x| {
            match x {
                Expr::CompoundIdentifier(parts) if parts.len() >= 2 => {
                    let qualifier = parts[parts.len() - 2].value.to_ascii_lowercase();
                    if own.contains(&qualifier) {
                        inner += 1;
                    } else {
                        outer += 1;
                    }
                }
                Expr::Identifier(_) => inner += 1,
                _ => {}
            }
            std::ops::ControlFlow::<()>::Continue(())
        });
        outer > 0 && inner == 0
    };
    let and = |a: Expr, b: Expr| Expr::BinaryOp {
        left: Box::new(a),
        op: BinaryOperator::And,
        right: Box::new(b),
    };
    let (outer, kept): (Vec<Expr>, Vec<Expr>) =
        conjuncts.into_iter().partition(|c| reads_outer_only(c));
    select.selection = kept.into_iter().reduce(and);
    outer.into_iter().reduce(and)
}
