//! Tables from files, directories, globs and other formats.

use super::*;

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
