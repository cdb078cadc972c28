//! What the benches share (`#[path]`-included): the bench files, written once under the target
//! directory and reused, and how queries are timed.
#![allow(dead_code)] // each including bench uses part of it

use std::path::PathBuf;
use std::time::Instant;

/// The end-to-end bench file of `rows` rows (see [`write_data`]).
pub fn data_path(rows: usize) -> PathBuf {
    bench_file(&format!("events-v3-{rows}.parquet"))
}

/// `name` in the bench files' directory under the target directory.
fn bench_file(name: &str) -> PathBuf {
    let target = std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into());
    PathBuf::from(target).join("calibsql-bench").join(name)
}

/// Runs `COPY (query) TO …` (`sql`), creating the file's directory first.
async fn write_file(path: &std::path::Path, sql: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let ctx = calibsql::new_context();
    ctx.sql(sql).await.unwrap().collect().await.unwrap();
}

pub async fn write_data(path: &std::path::Path, rows: usize) {
    // p: a hashed uniform probability; y = Bernoulli(p)·Bernoulli(propensity), a click that
    // is missing not at random as in the papers (so the IPS objective is bounded); site: ~5,000
    // values with a Zipf-like skew (the square of a uniform); score: a noisy logit of p
    // (20M distinct values, so fits run on their bounded grid state).
    let sql = format!(
        "COPY (SELECT
            p, CASE WHEN u < p AND e < 0.1 + 0.9 * s THEN 1 ELSE 0 END AS y,
            CAST(floor(s * s * 5000) AS BIGINT) AS site,
            0.1 + 0.9 * s AS propensity,
            ln(p + 1e-9) - ln(1 - p + 1e-9) + 0.5 * u AS score
          FROM (SELECT
              ((v * 2654435761) % 1000003) / 1000003.0 AS p,
              ((v * 40503) % 999983) / 999983.0 AS u,
              ((v * 69069) % 1000033) / 1000033.0 AS s,
              ((v * 7919) % 999979) / 999979.0 AS e
            FROM (SELECT value AS v FROM generate_series(1, {rows}))))
         TO '{}' STORED AS PARQUET",
        path.display()
    );
    write_file(path, &sql).await;
}

/// The realistic file of the speed issue: every `p`, `score` and `propensity` a distinct
/// float64 (so Parquet cannot dictionary-encode them), `y` Int8, `site` Zipf-skewed Int64,
/// 1M-row row groups, Snappy.
pub fn realistic_path(rows: usize) -> PathBuf {
    bench_file(&format!("realistic-v1-{rows}.parquet"))
}

pub async fn write_realistic(path: &std::path::Path, rows: usize) {
    write_realistic_file(path, rows, "", false).await;
}

/// The realistic files' rows: `p` scaled by `p_scale` (a SQL factor such as `0.2 * `, or
/// nothing), and with `app` a second Zipf-skewed field of 50 values.
async fn write_realistic_file(path: &std::path::Path, rows: usize, p_scale: &str, app: bool) {
    let (app_column, app_draw) = if app {
        (
            "CAST(floor(a * a * 50) AS BIGINT) AS app,\n            ",
            "((v * 48271) % 999961) / 999961.0 AS a,\n              ",
        )
    } else {
        ("", "")
    };
    // Multiplicative hashes modulo primes above 2^32: distinct for every row number below them.
    let sql = format!(
        "COPY (SELECT p, CAST(CASE WHEN u < p THEN 1 ELSE 0 END AS TINYINT) AS y,
            CAST(floor(s * s * s * 5000) AS BIGINT) AS site,
            {app_column}0.1 + 0.9 * e AS propensity,
            ln(p) - ln(1 - p) + 0.5 * u AS score
          FROM (SELECT
              {p_scale}(((v * 2654435761) % 4294967311) + 0.5) / 4294967312.0 AS p,
              ((v * 40503) % 999983) / 999983.0 AS u,
              ((v * 69069) % 1000033) / 1000033.0 AS s,
              {app_draw}(((v * 2246822519) % 4294967291) + 0.5) / 4294967292.0 AS e
            FROM (SELECT value AS v FROM generate_series(1, {rows}))))
         TO '{}' STORED AS PARQUET
         OPTIONS ('format.max_row_group_size' '1048576', 'format.compression' 'snappy')",
        path.display()
    );
    write_file(path, &sql).await;
}

/// The CTR-like realistic file: as [`write_realistic`], but `p` in (0, 0.2) (a 10% positive
/// rate, as a click log has), `score` its logit plus noise, and a second field `app` (50
/// Zipf-skewed values) for the multi-field metrics.
pub fn realistic_ctr_path(rows: usize) -> PathBuf {
    bench_file(&format!("realistic-ctr-v1-{rows}.parquet"))
}

pub async fn write_realistic_ctr(path: &std::path::Path, rows: usize) {
    write_realistic_file(path, rows, "0.2 * ", true).await;
}

/// The multiclass bench file: `probs`, a list of 10 class probabilities (hashed values,
/// normalised to sum to 1), and `label`, a class index.
pub fn multiclass_path(rows: usize) -> PathBuf {
    bench_file(&format!("multiclass-v1-{rows}.parquet"))
}

pub async fn write_multiclass(path: &std::path::Path, rows: usize) {
    const CLASSES: usize = 10;
    // Class k's unnormalised value: a multiplicative hash of the row number modulo a prime
    // (one multiplier a class), in (0.01, 1.01).
    let multipliers = [
        2654435761u64,
        40503,
        69069,
        7919,
        2246822519,
        48271,
        16807,
        1103515245,
        22695477,
        134775813,
    ];
    let values: Vec<String> = multipliers
        .iter()
        .map(|m| format!("0.01 + ((v * {m}) % 999983) / 999983.0"))
        .collect();
    let normalised: Vec<String> = (0..CLASSES).map(|k| format!("h{k} / s")).collect();
    let named: Vec<String> = values
        .iter()
        .enumerate()
        .map(|(k, v)| format!("{v} AS h{k}"))
        .collect();
    let sum: Vec<String> = (0..CLASSES).map(|k| format!("h{k}")).collect();
    let sql = format!(
        "COPY (SELECT make_array({}) AS probs, label
          FROM (SELECT *, {} AS s FROM (SELECT {}, CAST((v * 7919) % {CLASSES} AS BIGINT) AS label
            FROM (SELECT value AS v FROM generate_series(1, {rows})))))
         TO '{}' STORED AS PARQUET",
        normalised.join(", "),
        sum.join(" + "),
        named.join(", "),
        path.display()
    );
    write_file(path, &sql).await;
}

/// The number in the environment variable `name`, or `default`.
pub fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// Median wall time of `sql` over `runs` runs (at least one), in milliseconds, after one
/// warm-up run.
pub async fn median_ms(ctx: &datafusion::prelude::SessionContext, sql: &str, runs: usize) -> f64 {
    let runs = runs.max(1);
    let mut times = vec![];
    for run in 0..=runs {
        let start = Instant::now();
        calibsql::sql(ctx, sql)
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        if run > 0 {
            times.push(start.elapsed().as_secs_f64() * 1e3);
        }
    }
    times.sort_by(f64::total_cmp);
    times[runs / 2]
}
