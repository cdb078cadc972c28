//! Delta Lake tables against the Parquet files behind them, measured in one run:
//!
//! 1. `ece(p, y)` over an 8M-row Delta table (10 partitions) and over the same rows as a
//!    Parquet directory: times and their ratio;
//! 2. a query filtered on the partition column: bytes scanned against the whole table's;
//! 3. `INSERT INTO` a Delta table of 20M rows against `COPY … TO` Parquet of the same rows:
//!    times and their ratio.
//!
//! `cargo bench --bench delta` (release). Without `--bench` (e.g. under `cargo test
//! --benches`) it does nothing.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use datafusion::arrow::util::pretty::pretty_format_batches;
use datafusion::prelude::SessionContext;

const ROWS: u64 = 8_000_000;
const WRITE_ROWS: u64 = 20_000_000;
const RUNS: usize = 3;

/// Rows of (site BIGINT, p DOUBLE, y BIGINT) from `range`, deterministic.
fn rows(n: u64) -> String {
    format!(
        "SELECT value % 10 AS site, \
                CAST((value * 7919) % 1000 AS DOUBLE) / 1000.0 + 0.0005 AS p, \
                CAST((value * 104729) % 997 < (value * 7919) % 1000 AS BIGINT) AS y \
         FROM range(0, {n})"
    )
}

async fn run(ctx: &SessionContext, sql: &str) -> String {
    let frame = calibsql::sql(ctx, sql).await.unwrap();
    pretty_format_batches(&frame.collect().await.unwrap())
        .unwrap()
        .to_string()
}

/// The best of [`RUNS`] runs of `sql`.
async fn best(ctx: &SessionContext, sql: &str) -> Duration {
    let mut best = Duration::MAX;
    for _ in 0..RUNS {
        let started = Instant::now();
        run(ctx, sql).await;
        best = best.min(started.elapsed());
    }
    best
}

/// The sum of the `bytes_scanned` metrics in `EXPLAIN ANALYZE` of `sql`.
async fn bytes_scanned(ctx: &SessionContext, sql: &str) -> f64 {
    let plan = run(ctx, &format!("EXPLAIN ANALYZE {sql}")).await;
    let mut total = 0.0;
    for part in plan.split("bytes_scanned=").skip(1) {
        let number: String = part
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .collect();
        let unit = part[number.len()..].trim_start().chars().next();
        let scale = match unit {
            Some('K') => 1e3,
            Some('M') => 1e6,
            Some('G') => 1e9,
            _ => 1.0,
        };
        total += number.parse::<f64>().unwrap_or(0.0) * scale;
    }
    total
}

fn main() {
    if !std::env::args().any(|arg| arg == "--bench") {
        println!("delta bench: skipped (run with cargo bench --bench delta)");
        return;
    }
    let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("delta-bench");
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&base).unwrap();
    let (parquet, delta) = (base.join("parquet"), base.join("delta"));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let ctx = calibsql::new_context();
        run(
            &ctx,
            &format!(
                "COPY ({}) TO '{}' STORED AS PARQUET PARTITIONED BY (site)",
                rows(ROWS),
                parquet.display()
            ),
        )
        .await;
        run(
            &ctx,
            &format!(
                "COPY ({}) TO '{}' STORED AS DELTA PARTITIONED BY (site)",
                rows(ROWS),
                delta.display()
            ),
        )
        .await;

        // 1. The same query over the Delta table and over Parquet files.
        let on_delta = calibsql::new_context();
        calibsql::tables::register_table(&on_delta, "t", &delta.display().to_string(), None)
            .await
            .unwrap();
        let on_parquet = calibsql::new_context();
        calibsql::tables::register_table(&on_parquet, "t", &parquet.display().to_string(), None)
            .await
            .unwrap();
        let query = "SELECT ece(p, y) AS ece FROM t";
        let (d, p) = (best(&on_delta, query).await, best(&on_parquet, query).await);
        println!(
            "ece over {ROWS} rows: delta {:.3} s, parquet {:.3} s, ratio {:.2}",
            d.as_secs_f64(),
            p.as_secs_f64(),
            d.as_secs_f64() / p.as_secs_f64()
        );

        // 2. A partition filter reads one partition's bytes.
        let all = bytes_scanned(&on_delta, "SELECT sum(p) FROM t").await;
        let one = bytes_scanned(&on_delta, "SELECT sum(p) FROM t WHERE site = 3").await;
        println!(
            "bytes scanned: whole table {:.1} MB, WHERE site = 3 {:.1} MB ({:.1}%)",
            all / 1e6,
            one / 1e6,
            100.0 * one / all
        );

        // 3. Writing 20M rows: one Delta commit against Parquet files.
        let writes = calibsql::new_context();
        let target = base.join("written");
        run(
            &writes,
            &format!(
                "CREATE EXTERNAL TABLE w (site BIGINT, p DOUBLE, y BIGINT) STORED AS DELTA \
                 LOCATION '{}'",
                target.display()
            ),
        )
        .await;
        let started = Instant::now();
        run(&writes, &format!("INSERT INTO w {}", rows(WRITE_ROWS))).await;
        let insert = started.elapsed();
        let started = Instant::now();
        run(
            &writes,
            &format!(
                "COPY ({}) TO '{}' STORED AS PARQUET",
                rows(WRITE_ROWS),
                base.join("written.parquet").display()
            ),
        )
        .await;
        let copy = started.elapsed();
        println!(
            "write {WRITE_ROWS} rows: INSERT INTO delta {:.3} s, COPY TO parquet {:.3} s, ratio {:.2}",
            insert.as_secs_f64(),
            copy.as_secs_f64(),
            insert.as_secs_f64() / copy.as_secs_f64()
        );
    });
    let _ = std::fs::remove_dir_all(&base);
}
