//! The fits' bounded state: beyond 65,536 distinct scores a group switches to the fixed grid.
//! These tests check, on data far past the cap, that (1) the loss the model reports is the
//! exact objective at the returned parameters to 1e-6 relative (the grid's approximation
//! bound), recomputed row by row in SQL through `calibrate`; (2) any partitioning gives the
//! same model; (3) state memory stops growing with the row count.

use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray, Float64Array};
use datafusion::arrow::datatypes::{DataType, Float64Type};
use datafusion::prelude::SessionConfig;

use crate::support::{close, close_rel};

/// 100,000 rows with distinct scores: s a logit in about [-12, 12], a preference
/// r ~ Bernoulli(σ(0.7 s − 1)), an exposure propensity q in [0.05, 1] and the observed click
/// y = r · Bernoulli(q) — missing not at random, so E[y / q] = P(r = 1) and the IPS objective
/// is bounded.
const DATA: &str = "(SELECT s, CASE WHEN u < 1 / (1 + exp(-(0.7 * s - 1))) AND e < q THEN 1 ELSE 0 END AS y, q FROM (
    SELECT 12 * (2 * ((v * 2654435761) % 1000003) / 1000003.0 - 1) * (((v * 97) % 101) / 101.0) AS s,
           ((v * 40503) % 999983) / 999983.0 AS u,
           ((v * 7919) % 999979) / 999979.0 AS e,
           0.05 + 0.95 * ((v * 69069) % 1000033) / 1000033.0 AS q
    FROM (SELECT value AS v FROM generate_series(1, 100000))))";

/// Runs a statement whose result is not needed (CREATE TABLE).
async fn run(ctx: &datafusion::prelude::SessionContext, sql: &str) {
    ctx.sql(sql).await.unwrap().collect().await.unwrap();
}

async fn one(ctx: &datafusion::prelude::SessionContext, sql: &str) -> Vec<Option<f64>> {
    let b = ctx.sql(sql).await.unwrap().collect().await.unwrap();
    let b = datafusion::arrow::compute::concat_batches(&b[0].schema(), &b).unwrap();
    b.columns()
        .iter()
        .map(|c| {
            let c = datafusion::arrow::compute::cast(c, &DataType::Float64).unwrap();
            let c = c.as_primitive::<Float64Type>();
            c.is_valid(0).then(|| c.value(0))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grid_loss_is_the_exact_objective_and_partitioning_does_not_matter() {
    let single = calibsql::new_context_with_config(SessionConfig::new().with_target_partitions(1));
    let multi = calibsql::new_context_with_config(
        SessionConfig::new()
            .with_target_partitions(4)
            .with_batch_size(1000),
    );
    for ctx in [&single, &multi] {
        run(ctx, &format!("CREATE TABLE d AS SELECT * FROM {DATA}")).await;
    }
    let distinct = one(&single, "SELECT count(DISTINCT s) FROM d").await;
    assert!(distinct[0].unwrap() > 70_000.0, "{distinct:?}");
    for (fit, ips) in [
        ("fit_platt", false),
        ("fit_gaussian_calib", false),
        ("fit_gamma_calib", false),
        ("fit_gaussian_calib", true),
        ("fit_gamma_calib", true),
    ] {
        let args = if ips { "s, y, q" } else { "s, y" };
        let target = if ips { "y / greatest(q, 0.1)" } else { "y" };
        let sql = format!(
            "WITH m AS (SELECT {fit}({args}) AS m FROM d)
             SELECT m['loss'], avg(-({target}) * ln(p) - (1 - {target}) * ln(1 - p)), m['a'], m['b'], m['c']
             FROM (SELECT calibrate(s, m) AS p, y, q, m FROM d CROSS JOIN m) GROUP BY m"
        );
        let a = one(&single, &sql).await;
        let (reported, exact) = (a[0].unwrap(), a[1].unwrap());
        // `cargo test --test fits fit_grid -- --nocapture` prints the grid's measured error.
        eprintln!(
            "{fit} ips={ips}: relative deviation {:.2e}",
            (reported - exact).abs() / exact.abs()
        );
        assert!(
            close_rel(reported, exact, 1e-6),
            "{fit} ips={ips}: reported loss {reported}, exact objective {exact}"
        );
        let b = one(&multi, &sql).await;
        for (x, y) in a.iter().zip(&b) {
            match (x, y) {
                (Some(x), Some(y)) => assert!(
                    close(*y, *x, 1e-9 * x.abs().max(1e-12)),
                    "{fit} ips={ips}: 1 partition {a:?} vs 4 partitions {b:?}"
                ),
                (None, None) => {}
                _ => panic!("{fit}: {a:?} vs {b:?}"),
            }
        }
    }
}

/// A fit without `GROUP BY` over rows with no NULLs takes a whole-batch path (bulk checks, then
/// a chunked loop over the grid); a `GROUP BY` with several groups, or a NULL in the batch,
/// takes the per-row path. Both add the same rows to the same cells in the same order, so
/// the models must be identical.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whole_batch_and_per_row_paths_give_the_same_model() {
    let ctx = calibsql::new_context_with_config(SessionConfig::new().with_target_partitions(1));
    run(&ctx, &format!("CREATE TABLE d AS SELECT * FROM {DATA}")).await;
    run(
        &ctx,
        "CREATE TABLE d2 AS SELECT s, y, q, 1 AS g FROM d
         UNION ALL SELECT s, y, q, 2 AS g FROM d
         UNION ALL SELECT NULL, 1, 0.5, 3 AS g",
    )
    .await;
    for fit in ["fit_platt", "fit_gaussian_calib", "fit_gamma_calib"] {
        for args in ["s, y", "s, y, q"] {
            let model = |sql: String| {
                let ctx = &ctx;
                async move {
                    let b = ctx.sql(&sql).await.unwrap().collect().await.unwrap();
                    let b = datafusion::arrow::compute::concat_batches(&b[0].schema(), &b).unwrap();
                    datafusion::arrow::util::display::array_value_to_string(b.column(0), 0).unwrap()
                }
            };
            let whole = model(format!("SELECT {fit}({args}) FROM d")).await;
            for sql in [
                format!("SELECT {fit}({args}) FROM d2 WHERE g = 1 GROUP BY g"),
                format!(
                    "SELECT m FROM (SELECT g, {fit}({args}) AS m FROM d2 GROUP BY g) WHERE g = 2"
                ),
                format!("SELECT {fit}({args}) FROM d2 WHERE g <> 2"),
            ] {
                assert_eq!(model(sql.clone()).await, whole, "{sql}");
            }
        }
    }
}

use crate::support;

/// A row accumulator of `fit` over Float64 columns `cols` (as the planner would build it).
fn accumulator(fit: &str, cols: &[&str]) -> Box<dyn datafusion::logical_expr::Accumulator> {
    support::UdafCall::float_columns(fit, cols).accumulator()
}

/// Partial states in either mode (grid past the cap, exact below it) merge, in any order,
/// into the model one accumulator fed every row gives.
#[test]
fn grid_and_exact_partial_states_merge() {
    use datafusion::arrow::array::ArrayRef;
    use datafusion::scalar::ScalarValue;
    // `n` rows from `start`: distinct scores in about [-12, 12], y and q from hashes.
    let rows = |start: usize, n: usize| -> Vec<ArrayRef> {
        let u = |i: usize, k: usize| ((i * k) % 1_000_003) as f64 / 1_000_003.0;
        let s: Float64Array = (start..start + n)
            .map(|i| Some(24.0 * u(i, 2654435761) - 12.0))
            .collect();
        let y: Float64Array = (start..start + n)
            .map(|i| Some(f64::from(u(i, 40503) < 0.3)))
            .collect();
        let q: Float64Array = (start..start + n)
            .map(|i| Some(0.05 + 0.95 * u(i, 69069)))
            .collect();
        vec![Arc::new(s), Arc::new(y), Arc::new(q)]
    };
    let (big, small) = (rows(1, 80_000), rows(90_000, 1_000));
    let model = |acc: &mut Box<dyn datafusion::logical_expr::Accumulator>| {
        let ScalarValue::Struct(m) = acc.evaluate().unwrap() else {
            panic!("not a struct")
        };
        ["a", "b", "c", "loss"].map(|f| {
            let c = m.column_by_name(f).unwrap();
            c.as_primitive::<Float64Type>().value(0)
        })
    };
    let state = |part: &[ArrayRef]| -> Vec<ArrayRef> {
        let mut acc = accumulator("fit_gaussian_calib", &["s", "y", "q"]);
        acc.update_batch(part).unwrap();
        acc.state()
            .unwrap()
            .into_iter()
            .map(|v| v.to_array().unwrap())
            .collect()
    };
    let mut whole = accumulator("fit_gaussian_calib", &["s", "y", "q"]);
    whole.update_batch(&big).unwrap();
    whole.update_batch(&small).unwrap();
    let expected = model(&mut whole);
    let (grid_state, exact_state) = (state(&big), state(&small));
    for order in [[&grid_state, &exact_state], [&exact_state, &grid_state]] {
        let mut acc = accumulator("fit_gaussian_calib", &["s", "y", "q"]);
        for st in order {
            acc.merge_batch(st).unwrap();
        }
        let got = model(&mut acc);
        for (g, e) in got.iter().zip(&expected) {
            assert!(
                close(*g, *e, 1e-9 * e.abs().max(1e-12)),
                "{got:?} vs {expected:?}"
            );
        }
    }
}

#[test]
fn fit_state_memory_stops_growing_with_rows() {
    let batch = |start: usize, n: usize| -> [datafusion::arrow::array::ArrayRef; 2] {
        // Scores in [1, 2): at most 256 grid cells.
        let s: Float64Array = (start..start + n)
            .map(|i| Some(1.0 + ((i * 2654435761) % 1000003) as f64 / 1000003.0))
            .collect();
        let y: Float64Array = (start..start + n)
            .map(|i| Some((i % 3 == 0) as i64 as f64))
            .collect();
        [Arc::new(s), Arc::new(y)]
    };
    let mut acc = accumulator("fit_gaussian_calib", &["s", "y"]);
    let mut sizes = vec![];
    for chunk in 0..50 {
        acc.update_batch(&batch(chunk * 20_000, 20_000)).unwrap();
        sizes.push(acc.size());
    }
    // After 200k rows (past the exact cap) the size no longer grows with rows.
    assert!(sizes[49] <= sizes[9] + 4096 * 128, "{sizes:?}");
    assert!(
        sizes[49] < 2 << 20,
        "state of 1M rows is {} bytes",
        sizes[49]
    );
    let model = acc.evaluate().unwrap();
    assert!(!model.is_null());
}
