//! `calibsql demo`: generate data with known truth, run the reports in `sql/`, draw the
//! reliability diagrams and write the calibration report (`report.html`). Everything it shows can be rerun by hand with the commands it prints.

use std::path::Path;
use std::time::Instant;

use calibsql::plot::{self, Strategy};

use super::args::{DemoArgs, OutputFormat, TableArg, MIN_ROWS};
use super::options::{Mode, Options};
use super::session::Session;

/// A report: a `.sql` file of the repository, compiled in so the demo runs anywhere.
struct Report {
    file: &'static str,
    title: &'static str,
    about: &'static str,
    sql: &'static str,
}

const REPORTS: [Report; 3] = [
    Report {
        file: "sql/ranking_calibration.sql",
        title: "Calibration of a ranking model (Kweon et al. 2022, Table 1)",
        about: "Calibrators fitted on the biased valid split (naive, or UERM with the popularity \
                propensity),\nscored on the unbiased test split; ECE and MCE with 15 bins.",
        sql: include_str!("../../sql/ranking_calibration.sql"),
    },
    Report {
        file: "sql/field_calibration.sql",
        title: "Field-level calibration of a CTR model (Zhao et al. ConfCalib, Table 2)",
        about: "ConfCalib multipliers per site_id, app_id and ad_type from valid, fusion weights \
                by grid search on valid;\nscored on test. Multi-field RCE is the mean Field-RCE \
                over the three fields.",
        sql: include_str!("../../sql/field_calibration.sql"),
    },
    Report {
        file: "sql/significance.sql",
        title: "Is the miscalibration real? Calibration tests and per-site significance",
        about: "Spiegelhalter's z, the recalibration slope and calibration-in-the-large with \
                standard errors, Hosmer-Lemeshow and the CORP decomposition per model on test;\n\
                the sites whose bias survives Holm's correction over all sites.",
        sql: include_str!("../../sql/significance.sql"),
    },
];

/// The monitoring report, run on its own log with drift.
const MONITORING: Report = Report {
    file: "sql/monitoring.sql",
    title: "Calibration over time",
    about: "Daily partial states per model, merged into daily and 7-day rolling ECE, Field-RCE \
            and log loss;\nflagged when a day leaves the first week's mean ± 3σ. The CTR model \
            over-predicts by half from day 10 on.",
    sql: include_str!("../../sql/monitoring.sql"),
};

/// The day the monitoring log's drift starts.
const DRIFT_DAY: u32 = 10;

/// The drift chart's query over `sql/monitoring.sql`'s `monitoring` view.
const DRIFT_CHART_SQL: &str = "SELECT day AS x, ece AS value, ece_lower AS lower, \
ece_upper AS upper, model AS series FROM monitoring";

/// The calibration report of the monitoring log: `sql/report.sql` with these fields.
const REPORT_SQL: &str = include_str!("../../sql/report.sql");
const REPORT_FIELDS: [&str; 2] = ["site_id", "ad_type"];

/// A diagram: a `.sql` file returning p, y and series, drawn into the demo directory.
struct Diagram {
    file: &'static str,
    output: &'static str,
    title: &'static str,
    sql: &'static str,
}

const DIAGRAMS: [Diagram; 1] = [Diagram {
    file: "sql/reliability_ranking.sql",
    output: "reliability_ranking.svg",
    title: "Reliability of the ranking model's calibrated probabilities (unbiased test split)",
    sql: include_str!("../../sql/reliability_ranking.sql"),
}];

pub async fn run(args: &DemoArgs, options: &Options) -> anyhow::Result<()> {
    let dir = &args.dir;
    println!(
        "calibsql demo: {} rows of synthetic ad and recommendation logs with known truth \
         (seed {}) into {}",
        super::progress::thousands(args.rows),
        args.seed,
        dir.display()
    );
    let (out, progress) = (dir.clone(), options.progress);
    let mut config = calibsql::generate::Config::new(args.rows);
    config.seed = args.seed;
    let summary =
        tokio::task::spawn_blocking(move || super::generate::write(&out, config, progress))
            .await??;
    println!("{}", super::generate::describe(&summary));

    let tables = vec![
        table_arg("valid", &summary.valid_dir),
        table_arg("test", &summary.test_dir),
    ];
    let report_options = Options {
        mode: Mode::Batch(Vec::new()),
        tables: tables.clone(),
        table_format: None,
        format: OutputFormat::Table,
        output: None,
        max_rows: None,
        status: false,
        ..options.clone()
    };
    let mut session = Session::new(&report_options).await?;
    for (i, report) in REPORTS.iter().enumerate() {
        println!("\n{}. {}  [{}]", i + 1, report.title, report.file);
        println!("{}", report.about);
        let started = Instant::now();
        let result = session.run_sql(report.sql).await;
        session.flush()?;
        result?;
        println!("({:.1} s)", started.elapsed().as_secs_f64());
    }

    println!("\n{}. Reliability diagrams", REPORTS.len() + 1);
    let ctx = super::plot::context(&report_options).await?;
    for diagram in &DIAGRAMS {
        let panels =
            plot::reliability_panels(&ctx, diagram.sql, plot::DEFAULT_BINS, Strategy::Uniform)
                .await?;
        let path = dir.join(diagram.output);
        plot::write_reliability_svg(&path, &panels, Some(diagram.title), Strategy::Uniform, true)?;
        let eces: Vec<String> = panels
            .iter()
            .map(|p| {
                format!(
                    "{} ECE {:.4}",
                    p.series.as_deref().unwrap_or_default(),
                    p.ece
                )
            })
            .collect();
        println!(
            "{}  [{}]\n  {}",
            path.display(),
            diagram.file,
            eces.join("\n  ")
        );
    }

    // Calibration over time: a second log whose CTR model drifts from day 10.
    println!(
        "\n{}. Calibration over time: daily states, 7-day rolling windows, drift flags  [{}]",
        REPORTS.len() + 2,
        MONITORING.file
    );
    println!("{}", MONITORING.about);
    let drift_dir = dir.join("monitoring");
    let (out, progress) = (drift_dir.clone(), options.progress);
    let mut config = calibsql::generate::Config::new((args.rows / 2).max(MIN_ROWS));
    config.seed = args.seed;
    config.drift = Some(calibsql::generate::Drift {
        from_day: DRIFT_DAY,
        factor: super::generate::DEFAULT_DRIFT_FACTOR,
    });
    let drift = tokio::task::spawn_blocking(move || super::generate::write(&out, config, progress))
        .await??;
    println!("{}", super::generate::describe(&drift));
    let drift_options = Options {
        tables: vec![
            table_arg("valid", &drift.valid_dir),
            table_arg("test", &drift.test_dir),
        ],
        ..report_options.clone()
    };
    let mut session = Session::new(&drift_options).await?;
    let result = session.run_sql(MONITORING.sql).await;
    session.flush()?;
    result?;
    let ctx = super::plot::context(&drift_options).await?;
    let chart_sql = format!("{};\n{}", MONITORING.sql, DRIFT_CHART_SQL);
    let series = plot::metric::metric_series(&ctx, &chart_sql).await?;
    let chart = dir.join("drift.svg");
    plot::metric::write_metric_svg(
        &chart,
        &series,
        Some("Daily ECE, reference mean ± 3σ of days 0–6; the CTR model over-predicts by half from day 10"),
        ("day", "ECE (15 bins)"),
    )?;
    println!("{}", chart.display());

    println!(
        "\n{}. The calibration report: one HTML page  [sql/report.sql]",
        REPORTS.len() + 3
    );
    let report_options = calibsql::report::ReportOptions {
        fields: REPORT_FIELDS.iter().map(|f| f.to_string()).collect(),
        title: Some(
            "calibsql demo: a CTR model drifting from day 10, and a raw ranker".to_string(),
        ),
        source: vec![format!("test={}", drift.test_dir.display())],
        ..Default::default()
    };
    let report = calibsql::report::compute(&ctx, REPORT_SQL, &report_options).await?;
    let page = dir.join("report.html");
    report.save(&page)?;
    println!(
        "{}  ({})",
        page.display(),
        report
            .data
            .models
            .iter()
            .map(|m| format!("{} {}", m.label(), m.status.level.to_uppercase()))
            .collect::<Vec<_>>()
            .join(", ")
    );

    let tables = format!(
        "--table valid={} --table test={}",
        shell_word(&summary.valid_dir),
        shell_word(&summary.test_dir)
    );
    println!("\nRun them yourself (from the repository, where sql/ is):");
    for report in &REPORTS {
        println!("  calibsql {tables} -f {}", report.file);
    }
    for diagram in &DIAGRAMS {
        println!(
            "  calibsql plot reliability {tables} -f {} -o {}",
            diagram.file, diagram.output
        );
    }
    let drift_tables = format!(
        "--table valid={} --table test={}",
        shell_word(&drift.valid_dir),
        shell_word(&drift.test_dir)
    );
    println!("  calibsql {drift_tables} -f {}", MONITORING.file);
    println!(
        "  calibsql plot metric {drift_tables} -f {} -c \"{}\" -o drift.svg",
        MONITORING.file,
        DRIFT_CHART_SQL.replace('\n', " ")
    );
    println!(
        "  calibsql report --table test={} -f sql/report.sql {} -o report.html",
        shell_word(&drift.test_dir),
        REPORT_FIELDS.map(|f| format!("--field {f}")).join(" ")
    );
    println!("  calibsql {tables}        # an interactive shell over both splits");
    Ok(())
}

fn table_arg(name: &str, path: &Path) -> TableArg {
    TableArg {
        name: name.to_string(),
        location: path.display().to_string(),
    }
}

/// The path as one shell word (quoted if it has to be).
fn shell_word(path: &Path) -> String {
    let text = path.display().to_string();
    let plain = text
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "/._-+=:,@".contains(c));
    if plain {
        text
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}
