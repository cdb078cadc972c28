//! calibsql: a DataFusion session with every calibration function registered,
//! table registration for local paths and S3 (see [`s3`]), and the CLI's engine.

pub mod docs;
pub mod generate;
pub mod named_args;
pub mod plot;
pub mod s3;
pub mod tables;

use datafusion::common::Result;
use datafusion::prelude::{DataFrame, SessionConfig, SessionContext};

pub use calibsql_udfs as udfs;
pub use s3::{register_s3, S3Options};

/// Registers every calibsql function (scalars and aggregates) on `ctx`.
pub fn register_all(ctx: &SessionContext) {
    for f in udfs::all_scalar_functions() {
        ctx.register_udf(f.as_ref().clone());
    }
    for f in udfs::all_aggregate_functions() {
        ctx.register_udaf(f.as_ref().clone());
    }
}

/// The session configuration calibsql uses: information_schema on (for `SHOW FUNCTIONS`).
pub fn default_config() -> SessionConfig {
    SessionConfig::new().with_information_schema(true)
}

/// A new session with the default configuration and every calibsql function registered.
pub fn new_context() -> SessionContext {
    new_context_with_config(default_config())
}

/// A new session with `config`, every calibsql function registered and `s3://` locations
/// read with the credentials of the AWS environment (see [`register_s3`] to set others).
pub fn new_context_with_config(config: SessionConfig) -> SessionContext {
    let ctx = SessionContext::new_with_config(config);
    register_all(&ctx);
    // Copies the runtime of a session just built: cannot fail.
    register_s3(&ctx, S3Options::default()).expect("a new session accepts S3 support");
    ctx
}

/// Plans and runs one SQL statement like [`SessionContext::sql`], after completing named
/// arguments that skip optional ones (`ece(p, y, w => weight)`; see [`named_args`]).
pub async fn sql(ctx: &SessionContext, sql: &str) -> Result<DataFrame> {
    let state = ctx.state();
    let dialect = state.config().options().sql_parser.dialect;
    let mut statement = state.sql_to_statement(sql, &dialect)?;
    named_args::fill_skipped_arguments(&mut statement, &state)?;
    let plan = state.statement_to_plan(statement).await?;
    ctx.execute_logical_plan(plan).await
}
