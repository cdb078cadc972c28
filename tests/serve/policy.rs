//! A read-only server refuses what writes or names a file, with the flag that allows it.

use crate::Fixture;

#[test]
fn a_read_only_server_refuses_writes_and_paths() {
    let fixture = Fixture::new();
    let server = fixture.serve(&[]);
    let inside = fixture.path().join("data/test");
    let out = fixture.path().join("out.csv");
    let cases = [
        ("SELECT * FROM '/etc/passwd'".to_string(), "--allow-path"),
        (
            format!("SELECT count(*) FROM '{}'", inside.display()),
            "--allow-path",
        ),
        (
            format!(
                "CREATE EXTERNAL TABLE e STORED AS PARQUET LOCATION '{}'",
                inside.display()
            ),
            "--allow-path",
        ),
        (format!("COPY t TO '{}'", out.display()), "--allow-writes"),
        (
            format!("COPY (SELECT 1 AS x) TO '{}' STORED AS CSV", out.display()),
            "--allow-writes",
        ),
        (
            "CREATE TABLE m AS SELECT 1 AS x".to_string(),
            "--allow-writes",
        ),
        (
            "INSERT INTO t (click) VALUES (1)".to_string(),
            "--allow-writes",
        ),
        ("DROP TABLE t".to_string(), "--allow-writes"),
        (
            "SET datafusion.runtime.memory_limit = '100G'".to_string(),
            "fixed at its start",
        ),
    ];
    for (sql, hint) in &cases {
        let error = server.psql_error(sql);
        assert!(
            error.contains("permission denied") && error.contains(hint),
            "{sql}: {error}"
        );
    }
    assert!(!out.exists());
    // Views of the session's own and queries still work.
    assert_eq!(
        server.psql("SELECT count(*) AS n FROM t WHERE click = 1 AND click = 0"),
        "n\n0\n"
    );
}
