//! The science, checked on generated data whose truth is known (`calibsql::generate`, fixed
//! seed, 200,000 rows): the simulation means what it says, UERM with the true exposure
//! removes the missing-not-at-random bias that the naive fits keep (Kweon et al., AAAI 2022,
//! Proposition 1), and ConfCalib lowers field-level miscalibration (Zhao et al.).
//!
//! Numbers are printed; see them with `cargo test --test science -- --nocapture`.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use calibsql::generate::{self, Config};
use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Float64Type};
use datafusion::prelude::SessionContext;
use datafusion::sql::parser::DFParser;
use tempfile::TempDir;

const SEED: u64 = 20_220_222;
const ROWS: u64 = 200_000;

/// The data, generated once for all tests of this file.
fn data() -> &'static Path {
    static DATA: OnceLock<TempDir> = OnceLock::new();
    DATA.get_or_init(|| {
        let dir = TempDir::new().unwrap();
        let mut config = Config::new(ROWS);
        config.seed = SEED;
        generate::generate(dir.path(), &config, &mut |_| {}).unwrap();
        dir
    })
    .path()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// A session with `valid` and `test` registered from `dir`.
async fn session(dir: &Path) -> SessionContext {
    let ctx = calibsql::new_context();
    for split in ["valid", "test"] {
        let location = dir.join(split).display().to_string();
        calibsql::tables::register_table(&ctx, split, &location, None)
            .await
            .unwrap();
    }
    ctx
}

/// Runs the statements of `sql` in order; the batches of the last one.
async fn run(ctx: &SessionContext, sql: &str) -> Vec<RecordBatch> {
    let mut result = Vec::new();
    for statement in DFParser::parse_sql(sql).unwrap() {
        let plan = ctx.state().statement_to_plan(statement).await.unwrap();
        result = ctx
            .execute_logical_plan(plan)
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
    }
    result
}

/// Column `i` of every row, as f64.
fn floats(batches: &[RecordBatch], i: usize) -> Vec<f64> {
    batches
        .iter()
        .flat_map(|b| {
            let column = cast(b.column(i), &DataType::Float64).unwrap();
            let column = column.as_primitive::<Float64Type>();
            (0..column.len())
                .map(|r| column.value(r))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Column `i` of every row, as text.
fn strings(batches: &[RecordBatch], i: usize) -> Vec<String> {
    batches
        .iter()
        .flat_map(|b| {
            let column = cast(b.column(i), &DataType::Utf8).unwrap();
            let column = column.as_string::<i32>();
            (0..column.len())
                .map(|r| column.value(r).to_string())
                .collect::<Vec<_>>()
        })
        .collect()
}

fn one_row(batches: &[RecordBatch]) -> Vec<f64> {
    (0..batches[0].num_columns())
        .map(|i| floats(batches, i)[0])
        .collect()
}

#[test]
fn the_hidden_truth_is_the_truth() {
    runtime().block_on(async {
        let ctx = session(data()).await;
        // Labels follow from the hidden columns exactly.
        let broken = one_row(
            &run(
                &ctx,
                "SELECT (SELECT count(*) FROM valid WHERE click <> exposed * relevant
                           OR exposure < 0.1 OR exposure > 1)
                      + (SELECT count(*) FROM test WHERE click <> relevant OR exposed <> 1)",
            )
            .await,
        );
        assert_eq!(broken[0], 0.0);

        let [rate, ece_truth, pref, click_valid, exposed_pref, ips, p_model_valid] = one_row(
            &run(
                &ctx,
                "SELECT (SELECT avg(relevant) FROM test) AS a,
                        (SELECT ece(true_pref, relevant) FROM test) AS b,
                        (SELECT avg(true_pref) FROM valid) AS c,
                        (SELECT avg(click) FROM valid) AS d,
                        (SELECT avg(exposure * true_pref) FROM valid) AS e,
                        (SELECT avg(click / exposure) FROM valid) AS f,
                        (SELECT avg(p_model) FROM valid) AS g",
            )
            .await,
        )[..] else {
            unreachable!()
        };
        println!(
            "liked {rate:.4}; ECE(true_pref, relevant) {ece_truth:.4}; valid: mean true_pref \
             {pref:.4}, click rate {click_valid:.4} (expected {exposed_pref:.4}), mean \
             click/exposure {ips:.4}, mean p_model {p_model_valid:.4}"
        );
        assert!((0.08..0.12).contains(&rate), "about 10% liked: {rate}");
        // true_pref is calibrated for the sampled preference: only sampling noise is left.
        assert!(ece_truth < 0.01, "{ece_truth}");
        // Missing not at random: the clicks are the exposed preferences …
        assert!((click_valid - exposed_pref).abs() < 0.1 * exposed_pref);
        assert!(click_valid < 0.3 * pref);
        // … and inverse propensity weighting with the true exposure undoes it (on average).
        assert!((ips - pref).abs() < 0.05 * pref, "{ips} vs {pref}");
        // The CTR model is calibrated overall (its errors are per field value).
        assert!((p_model_valid - click_valid).abs() < 0.1 * click_valid);
    });
}

/// ECE against `true_pref` without sampling noise: each row counted as a positive weighing
/// true_pref and a negative weighing 1 − true_pref.
const ECE_VS_TRUTH: &str = "
WITH models AS (
            SELECT 1 AS k, 'Platt' AS method, fit_platt(score, click) AS naive,
                   fit_platt(score, click, exposure) AS uerm_true,
                   fit_platt(score, click, popularity_propensity(item_count, max_count)) AS uerm_pop
            FROM valid
  UNION ALL SELECT 2, 'Gaussian', fit_gaussian_calib(score, click),
                   fit_gaussian_calib(score, click, exposure),
                   fit_gaussian_calib(score, click, popularity_propensity(item_count, max_count))
            FROM valid
  UNION ALL SELECT 3, 'Gamma', fit_gamma_calib(score, click),
                   fit_gamma_calib(score, click, exposure),
                   fit_gamma_calib(score, click, popularity_propensity(item_count, max_count))
            FROM valid
),
predictions AS (
  SELECT m.k, m.method, calibrate(t.score, m.naive) AS naive,
         calibrate(t.score, m.uerm_true) AS uerm_true, calibrate(t.score, m.uerm_pop) AS uerm_pop,
         t.true_pref
  FROM test t CROSS JOIN models m
),
twice AS (
            SELECT k, method, naive, uerm_true, uerm_pop, 1 AS y, true_pref AS w FROM predictions
  UNION ALL SELECT k, method, naive, uerm_true, uerm_pop, 0, 1 - true_pref FROM predictions
)
SELECT method,
       ece(naive, y, 15, 'uniform', w), ece(uerm_true, y, 15, 'uniform', w),
       ece(uerm_pop, y, 15, 'uniform', w)
FROM twice GROUP BY k, method ORDER BY k";

#[test]
fn uerm_with_the_true_exposure_beats_the_naive_fits() {
    runtime().block_on(async {
        let ctx = session(data()).await;
        let batches = run(&ctx, ECE_VS_TRUTH).await;
        let methods = strings(&batches, 0);
        let naive = floats(&batches, 1);
        let uerm_true = floats(&batches, 2);
        let uerm_pop = floats(&batches, 3);
        assert_eq!(methods, ["Platt", "Gaussian", "Gamma"]);
        println!("ECE against true_pref on test (15 bins): naive | UERM, true exposure | UERM, popularity");
        for i in 0..methods.len() {
            println!(
                "  {:<8} {:.4} | {:.4} | {:.4}",
                methods[i], naive[i], uerm_true[i], uerm_pop[i]
            );
            // Proposition 1: the IPS loss with the true propensity is unbiased for the loss on
            // true preferences, so the fit lands near the truth; the naive fit learns
            // P(click | score) = P(exposed and liked | score), far below it.
            assert!(
                uerm_true[i] < 0.5 * naive[i],
                "{}: UERM {} vs naive {}",
                methods[i],
                uerm_true[i],
                naive[i]
            );
        }
    });
}

/// The last table of sql/field_calibration.sql: (method, field_rce_site, multi_field_rce).
async fn field_report(ctx: &SessionContext) -> Vec<(String, f64, f64)> {
    let sql = std::fs::read_to_string(repo().join("sql/field_calibration.sql")).unwrap();
    let batches = run(ctx, &sql).await;
    let methods = strings(&batches, 0);
    let site = floats(&batches, 1);
    let multi = floats(&batches, 2);
    (0..methods.len())
        .map(|i| (methods[i].clone(), site[i], multi[i]))
        .collect()
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn confcalib_lowers_field_level_miscalibration() {
    runtime().block_on(async {
        let ctx = session(data()).await;
        let rows = field_report(&ctx).await;
        for (method, site, multi) in &rows {
            println!("  {method:<48} Field-RCE site_id {site:.4}  multi-field RCE {multi:.4}");
        }
        let [uncalibrated, single, multi] = &rows[..] else {
            panic!("{rows:?}")
        };
        assert!(uncalibrated.0.starts_with("uncalibrated") && single.0.contains("site_id"));
        // Single-field ConfCalib on site_id lowers the site-level RCE …
        assert!(single.1 < 0.85 * uncalibrated.1, "{rows:?}");
        // … and fusing the fields' multipliers lowers the multi-field RCE further.
        assert!(multi.2 < 0.95 * single.2, "{rows:?}");
    });
}

#[test]
fn generation_is_deterministic_whatever_the_threads_and_batches() {
    let rows = 30_001;
    let a = TempDir::new().unwrap();
    let b = TempDir::new().unwrap();
    let c = TempDir::new().unwrap();
    let mut config = Config::new(rows);
    config.seed = 7;
    config.threads = 2;
    generate::generate(a.path(), &config, &mut |_| {}).unwrap();
    generate::generate(c.path(), &config, &mut |_| {}).unwrap();
    let mut other = config.clone();
    other.threads = 1;
    other.batch_rows = 1_000;
    other.rows_per_file = 4_096;
    generate::generate(b.path(), &other, &mut |_| {}).unwrap();
    // The same configuration writes the same bytes.
    for split in ["valid", "test"] {
        let file = Path::new(split).join("part-00000.parquet");
        assert_eq!(
            std::fs::read(a.path().join(&file)).unwrap(),
            std::fs::read(c.path().join(&file)).unwrap()
        );
    }
    // Other threads, batches and files: the same rows.
    runtime().block_on(async {
        let ctx = session(a.path()).await;
        for split in ["valid", "test"] {
            let location = b.path().join(split).display().to_string();
            calibsql::tables::register_table(&ctx, &format!("{split}_b"), &location, None)
                .await
                .unwrap();
        }
        let counts = one_row(
            &run(
                &ctx,
                "SELECT (SELECT count(*) FROM valid) AS a, (SELECT count(*) FROM test) AS b,
                   (SELECT count(*) FROM (SELECT * FROM valid EXCEPT SELECT * FROM valid_b)) AS c,
                   (SELECT count(*) FROM (SELECT * FROM valid_b EXCEPT SELECT * FROM valid)) AS d,
                   (SELECT count(*) FROM (SELECT * FROM test EXCEPT SELECT * FROM test_b)) AS e,
                   (SELECT count(*) FROM (SELECT * FROM test_b EXCEPT SELECT * FROM test)) AS f",
            )
            .await,
        );
        assert_eq!(counts, [15_001.0, 15_000.0, 0.0, 0.0, 0.0, 0.0]);
    });
    let files = std::fs::read_dir(b.path().join("valid")).unwrap().count();
    assert_eq!(files, 15_001usize.div_ceil(4_096));
}
