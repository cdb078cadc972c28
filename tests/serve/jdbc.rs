//! pgjdbc (Debian's libpostgresql-jdbc-java) in a small Java program compiled here: the CLI's
//! numbers, getTables/getColumns, a PreparedStatement past the prepare threshold (binary
//! results), json for a model.

use std::io::Write;
use std::path::Path;

use crate::{assert_same_csv, child, Fixture, PASSWORD};

/// pgjdbc as Debian installs it.
const JAR: &str = "/usr/share/java/postgresql.jar";

const QUERIES: &[&str] = &[
    "SELECT ad_type, count(*) AS n, ece(p_model, click) AS ece, field_rce(p_model, click, site_id) AS rce FROM t GROUP BY ad_type ORDER BY ad_type",
    "WITH m AS (SELECT fit_gamma_calib(p_model, click) AS model FROM t) SELECT ece(calibrate(t.p_model, m.model), t.click) AS ece FROM t CROSS JOIN m",
    "SELECT r['bin'] AS bin, r['count'] AS n, r['frac_pos'] AS frac_pos FROM (SELECT unnest(reliability(p_model, click, 6)) AS r FROM t) ORDER BY bin",
];

fn compile(dir: &Path) {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/serve/jdbc/JdbcClient.java");
    let mut command = child::command("javac");
    command.args(["-cp", JAR, "-d"]).arg(dir).arg(source);
    let out = child::output("javac", &mut command, crate::CLIENT);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn jdbc_reads_the_catalog_and_gets_the_clis_numbers() {
    assert!(
        Path::new(JAR).exists(),
        "{JAR} is missing: apt-get install libpostgresql-jdbc-java"
    );
    let fixture = Fixture::new();
    let classes = fixture.path().join("classes");
    compile(&classes);
    let server = fixture.serve(&[]);
    let queries = fixture.path().join("queries.sql");
    let mut file = std::fs::File::create(&queries).unwrap();
    for sql in QUERIES {
        writeln!(file, "{sql}").unwrap();
    }
    let mut command = child::command("java");
    command
        .arg("-cp")
        .arg(format!("{JAR}:{}", classes.display()))
        .arg("JdbcClient")
        .arg(server.port.to_string())
        .env("CALIBSQL_PASSWORD", PASSWORD)
        .stdin(std::fs::File::open(&queries).unwrap());
    let out = child::output("java", &mut command, crate::CLIENT);
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let mut sections = stdout.split("QUERY\n").skip(1);
    for sql in QUERIES {
        let section = sections.next().unwrap();
        let csv: String = section
            .lines()
            .take_while(|l| !l.starts_with("TABLE ") && !l.starts_with("COLUMN "))
            .map(|l| format!("{l}\n"))
            .collect();
        assert_same_csv(&csv, &fixture.cli_csv(sql));
    }
    assert!(stdout.contains("TABLE t\n"), "{stdout}");
    assert!(stdout.contains("COLUMN p_model float8\n"), "{stdout}");
    assert!(stdout.contains("COLUMN ad_type text\n"), "{stdout}");
    // Every run of the prepared statement gives its parameters' answer, before and after
    // pgjdbc switches to a server-side statement.
    let prepared: Vec<Vec<&str>> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("PREPARED "))
        .map(|l| l.split(' ').collect())
        .collect();
    assert_eq!(prepared.len(), 8, "{stdout}");
    for run in &prepared[2..] {
        let first = &prepared[run[0].parse::<usize>().unwrap() % 2];
        assert_eq!(run[1..], first[1..], "{stdout}");
    }
    let cli = fixture.cli_csv(
        "SELECT count(*) AS n, ece(p_model, click) AS ece FROM t WHERE ad_type = 'banner' AND p_model > 0.01",
    );
    let expected = format!("n,ece\n{}", cli.lines().nth(1).unwrap());
    assert_same_csv(
        &format!("n,ece\n{},{}\n", prepared[0][1], prepared[0][2]),
        &expected,
    );
    assert!(stdout.contains("TYPES json float8\n"), "{stdout}");
    let model = stdout
        .lines()
        .find_map(|l| l.strip_prefix("MODEL "))
        .unwrap();
    let model: serde_json::Value = serde_json::from_str(model).unwrap();
    assert_eq!(model["method"], "platt");
}
