//! The `calibsql` binary, driven as a user would: stdout, stderr and exit code.
//!
//! Fixtures (Parquet, CSV, NDJSON) are written by DataFusion into a fresh temporary directory
//! per test; every command runs with that directory as its working directory and `HOME`.

use std::io::Read;
use std::path::Path;
use std::process::Stdio;

use assert_cmd::Command;
use datafusion::prelude::SessionContext;
use predicates::prelude::*;
use tempfile::TempDir;

/// The binary, run in `dir` with a private `HOME`.
fn calibsql(dir: &Path) -> Command {
    let mut command = assert_cmd::cargo::cargo_bin_cmd!("calibsql");
    command.current_dir(dir).env("HOME", dir);
    command
}

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

// ---------------------------------------------------------------- statements

#[test]
fn command_runs_several_statements() {
    let dir = TempDir::new().unwrap();
    calibsql(dir.path())
        .args(["-c", "SELECT 1 AS a; SELECT 'x' AS b, 2.5 AS c;"])
        .assert()
        .success()
        .stdout("a\n1\nb,c\nx,2.5\n")
        .stderr("");
}

#[test]
fn repeated_commands_share_one_session() {
    let dir = TempDir::new().unwrap();
    calibsql(dir.path())
        .args(["-c", "CREATE TABLE t AS VALUES (1), (2)"])
        .args(["-c", "SELECT sum(column1) AS s FROM t"])
        .assert()
        .success()
        .stdout("s\n3\n");
}

#[test]
fn file_statements_split_outside_strings_and_comments() {
    let dir = TempDir::new().unwrap();
    let script = dir.path().join("q.sql");
    std::fs::write(
        &script,
        "-- a comment; with a semicolon\nSELECT 'a;b' AS x;\n/* ; */ SELECT\n  2 AS y\n;\n",
    )
    .unwrap();
    calibsql(dir.path())
        .args(["-f", "q.sql"])
        .assert()
        .success()
        .stdout("x\na;b\ny\n2\n");
}

#[test]
fn commands_and_files_run_in_command_line_order() {
    let dir = TempDir::new().unwrap();
    std::fs::write(dir.path().join("insert.sql"), "INSERT INTO t VALUES (2);").unwrap();
    calibsql(dir.path())
        .args(["-c", "CREATE TABLE t (v INT)", "-f", "insert.sql"])
        .args([
            "-c",
            "SELECT v FROM t",
            "-f",
            "insert.sql",
            "-c",
            "SELECT count(*) AS n FROM t",
        ])
        .assert()
        .success()
        .stdout("v\n2\nn\n2\n");
}

#[test]
fn standard_input_is_a_script_when_not_a_terminal() {
    let dir = TempDir::new().unwrap();
    calibsql(dir.path())
        .write_stdin("SELECT 1 AS a;\nSELECT 2 AS b;\n")
        .assert()
        .success()
        .stdout("a\n1\nb\n2\n");
    calibsql(dir.path())
        .args(["-c", "SELECT 0 AS z", "-f", "-"])
        .write_stdin("SELECT 1 AS a")
        .assert()
        .success()
        .stdout("z\n0\na\n1\n");
}

#[test]
fn ddl_and_writes_print_nothing_in_csv() {
    let dir = TempDir::new().unwrap();
    calibsql(dir.path())
        .args([
            "-c",
            "CREATE TABLE t (v INT); INSERT INTO t VALUES (1); CREATE VIEW w AS SELECT * FROM t; \
             SET datafusion.execution.batch_size = 100; DROP VIEW w; DROP TABLE t",
        ])
        .assert()
        .success()
        .stdout("")
        .stderr("");
}

#[test]
fn empty_result_prints_the_header() {
    let dir = TempDir::new().unwrap();
    calibsql(dir.path())
        .args(["-c", "SELECT 1 AS a, 2 AS b WHERE false"])
        .assert()
        .success()
        .stdout("a,b\n");
}

// ---------------------------------------------------------------- formats and output

#[test]
fn csv_format_is_exact() {
    let dir = TempDir::new().unwrap();
    calibsql(dir.path())
        .args(["--format", "csv", "-c"])
        .arg("SELECT * FROM (VALUES (1, 'x,y'), (2, NULL)) t(a, b) ORDER BY a")
        .assert()
        .success()
        .stdout("a,b\n1,\"x,y\"\n2,\n")
        .stderr("");
}

#[test]
fn json_format_is_one_array_per_query() {
    let dir = TempDir::new().unwrap();
    calibsql(dir.path())
        .args(["--format", "json", "-c"])
        .arg("SELECT * FROM (VALUES (1, 'x'), (2, NULL)) t(a, b) ORDER BY a; SELECT 1 AS c WHERE false")
        .assert()
        .success()
        .stdout("[{\"a\":1,\"b\":\"x\"},{\"a\":2,\"b\":null}]\n[]\n")
        .stderr("");
}

#[test]
fn ndjson_format_is_one_object_per_line() {
    let dir = TempDir::new().unwrap();
    calibsql(dir.path())
        .args(["--format", "ndjson", "-c"])
        .arg("SELECT * FROM (VALUES (1, 'x'), (2, NULL)) t(a, b) ORDER BY a")
        .assert()
        .success()
        .stdout("{\"a\":1,\"b\":\"x\"}\n{\"a\":2,\"b\":null}\n")
        .stderr("");
}

#[test]
fn table_format_draws_a_table_and_counts_rows_on_stderr() {
    let dir = TempDir::new().unwrap();
    calibsql(dir.path())
        .args(["--format", "table", "-c", "SELECT 1 AS a, NULL AS b"])
        .assert()
        .success()
        .stdout("+---+------+\n| a | b    |\n+---+------+\n| 1 | NULL |\n+---+------+\n")
        .stderr(predicate::str::is_match(r"^1 row in \d+\.\d+ s\n$").unwrap());
    // --quiet drops the count; --max-rows cuts the table.
    calibsql(dir.path())
        .args(["--format", "table", "-q", "--max-rows", "2"])
        .args(["-c", "SELECT value FROM generate_series(1, 5)"])
        .assert()
        .success()
        .stdout(predicate::str::contains("| 2     |").and(predicate::str::contains("| 3 ").not()))
        .stderr("");
}

#[test]
fn output_file_takes_the_results() {
    let dir = TempDir::new().unwrap();
    calibsql(dir.path())
        .args(["-o", "out.csv", "-c", "SELECT 1 AS a"])
        .assert()
        .success()
        .stdout("")
        .stderr("");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("out.csv")).unwrap(),
        "a\n1\n"
    );
    // Without --format, the extension picks the format.
    calibsql(dir.path())
        .args(["-o", "out.ndjson", "-c", "SELECT 1 AS a"])
        .assert()
        .success()
        .stdout("");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("out.ndjson")).unwrap(),
        "{\"a\":1}\n"
    );
    assert_fails_with(
        calibsql(dir.path()).args(["-o", "no/such/dir/out.csv", "-c", "SELECT 1"]),
        1,
        "cannot create no/such/dir/out.csv",
    );
}

// ---------------------------------------------------------------- tables

#[test]
fn table_from_a_parquet_file() {
    let dir = fixtures();
    calibsql(dir.path())
        .args(["--table", "preds=preds.parquet"])
        .args([
            "-c",
            "SELECT field, count(*) AS n, sum(y) AS y FROM preds GROUP BY field ORDER BY field",
        ])
        .assert()
        .success()
        .stdout("field,n,y\na,2,0\nb,2,2\n");
}

#[test]
fn table_from_a_directory_with_hive_partitions() {
    let dir = fixtures();
    calibsql(dir.path())
        .args(["-t", "h=hive", "-c", "SELECT day, v FROM h ORDER BY v"])
        .assert()
        .success()
        .stdout("day,v\n1,10\n2,20\n");
    // The same through SQL.
    calibsql(dir.path())
        .args([
            "-c",
            "CREATE EXTERNAL TABLE h STORED AS PARQUET LOCATION 'hive/'; SELECT sum(v) AS s FROM h",
        ])
        .assert()
        .success()
        .stdout("s\n30\n");
}

#[test]
fn table_from_a_glob_over_directories() {
    let dir = fixtures();
    calibsql(dir.path())
        .args([
            "-t",
            "l=logs/2026-*/part-*.parquet",
            "-c",
            "SELECT v FROM l ORDER BY v",
        ])
        .assert()
        .success()
        .stdout("v\n1\n2\n");
    calibsql(dir.path())
        .args([
            "-t",
            "l=logs/*/*.parquet",
            "-c",
            "SELECT count(*) AS n FROM l",
        ])
        .assert()
        .success()
        .stdout("n\n3\n");
}

#[test]
fn tables_from_csv_and_ndjson() {
    let dir = fixtures();
    calibsql(dir.path())
        .args(["-t", "c=clicks.csv", "-t", "e=events.ndjson"])
        .args([
            "-c",
            "SELECT sum(clicks) AS s FROM c; SELECT kind FROM e ORDER BY id",
        ])
        .assert()
        .success()
        .stdout("s\n8\nkind\nview\nclick\n");
}

#[test]
fn table_format_overrides_the_extension() {
    let dir = fixtures();
    std::fs::copy(dir.path().join("clicks.csv"), dir.path().join("clicks.txt")).unwrap();
    calibsql(dir.path())
        .args([
            "-t",
            "c=clicks.txt",
            "--table-format",
            "csv",
            "-c",
            "SELECT count(*) AS n FROM c",
        ])
        .assert()
        .success()
        .stdout("n\n2\n");
    assert_fails_with(
        calibsql(dir.path()).args(["-t", "c=clicks.txt", "-c", "SELECT 1"]),
        1,
        "--table-format",
    );
}

#[test]
fn create_external_table_and_copy_round_trip() {
    let dir = TempDir::new().unwrap();
    calibsql(dir.path())
        .args([
            "-c",
            "COPY (SELECT * FROM (VALUES (0.2, 0), (0.8, 1)) t(p, y)) TO 'out.parquet'",
        ])
        .assert()
        .success()
        .stdout("");
    assert!(dir.path().join("out.parquet").is_file());
    calibsql(dir.path())
        .args([
            "-c",
            "CREATE EXTERNAL TABLE o STORED AS PARQUET LOCATION 'out.parquet'",
        ])
        .args(["-c", "SELECT p, y FROM o ORDER BY p"])
        .assert()
        .success()
        .stdout("p,y\n0.2,0\n0.8,1\n");
    calibsql(dir.path())
        .args(["-t", "o=out.parquet", "-c", "SELECT count(*) AS n FROM o"])
        .assert()
        .success()
        .stdout("n\n2\n");
}

// ---------------------------------------------------------------- calibsql functions

#[test]
fn calibration_functions_are_built_in() {
    let dir = TempDir::new().unwrap();
    // |0 − 0.2| and |1 − 0.8| in two bins of one row each: (0.2 + 0.2) / 2 = 0.2
    // (rounded: 1 − 0.8 is 0.19999999999999996 in binary floating point).
    calibsql(dir.path())
        .args([
            "-c",
            "SELECT round(ece(p, y), 12) AS e FROM (VALUES (0.2, 0), (0.8, 1)) t(p, y)",
        ])
        .assert()
        .success()
        .stdout("e\n0.2\n");
    calibsql(dir.path())
        .args(["-c", "SELECT sigmoid(0) AS s"])
        .assert()
        .success()
        .stdout("s\n0.5\n");
}

// ---------------------------------------------------------------- errors and exit codes

#[test]
fn bad_sql_fails_with_one_error_line() {
    let dir = TempDir::new().unwrap();
    let mut command = calibsql(dir.path());
    command.args(["-c", "SELEC 1"]);
    assert_fails_with(&mut command, 1, "SQL error");
    command.assert().stdout("");
}

#[test]
fn missing_table_fails() {
    let dir = TempDir::new().unwrap();
    assert_fails_with(
        calibsql(dir.path()).args(["-c", "SELECT * FROM nope"]),
        1,
        "table 'datafusion.public.nope' not found",
    );
}

#[test]
fn first_failing_statement_stops_the_run() {
    let dir = TempDir::new().unwrap();
    let mut command = calibsql(dir.path());
    command.args([
        "-c",
        "SELECT 1 AS a; SELECT * FROM nope; SELECT 3 AS c",
        "-c",
        "SELECT 4 AS d",
    ]);
    assert_fails_with(&mut command, 1, "nope");
    command.assert().stdout("a\n1\n");
}

#[test]
fn missing_table_file_fails_with_exit_1() {
    let dir = TempDir::new().unwrap();
    assert_fails_with(
        calibsql(dir.path()).args(["-t", "x=missing.parquet", "-c", "SELECT 1"]),
        1,
        "--table x=missing.parquet: no such file or directory: missing.parquet",
    );
    assert_fails_with(
        calibsql(dir.path()).args(["-t", "x=nowhere/*.parquet", "-c", "SELECT 1"]),
        1,
        "no files match nowhere/*.parquet",
    );
    assert_fails_with(
        calibsql(dir.path()).args(["-f", "missing.sql"]),
        1,
        "cannot read missing.sql",
    );
}

#[test]
fn ambiguous_or_unsupported_locations_fail_with_advice() {
    let dir = fixtures();
    std::fs::copy(
        dir.path().join("clicks.csv"),
        dir.path().join("hive/day=1/x.csv"),
    )
    .unwrap();
    assert_fails_with(
        calibsql(dir.path()).args(["-t", "h=hive", "-c", "SELECT 1"]),
        1,
        "directory hive mixes file types (.parquet, .csv); pick one with a glob such as hive/*.parquet",
    );
    // Naming the format settles it.
    calibsql(dir.path())
        .args([
            "-t",
            "h=hive",
            "--table-format",
            "parquet",
            "-c",
            "SELECT count(*) AS n FROM h",
        ])
        .assert()
        .success()
        .stdout("n\n2\n");
    assert_fails_with(
        calibsql(dir.path()).args(["-t", "h=gs://bucket/x.parquet", "-c", "SELECT 1"]),
        1,
        "'gs://' URLs are not supported",
    );
}

#[test]
fn corrupt_parquet_fails_readably() {
    let dir = TempDir::new().unwrap();
    std::fs::write(
        dir.path().join("x.parquet"),
        b"this is not a parquet file at all",
    )
    .unwrap();
    assert_fails_with(
        calibsql(dir.path()).args(["-t", "x=x.parquet", "-c", "SELECT * FROM x"]),
        1,
        "Parquet error",
    );
    assert_fails_with(
        calibsql(dir.path()).args(["-c", "SELECT * FROM 'x.parquet'"]),
        1,
        "Parquet error",
    );
}

#[test]
fn usage_errors_exit_2_and_name_the_flag() {
    let dir = TempDir::new().unwrap();
    for (args, flag) in [
        (&["--format", "xml", "-c", "SELECT 1"][..], "--format"),
        (
            &["--memory-limit", "abc", "-c", "SELECT 1"][..],
            "--memory-limit",
        ),
        (
            &["--memory-limit", "0", "-c", "SELECT 1"][..],
            "--memory-limit",
        ),
        (&["--batch-size", "0", "-c", "SELECT 1"][..], "--batch-size"),
        (
            &["--target-partitions", "x", "-c", "SELECT 1"][..],
            "--target-partitions",
        ),
        (&["--table", "novalue", "-c", "SELECT 1"][..], "--table"),
        (&["--table", "my.t=x.csv", "-c", "SELECT 1"][..], "--table"),
        (
            &["--table-format", "avro", "-t", "a=b.csv"][..],
            "--table-format",
        ),
        (&["--no-such-flag"][..], "--no-such-flag"),
    ] {
        calibsql(dir.path())
            .args(args)
            .assert()
            .code(2)
            .stdout("")
            .stderr(predicate::str::contains(flag));
    }
    // Cross-checks made after parsing print one `Error:` line.
    assert_fails_with(
        calibsql(dir.path()).args(["--table-format", "csv", "-c", "SELECT 1"]),
        2,
        "--table-format",
    );
    assert_fails_with(
        calibsql(dir.path()).args(["--format", "csv", "--max-rows", "5", "-c", "SELECT 1"]),
        2,
        "--max-rows",
    );
}

#[test]
fn help_documents_exit_codes() {
    let dir = TempDir::new().unwrap();
    calibsql(dir.path())
        .arg("--help")
        .assert()
        .success()
        .stdout(predicate::str::contains("Exit status").and(predicate::str::contains("130")));
}

#[test]
fn memory_limit_makes_a_big_sort_fail() {
    let dir = TempDir::new().unwrap();
    assert_fails_with(
        calibsql(dir.path()).args([
            "--memory-limit",
            "100K",
            "-c",
            "SELECT v FROM (SELECT value AS v, random() AS r FROM generate_series(1, 2000000)) ORDER BY r",
        ]),
        1,
        "Resources exhausted",
    );
    // Settings that only tune execution leave results alone.
    calibsql(dir.path())
        .args([
            "--memory-limit",
            "1G",
            "--batch-size",
            "7",
            "--target-partitions",
            "3",
        ])
        .args([
            "-c",
            "SELECT count(*) AS n, sum(value) AS s FROM generate_series(1, 1000)",
        ])
        .assert()
        .success()
        .stdout("n,s\n1000,500500\n");
}

#[test]
fn closed_stdout_exits_0_quietly() {
    let dir = TempDir::new().unwrap();
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin!("calibsql"))
        .current_dir(dir.path())
        .env("HOME", dir.path())
        .args(["-c", "SELECT * FROM generate_series(1, 10000000)"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut first = [0u8; 16];
    stdout.read_exact(&mut first).unwrap();
    assert!(first.starts_with(b"value\n1\n"));
    drop(stdout);
    let output = child.wait_with_output().unwrap();
    assert_eq!(
        output.status.code(),
        Some(0),
        "stderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&output.stderr), "");
}

#[test]
fn demo_runs_end_to_end() {
    let dir = TempDir::new().unwrap();
    let output = calibsql(dir.path())
        .args(["demo", "--rows", "20000", "--dir", "out"])
        .output()
        .unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(
        output.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    for needle in [
        "Wrote 20,000 rows",
        "1. Calibration of a ranking model",
        "| uncalibrated min-max",
        "| Gamma                | UERM",
        "2. Field-level calibration",
        "| ConfCalib, multi-field",
        "3. Reliability diagrams",
        "out/reliability_ranking.svg",
        "calibsql --table valid=out/valid --table test=out/test -f sql/ranking_calibration.sql",
    ] {
        assert!(stdout.contains(needle), "missing {needle:?} in:\n{stdout}");
    }
    let svg = std::fs::read_to_string(dir.path().join("out/reliability_ranking.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("Gamma, UERM"));
    // The data is there to explore.
    calibsql(dir.path())
        .args(["--table", "t=out/test", "-c", "SELECT count(*) AS n FROM t"])
        .assert()
        .success()
        .stdout("n\n10000\n");
}

#[test]
fn tools_check_their_flags() {
    let dir = TempDir::new().unwrap();
    for (args, needle) in [
        (&["generate", "--rows", "1", "--out", "d"][..], "--rows"),
        (&["generate", "--rows", "10"][..], "--out"),
        (&["demo", "--rows", "10"][..], "--rows"),
        (&["plot", "reliability", "-o", "x.svg"][..], "--command"),
        (&["-c", "SELECT 1", "demo"][..], "demo"),
    ] {
        calibsql(dir.path())
            .args(args)
            .assert()
            .code(2)
            .stdout("")
            .stderr(predicate::str::contains(needle));
    }
    assert_fails_with(
        calibsql(dir.path()).args([
            "plot",
            "reliability",
            "-c",
            "SELECT 0.5 AS p, 1 AS y",
            "-o",
            "x.png",
        ]),
        2,
        "SVG",
    );
    assert_fails_with(
        calibsql(dir.path()).args([
            "plot",
            "reliability",
            "-c",
            "SELECT 0.5 AS q",
            "-o",
            "x.svg",
        ]),
        1,
        "columns p and y",
    );
    calibsql(dir.path())
        .args(["plot", "reliability", "-q", "-o", "x.svg", "-c"])
        .arg(
            "SELECT * FROM (VALUES (0.1, 0, 'a'), (0.8, 1, 'a'), (0.3, 1, 'b')) AS t(p, y, series)",
        )
        .assert()
        .success()
        .stdout("")
        .stderr("");
    let svg = std::fs::read_to_string(dir.path().join("x.svg")).unwrap();
    assert!(svg.contains("a  ·  ECE") && svg.contains("b  ·  ECE"));
}

#[test]
fn plot_metric_skips_points_it_cannot_place() {
    let dir = TempDir::new().unwrap();
    // A metric of Infinity (field_rce with eps 0 on a value without positives) and a NaN.
    calibsql(dir.path())
        .args([
            "plot",
            "metric",
            "-q",
            "-c",
            "SELECT 1 AS x, 0.5 AS value UNION ALL SELECT 2, 'inf'::double UNION ALL SELECT 3, 'nan'::double
             UNION ALL SELECT 4, 0.7",
            "-o",
            "m.svg",
        ])
        .assert()
        .success();
    assert!(std::fs::read_to_string(dir.path().join("m.svg"))
        .unwrap()
        .starts_with("<svg"));
    assert_fails_with(
        calibsql(dir.path()).args([
            "plot",
            "metric",
            "-c",
            "SELECT 1 AS x, 'nan'::double AS value",
            "-o",
            "n.svg",
        ]),
        1,
        "no rows with a finite, non-NULL x and value",
    );
    assert_fails_with(
        calibsql(dir.path()).args([
            "plot",
            "metric",
            "-c",
            "SELECT 1 AS x, 1e308 AS value UNION ALL SELECT 2, -1e308",
            "-o",
            "o.svg",
        ]),
        1,
        "span more than a float can hold",
    );
}

#[test]
fn generate_refuses_a_drift_day_past_the_log() {
    let dir = TempDir::new().unwrap();
    assert_fails_with(
        calibsql(dir.path()).args([
            "generate",
            "--rows",
            "1000",
            "--out",
            "g",
            "--days",
            "7",
            "--drift-day",
            "7",
        ]),
        1,
        "--drift-day 7 is past the last day (6",
    );
}

#[test]
fn generate_has_a_mild_exposure_scenario() {
    let dir = TempDir::new().unwrap();
    calibsql(dir.path())
        .args([
            "generate",
            "--rows",
            "20000",
            "--out",
            "g",
            "--exposure",
            "mild",
            "-q",
        ])
        .assert()
        .success();
    // Exposure between 0.9 and 1 (docs/DATA.md), instead of 0.1 to 1.
    calibsql(dir.path())
        .args([
            "--table",
            "valid=g/valid",
            "--format",
            "csv",
            "-c",
            "SELECT min(exposure) >= 0.9 AND max(exposure) <= 1.0 AS mild FROM valid",
        ])
        .assert()
        .success()
        .stdout("mild\ntrue\n");
    let bad = calibsql(dir.path())
        .args([
            "generate",
            "--rows",
            "10",
            "--out",
            "g",
            "--exposure",
            "weak",
        ])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    let stderr = String::from_utf8(bad.stderr).unwrap();
    assert!(
        stderr.contains("[possible values: strong, mild]"),
        "{stderr}"
    );
}

#[test]
fn distinct_is_refused_not_ignored() {
    let dir = TempDir::new().unwrap();
    assert_fails_with(
        calibsql(dir.path()).args([
            "-c",
            "SELECT ece(DISTINCT p, y) FROM (VALUES (0.1, 0), (0.1, 0), (0.1, 1)) t(p, y)",
        ]),
        1,
        "ece: DISTINCT is not supported",
    );
}
