//! The `calibsql` binary, driven as a user would: stdout, stderr and exit code.
//!
//! Fixtures (Parquet, CSV, NDJSON) are written by DataFusion into a fresh temporary directory
//! per test; every command runs with that directory as its working directory and `HOME`.
//! One module per area; the helpers below are shared by all of them. `doc_commands` runs every
//! command of the README and of `docs/` in a scratch directory of its own.

use std::io::Read;
use std::path::Path;
use std::process::Stdio;

use assert_cmd::Command;
use datafusion::prelude::SessionContext;
use predicates::prelude::*;
use tempfile::TempDir;

#[path = "../support/command.rs"]
mod command;
use command::calibsql;

#[path = "../support/child.rs"]
mod child;

/// Runs SQL statements with DataFusion itself, to write fixtures.
fn write_with_datafusion(dir: &Path, statements: &[&str]) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let ctx = SessionContext::new();
        for statement in statements {
            let sql = statement.replace("{dir}", &dir.display().to_string());
            ctx.sql(&sql).await.unwrap().collect().await.unwrap();
        }
    });
}

/// A directory with:
/// - `preds.parquet`: (p, y, field) with 4 rows
/// - `logs/2026-01/part-0.parquet`, `logs/2026-02/part-0.parquet`, `logs/2025-12/part-0.parquet`:
///   one row each (v = 1, 2, 3)
/// - `hive/day=1/part-0.parquet`, `hive/day=2/part-0.parquet`: (v) = 10, 20
/// - `clicks.csv`, `events.ndjson`
fn fixtures() -> TempDir {
    let dir = TempDir::new().unwrap();
    for sub in [
        "logs/2026-01",
        "logs/2026-02",
        "logs/2025-12",
        "hive/day=1",
        "hive/day=2",
    ] {
        std::fs::create_dir_all(dir.path().join(sub)).unwrap();
    }
    write_with_datafusion(
        dir.path(),
        &[
            "COPY (SELECT * FROM (VALUES (0.1, 0, 'a'), (0.4, 0, 'a'), (0.6, 1, 'b'), (0.9, 1, 'b')) \
             AS t(p, y, field)) TO '{dir}/preds.parquet'",
            "COPY (SELECT 1 AS v) TO '{dir}/logs/2026-01/part-0.parquet'",
            "COPY (SELECT 2 AS v) TO '{dir}/logs/2026-02/part-0.parquet'",
            "COPY (SELECT 3 AS v) TO '{dir}/logs/2025-12/part-0.parquet'",
            "COPY (SELECT 10 AS v) TO '{dir}/hive/day=1/part-0.parquet'",
            "COPY (SELECT 20 AS v) TO '{dir}/hive/day=2/part-0.parquet'",
        ],
    );
    std::fs::write(dir.path().join("clicks.csv"), "user,clicks\nann,3\nbob,5\n").unwrap();
    std::fs::write(
        dir.path().join("events.ndjson"),
        "{\"id\":1,\"kind\":\"view\"}\n{\"id\":2,\"kind\":\"click\"}\n",
    )
    .unwrap();
    dir
}

/// Exit code `code` and exactly one `Error:` line on stderr containing `needle`.
fn assert_fails_with(command: &mut Command, code: i32, needle: &str) {
    let output = command.output().unwrap();
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(output.status.code(), Some(code), "stderr: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "stderr: {stderr}");
    assert!(stderr.starts_with("Error: "), "stderr: {stderr}");
    assert!(stderr.contains(needle), "expected {needle:?} in: {stderr}");
}

mod doc_commands;
mod errors;
mod functions;
mod hardening;
mod output;
mod report;
mod statements;
mod tables;
mod tools;
