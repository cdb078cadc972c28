//! What a careless or hostile statement meets in the CLI: deep expressions refused by name
//! (never a stack overflow), results that grow with an argument's value refused under
//! `--memory-limit` with the process's peak memory measured, and Ctrl-C stopping a
//! nested-loop join in its operators. (The server's and the Python module's entry points:
//! python/tests/test_hardening.py.)

use std::path::Path;
use std::time::{Duration, Instant};

use super::child;
use super::command::calibsql;
use predicates::prelude::PredicateBooleanExt;

/// `SELECT p + p + … + p` with `terms` terms.
fn chain(terms: usize) -> String {
    format!(
        "SELECT {} AS s FROM t LIMIT 1",
        vec!["p"; terms].join(" + ")
    )
}

fn table(dir: &Path) {
    std::fs::write(dir.join("t.csv"), "p,y\n0.25,1\n0.5,0\n").unwrap();
}

#[test]
fn deep_expressions_are_refused_by_name_in_every_form() {
    let dir = tempfile::TempDir::new().unwrap();
    table(dir.path());
    // Under the limit: the value (999 times 0.25, exactly representable).
    let sql = dir.path().join("ok.sql");
    std::fs::write(&sql, chain(999)).unwrap();
    calibsql(dir.path())
        .args(["-t", "t=t.csv", "--format", "csv", "-f"])
        .arg(&sql)
        .assert()
        .success()
        .stdout("s\n249.75\n");
    for terms in [5_000, 20_000, 100_000] {
        let sql = dir.path().join(format!("chain{terms}.sql"));
        std::fs::write(&sql, chain(terms)).unwrap();
        let out = calibsql(dir.path())
            .args(["-t", "t=t.csv", "-f"])
            .arg(&sql)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{terms} terms: {stderr}");
        assert!(
            stderr.contains("expression nested deeper than 1000 levels (calibsql's limit)"),
            "{terms} terms: {stderr}"
        );
    }
    // The same through standard input, the REPL's and scripts' way in.
    calibsql(dir.path())
        .args(["-t", "t=t.csv", "-f", "-"])
        .write_stdin(chain(20_000))
        .assert()
        .code(1)
        .stderr(predicates::str::contains("nested deeper than 1000 levels"));
    let unions = vec!["SELECT 1 AS x"; 5_000].join(" UNION ALL ");
    calibsql(dir.path())
        .args(["-c", &unions])
        .assert()
        .code(1)
        .stderr(predicates::str::contains("more than 1000 set operations"));
    // Nesting the parser itself recurses into stops at its own limit (50), named: sqlparser
    // says "recursion limit exceeded" for some forms and "Expected: ), found: ELSE" for a
    // CASE with ELSE in a CASE.
    let case = |depth: usize, otherwise: &str| {
        format!(
            "SELECT {}p{} AS c FROM t",
            "CASE WHEN p > 0.1 THEN ".repeat(depth),
            format!(" {otherwise} END").repeat(depth)
        )
    };
    let subqueries = format!("SELECT {}1{}", "(SELECT ".repeat(200), ")".repeat(200));
    for sql in [
        case(100, ""),
        case(60, "ELSE 0"),
        case(1200, "ELSE 0"),
        subqueries,
    ] {
        let out = calibsql(dir.path())
            .args(["-t", "t=t.csv", "-c", &sql])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(
            stderr.contains(
                "the statement nests deeper than the parser's limit of 50 levels \
                 (datafusion.sql_parser.recursion_limit, which SET can raise up to 1000)"
            ),
            "{stderr}"
        );
    }
    // Raised, 400 levels of CASE answer (p = 0.25 and 0.5 pass every test).
    calibsql(dir.path())
        .args(["-t", "t=t.csv", "--format", "csv", "-c"])
        .arg("SET datafusion.sql_parser.recursion_limit = 1000")
        .arg("-c")
        .arg(case(400, "ELSE 0").replace("AS c FROM t", "AS c FROM t ORDER BY c"))
        .assert()
        .success()
        .stdout("c\n0.25\n0.5\n");
    // A syntax error is still the parser's own.
    calibsql(dir.path())
        .args(["-c", "SELECT CASE WHEN 1 > 0 THEN 2 ELSE END"])
        .assert()
        .code(1)
        .stderr(
            predicates::str::contains("SQL error").and(predicates::str::contains("nests").not()),
        );
}

/// The peak resident memory the binary reports at exit (`CALIBSQL_PEAK_RSS=1`), in MiB.
fn peak_mib(stderr: &str) -> u64 {
    let line = stderr
        .lines()
        .find_map(|l| l.strip_prefix("calibsql: peak RSS "))
        .unwrap_or_else(|| panic!("no peak RSS line in {stderr}"));
    line.trim_end_matches(" MiB").parse().unwrap()
}

#[test]
fn results_that_grow_with_an_argument_stay_within_the_memory_limit() {
    let dir = tempfile::TempDir::new().unwrap();
    table(dir.path());
    let cases = [
        (
            "SELECT length(repeat('x', 2000000000)) AS n",
            "repeat: the result would take up to 1.9 GB (argument 2 = 2000000000)",
        ),
        (
            "SELECT length(lpad('a', 2000000000)) AS n",
            "lpad: the result would take up to 7.5 GB (argument 2 = 2000000000)",
        ),
        (
            "SELECT length(rpad('a', 2000000000, 'b')) AS n",
            "rpad: the result would take up to 7.5 GB",
        ),
        (
            "SELECT cardinality(array_repeat(1.5, 500000000)) AS n",
            "array_repeat: the result would take up to 3.7 GB (argument 2 = 500000000)",
        ),
        (
            "SELECT cardinality(array_resize([1.5], 500000000)) AS n",
            "array_resize: the result would take up to 3.7 GB",
        ),
        (
            "SELECT cardinality(range(0, 1000000000)) AS n",
            "range: the result would take up to 7.5 GB",
        ),
        (
            "SELECT cardinality(generate_series(1, 1000000000)) AS n",
            "generate_series: the result would take up to 7.5 GB",
        ),
        (
            "SELECT length(regexp_replace(repeat('ab', 10000), '', repeat('x', 100000), 'g')) AS n",
            "regexp_replace: the result would take up to 1.9 GB",
        ),
        (
            "SELECT length(replace(repeat('ab', 10000), 'a', repeat('x', 100000))) AS n",
            "replace: the result would take up to 1.9 GB",
        ),
        // A column argument: the batch's rows together, and the way to smaller batches.
        (
            "SELECT sum(length(repeat('x', CAST(p * 2000000000 AS BIGINT)))) AS n FROM t",
            "at the most), more than the 128.0 MB",
        ),
    ];
    for (sql, message) in cases {
        let out = calibsql(dir.path())
            .args(["--memory-limit", "512M", "-t", "t=t.csv", "-c", sql])
            .env("CALIBSQL_PEAK_RSS", "1")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{sql}: {stderr}");
        assert!(stderr.contains(message), "{sql}: {stderr}");
        assert!(
            stderr.contains("--memory-limit 512.0 MB"),
            "{sql}: {stderr}"
        );
        let peak = peak_mib(&stderr);
        assert!(peak < 768, "{sql}: peak RSS {peak} MiB over 1.5 x 512 MiB");
    }
    // Under the ceiling (a quarter of the limit) the value, within the promise.
    let out = calibsql(dir.path())
        .args(["--memory-limit", "512M", "--format", "csv", "-c"])
        .arg("SELECT length(repeat('x', 100000000)) AS n, length(replace(repeat('ab', 1000), '', 'xyz')) AS m")
        .env("CALIBSQL_PEAK_RSS", "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "n,m\n100000000,2000\n"
    );
    let peak = peak_mib(&stderr);
    assert!(peak < 768, "peak RSS {peak} MiB over 1.5 x 512 MiB");
    // Without a limit, nothing is refused.
    calibsql(dir.path())
        .args([
            "--format",
            "csv",
            "-c",
            "SELECT length(repeat('x', 200000000)) AS n",
        ])
        .assert()
        .success()
        .stdout("n\n200000000\n");
}

#[test]
fn string_agg_and_array_agg_stay_within_the_memory_limit() {
    let dir = tempfile::TempDir::new().unwrap();
    // 150,000 values of 1,000 bytes (143 MB with the separators): more than the 128 MB a
    // function's result may take under 512 MB, refused as the values are added, before the
    // state holds them (DataFusion counts an aggregate's state only after each batch, and
    // then copies it: 200 MB of string_agg was answered at an 825 MiB peak, 400 MB at 1.4 GiB).
    let cases = [
        (
            "SELECT length(string_agg(repeat('x', 1000), ',')) AS n FROM generate_series(1, 150000)",
            "string_agg: its state would take ",
        ),
        (
            "SELECT length(string_agg(repeat('x', 1000), ',' ORDER BY value DESC)) AS n \
             FROM generate_series(1, 150000)",
            "string_agg: its state would take ",
        ),
        (
            "SELECT g, length(string_agg(repeat('x', 1000), ',')) AS n \
             FROM (SELECT value % 2 AS g FROM generate_series(1, 150000)) GROUP BY g",
            "string_agg: its state would take ",
        ),
        (
            "SELECT cardinality(array_agg(repeat('x', 1000))) AS n FROM generate_series(1, 150000)",
            "array_agg: its state would take ",
        ),
        // 200 MB of distinct values: the partitions' accumulators share one budget (each with
        // its own ceiling, they held 128 MB apiece and the process peaked at 940 MiB).
        (
            "SELECT length(string_agg(DISTINCT repeat('x', 1000) || value::text, ',')) AS n \
             FROM generate_series(1, 200000)",
            "string_agg: its state would take ",
        ),
        (
            "SELECT cardinality(array_agg(DISTINCT repeat('x', 1000) || value::text)) AS n \
             FROM generate_series(1, 200000)",
            "array_agg: its state would take ",
        ),
        // 120 MB with an ORDER BY counts twice (answered, it peaked at 923 MiB).
        (
            "SELECT length(string_agg(repeat('x', 1000), ',' ORDER BY value DESC)) AS n \
             FROM generate_series(1, 120000)",
            "string_agg: its state would take ",
        ),
        // Two aggregates of 80 MB each in one statement share the budget.
        (
            "SELECT length(string_agg(repeat('x', 1000), ',')) AS n, \
             cardinality(array_agg(repeat('y', 1000))) AS c FROM generate_series(1, 80000)",
            "_agg: its state would take ",
        ),
        // A billion bytes: refused long before.
        (
            "SELECT length(string_agg(repeat('x', 1000), ',')) AS n FROM generate_series(1, 1000000)",
            "string_agg: its state would take ",
        ),
    ];
    for (sql, message) in cases {
        let out = calibsql(dir.path())
            .args(["--memory-limit", "512M", "-c", sql])
            .env("CALIBSQL_PEAK_RSS", "1")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{sql}: {stderr}");
        assert!(stderr.contains(message), "{sql}: {stderr}");
        assert!(
            stderr.contains(
                "more than the 128.0 MB a function's result may take under --memory-limit 512.0 MB"
            ),
            "{sql}: {stderr}"
        );
        // Not a memory pool's "Resources exhausted", and none of its hints.
        assert!(!stderr.contains("hint"), "{sql}: {stderr}");
        let peak = peak_mib(&stderr);
        assert!(peak < 768, "{sql}: peak RSS {peak} MiB over 1.5 x 512 MiB");
    }
    // Under the ceiling, 100 MB of it, the answer within the promise.
    let out = calibsql(dir.path())
        .args(["--memory-limit", "512M", "--format", "csv", "-c"])
        .arg("SELECT length(string_agg(repeat('x', 1000), ',')) AS n FROM generate_series(1, 100000)")
        .env("CALIBSQL_PEAK_RSS", "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "n\n100099999\n");
    let peak = peak_mib(&stderr);
    assert!(peak < 768, "peak RSS {peak} MiB over 1.5 x 512 MiB");
    // 60 MB with an ORDER BY (120 MB counted) is answered, within the promise.
    let out = calibsql(dir.path())
        .args(["--memory-limit", "512M", "--format", "csv", "-c"])
        .arg(
            "SELECT length(string_agg(repeat('x', 1000), ',' ORDER BY value DESC)) AS n \
             FROM generate_series(1, 60000)",
        )
        .env("CALIBSQL_PEAK_RSS", "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "n\n60059999\n");
    let peak = peak_mib(&stderr);
    assert!(peak < 768, "peak RSS {peak} MiB over 1.5 x 512 MiB");
    // Small ones answer as without a limit: ordered, DISTINCT, grouped, a window frame
    // (values written by hand from the four rows).
    let sql = "CREATE VIEW v AS SELECT * FROM \
               (VALUES (1, 'b', 10), (1, 'a', 20), (2, 'c', 30), (1, 'a', 40)) t(g, s, n);
        SELECT string_agg(s, ',' ORDER BY n) AS a FROM v;
        SELECT string_agg(s, '-' ORDER BY s DESC, n) AS a FROM v;
        SELECT string_agg(DISTINCT s, '+' ORDER BY s) AS a FROM v;
        SELECT array_agg(n ORDER BY n DESC) AS a FROM v;
        SELECT array_agg(DISTINCT s ORDER BY s) AS a FROM v;
        SELECT g, length(string_agg(s, ',')) AS l, cardinality(array_agg(n)) AS c,
               string_agg(s, ',' ORDER BY n DESC) AS o FROM v GROUP BY g ORDER BY g;
        SELECT n, array_agg(n) OVER (ORDER BY n ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
               AS w FROM v ORDER BY n;";
    let expected = "a\n\"b,a,c,a\"\na\nc-b-a-a\na\na+b+c\na\n\"[40,30,20,10]\"\n\
                    a\n\"[\"\"a\"\",\"\"b\"\",\"\"c\"\"]\"\n\
                    g,l,c,o\n1,5,3,\"a,a,b\"\n2,1,1,c\n\
                    n,w\n10,[10]\n20,\"[10,20]\"\n30,\"[10,20,30]\"\n40,\"[10,20,30,40]\"\n";
    for limit in [&["--memory-limit", "512M"][..], &[]] {
        calibsql(dir.path())
            .args(limit)
            .args(["--format", "csv", "-c", sql])
            .assert()
            .success()
            .stdout(expected);
    }
}

/// A nested-loop join (no equality to hash) of 300,000 × 300,000 rows: minutes of work,
/// a handful of matches.
pub const NESTED_LOOP: &str = "SELECT count(*) AS n FROM generate_series(1, 300000) a \
    JOIN generate_series(1, 300000) b ON a.value + b.value = 7 OR a.value * b.value = 12";

#[test]
fn ctrl_c_stops_a_nested_loop_join_in_its_operators() {
    let dir = tempfile::TempDir::new().unwrap();
    let mut command = child::calibsql(dir.path());
    command.args(["-c", NESTED_LOOP]);
    // Started as a script's `cmd &` starts it, with SIGINT ignored: its handler still takes
    // the Ctrl-C (a `kill -INT` from the script).
    {
        use std::os::unix::process::CommandExt;
        // SAFETY: the hook runs in the forked child before exec and calls only signal, which
        // is async-signal-safe.
        unsafe {
            command.pre_exec(|| {
                libc::signal(libc::SIGINT, libc::SIG_IGN);
                Ok(())
            });
        }
    }
    let mut process = child::Child::spawn("calibsql", &mut command, None);
    // Wait for the CLI's Ctrl-C handler (before it, SIGINT's default ends the process, or, when
    // this test runs with SIGINT ignored, the SIGINT is lost); on a loaded machine the
    // start can take more than a few seconds.
    let listening = Instant::now();
    while !child::catches_sigint(process.id()) {
        assert!(
            listening.elapsed() < Duration::from_secs(120),
            "{}",
            process.stderr_tail()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Then let the join run: two CPU-seconds of the process (its start-up takes well under
    // one), so that the Ctrl-C reaches the running join, not a process still starting on a
    // loaded machine.
    let cpu_seconds = |pid: u32| -> f64 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map_or("", |(_, rest)| rest)
            .split_whitespace()
            .collect();
        let ticks = |i: usize| {
            fields
                .get(i)
                .and_then(|f| f.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        // SAFETY: sysconf has no preconditions.
        (ticks(11) + ticks(12)) / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
    };
    let running = Instant::now();
    while cpu_seconds(process.id()) < 2.0 {
        assert!(
            running.elapsed() < Duration::from_secs(120) && process.try_wait().is_none(),
            "{}",
            process.stderr_tail()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // SAFETY: signalling our own child by its pid.
    assert_eq!(unsafe { libc::kill(process.id() as i32, libc::SIGINT) }, 0);
    let interrupted = Instant::now();
    let status = process.wait();
    // The join alone runs for minutes; before its operators looked at the cancel flag the
    // process exited only when the join's poll returned (a hang guard here, not a timing).
    assert!(
        interrupted.elapsed() < Duration::from_secs(60),
        "the join went on for {:?} after Ctrl-C",
        interrupted.elapsed()
    );
    assert_eq!(status.code(), Some(130), "{}", process.stderr_tail());
}
