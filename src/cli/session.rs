//! Running SQL text: building the session, splitting statements, executing and printing them.

use std::io::{self, Write};
use std::sync::Arc;
use std::time::Instant;

use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::datatypes::UInt64Type;
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_plan::{execute_stream, ExecutionPlan};
use datafusion::prelude::SessionContext;
use datafusion::sql::parser::Statement;
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
        let ctx = build_context(options).await?;
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
        Ok(calibsql::parse_statements(&self.ctx, sql)?)
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
    pub async fn run_statement(&mut self, statement: Statement) -> anyhow::Result<()> {
        // Ctrl-C sets this statement's flag; its operators stop at the next look at it.
        let (cancel, _running) = super::interrupt::statement();
        calibsql::cancel::scope(cancel, self.run_statement_now(statement)).await
    }

    async fn run_statement_now(&mut self, statement: Statement) -> anyhow::Result<()> {
        let started = Instant::now();
        // Runs DDL (CREATE, DROP, SET, …) right here; those return an empty schema.
        let frame = calibsql::plan_statement(&self.ctx, statement).await?;
        let writes = matches!(
            frame.logical_plan(),
            LogicalPlan::Dml(_) | LogicalPlan::Copy(_)
        );
        if frame.schema().fields().is_empty() {
            return Ok(());
        }
        let task_ctx = Arc::new(frame.task_ctx());
        let physical = calibsql::cancel::under_current(frame.create_physical_plan().await?)?;
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

/// The DataFusion session for `options`, with every calibsql function registered: local, or
/// a client of the cluster at `--remote`.
pub async fn build_context(options: &Options) -> anyhow::Result<SessionContext> {
    let context_options = calibsql::ContextOptions {
        batch_size: options.batch_size,
        target_partitions: options.target_partitions,
        memory_limit: options.memory_limit,
        s3: options.s3.clone(),
    };
    match &options.remote {
        #[cfg(feature = "distributed")]
        Some(address) => Ok(calibsql::distributed::remote_context(
            &format!("df://{address}"),
            &context_options,
        )
        .await?),
        // Refused while the options were checked.
        #[cfg(not(feature = "distributed"))]
        Some(_) => anyhow::bail!("--remote needs calibsql built with --features distributed"),
        None => Ok(calibsql::build_context(&context_options)?),
    }
}
