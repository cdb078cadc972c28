//! How deep a statement may nest, and the stacks of the threads that plan and run it.
//!
//! The parser stops deep *recursion* itself (`datafusion.sql_parser.recursion_limit`: nested
//! parentheses, subqueries, `CASE` in `CASE`). A chain of infix operators is parsed in a loop
//! instead, so `p + p + … + p` with 100,000 terms parses into a tree 100,000 levels deep, and
//! planning, optimising, evaluating and dropping that tree recurse once per level. DataFusion
//! guards some of those recursions (its `recursive_protection` feature grows the stack on the
//! heap), but not the derived `Clone`, `Hash`, `Drop` or the physical expressions' evaluation.
//!
//! So calibsql does three things:
//! - [`check_text`] refuses, before it is parsed, SQL text with a run of operators at one
//!   level of parentheses longer than [`MAX_RUN`] (or of set operations longer than
//!   [`MAX_DEPTH`]): the tokens are read in a loop, and a statement that deep is never built
//!   as a tree, whose parsing and dropping would touch hundreds of megabytes of stack.
//! - [`check`] refuses a parsed statement whose expressions (or chains of `UNION`/
//!   `INTERSECT`/`EXCEPT`) nest deeper than [`MAX_DEPTH`], with an error that names the
//!   limit, before anything is planned. Measuring is itself safe at any depth: sqlparser's
//!   visitor is one of the guarded recursions. Planning time grows with the square of the
//!   depth in DataFusion 55, which is what sets the limit (docs/SEMANTICS.md, "Statements").
//! - Every thread that parses, plans or runs a statement has a stack of [`THREAD_STACK`]
//!   bytes ([`runtime_builder`], [`on_large_stack`]), enough for the trees [`check_text`]
//!   lets through in every step. A stack is address space: only the part a statement
//!   touches becomes memory.

use std::ops::ControlFlow;

use datafusion::common::{plan_datafusion_err, plan_err, DataFusionError, Result};
use datafusion::sql::parser::{CopyToSource, Statement};
use datafusion::sql::sqlparser::ast::{Expr, Query, SetExpr, Visit, Visitor};

/// How deep expressions, and chains of set operations, may nest in one statement.
pub const MAX_DEPTH: usize = 1_000;

/// How many operators may follow one another at one level of parentheses, between commas
/// and clauses, in SQL text: three times [`MAX_DEPTH`], since operators of different
/// precedence (`a * b + c * d`, `x = 1 AND y = 2`) make a tree shallower than its run.
pub const MAX_RUN: usize = 3 * MAX_DEPTH;

/// The stack of every thread that parses, plans or executes statements: the CLI's, the
/// server's and the Python module's runtime workers, and the thread that drives them.
pub const THREAD_STACK: usize = 256 << 20;

/// The error of `sql`, which did not parse under the parser's recursion `limit`: when it
/// nests `CASE` in `CASE` deeper than the limit, or parses under [`MAX_DEPTH`] (`parses`,
/// for a parser whose limit `datafusion.sql_parser.recursion_limit` sets), what stopped it
/// was the limit, which sqlparser does not always say (a `CASE` nested 50 deep fails with
/// "Expected: ), found: ELSE"), so the error names the limit; otherwise it is the parser's
/// own error.
pub fn explain_parse_error(
    error: DataFusionError,
    sql: &str,
    limit: usize,
    parses: Option<&dyn Fn(usize) -> bool>,
) -> DataFusionError {
    let too_deep = case_depth(sql) >= limit
        || (limit < MAX_DEPTH && parses.is_some_and(|parses| parses(MAX_DEPTH)));
    if !too_deep {
        return error;
    }
    let setting = if parses.is_some() {
        format!(" (datafusion.sql_parser.recursion_limit, which SET can raise up to {MAX_DEPTH})")
    } else {
        String::new()
    };
    plan_datafusion_err!(
        "the statement nests deeper than the parser's limit of {limit} levels{setting}; the \
         parser said: {}",
        crate::errors::datafusion_message(&error)
    )
}

/// How deep `CASE … END` nests in `sql`'s tokens (0 when it does not tokenize).
pub fn case_depth(sql: &str) -> usize {
    use datafusion::sql::sqlparser::dialect::GenericDialect;
    use datafusion::sql::sqlparser::keywords::Keyword;
    use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};
    let Ok(tokens) = Tokenizer::new(&GenericDialect {}, sql).tokenize() else {
        return 0;
    };
    let (mut depth, mut deepest) = (0usize, 0usize);
    for token in tokens {
        if let Token::Word(word) = token {
            match word.keyword {
                Keyword::CASE => {
                    depth += 1;
                    deepest = deepest.max(depth);
                }
                Keyword::END => depth = depth.saturating_sub(1),
                _ => {}
            }
        }
    }
    deepest
}

/// Refuses SQL text whose operators run longer than [`MAX_RUN`] at one level of
/// parentheses, or whose set operations chain more than [`MAX_DEPTH`] times, without parsing
/// it (text that does not tokenize is left to the parser's error).
pub fn check_text(sql: &str) -> Result<()> {
    use datafusion::sql::sqlparser::dialect::GenericDialect;
    use datafusion::sql::sqlparser::keywords::Keyword;
    use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};
    let Ok(tokens) = Tokenizer::new(&GenericDialect {}, sql).tokenize() else {
        return Ok(());
    };
    // Per level of parentheses: the operators since the last separator, and the set
    // operations since the statement began.
    let mut runs: Vec<(usize, usize)> = vec![(0, 0)];
    for token in &tokens {
        match token {
            Token::LParen | Token::LBracket => {
                runs.push((0, 0));
                continue;
            }
            Token::RParen | Token::RBracket => {
                if runs.len() > 1 {
                    runs.pop();
                }
                continue;
            }
            _ => {}
        }
        let (operators, sets) = runs.last_mut().expect("the outer level stays");
        match token {
            Token::Comma => *operators = 0,
            Token::SemiColon => {
                *operators = 0;
                *sets = 0;
            }
            Token::Word(word) => match word.keyword {
                Keyword::AND
                | Keyword::OR
                | Keyword::IS
                | Keyword::LIKE
                | Keyword::ILIKE
                | Keyword::COLLATE => *operators += 1,
                Keyword::UNION | Keyword::INTERSECT | Keyword::EXCEPT => {
                    *operators = 0;
                    *sets += 1;
                }
                Keyword::SELECT
                | Keyword::FROM
                | Keyword::WHERE
                | Keyword::GROUP
                | Keyword::ORDER
                | Keyword::HAVING
                | Keyword::LIMIT
                | Keyword::OFFSET
                | Keyword::ON
                | Keyword::USING
                | Keyword::WHEN
                | Keyword::THEN
                | Keyword::ELSE
                | Keyword::END
                | Keyword::CASE
                | Keyword::JOIN
                | Keyword::VALUES
                | Keyword::AS
                | Keyword::WINDOW
                | Keyword::QUALIFY => *operators = 0,
                _ => {}
            },
            Token::DoubleEq
            | Token::Eq
            | Token::Neq
            | Token::Lt
            | Token::Gt
            | Token::LtEq
            | Token::GtEq
            | Token::Spaceship
            | Token::Plus
            | Token::Minus
            | Token::Mul
            | Token::Div
            | Token::DuckIntDiv
            | Token::Mod
            | Token::StringConcat
            | Token::DoubleColon
            | Token::Caret
            | Token::Ampersand
            | Token::Pipe
            | Token::ShiftLeft
            | Token::ShiftRight
            | Token::Arrow
            | Token::LongArrow => *operators += 1,
            _ => {}
        }
        if *operators > MAX_RUN {
            return plan_err!(
                "expression nested deeper than {MAX_DEPTH} levels (calibsql's limit): more \
                 than {MAX_RUN} operators in a row, such as `a + b + …` or `x = 1 OR x = 2 OR \
                 …`; use a list (`x IN (1, 2, …)`), a table to join, or an aggregate instead"
            );
        }
        if *sets > MAX_DEPTH {
            return plan_err!(
                "more than {MAX_DEPTH} set operations (UNION, INTERSECT, EXCEPT) in a chain \
                 (calibsql's limit): read the parts from one table or file instead"
            );
        }
    }
    Ok(())
}

/// A multi-threaded tokio runtime builder whose threads have [`THREAD_STACK`] bytes of stack.
pub fn runtime_builder() -> tokio::runtime::Builder {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.enable_all().thread_stack_size(THREAD_STACK);
    builder
}

/// Runs `work` on a new thread with [`THREAD_STACK`] bytes of stack and returns its result;
/// a panic in `work` is resumed on the calling thread.
pub fn on_large_stack<T: Send>(work: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|scope| {
        let thread = std::thread::Builder::new()
            .name("calibsql-main".to_string())
            .stack_size(THREAD_STACK)
            .spawn_scoped(scope, work)
            .expect("a thread can be started");
        match thread.join() {
            Ok(value) => value,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}

/// Refuses `statement` if its expressions or set operations nest deeper than [`MAX_DEPTH`].
pub fn check(statement: &Statement) -> Result<()> {
    let mut depth = Depth::default();
    let flow = match statement {
        Statement::Statement(s) => s.visit(&mut depth),
        Statement::CopyTo(copy) => match &copy.source {
            CopyToSource::Query(q) => q.visit(&mut depth),
            CopyToSource::Relation(_) => ControlFlow::Continue(()),
        },
        Statement::Explain(explain) => return check(&explain.statement),
        _ => ControlFlow::Continue(()),
    };
    match flow {
        ControlFlow::Continue(()) => Ok(()),
        ControlFlow::Break(Deep::Expression) => plan_err!(
            "expression nested deeper than {MAX_DEPTH} levels (calibsql's limit): a chain of \
             more than {MAX_DEPTH} operators such as `a + b + …` or `x = 1 OR x = 2 OR …`; \
             use a list (`x IN (1, 2, …)`), a table to join, or an aggregate instead"
        ),
        ControlFlow::Break(Deep::SetOperations) => plan_err!(
            "more than {MAX_DEPTH} set operations (UNION, INTERSECT, EXCEPT) in a chain \
             (calibsql's limit): read the parts from one table or file instead"
        ),
    }
}

/// What was too deep.
enum Deep {
    Expression,
    SetOperations,
}

/// The visitor that measures: the depth of the expression being visited.
#[derive(Default)]
struct Depth {
    expressions: usize,
}

impl Visitor for Depth {
    type Break = Deep;

    fn pre_visit_expr(&mut self, _expr: &Expr) -> ControlFlow<Deep> {
        self.expressions += 1;
        if self.expressions > MAX_DEPTH {
            return ControlFlow::Break(Deep::Expression);
        }
        ControlFlow::Continue(())
    }

    fn post_visit_expr(&mut self, _expr: &Expr) -> ControlFlow<Deep> {
        self.expressions -= 1;
        ControlFlow::Continue(())
    }

    fn pre_visit_query(&mut self, query: &Query) -> ControlFlow<Deep> {
        if set_operations(&query.body) > MAX_DEPTH {
            return ControlFlow::Break(Deep::SetOperations);
        }
        ControlFlow::Continue(())
    }
}

/// The longest chain of set operations in `body`, walked without recursion on the left
/// (where the parser chains them) and with it on the right (where the parser's own
/// recursion limit bounds the depth).
fn set_operations(body: &SetExpr) -> usize {
    let mut longest = 0;
    let mut chain = 0;
    let mut node = body;
    while let SetExpr::SetOperation { left, right, .. } = node {
        chain += 1;
        longest = longest.max(chain + set_operations(right));
        node = left;
    }
    longest.max(chain)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(sql: &str) -> Statement {
        let mut statements = datafusion::sql::parser::DFParser::parse_sql(sql).unwrap();
        statements.pop_front().unwrap()
    }

    #[test]
    fn chains_up_to_the_limit_pass_and_longer_ones_are_refused_by_name() {
        // Parsed, checked and dropped on a large stack, as every entry point does.
        on_large_stack(|| {
            let chain = |n: usize| vec!["p"; n].join(" + ");
            // `a + b` is three expressions deep at its first operand: the chain, the sum, `a`.
            check(&parse(&format!("SELECT {} FROM t", chain(MAX_DEPTH - 1)))).unwrap();
            let error = check(&parse(&format!("SELECT {} FROM t", chain(MAX_DEPTH + 1))))
                .unwrap_err()
                .to_string();
            assert!(
                error.contains("expression nested deeper than 1000 levels"),
                "{error}"
            );

            let unions = |n: usize| vec!["SELECT 1"; n].join(" UNION ALL ");
            check(&parse(&unions(100))).unwrap();
            let error = check(&parse(&unions(MAX_DEPTH + 2)))
                .unwrap_err()
                .to_string();
            assert!(error.contains("more than 1000 set operations"), "{error}");
        });
    }

    #[test]
    fn text_with_a_long_run_of_operators_is_refused_before_parsing() {
        let chain = |n: usize| format!("SELECT {} FROM t", vec!["p"; n].join(" + "));
        check_text(&chain(MAX_RUN)).unwrap();
        let error = check_text(&chain(MAX_RUN + 2)).unwrap_err().to_string();
        assert!(
            error.contains("expression nested deeper than 1000 levels"),
            "{error}"
        );
        // Commas, parentheses and clauses end a run: wide statements pass.
        let wide = format!("SELECT {} FROM t", vec!["(a + b) * c"; 5_000].join(", "));
        check_text(&wide).unwrap();
        let in_list = format!(
            "SELECT count(*) FROM t WHERE x IN ({})",
            (0..200_000)
                .map(|i| i.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
        check_text(&in_list).unwrap();
        let unions = vec!["SELECT 1"; MAX_DEPTH + 2].join(" UNION ALL ");
        let error = check_text(&unions).unwrap_err().to_string();
        assert!(error.contains("more than 1000 set operations"), "{error}");
        // Text that does not tokenize is the parser's to report.
        check_text("SELECT 'unterminated").unwrap();
    }
}
