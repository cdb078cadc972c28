//! Memory limits hold for the aggregates that keep rows (`auc`, `'quantile'` bins): under
//! `--memory-limit` a query whose state needs more fails with DataFusion's "Resources
//! exhausted" error instead of growing, and the process's peak resident memory stays within
//! the documented bound: the same process's peak for a query that keeps nothing, plus 3 times
//! the limit without GROUP BY and 8 times with it (partial states are copied into Arrow
//! arrays when they move between partitions; docs/SEMANTICS.md#metrics-that-keep-rows). Real processes: the
//! `calibsql` binary, its peak read from its own /proc/self/status (`CALIBSQL_PEAK_RSS=1`).

use std::path::Path;

use assert_cmd::Command;

fn calibsql(dir: &Path) -> Command {
    let mut command = assert_cmd::cargo::cargo_bin_cmd!("calibsql");
    command.current_dir(dir).env("HOME", dir);
    command
}

/// Runs `sql` over `t` under `limit`; returns (success, stderr, peak RSS in MiB).
fn run(dir: &Path, limit: &str, sql: &str) -> (bool, String, u64) {
    let output = calibsql(dir)
        .env("CALIBSQL_PEAK_RSS", "1")
        .args([
            "--memory-limit",
            limit,
            "--table",
            "t=rows.parquet",
            "-c",
            sql,
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).to_string();
    let peak = stderr
        .lines()
        .find_map(|l| l.strip_prefix("calibsql: peak RSS "))
        .and_then(|s| s.trim_end_matches(" MiB").parse().ok())
        .unwrap_or_else(|| panic!("no peak RSS line in {stderr}"));
    (output.status.success(), stderr, peak)
}

#[test]
fn row_keeping_aggregates_respect_the_memory_limit() {
    let dir = tempfile::tempdir().unwrap();
    // 2M distinct probabilities: 16 MB of scores kept by auc, more than the 8 MB limit.
    calibsql(dir.path())
        .args([
            "-c",
            "COPY (SELECT (((value * 2654435761) % 4294967311) + 0.5) / 4294967312.0 AS p,
                          CAST(value % 3 = 0 AS INT) AS y, value % 100 AS site
                   FROM generate_series(1, 2000000)) TO 'rows.parquet'",
        ])
        .assert()
        .success();
    let (ok, _, baseline) = run(dir.path(), "8M", "SELECT avg(p), avg(y) FROM t");
    assert!(ok);
    for (sql, multiple) in [
        ("SELECT auc(p, y) FROM t", 3),
        ("SELECT ece(p, y, 15, 'quantile') FROM t", 3),
        ("SELECT site, auc(p, y) FROM t GROUP BY site", 8),
    ] {
        let (ok, stderr, peak) = run(dir.path(), "8M", sql);
        assert!(
            !ok && stderr.contains("Resources exhausted")
                && stderr.contains("hint: raise --memory-limit"),
            "{sql}: expected a Resources exhausted error, got: {stderr}"
        );
        assert!(
            peak <= baseline + multiple * 8,
            "{sql}: peak RSS {peak} MiB, more than {baseline} MiB (a query keeping nothing) + {multiple} × 8 MiB"
        );
    }
    // With room enough, the same query runs.
    let (ok, stderr, _) = run(dir.path(), "200M", "SELECT auc(p, y) FROM t");
    assert!(ok, "{stderr}");
}
