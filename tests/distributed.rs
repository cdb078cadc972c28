//! The same SQL on an Apache Ballista cluster and on a local session gives the same results
//! (`--features distributed`).
//!
//! The cluster runs in this process on 127.0.0.1: a scheduler and two executors with one
//! task slot each, so every query's stages are split over both and shuffled through Arrow
//! Flight. The client uses `target_partitions` 4 and a batch size of 700. The local reference
//! is `calibsql::new_context()` with the same settings. Metrics agree to 1e-12 relative,
//! fitted models to the tolerance the invariance tests document for models (`assert_close`
//! in tests/support: the Newton iteration stops within 1e-14 of the optimum, so summation
//! order moves parameters by ~1e-7). Strings are compared after casting Utf8View to Utf8
//! (Ballista turns Utf8View off). This compares the engine with itself across execution
//! modes (an invariance test); the values themselves are checked against numpy, scikit-learn
//! and the papers' tools in the other suites.
//!
//! `every_aggregate_has_a_case` fails when a function of `all_aggregate_functions()` appears
//! in no query below, so a new aggregate cannot skip the cluster.

#[path = "support/mod.rs"]
mod support;

use std::collections::BTreeSet;
use std::path::Path;

use calibsql::distributed::{remote_context, LocalCluster};
use calibsql::ContextOptions;
use datafusion::arrow::array::{Array, RecordBatch};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::DataType;
use datafusion::common::ScalarValue;
use datafusion::prelude::{SessionConfig, SessionContext};

const PARTITIONS: usize = 4;
const BATCH: usize = 700;

/// The table: 4 Parquet files of 6,000 rows. `p` probability, `y` 0/1 label, `w` weight,
/// `q` propensity, `s` score (a logit), `site` (40 values), `kind` text (5 values), `g` (300
/// groups), `k` a second key (12 values).
fn table_sql(dir: &Path, part: usize) -> String {
    format!(
        "COPY (SELECT
            0.005 + 0.99 * ((v * 7) % 997) / 996.0 AS p,
            CASE WHEN ((v * 7919) % 1000) / 1000.0 < 0.8 * ((v * 7) % 997) / 996.0 + 0.05
                 THEN 1 ELSE 0 END AS y,
            ((v * 31) % 17) / 4.0 + 0.25 AS w,
            0.05 + ((v * 13) % 90) / 100.0 AS q,
            (((v * 7) % 997) - 498) / 120.0 AS s,
            (v * 101) % 40 AS site,
            'k' || CAST(v % 5 AS VARCHAR) AS kind,
            v % 300 AS g,
            (v * 17) % 12 AS k
          FROM (SELECT value + {offset} AS v FROM generate_series(1, 6000)))
         TO '{path}' STORED AS PARQUET",
        offset = part * 6000,
        path = dir.join(format!("part-{part}.parquet")).display()
    )
}

/// Each query names the functions it covers by calling them.
const QUERIES: &[&str] = &[
    // Binned metrics with every optional argument shape, ungrouped.
    "SELECT ece(p, y) AS a, ece(p, y, 10, 'quantile') AS b, ece(p, y, 20, 'uniform', w) AS c,
            ece(p, y, 15, 'torchmetrics') AS d, mce(p, y) AS e, mce(p, y, 7, 'quantile', w) AS f,
            ace(p, y) AS g, ace(p, y, 12, 'quantile', w) AS h, rmsce(p, y) AS i,
            rmsce(p, y, 7, 'netcal', w) AS j
     FROM t",
    // Losses, AUC, smooth and debiased ECE.
    "SELECT logloss(p, y) AS a, logloss(p, y, 1e-6) AS b, logloss(p, y, 1e-6, w) AS c,
            brier(p, y) AS d, brier(p, y, w) AS e, ips_logloss(p, y, q) AS f,
            ips_logloss(p, y, q, 0.1) AS g, ips_logloss(p, y, q, 0.1, 1e-7) AS h,
            normalized_entropy(p, y) AS i, normalized_entropy(p, y, w) AS j, auc(p, y) AS k,
            auc(p, y, w) AS l, smooth_ece(p, y) AS m, smooth_ece(p, y, 0.05) AS n,
            ece_debiased(p, y) AS o
     FROM t",
    // Top-label (multiclass) metrics: a three-class model made from p, ungrouped, grouped and
    // as stored states.
    "SELECT ece_top_label(probs, c) AS a, mce_top_label(probs, c, 10, 'quantile', w) AS b,
            reliability_top_label(probs, c, 8, 'torchmetrics') AS d,
            ece_classwise(probs, c, 10, 'quantile', w) AS e, auc(probs, c) AS f, auc(probs, c, w) AS g,
            array_max(fit_ovr(probs, c, 'isotonic', w)[2]['knots_y']) AS h,
            fit_ovr(probs, c)[1]['b'] AS i, fit_temperature(probs, c)['a'] AS j
     FROM (SELECT make_array(p / 2, p / 2, 1 - p) AS probs, (site % 3) AS c, w FROM t)",
    "SELECT kind, ece_top_label(probs, c, 10, 'kumar') AS a FROM
       (SELECT kind, make_array(p / 2, p / 2, 1 - p) AS probs, (site % 3) AS c FROM t)
     GROUP BY kind ORDER BY kind",
    "SELECT ece_top_label_merge(a) AS a, mce_top_label_merge(b) AS b,
            reliability_top_label_merge(d) AS d, ece_classwise_merge(e) AS e,
            array_max(fit_ovr_merge(f)[3]['knots_y']) AS f, cbpe_merge(g) AS g
     FROM (SELECT site, ece_top_label_state(probs, c) AS a, mce_top_label_state(probs, c, 10) AS b,
                  reliability_top_label_state(probs, c, 8) AS d, ece_classwise_state(probs, c) AS e,
                  fit_ovr_state(probs, c, 'isotonic') AS f, cbpe_state(p, 0.3) AS g
           FROM (SELECT site, p, make_array(p / 2, p / 2, 1 - p) AS probs, (site % 3) AS c FROM t)
           GROUP BY site)",
    // Field metrics.
    "SELECT field_ece(p, y, site) AS a, field_ece(p, y, kind, w) AS b, field_rce(p, y, site) AS c,
            field_rce(p, y, kind, 0.01) AS d, field_rce(p, y, site, 0.01, w) AS e,
            multi_field_rce(p, y, site, kind) AS f, multi_field_rce(p, y, site, k, 0.02) AS g,
            mvce(p, y, site) AS h, mvce(p, y, g, 8) AS i, mvce(p, y, kind, 8, 3) AS j
     FROM t",
    // FILTER, and GROUP BY with hundreds of groups.
    "SELECT g, count(*) AS n, ece(p, y) AS a, ece(p, y) FILTER (WHERE site < 20) AS b,
            logloss(p, y) AS c, auc(p, y) AS d, field_rce(p, y, kind) AS e,
            brier(p, y, w) FILTER (WHERE kind <> 'k0') AS f, smooth_ece(p, y) AS h
     FROM t GROUP BY g ORDER BY g",
    // The inference aggregates (struct results; ece_interval's weights hashed from the key, so
    // the same on every executor), ungrouped and grouped.
    "SELECT ece_interval(p, y, site * 1000 + g) AS a, ece_interval(p, y, kind, 10, 'sklearn', 0.9, 50) AS b,
            ece_diff_interval(p, q, y, g) AS c, auc_interval(p, y) AS d, auc_interval(p, y, 0.9) AS e,
            auc_test(p, q, y) AS f, cbpe(p) AS h, cbpe(p, 0.3, w) AS i
     FROM t",
    "SELECT kind, ece_interval(p, y, g) AS a, ece_diff_interval(p, q, y, g, 8) AS b,
            auc_interval(p, y) AS c, auc_test(p, q, y) AS d, cbpe(p, 0.4) AS e
     FROM t GROUP BY kind ORDER BY kind",
    "SELECT ece_interval_merge(a) AS a, ece_diff_interval_merge(b) AS b
     FROM (SELECT site, ece_interval_state(p, y, g) AS a, ece_diff_interval_state(p, q, y, g, 8) AS b
           FROM t GROUP BY site)",
    // A List<Struct> result, grouped by text.
    "SELECT kind, reliability(p, y) AS a, reliability(p, y, 8, 'quantile') AS b,
            reliability(p, y, 5, 'uniform', w, 0.9) AS c
     FROM t GROUP BY kind ORDER BY kind",
    // Empty input.
    "SELECT ece(p, y) AS a, logloss(p, y) AS b, auc(p, y) AS c, reliability(p, y) AS d,
            field_rce(p, y, site) AS e, fit_platt(s, y) AS f, fit_isotonic(p, y) AS h
     FROM t WHERE false",
    "SELECT g, ece(p, y) AS a, fit_platt(s, y) AS b FROM t WHERE false GROUP BY g",
    // Parametric fits with propensities and clips.
    "SELECT fit_platt(s, y) AS a, fit_platt(s, y, q) AS b, fit_platt(s, y, q, 0.1) AS c,
            fit_temperature(s, y) AS d, fit_temperature(s, y, q, 0.1) AS e,
            fit_beta_calib(p, y) AS f, fit_beta_calib(p, y, q) AS g,
            fit_gaussian_calib(s, y) AS h, fit_gaussian_calib(s, y, q, 0.05) AS i,
            fit_gamma_calib(s, y) AS j, fit_gamma_calib(s, y, q) AS k
     FROM t",
    // Non-parametric and field-aware fits.
    "SELECT fit_isotonic(p, y) AS a, fit_isotonic(p, y, q, 0.1) AS b, fit_histogram(p, y) AS c,
            fit_histogram(p, y, 12, 'quantile') AS d, fit_ilps(s, y) AS e, fit_ilps(s, y, 6) AS f,
            fit_ilps(s, y, 6, q, 0.1) AS g, fit_bbq(p, y) AS h, fit_confcalib(p, y, kind) AS i,
            fit_confcalib(p, y, site, 4, 1.0) AS j, fit_field_calib(s, y, kind) AS k,
            fit_field_calib(s, y, kind, 6, 0.1) AS l
     FROM t",
    // A fitted model fed to calibrate.
    "WITH m AS (SELECT fit_platt(s, y) AS platt, fit_isotonic(p, y) AS iso,
                       fit_confcalib(p, y, kind, 4, 1.0) AS cc, fit_field_calib(s, y, kind) AS fc
                FROM t WHERE g < 150)
     SELECT t.kind, ece(calibrate(t.s, m.platt), t.y) AS a, ece(calibrate(t.p, m.iso), t.y) AS b,
            avg(calibrate(t.p, m.cc, t.kind)) AS c, logloss(calibrate(t.s, m.fc, t.kind), t.y) AS d
     FROM t CROSS JOIN m WHERE t.g >= 150 GROUP BY t.kind ORDER BY t.kind",
    // Stored states merged across groups: metrics.
    "SELECT ece_merge(a) AS a, mce_merge(b) AS b, reliability_merge(c) AS c, ace_merge(d) AS d,
            rmsce_merge(e) AS e, logloss_merge(f) AS f, brier_merge(h) AS h,
            ips_logloss_merge(i) AS i, normalized_entropy_merge(j) AS j, field_ece_merge(k) AS k,
            field_rce_merge(l) AS l, smooth_ece_merge(m) AS m, mvce_merge(n) AS n
     FROM (SELECT site, ece_state(p, y) AS a, mce_state(p, y, 10, 'uniform', w) AS b,
                  reliability_state(p, y, 8) AS c, ace_state(p, y, 10, 'uniform') AS d, rmsce_state(p, y) AS e,
                  logloss_state(p, y, 1e-6, w) AS f, brier_state(p, y) AS h,
                  ips_logloss_state(p, y, q, 0.1) AS i, normalized_entropy_state(p, y) AS j,
                  field_ece_state(p, y, kind) AS k, field_rce_state(p, y, kind, 0.01) AS l,
                  smooth_ece_state(p, y) AS m, mvce_state(p, y, k, 8) AS n
           FROM t GROUP BY site)",
    // Calibration tests and estimates, ungrouped, grouped, and as stored states.
    "SELECT spiegelhalter(p, y) AS a, spiegelhalter(p, y, w) AS b, calibration_slope(p, y) AS c,
            calibration_slope(p, y, w) AS d, hosmer_lemeshow(p, y) AS e,
            hosmer_lemeshow(p, y, 5) AS f, calibration_decomposition(p, y) AS g,
            calibration_decomposition(p, y, 'logloss', w) AS h, field_bias(p, y, site) AS i,
            field_bias(p, y, kind, w) AS j
     FROM t",
    "SELECT kind, spiegelhalter(p, y) AS a, calibration_slope(p, y) AS b,
            hosmer_lemeshow(p, y) AS c, calibration_decomposition(p, y) AS d,
            field_bias(p, y, site) AS e
     FROM t GROUP BY kind ORDER BY kind",
    "SELECT spiegelhalter_merge(a) AS a, calibration_slope_merge(b) AS b,
            hosmer_lemeshow_merge(c) AS c, calibration_decomposition_merge(d) AS d,
            field_bias_merge(e) AS e
     FROM (SELECT site, spiegelhalter_state(p, y, w) AS a, calibration_slope_state(p, y) AS b,
                  hosmer_lemeshow_state(p, y, 5) AS c,
                  calibration_decomposition_state(p, y, 'logloss') AS d,
                  field_bias_state(p, y, kind, w) AS e
           FROM t GROUP BY site)",
    // Stored states merged across groups: fits.
    "SELECT fit_platt_merge(a) AS a, fit_temperature_merge(b) AS b, fit_beta_calib_merge(c) AS c,
            fit_gaussian_calib_merge(d) AS d, fit_gamma_calib_merge(e) AS e,
            fit_isotonic_merge(f) AS f, fit_histogram_merge(h) AS h, fit_ilps_merge(i) AS i,
            fit_bbq_merge(j) AS j, fit_confcalib_merge(k) AS k, fit_field_calib_merge(l) AS l
     FROM (SELECT kind, fit_platt_state(s, y) AS a, fit_temperature_state(s, y, q) AS b,
                  fit_beta_calib_state(p, y) AS c, fit_gaussian_calib_state(s, y) AS d,
                  fit_gamma_calib_state(s, y) AS e, fit_isotonic_state(p, y) AS f,
                  fit_histogram_state(p, y, 10, 'quantile') AS h, fit_ilps_state(s, y, 6) AS i,
                  fit_bbq_state(p, y) AS j, fit_confcalib_state(p, y, site, 4) AS k,
                  fit_field_calib_state(s, y, site) AS l
           FROM t GROUP BY kind)",
];

/// Runs with DataFusion's partial aggregation skipped (`convert_to_state`): the settings
/// travel to the executors with each query.
const CONVERT_TO_STATE: &[&str] = &[
    "SET datafusion.execution.skip_partial_aggregation_probe_rows_threshold = 10",
    "SET datafusion.execution.skip_partial_aggregation_probe_ratio_threshold = 0.0",
];
const CONVERT_TO_STATE_QUERY: &str =
    "SELECT p, kind, ece(p, y) AS a, logloss(p, y, 1e-6, w) AS b, auc(p, y) AS c,
            field_rce(p, y, kind) AS d, fit_platt(s, y) AS e, fit_isotonic(p, y) AS f
     FROM t GROUP BY p, kind ORDER BY p, kind";

#[test]
fn every_aggregate_has_a_case() {
    let all_sql: String = QUERIES
        .iter()
        .chain(std::iter::once(&CONVERT_TO_STATE_QUERY))
        .copied()
        .collect::<Vec<_>>()
        .join("\n");
    let called: BTreeSet<String> = calls(&all_sql);
    let missing: Vec<String> = calibsql::udfs::all_aggregate_functions()
        .iter()
        .map(|f| f.name().to_string())
        .filter(|name| !called.contains(name))
        .collect();
    assert!(
        missing.is_empty(),
        "aggregates with no distributed case: {missing:?}"
    );
}

/// Names directly followed by `(` in `sql`.
fn calls(sql: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut word = String::new();
    for c in sql.chars() {
        if c.is_ascii_alphanumeric() || c == '_' {
            word.push(c);
        } else {
            if c == '(' && !word.is_empty() {
                names.insert(word.to_ascii_lowercase());
            }
            word.clear();
        }
    }
    names
}

fn local_context() -> SessionContext {
    calibsql::new_context_with_config(
        SessionConfig::new()
            .with_target_partitions(PARTITIONS)
            .with_batch_size(BATCH),
    )
}

async fn collect(ctx: &SessionContext, sql: &str) -> Vec<RecordBatch> {
    let frame = calibsql::sql(ctx, sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    frame
        .collect()
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// The error of a query that plans but fails to run.
async fn query_error(ctx: &SessionContext, sql: &str) -> String {
    let frame = calibsql::sql(ctx, sql).await.unwrap();
    frame.collect().await.unwrap_err().to_string()
}

/// Rows of `batches` as scalars, strings normalised to Utf8.
fn rows(batches: &[RecordBatch]) -> Vec<Vec<ScalarValue>> {
    let mut out = Vec::new();
    for batch in batches {
        let columns: Vec<_> = batch
            .columns()
            .iter()
            .map(|c| match c.data_type() {
                DataType::Utf8View | DataType::LargeUtf8 => cast(c, &DataType::Utf8).unwrap(),
                _ => c.clone(),
            })
            .collect();
        for row in 0..batch.num_rows() {
            out.push(
                columns
                    .iter()
                    .map(|c| ScalarValue::try_from_array(c.as_ref(), row).unwrap())
                    .collect(),
            );
        }
    }
    out
}

fn assert_same_results(sql: &str, local: &[RecordBatch], remote: &[RecordBatch]) {
    let (local, remote) = (rows(local), rows(remote));
    assert_eq!(local.len(), remote.len(), "row count of {sql}");
    for (i, (a, b)) in local.iter().zip(&remote).enumerate() {
        assert_eq!(a.len(), b.len(), "columns of {sql}");
        for (j, (x, y)) in a.iter().zip(b).enumerate() {
            let what = format!("row {i} column {j} of {sql}");
            match x {
                ScalarValue::Utf8(_) | ScalarValue::Int64(_) | ScalarValue::UInt64(_) => {
                    assert_eq!(x, y, "{what}")
                }
                _ => support::assert_close(&what, x, y),
            }
        }
    }
}

async fn write_table(dir: &Path) {
    let ctx = calibsql::new_context();
    for part in 0..4 {
        collect(&ctx, &table_sql(dir, part)).await;
    }
}

async fn register(ctx: &SessionContext, dir: &Path) {
    calibsql::tables::register_table(ctx, "t", dir.to_str().unwrap(), None)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_aggregate_gives_the_local_result_on_a_cluster() {
    let dir = tempfile::tempdir().unwrap();
    write_table(dir.path()).await;
    let cluster = LocalCluster::start(2, 1).await.unwrap();
    let options = ContextOptions {
        batch_size: Some(BATCH),
        target_partitions: Some(PARTITIONS),
        ..ContextOptions::default()
    };
    let remote = remote_context(&cluster.url(), &options).await.unwrap();
    let local = local_context();
    register(&remote, dir.path()).await;
    register(&local, dir.path()).await;

    for sql in QUERIES {
        let want = collect(&local, sql).await;
        let got = collect(&remote, sql).await;
        assert!(!want.is_empty() || sql.contains("WHERE false"), "{sql}");
        assert_same_results(sql, &want, &got);
    }

    for setting in CONVERT_TO_STATE {
        collect(&local, setting).await;
        collect(&remote, setting).await;
    }
    let want = collect(&local, CONVERT_TO_STATE_QUERY).await;
    let got = collect(&remote, CONVERT_TO_STATE_QUERY).await;
    let groups: usize = want.iter().map(|b| b.num_rows()).sum();
    assert!(groups > 1000, "{groups} groups");
    assert_same_results(CONVERT_TO_STATE_QUERY, &want, &got);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn what_cannot_run_on_a_cluster_is_refused_in_one_line() {
    let cluster = LocalCluster::start(1, 1).await.unwrap();
    let remote = remote_context(&cluster.url(), &ContextOptions::default())
        .await
        .unwrap();

    // A table held in the client's memory.
    collect(&remote, "CREATE TABLE mem AS VALUES (0.2, 1), (0.7, 0)").await;
    let error = query_error(&remote, "SELECT ece(column1, column2) FROM mem").await;
    assert!(
        error.contains("table mem is held in this client's memory") && error.contains("COPY"),
        "{error}"
    );

    // Per-table S3 options would configure the client only.
    let error = calibsql::sql(
        &remote,
        "CREATE EXTERNAL TABLE s STORED AS PARQUET LOCATION 's3://bucket/x/'
         OPTIONS ('aws.endpoint' 'http://127.0.0.1:1', 'aws.secret_access_key' 'hush')",
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(
        error.contains("aws.endpoint") && error.contains("--s3-"),
        "{error}"
    );
    assert!(!error.contains("hush"), "{error}");

    // A setting the executors would not see.
    collect(&remote, "SET calibsql.fit_exact_cap = 1000").await;
    let error = query_error(&remote, "SELECT fit_isotonic(0.5, 1)").await;
    assert!(
        error.contains("fit_isotonic") && error.contains("fit_exact_cap"),
        "{error}"
    );
    // Functions it does not concern still run.
    let batches = collect(&remote, "SELECT ece(0.5, 1) AS e").await;
    assert_eq!(batches[0].num_rows(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_scheduler_and_a_bad_url_are_one_line_errors() {
    // A port nothing listens on: bind one, then free it.
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let error = remote_context(
        &format!("df://127.0.0.1:{port}"),
        &ContextOptions::default(),
    )
    .await
    .err()
    .unwrap()
    .to_string();
    assert!(
        error.contains(&format!(
            "cannot reach the Ballista scheduler at df://127.0.0.1:{port}"
        )),
        "{error}"
    );
    assert!(!error.contains('\n'), "{error}");

    let error = remote_context("127.0.0.1:50050", &ContextOptions::default())
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(error.contains("df://HOST:PORT"), "{error}");
}
