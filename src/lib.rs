//! calibsql: a DataFusion session with every calibration function registered,
//! table registration for local paths and object stores (see [`stores`]), and the CLI's engine. What
//! every statement goes through wherever it comes from: [`nesting`] (how deep it may be,
//! the stacks that hold it), [`value_limits`] (functions bounded by the memory limit) and
//! [`cancel`] (stopping it in its operators).

pub mod address;
pub mod cancel;
pub mod constant_join;
pub mod delta;
#[cfg(feature = "distributed")]
pub mod distributed;
pub mod docs;
pub mod errors;
pub mod generate;
pub mod named_args;
pub mod nesting;
pub mod plot;
pub mod report;
pub mod settings;
pub mod stores;
pub mod table_calls;
pub mod tables;
pub mod value_limits;

use std::num::NonZeroUsize;
use std::sync::Arc;

use datafusion::common::plan_datafusion_err;
use datafusion::common::Result;
use datafusion::execution::memory_pool::{FairSpillPool, TrackConsumersPool};
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::execution::SessionStateBuilder;
use datafusion::prelude::{DataFrame, SessionConfig, SessionContext};
use datafusion::sql::parser::{DFParserBuilder, Statement};
use datafusion::sql::sqlparser::dialect::dialect_from_str;

pub use calibsql_udfs as udfs;
pub use stores::{register_object_stores, S3Options};

/// Registers every calibsql function (scalars and aggregates) on `ctx`, the rule that
/// applies calibsql's settings ([`settings`]) to its plans, and Delta tables' `delta_scan`
/// and `STORED AS DELTA` ([`delta`]).
pub fn register_all(ctx: &SessionContext) {
    ctx.add_analyzer_rule(Arc::new(settings::ApplySettings));
    for f in udfs::all_scalar_functions() {
        ctx.register_udf(f.as_ref().clone());
    }
    for f in udfs::all_aggregate_functions() {
        ctx.register_udaf(f.as_ref().clone());
    }
    delta::register_delta(ctx);
}

/// The session configuration calibsql uses: information_schema on (for `SHOW FUNCTIONS`)
/// and calibsql's settings (`SET calibsql.…`, see [`settings`]).
pub fn default_config() -> SessionConfig {
    with_calibsql_settings(SessionConfig::new().with_information_schema(true))
}

/// `config` with calibsql's settings at their defaults, unless it has them already.
pub(crate) fn with_calibsql_settings(config: SessionConfig) -> SessionConfig {
    if config
        .options()
        .extensions
        .get::<settings::CalibsqlOptions>()
        .is_some()
    {
        return config;
    }
    config.with_option_extension(settings::CalibsqlOptions::default())
}

/// A new session with the default configuration and every calibsql function registered.
pub fn new_context() -> SessionContext {
    new_context_with_config(default_config())
}

/// A new session with `config`, every calibsql function registered and object store locations
/// (`s3://`, `az://`, `abfss://`, `gs://`, `http(s)://`) read with the credentials of the
/// environment and the AWS shared files (see [`register_object_stores`] to set others).
pub fn new_context_with_config(config: SessionConfig) -> SessionContext {
    let state = SessionStateBuilder::new()
        .with_config(with_calibsql_settings(config))
        .with_default_features();
    let ctx = constant_join::with_constant_joins(state);
    register_all(&ctx);
    // Copies the runtime of a session just built: cannot fail.
    register_object_stores(&ctx, S3Options::default())
        .expect("a new session accepts object store support");
    ctx
}

/// What a session built by [`build_context`] differs in from the default one: the settings of
/// the CLI's `--batch-size`, `--target-partitions`, `--memory-limit` and `--s3-*` flags, and
/// of `calibsql.connect(...)` in Python.
#[derive(Debug, Clone, Default)]
pub struct ContextOptions {
    /// Rows per batch (DataFusion's default, 8192, when `None`).
    pub batch_size: Option<usize>,
    /// Partitions a query is split into (the number of cores when `None`).
    pub target_partitions: Option<usize>,
    /// Bytes of memory a query may use before it spills or fails (unbounded when `None`).
    pub memory_limit: Option<usize>,
    /// S3 settings over the AWS environment.
    pub s3: S3Options,
}

/// How many of the largest memory consumers an out-of-memory error names.
const TOP_CONSUMERS: NonZeroUsize = NonZeroUsize::new(3).unwrap();

/// The session the CLI and the Python module use: [`default_config`] with `options`, every
/// calibsql function, `s3://` locations, and `SELECT * FROM 'data/x.parquet'` (as in
/// datafusion-cli).
pub fn build_context(options: &ContextOptions) -> Result<SessionContext> {
    let mut config = default_config();
    if let Some(n) = options.batch_size {
        config = config.with_batch_size(n);
    }
    if let Some(n) = options.target_partitions {
        config = config.with_target_partitions(n);
    }
    let mut runtime = RuntimeEnvBuilder::new();
    if let Some(limit) = options.memory_limit {
        // Fair sharing between spilling operators (sorts, aggregations), and an error that
        // names the largest consumers when memory runs out.
        let pool = TrackConsumersPool::new(FairSpillPool::new(limit), TOP_CONSUMERS);
        runtime = runtime.with_memory_pool(Arc::new(pool));
    }
    let runtime = runtime.build_arc()?;
    if options.memory_limit.is_some() {
        // The aggregates that keep rows spill sorted runs of them under the limit.
        calibsql_udfs::spill_to(&runtime.disk_manager, &runtime.memory_pool);
    }
    let state = SessionStateBuilder::new()
        .with_config(config)
        .with_runtime_env(runtime)
        .with_default_features();
    let ctx = delta::with_url_tables(constant_join::with_constant_joins(state), |tables| tables);
    register_all(&ctx);
    if let Some(limit) = options.memory_limit {
        value_limits::bound_value_functions(&ctx, limit);
    }
    register_object_stores(&ctx, options.s3.clone())?;
    Ok(ctx)
}

/// Splits `sql` into statements (respecting strings and comments) with the session's dialect,
/// after [`nesting::check_text`].
pub fn parse_statements(ctx: &SessionContext, sql: &str) -> Result<Vec<Statement>> {
    nesting::check_text(sql)?;
    let state = ctx.state();
    let parser_options = &state.config().options().sql_parser;
    let dialect = dialect_from_str(parser_options.dialect).ok_or_else(|| {
        plan_datafusion_err!(
            "unsupported SQL dialect {} (datafusion.sql_parser.dialect)",
            parser_options.dialect
        )
    })?;
    let limit = parser_options.recursion_limit.get();
    let parse = |limit: usize| -> Result<Vec<Statement>> {
        Ok(DFParserBuilder::new(sql)
            .with_dialect(dialect.as_ref())
            .with_recursion_limit(limit)
            .build()?
            .parse_statements()?
            .into())
    };
    parse(limit).map_err(|error| {
        nesting::explain_parse_error(error, sql, limit, Some(&|limit| parse(limit).is_ok()))
    })
}

/// What every parsed statement goes through before it is planned: refused if it nests too
/// deep to plan safely ([`nesting::check`]), then its skipped named arguments filled in
/// ([`named_args`]), `delta_scan`'s named arguments made positional
/// ([`delta::name_delta_scan_arguments`]) and each table function call named after its text
/// ([`table_calls`]).
pub fn prepare_statement(
    statement: &mut Statement,
    state: &datafusion::execution::session_state::SessionState,
) -> Result<()> {
    nesting::check(statement)?;
    named_args::fill_skipped_arguments(statement, state)?;
    delta::name_delta_scan_arguments(statement)?;
    table_calls::name_table_function_calls(statement);
    Ok(())
}

/// Plans one parsed statement, after [`prepare_statement`]. DDL and `SET` run right here
/// (their frame has no columns); a query runs when the frame is collected or streamed.
pub async fn plan_statement(ctx: &SessionContext, mut statement: Statement) -> Result<DataFrame> {
    let state = ctx.state();
    prepare_statement(&mut statement, &state)?;
    let plan = state.statement_to_plan(statement).await?;
    ctx.execute_logical_plan(plan).await
}

/// Plans and runs one SQL statement like [`SessionContext::sql`], after
/// [`prepare_statement`] (named arguments that skip optional ones, `ece(p, y, w => weight)`).
pub async fn sql(ctx: &SessionContext, sql: &str) -> Result<DataFrame> {
    let state = ctx.state();
    let mut statements = parse_statements(ctx, sql)?;
    match statements.len() {
        1 => {}
        0 => {
            return datafusion::common::plan_err!(
                "No SQL statements were provided in the query string"
            )
        }
        _ => {
            return datafusion::common::not_impl_err!(
                "The context currently only supports a single SQL statement"
            )
        }
    }
    let mut statement = statements.remove(0);
    prepare_statement(&mut statement, &state)?;
    let plan = state.statement_to_plan(statement).await?;
    ctx.execute_logical_plan(plan).await
}
