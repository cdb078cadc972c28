//! Running SQL text: building the session, splitting statements, executing and printing them.

use std::io::{self, Write};
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::datatypes::UInt64Type;
use datafusion::execution::memory_pool::{FairSpillPool, TrackConsumersPool};
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_plan::{execute_stream, ExecutionPlan};
use datafusion::prelude::SessionContext;
use datafusion::sql::parser::{DFParserBuilder, Statement};
use datafusion::sql::sqlparser::dialect::dialect_from_str;
use futures::StreamExt;

use super::options::Options;
use super::output::{Printed, Printer, Sink};
use super::progress::Progress;

/// A calibsql session with its output.
pub struct Session {
    ctx: SessionContext,
    printer: Printer,
    status: bool,
    progress: bool,
}

impl Session {
    /// Builds the DataFusion session (memory limit, batch size, partitions, every calibsql
    /// function), opens the output and registers the `--table`s.
    pub async fn new(options: &Options) -> anyhow::Result<Session> {
        let ctx = build_context(options)?;
        for table in &options.tables {
            calibsql::tables::register_table(
                &ctx,
                &table.name,
                &table.location,
                options.table_format,
            )
            .await
            .map_err(|e| {
                anyhow::anyhow!("--table {}={}: {}", table.name, table.location, e.message())
            })?;
        }
        let sink = match &options.output {
            Some(path) => Sink::file(path)?,
            None => Sink::stdout(),
        };
        Ok(Session {
            ctx,
            printer: Printer::new(options.format, sink, options.max_rows),
            status: options.status,
            progress: options.progress,
        })
    }

    /// Splits `sql` into statements, respecting strings and comments.
    pub fn parse(&self, sql: &str) -> anyhow::Result<Vec<Statement>> {
        let state = self.ctx.state();
        let parser_options = &state.config().options().sql_parser;
        let dialect = dialect_from_str(parser_options.dialect).with_context(|| {
            format!(
                "unsupported SQL dialect {} (datafusion.sql_parser.dialect)",
                parser_options.dialect
            )
        })?;
        let statements = DFParserBuilder::new(sql)
            .with_dialect(dialect.as_ref())
            .with_recursion_limit(parser_options.recursion_limit.get())
            .build()?
            .parse_statements()?;
        Ok(statements.into())
    }

    /// Runs every statement of `sql` in order, stopping at the first error.
    pub async fn run_sql(&mut self, sql: &str) -> anyhow::Result<()> {
        for statement in self.parse(sql)? {
            self.run_statement(statement).await?;
        }
        Ok(())
    }

    /// Plans, executes and prints one statement. DDL and `SET` print nothing; `INSERT` and
    /// `COPY` report the rows written on standard error (table format only).
    pub async fn run_statement(&mut self, mut statement: Statement) -> anyhow::Result<()> {
        let started = Instant::now();
        let state = self.ctx.state();
        calibsql::named_args::fill_skipped_arguments(&mut statement, &state)?;
        let plan = state.statement_to_plan(statement).await?;
        let writes = matches!(plan, LogicalPlan::Dml(_) | LogicalPlan::Copy(_));
        // Runs DDL (CREATE, DROP, SET, …) right here; those return an empty schema.
        let frame = self.ctx.execute_logical_plan(plan).await?;
        if frame.schema().fields().is_empty() {
            return Ok(());
        }
        let task_ctx = Arc::new(frame.task_ctx());
        let physical = frame.create_physical_plan().await?;
        let progress = Progress::start(Arc::clone(&physical), self.progress);
        let result = self.execute(physical, task_ctx, writes, &progress).await;
        progress.stop();
        let printed = result?;
        if self.status {
            let seconds = started.elapsed().as_secs_f64();
            let line = if writes {
                format!("{} written in {seconds:.3} s", rows(printed.rows))
            } else if printed.shown < printed.rows {
                format!(
                    "{} of {} shown in {seconds:.3} s (see more with --max-rows)",
                    printed.shown,
                    rows(printed.rows)
                )
            } else {
                format!("{} in {seconds:.3} s", rows(printed.rows))
            };
            let _ = writeln!(io::stderr(), "{line}");
        }
        Ok(())
    }

    async fn execute(
        &mut self,
        physical: Arc<dyn ExecutionPlan>,
        task_ctx: Arc<datafusion::execution::TaskContext>,
        writes: bool,
        progress: &Progress,
    ) -> anyhow::Result<Printed> {
        let mut stream = execute_stream(physical, task_ctx)?;
        if !writes {
            return self.printer.print(stream, progress).await;
        }
        // DML and COPY return one `count` row.
        let mut written = 0;
        while let Some(batch) = stream.next().await {
            let batch = batch?;
            if let Some(counts) = batch.column(0).as_primitive_opt::<UInt64Type>() {
                written += counts.iter().flatten().sum::<u64>() as usize;
            } else {
                written += batch.column(0).len();
            }
        }
        Ok(Printed {
            rows: written,
            shown: 0,
        })
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.printer.flush()
    }
}

fn rows(n: usize) -> String {
    if n == 1 {
        "1 row".to_string()
    } else {
        format!("{n} rows")
    }
}

/// How many of the largest memory consumers an out-of-memory error names.
const TOP_CONSUMERS: NonZeroUsize = NonZeroUsize::new(3).unwrap();

/// The DataFusion session for `options`, with every calibsql function registered.
pub fn build_context(options: &Options) -> anyhow::Result<SessionContext> {
    let mut config = calibsql::default_config();
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
    // `SELECT * FROM 'data/x.parquet'` works, as in datafusion-cli.
    let ctx = SessionContext::new_with_config_rt(config, runtime.build_arc()?).enable_url_table();
    calibsql::register_all(&ctx);
    // s3:// locations, with the --s3-* flags over the AWS environment.
    calibsql::register_s3(&ctx, options.s3.clone())?;
    Ok(ctx)
}
