//! `calibsql plot reliability`: a reliability diagram (SVG) from a query returning p, y and
//! optionally series; `calibsql plot metric`: a metric over time (the drift chart). The
//! drawing and the binning live in `calibsql::plot`.

use std::io::{self, Write};

use anyhow::Context;
use datafusion::prelude::SessionContext;

use calibsql::plot;

use super::args::{MetricArgs, PlotStrategy, QueryArgs, ReliabilityArgs};
use super::options::{Options, UsageError};

/// Draws the diagram of `args`.
pub async fn reliability(args: &ReliabilityArgs, options: &Options) -> anyhow::Result<()> {
    check_svg(&args.output)?;
    let (ctx, sql) = query(&args.query, options).await?;
    let strategy = match args.strategy {
        PlotStrategy::Uniform => plot::Strategy::Uniform,
        PlotStrategy::Quantile => plot::Strategy::Quantile,
    };
    let panels = plot::reliability_panels(&ctx, &sql, args.bins, strategy).await?;
    plot::write_reliability_svg(
        &args.output,
        &panels,
        args.title.as_deref(),
        strategy,
        !args.no_intervals,
    )?;
    if !args.query.quiet {
        let _ = writeln!(
            io::stderr(),
            "Wrote {} ({} panel{}, {} bins): {}",
            args.output.display(),
            panels.len(),
            if panels.len() == 1 { "" } else { "s" },
            args.bins,
            panels
                .iter()
                .map(|p| match &p.series {
                    Some(series) => format!("{series} ECE {:.4}", p.ece),
                    None => format!("ECE {:.4}", p.ece),
                })
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    Ok(())
}

/// Draws the chart of `args`.
pub async fn metric(args: &MetricArgs, options: &Options) -> anyhow::Result<()> {
    check_svg(&args.output)?;
    let (ctx, sql) = query(&args.query, options).await?;
    let series = plot::metric::metric_series(&ctx, &sql).await?;
    plot::metric::write_metric_svg(
        &args.output,
        &series,
        args.title.as_deref(),
        (&args.x_label, &args.y_label),
    )?;
    if !args.query.quiet {
        let flagged: usize = series
            .iter()
            .map(|s| s.points.iter().filter(|p| p.flagged()).count())
            .sum();
        let _ = writeln!(
            io::stderr(),
            "Wrote {} ({} series, {} point(s) outside their band)",
            args.output.display(),
            series.len(),
            flagged
        );
    }
    Ok(())
}

fn check_svg(output: &std::path::Path) -> anyhow::Result<()> {
    let is_svg = output
        .extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e.eq_ignore_ascii_case("svg"));
    if !is_svg {
        return Err(UsageError(format!(
            "-o {}: plot writes SVG; name the file FILE.svg (convert it with e.g. rsvg-convert)",
            output.display()
        ))
        .into());
    }
    Ok(())
}

/// The session and the SQL of `query`: `-f`'s statements (`-` reads standard input), then
/// `-c`'s, on a session with `--table`'s tables registered.
pub async fn query(
    query: &QueryArgs,
    options: &Options,
) -> anyhow::Result<(SessionContext, String)> {
    let mut sql = match &query.file {
        Some(path) if path.as_os_str() == "-" => {
            let mut sql = String::new();
            io::Read::read_to_string(&mut io::stdin(), &mut sql)
                .context("cannot read standard input")?;
            sql
        }
        Some(path) => std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?,
        None => String::new(),
    };
    if let Some(command) = &query.command {
        if !sql.is_empty() {
            sql.push_str(";\n");
        }
        sql.push_str(command);
    }
    if sql.trim().is_empty() {
        return Err(UsageError("the query is empty: give SQL with -c or -f".to_string()).into());
    }
    let options = Options {
        tables: query.tables.clone(),
        table_format: query.table_format,
        ..options.clone()
    };
    Ok((context(&options).await?, sql))
}

/// A session as `calibsql` builds it, with `options.tables` registered.
pub async fn context(options: &Options) -> anyhow::Result<SessionContext> {
    let ctx = super::session::build_context(options).await?;
    for table in &options.tables {
        calibsql::tables::register_table(&ctx, &table.name, &table.location, options.table_format)
            .await
            .map_err(|e| {
                anyhow::anyhow!("--table {}={}: {}", table.name, table.location, e.message())
            })?;
    }
    Ok(ctx)
}
