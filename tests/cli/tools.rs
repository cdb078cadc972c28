//! The other commands: `demo`, `generate` and `plot`.

use super::*;

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
        "3. Is the miscalibration real?",
        "| temperature",
        "4. Reliability diagrams",
        "out/reliability_ranking.svg",
        "out/report.html  (ctr ",
        "calibsql --table valid=out/valid --table test=out/test -f sql/ranking_calibration.sql",
    ] {
        assert!(stdout.contains(needle), "missing {needle:?} in:\n{stdout}");
    }
    let svg = std::fs::read_to_string(dir.path().join("out/reliability_ranking.svg")).unwrap();
    let page = std::fs::read_to_string(dir.path().join("out/report.html")).unwrap();
    assert!(page.contains("calibsql-data") && page.contains("<section id=\"segments\""));
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

/// `plot reliability` draws each bin's Wilson interval (what `reliability` returns) as an
/// error bar, with a legend entry; `--no-intervals` leaves both out.
#[test]
fn plot_reliability_draws_wilson_intervals_unless_told_not_to() {
    let dir = TempDir::new().unwrap();
    let query = "SELECT (value % 10) / 10.0 + 0.05 AS p, CAST(value % 3 = 0 AS INT) AS y
                 FROM generate_series(1, 300)";
    for (flags, name) in [
        (&[][..], "with.svg"),
        (&["--no-intervals"][..], "without.svg"),
    ] {
        calibsql(dir.path())
            .args([
                "plot",
                "reliability",
                "-q",
                "--bins",
                "10",
                "-o",
                name,
                "-c",
                query,
            ])
            .args(flags)
            .assert()
            .success();
    }
    let with = std::fs::read_to_string(dir.path().join("with.svg")).unwrap();
    let without = std::fs::read_to_string(dir.path().join("without.svg")).unwrap();
    assert!(with.contains("95% Wilson interval"), "no interval legend");
    assert!(
        !without.contains("Wilson"),
        "--no-intervals still draws them"
    );
    // One bar (a six-point path) per non-empty bin: ten more paths than without.
    let paths = |svg: &str| svg.matches("<polyline").count() + svg.matches("<path").count();
    assert!(
        paths(&with) >= paths(&without) + 10,
        "{} paths with intervals, {} without",
        paths(&with),
        paths(&without)
    );
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
