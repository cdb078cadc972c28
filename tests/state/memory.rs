//! Memory limits hold for the aggregates that keep rows (`auc`, `'quantile'` bins, the fits
//! that keep every distinct score): under `--memory-limit` the unweighted rows of `auc`'s
//! family spill to the disk manager's temporary directory (removed afterwards) and give the
//! unlimited result; a state that cannot spill and needs more fails with DataFusion's
//! "Resources exhausted" error instead of growing; and the process's peak resident memory
//! stays within
//! the documented bound: the same process's peak for a query that keeps nothing, plus 3 times
//! the limit without GROUP BY and 8 times with it, 5 times for the fits (partial states are
//! copied into Arrow arrays when they move between partitions;
//! docs/SEMANTICS.md#metrics-that-keep-rows). Real processes: the
//! `calibsql` binary, its peak read from its own /proc/self/status (`CALIBSQL_PEAK_RSS=1`).
//!
//! The bound is relative to the baseline measured in the same run, and every run uses 2
//! partitions (the default on the 2-core machine the bound was measured on), so it does not
//! move with the machine's core count: more partitions would hold more partial states.

use std::path::Path;

use crate::child;

/// Partitions of every run (see the module's doc).
const PARTITIONS: &str = "2";

/// Runs `sql` over `t` under `limit`; returns (success, stdout as CSV, stderr, peak RSS in
/// MiB).
fn run(dir: &Path, limit: &str, sql: &str) -> (bool, String, String, u64) {
    run_with(dir, &["--memory-limit", limit], sql)
}

/// [`run`] with `flags` (a memory limit, or none).
fn run_with(dir: &Path, flags: &[&str], sql: &str) -> (bool, String, String, u64) {
    run_on(dir, PARTITIONS, flags, sql)
}

/// [`run_with`] on `partitions` partitions, with `dir/tmp` as the temporary directory, which
/// must be empty again when the process has ended.
fn run_on(dir: &Path, partitions: &str, flags: &[&str], sql: &str) -> (bool, String, String, u64) {
    let tmp = dir.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let output = child::output(
        "calibsql",
        child::calibsql(dir)
            .env("CALIBSQL_PEAK_RSS", "1")
            .env("TMPDIR", &tmp)
            .args(flags)
            .args([
                "--target-partitions",
                partitions,
                "--format",
                "csv",
                "--table",
                "t=rows.parquet",
                "-c",
                sql,
            ]),
        child::TIMEOUT,
    );
    let stdout = String::from_utf8_lossy(&output.stdout).to_string();
    let stderr = String::from_utf8_lossy(&output.stderr).to_string();
    let left: Vec<_> = std::fs::read_dir(&tmp).unwrap().flatten().collect();
    assert!(
        left.is_empty(),
        "{sql}: left in the temporary directory: {left:?}"
    );
    let peak = stderr
        .lines()
        .find_map(|l| l.strip_prefix("calibsql: peak RSS "))
        .and_then(|s| s.trim_end_matches(" MiB").parse().ok())
        .unwrap_or_else(|| panic!("no peak RSS line in {stderr}"));
    (output.status.success(), stdout, stderr, peak)
}

/// Writes `rows.parquet` in `dir` with `COPY (select) TO 'rows.parquet'`.
fn write_rows(dir: &Path, select: &str) {
    let copy = format!("COPY ({select}) TO 'rows.parquet'");
    let output = child::output(
        "calibsql COPY",
        child::calibsql(dir).args(["-c", &copy]),
        child::TIMEOUT,
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Writes `rows` rows of distinct probabilities `p` (a multiplicative hash of the row
/// number), labels `y` (every third row positive) and 100 sites.
fn write_distinct_scores(dir: &Path, rows: u64) {
    write_rows(
        dir,
        &format!(
            "SELECT (((value * 2654435761) % 4294967311) + 0.5) / 4294967312.0 AS p,
                    CAST(value % 3 = 0 AS INT) AS y, value % 100 AS site
             FROM generate_series(1, {rows})"
        ),
    );
}

/// Asserts that `sql` runs under `limit` MiB with the result it gives without a limit
/// (numbers to 1e-12 relative), at a peak RSS within `baseline` + `multiple` × the limit.
fn assert_unlimited_result_under(dir: &Path, limit: u64, sql: &str, baseline: u64, multiple: u64) {
    assert_spilled_result_under(dir, limit, sql, baseline, multiple, 0);
}

/// [`assert_unlimited_result_under`], the peak RSS also allowed `spilled` MiB: rows spilled
/// to disk are read through a memory map, and the pages read count in the resident memory
/// (as page cache the kernel can drop).
fn assert_spilled_result_under(
    dir: &Path,
    limit: u64,
    sql: &str,
    baseline: u64,
    multiple: u64,
    spilled: u64,
) {
    let (ok, unlimited, stderr, _) = run_with(dir, &[], sql);
    assert!(ok, "{sql} without a limit: {stderr}");
    let (ok, limited, stderr, peak) = run(dir, &format!("{limit}M"), sql);
    assert!(ok, "{sql} under {limit}M: {stderr}");
    assert_same_numbers(&limited, &unlimited, sql);
    assert!(
        peak <= baseline + multiple * limit + spilled,
        "{sql}: peak RSS {peak} MiB, more than {baseline} MiB (a query keeping nothing) + {multiple} × {limit} MiB + {spilled} MiB spilled"
    );
}

/// 2M distinct probabilities (16 MB of scores) under an 8 MB limit: every aggregate of
/// `auc`'s family spills its rows and gives the unlimited result (numbers to 1e-12 relative;
/// the same query limited and not, so this compares the code with itself: the values are
/// checked against their references in the functions' own tests), within the bound (plus
/// the 16 MB an aggregate reads back through its map, and with GROUP BY the repartition's
/// copies of the partial states), and leaves nothing in the temporary directory. Weighted
/// rows spill too, their weights beside their scores, and `auc_test`'s pairs.
#[test]
fn row_keeping_aggregates_spill_under_the_memory_limit() {
    let dir = child::scratch_dir("memory-");
    write_distinct_scores(dir.path(), 2_000_000);
    let (ok, _, _, baseline) = run(dir.path(), "8M", "SELECT avg(p), avg(y) FROM t");
    assert!(ok);
    // (query, multiple of the limit, MiB of rows read back through maps or copied outside
    // the pool: 16 an aggregate, twice that with GROUP BY, whose partial states the hash
    // repartition copies into new arrays on their way to the final aggregation).
    for (sql, multiple, spilled) in [
        ("SELECT auc(p, y) FROM t", 3, 16),
        ("SELECT auc_interval(p, y) FROM t", 3, 16),
        ("SELECT ece(p, y, 15, 'quantile') FROM t", 3, 16),
        ("SELECT ece_debiased(p, y) FROM t", 3, 16),
        ("SELECT calibration_decomposition(p, y) FROM t", 3, 16),
        ("SELECT hosmer_lemeshow(p, y) FROM t", 3, 16),
        ("SELECT auc(p, y), ece(p, y, 15, 'quantile') FROM t", 3, 32),
        // Summed over the sites: an ORDER BY would need DataFusion's sort reservation (10 MB
        // by default), more than the limit.
        (
            "SELECT sum(a), sum(e), count(*) FROM (SELECT site, auc(p, y) AS a, \
             ece(p, y, 10, 'quantile') AS e FROM t GROUP BY site)",
            8,
            64,
        ),
    ] {
        assert_spilled_result_under(dir.path(), 8, sql, baseline, multiple, spilled);
    }
    // Weighted rows spill their weights beside their scores (16 bytes a row: 32 MiB), and a
    // weighted reader merges a class's runs into one spilled run (both files mapped a while).
    for sql in [
        "SELECT auc(p, y, 1.0 + site) FROM t",
        "SELECT ece(p, y, 15, 'quantile', 1.0 + site) FROM t",
        "SELECT calibration_decomposition(p, y, 'brier', 1.0 + site) FROM t",
    ] {
        assert_spilled_result_under(dir.path(), 8, sql, baseline, 3, 64);
    }
    // auc_test keeps both scores of a row, the second in a weight's place (32 MiB), and a
    // copy of them by the second score (32 MiB more) while it finishes: both spill.
    for sql in [
        "SELECT auc_test(p, 1.0 - p, y) FROM t",
        "SELECT auc_test(p, (p + site % 10) / 10.0, y) FROM t",
    ] {
        assert_spilled_result_under(dir.path(), 8, sql, baseline, 3, 64);
    }
    assert_spilled_result_under(
        dir.path(),
        8,
        "SELECT sum(r['z']), sum(r['se']), count(*) FROM (SELECT site, \
         auc_test(p, (p + site % 10) / 10.0, y) AS r FROM t GROUP BY site)",
        baseline,
        8,
        128,
    );
}

/// Weighted rows with integer weights give what their rows repeated that many times give
/// unweighted: an identity, not the code against itself, since the unweighted `auc` counts
/// in exact integers and the weighted one sums weights, over other paths (runs of the
/// partitions' sorted rows read where they lie, unlimited; spilled runs merged, under 8 MB).
/// 300,000 distinct scores, weights 1 to 3.
#[test]
fn weighted_kept_rows_equal_their_rows_repeated() {
    let dir = child::scratch_dir("memory-");
    write_distinct_scores(dir.path(), 300_000);
    let repeated = "FROM t JOIN generate_series(1, 3) AS g(k) ON g.k <= 1 + t.site % 3";
    let weight = "CAST(1 + site % 3 AS DOUBLE)";
    for (weighted, unweighted) in [
        (
            format!("SELECT auc(p, y, {weight}) FROM t"),
            format!("SELECT auc(p, y) {repeated}"),
        ),
        (
            format!("SELECT calibration_decomposition(p, y, 'brier', {weight}) FROM t"),
            format!("SELECT calibration_decomposition(p, y, 'brier') {repeated}"),
        ),
        (
            format!("SELECT ece(p, y, 15, 'uniform', {weight}) FROM t"),
            format!("SELECT ece(p, y, 15, 'uniform') {repeated}"),
        ),
    ] {
        let (ok, want, stderr, _) = run_with(dir.path(), &[], &unweighted);
        assert!(ok, "{unweighted}: {stderr}");
        for flags in [&[][..], &["--memory-limit", "8M"][..]] {
            let (ok, got, stderr, _) = run_with(dir.path(), flags, &weighted);
            assert!(ok, "{weighted} {flags:?}: {stderr}");
            let (got, want) = (got.lines().nth(1).unwrap(), want.lines().nth(1).unwrap());
            assert_same_numbers(got, want, &weighted);
        }
    }
}

/// `auc` over scores that repeat counts each group's rows per distinct score once it has
/// 65,536 of them, so 3M rows with 100 distinct scores (24 MB as rows) run under a limit of
/// 8 MB. Expected values: scikit-learn `roc_auc_score(y, p)` on the same rows rebuilt in
/// numpy with the same integer and float arithmetic (i = 1..3,000,000;
/// p = floor(((i * 2654435761) % 1000003) / 1000003.0 * 100) / 100;
/// y = ((i * 40503) % 999983) / 999983.0 < p), cross-checked against the rank-sum
/// Mann–Whitney U (scipy.stats.rankdata), as tests/slt/gen/auc.py does for 600,000 rows.
#[test]
fn auc_of_repeating_scores_runs_under_a_limit_its_rows_would_not_fit() {
    let dir = child::scratch_dir("memory-");
    write_rows(
        dir.path(),
        "SELECT i, p, CAST(((i * 40503) % 999983) / 999983.0 < p AS INT) AS y
         FROM (SELECT value AS i,
                      floor(((value * 2654435761) % 1000003) / 1000003.0 * 100) / 100 AS p
               FROM generate_series(1, 3000000))",
    );
    for (sql, want) in [
        (
            "SELECT abs(auc(p, y) - 0.833334948775415) < 1e-12 FROM t",
            "true",
        ),
        (
            "SELECT i % 2, abs(auc(p, y) - CASE i % 2 WHEN 0 THEN 0.8333296701720476 \
             ELSE 0.8333402262590703 END) < 1e-12 FROM t GROUP BY i % 2",
            "0,true\n1,true",
        ),
    ] {
        let (ok, stdout, stderr, _) = run(dir.path(), "8M", sql);
        assert!(ok, "{sql}: {stderr}");
        // Sorted here: an ORDER BY would need DataFusion's sort reservation (10 MB by
        // default), more than the limit.
        let mut rows: Vec<&str> = stdout.lines().skip(1).collect();
        rows.sort_unstable();
        assert_eq!(rows.join("\n"), want, "{sql}");
    }
}

/// Asserts that two outputs are the same text with the same numbers up to 1e-12 relative:
/// sums of floats may add the partitions' parts in another order from one run to the next.
fn assert_same_numbers(a: &str, b: &str, what: &str) {
    let split = |s: &str| -> (String, Vec<f64>) {
        let mut text = String::new();
        let mut numbers = vec![];
        let mut token = String::new();
        let flush = |token: &mut String, text: &mut String, numbers: &mut Vec<f64>| {
            match token.parse::<f64>() {
                Ok(x) if !token.is_empty() => {
                    numbers.push(x);
                    text.push('#');
                }
                _ => text.push_str(token),
            }
            token.clear();
        };
        for c in s.chars() {
            if c.is_ascii_digit() || matches!(c, '.' | '-' | 'e' | 'E' | '+') {
                token.push(c);
            } else {
                flush(&mut token, &mut text, &mut numbers);
                text.push(c);
            }
        }
        flush(&mut token, &mut text, &mut numbers);
        (text, numbers)
    };
    let ((text_a, xs), (text_b, ys)) = (split(a), split(b));
    assert_eq!(text_a, text_b, "{what}: {a} against {b}");
    assert_eq!(xs.len(), ys.len(), "{what}: {a} against {b}");
    for (x, y) in xs.iter().zip(&ys) {
        let tolerance = 1e-12 * x.abs().max(1.0);
        assert!(
            (x - y).abs() <= tolerance,
            "{what}: {x} against {y} ({a} against {b})"
        );
    }
}

/// Every aggregate that keeps rows, under a limit its rows fit in (6M distinct scores: 48 MB
/// of rows against 128 MB), gives the result it gives without a limit, and stays within the
/// same bound as above. The rows' vectors grow by an eighth, not by doubling, past 8 MiB
/// (`values::make_room`): a doubled vector claims up to twice what it holds from the pool.
/// This compares the code with itself (the same query, limited and not; numbers to 1e-12
/// relative): the values are checked against their references in the functions' own tests.
#[test]
fn row_keeping_aggregates_under_a_limit_their_rows_fit_give_the_unlimited_result() {
    let dir = child::scratch_dir("memory-");
    write_distinct_scores(dir.path(), 6_000_000);
    let (ok, _, stderr, baseline) = run(dir.path(), "128M", "SELECT avg(p), avg(y) FROM t");
    assert!(ok, "{stderr}");
    for aggregate in [
        "auc(p, y)",
        "auc_interval(p, y)",
        "ece(p, y, 15, 'quantile')",
        "ece_debiased(p, y)",
        "calibration_decomposition(p, y)",
        "hosmer_lemeshow(p, y)",
    ] {
        let sql = format!("SELECT {aggregate} FROM t");
        assert_unlimited_result_under(dir.path(), 128, &sql, baseline, 3);
    }
}

/// The fits that keep every distinct score (the non-parametric ones and the field-aware
/// ones) report their states to the pool: on 2M distinct probabilities they fail cleanly
/// under 16 MB, and under 64 MB give the model they give without a limit. Their peak stays
/// under 5 × the limit above a query keeping nothing: besides the pool's bytes, a partial
/// state is copied into Arrow arrays when it moves, and `fit_field_calib`'s solver holds its
/// nodes (40 bytes a distinct score) while it runs. This compares the code with itself (the
/// same query, limited and not; numbers to 1e-12 relative): the models are checked against
/// scikit-learn, numpy, netcal and scipy in tests/fits.
#[test]
fn fits_under_a_limit_their_states_fit_give_the_unlimited_model() {
    let dir = child::scratch_dir("memory-");
    write_distinct_scores(dir.path(), 2_000_000);
    let (ok, _, stderr, baseline) = run(dir.path(), "64M", "SELECT avg(p), avg(y) FROM t");
    assert!(ok, "{stderr}");
    for fit in [
        "fit_isotonic(p, y)",
        "fit_histogram(p, y, 15, 'quantile')",
        "fit_bbq(p, y)",
        "fit_confcalib(p, y, site)",
        "fit_field_calib(p, y, site)",
    ] {
        let sql = format!("SELECT {fit} FROM t");
        let (ok, _, stderr, _) = run(dir.path(), "16M", &sql);
        assert!(
            !ok && stderr.contains("Resources exhausted"),
            "{sql} under 16M: {stderr}"
        );
        assert_unlimited_result_under(dir.path(), 64, &sql, baseline, 5);
    }
}

/// A fit without `GROUP BY` whose partition holds 2^20 rows or more hands them on unsorted,
/// and the final aggregation sorts them (below the exact cap) or proves them past it without
/// sorting (a cap of 1M set for the session): on one partition (3M rows, unsorted) the
/// models are those of four (750,000 rows each, sorted), numbers to 1e-12 relative. This
/// compares the code with itself; the models are checked against scikit-learn, numpy and
/// netcal in tests/fits.
#[test]
fn large_partitions_hand_their_rows_on_unsorted_with_the_same_model() {
    let dir = child::scratch_dir("memory-");
    write_distinct_scores(dir.path(), 3_000_000);
    let fits =
        "SELECT fit_isotonic(p, y), fit_histogram(p, y, 15, 'quantile'), fit_bbq(p, y) FROM t";
    for sql in [
        fits.to_string(),
        format!("SET calibsql.fit_exact_cap = 1000000; {fits}"),
    ] {
        let (ok, one, stderr, _) = run_on(dir.path(), "1", &[], &sql);
        assert!(ok, "{sql} on one partition: {stderr}");
        let (ok, four, stderr, _) = run_on(dir.path(), "4", &[], &sql);
        assert!(ok, "{sql} on four partitions: {stderr}");
        assert_same_numbers(&one, &four, &sql);
    }
}

/// One call of every registered aggregate (its `_state`/`_merge` twins aside), over the
/// columns of [`every_aggregate_under_a_limit_gives_the_unlimited_result`]'s file.
const EVERY_CALL: &[&str] = &[
    "ace(p, y)",
    "auc(p, y)",
    "auc(p, y, 1.0 + site % 3)",
    "auc_interval(p, y)",
    "auc_test(p, propensity, y)",
    "cbpe(p)",
    "cbpe(p, 0.3, 1.0 + site % 3)",
    "brier(p, y)",
    "calibration_decomposition(p, y)",
    "calibration_slope(p, y)",
    "ece(p, y)",
    "ece(p, y, 15, 'quantile')",
    "ece(p, y, 15, 'quantile', 1.0 + site % 3)",
    "ece_debiased(p, y)",
    "ece_diff_interval(p, propensity, y, site)",
    "ece_interval(p, y, site)",
    "field_bias(p, y, site)",
    "field_ece(p, y, site)",
    "field_rce(p, y, site)",
    "fit_bbq(p, y)",
    "fit_beta_calib(p, y)",
    "fit_confcalib(p, y, site)",
    "fit_field_calib(score, y, site)",
    "fit_gamma_calib(score, y)",
    "fit_gaussian_calib(score, y)",
    "fit_histogram(score, y)",
    "fit_ilps(score, y)",
    "fit_isotonic(score, y)",
    "fit_platt(score, y)",
    "fit_temperature(score, y)",
    "hosmer_lemeshow(p, y)",
    "ips_logloss(p, y, propensity)",
    "logloss(p, y)",
    "mce(p, y)",
    "multi_field_rce(p, y, site, site % 7)",
    "mvce(p, y, site)",
    "ece_top_label(make_array(p / 2, p / 2, 1 - p), y, 10, 'quantile')",
    "mce_top_label(make_array(p / 2, p / 2, 1 - p), y)",
    "reliability_top_label(make_array(p / 2, p / 2, 1 - p), y, 10, 'kumar')",
    "ece_classwise(make_array(p / 2, p / 2, 1 - p), y, 10, 'quantile')",
    "auc(make_array(p / 2, p / 2, 1 - p), y)",
    "fit_ovr(make_array(p / 2, p / 2, 1 - p), y)",
    "fit_temperature(make_array(p, 1 - p), y)",
    "normalized_entropy(p, y)",
    "reliability(p, y)",
    "rmsce(p, y)",
    "smooth_ece(p, y)",
    "spiegelhalter(p, y)",
];

/// The fits whose states keep every distinct score without spilling (docs/SEMANTICS.md,
/// "What stays in memory").
const HELD_FITS: [&str; 5] = [
    "fit_bbq",
    "fit_confcalib",
    "fit_field_calib",
    "fit_histogram",
    "fit_isotonic",
];

/// Every aggregate runs under a memory limit and gives the result it gives without one,
/// numbers to 1e-12 relative: 3 MB over 300,000 distinct scores (2.4 MB a column of rows,
/// 4.8 MB of `auc_test`'s pairs, so the rows that keep every value spill), 16 MB for the
/// fits that hold every distinct score in memory ([`HELD_FITS`]; they fail under 3 MB) and
/// for `fit_ovr`, which holds a fit's state per class (a 2.7 MB state each), and 32 MB for
/// `fit_temperature` on a list of logits, which keeps every row (9.6 MB here). This compares the
/// code with itself (the same query, limited and not): the values are checked against
/// their references in the functions' own tests. A registered aggregate without a call in
/// [`EVERY_CALL`] fails the test, so a new function gets one.
#[test]
fn every_aggregate_under_a_limit_gives_the_unlimited_result() {
    let missing = crate::support::aggregates_without_a_call(EVERY_CALL.iter().copied());
    assert!(missing.is_empty(), "aggregates without a call: {missing:?}");
    let dir = child::scratch_dir("memory-");
    write_rows(
        dir.path(),
        "SELECT p, CAST(((value * 40503) % 999983) / 999983.0 < p AS INT) AS y,
                ln(p / (1.0 - p)) AS score, 0.05 + 0.95 * ((value * 7919) % 1009) / 1009.0 AS propensity,
                value % 100 AS site
         FROM (SELECT value, (((value * 2654435761) % 4294967311) + 0.5) / 4294967312.0 AS p
               FROM generate_series(1, 300000))",
    );
    for call in EVERY_CALL {
        let sql = format!("SELECT {call} FROM t");
        let (ok, unlimited, stderr, _) = run_with(dir.path(), &[], &sql);
        assert!(ok, "{sql}: {stderr}");
        // The fits that keep every distinct score hold it without spilling: a limit their
        // states fit in. Every other state is bounded or spills.
        let held = HELD_FITS
            .iter()
            .chain(&["fit_ovr"])
            .any(|f| call.starts_with(&format!("{f}(")));
        // Multiclass temperature scaling keeps every row: 32 bytes a row of two classes.
        let rows = call.starts_with("fit_temperature(make_array");
        let limit = match (held, rows) {
            (_, true) => "32M",
            (true, _) => "16M",
            _ => "3M",
        };
        let (ok, limited, stderr, _) = run(dir.path(), limit, &sql);
        assert!(ok, "{sql} under {limit}: {stderr}");
        assert_same_numbers(&limited, &unlimited, &sql);
    }
}
