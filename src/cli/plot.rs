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
    let sql = read_sql(&args.query, "plot reliability")?;
    let options = Options {
        tables: args.query.tables.clone(),
        table_format: args.query.table_format,
        ..options.clone()
    };
    let ctx = context(&options).await?;
    let strategy = match args.strategy {
        PlotStrategy::Uniform => plot::Strategy::Uniform,
        PlotStrategy::Quantile => plot::Strategy::Quantile,
    };
    let panels = plot::reliability_panels(&ctx, &sql, args.bins, strategy).await?;
    plot::write_reliability_svg(&args.output, &panels, args.title.as_deref(), strategy)?;
    if !args.quiet {
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
    let mut sql = match &args.file {
        Some(path) => read_file(path)?,
        None => String::new(),
    };
    if let Some(command) = &args.command {
        sql.push_str(";\n");
        sql.push_str(command);
    }
    let options = Options {
        tables: args.tables.clone(),
        table_format: args.table_format,
        ..options.clone()
    };
    let ctx = context(&options).await?;
    let series = plot::metric::metric_series(&ctx, &sql).await?;
    plot::metric::write_metric_svg(
        &args.output,
        &series,
        args.title.as_deref(),
        (&args.x_label, &args.y_label),
    )?;
    if !args.quiet {
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

/// The SQL of `-c` or `-f` (`-` reads standard input); `what` names the tool in the error.
pub(super) fn read_sql(query: &QueryArgs, what: &str) -> anyhow::Result<String> {
    match (&query.command, &query.file) {
        (Some(sql), _) => Ok(sql.clone()),
        (None, Some(path)) => read_file(path),
        (None, None) => Err(UsageError(format!("{what} needs -c SQL or -f FILE")).into()),
    }
}

/// The SQL in `path` (`-`: standard input).
fn read_file(path: &std::path::Path) -> anyhow::Result<String> {
    if path.as_os_str() == "-" {
        let mut sql = String::new();
        io::Read::read_to_string(&mut io::stdin(), &mut sql)
            .context("cannot read standard input")?;
        Ok(sql)
    } else {
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))
    }
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
