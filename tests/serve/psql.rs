//! calibsql's functions through psql: the numbers the CLI prints for the same SQL; psql's
//! catalog commands; one session per connection.

use crate::{assert_same_csv, Fixture};

/// Queries run through psql and the CLI: metrics by group, a fit fed to calibrate, the
/// reliability bins, a named argument.
const QUERIES: &[&str] = &[
    "SELECT ad_type, count(*) AS n, ece(p_model, click) AS ece, logloss(p_model, click) AS ll, \
     auc(p_model, click) AS auc, field_rce(p_model, click, site_id) AS rce_site \
     FROM t GROUP BY ad_type ORDER BY ad_type",
    "WITH m AS (SELECT fit_platt(logit(p_model), click) AS model FROM t) \
     SELECT ece(calibrate(logit(t.p_model), m.model), t.click) AS ece_platt FROM t CROSS JOIN m",
    "SELECT r['bin'] AS bin, r['count'] AS n, r['mean_p'] AS mean_p, r['frac_pos'] AS frac_pos \
     FROM (SELECT unnest(reliability(p_model, click, 10)) AS r FROM t) ORDER BY bin",
    "SELECT ece(p_model, click, w => p_model) AS ece_w, multi_field_rce(p_model, click, site_id, ad_type) AS mfr FROM t",
];

#[test]
fn functions_give_the_clis_numbers() {
    let fixture = Fixture::new();
    let server = fixture.serve(&[]);
    for sql in QUERIES {
        assert_same_csv(&server.psql(sql), &fixture.cli_csv(sql));
    }
    // A fitted model (a struct) comes as JSON text.
    let model = server.psql("SELECT fit_platt(p_model, click) AS model FROM t");
    let json = model.lines().nth(1).unwrap();
    let value: serde_json::Value = serde_json::from_str(json).unwrap();
    assert_eq!(value["method"], "platt", "{json}");
}

#[test]
fn catalog_commands_list_the_tables() {
    let fixture = Fixture::new();
    let server = fixture.serve(&[]);
    let tables = server.psql("\\dt");
    assert!(
        tables.lines().any(|l| l.starts_with("public,t,table")),
        "{tables}"
    );
    let columns = server.psql("\\d t");
    assert!(columns.contains("p_model,double precision"), "{columns}");
    assert!(columns.contains("ad_type,text"), "{columns}");
    let databases = server.psql("\\l");
    assert!(databases.contains("calibsql"), "{databases}");
    assert_eq!(
        server.psql("SELECT current_database() AS db"),
        "db\ncalibsql\n"
    );
}

#[test]
fn each_connection_has_its_own_session() {
    let fixture = Fixture::new();
    let server = fixture.serve(&[]);
    let shown = |sql: &[&str]| {
        let mut args = Vec::new();
        for s in sql {
            args.extend(["-c", s]);
        }
        let out = server.psql_as(&server.conninfo("analyst"), Some(crate::PASSWORD), &args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    // calibsql.fit_exact_cap changes what fit_isotonic keeps exactly: a visible effect.
    const FIT: &str = "SELECT fit_isotonic(p_model, click) AS model FROM t";
    let default = shown(&[FIT]);
    let one = shown(&[
        "SET calibsql.fit_exact_cap = 16",
        FIT,
        "CREATE VIEW big AS SELECT * FROM t WHERE p_model > 0.5",
        "SELECT count(*) > 0 AS some FROM big",
    ]);
    assert!(one.starts_with("SET\nmodel\n"), "{one}");
    let capped = one.lines().nth(2).unwrap();
    assert_ne!(
        capped,
        default.lines().nth(1).unwrap(),
        "the setting had no effect"
    );
    assert!(one.contains("some\nt\n"), "{one}");
    // The CLI with the same setting fits the same model.
    let cli = fixture.cli_csv(&format!("SET calibsql.fit_exact_cap = 16; {FIT}"));
    let cli: serde_json::Value =
        serde_json::from_str(&csv_cell(cli.lines().nth(1).unwrap())).unwrap();
    let served: serde_json::Value = serde_json::from_str(capped).unwrap();
    assert_eq!(served["knots_x"], cli["knots_x"]);
    // Another connection sees neither the setting nor the view.
    assert_eq!(shown(&[FIT]), default);
    let error = server.psql_error("SELECT * FROM big");
    assert!(
        error.contains("big") && error.contains("not found"),
        "{error}"
    );
    // A bad calibsql setting is an error, not a silent no-op.
    let error = server.psql_error("SET calibsql.no_such_setting = 1");
    assert!(error.contains("no_such_setting"), "{error}");
}

/// The text of one quoted CSV cell (`"{""a"":1}"` → `{"a":1}`).
fn csv_cell(cell: &str) -> String {
    cell.trim_matches('"').replace("\"\"", "\"")
}
