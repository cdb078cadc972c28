//! What running on an Apache Ballista cluster costs on one machine: the end-to-end bench's
//! 20M-row file, a scheduler and 2 executors in this process on 127.0.0.1 (one task slot
//! each, so the 2 cores are used as locally), against a local session, for `ece`, `field_rce
//! … GROUP BY site` and a fit. Prints median times and the ratio cluster / local. There is no
//! target: on one 2-core machine the cluster can only add work (planning on the scheduler,
//! task dispatch, shuffle files and Arrow Flight transfers); the point is that it works and
//! what it adds.
//!
//! `cargo bench --features distributed --bench distributed` (rows: `CALIBSQL_BENCH_ROWS`,
//! default 20,000,000; runs: `CALIBSQL_BENCH_RUNS`, default 5).

use calibsql::distributed::{remote_context, LocalCluster};
use calibsql::ContextOptions;

#[path = "support/data.rs"]
mod data;

const QUERIES: &[(&str, &str)] = &[
    ("ece(p, y)", "SELECT ece(p, y) FROM t"),
    (
        "site, field_rce GROUP BY site",
        "SELECT site, field_rce(p, y, site) FROM t GROUP BY site",
    ),
    (
        "fit_gaussian_calib(score, y, propensity)",
        "SELECT fit_gaussian_calib(score, y, propensity) FROM t",
    ),
];

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` passes nothing useful: skip there.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let rows = data::env_number("CALIBSQL_BENCH_ROWS", 20_000_000);
    let runs = data::env_number("CALIBSQL_BENCH_RUNS", 5);
    let path = data::data_path(rows);
    if !path.exists() {
        eprintln!("writing {rows} rows to {}", path.display());
        data::write_data(&path, rows).await;
    }
    let location = path.display().to_string();

    let local = calibsql::new_context();
    calibsql::tables::register_table(&local, "t", &location, None)
        .await
        .unwrap();
    let cluster = LocalCluster::start(2, 1).await.unwrap();
    let remote = remote_context(&cluster.url(), &ContextOptions::default())
        .await
        .unwrap();
    calibsql::tables::register_table(&remote, "t", &location, None)
        .await
        .unwrap();

    println!(
        "{rows} rows, {runs} runs each; cluster: 1 scheduler + 2 executors (1 task slot each) \
         on 127.0.0.1"
    );
    for (name, sql) in QUERIES {
        let local_ms = data::median_ms(&local, sql, runs).await;
        let cluster_ms = data::median_ms(&remote, sql, runs).await;
        println!(
            "{name:<42} local {local_ms:9.1} ms   cluster {cluster_ms:9.1} ms   ratio {:.2}",
            cluster_ms / local_ms
        );
    }
}
