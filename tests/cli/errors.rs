//! Errors and exit codes: one readable line, the documented code, nothing left running.

use super::*;

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

/// DataFusion 55 fails to plan the same aggregate twice beneath a struct field read; the
/// error says how to get past it, and the way it names works.
#[test]
fn an_optimizer_fault_comes_with_its_workaround() {
    let dir = TempDir::new().unwrap();
    let query = "SELECT ci['u'] AS u FROM (SELECT named_struct('u', a / b) AS ci \
                 FROM (SELECT sum(x) AS a, sum(x) AS b FROM (VALUES (1.0), (2.0)) AS t(x)) AS m) AS h";
    assert_fails_with(
        calibsql(dir.path()).args(["-c", query]),
        1,
        "SET datafusion.optimizer.enable_leaf_expression_pushdown = false",
    );
    let workaround =
        format!("SET datafusion.optimizer.enable_leaf_expression_pushdown = false; {query}");
    calibsql(dir.path())
        .args(["-c", &workaround])
        .assert()
        .success()
        .stdout("u\n1.0\n");
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
        calibsql(dir.path()).args(["-t", "h=hdfs://namenode/x.parquet", "-c", "SELECT 1"]),
        1,
        "'hdfs://' URLs are not supported",
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
    let child = std::process::Command::new(assert_cmd::cargo::cargo_bin!("calibsql"))
        .current_dir(dir.path())
        .env("HOME", dir.path())
        .args(["-c", "SELECT * FROM generate_series(1, 10000000)"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Killed if an assertion below fails before the child has exited.
    struct KillOnDrop(Option<std::process::Child>);
    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            if let Some(child) = self.0.as_mut() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
    let mut guard = KillOnDrop(Some(child));
    let child = guard.0.as_mut().unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut first = [0u8; 16];
    stdout.read_exact(&mut first).unwrap();
    assert!(first.starts_with(b"value\n1\n"));
    drop(stdout);
    let output = guard.0.take().unwrap().wait_with_output().unwrap();
    assert_eq!(
        output.status.code(),
        Some(0),
        "stderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&output.stderr), "");
}
