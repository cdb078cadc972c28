//! `calibsql report`: the calibration report of a query as one HTML page (and JSON). The
//! report itself lives in `calibsql::report`; this reads the flags, runs it on a local or
//! remote session and writes the files, each atomically and only once everything is computed.

use std::io::{self, Write};

use calibsql::plot::Strategy;
use calibsql::report::{self, Axis, ReportOptions};

use super::args::{AxisArg, PlotStrategy, ReportArgs};
use super::options::{Options, UsageError};
use super::plot::query;

/// Computes the report of `args` and writes it.
pub async fn run(args: &ReportArgs, options: &Options) -> anyhow::Result<()> {
    for (path, extensions) in [
        (Some(&args.output), ["html", "htm"]),
        (args.json.as_ref(), ["json", "json"]),
    ] {
        let Some(path) = path else { continue };
        let ok = path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| extensions.iter().any(|x| e.eq_ignore_ascii_case(x)));
        if !ok {
            return Err(UsageError(format!(
                "{} {}: name the file FILE.{}",
                if extensions[0] == "html" {
                    "-o"
                } else {
                    "--json"
                },
                path.display(),
                extensions[0]
            ))
            .into());
        }
    }
    let options = Options {
        remote: args.remote.clone().or_else(|| options.remote.clone()),
        ..options.clone()
    };
    let (ctx, sql) = query(&args.query, &options).await?;
    let report_options = ReportOptions {
        bins: args.bins,
        strategy: match args.strategy {
            PlotStrategy::Uniform => Strategy::Uniform,
            PlotStrategy::Quantile => Strategy::Quantile,
        },
        fields: args.fields.clone(),
        title: args.title.clone(),
        reference_days: args.reference_days,
        source: args
            .query
            .tables
            .iter()
            .map(|t| format!("{}={}", t.name, t.location))
            .collect(),
        axis: match args.axis {
            AxisArg::Auto => Axis::Auto,
            AxisArg::Linear => Axis::Linear,
            AxisArg::LogOdds => Axis::LogOdds,
        },
    };
    let report = report::compute(&ctx, &sql, &report_options).await?;
    // Both texts first, so a failure writes neither file.
    let html = report.html()?;
    let json = args.json.as_ref().map(|_| report.json()).transpose()?;
    report::write_atomically(&args.output, html.as_bytes())?;
    if let (Some(path), Some(json)) = (&args.json, json) {
        report::write_atomically(path, json.as_bytes())?;
    }
    if !args.query.quiet {
        let data = &report.data;
        let _ = writeln!(
            io::stderr(),
            "Wrote {} ({} rows, {} model{}: {})",
            args.output.display(),
            data.rows,
            data.models.len(),
            if data.models.len() == 1 { "" } else { "s" },
            data.models
                .iter()
                .map(|m| format!("{} {}", m.label(), m.status.level.to_uppercase()))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    Ok(())
}
