//! Output formats and where results go.

use super::*;

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

/// CSV has no nested values: a struct, list or map column is written as JSON text in one
/// quoted cell (a fitted model is a struct), a NULL as an empty cell. Expected text written
/// by hand from RFC 4180 quoting of the JSON values.
#[test]
fn csv_writes_nested_columns_as_json_text() {
    let dir = TempDir::new().unwrap();
    calibsql(dir.path())
        .args(["--format", "csv", "-c"])
        .arg(
            "SELECT 1 AS k, [1.5, 2.0] AS l, named_struct('a', 1, 'b', 'x,\"y') AS st, \
             CAST(NULL AS STRUCT<a INT>) AS n",
        )
        .assert()
        .success()
        .stdout("k,l,st,n\n1,\"[1.5,2.0]\",\"{\"\"a\"\":1,\"\"b\"\":\"\"x,\\\"\"y\"\"}\",\n")
        .stderr("");
    let output = calibsql(dir.path())
        .args(["--format", "csv", "-c"])
        .arg(
            "SELECT fit_platt(s, y) AS model FROM (VALUES (0.1, 0), (0.4, 1), (0.6, 0), (0.9, 1)) t(s, y)",
        )
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let csv = String::from_utf8(output.stdout).unwrap();
    let cell = csv
        .strip_prefix("model\n\"")
        .unwrap()
        .strip_suffix("\"\n")
        .unwrap();
    let model: serde_json::Value = serde_json::from_str(&cell.replace("\"\"", "\"")).unwrap();
    assert_eq!(model["method"], "platt", "{csv}");
    assert_eq!(model["n"], 4, "{csv}");
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
