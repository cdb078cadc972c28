//! Bad input is part of the product: every function rejects bad values with one message that
//! names the function, the argument and the value, at planning time for mistakes in the call
//! and at execution time for bad data; nothing panics.

async fn error_of(sql: &str) -> String {
    let ctx = calibsql::new_context();
    let result = match ctx.sql(sql).await {
        Ok(df) => df.collect().await.map(|_| ()),
        Err(e) => Err(e),
    };
    match result {
        Ok(()) => panic!("expected an error from: {sql}"),
        Err(e) => e.strip_backtrace(),
    }
}

const T: &str = "(VALUES (0.2, 0, 1.0, 'a', 0.5), (0.7, 1, 2.0, 'b', 0.9)) AS t(p, y, w, f, q)";

#[tokio::test]
async fn bad_values_name_function_argument_and_value() {
    let cases = [
        (
            "SELECT ece(1.7, 1)",
            "ece: argument p must be in [0, 1], got 1.7",
        ),
        (
            "SELECT ece(p, 2) FROM (VALUES (0.5)) AS t(p)",
            "ece: argument y must be 0 or 1, got 2",
        ),
        (
            "SELECT mce(CAST('NaN' AS DOUBLE), 0)",
            "mce: argument p must be in [0, 1], got NaN",
        ),
        (
            "SELECT reliability(0.5, 1, 15, 'uniform', -1)",
            "reliability: argument w must be finite and >= 0, got -1",
        ),
        (
            "SELECT logloss(0.5, 1, 1e-15, CAST('NaN' AS DOUBLE))",
            "logloss: argument w must be finite and >= 0, got NaN",
        ),
        (
            "SELECT brier(-0.1, 1)",
            "brier: argument p must be in [0, 1], got -0.1",
        ),
        (
            "SELECT auc(0.5, 3)",
            "auc: argument y must be 0 or 1, got 3",
        ),
        (
            "SELECT field_ece(0.5, 1, 'a', -2)",
            "field_ece: argument w must be finite and >= 0, got -2",
        ),
        (
            "SELECT field_rce(2, 1, 'a')",
            "field_rce: argument p must be in [0, 1], got 2",
        ),
        (
            "SELECT ips_logloss(0.5, 1, 0)",
            "ips_logloss: argument propensity must be in (0, 1], got 0",
        ),
        (
            "SELECT ips_logloss(0.5, 1, 1.5)",
            "ips_logloss: argument propensity must be in (0, 1], got 1.5",
        ),
        (
            "SELECT logit(1.5)",
            "logit: argument p must be in [0, 1], got 1.5",
        ),
        (
            "SELECT wilson_z(0.5, 1.2, 10)",
            "wilson_z: argument pos_rate must be in [0, 1], got 1.2",
        ),
        (
            "SELECT wilson_z(0.5, 0.2, -1)",
            "wilson_z: argument n must be >= 0, got -1",
        ),
        (
            "SELECT wilson_interval(0.5, 10, -1)",
            "wilson_interval: argument z must be finite and >= 0, got -1",
        ),
        (
            "SELECT confcalib_multiplier(0, 0.2, 10)",
            "confcalib_multiplier: argument p_hat must be > 0",
        ),
        (
            "SELECT popularity_propensity(5, 0)",
            "popularity_propensity: argument max_count must be finite and > 0, got 0",
        ),
        (
            "SELECT popularity_propensity(5, 3)",
            "popularity_propensity: argument count must be in [0, max_count = 3], got 5",
        ),
        (
            "SELECT fit_bbq(1.5, 1)",
            "fit_bbq: argument p must be in [0, 1], got 1.5",
        ),
        (
            "SELECT mvce(1.5, 1, 7)",
            "mvce: argument p must be in [0, 1], got 1.5",
        ),
        (
            "SELECT mvce(0.5, 2, 7)",
            "mvce: argument y must be 0 or 1, got 2",
        ),
        (
            "SELECT multi_field_rce(CAST('NaN' AS DOUBLE), 1, 'a', 'b')",
            "multi_field_rce: argument p must be in [0, 1], got NaN",
        ),
        (
            "SELECT fit_ilps(0.5, 1, 10, 0.0)",
            "fit_ilps: argument propensity must be in (0, 1], got 0",
        ),
    ];
    for (sql, want) in cases {
        let got = error_of(sql).await;
        assert!(got.contains(want), "{sql}\n  want: {want}\n  got:  {got}");
        assert_eq!(got.lines().count(), 1, "{sql}: not one line: {got}");
    }
}

#[tokio::test]
async fn bad_calls_are_planning_errors_that_show_the_signature() {
    let cases = [
        (format!("SELECT ece(p, y, 0) FROM {T}"), "ece: argument n_bins must be an integer in [1, 10000], got 0"),
        (format!("SELECT ece(p, y, 10001) FROM {T}"), "ece: argument n_bins must be an integer in [1, 10000], got 10001"),
        (format!("SELECT ece(p, y, 2.5) FROM {T}"), "ece: argument n_bins must be an integer in [1, 10000], got 2.5"),
        (format!("SELECT mce(p, y, 10, 'foo') FROM {T}"), "mce: argument strategy must be one of 'uniform', 'quantile', 'sklearn', 'netcal', 'torchmetrics', 'relplot', 'kumar', got foo"),
        (format!("SELECT ece(p, y, y) FROM {T}"), "ece: argument n_bins must be a constant"),
        (format!("SELECT logloss(p, y, w) FROM {T}"), "logloss: argument eps must be a constant"),
        (format!("SELECT logloss(p, y, 0.7) FROM {T}"), "logloss: argument eps must be in [0, 0.5), got 0.7"),
        (format!("SELECT ips_logloss(p, y, q, 2) FROM {T}"), "ips_logloss: argument clip must be in [0, 1], got 2"),
        (format!("SELECT field_rce(p, y, f, -1) FROM {T}"), "field_rce: argument eps must be finite and >= 0, got -1"),
        (format!("SELECT confcalib_multiplier(p, p, 10, w) FROM {T}"), "confcalib_multiplier: argument lambda must be a constant"),
        (format!("SELECT popularity_propensity(1, 2, 0.5, 3) FROM {T}"), "popularity_propensity: argument clip must be in [0, 1], got 3"),
        (format!("SELECT ece(p) FROM {T}"), "ece: takes 2 to 5 arguments, got 1; the signature is ece(p, y [, n_bins [, strategy [, w]]])"),
        (format!("SELECT brier(p, y, w, w) FROM {T}"), "brier: takes 2 to 3 arguments, got 4; the signature is brier(p, y [, w])"),
        (format!("SELECT ece(f, y) FROM {T}"), "ece: argument p must be numeric, got type Utf8"),
        (format!("SELECT auc(p, f) FROM {T}"), "auc: argument y must be a Boolean or numeric 0/1 column, got type Utf8"),
        (format!("SELECT sigmoid(f) FROM {T}"), "sigmoid: argument x must be numeric, got type Utf8"),
        (format!("SELECT wilson_z(p, p) FROM {T}"), "wilson_z: takes 3 arguments, got 2; the signature is wilson_z(p_hat, pos_rate, n)"),
        (format!("SELECT mvce(p, y, f, 0) FROM {T}"), "mvce: argument n_bins must be an integer in [1, 10000], got 0"),
        (format!("SELECT mvce(p, y, f, 15, 1001) FROM {T}"), "mvce: argument rounds must be an integer in [1, 1000], got 1001"),
        (format!("SELECT multi_field_rce(p, y) FROM {T}"), "multi_field_rce: takes at least 3 arguments, got 2"),
        (format!("SELECT multi_field_rce(p, y, f, y, -1.0) FROM {T}"), "multi_field_rce: argument eps must be finite and >= 0, got -1"),
        (format!("SELECT fit_confcalib(p, y, f, 0) FROM {T}"), "fit_confcalib: argument n_bins must be an integer in [1, 10000], got 0"),
        (format!("SELECT fit_histogram(p, y, 5, 'kumar') FROM {T}"), "fit_histogram: argument strategy must be 'uniform' or 'quantile', got kumar"),
    ];
    for (sql, want) in cases {
        let got = error_of(&sql).await;
        assert!(got.contains(want), "{sql}\n  want: {want}\n  got:  {got}");
    }
}

#[tokio::test]
async fn filtered_out_bad_rows_are_not_errors() {
    let ctx = calibsql::new_context();
    let df = ctx
        .sql("SELECT ece(p, y) FILTER (WHERE p <= 1) AS e FROM (VALUES (0.5, 1), (1.5, 1)) AS t(p, y)")
        .await
        .unwrap();
    let batches = df.collect().await.unwrap();
    assert_eq!(batches[0].num_rows(), 1);
}

/// A fit past its exact mode adds whole batches to its grid on a fast path that checks the
/// columns in bulk: a bad value in a late batch still fails the query with the per-row
/// message. (The rows reach the grid's whole-batch path: with its refusal disabled the
/// first case returns a model instead of an error.)
#[tokio::test]
async fn bad_rows_reaching_a_fit_on_its_grid_name_function_argument_and_value() {
    // 200,000 distinct scores: each of the two partitions passes the 65,536 distinct scores
    // kept exactly long before the bad row near the end.
    let rows = |p: &str, y: &str, q: &str| {
        format!(
            "(SELECT {p} AS p, {y} AS y, {q} AS q FROM \
             (SELECT value, value / 200001.0 AS s FROM generate_series(1, 200000)))"
        )
    };
    let bad = "value = 199990";
    let cases = [
        (
            format!(
                "SELECT fit_gaussian_calib(p, y, q) FROM {}",
                rows(
                    "s",
                    "value % 2",
                    &format!("CASE WHEN {bad} THEN 0.0 ELSE 0.5 END")
                )
            ),
            "fit_gaussian_calib: argument propensity must be in (0, 1], got 0",
        ),
        (
            format!(
                "SELECT fit_gaussian_calib(p, y, q) FROM {}",
                rows(
                    "s",
                    &format!("CASE WHEN {bad} THEN 2 ELSE value % 2 END"),
                    "0.5"
                )
            ),
            "fit_gaussian_calib: argument y must be 0 or 1, got 2",
        ),
        (
            format!(
                "SELECT fit_platt(p, y) FROM {}",
                rows(
                    &format!("CASE WHEN {bad} THEN CAST('NaN' AS DOUBLE) ELSE s END"),
                    "value % 2",
                    "0.5"
                )
            ),
            "fit_platt: argument score must be finite, got NaN",
        ),
        (
            format!(
                "SELECT fit_platt(p, y) FROM {}",
                rows(
                    &format!("CASE WHEN {bad} THEN CAST('-Infinity' AS DOUBLE) ELSE s END"),
                    "value % 2",
                    "0.5"
                )
            ),
            "fit_platt: argument score must be finite, got -inf",
        ),
        (
            format!(
                "SELECT fit_beta_calib(p, y) FROM {}",
                rows(
                    &format!("CASE WHEN {bad} THEN 1.5 ELSE s END"),
                    "value % 2",
                    "0.5"
                )
            ),
            "fit_beta_calib: argument p must be in [0, 1], got 1.5",
        ),
    ];
    for (sql, want) in cases {
        let got = error_of(&sql).await;
        assert!(got.contains(want), "{sql}\n  want: {want}\n  got:  {got}");
        assert_eq!(got.lines().count(), 1, "{sql}: not one line: {got}");
    }
}
