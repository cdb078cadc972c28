//! What the Postgres face and the Flight SQL face do alike with a client's statement: plan it
//! as the CLI does (calibsql's named arguments, `delta_scan`'s arguments), pick where it runs
//! (the cluster at `--remote` for a query that reads only files), count the rows a write
//! reports, and say why a statement stopped (a cancel, the time limit) in the same words.
//! The policy's check of the plan is [`super::policy::Policy::check`].

use std::time::Duration;

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::Result;
use datafusion::execution::session_state::SessionState;
use datafusion::logical_expr::LogicalPlan;
use datafusion::sql::parser::Statement as DFStatement;

/// Plans `statement` in `state` as the CLI does: calibsql's rewrites first (skipped named
/// arguments filled in, `delta_scan`'s arguments named), then DataFusion's planner. Runs
/// under the statement's cancel flag, if any ([`calibsql::cancel::scope`]): a statement
/// cancelled during the rewrites is not planned.
pub async fn plan(state: SessionState, mut statement: DFStatement) -> Result<LogicalPlan> {
    calibsql::prepare_statement(&mut statement, &state)?;
    calibsql::cancel::check_current()?;
    state.statement_to_plan(statement).await
}

/// The message of a statement cancelled by its client (Postgres' words, SQLSTATE 57014).
pub const CANCELLED: &str = "canceling statement due to user request";

/// The message of a statement stopped by its time limit (Postgres' words, and the limit).
pub fn timed_out(limit: Duration) -> String {
    format!(
        "canceling statement due to statement timeout ({} s)",
        limit.as_secs_f64()
    )
}

/// The rows a write (`INSERT`, `COPY … TO`) reports: the sum of its result's count column.
pub fn rows_written(batches: &[RecordBatch]) -> u64 {
    batches
        .iter()
        .filter_map(|b| {
            b.columns().first().and_then(|c| {
                c.as_any()
                    .downcast_ref::<datafusion::arrow::array::UInt64Array>()
            })
        })
        .flat_map(|counts| counts.iter().flatten())
        .sum()
}

/// Whether `plan` is a query whose tables are all files (what a cluster can read).
pub fn reads_files_only(plan: &LogicalPlan) -> bool {
    use datafusion::common::tree_node::TreeNodeRecursion;
    use datafusion::datasource::listing::ListingTable;
    use datafusion::datasource::source_as_provider;
    if matches!(
        plan,
        LogicalPlan::Ddl(_)
            | LogicalPlan::Dml(_)
            | LogicalPlan::Copy(_)
            | LogicalPlan::Statement(_)
            | LogicalPlan::DescribeTable(_)
            | LogicalPlan::Explain(_)
            | LogicalPlan::Analyze(_)
    ) {
        return false;
    }
    let (mut files, mut other) = (0, 0);
    let _ = plan.apply_with_subqueries(|node| {
        if let LogicalPlan::TableScan(scan) = node {
            match source_as_provider(&scan.source) {
                Ok(table) if table.is::<ListingTable>() => files += 1,
                _ => other += 1,
            }
        }
        Ok(TreeNodeRecursion::Continue)
    });
    files > 0 && other == 0
}
