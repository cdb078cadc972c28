//! End-to-end bench: calibsql aggregates vs DataFusion built-ins on the same Parquet file,
//! in the same run, reported as time ratios (targets from the issues: `ece` ≤ 1.3× the
//! `avg` query, `field_rce` ≤ 1.2× the equivalent `GROUP BY`, `fit_gaussian_calib(score, y,
//! propensity)` ≤ 3× `avg(score)` with a state that does not grow with rows; the fit's state
//! size and final-fit time are printed at the end), then a 30-day rollup from stored daily
//! states against the scan, then the speed issue's pairs on a realistic file (distinct
//! float64s, Int8 labels) with their targets and the peak memory of `auc` and `'quantile'`,
//! then the multiclass issue's pairs (`cbpe(p)` ≤ 1× `auc(p, y)`; `ece_top_label` over 10
//! classes ≤ 2× `avg` over the lists' flattened values), then every aggregate against `avg`.
//!
//! `cargo bench --bench end_to_end`. Rows: `CALIBSQL_BENCH_ROWS`, default 20,000,000 (the
//! files are written once under the target directory and reused). Runs per pair: at least
//! `CALIBSQL_BENCH_RUNS`, default 9, and on until the pair has run `CALIBSQL_BENCH_SECONDS`,
//! default 15 (0: exactly the minimum), at most 101 (see [`Runs`]); the DuckDB AUC runs
//! `CALIBSQL_BENCH_RUNS` times. `CALIBSQL_BENCH_ONLY=fit` runs only the pairs whose name
//! contains `fit`, and `|` separates alternatives: `CALIBSQL_BENCH_ONLY="realistic
//! ece(p|realistic fit"` runs those two pairs in their usual order, so one pair can be timed
//! after the ones that run before it in a full run.

use std::time::{Duration, Instant};

use datafusion::prelude::ParquetReadOptions;

#[path = "../tests/support/mod.rs"]
mod support;

#[path = "support/data.rs"]
mod data;
use data::{
    data_path, env_number, median_ms, multiclass_path, realistic_ctr_path, realistic_path,
    write_data, write_multiclass, write_realistic, write_realistic_ctr,
};

/// The peak resident memory of `calibsql -c sql` over the realistic file as `t` and the
/// `tables` (`NAME=PATH`), in a child process (its `VmHWM`, printed with `CALIBSQL_PEAK_RSS=1`).
fn peak_rss(path: &std::path::Path, tables: &[String], sql: &str) -> String {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_calibsql"));
    command
        .env("CALIBSQL_PEAK_RSS", "1")
        .arg("--table")
        .arg(format!("t={}", path.display()));
    for table in tables {
        command.arg("--table").arg(table);
    }
    let output = command
        .args(["--format", "csv", "-c", sql])
        .output()
        .expect("run calibsql");
    let stderr = String::from_utf8_lossy(&output.stderr);
    stderr
        .lines()
        .find_map(|l| l.strip_prefix("calibsql: peak RSS "))
        .map(str::to_string)
        .unwrap_or_else(|| format!("? ({})", stderr.trim()))
}

/// Times `ours` against `base` and prints both, their ratio (of the medians) and the target's
/// verdict, and how much the ratio moved within the run: the quartiles of the ratios of each
/// run of `ours` to the run of `base` just before it. On a noisy machine the spread says how
/// far one run's ratio can be trusted (a target met by the median but not by the upper
/// quartile is met at the edge).
async fn report_pair(
    ctx: &datafusion::prelude::SessionContext,
    (name, sql): (&str, &str),
    (base_name, base_sql): (&str, &str),
    target: f64,
    runs: Runs,
) {
    let timed = time_pair(ctx, base_sql, sql, runs).await;
    let (base, ours) = (timed.median_a, timed.median_b);
    let ratio = ours.as_secs_f64() / base.as_secs_f64();
    let verdict = if target.is_nan() {
        String::new()
    } else if ratio <= target {
        format!("(target <= {target}: met)")
    } else {
        format!("(target <= {target}: MISSED)")
    };
    let r = &timed.paired_ratios;
    let quartile = |q: usize| r[(r.len() - 1) * q / 4];
    println!(
        "{name:<32} {:>9.1} ms   {base_name:<16} {:>9.1} ms   ratio {ratio:.2} {verdict}  \
         [run by run {:.2}-{:.2}, {} runs]",
        ours.as_secs_f64() * 1e3,
        base.as_secs_f64() * 1e3,
        quartile(1),
        quartile(3),
        r.len(),
    );
}

/// `CALIBSQL_BENCH_ONLY`: alternatives separated by `|` (empty: everything).
struct Only(String);

impl Only {
    /// Whether a pair or a section (the fit's state sizes, the rollup, DuckDB's AUC, the
    /// peaks) runs: when its name contains one of the alternatives.
    fn wants(&self, name: &str) -> bool {
        self.0.split('|').any(|o| name.contains(o))
    }
}

/// The runs of [`time_pair`]: both medians, and the ratio b/a of each run of `b` to the run
/// of `a` just before it, sorted.
struct TimedPair {
    median_a: Duration,
    median_b: Duration,
    paired_ratios: Vec<f64>,
}

/// How many times each pair runs: at least `min` times, and on until the pair's runs have
/// taken `seconds` (`CALIBSQL_BENCH_SECONDS`), at most [`Runs::MAX`] times. On this VM one
/// run's ratio moves by ±0.1, so a fixed count of 9 left the verdict of a fast pair to chance
/// (the fit's ratio read 1.08 to 1.29 in three full runs of the same code); a floor in time
/// gives the fast pairs (0.1–0.4 s a run) 40–100 runs and leaves the slow ones at `min`.
#[derive(Clone, Copy)]
struct Runs {
    min: usize,
    seconds: f64,
}

impl Runs {
    const MAX: usize = 101;

    fn from_env() -> Self {
        Runs {
            min: env_number("CALIBSQL_BENCH_RUNS", 9).max(1),
            seconds: env_number("CALIBSQL_BENCH_SECONDS", 15) as f64,
        }
    }

    /// Whether another run is due after `done` runs that took `elapsed`.
    fn more(&self, done: usize, elapsed: Duration) -> bool {
        done < self.min || (done < Self::MAX && elapsed.as_secs_f64() < self.seconds)
    }
}

/// Times `a` and `b` alternately (so drift in the machine's load hits both alike), after one
/// warm-up run of each, as many times as `runs` says.
async fn time_pair(
    ctx: &datafusion::prelude::SessionContext,
    a: &str,
    b: &str,
    runs: Runs,
) -> TimedPair {
    let run = |sql: &str| {
        let sql = sql.to_string();
        async move {
            let start = Instant::now();
            ctx.sql(&sql).await.unwrap().collect().await.unwrap();
            start.elapsed()
        }
    };
    run(a).await;
    run(b).await;
    let (mut ta, mut tb) = (vec![], vec![]);
    let started = Instant::now();
    while runs.more(ta.len(), started.elapsed()) {
        ta.push(run(a).await);
        tb.push(run(b).await);
    }
    let runs = ta.len();
    let mut paired_ratios: Vec<f64> = ta
        .iter()
        .zip(&tb)
        .map(|(a, b)| b.as_secs_f64() / a.as_secs_f64())
        .collect();
    paired_ratios.sort_by(f64::total_cmp);
    ta.sort();
    tb.sort();
    TimedPair {
        median_a: ta[runs / 2],
        median_b: tb[runs / 2],
        paired_ratios,
    }
}

/// Feeds `fit_gaussian_calib(score, y, propensity)` the whole file through its row
/// accumulator and reports the state size (`Accumulator::size`, the bytes DataFusion's memory
/// pool is told) as rows arrive: it must stop growing once the grid has seen the score range.
async fn fit_state_sizes(ctx: &datafusion::prelude::SessionContext) {
    use futures::StreamExt;

    let df = ctx
        .sql("SELECT score, CAST(y AS DOUBLE) AS y, propensity FROM t")
        .await
        .unwrap();
    let schema = std::sync::Arc::new(df.schema().as_arrow().clone());
    let call =
        support::UdafCall::columns("fit_gaussian_calib", schema, &["score", "y", "propensity"]);
    let mut acc = call.accumulator();
    let mut stream = df.execute_stream().await.unwrap();
    let (mut rows, mut next_report) = (0usize, 1_000_000usize);
    let mut line = String::from("fit_gaussian_calib state size:");
    while let Some(batch) = stream.next().await {
        let batch = batch.unwrap();
        acc.update_batch(batch.columns()).unwrap();
        rows += batch.num_rows();
        if rows >= next_report {
            line += &format!("  {}M rows {} KiB", rows / 1_000_000, acc.size() / 1024);
            next_report *= 4;
        }
    }
    line += &format!("  {}M rows {} KiB", rows / 1_000_000, acc.size() / 1024);
    println!("{line}");
    let start = Instant::now();
    let model = acc.evaluate().unwrap();
    println!(
        "fit_gaussian_calib final fit (optimiser over the state): {:.1} ms\n  {model}",
        start.elapsed().as_secs_f64() * 1e3
    );
}

#[tokio::main]
async fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` passes nothing useful: skip there.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let rows = env_number("CALIBSQL_BENCH_ROWS", 20_000_000);
    let path = data_path(rows);
    if !path.exists() {
        eprintln!("writing {rows} rows to {}", path.display());
        write_data(&path, rows).await;
    }
    let ctx = calibsql::new_context();
    ctx.register_parquet("t", path.to_str().unwrap(), ParquetReadOptions::default())
        .await
        .unwrap();
    let pairs = [
        (
            "ece(p, y)",
            "SELECT ece(p, y) FROM t",
            "avg(p), avg(y)",
            "SELECT avg(p), avg(y) FROM t",
            1.3,
        ),
        (
            "field_rce(p, y, site)",
            "SELECT field_rce(p, y, site) FROM t",
            "GROUP BY site",
            "SELECT site, sum(y - p), sum(y), count(*) FROM t GROUP BY site",
            1.2,
        ),
        (
            "fit_gaussian_calib(score, y, propensity)",
            "SELECT fit_gaussian_calib(score, y, propensity) FROM t",
            "avg(score)",
            "SELECT avg(score) FROM t",
            3.0,
        ),
        (
            "fit_gaussian_calib(score, y, propensity)",
            "SELECT fit_gaussian_calib(score, y, propensity) FROM t",
            "avg of the 3 cols",
            "SELECT avg(score), avg(y), avg(propensity) FROM t",
            f64::NAN,
        ),
        (
            "logloss(p, y)",
            "SELECT logloss(p, y) FROM t",
            "avg(p), avg(y)",
            "SELECT avg(p), avg(y) FROM t",
            f64::NAN,
        ),
        (
            "ips_logloss(p, y, propensity)",
            "SELECT ips_logloss(p, y, propensity) FROM t",
            "avg(p), avg(y)",
            "SELECT avg(p), avg(y) FROM t",
            f64::NAN,
        ),
        (
            "ece(p, y, 15, 'quantile')",
            "SELECT ece(p, y, 15, 'quantile') FROM t",
            "avg(p), avg(y)",
            "SELECT avg(p), avg(y) FROM t",
            f64::NAN,
        ),
        (
            "smooth_ece(p, y)",
            "SELECT smooth_ece(p, y) FROM t",
            "avg(p), avg(y)",
            "SELECT avg(p), avg(y) FROM t",
            f64::NAN,
        ),
    ];
    let runs = Runs::from_env();
    println!(
        "{rows} rows, {} threads; each pair: the medians of alternating runs, at least {} and \
         up to {} until the pair has run {} s",
        ctx.state().config().target_partitions(),
        runs.min,
        Runs::MAX,
        runs.seconds,
    );
    let only = Only(std::env::var("CALIBSQL_BENCH_ONLY").unwrap_or_default());
    for (name, sql, base_name, base_sql, target) in pairs {
        if only.wants(name) {
            report_pair(&ctx, (name, sql), (base_name, base_sql), target, runs).await;
        }
    }
    if only.wants("fit_gaussian_calib") {
        fit_state_sizes(&ctx).await;
    }
    if only.wants("rollup") {
        rollup(&ctx, &path, runs).await;
    }
    realistic(rows, runs, &only).await;
    if only.wants("realistic report") {
        report(rows, runs).await;
    }
    cbpe_pairs(rows, runs, &only).await;
    if only.wants("multiclass") {
        multiclass(rows, runs).await;
    }
    every_aggregate(rows, runs, &only).await;
}

/// A context with the realistic file of `rows` rows registered as `t` (the CTR-like one
/// with `ctr`), the file written first when it is not there yet; and its path.
async fn realistic_context(
    rows: usize,
    ctr: bool,
) -> (datafusion::prelude::SessionContext, std::path::PathBuf) {
    let path = if ctr {
        realistic_ctr_path(rows)
    } else {
        realistic_path(rows)
    };
    if !path.exists() {
        eprintln!("writing {rows} realistic rows to {}", path.display());
        if ctr {
            write_realistic_ctr(&path, rows).await;
        } else {
            write_realistic(&path, rows).await;
        }
    }
    let ctx = calibsql::new_context();
    ctx.register_parquet("t", path.to_str().unwrap(), ParquetReadOptions::default())
        .await
        .unwrap();
    (ctx, path)
}

/// The multiclass issue's `cbpe` target: `cbpe(p)` within `auc(p, y)`'s time (both keep the
/// rows and sort them), on the 50%-positive realistic file and on the CTR-like one.
async fn cbpe_pairs(rows: usize, runs: Runs, only: &Only) {
    for (label, ctr) in [("realistic cbpe(p)", false), ("ctr cbpe(p)", true)] {
        if !only.wants(label) {
            continue;
        }
        let (ctx, _) = realistic_context(rows, ctr).await;
        report_pair(
            &ctx,
            (label, "SELECT cbpe(p) FROM t"),
            ("auc(p, y)", "SELECT auc(p, y) FROM t"),
            1.0,
            runs,
        )
        .await;
    }
}

/// The multiclass issue's `ece_top_label` target: within 2× `avg` over the lists' flattened
/// values, on `rows` rows of 10 class probabilities ([`write_multiclass`]).
async fn multiclass(rows: usize, runs: Runs) {
    let path = multiclass_path(rows);
    if !path.exists() {
        eprintln!("writing {rows} rows of 10 classes to {}", path.display());
        write_multiclass(&path, rows).await;
    }
    let ctx = calibsql::new_context();
    ctx.register_parquet("t", path.to_str().unwrap(), ParquetReadOptions::default())
        .await
        .unwrap();
    report_pair(
        &ctx,
        (
            "multiclass ece_top_label",
            "SELECT ece_top_label(probs, label) FROM t",
        ),
        (
            "avg(unnest(probs))",
            "SELECT avg(v) FROM (SELECT unnest(probs) AS v FROM t)",
        ),
        2.0,
        runs,
    )
    .await;
}

/// The calibration report's query over the realistic file: one field and a day column (30
/// buckets of p's low digits, so every day has rows of every site).
const REPORT_SQL: &str = "SELECT p, y, site, CAST(floor(p * 1e9) AS BIGINT) % 30 AS day FROM t";

/// The calibration report (`calibsql::report`, page included) on the realistic file with one
/// field and a day column, against one `ece(p, y)` query (target: at most 10×), alternating
/// runs as in [`time_pair`]; then the peak memory of `calibsql report` on it (target: 1 GiB).
async fn report(rows: usize, runs: Runs) {
    let (ctx, path) = realistic_context(rows, false).await;
    let options = calibsql::report::ReportOptions {
        fields: vec!["site".to_string()],
        ..Default::default()
    };
    let run_report = || async {
        let started = Instant::now();
        let report = calibsql::report::compute(&ctx, REPORT_SQL, &options)
            .await
            .expect("the report");
        std::hint::black_box(report.html().expect("the page"));
        started.elapsed()
    };
    let run_ece = || async {
        let started = Instant::now();
        ctx.sql("SELECT ece(p, y) FROM t")
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        started.elapsed()
    };
    run_ece().await;
    run_report().await;
    let (mut ece, mut report) = (vec![], vec![]);
    let started = Instant::now();
    while runs.more(ece.len(), started.elapsed()) {
        ece.push(run_ece().await);
        report.push(run_report().await);
    }
    ece.sort();
    report.sort();
    let (e, r) = (ece[ece.len() / 2], report[report.len() / 2]);
    let ratio = r.as_secs_f64() / e.as_secs_f64();
    println!(
        "{:<32} {:>9.1} ms   {:<16} {:>9.1} ms   ratio {ratio:.2} (target <= 10: {})  [{} runs]",
        "realistic report",
        r.as_secs_f64() * 1e3,
        "ece(p, y)",
        e.as_secs_f64() * 1e3,
        if ratio <= 10.0 { "met" } else { "MISSED" },
        ece.len()
    );
    let out = tempfile::TempDir::new().unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_calibsql"))
        .env("CALIBSQL_PEAK_RSS", "1")
        .args([
            "report", "-q", "--field", "site", "-c", REPORT_SQL, "--table",
        ])
        .arg(format!("t={}", path.display()))
        .arg("-o")
        .arg(out.path().join("report.html"))
        .output()
        .expect("run calibsql report");
    let stderr = String::from_utf8_lossy(&output.stderr);
    let peak = stderr
        .lines()
        .find_map(|l| l.strip_prefix("calibsql: peak RSS "))
        .map(str::to_string)
        .unwrap_or_else(|| format!("? ({})", stderr.trim()));
    println!("peak RSS of calibsql report (target 1 GiB): {peak}");
}

/// Every calibsql aggregate (`F_state`/`F_merge` twins share `F`'s kernel and are left out)
/// on the realistic files, as `(name, call, target)`: the ratio to `avg` over the same columns
/// (`p`/`score`, `y`, and the field or propensity when the call reads one), in the same run.
/// The targets are the speed issue's. `{f2}` is a second field: `app` on the CTR-like file,
/// `site` again on the other (it has one field).
const EVERY_AGGREGATE: &[(&str, &str, f64)] = &[
    ("ace", "ace(p, y)", 4.0),
    // The speed issue asks `auc` to stay where it was (3.5 s when filed): no ratio target;
    // its own is the DuckDB pair (`duckdb_auc`).
    ("auc", "auc(p, y)", f64::NAN),
    ("brier", "brier(p, y)", 2.0),
    ("ece", "ece(p, y)", 2.0),
    ("ece quantile", "ece(p, y, 15, 'quantile')", 4.0),
    // The inference aggregates: no target yet (NaN), their ratios are reported. The bootstrap
    // draws 200 weights a row; the key is the file's only integer column (a cluster bootstrap
    // over sites, the same cost as a row id).
    ("ece_interval", "ece_interval(p, y, site)", f64::NAN),
    (
        "ece_diff_interval",
        "ece_diff_interval(p, propensity, y, site)",
        f64::NAN,
    ),
    ("auc_interval", "auc_interval(p, y)", f64::NAN),
    ("auc_test", "auc_test(p, propensity, y)", f64::NAN),
    ("ece_debiased", "ece_debiased(p, y)", 4.0),
    ("field_ece", "field_ece(p, y, site)", 2.0),
    ("field_rce", "field_rce(p, y, site)", 2.0),
    ("fit_bbq", "fit_bbq(p, y)", 4.0),
    ("fit_beta_calib", "fit_beta_calib(p, y)", 2.0),
    ("fit_confcalib", "fit_confcalib(p, y, site)", 4.0),
    ("fit_field_calib", "fit_field_calib(score, y, site)", 4.0),
    ("fit_gamma_calib", "fit_gamma_calib(score, y)", 2.0),
    ("fit_gaussian_calib", "fit_gaussian_calib(score, y)", 2.0),
    ("fit_histogram", "fit_histogram(score, y)", 4.0),
    ("fit_ilps", "fit_ilps(score, y)", 2.0),
    ("fit_isotonic", "fit_isotonic(score, y)", 4.0),
    ("fit_platt", "fit_platt(score, y)", 2.0),
    ("fit_temperature", "fit_temperature(score, y)", 2.0),
    ("ips_logloss", "ips_logloss(p, y, propensity)", 2.0),
    ("logloss", "logloss(p, y)", 2.0),
    ("mce", "mce(p, y)", 2.0),
    ("multi_field_rce", "multi_field_rce(p, y, site, {f2})", 2.0),
    ("mvce", "mvce(p, y, site)", 1.5),
    ("normalized_entropy", "normalized_entropy(p, y)", 2.0),
    ("reliability", "reliability(p, y)", 2.0),
    ("rmsce", "rmsce(p, y)", 2.0),
    ("smooth_ece", "smooth_ece(p, y)", 1.5),
    // The calibration tests: no target set yet (NaN), their ratios are reported.
    ("spiegelhalter", "spiegelhalter(p, y)", f64::NAN),
    ("calibration_slope", "calibration_slope(p, y)", f64::NAN),
    ("hosmer_lemeshow", "hosmer_lemeshow(p, y)", f64::NAN),
    (
        "calibration_decomposition",
        "calibration_decomposition(p, y)",
        f64::NAN,
    ),
    ("field_bias", "field_bias(p, y, site)", f64::NAN),
    // Label-free estimates: `cbpe`'s own target is against `auc` (`cbpe_pairs`).
    ("cbpe", "cbpe(p)", f64::NAN),
    // The multiclass functions on the binary files' two classes (`multiclass` times them on
    // ten).
    (
        "ece_top_label",
        "ece_top_label(make_array(1 - p, p), y)",
        f64::NAN,
    ),
    (
        "mce_top_label",
        "mce_top_label(make_array(1 - p, p), y)",
        f64::NAN,
    ),
    (
        "reliability_top_label",
        "reliability_top_label(make_array(1 - p, p), y)",
        f64::NAN,
    ),
    (
        "ece_classwise",
        "ece_classwise(make_array(1 - p, p), y)",
        f64::NAN,
    ),
    ("fit_ovr", "fit_ovr(make_array(-score, score), y)", f64::NAN),
];

/// The `avg` baseline of `call`: one `avg` per column it reads.
fn avg_baseline(call: &str) -> String {
    let columns = ["p", "score", "y", "site", "app", "propensity"];
    let args = &call[call.find('(').expect("a call") + 1..call.rfind(')').expect("a call")];
    // The columns named anywhere in the arguments (`make_array(1 - p, p)` reads `p`).
    let mut read: Vec<&str> = Vec::new();
    for word in args.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
        if columns.contains(&word) && !read.contains(&word) {
            read.push(word);
        }
    }
    let avgs: Vec<String> = read.iter().map(|c| format!("avg({c})")).collect();
    format!("SELECT {} FROM t", avgs.join(", "))
}

/// [`EVERY_AGGREGATE`] on the 50%-positive realistic file and on the CTR-like one
/// (`CALIBSQL_BENCH_ONLY=every` runs just these; `every ctr` one file). Fails when a
/// registered aggregate has no row, so a new function gets one.
async fn every_aggregate(rows: usize, runs: Runs, only: &Only) {
    let missing =
        support::aggregates_without_a_call(EVERY_AGGREGATE.iter().map(|&(_, call, _)| call));
    assert!(
        missing.is_empty(),
        "aggregates without a bench row: {missing:?}"
    );
    for (label, ctr, f2) in [("every 50%", false, "site"), ("every ctr", true, "app")] {
        if !EVERY_AGGREGATE
            .iter()
            .any(|(name, _, _)| only.wants(&format!("{label} {name}")))
        {
            continue;
        }
        let (ctx, path) = realistic_context(rows, ctr).await;
        println!(
            "{label}: every aggregate against avg over the columns it reads ({})",
            path.display()
        );
        for (name, call, target) in EVERY_AGGREGATE {
            let pair = format!("{label} {name}");
            if !only.wants(&pair) {
                continue;
            }
            let call = call.replace("{f2}", f2);
            let sql = format!("SELECT {call} FROM t");
            let base = avg_baseline(&call);
            report_pair(&ctx, (&pair, &sql), ("avg", &base), *target, runs).await;
        }
    }
}

/// The pairs of the speed issue on the realistic file, with their targets, and the peak
/// memory of the `auc` and `'quantile'` queries. `auc` is compared with the hand-written
/// rank-window AUC run by DataFusion and, when DuckDB is importable, by DuckDB (the issue's
/// baseline; see [`duckdb_auc`]).
async fn realistic(rows: usize, runs: Runs, only: &Only) {
    let (ctx, path) = realistic_context(rows, false).await;
    println!("realistic file (distinct float64 p/score/propensity, Int8 y, Zipf site):");
    let rank_auc =
        "SELECT (sum(CASE WHEN y = 1 THEN r END) - n1 * (n1 + 1) / 2.0) / (n1 * (cnt - n1)) FROM
        (SELECT y, rank() OVER (ORDER BY p) + (count(*) OVER (PARTITION BY p) - 1) / 2.0 AS r,
                sum(CAST(y AS DOUBLE)) OVER () AS n1, count(*) OVER () AS cnt FROM t)
        GROUP BY n1, cnt";
    let pairs: [(&str, &str, &str, &str, f64); 6] = [
        (
            "realistic ece(p, y)",
            "SELECT ece(p, y) FROM t",
            "avg(p), avg(y)",
            "SELECT avg(p), avg(y) FROM t",
            1.15,
        ),
        (
            "realistic site, ece GROUP BY",
            "SELECT site, ece(p, y) FROM t GROUP BY site",
            "site, avg, avg",
            "SELECT site, avg(p), avg(y) FROM t GROUP BY site",
            1.3,
        ),
        (
            "realistic logloss(p, y)",
            "SELECT logloss(p, y) FROM t",
            "avg(p), avg(y)",
            "SELECT avg(p), avg(y) FROM t",
            1.5,
        ),
        (
            "realistic fit_gaussian_calib",
            "SELECT fit_gaussian_calib(score, y, propensity) FROM t",
            "avg × 3 columns",
            "SELECT avg(score), avg(y), avg(propensity) FROM t",
            1.2,
        ),
        (
            "realistic auc(p, y)",
            "SELECT auc(p, y) FROM t",
            "rank-window AUC",
            rank_auc,
            f64::NAN,
        ),
        (
            "realistic ece quantile",
            "SELECT ece(p, y, 15, 'quantile') FROM t",
            "avg(p), avg(y)",
            "SELECT avg(p), avg(y) FROM t",
            4.0,
        ),
    ];
    for (name, sql, base_name, base_sql, target) in pairs {
        if only.wants(name) {
            report_pair(&ctx, (name, sql), (base_name, base_sql), target, runs).await;
        }
    }
    if only.wants("realistic auc(p, y)") {
        duckdb_auc(&ctx, &path, runs.min).await;
    }
    if only.wants("realistic calibrate") {
        calibrate_pairs(&ctx, &path, runs).await;
    }
    for (name, sql) in [
        ("auc(p, y)", "SELECT auc(p, y) FROM t"),
        // 1,001 distinct scores: counted per distinct score instead of kept as rows.
        ("auc(round(p, 3), y)", "SELECT auc(round(p, 3), y) FROM t"),
        (
            "ece(p, y, 15, 'quantile')",
            "SELECT ece(p, y, 15, 'quantile') FROM t",
        ),
        ("rank-window AUC", rank_auc),
    ] {
        if only.wants("realistic peak") || only.wants(name) {
            println!("peak RSS of {name}: {}", peak_rss(&path, &[], sql));
        }
    }
}

/// Applying a model the documented way (`CROSS JOIN` of a one-row table): a ConfCalib model
/// with one key per site (5,000) against a Platt model, and the peak memory of the ConfCalib
/// query with the model read from a Parquet file. The models are fitted once on the file.
async fn calibrate_pairs(
    ctx: &datafusion::prelude::SessionContext,
    path: &std::path::Path,
    runs: Runs,
) {
    let dir = path.parent().expect("the bench files' directory");
    let models = [
        ("cc_model", "fit_confcalib(p, y, site)"),
        ("platt_model", "fit_platt(p, y)"),
    ];
    let mut tables = Vec::new();
    for (name, fit) in models {
        let file = dir.join(format!(
            "{name}-{}.parquet",
            path.file_stem().unwrap().to_string_lossy()
        ));
        if !file.exists() {
            let sql = format!(
                "COPY (SELECT {fit} AS model FROM t) TO '{}' STORED AS PARQUET",
                file.display()
            );
            ctx.sql(&sql).await.unwrap().collect().await.unwrap();
        }
        ctx.register_parquet(name, file.to_str().unwrap(), ParquetReadOptions::default())
            .await
            .unwrap();
        tables.push(format!("{name}={}", file.display()));
    }
    let keys = ctx
        .sql("SELECT array_length(model['field_keys']) FROM cc_model")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let keys = datafusion::arrow::util::pretty::pretty_format_batches(&keys).unwrap();
    println!("ConfCalib model of the realistic file's sites:\n{keys}");
    let confcalib = "SELECT avg(calibrate(t.p, m.model, t.site)) FROM t CROSS JOIN cc_model m";
    report_pair(
        ctx,
        ("realistic calibrate confcalib", confcalib),
        (
            "calibrate platt",
            "SELECT avg(calibrate(t.p, m.model)) FROM t CROSS JOIN platt_model m",
        ),
        2.0,
        runs,
    )
    .await;
    println!(
        "peak RSS of calibrate(p, confcalib model, site): {}",
        peak_rss(path, &tables, confcalib)
    );
}

/// `auc(p, y)` against DuckDB's rank-window AUC on the same file (the baseline), run
/// by `benches/duckdb_auc.py` in a child process (its own time and peak memory) when DuckDB
/// can be imported by `CALIBSQL_BENCH_PYTHON` (default `python3`); otherwise says how to get it.
async fn duckdb_auc(
    ctx: &datafusion::prelude::SessionContext,
    path: &std::path::Path,
    runs: usize,
) {
    let python = std::env::var("CALIBSQL_BENCH_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/duckdb_auc.py");
    let output = std::process::Command::new(&python)
        .args([script, path.to_str().unwrap(), &runs.to_string()])
        .output();
    let line = match output {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).trim().to_string(),
        _ => {
            println!(
                "DuckDB rank-window AUC: not run ({python} cannot import duckdb; pip install duckdb, \
                 or set CALIBSQL_BENCH_PYTHON)"
            );
            return;
        }
    };
    let fields: Vec<&str> = line.split_whitespace().collect();
    let (Some(ms), Some(peak), Some(version)) = (
        fields.first().and_then(|x| x.parse::<f64>().ok()),
        fields.get(1),
        fields.get(3),
    ) else {
        println!("DuckDB rank-window AUC: unexpected output {line:?}");
        return;
    };
    let ours = median_ms(ctx, "SELECT auc(p, y) FROM t", runs).await;
    let ratio = ours / ms;
    let verdict = if ratio <= 0.35 { "met" } else { "MISSED" };
    println!(
        "realistic auc(p, y) {ours:10.1} ms   DuckDB {version} rank-window AUC {ms:8.1} ms (peak {peak} MiB)   \
         ratio {ratio:.2} (target <= 0.35: {verdict})"
    );
}

/// A 30-day report from stored daily states against the same metrics over the whole file:
/// the rows are split into 30 "days" (a hash of the row), each day's `ece_state` and
/// `field_rce_state` stored in Parquet once (not timed), then `ece_merge`/`field_rce_merge`
/// over the 30 stored states is timed against `ece`/`field_rce` over the 20M rows.
async fn rollup(ctx: &datafusion::prelude::SessionContext, data: &std::path::Path, runs: Runs) {
    let states = data.with_extension("daily-states.parquet");
    let store = format!(
        "COPY (SELECT CAST(floor(abs(score) * 1000) AS BIGINT) % 30 AS day,
                      ece_state(p, y) AS ece_s, field_rce_state(p, y, site) AS rce_s
               FROM t GROUP BY 1) TO '{}' STORED AS PARQUET",
        states.display()
    );
    let started = Instant::now();
    ctx.sql(&store).await.unwrap().collect().await.unwrap();
    let store_time = started.elapsed();
    ctx.register_parquet(
        "daily",
        states.to_str().unwrap(),
        ParquetReadOptions::default(),
    )
    .await
    .unwrap();
    let bytes = std::fs::metadata(&states).map(|m| m.len()).unwrap_or(0);
    println!(
        "30 daily states: {} KiB of Parquet, written once in {:.1} s",
        bytes / 1024,
        store_time.as_secs_f64()
    );
    for (name, scan, merge) in [
        (
            "ece",
            "SELECT ece(p, y) FROM t",
            "SELECT ece_merge(ece_s) FROM daily",
        ),
        (
            "field_rce(site)",
            "SELECT field_rce(p, y, site) FROM t",
            "SELECT field_rce_merge(rce_s) FROM daily",
        ),
    ] {
        let timed = time_pair(ctx, scan, merge, runs).await;
        let (base, ours) = (timed.median_a, timed.median_b);
        println!(
            "30-day rollup of {name:<16} from states {:>9.1} ms   over the rows {:>9.1} ms   \
             scan / rollup {:.0}x",
            ours.as_secs_f64() * 1e3,
            base.as_secs_f64() * 1e3,
            base.as_secs_f64() / ours.as_secs_f64()
        );
    }
}
