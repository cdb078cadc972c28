//! `calibsql report`: the page's embedded JSON against the same numbers from separate SQL
//! queries, escaping of user data, reports of nothing (no rows, one class, NULL/NaN rows),
//! and bad input refused before anything is written. Comparing with separate SQL checks the
//! report's queries and reading (an invariance, not the science): the functions are checked
//! against their references (scikit-learn, statsmodels, pROC, R ports) in tests/slt and
//! tests/fits.

use serde_json::Value;

use super::*;

/// Generated logs (20,000 rows, 14 days, drift from day 10) in `dir/data`.
fn generated(dir: &Path) {
    calibsql(dir)
        .args([
            "generate",
            "--rows",
            "20000",
            "--out",
            "data",
            "--days",
            "14",
            "--drift-day",
            "10",
            "-q",
        ])
        .assert()
        .success();
}

/// Two models, weights, a day and two fields.
const QUERY: &str = "SELECT p_model AS p, click AS y, day, site_id, ad_type, 'ctr' AS model, \
                     CAST(1 + item_id % 3 AS DOUBLE) AS w FROM test \
                     UNION ALL SELECT sigmoid(score) AS p, click AS y, day, site_id, ad_type, \
                     'ranker' AS model, CAST(1 + item_id % 3 AS DOUBLE) AS w FROM test";

/// The JSON of the page's `calibsql-data` element.
fn embedded_json(html: &str) -> Value {
    let start = r#"<script type="application/json" id="calibsql-data">"#;
    let from = html.find(start).expect("no calibsql-data element") + start.len();
    let to = from + html[from..].find("</script>").unwrap();
    serde_json::from_str(&html[from..to]).unwrap()
}

/// Rows of `sql` over the test split, as JSON objects.
fn query(dir: &Path, sql: &str) -> Vec<Value> {
    let output = calibsql(dir)
        .args(["--table", "test=data/test", "--format", "json", "-c", sql])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{sql}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice::<Value>(&output.stdout)
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

/// The JSON of `calibsql report` over the test split with query `sql` (the page goes to
/// `dir/r.html`).
fn report_json(dir: &Path, sql: &str) -> Value {
    calibsql(dir)
        .args([
            "report",
            "--table",
            "test=data/test",
            "-q",
            "-o",
            "r.html",
            "--json",
            "r.json",
            "-c",
            sql,
        ])
        .assert()
        .success();
    serde_json::from_slice(&std::fs::read(dir.join("r.json")).unwrap()).unwrap()
}

/// `got` equals `want` to summation order (both JSON numbers, or both null).
fn assert_same(got: &Value, want: &Value, what: &str) {
    match (got.as_f64(), want.as_f64()) {
        (Some(g), Some(w)) => {
            let diff = (g - w).abs();
            assert!(diff <= 1e-12 * w.abs().max(1.0), "{what}: {g} vs {w}");
        }
        _ => assert_eq!(got, want, "{what}"),
    }
}

#[test]
fn report_json_holds_the_numbers_of_the_sql_functions() {
    let dir = TempDir::new().unwrap();
    generated(dir.path());
    let args = [
        "report",
        "--table",
        "test=data/test",
        "-o",
        "out/report.html",
        "--json",
        "out/report.json",
        "--field",
        "site_id",
        "--field",
        "ad_type",
        "-c",
        QUERY,
    ];
    // The directory of -o must exist: nothing is created but the files.
    let output = calibsql(dir.path()).args(args).output().unwrap();
    assert_eq!(output.status.code(), Some(1));
    std::fs::create_dir(dir.path().join("out")).unwrap();
    let output = calibsql(dir.path()).args(args).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "stderr: {stderr}");
    assert!(
        stderr.contains("Wrote out/report.html (20000 rows, 2 models"),
        "{stderr}"
    );
    let html = std::fs::read_to_string(dir.path().join("out/report.html")).unwrap();
    let json: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("out/report.json")).unwrap())
            .unwrap();
    assert_eq!(
        embedded_json(&html),
        json,
        "the page embeds what --json writes"
    );
    let models = json["models"].as_array().unwrap();
    assert_eq!(models.len(), 2);

    let want = query(
        dir.path(),
        &format!(
            "SELECT model, count(*) AS rows, sum(w) AS weight, \
             ece(p, y, 15, 'uniform', w) AS ece, ece(p, y, 15, 'quantile', w) AS ece_quantile, \
             mce(p, y, 15, 'uniform', w) AS mce, logloss(p, y, 2.220446049250313e-16, w) AS logloss, \
             normalized_entropy(p, y, w) AS normalized_entropy, brier(p, y, w) AS brier, \
             auc(p, y, w) AS auc, reliability(p, y, 15, 'uniform', w) AS reliability, \
             field_rce(p, y, site_id, 0.01, w) AS rce_site, field_rce(p, y, ad_type, 0.01, w) AS rce_ad, \
             sum(w * p) / sum(w * y) AS ratio, spiegelhalter(p, y, w) AS spiegelhalter, \
             calibration_slope(p, y, w) AS slope, \
             calibration_decomposition(p, y, 'brier', w) AS decomposition, \
             field_bias(p, y, site_id, w) AS bias_site \
             FROM ({QUERY}) GROUP BY model ORDER BY model"
        ),
    );
    for (got, want) in models.iter().zip(&want) {
        let name = want["model"].as_str().unwrap();
        assert_eq!(got["model"], want["model"]);
        for key in [
            "rows",
            "weight",
            "ece",
            "ece_quantile",
            "mce",
            "logloss",
            "normalized_entropy",
            "brier",
            "auc",
            "ratio",
        ] {
            assert_same(&got[key], &want[key], &format!("{name} {key}"));
        }
        for (key, column, field) in [
            ("spiegelhalter_z", "spiegelhalter", "z"),
            ("spiegelhalter_p", "spiegelhalter", "p_value"),
            ("intercept", "slope", "intercept"),
            ("intercept_se", "slope", "intercept_se"),
            ("slope", "slope", "slope"),
            ("slope_se", "slope", "slope_se"),
            ("citl", "slope", "citl"),
            ("citl_se", "slope", "citl_se"),
            ("miscalibration", "decomposition", "miscalibration"),
            ("discrimination", "decomposition", "discrimination"),
            ("uncertainty", "decomposition", "uncertainty"),
        ] {
            assert!(got[key].is_number(), "{name} {key}: {}", got[key]);
            assert_same(&got[key], &want[column][field], &format!("{name} {key}"));
        }
        // Weighted: the unweighted bootstrap and DeLong intervals are left out.
        for key in ["ece_lower", "ece_upper", "auc_lower", "auc_upper"] {
            assert!(got[key].is_null(), "{name} {key}");
        }
        // Segments: each listed value's Holm-adjusted p-value is field_bias's.
        let bias: std::collections::HashMap<&str, &Value> = want["bias_site"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| (b["field"].as_str().unwrap(), &b["p_adjusted"]))
            .collect();
        let site = &got["segments"][0];
        assert_eq!(site["field"], "site_id");
        let mut significant = 0;
        for segment in site["segments"].as_array().unwrap() {
            if segment["other"] == true {
                assert!(segment["p_adjusted"].is_null());
                continue;
            }
            let value = segment["value"].as_str().unwrap();
            assert_same(
                &segment["p_adjusted"],
                bias[value],
                &format!("{name} {value}"),
            );
            let p = segment["p_adjusted"].as_f64().unwrap();
            assert_eq!(segment["significant"], p < 0.05, "{name} {value}");
            significant += (p < 0.05) as usize;
        }
        // The generator's Zipf sites with a biased model: some values are really off.
        assert!(significant > 0, "{name}: no significant site");
        assert_same(&got["field_rce"]["site_id"], &want["rce_site"], "rce site");
        assert_same(&got["field_rce"]["ad_type"], &want["rce_ad"], "rce ad");
        let (bins, want_bins) = (
            got["reliability"].as_array().unwrap(),
            want["reliability"].as_array().unwrap(),
        );
        assert_eq!(bins.len(), 15);
        assert_eq!(bins.len(), want_bins.len());
        for (bin, want_bin) in bins.iter().zip(want_bins) {
            for (key, value) in want_bin.as_object().unwrap() {
                assert_same(&bin[key], value, &format!("{name} bin {key}"));
            }
        }
    }

    // Over time: the daily ECE and log loss of one day, from a query of that day alone.
    let day = query(
        dir.path(),
        &format!(
            "SELECT model, ece(p, y, 15, 'uniform', w) AS ece, \
             logloss(p, y, 2.220446049250313e-16, w) AS logloss, sum(w * p) / sum(w * y) AS ratio \
             FROM ({QUERY}) WHERE day = 11 GROUP BY model ORDER BY model"
        ),
    );
    for (got, want) in models.iter().zip(&day) {
        let daily = got["daily"].as_array().unwrap();
        assert_eq!(daily.len(), 14);
        let eleven = daily.iter().find(|d| d["day"] == "11").unwrap();
        for key in ["ece", "logloss", "ratio"] {
            assert_same(&eleven[key], &want[key], &format!("day 11 {key}"));
        }
    }
    // The drift from day 10 (p_model × 1.5) breaks the rule on the ctr model's ratio.
    let ctr = &models[0];
    assert_eq!(ctr["model"], "ctr");
    let alerts: Vec<&str> = ctr["daily"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["ratio_alert"] == true)
        .map(|d| d["day"].as_str().unwrap())
        .collect();
    // (Days of 700 rows: the rule flags most drifted days, and none before.)
    assert!(alerts.len() >= 3, "{alerts:?}");
    assert!(
        alerts.iter().all(|d| d.parse::<i32>().unwrap() >= 10),
        "{alerts:?}"
    );
    assert_ne!(ctr["status"]["level"], "ok");

    // Segments: the top 20 and "other" hold every row of the model.
    for model in models {
        for field in model["segments"].as_array().unwrap() {
            let rows: i64 = field["segments"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s["rows"].as_i64().unwrap())
                .sum();
            assert_eq!(rows, model["rows"].as_i64().unwrap(), "{}", field["field"]);
        }
    }

    // The page: every section, one chart per model plus three over time, nothing external.
    for id in [
        "header",
        "headline",
        "reliability",
        "bins",
        "over-time",
        "segments",
        "appendix",
    ] {
        assert!(
            html.contains(&format!("<section id=\"{id}\""))
                || html.contains(&format!("<header id=\"{id}\"")),
            "{id}"
        );
    }
    assert_eq!(html.matches("<svg").count(), 5);
    assert!(
        !html.contains("http://")
            || html.matches("http://").count() == html.matches("http://www.w3.org").count()
    );
    assert!(!html.contains("https://"));
    assert!(html.contains("Content-Security-Policy"));
    // Two weighted models with no key: no paired comparison, and the page says why.
    assert_eq!(json["comparisons"], Value::Array(vec![]));
    assert!(
        json["notes"][0].as_str().unwrap().contains("no key column"),
        "{}",
        json["notes"]
    );
}

/// Two unweighted models with an event id: the ECE's bootstrap interval, DeLong's AUC interval
/// and the paired comparison, against the same functions in separate queries. This checks that
/// the report carries what the functions return (an invariance of the report's plumbing); the
/// functions' values themselves are checked against pROC and a Python port of the bootstrap in
/// tests/slt/intervals.slt (tests/slt/gen/intervals.py).
#[test]
fn report_with_a_key_holds_intervals_and_the_paired_comparison() {
    let dir = TempDir::new().unwrap();
    generated(dir.path());
    let sql = "SELECT p_model AS p, click AS y, row_id AS key, 'ctr' AS model FROM test \
               UNION ALL SELECT sigmoid(score) AS p, click AS y, row_id AS key, 'ranker' AS model \
               FROM test";
    let json = report_json(dir.path(), sql);
    let want = query(
        dir.path(),
        &format!(
            "SELECT model, ece(p, y) AS ece, ece_interval(p, y, key, 15, 'uniform', 0.95) AS ece_ci, \
             auc(p, y) AS auc, auc_interval(p, y, 0.95) AS auc_ci \
             FROM ({sql}) GROUP BY model ORDER BY model"
        ),
    );
    let models = json["models"].as_array().unwrap();
    for (got, want) in models.iter().zip(&want) {
        let name = want["model"].as_str().unwrap();
        assert_same(&got["ece"], &want["ece"], &format!("{name} ece"));
        assert_same(
            &got["ece_lower"],
            &want["ece_ci"]["lower"],
            &format!("{name} ece_lower"),
        );
        assert_same(
            &got["ece_upper"],
            &want["ece_ci"]["upper"],
            &format!("{name} ece_upper"),
        );
        assert_same(&got["auc"], &want["auc"], &format!("{name} auc"));
        assert_same(
            &got["auc_lower"],
            &want["auc_ci"]["lower"],
            &format!("{name} auc_lower"),
        );
        assert_same(
            &got["auc_upper"],
            &want["auc_ci"]["upper"],
            &format!("{name} auc_upper"),
        );
        let (lower, upper) = (
            got["ece_lower"].as_f64().unwrap(),
            got["ece_upper"].as_f64().unwrap(),
        );
        assert!(lower < upper, "{name}: [{lower}, {upper}]");
    }
    // The model with the lower ECE is model_a.
    let ece = |k: usize| want[k]["ece"].as_f64().unwrap();
    let (a, b) = if ece(0) <= ece(1) {
        ("ctr", "ranker")
    } else {
        ("ranker", "ctr")
    };
    let comparisons = json["comparisons"].as_array().unwrap();
    assert_eq!(comparisons.len(), 1);
    let got = &comparisons[0];
    assert_eq!(
        (got["model_a"].as_str(), got["model_b"].as_str()),
        (Some(a), Some(b))
    );
    let want = query(
        dir.path(),
        &format!(
            "SELECT count(*) AS rows, ece_diff_interval(a.p, b.p, a.y, a.key, 15, 'uniform', 0.95) AS d, \
             auc_test(a.p, b.p, a.y) AS t \
             FROM ({sql}) AS a JOIN ({sql}) AS b ON a.key = b.key \
             WHERE a.model = '{a}' AND b.model = '{b}'"
        ),
    );
    let want = &want[0];
    assert_eq!(got["rows"], want["rows"]);
    assert_eq!(got["label_mismatches"], 0);
    for (key, column, field) in [
        ("ece_diff", "d", "diff"),
        ("ece_diff_lower", "d", "lower"),
        ("ece_diff_upper", "d", "upper"),
        ("auc_a", "t", "auc_a"),
        ("auc_b", "t", "auc_b"),
        ("auc_diff", "t", "diff"),
        ("auc_se", "t", "se"),
        ("auc_z", "t", "z"),
        ("auc_p_value", "t", "p_value"),
    ] {
        assert!(got[key].is_number(), "{key}: {}", got[key]);
        assert_same(&got[key], &want[column][field], key);
    }
    let html = std::fs::read_to_string(dir.path().join("r.html")).unwrap();
    assert!(html.contains("Paired comparison"));
}

#[test]
fn report_escapes_user_data() {
    let dir = TempDir::new().unwrap();
    let xss = "<script>alert(1)</script>";
    calibsql(dir.path())
        .args([
            "report",
            "-o",
            "r.html",
            "--field",
            "site",
            "--title",
            xss,
            "-c",
            &format!(
                "SELECT * FROM (VALUES (0.2, 0, '{xss}', '{xss}'), (0.7, 1, '{xss}', '{xss}'), \
                 (0.4, 1, 'b', 'm2'), (0.3, 0, 'b', 'm2')) AS t(p, y, site, model)"
            ),
        ])
        .assert()
        .success();
    let html = std::fs::read_to_string(dir.path().join("r.html")).unwrap();
    assert!(!html.contains(xss), "unescaped user data");
    assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    assert_eq!(
        html.matches("<script").count(),
        2,
        "only the data and the sorting script"
    );
    // The value is intact in the data.
    let json = embedded_json(&html);
    assert_eq!(json["title"], xss);
    // Models in sorted order: '<' sorts before 'm'.
    assert_eq!(json["models"][0]["model"], xss);
    assert_eq!(
        json["models"][0]["segments"][0]["segments"][0]["value"],
        xss
    );
}

#[test]
fn report_draws_ctr_sized_probabilities_on_log_odds() {
    let dir = TempDir::new().unwrap();
    let sql = "SELECT value / 20000.0 AS p, CASE WHEN value % 50 = 0 THEN 1 ELSE 0 END AS y \
               FROM generate_series(1, 2000)";
    for (axis, log_odds) in [("auto", true), ("linear", false), ("log-odds", true)] {
        calibsql(dir.path())
            .args(["report", "-q", "-o", "r.html", "--axis", axis, "-c", sql])
            .assert()
            .success();
        let html = std::fs::read_to_string(dir.path().join("r.html")).unwrap();
        assert_eq!(html.contains("(log-odds scale)"), log_odds, "--axis {axis}");
    }
}

#[test]
fn report_says_what_it_could_not_compute() {
    let dir = TempDir::new().unwrap();
    for (name, sql, needle) in [
        (
            "empty",
            "SELECT 0.5 AS p, 1 AS y WHERE false",
            "The query returned no rows: nothing could be computed.",
        ),
        (
            "one_class",
            "SELECT * FROM (VALUES (0.2, 0), (0.4, 0), (0.3, 0)) AS t(p, y)",
            "no positive (y = 1): AUC and normalized entropy are undefined",
        ),
        (
            "nulls",
            "SELECT * FROM (VALUES (0.2, 0), (CAST('NaN' AS DOUBLE), 1), (NULL, 1), (0.7, NULL), \
             (0.8, 1)) AS t(p, y)",
            "3 of 5 rows have a NULL or NaN p or y and are left out.",
        ),
        (
            "label_mismatch",
            "SELECT * FROM (VALUES (0.2, 0, 1, 'a'), (0.7, 1, 2, 'a'), (0.4, 1, 1, 'b'), \
             (0.3, 0, 2, 'b')) AS t(p, y, key, model)",
            "disagree on the label of 2 of the 2 rows they share by key",
        ),
        (
            "all_null",
            "SELECT CAST(NULL AS DOUBLE) AS p, 1 AS y",
            "All 1 rows have a NULL or NaN p or y: nothing could be computed.",
        ),
    ] {
        let output = calibsql(dir.path())
            .args(["report", "-o", &format!("{name}.html"), "-c", sql])
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let html = std::fs::read_to_string(dir.path().join(format!("{name}.html"))).unwrap();
        assert!(html.contains(needle), "{name}: no {needle:?}");
        assert!(html.contains("<section id=\"appendix\""), "{name}");
        embedded_json(&html);
    }
    let json = embedded_json(&std::fs::read_to_string(dir.path().join("nulls.html")).unwrap());
    assert_eq!(
        (json["rows"].as_i64(), json["rows_dropped"].as_i64()),
        (Some(5), Some(3))
    );
    assert_eq!(json["models"][0]["rows"], 2);
}

#[test]
fn report_refuses_bad_input_before_writing() {
    let dir = TempDir::new().unwrap();
    std::fs::write(dir.path().join("r.html"), "the old report").unwrap();
    for (args, code, needle) in [
        (
            &["-c", "SELECT 0.5 AS q, 1 AS y"][..],
            1,
            "it has no p (it returns q, y)",
        ),
        (
            &["-c", "SELECT 0.5 AS p, 1 AS y", "--field", "site"][..],
            1,
            "--field site: the query returns no column site",
        ),
        (
            &["-c", "SELECT 2.5 AS p, 1 AS y"][..],
            1,
            "report: computing",
        ),
        (
            &["-c", "SELECT 0.5 AS p, 1 AS y, 1.5 AS key"][..],
            1,
            "the key column must be an integer or text event id, got type Float64",
        ),
        (
            &["-c", "CREATE VIEW v AS SELECT 1"][..],
            1,
            "must be a query",
        ),
    ] {
        let mut command = calibsql(dir.path());
        command.args(["report", "-o", "r.html"]).args(args);
        assert_fails_with(&mut command, code, needle);
    }
    assert_fails_with(
        calibsql(dir.path()).args(["report", "-o", "r.png", "-c", "SELECT 0.5 AS p, 1 AS y"]),
        2,
        "FILE.html",
    );
    calibsql(dir.path())
        .args(["report", "-o", "r.html"])
        .assert()
        .code(2);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("r.html")).unwrap(),
        "the old report"
    );
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|name| name != "r.html")
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn report_with_unlabelled_rows_sets_expected_auc_beside_the_realised_one() {
    // Invariance of the plumbing (the report's numbers against the same functions queried
    // apart); cbpe itself is checked against its reference in tests/slt/cbpe.slt.
    let dir = TempDir::new().unwrap();
    generated(dir.path());
    let sql = "SELECT p_model AS p, CASE WHEN row_id % 4 = 0 THEN NULL ELSE click END AS y, \
               CAST(1 + item_id % 3 AS DOUBLE) AS w, 'ctr' AS model FROM test \
               UNION ALL SELECT sigmoid(score) AS p, click AS y, \
               CAST(1 + item_id % 3 AS DOUBLE) AS w, 'ranker' AS model FROM test";
    let json = report_json(dir.path(), sql);
    let want = query(
        dir.path(),
        &format!(
            "SELECT model, count(*) AS scored, count(y) AS labelled, \
             cbpe(p, 0.5, w)['roc_auc'] AS expected_auc, \
             auc(p, y, w) FILTER (WHERE y IS NOT NULL) AS auc, \
             count(*) FILTER (WHERE y IS NULL) AS unlabelled \
             FROM ({sql}) GROUP BY model ORDER BY model"
        ),
    );
    let unlabelled: i64 = want.iter().map(|w| w["unlabelled"].as_i64().unwrap()).sum();
    assert!(unlabelled > 0);
    assert_eq!(json["rows_unlabelled"].as_i64(), Some(unlabelled));
    let models = json["models"].as_array().unwrap();
    assert_eq!(models.len(), 2);
    for (got, want) in models.iter().zip(&want) {
        let name = want["model"].as_str().unwrap();
        assert_eq!(got["scored_rows"], want["scored"], "{name}");
        assert_eq!(got["rows"], want["labelled"], "{name}");
        assert_same(&got["expected_auc"], &want["expected_auc"], name);
        assert_same(&got["auc"], &want["auc"], name);
    }
    let notes = json["notes"].as_array().unwrap();
    assert!(
        notes
            .iter()
            .any(|n| n.as_str().unwrap().contains("no label yet")),
        "{notes:?}"
    );
    let html = std::fs::read_to_string(dir.path().join("r.html")).unwrap();
    assert!(html.contains("AUC expected from p"));
}
