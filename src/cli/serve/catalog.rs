//! What clients' catalog queries send that DataFusion does not plan as PostgreSQL does,
//! rewritten in the statement before it is planned ([`postgres_functions`]).

use std::ops::ControlFlow;

use datafusion::sql::parser::Statement as DFStatement;
use datafusion::sql::sqlparser::ast::helpers::attached_token::AttachedToken;
use datafusion::sql::sqlparser::ast::{
    visit_expressions, visit_expressions_mut, BinaryOperator, CaseWhen, Expr, FunctionArg,
    FunctionArgExpr, FunctionArguments, GroupByExpr, Ident, Query, SelectItem, SetExpr,
    TableFactor, Value,
};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser as SqlParser;

/// What clients' catalog queries ask that DataFusion does not plan, rewritten:
/// - `to_regtype(name)`, the oid of the type named (NULL for none), which psycopg's type
///   lookup runs (SQLAlchemy's dialect asks it for `hstore` at connect), becomes a query of
///   `pg_catalog.pg_type`;
/// - a correlated scalar subquery over `pg_catalog` tables only (SQLAlchemy's inspector reads
///   a column's default, identity and collation so), which DataFusion plans only when it
///   aggregates and reads the outer row in its `WHERE` only: see [`adapt_catalog_subquery`].
///   Subqueries over users' tables are left alone (more than one row is an error there);
/// - `x LIKE pattern ESCAPE 'c'` with another escape character than the backslash (the one
///   DataFusion knows; SQLAlchemy's `get_schema_names` escapes with `/`) becomes
///   `x LIKE like_escape(pattern, 'c')`, PostgreSQL's function that rewrites a pattern to
///   backslash escapes;
/// - `generate_subscripts(array, dim)`, a set-returning function (SQLAlchemy numbers an
///   index's columns with it next to `unnest(indkey)`), becomes the `unnest` of the
///   subscripts `1..=cardinality(array)` (none when `dim` is not 1: calibsql's arrays have
///   one dimension), which DataFusion zips with the other `unnest`s of the row as
///   PostgreSQL does.
pub fn postgres_functions(statement: &mut DFStatement) {
    let DFStatement::Statement(statement) = statement else {
        return;
    };
    let _ = visit_expressions_mut(statement.as_mut(), |expr| {
        match expr {
            Expr::Subquery(query) => {
                if let Some(adapted) = adapt_catalog_subquery(query) {
                    *expr = adapted;
                }
            }
            Expr::Like {
                pattern,
                escape_char,
                ..
            }
            | Expr::ILike {
                pattern,
                escape_char,
                ..
            } => {
                let Some(escape) = escape_char.take() else {
                    return ControlFlow::<()>::Continue(());
                };
                if matches!(&escape.value, Value::SingleQuotedString(s) if s == "\\") {
                    *escape_char = Some(escape);
                } else {
                    let original = std::mem::replace(pattern.as_mut(), Expr::value(Value::Null));
                    **pattern = call("like_escape", vec![original, Expr::Value(escape)]);
                }
            }
            Expr::Function(f) => {
                let Some(name) = f.name.0.last().and_then(|part| part.as_ident()) else {
                    return ControlFlow::Continue(());
                };
                let name = name.value.to_ascii_lowercase();
                let FunctionArguments::List(list) = &f.args else {
                    return ControlFlow::Continue(());
                };
                let args: Option<Vec<Expr>> = list
                    .args
                    .iter()
                    .map(|arg| match arg {
                        FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Some(e.clone()),
                        _ => None,
                    })
                    .collect();
                let replaced = match (name.as_str(), args.as_deref()) {
                    ("to_regtype", Some([type_name])) => template(
                        "(SELECT oid FROM pg_catalog.pg_type WHERE typname = __name)",
                        &[("__name", type_name)],
                    ),
                    ("generate_subscripts", Some([array, dimension])) => template(
                        "unnest(generate_series(1, CASE WHEN __dimension = 1 \
                         THEN CAST(cardinality(__array) AS BIGINT) ELSE 0 END))",
                        &[("__array", array), ("__dimension", dimension)],
                    ),
                    _ => None,
                };
                if let Some(replaced) = replaced {
                    *expr = replaced;
                }
            }
            _ => {}
        }
        ControlFlow::Continue(())
    });
}

/// `sql`, an expression, with its identifiers named in `values` replaced by those
/// expressions.
fn template(sql: &str, values: &[(&str, &Expr)]) -> Option<Expr> {
    let mut expr = SqlParser::new(&PostgreSqlDialect {})
        .try_with_sql(sql)
        .ok()?
        .parse_expr()
        .ok()?;
    let _ = visit_expressions_mut(&mut expr, |e| {
        if let Expr::Identifier(ident) = e {
            if let Some((_, value)) = values.iter().find(|(name, _)| *name == ident.value) {
                *e = (*value).clone();
            }
        }
        ControlFlow::<()>::Continue(())
    });
    Some(expr)
}

/// `name(args…)`.
fn call(name: &str, args: Vec<Expr>) -> Expr {
    use datafusion::sql::sqlparser::ast::{
        Function, FunctionArgumentList, ObjectName, ObjectNamePart,
    };
    Expr::Function(Function {
        name: ObjectName(vec![ObjectNamePart::Identifier(Ident::new(name))]),
        uses_odbc_syntax: false,
        parameters: FunctionArguments::None,
        args: FunctionArguments::List(FunctionArgumentList {
            duplicate_treatment: None,
            args: args
                .into_iter()
                .map(|a| FunctionArg::Unnamed(FunctionArgExpr::Expr(a)))
                .collect(),
            clauses: vec![],
        }),
        filter: None,
        null_treatment: None,
        over: None,
        within_group: vec![],
    })
}

/// `CASE WHEN condition THEN result END`.
fn case_when(condition: Expr, result: Expr) -> Expr {
    Expr::Case {
        case_token: AttachedToken::empty(),
        end_token: AttachedToken::empty(),
        operand: None,
        conditions: vec![CaseWhen { condition, result }],
        else_result: None,
    }
}

fn and(a: Expr, b: Expr) -> Expr {
    Expr::BinaryOp {
        left: Box::new(a),
        op: BinaryOperator::And,
        right: Box::new(b),
    }
}

/// A column reference of a subquery: the subquery's own (qualified with one of `own`, its
/// tables' names and aliases, or unqualified) or the outer row's.
fn is_own_column(expr: &Expr, own: &[String]) -> Option<bool> {
    match expr {
        Expr::CompoundIdentifier(parts) if parts.len() >= 2 => {
            let qualifier = parts[parts.len() - 2].value.to_ascii_lowercase();
            Some(own.contains(&qualifier))
        }
        Expr::Identifier(_) => Some(true),
        _ => None,
    }
}

/// The column references in `expr`: how many are the outer row's, and the subquery's own
/// (each once, in order of appearance).
fn column_references(expr: &Expr, own: &[String]) -> (usize, Vec<Expr>) {
    let mut outer = 0;
    let mut inner: Vec<Expr> = Vec::new();
    let _ = visit_expressions(expr, |e| {
        match is_own_column(e, own) {
            Some(true) if !inner.contains(e) => inner.push(e.clone()),
            Some(false) => outer += 1,
            _ => {}
        }
        ControlFlow::<()>::Continue(())
    });
    (outer, inner)
}

/// A scalar subquery that reads only `pg_catalog` tables (see [`postgres_functions`]), as
/// DataFusion plans it, or `None` for any other subquery. Such a subquery finds one row or
/// none, so:
/// - its one value is taken with `max(…)` (DataFusion decorrelates a scalar subquery only
///   when it aggregates);
/// - the conditions of its `WHERE` that read only the outer row's columns (which DataFusion
///   does not decorrelate inside it) are tested around it: `CASE WHEN outer THEN (…) END`;
/// - a value that reads the outer row (SQLAlchemy's identity options put
///   `attidentity = 'a'` in a `json_build_object` of the sequence's columns; DataFusion
///   decorrelates a subquery's filter, not its projection) is computed around the
///   subquery: each of the subquery's own columns it reads is fetched by a subquery of its
///   own (`max(column)` under the same `WHERE`), and the value is NULL when the subquery
///   finds no row (`count(*)` under the same `WHERE`).
fn adapt_catalog_subquery(query: &Query) -> Option<Expr> {
    let mut query = query.clone();
    let SetExpr::Select(select) = query.body.as_mut() else {
        return None;
    };
    let grouped = !matches!(&select.group_by, GroupByExpr::Expressions(e, _) if e.is_empty());
    if grouped || select.projection.len() != 1 || select.from.is_empty() {
        return None;
    }
    let relations = || {
        select.from.iter().flat_map(|from| {
            std::iter::once(&from.relation).chain(from.joins.iter().map(|j| &j.relation))
        })
    };
    let catalog_only = relations().all(|relation| match relation {
        TableFactor::Table { name, .. } => {
            name.0.len() == 2
                && name.0[0]
                    .as_ident()
                    .is_some_and(|schema| schema.value.eq_ignore_ascii_case("pg_catalog"))
        }
        _ => false,
    });
    if !catalog_only {
        return None;
    }
    // The names the subquery's own columns are qualified with: its tables' and aliases.
    let mut own: Vec<String> = Vec::new();
    for relation in relations() {
        if let TableFactor::Table { name, alias, .. } = relation {
            if let Some(last) = name.0.last().and_then(|p| p.as_ident()) {
                own.push(last.value.to_ascii_lowercase());
            }
            if let Some(alias) = alias {
                own.push(alias.name.value.to_ascii_lowercase());
            }
        }
    }
    let value = match &select.projection[0] {
        SelectItem::UnnamedExpr(value) | SelectItem::ExprWithAlias { expr: value, .. } => {
            value.clone()
        }
        _ => return None,
    };
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
    let (outer, kept): (Vec<Expr>, Vec<Expr>) = conjuncts.into_iter().partition(|c| {
        let (outer, inner) = column_references(c, &own);
        outer > 0 && inner.is_empty()
    });
    select.selection = kept.into_iter().reduce(and);
    // The subquery with `projection` as its one value.
    let with_value = |projection: Expr| {
        let mut one = query.clone();
        if let SetExpr::Select(select) = one.body.as_mut() {
            select.projection = vec![SelectItem::UnnamedExpr(projection)];
        }
        Expr::Subquery(Box::new(one))
    };
    let (reads_outer, inner) = column_references(&value, &own);
    let adapted = if reads_outer == 0 {
        with_value(call("max", vec![value]))
    } else {
        let found = Expr::BinaryOp {
            left: Box::new(with_value(template("count(*)", &[])?)),
            op: BinaryOperator::Gt,
            right: Box::new(Expr::value(Value::Number("0".to_string(), false))),
        };
        let mut value = value;
        let _ = visit_expressions_mut(&mut value, |e| {
            if inner.contains(e) {
                *e = with_value(call("max", vec![e.clone()]));
            }
            ControlFlow::<()>::Continue(())
        });
        case_when(found, value)
    };
    Some(match outer.into_iter().reduce(and) {
        Some(condition) => case_when(condition, adapted),
        None => adapted,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `sql` as the server plans it, printed back.
    fn rewritten(sql: &str) -> String {
        let mut statements = SqlParser::parse_sql(&PostgreSqlDialect {}, sql).unwrap();
        let mut statement = DFStatement::Statement(Box::new(statements.remove(0)));
        postgres_functions(&mut statement);
        statement.to_string()
    }

    #[test]
    fn like_with_another_escape_reads_backslash_escapes() {
        assert_eq!(
            rewritten("SELECT n FROM s WHERE n NOT LIKE $1 || '%' ESCAPE '/'"),
            "SELECT n FROM s WHERE n NOT LIKE like_escape($1 || '%', '/')"
        );
        assert_eq!(
            rewritten("SELECT n FROM s WHERE n ILIKE 'a#_%' ESCAPE '#'"),
            "SELECT n FROM s WHERE n ILIKE like_escape('a#_%', '#')"
        );
        // The backslash is DataFusion's own.
        let backslash = "SELECT n FROM s WHERE n LIKE 'a\\_%' ESCAPE '\\'";
        assert_eq!(rewritten(backslash), backslash);
    }

    #[test]
    fn generate_subscripts_becomes_an_unnest() {
        assert_eq!(
            rewritten("SELECT unnest(i.indkey), generate_subscripts(i.indkey, 1) FROM i"),
            "SELECT unnest(i.indkey), unnest(generate_series(1, CASE WHEN 1 = 1 THEN \
             CAST(cardinality(i.indkey) AS BIGINT) ELSE 0 END)) FROM i"
        );
    }

    #[test]
    fn a_catalog_subquery_that_reads_the_outer_row_in_its_value() {
        let sql = "SELECT CASE WHEN a.attidentity != '' THEN (SELECT json_build_object('always', \
                   a.attidentity = 'a', 'start', s.seqstart) FROM pg_catalog.pg_sequence s \
                   WHERE a.attidentity != '' AND s.seqrelid = a.attrelid) END \
                   FROM pg_catalog.pg_attribute a";
        assert_eq!(
            rewritten(sql),
            "SELECT CASE WHEN a.attidentity <> '' THEN CASE WHEN a.attidentity <> '' THEN \
             CASE WHEN (SELECT count(*) FROM pg_catalog.pg_sequence s WHERE s.seqrelid = \
             a.attrelid) > 0 THEN json_build_object('always', a.attidentity = 'a', 'start', \
             (SELECT max(s.seqstart) FROM pg_catalog.pg_sequence s WHERE s.seqrelid = \
             a.attrelid)) END END END FROM pg_catalog.pg_attribute a"
        );
        // One that reads the outer row in its WHERE only: its value under max().
        assert_eq!(
            rewritten(
                "SELECT (SELECT t.typcollation FROM pg_catalog.pg_type t WHERE t.oid = a.atttypid) \
                 FROM pg_catalog.pg_attribute a"
            ),
            "SELECT (SELECT max(t.typcollation) FROM pg_catalog.pg_type t WHERE t.oid = \
             a.atttypid) FROM pg_catalog.pg_attribute a"
        );
        // A subquery over a user's table is left alone.
        let users = "SELECT (SELECT x FROM public.t WHERE t.y = u.y) FROM u";
        assert_eq!(rewritten(users), users);
    }
}
