//! Results do not depend on batch size, partitioning or thread count: the same SQL over a
//! multi-file Parquet table gives the same numbers (to 1e-12 relative) for every
//! combination of `target_partitions` and `batch_size`, with and without GROUP BY.

use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Float64Type};
use datafusion::prelude::{ParquetReadOptions, SessionConfig};

use crate::support::close_mixed;

const QUERY: &str = "SELECT g,
    ece(p, y) AS ece, ece(p, y, 10, 'quantile') AS ece_q, mce(p, y, 10, 'uniform', w) AS mce_w,
    logloss(p, y) AS ll, brier(p, y, w) AS brier, auc(p, y) AS auc,
    ips_logloss(p, y, q) AS ips, field_ece(p, y, site) AS fece, field_rce(p, y, site, 0.01, w) AS frce,
    ece(p, y) FILTER (WHERE site < 5) AS ece_f, ece(p, y, 10, 'torchmetrics') AS ece_tm,
    ace(p, y) AS ace, rmsce(p, y, 7, 'netcal', w) AS rmsce, smooth_ece(p, y, 0.05) AS smece,
    ece_debiased(p, y) AS ece_db, normalized_entropy(p, y, w) AS ne,
    spiegelhalter(p, y, w)['z'] AS sz,
    nanvl(calibration_slope(p, y)['slope'], -1.0) AS cs, -- NaN in groups whose labels p separates
    hosmer_lemeshow(p, y, 5)['statistic'] AS hl, calibration_decomposition(p, y)['miscalibration'] AS mcb,
    field_bias(p, y, site)[1]['p_adjusted'] AS fb,
    ece_interval(p, y, site)['lower'] AS ei_lo, ece_diff_interval(p, q, y, site)['upper'] AS ed_hi,
    auc_interval(p, y)['lower'] AS ai_lo, auc_test(p, q, y)['z'] AS at_z,
    cbpe(p)['roc_auc'] AS cb_auc, cbpe(p, 0.3)['f1'] AS cb_f1,
    ece_classwise(make_array(p / 2, p / 2, 1 - p), y, 10, 'quantile', w) AS ecw,
    auc(make_array(p / 2, p / 2, 1 - p), y) AS auc_ovr,
    array_max(fit_ovr(make_array(p, 1 - p, 0.5), y, 'isotonic')[1]['knots_y']) AS ovr
  FROM t GROUP BY g ORDER BY g";

const QUERY_ALL: &str = "SELECT
    ece(p, y) AS ece, ece(p, y, 10, 'quantile', w) AS ece_q, mce(p, y) AS mce,
    logloss(p, y, 1e-6, w) AS ll, auc(p, y, w) AS auc, field_rce(p, y, site) AS frce,
    field_ece(p, y, g) AS fece_g, smooth_ece(p, y) AS smece, ece_debiased(p, y) AS ece_db,
    ace(p, y, 12, 'quantile', w) AS ace_w, spiegelhalter(p, y)['z'] AS sz,
    calibration_slope(p, y, w)['slope_se'] AS cs, hosmer_lemeshow(p, y)['statistic'] AS hl,
    calibration_decomposition(p, y, 'logloss', w)['discrimination'] AS dsc,
    field_bias(p, y, site, w)[1]['p_adjusted'] AS fb, field_bias(p, y, site)[40]['z'] AS fb_z,
    ece_interval(p, y, site * 1000 + g)['upper'] AS ei_hi,
    ece_diff_interval(p, q, y, g, 10, 'sklearn')['lower'] AS ed_lo,
    auc_interval(p, y, 0.9)['upper'] AS ai_hi, auc_test(p, q, y)['se'] AS at_se,
    cbpe(p, 0.5, w)['roc_auc'] AS cb_auc, cbpe(p, 0.5, w)['precision'] AS cb_prec,
    ece_classwise(make_array(p / 2, p / 2, 1 - p), y) AS ecw,
    auc(make_array(p / 2, p / 2, 1 - p), y, w) AS auc_ovr,
    array_min(fit_ovr(make_array(p, 1 - p, 0.5), y, 'isotonic', w)[2]['knots_y']) AS ovr
  FROM t";

async fn write_table(dir: &std::path::Path) {
    let ctx = calibsql::new_context();
    // 4 files of 5,000 rows: p from a hash, y from a second hash, many groups.
    for part in 0..4 {
        let sql = format!(
            "COPY (SELECT
                (v % 997) / 996.0 AS p,
                CASE WHEN ((v * 7919) % 1000) / 1000.0 < (v % 997) / 996.0 THEN 1 ELSE 0 END AS y,
                ((v * 31) % 17) / 4.0 AS w,
                0.05 + ((v * 13) % 90) / 100.0 AS q,
                (v * 101) % 40 AS site,
                v % 300 AS g
              FROM (SELECT value + {offset} AS v FROM generate_series(1, 5000)))
             TO '{path}' STORED AS PARQUET",
            offset = part * 5000,
            path = dir.join(format!("part-{part}.parquet")).display()
        );
        ctx.sql(&sql).await.unwrap().collect().await.unwrap();
    }
}

async fn run(
    dir: &std::path::Path,
    sql: &str,
    partitions: usize,
    batch: usize,
) -> Vec<RecordBatch> {
    let ctx = calibsql::new_context_with_config(
        SessionConfig::new()
            .with_target_partitions(partitions)
            .with_batch_size(batch),
    );
    ctx.register_parquet("t", dir.to_str().unwrap(), ParquetReadOptions::default())
        .await
        .unwrap();
    ctx.sql(sql).await.unwrap().collect().await.unwrap()
}

fn floats(batches: &[RecordBatch]) -> Vec<Vec<Option<f64>>> {
    let mut cols: Vec<Vec<Option<f64>>> = vec![];
    for b in batches {
        for (i, c) in b.columns().iter().enumerate() {
            let c = cast(c, &DataType::Float64).unwrap();
            if cols.len() <= i {
                cols.push(vec![]);
            }
            cols[i].extend(c.as_primitive::<Float64Type>().iter());
        }
    }
    cols
}

/// Equal up to summation order: 1e-12 relative, plus 1e-12 absolute for means of terms of
/// both signs (an IPS loss can cancel to near zero).
fn assert_same(a: &[Vec<Option<f64>>], b: &[Vec<Option<f64>>], what: &str) {
    assert_eq!(a.len(), b.len());
    for (k, (ca, cb)) in a.iter().zip(b).enumerate() {
        let what = format!("{what} (column {k})");
        assert_eq!(ca.len(), cb.len(), "{what}");
        for (x, y) in ca.iter().zip(cb) {
            match (x, y) {
                (Some(x), Some(y)) => {
                    assert!(close_mixed(*x, *y, 1e-12, 1e-12), "{what}: {x} vs {y}")
                }
                (None, None) => {}
                _ => panic!("{what}: {x:?} vs {y:?}"),
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_results_for_any_partitioning_and_batch_size() {
    let dir = tempfile::tempdir().unwrap();
    write_table(dir.path()).await;
    for sql in [QUERY, QUERY_ALL] {
        let reference = floats(&run(dir.path(), sql, 1, 8192).await);
        assert!(reference[0].iter().all(|v| v.is_some()));
        for (partitions, batch) in [(1, 7), (2, 8192), (3, 100), (8, 1000), (16, 33)] {
            let got = floats(&run(dir.path(), sql, partitions, batch).await);
            assert_same(
                &reference,
                &got,
                &format!("partitions={partitions} batch={batch}: {sql}"),
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_by_with_many_groups_matches_per_group_queries() {
    // 20,000 groups of one to a few rows each: exercises convert_to_state (DataFusion skips
    // partial aggregation when groups barely reduce the rows) and EmitTo::First.
    let ctx = calibsql::new_context_with_config(SessionConfig::new().with_target_partitions(4));
    let sql = "SELECT v % 20000 AS g, ece(p, y) AS e, logloss(p, y) AS l, field_rce(p, y, v % 3) AS r
        FROM (SELECT value AS v, (value % 101) / 100.0 AS p, value % 2 AS y FROM generate_series(1, 50000))
        GROUP BY g ORDER BY g";
    let batches = ctx.sql(sql).await.unwrap().collect().await.unwrap();
    let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
    assert_eq!(rows, 20000);
    // Check a few groups against the same aggregate restricted by WHERE.
    for g in [0u64, 1, 777, 19999] {
        let one = format!(
            "SELECT ece(p, y) AS e, logloss(p, y) AS l, field_rce(p, y, v % 3) AS r
             FROM (SELECT value AS v, (value % 101) / 100.0 AS p, value % 2 AS y FROM generate_series(1, 50000))
             WHERE v % 20000 = {g}"
        );
        let want = floats(&ctx.sql(&one).await.unwrap().collect().await.unwrap());
        let all = floats(&batches);
        let got: Vec<Vec<Option<f64>>> = all[1..].iter().map(|c| vec![c[g as usize]]).collect();
        assert_same(&want, &got, &format!("group {g}"));
    }
    assert!(batches[0].column(0).null_count() == 0);
    let _ = batches[0].column(1).as_primitive::<Float64Type>();
}
