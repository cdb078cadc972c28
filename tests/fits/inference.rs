//! The inference aggregates (`spiegelhalter`, `calibration_slope`, `hosmer_lemeshow`,
//! `calibration_decomposition`, `field_bias`) against statsmodels, scipy, numpy ports of R's
//! `hoslem.test` and `val.prob`, and model-diagnostics, on three data sets: `small` (600 rows,
//! weights, a shifted field value), `ties` (3000 rows, 8 distinct p) and `big` (a million rows
//! defined by integer arithmetic, built here in SQL as the generator builds it in numpy).
//! Expected values: `tests/data/inference/`, written by `tests/inference_gen/gen.py`.
//! Also: a lowered exact cap leaves them within their documented bounds (the slope's grid is
//! not the setting's; the others do not pool), and p = 0 or 1 rows are what the documentation
//! says they are.

use std::path::Path;

use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Float64Type};
use datafusion::prelude::{CsvReadOptions, SessionContext};

use crate::fits::query;
use crate::support::close_mixed;

struct Case {
    table: &'static str,
    call: &'static str,
    fields: &'static [&'static str],
    want: &'static [f64],
    rel: f64,
}

struct FieldBiasCase {
    table: &'static str,
    call: &'static str,
    /// field value, then n, mean_p, frac_pos, bias, z, p_value, p_adjusted.
    rows: &'static [(&'static str, [f64; 7])],
}

include!("../data/inference/expected.rs");

/// The million-row data set of `gen.py`'s `make_big`.
const BIG_SQL: &str = "CREATE TABLE big AS SELECT p,
    CASE WHEN u < 0.8 * p + 0.05 + CASE WHEN i % 13 = 3 THEN 0.03 ELSE 0.0 END THEN 1 ELSE 0 END AS y,
    1.0 + CAST(i % 7 AS DOUBLE) / 2.0 AS w, CAST(i % 13 AS VARCHAR) AS f
  FROM (SELECT value AS i, CAST((value * 2654435761) % 1000003 AS DOUBLE) / 1000003.0 AS p,
               CAST((value * 2246822519) % 65537 AS DOUBLE) / 65537.0 AS u
        FROM generate_series(1, 1000000))";

async fn context(tables: &[&str]) -> SessionContext {
    let ctx = calibsql::new_context_with_config(calibsql::default_config());
    for t in tables {
        if *t == "big" {
            ctx.sql(BIG_SQL).await.unwrap().collect().await.unwrap();
            continue;
        }
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/inference")
            .join(format!("{t}.csv"));
        ctx.register_csv(*t, path.to_str().unwrap(), CsvReadOptions::new())
            .await
            .unwrap();
    }
    ctx
}

/// NaN matches NaN; anything else within `rel` (plus 1e-300 so that 0 matches 0).
fn agrees(got: f64, want: f64, rel: f64) -> bool {
    (want.is_nan() && got.is_nan()) || close_mixed(got, want, rel, 1e-300)
}

/// The named fields of a one-row struct result, as Float64.
async fn struct_fields(
    ctx: &SessionContext,
    sql: &str,
    fields: &[&str],
) -> Result<Vec<f64>, String> {
    let b = query(ctx, sql).await?;
    let s = b.column(0).as_struct();
    if s.is_null(0) {
        return Err(format!("{sql}: NULL"));
    }
    fields
        .iter()
        .map(|f| {
            let c = s
                .column_by_name(f)
                .ok_or_else(|| format!("{sql}: no field {f}"))?;
            let c = cast(c, &DataType::Float64).map_err(|e| e.to_string())?;
            Ok(c.as_primitive::<Float64Type>().value(0))
        })
        .collect()
}

async fn check_cases(tables: &[&str]) {
    let ctx = context(tables).await;
    let mut fails = vec![];
    let mut checked = 0;
    for c in CASES.iter().filter(|c| tables.contains(&c.table)) {
        let sql = format!("SELECT {} FROM {}", c.call, c.table);
        match struct_fields(&ctx, &sql, c.fields).await {
            Ok(got) => {
                for ((f, g), w) in c.fields.iter().zip(&got).zip(c.want) {
                    checked += 1;
                    if !agrees(*g, *w, c.rel) {
                        fails.push(format!("{}: {f} = {g}, reference {w}", sql));
                    }
                }
            }
            Err(e) => fails.push(e),
        }
    }
    for c in FIELD_BIAS_CASES
        .iter()
        .filter(|c| tables.contains(&c.table))
    {
        let sql = format!(
            "SELECT CAST(b['field'] AS VARCHAR), b['n'], b['mean_p'], b['frac_pos'], b['bias'], b['z'], \
             b['p_value'], b['p_adjusted'] FROM (SELECT unnest({}) AS b FROM {})",
            c.call, c.table
        );
        let b = match query(&ctx, &sql).await {
            Ok(b) => b,
            Err(e) => {
                fails.push(e);
                continue;
            }
        };
        if b.num_rows() != c.rows.len() {
            fails.push(format!(
                "{sql}: {} rows, reference {}",
                b.num_rows(),
                c.rows.len()
            ));
            continue;
        }
        let names = crate::fits::strs(&b, 0);
        for (r, (name, want)) in c.rows.iter().enumerate() {
            if names[r].as_deref() != Some(*name) {
                fails.push(format!(
                    "{sql}: row {r} is {:?}, reference {name}",
                    names[r]
                ));
            }
            for (k, w) in want.iter().enumerate() {
                let g = crate::fits::f64s(&b, k + 1)[r].unwrap_or(f64::NAN);
                checked += 1;
                // p-values far in the tail: 1e-9 relative is tighter than the normal CDF's
                // own agreement with scipy there; 1e-12 absolute does not matter to a test.
                if !(agrees(g, *w, 1e-9) || (k >= 5 && (g - w).abs() <= 1e-15)) {
                    fails.push(format!(
                        "{sql}: {name} column {} = {g}, reference {w}",
                        k + 1
                    ));
                }
            }
        }
    }
    assert!(checked > 0, "no case for {tables:?}");
    assert!(
        fails.is_empty(),
        "{} of {checked} values differ:\n{}",
        fails.len(),
        fails.join("\n")
    );
}

#[tokio::test]
async fn small_and_ties_match_the_references() {
    check_cases(&["small", "ties"]).await;
}

#[tokio::test]
async fn a_million_rows_match_the_references() {
    check_cases(&["big"]).await;
}

/// `SET calibsql.fit_exact_cap` reaches none of them: on the million distinct p of `big`, with
/// the cap at 1,000, the estimates stay within the documented bounds of the exact ones (the
/// references): the slope's own grid (2⁷ cells per power of two past 65,536 logits), the
/// others exact.
#[tokio::test]
async fn a_lowered_exact_cap_leaves_them_within_their_bounds() {
    let ctx = context(&["big"]).await;
    calibsql::sql(&ctx, "SET calibsql.fit_exact_cap = 1000")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let mut fails = vec![];
    let mut worst = vec![];
    for c in CASES.iter().filter(|c| c.table == "big") {
        let sql = format!("SELECT {} FROM big", c.call);
        let got = match struct_fields(&ctx, &sql, c.fields).await {
            Ok(v) => v,
            Err(e) => {
                fails.push(e);
                continue;
            }
        };
        // The slope keeps the parametric fits' cap (65,536) whatever the setting, so its grid
        // is also what the million-row test above checks; its likelihood is within ~1e-12 of
        // the exact one (measured: 6e-11 on the estimates with the isotonic grid). The
        // Hosmer–Lemeshow test and the decomposition keep the rows (`auc`'s state) and
        // Spiegelhalter keeps sums: the setting does not reach them, and they stay exact.
        let rel = match c.call {
            call if call.starts_with("spiegelhalter") => 1e-12,
            // The slope's grid, and the exact ones at the million-row test's tolerance.
            _ => 1e-9,
        };
        let err = got
            .iter()
            .zip(c.want)
            .map(|(g, w)| (g - w).abs() / w.abs().max(1e-300))
            // NaN-propagating maximum: `f64::max` would drop a NaN difference.
            .fold(0.0f64, |a, b| {
                if a.is_nan() || b.is_nan() {
                    f64::NAN
                } else {
                    a.max(b)
                }
            });
        worst.push(format!("{}: {err:.1e}", c.call));
        let within = err <= rel; // false for NaN
        if !within {
            fails.push(format!(
                "{sql}: {got:?} vs {:?} (relative {err:.1e})",
                c.want
            ));
        }
    }
    println!(
        "worst relative differences with the cap lowered:\n{}",
        worst.join("\n")
    );
    assert!(fails.is_empty(), "{}", fails.join("\n"));
}
