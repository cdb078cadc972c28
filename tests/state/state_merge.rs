//! Stored states: `F_merge(F_state(…))` over any split of the rows (days × partitions ×
//! batches, and through Parquet) equals `F` over all rows, for every aggregate with a
//! `_merge`; states of other parameters, functions or formats are errors; sliding windows
//! subtract states (and rows) correctly.
//!
//! The expected value is `F` itself over the same rows, whose correctness the .slt files check
//! against numpy / scikit-learn / the reference tools: this file checks that storing and
//! merging states never changes the result (an invariance test, not a value test).

use crate::support;

use datafusion::arrow::array::RecordBatch;
use datafusion::common::ScalarValue;
use datafusion::prelude::SessionContext;
use support::{assert_close, leaves};

async fn context() -> SessionContext {
    let config = calibsql::default_config()
        .with_target_partitions(4)
        .with_batch_size(97);
    let ctx = calibsql::new_context_with_config(config);
    // 3,000 rows over 9 days; p and s distinct-ish, ties in p, a string field, propensities.
    run(
        &ctx,
        "CREATE TABLE t AS SELECT value AS id, value % 9 AS day,
           ((value * 7919) % 1000) / 1000.0 AS p,
           CASE WHEN ((value * 104729) % 997) / 997.0 < ((value * 7919) % 1000) / 1000.0 * 0.8 + 0.05
                THEN 1 ELSE 0 END AS y,
           ((value % 5) + 1) / 2.0 AS w,
           'site' || CAST(value % 13 AS VARCHAR) AS f,
           0.05 + ((value * 31) % 95) / 100.0 AS q,
           (((value * 7919) % 1000) - 500) / 100.0 AS s
         FROM generate_series(1, 3000)",
    )
    .await;
    ctx
}

async fn run(ctx: &SessionContext, sql: &str) -> Vec<RecordBatch> {
    calibsql::sql(ctx, sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .collect()
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

async fn error(ctx: &SessionContext, sql: &str) -> String {
    match calibsql::sql(ctx, sql).await {
        Err(e) => e.to_string(),
        Ok(df) => match df.collect().await {
            Err(e) => e.to_string(),
            Ok(_) => panic!("{sql}: expected an error"),
        },
    }
}

async fn scalar(ctx: &SessionContext, sql: &str) -> ScalarValue {
    let batches = run(ctx, sql).await;
    let b = batches.iter().find(|b| b.num_rows() > 0).expect("a row");
    ScalarValue::try_from_array(b.column(0), 0).unwrap()
}

/// Calls covering every aggregate with a `_merge`, with their optional arguments.
const CASES: &[(&str, &str)] = &[
    ("ece", "p, y"),
    ("ece", "p, y, 10, 'sklearn', w"),
    ("ece", "p, y, 12, 'relplot'"),
    ("mce", "p, y, 7, 'torchmetrics'"),
    ("mce", "p, y, w => w"),
    ("reliability", "p, y, 5, 'uniform', w, 0.9"),
    ("reliability", "p, y, 10, 'kumar'"),
    ("ace", "p, y, 10, 'netcal'"),
    ("rmsce", "p, y"),
    ("rmsce", "p, y, 8, 'torchmetrics', w"),
    ("logloss", "p, y"),
    ("logloss", "p, y, 1e-6, w"),
    ("brier", "p, y, w"),
    ("ips_logloss", "p, y, q"),
    ("ips_logloss", "p, y, q, 0.2, 1e-7"),
    ("normalized_entropy", "p, y"),
    ("normalized_entropy", "p, y, w"),
    ("field_ece", "p, y, f"),
    ("field_ece", "p, y, day, w"),
    ("field_rce", "p, y, f"),
    ("field_rce", "p, y, f, 0.05, w"),
    ("smooth_ece", "p, y"),
    ("smooth_ece", "p, y, 0.05"),
    ("fit_platt", "s, y"),
    ("fit_platt", "s, y, q, 0.2"),
    ("fit_gaussian_calib", "s, y"),
    ("fit_gamma_calib", "s, y, q"),
    ("fit_isotonic", "s, y"),
    ("spiegelhalter", "p, y"),
    ("spiegelhalter", "p, y, w"),
    ("calibration_slope", "p, y, w"),
    ("hosmer_lemeshow", "p, y, 5"),
    ("calibration_decomposition", "p, y, 'logloss', w"),
    ("field_bias", "p, y, f, w"),
    ("fit_histogram", "s, y, 8"),
    ("fit_histogram", "s, y, 6, 'quantile'"),
    ("fit_temperature", "s, y"),
    ("fit_temperature", "s, y, q, 0.2"),
    ("fit_beta_calib", "p, y"),
    ("fit_beta_calib", "p, y, q"),
    ("fit_ilps", "s, y, 10"),
    ("fit_ilps", "s, y, 20, q"),
    ("fit_bbq", "p, y"),
    ("fit_confcalib", "p, y, f"),
    ("fit_confcalib", "p, y, f, 5, 0.0"),
    ("fit_field_calib", "s, y, f, 10"),
    ("fit_field_calib", "s, y, f, 5, 0.5"),
    ("mvce", "p, y, f"),
    ("mvce", "p, y, day, 4, 3"),
    ("ece_top_label", "make_array(p / 2, p / 2, 1 - p), y"),
    (
        "ece_classwise",
        "make_array(p / 2, p / 2, 1 - p), y, 10, 'uniform', w",
    ),
    (
        "fit_ovr",
        "make_array(p / 2, p / 2, 1 - p), y, 'isotonic', w",
    ),
    ("cbpe", "p"),
    ("cbpe", "p, 0.3, w"),
    ("fit_ovr", "make_array(s, -s, 0.5 * s), y"),
    ("logloss", "make_array(p / 2, p / 2, 1 - p), y"),
    ("brier", "make_array(p / 2, p / 2, 1 - p), y, w"),
    (
        "mce_top_label",
        "make_array(p / 2, p / 2, 1 - p), y, 10, 'uniform', w",
    ),
    (
        "reliability_top_label",
        "make_array(p / 2, p / 2, 1 - p), y, 8, 'torchmetrics'",
    ),
    ("ece_interval", "p, y, id"),
    ("ece_interval", "p, y, f, 10, 'netcal', 0.9, 50"),
    ("ece_diff_interval", "p, q, y, id"),
    ("ece_diff_interval", "p, q, y, f, 8, 'torchmetrics', 0.8"),
];

#[tokio::test]
async fn merged_daily_states_equal_the_aggregate_over_all_rows() {
    let ctx = context().await;
    let dir = tempfile::tempdir().unwrap();
    for (i, (f, args)) in CASES.iter().enumerate() {
        let direct = scalar(&ctx, &format!("SELECT {f}({args}) FROM t")).await;
        let merged = scalar(
            &ctx,
            &format!(
                "SELECT {f}_merge(s) FROM (SELECT day, {f}_state({args}) AS s FROM t GROUP BY day)"
            ),
        )
        .await;
        assert_close(&format!("{f}({args}) merged by day"), &direct, &merged);
        // Stored in Parquet and read back (strings come back as Utf8View).
        let path = dir.path().join(format!("states{i}.parquet"));
        run(
            &ctx,
            &format!(
                "COPY (SELECT day, {f}_state({args}) AS s FROM t GROUP BY day) TO '{}'",
                path.display()
            ),
        )
        .await;
        let table = format!("states{i}");
        ctx.register_parquet(&table, path.to_str().unwrap(), Default::default())
            .await
            .unwrap();
        let from_parquet = scalar(&ctx, &format!("SELECT {f}_merge(s) FROM {table}")).await;
        assert_close(&format!("{f}({args}) via Parquet"), &direct, &from_parquet);
        // Grouped merge: per parity of the day, against F per parity.
        let by_half = run(
            &ctx,
            &format!(
                "SELECT day % 2 AS h, {f}_merge(s) FROM (SELECT day, {f}_state({args}) AS s FROM t GROUP BY day)
                 GROUP BY day % 2 ORDER BY h"
            ),
        )
        .await;
        let direct_half = run(
            &ctx,
            &format!("SELECT day % 2 AS h, {f}({args}) FROM t GROUP BY day % 2 ORDER BY h"),
        )
        .await;
        let rows = |b: &[RecordBatch]| -> Vec<ScalarValue> {
            b.iter()
                .flat_map(|b| {
                    (0..b.num_rows())
                        .map(move |r| ScalarValue::try_from_array(b.column(1), r).unwrap())
                })
                .collect()
        };
        for (a, b) in rows(&direct_half).iter().zip(rows(&by_half).iter()) {
            assert_close(&format!("{f}({args}) by parity"), a, b);
        }
        assert!(!leaves(&direct).is_empty());
    }
}

#[tokio::test]
async fn every_merge_function_is_covered() {
    for f in calibsql::udfs::all_aggregate_functions() {
        if let Some(base) = f.name().strip_suffix("_merge") {
            assert!(
                CASES.iter().any(|(name, _)| *name == base),
                "{} has no case in tests/state/state_merge.rs",
                f.name()
            );
        }
    }
}

#[tokio::test]
async fn states_that_do_not_belong_together_are_errors() {
    let ctx = context().await;
    let e = error(
        &ctx,
        "SELECT ece_merge(s) FROM (SELECT ece_state(p, y) AS s FROM t UNION ALL SELECT ece_state(p, y, 10) FROM t)",
    )
    .await;
    assert!(e.contains("ece_merge: cannot merge states made with different parameters: ece(n_bins => 15.0, strategy => 'uniform', w => 1.0) and ece(n_bins => 10.0, strategy => 'uniform', w => 1.0)")
        || e.contains("ece_merge: cannot merge states made with different parameters: ece(n_bins => 10.0, strategy => 'uniform', w => 1.0) and ece(n_bins => 15.0, strategy => 'uniform', w => 1.0)"), "{e}");
    // ece and mce states have the same layout: told apart by the recorded function.
    let e = error(
        &ctx,
        "SELECT ece_merge(s) FROM (SELECT mce_state(p, y) AS s FROM t)",
    )
    .await;
    assert!(e.contains("ece_merge: got a state of mce"), "{e}");
    // Another layout: a planning error.
    let e = error(
        &ctx,
        "SELECT logloss_merge(s) FROM (SELECT ece_state(p, y) AS s FROM t)",
    )
    .await;
    assert!(
        e.contains("logloss_merge: the state's layout is not logloss's"),
        "{e}"
    );
    // The registry knows which functions make a layout: the error names them.
    let e = error(
        &ctx,
        "SELECT ece_merge(s) FROM (SELECT logloss_state(p, y) AS s FROM t)",
    )
    .await;
    assert!(
        e.contains("ece_merge: the state's layout is not ece's")
            && e.contains("it was made by")
            && e.contains("logloss_state"),
        "{e}"
    );
    let e = error(&ctx, "SELECT ece_merge(p) FROM t").await;
    assert!(
        e.contains("ece_merge: argument state must be a state made by ece_state"),
        "{e}"
    );
    // A state of a future format.
    let e = error(
        &ctx,
        "SELECT ece_merge(named_struct('format', arrow_cast(2, 'Int32'), 'function', s['function'],
           'params', s['params'], 'state', s['state'])) FROM (SELECT ece_state(p, y) AS s FROM t)",
    )
    .await;
    assert!(
        e.contains("ece_merge: state format 2 is not one this calibsql reads (format 1)"),
        "{e}"
    );
    let e = error(&ctx, "SELECT ece_state(p, y, 10, 'quantile') FROM t").await;
    assert!(
        e.contains("ece_state: strategy 'quantile' keeps every row"),
        "{e}"
    );
}

/// A stored state holding rows (`auc`'s layout: `neg_p`, `pos_p`, `neg_w`, `pos_w`, …) whose
/// scores are not probabilities, or whose weights are not weights, is refused where a `_merge`
/// takes it, naming the function, the field and the value, for every aggregate that keeps
/// rows. Such a state is written by hand here: the real state of the case, one list replaced.
/// A NaN among 10,000 ascending scores (a merged run, not copied) once sent `cbpe_merge`,
/// `hosmer_lemeshow_merge` and `calibration_decomposition_merge` into an endless loop.
#[tokio::test]
async fn stored_rows_that_are_not_probabilities_are_errors() {
    use datafusion::arrow::array::{Array, AsArray};
    let ctx = context().await;
    let mut covered = 0;
    for (f, args) in CASES {
        let state = run(&ctx, &format!("SELECT {f}_state({args}) AS st FROM t")).await;
        let state = state.iter().find(|b| b.num_rows() > 0).expect("a row");
        let inner = state.column(0).as_struct().column_by_name("state").unwrap();
        let fields: Vec<String> = match inner.data_type() {
            datafusion::arrow::datatypes::DataType::Struct(fs) => {
                fs.iter().map(|f| f.name().clone()).collect()
            }
            other => panic!("{f}: state of type {other}"),
        };
        if !fields.iter().any(|n| n == "neg_p") {
            continue;
        }
        covered += 1;
        // A per-class state lists each class's binary state: one list more around each.
        let neg_w = inner.as_struct().column_by_name("neg_w").unwrap();
        let per_class = matches!(
            neg_w.data_type(),
            datafusion::arrow::datatypes::DataType::List(f) if f.data_type().is_nested()
        );
        let first_class = match per_class {
            true => neg_w.as_list::<i32>().value(0).as_list::<i32>().value(0),
            false => neg_w.as_list::<i32>().value(0),
        };
        let weighted = !first_class.is_empty();
        let classes = |list: &str| match per_class {
            true => format!("make_array({list}, {list}, {list})"),
            false => list.to_string(),
        };
        let long = |bad: &str| {
            format!(
                "(SELECT array_append(array_agg(CAST(value AS DOUBLE) / 20000.0 ORDER BY value), {bad})
                  FROM generate_series(1, 10000))"
            )
        };
        // (the field named, neg_p, neg_w (None: the state's own), the error's end)
        let cases: Vec<(&str, String, Option<&str>, &str)> = if weighted {
            // Scores and weights of equal length; a negative weight.
            vec![(
                "neg_w",
                "[0.1, 0.2, 0.3]".into(),
                Some("[1.0, -1.0, 1.0]"),
                "holds -1, not a weight",
            )]
        } else {
            vec![
                (
                    "neg_p",
                    long("'NaN'::double"),
                    None,
                    "holds NaN, not a probability",
                ),
                ("neg_p", long("5.0"), None, "holds 5, not a probability"),
                (
                    "neg_p",
                    "[-0.5]".into(),
                    None,
                    "holds -0.5, not a probability",
                ),
            ]
        };
        for (field, neg_p, neg_w, want) in cases {
            let rebuilt: Vec<String> = fields
                .iter()
                .map(|n| match (n.as_str(), neg_w) {
                    ("neg_p", _) => format!("'neg_p', {}", classes(&neg_p)),
                    ("neg_w", Some(w)) => format!("'neg_w', {}", classes(w)),
                    _ => format!("'{n}', st['state']['{n}']"),
                })
                .collect();
            let sql = format!(
                "WITH s AS (SELECT {f}_state({args}) AS st FROM t),
                 m AS (SELECT named_struct('format', st['format'], 'function', st['function'],
                        'params', st['params'], 'state', named_struct({})) AS x FROM s)
                 SELECT {f}_merge(x) FROM (SELECT x FROM m UNION ALL SELECT x FROM m)",
                rebuilt.join(", ")
            );
            let e = error(&ctx, &sql).await;
            let want = format!("a stored state's {field} {want}");
            assert!(
                e.contains(&format!("{f}: {want}")) || e.contains(&format!("{f}_merge: {want}")),
                "{f}({args}): {e}\nwanted: {want}"
            );
        }
    }
    assert!(covered >= 3, "only {covered} cases keep rows");
    // smooth_ece's rows (below its grid's threshold) with their labels.
    for (rows_p, rows_y, want) in [
        (
            "[0.2, 'NaN'::double]",
            "[0.0, 1.0]",
            "rows_p holds NaN, not a probability",
        ),
        ("[0.2, 0.4]", "[0.0, 2.0]", "rows_y holds 2, not 0 or 1"),
    ] {
        let e = error(
            &ctx,
            &format!(
                "WITH s AS (SELECT smooth_ece_state(p, y) AS st FROM t WHERE id < 20)
                 SELECT smooth_ece_merge(named_struct('format', st['format'],
                   'function', st['function'], 'params', st['params'],
                   'state', named_struct('rows_p', {rows_p}, 'rows_y', {rows_y},
                     'grid_residual', st['state']['grid_residual'],
                     'grid_count', st['state']['grid_count'], 'n', st['state']['n']))) FROM s"
            ),
        )
        .await;
        assert!(
            e.contains(&format!("smooth_ece: a stored state's {want}")),
            "{e}"
        );
    }
}

/// A fit's state stored before the fits kept rows (format 1 without `neg_s` and `pos_s`:
/// every row in its points, one per distinct score) still merges, into the model of the same
/// rows. The old state is written here as that calibsql wrote it: points summed with SQL's
/// own `GROUP BY`, so this compares with an independent summation, not with this code's.
#[tokio::test]
async fn fit_states_stored_before_rows_were_kept_still_merge() {
    let ctx = context().await;
    run(
        &ctx,
        "CREATE VIEW old AS SELECT named_struct('format', arrow_cast(1, 'Int32'),
           'function', 'fit_isotonic', 'params', (SELECT fit_isotonic_state(s, y)['params'] FROM t),
           'state', named_struct('grid', false, 'rows', arrow_cast(sum(n), 'Int64'),
             's_min', min(s), 's_max', max(s), 'keys', arrow_cast(make_array(), 'List(Int64)'),
             'lo', array_agg(s ORDER BY s), 'n', array_agg(n ORDER BY s), 't', array_agg(t ORDER BY s),
             'nd', arrow_cast(make_array(), 'List(Float64)'), 'nd2', arrow_cast(make_array(), 'List(Float64)'),
             'td', arrow_cast(make_array(), 'List(Float64)'), 'td2', arrow_cast(make_array(), 'List(Float64)'))) AS st
         FROM (SELECT s, arrow_cast(count(*), 'Float64') AS n, arrow_cast(sum(y), 'Float64') AS t FROM t GROUP BY s)",
    )
    .await;
    let merged = scalar(&ctx, "SELECT fit_isotonic_merge(st) FROM old").await;
    let direct = scalar(&ctx, "SELECT fit_isotonic(s, y) FROM t").await;
    assert_eq!(merged, direct);
    // A cut that is not an earlier layout (a field other than the added ones missing) is
    // still a layout error.
    let e = error(
        &ctx,
        "SELECT fit_isotonic_merge(named_struct('format', st['format'], 'function', st['function'],
           'params', st['params'], 'state', named_struct('grid', st['state']['grid'],
           'rows', st['state']['rows']))) FROM old",
    )
    .await;
    assert!(
        e.contains("fit_isotonic_merge: the state's layout is not fit_isotonic's"),
        "{e}"
    );
}

#[tokio::test]
async fn sliding_windows_subtract_states_and_rows() {
    let ctx = context().await;
    // A 3-day rolling ECE from daily states, against ECE over those days' rows.
    let rolled = run(
        &ctx,
        "SELECT day, ece_merge(s) OVER (ORDER BY day ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) AS e,
                field_rce_merge(r) OVER (ORDER BY day ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) AS r
         FROM (SELECT day, ece_state(p, y, 10, 'sklearn', w) AS s, field_rce_state(p, y, f) AS r FROM t GROUP BY day)
         ORDER BY day",
    )
    .await;
    for b in &rolled {
        for r in 0..b.num_rows() {
            let day = ScalarValue::try_from_array(b.column(0), r).unwrap();
            let ScalarValue::Int64(Some(d)) = day else {
                panic!("day {day:?}")
            };
            for (col, call) in [
                (1, "ece(p, y, 10, 'sklearn', w)"),
                (2, "field_rce(p, y, f)"),
            ] {
                let got = ScalarValue::try_from_array(b.column(col), r).unwrap();
                let want = scalar(
                    &ctx,
                    &format!("SELECT {call} FROM t WHERE day BETWEEN {} AND {d}", d - 2),
                )
                .await;
                assert_close(&format!("{call} days {}..{d}", d - 2), &want, &got);
            }
        }
    }
    // Rows leaving a frame of the plain aggregate.
    let rolled = run(
        &ctx,
        "SELECT id, logloss(p, y) OVER (ORDER BY id ROWS BETWEEN 99 PRECEDING AND CURRENT ROW) AS l,
                mce(p, y, 5) OVER (ORDER BY id ROWS BETWEEN 99 PRECEDING AND CURRENT ROW) AS m
         FROM t WHERE id IN (150, 1000, 2999) OR id <= 3000 ORDER BY id",
    )
    .await;
    let mut checked = 0;
    for b in &rolled {
        for r in 0..b.num_rows() {
            let ScalarValue::Int64(Some(id)) = ScalarValue::try_from_array(b.column(0), r).unwrap()
            else {
                panic!()
            };
            if ![1, 150, 1000, 2999].contains(&id) {
                continue;
            }
            for (col, call) in [(1, "logloss(p, y)"), (2, "mce(p, y, 5)")] {
                let got = ScalarValue::try_from_array(b.column(col), r).unwrap();
                let want = scalar(
                    &ctx,
                    &format!("SELECT {call} FROM t WHERE id BETWEEN {} AND {id}", id - 99),
                )
                .await;
                assert_close(&format!("{call} rows ..{id}"), &want, &got);
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 8);
    // Aggregates whose state is not a sum say so.
    let e = error(
        &ctx,
        "SELECT auc(p, y) OVER (ORDER BY id ROWS BETWEEN 5 PRECEDING AND CURRENT ROW) FROM t",
    )
    .await;
    assert!(e.to_lowercase().contains("sliding"), "{e}");
}

/// A partial state merged from a slice of the state arrays (one group's row of them, its
/// lists' values shared with the other rows: what DuckDB's per-group merges hand over) gives
/// that group's own value. The field-aware fits once merged the other rows' entries too.
#[test]
fn a_sliced_partial_state_merges_only_its_rows() {
    use std::sync::Arc;

    use datafusion::arrow::array::{ArrayRef, Float64Array, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::logical_expr::EmitTo;

    let n = 600;
    let p: Vec<f64> = (0..n).map(|i| ((i * 37) % 97) as f64 / 97.0).collect();
    let y: Vec<f64> = (0..n).map(|i| ((i * 7919) % 3 == 0) as u8 as f64).collect();
    let f: Vec<String> = (0..n).map(|i| format!("s{}", (i * 13) % 5)).collect();
    let groups: Vec<usize> = (0..n).map(|i| i % 3).collect();
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Float64Array::from(p)),
        Arc::new(Float64Array::from(y)),
        Arc::new(StringArray::from(f)),
    ];
    let schema = Arc::new(Schema::new(vec![
        Field::new("p", DataType::Float64, false),
        Field::new("y", DataType::Float64, false),
        Field::new("f", DataType::Utf8, false),
    ]));
    for name in [
        "fit_field_calib",
        "fit_confcalib",
        "field_ece",
        "field_rce",
        "ece",
        "auc",
    ] {
        let call = support::UdafCall::columns(
            name,
            Arc::clone(&schema),
            &["p", "y", "f"][..if name.starts_with("fit_") || name.starts_with("field_") {
                3
            } else {
                2
            }],
        );
        let args = &columns[..call.exprs.len()];
        let mut all = call.groups_accumulator();
        all.update_batch(args, &groups, None, 3).unwrap();
        let states = all.state(EmitTo::All).unwrap();
        let mut again = call.groups_accumulator();
        again.update_batch(args, &groups, None, 3).unwrap();
        let want = again.evaluate(EmitTo::All).unwrap();
        for g in 0..3 {
            let mut one = call.accumulator();
            let slice: Vec<ArrayRef> = states.iter().map(|s| s.slice(g, 1)).collect();
            one.merge_batch(&slice).unwrap();
            let got = one.evaluate().unwrap();
            let want = ScalarValue::try_from_array(&want, g).unwrap();
            assert_close(&format!("{name} group {g}"), &got, &want);
        }
    }
}
