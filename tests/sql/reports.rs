//! Every `.sql` file in `sql/` runs, the way its header says, on data from `calibsql generate`:
//! reports with `calibsql -f`, diagram queries (`reliability_*.sql`) with
//! `calibsql plot reliability -f`.

use std::path::{Path, PathBuf};

use crate::command::calibsql;
use tempfile::TempDir;

/// Runs the report `file` in `dir` over `tables` (`--table` arguments) as CSV; its stdout,
/// after checking that it succeeded.
fn run_report(dir: &Path, tables: &[&str], file: &Path) -> String {
    let output = calibsql(dir)
        .args(tables)
        .args(["--format", "csv", "-f"])
        .arg(file)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}: {}",
        file.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Runs `calibsql plot ARGS -o svg` in `dir`; the drawing and stderr, after checking that it
/// succeeded.
fn plot(dir: &Path, args: &[&str], svg: &Path) -> (String, String) {
    let output = calibsql(dir)
        .arg("plot")
        .args(args)
        .arg("-o")
        .arg(svg)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "plot {args:?}: {stderr}");
    (std::fs::read_to_string(svg).unwrap(), stderr)
}

fn sql_files() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("sql");
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "sql"))
        .collect();
    files.sort();
    files
}

#[test]
fn every_sql_file_runs_on_generated_data() {
    let dir = TempDir::new().unwrap();
    calibsql(dir.path())
        .args([
            "generate", "--rows", "20000", "--out", "data", "--seed", "3",
        ])
        .assert()
        .success()
        .stdout("");
    let tables = ["--table", "valid=data/valid", "--table", "test=data/test"];
    let files = sql_files();
    assert!(files.len() >= 3, "{files:?}");
    for file in files {
        let name = file.file_name().unwrap().to_str().unwrap().to_string();
        let text = std::fs::read_to_string(&file).unwrap();
        // The header says how to run the file.
        let header: String = text
            .lines()
            .take_while(|line| line.starts_with("--"))
            .collect::<Vec<_>>()
            .join("\n");
        assert!(
            header.contains(&format!("-f sql/{name}"))
                && header.contains("--table valid=")
                && header.contains("--table test="),
            "{name}: the header must show the command that runs it:\n{header}"
        );
        if name.starts_with("reliability_") {
            let svg = dir.path().join(name.replace(".sql", ".svg"));
            let mut args = vec!["reliability"];
            args.extend(tables);
            args.extend(["-f", file.to_str().unwrap()]);
            let (drawing, _) = plot(dir.path(), &args, &svg);
            assert!(
                drawing.starts_with("<svg") && drawing.contains("ECE"),
                "{name}"
            );
        } else if name.starts_with("report") {
            // The calibration report's query (`calibsql report`, docs/report.md).
            let page = dir.path().join(name.replace(".sql", ".html"));
            calibsql(dir.path())
                .arg("report")
                .args(tables)
                .args(["--field", "site_id", "-f"])
                .arg(&file)
                .arg("-o")
                .arg(&page)
                .assert()
                .success();
            let html = std::fs::read_to_string(&page).unwrap();
            assert!(html.contains("id=\"calibsql-data\""), "{name}");
        } else {
            let stdout = run_report(dir.path(), &tables, &file);
            // A header line and at least two method rows, every number finite.
            let lines: Vec<&str> = stdout.lines().collect();
            assert!(lines.len() >= 3, "{name}: {stdout}");
            assert!(
                lines[0].starts_with("method,") || lines[0].starts_with("day,model,"),
                "{name}: {stdout}"
            );
            assert!(
                !stdout.contains("NaN") && !stdout.contains("inf"),
                "{name}: {stdout}"
            );
        }
    }
}

/// `sql/monitoring.sql` on a log with drift injected from day 10 (`generate --drift-day`):
/// the CTR model's daily ECE is flagged on the drifted days and on none of the reference
/// week, and `plot metric` draws the chart its header shows.
#[test]
fn monitoring_flags_the_injected_drift_and_draws_the_chart() {
    let dir = TempDir::new().unwrap();
    calibsql(dir.path())
        .args([
            "generate", "--rows", "200000", "--out", "drift", "--seed", "5",
        ])
        .args(["--days", "14", "--drift-day", "10", "--drift-factor", "1.6"])
        .assert()
        .success();
    let tables = ["--table", "valid=drift/valid", "--table", "test=drift/test"];
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("sql/monitoring.sql");
    let stdout = run_report(dir.path(), &tables, &file);
    // day,model,n,ece,ece_7d,ece_flag,…
    let mut flagged_after = 0;
    for line in stdout.lines().skip(1) {
        let cells: Vec<&str> = line.split(',').collect();
        let (day, model, flag): (u32, &str, &str) = (cells[0].parse().unwrap(), cells[1], cells[5]);
        if model != "ctr" {
            continue;
        }
        if day < 7 {
            assert_eq!(flag, "", "reference day flagged: {line}");
        }
        if day >= 10 && flag == "DRIFT" {
            flagged_after += 1;
        }
    }
    assert_eq!(flagged_after, 4, "{stdout}");
    let svg = dir.path().join("drift.svg");
    let mut args = vec!["metric"];
    args.extend(tables);
    args.extend([
        "-f",
        file.to_str().unwrap(),
        "-c",
        "SELECT day AS x, ece AS value, ece_lower AS lower, ece_upper AS upper, model AS series FROM monitoring",
    ]);
    let (drawing, stderr) = plot(dir.path(), &args, &svg);
    assert!(drawing.starts_with("<svg") && drawing.contains("ctr"));
    assert!(stderr.contains("outside their band"));
}
