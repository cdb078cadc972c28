//! Statements: `-c`, `-f`, standard input, and their order.

use super::*;

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

/// DataFusion 55 names every table function call's scan after the function alone, and its
/// common-subexpression elimination then took these two subqueries for one (3 and 3); each
/// call is now named after its text (src/table_calls.rs). Expected: the row counts of the
/// two series, 3 and 5; an alias of the user's own still names the call.
#[test]
fn different_table_function_calls_are_different_tables() {
    let dir = TempDir::new().unwrap();
    calibsql(dir.path())
        .args([
            "-c",
            "SELECT (SELECT count(*) FROM generate_series(1, 3)) AS a, \
                    (SELECT count(*) FROM generate_series(1, 5)) AS b, \
                    (SELECT count(*) FROM range(1, 5)) AS c",
        ])
        .args(["-c", "SELECT g.value FROM generate_series(1, 2) AS g"])
        .assert()
        .success()
        .stdout("a,b,c\n3,5,4\nvalue\n1\n2\n");
}
