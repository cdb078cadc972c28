//! Table function calls in `FROM` (`generate_series(1, 3)`, `delta_scan('t', version => 1)`):
//! each distinct call gets a name of its own.
//!
//! DataFusion 55 names every call's scan after the function alone (`generate_series()`), and
//! a plan compares scans by name, not by what they read. Its common-subexpression elimination
//! then takes two scalar subqueries over different calls for one:
//! `SELECT (SELECT count(*) FROM generate_series(1, 3)), (SELECT count(*) FROM
//! generate_series(1, 5))` answers 3 and 3. Naming each call without an alias after its text
//! (`"generate_series(1, 3)"`) keeps different calls apart and lets equal ones still merge.

use std::ops::ControlFlow;

use datafusion::sql::parser::{CopyToSource, Statement};
use datafusion::sql::sqlparser::ast::{Ident, TableAlias, TableFactor, VisitMut, VisitorMut};

/// Gives every table function call of `statement` without an alias its own text as alias.
pub fn name_table_function_calls(statement: &mut Statement) {
    let _ = visit_queries(statement, &mut NameCalls);
}

/// Runs `visitor` over the SQL of `statement` that can name tables: the statement itself, a
/// `COPY`'s query, an `EXPLAIN`'s statement.
pub(crate) fn visit_queries<V: VisitorMut>(
    statement: &mut Statement,
    visitor: &mut V,
) -> ControlFlow<V::Break> {
    match statement {
        Statement::Statement(s) => s.visit(visitor),
        Statement::CopyTo(copy) => match &mut copy.source {
            CopyToSource::Query(q) => q.visit(visitor),
            CopyToSource::Relation(_) => ControlFlow::Continue(()),
        },
        Statement::Explain(explain) => visit_queries(&mut explain.statement, visitor),
        _ => ControlFlow::Continue(()),
    }
}

struct NameCalls;

impl VisitorMut for NameCalls {
    type Break = ();

    fn pre_visit_table_factor(&mut self, factor: &mut TableFactor) -> ControlFlow<()> {
        if let TableFactor::Table {
            name,
            args: Some(args),
            alias: alias @ None,
            ..
        } = factor
        {
            let arguments: Vec<String> = args.args.iter().map(ToString::to_string).collect();
            *alias = Some(TableAlias {
                explicit: true,
                name: Ident::with_quote('"', format!("{name}({})", arguments.join(", "))),
                columns: vec![],
                at: None,
            });
        }
        ControlFlow::Continue(())
    }
}
