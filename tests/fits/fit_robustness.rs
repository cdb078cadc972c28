//! The fits' robustness: degenerate input gives finite monotone models with the answers known
//! for it (one class: 0 or 1; one tied score: its rate; separable: the step), the loss does not
//! depend on the scores' units, the fits do not depend on files, partitions or batches, and
//! models round-trip through Parquet. These compare calibsql with calibsql or with
//! invariants (finite, monotone, in [0, 1]), not with a reference: the values themselves are
//! checked against scipy and scikit-learn in [`crate::fits`], whose helpers these share.

use std::path::Path;

use datafusion::prelude::{CsvReadOptions, ParquetReadOptions, SessionConfig};

use super::fits::{
    bools, check_probabilities, context, data_path, f64s, finish, grid_sql, linspace, lists, query,
    strs,
};
use crate::support::{close, close_rel};

const FITS: &[&str] = &[
    "fit_platt",
    "fit_gaussian_calib",
    "fit_gamma_calib",
    "fit_isotonic",
    "fit_histogram",
];

/// What a degenerate fit must predict at its own rows, where the answer is known.
#[derive(Clone, Copy)]
enum Known {
    /// The same probability at every row: the rows' (IPS) positive rate, clipped to [0, 1].
    Rate(f64),
    /// Each row its own label (separable data: the step).
    Labels,
    /// Nothing beyond finite and monotone.
    Unknown,
}

/// How far a degenerate fit may be from its known answer. The optimum of one class (or of an
/// IPS rate above 1, or of separable data) lies at infinity: the parametric fits stop where
/// the loss no longer changes in floating point, i.e. with probabilities within a few machine
/// epsilons of 0 or 1 (measured: 6.1e-15 from 0, 6.2e-15 from 1, 2.3e-14 on the separable
/// rows nearest the step), and a finite optimum (one tied score) is met to the Newton
/// iteration's tolerance (measured: exact). Isotonic and histogram fits are exact.
const DEGENERATE_TOL: f64 = 1e-12;

#[tokio::test]
async fn degenerate_input_gives_finite_monotone_models() {
    // (name, rows, the known answer without and with a propensity of 0.5, which makes the
    // target t = y / 0.5 = 2y)
    let sets = [
        (
            "one class (all 0)",
            "(VALUES (-1.0, 0), (0.0, 0), (0.5, 0), (2.0, 0)) AS t(s, y)",
            Known::Rate(0.0),
            Known::Rate(0.0),
        ),
        // With the propensity every t is 2: the IPS rate 2 is above 1, so the fit goes to 1.
        (
            "one class (all 1)",
            "(VALUES (-1.0, 1), (0.0, 1), (0.5, 1), (2.0, 1)) AS t(s, y)",
            Known::Rate(1.0),
            Known::Rate(1.0),
        ),
        // One tied score: every fit is a constant there, the maximum-likelihood constant is the
        // rows' positive rate 2/3 (with the propensity the IPS rate (0 + 2 + 2)/3 = 4/3,
        // beyond 1: the fit goes to 1).
        (
            "a single distinct score",
            "(VALUES (0.7, 0), (0.7, 1), (0.7, 1)) AS t(s, y)",
            Known::Rate(2.0 / 3.0),
            Known::Rate(1.0),
        ),
        (
            "a single row",
            "(VALUES (0.7, 1)) AS t(s, y)",
            Known::Rate(1.0),
            Known::Rate(1.0),
        ),
        // Separable: the step. With the propensity the IPS objective is unbounded below in
        // more than one direction (docs/SEMANTICS.md, `converged`): no known answer for the
        // parametric fits (isotonic still pools to the step: PAV of 0s and 2s, clipped).
        (
            "separable",
            "(VALUES (-2.0, 0), (-1.0, 0), (-0.5, 0), (0.5, 1), (1.0, 1), (3.0, 1)) AS t(s, y)",
            Known::Labels,
            Known::Unknown,
        ),
        (
            "separable, large raw scores",
            "(VALUES (100.0, 0), (350.0, 0), (400.0, 1), (990.0, 1)) AS t(s, y)",
            Known::Labels,
            Known::Unknown,
        ),
    ];
    let ctx = context().await;
    let mut fails = vec![];
    for (name, values, known, known_ips) in sets {
        for f in FITS {
            for args in ["s, y", "s, y, 0.5"] {
                if *f == "fit_histogram" && args != "s, y" {
                    continue;
                }
                let call = format!("{f}({args})");
                let mut fail = |m: String| fails.push(format!("{name}: {call}: {m}"));
                let known = match (args, known_ips) {
                    ("s, y", _) => known,
                    (_, Known::Unknown) if *f == "fit_isotonic" => Known::Labels,
                    _ => known_ips,
                };
                // The known answer at the rows' own scores.
                let sql = format!(
                    "SELECT t.y, calibrate(t.s, f.m) FROM {values} \
                     CROSS JOIN (SELECT {call} AS m FROM {values}) f ORDER BY t.s, t.y"
                );
                match query(&ctx, &sql).await {
                    Err(e) => fail(e),
                    Ok(b) => {
                        let labels = f64s(&b, 0);
                        for (y, p) in labels.iter().zip(f64s(&b, 1)) {
                            let want = match known {
                                Known::Rate(r) => r,
                                Known::Labels => y.unwrap_or(f64::NAN),
                                Known::Unknown => continue,
                            };
                            let got = p.unwrap_or(f64::NAN);
                            if !close(got, want, DEGENERATE_TOL) {
                                fail(format!(
                                    "at a row with y = {y:?}: calibrated {got}, want {want} \
                                     (within {DEGENERATE_TOL})"
                                ));
                            }
                        }
                    }
                }
                let sql = format!(
                    "SELECT m IS NOT NULL, m['a'], m['b'], m['c'], m['shift'], m['converged'], \
                     m['knots_x'], m['knots_y'], m['s_min'], m['s_max'] \
                     FROM (SELECT {call} AS m FROM {values})"
                );
                let (lo, hi) = match query(&ctx, &sql).await {
                    Err(e) => {
                        fail(e);
                        continue;
                    }
                    Ok(b) => {
                        if b.num_rows() != 1 || bools(&b, 0).ok() != Some(vec![Some(true)]) {
                            fail("the model is NULL".to_string());
                            continue;
                        }
                        let used: &[(usize, &str)] = match *f {
                            "fit_platt" => &[(2, "b"), (3, "c")],
                            "fit_gaussian_calib" => &[(1, "a"), (2, "b"), (3, "c")],
                            "fit_gamma_calib" => &[(1, "a"), (2, "b"), (3, "c"), (4, "shift")],
                            _ => &[],
                        };
                        for &(i, field) in used {
                            let v = f64s(&b, i)[0];
                            if !v.is_some_and(f64::is_finite) {
                                fail(format!("{field} = {v:?}, not finite"));
                            }
                        }
                        if used.is_empty() {
                            for i in [6, 7] {
                                if let Some(k) = &lists(&b, i)[0] {
                                    if k.iter().any(|v| !v.is_finite()) {
                                        fail(format!("knots not finite: {k:?}"));
                                    }
                                }
                            }
                        }
                        match bools(&b, 5) {
                            Err(e) => fail(format!("converged: {e}")),
                            Ok(v) if !used.is_empty() && v[0].is_none() => {
                                fail("converged is NULL".to_string())
                            }
                            Ok(_) => {}
                        }
                        (f64s(&b, 8)[0].unwrap_or(0.0), f64s(&b, 9)[0].unwrap_or(1.0))
                    }
                };
                let xs = linspace(lo.min(-3.0) - 1.0, hi.max(3.0) + 1.0, 41);
                // Histogram binning is not monotone by definition (an empty bin between two
                // full ones takes the overall rate): only check that it gives probabilities.
                let monotone = *f != "fit_histogram";
                let sql = format!(
                    "SELECT g.i, calibrate(g.x, f.model) FROM (SELECT {call} AS model FROM {values}) f \
                     CROSS JOIN {} ORDER BY g.i",
                    grid_sql(&xs)
                );
                match query(&ctx, &sql).await {
                    Err(e) => fail(e),
                    Ok(b) => check_probabilities(&xs, &f64s(&b, 1), monotone, &mut fail),
                }
            }
        }
    }
    finish("degenerate input", fails);
}

#[tokio::test]
async fn loss_does_not_depend_on_score_units() {
    // fit(s) and fit(37.5·s + 1200) span the same model family: the same optimum.
    let ctx = context().await;
    let mut fails = vec![];
    for (table, extra) in [
        ("logit", ""),
        ("dot", ""),
        ("ips", ", q"),
        ("ips", ", q, 0.05"),
    ] {
        for f in ["fit_platt", "fit_gaussian_calib", "fit_gamma_calib"] {
            let sql = format!(
                "SELECT m1['loss'], m2['loss'] FROM (SELECT {f}(score, y{extra}) AS m1, \
                 {f}(37.5 * score + 1200, y{extra}) AS m2 FROM {table})"
            );
            match query(&ctx, &sql).await {
                Err(e) => fails.push(e),
                Ok(b) => match (f64s(&b, 0)[0], f64s(&b, 1)[0]) {
                    (Some(a), Some(z)) if close_rel(z, a, 1e-6) => {}
                    (a, z) => fails.push(format!(
                        "{table}: {f}(score, y{extra}) loss {a:?} vs on 37.5*score + 1200: {z:?}"
                    )),
                },
            }
        }
    }
    finish("unit invariance", fails);
}

/// Writes the rows of `table`'s CSV into 3 files of unequal size under `dir`.
fn split_csv(table: &str, dir: &Path) {
    let text = std::fs::read_to_string(data_path(table)).unwrap();
    let mut lines = text.lines();
    let header = lines.next().unwrap();
    let rows: Vec<&str> = lines.collect();
    let cuts = [0, rows.len() / 5, rows.len() * 3 / 5, rows.len()];
    std::fs::create_dir_all(dir).unwrap();
    for k in 0..3 {
        let mut out = String::from(header);
        out.push('\n');
        for r in &rows[cuts[k]..cuts[k + 1]] {
            out.push_str(r);
            out.push('\n');
        }
        std::fs::write(dir.join(format!("part-{k}.csv")), out).unwrap();
    }
}

#[tokio::test]
async fn fits_do_not_depend_on_files_or_partitions() {
    // One CSV file vs the same rows in 3 files, target_partitions 1 vs 4 (with small batches, so
    // that several partial states are merged): the same losses and the same isotonic knots.
    let tmp = tempfile::tempdir().unwrap();
    let mut fails = vec![];
    for (table, extra) in [("logit", ""), ("ties", ""), ("ips", ", q")] {
        let dir = tmp.path().join(table);
        split_csv(table, &dir);
        let calls = [
            format!("fit_platt(score, y{extra})"),
            format!("fit_gaussian_calib(score, y{extra})"),
            format!("fit_gamma_calib(score, y{extra})"),
            format!("fit_isotonic(score, y{extra})"),
            if extra.is_empty() {
                "fit_histogram(score, y)".to_string()
            } else {
                "fit_histogram(score, y, 7)".to_string()
            },
        ];
        let grid = grid_sql(&linspace(-25.0, 25.0, 101));
        let sql = format!(
            "SELECT p['loss'], g['loss'], gm['loss'], iso['knots_x'], iso['knots_y'], \
               calibrate(x, iso), calibrate(x, h), h['knots_x'], h['knots_y'] \
             FROM (SELECT {} AS p, {} AS g, {} AS gm, {} AS iso, {} AS h FROM t) CROSS JOIN {grid} \
             ORDER BY i",
            calls[0], calls[1], calls[2], calls[3], calls[4]
        );
        let mut results = vec![];
        for (files, partitions) in [("one", 1), ("one", 4), ("three", 1), ("three", 4)] {
            let config = if partitions == 1 {
                SessionConfig::new().with_target_partitions(1)
            } else {
                SessionConfig::new()
                    .with_target_partitions(partitions)
                    .with_batch_size(100)
            };
            let ctx = calibsql::new_context_with_config(config);
            let path = if files == "one" {
                data_path(table)
            } else {
                dir.clone()
            };
            ctx.register_csv("t", path.to_str().unwrap(), CsvReadOptions::new())
                .await
                .unwrap();
            let label = format!("{table} ({files} file(s), target_partitions {partitions})");
            match query(&ctx, &sql).await {
                Err(e) => fails.push(format!("{label}: {e}")),
                Ok(b) => results.push((label, b)),
            }
        }
        let Some((label0, base)) = results.first() else {
            continue;
        };
        for (label, b) in &results[1..] {
            for (i, name) in calls[..3].iter().enumerate() {
                let (a, z) = (f64s(base, i)[0], f64s(b, i)[0]);
                if !matches!((a, z), (Some(a), Some(z)) if close_rel(z, a, 1e-9)) {
                    fails.push(format!(
                        "{name}: loss {a:?} in {label0} vs {z:?} in {label}"
                    ));
                }
            }
            for (i, name) in [(3, "isotonic knots_x"), (4, "isotonic knots_y")] {
                let (a, z) = (&lists(base, i)[0], &lists(b, i)[0]);
                let same = match (a, z) {
                    (Some(a), Some(z)) => {
                        a.len() == z.len() && a.iter().zip(z).all(|(u, v)| close(*u, *v, 1e-12))
                    }
                    _ => false,
                };
                if !same {
                    fails.push(format!(
                        "{}: {name} differ: {a:?} in {label0} vs {z:?} in {label}",
                        calls[3]
                    ));
                }
            }
            for (i, name) in [(5, &calls[3]), (6, &calls[4])] {
                let (a, z) = (f64s(base, i), f64s(b, i));
                let same = a
                    .iter()
                    .zip(&z)
                    .all(|(u, v)| matches!((u, v), (Some(u), Some(v)) if close(*u, *v, 1e-12)));
                if !same {
                    fails.push(format!(
                        "{name}: calibrate() over the grid differs: {a:?} in {label0} vs {z:?} in {label}"
                    ));
                }
            }
            for (i, name) in [(7, "histogram knots_x"), (8, "histogram knots_y")] {
                let (a, z) = (&lists(base, i)[0], &lists(b, i)[0]);
                let same = match (a, z) {
                    (Some(a), Some(z)) => {
                        a.len() == z.len() && a.iter().zip(z).all(|(u, v)| close(*u, *v, 1e-12))
                    }
                    (None, None) => true,
                    _ => false,
                };
                if !same {
                    fails.push(format!(
                        "{}: {name} differ: {a:?} in {label0} vs {z:?} in {label}",
                        calls[4]
                    ));
                }
            }
        }
    }
    finish("files and partitions", fails);
}

#[tokio::test]
async fn models_round_trip_through_parquet() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("m.parquet");
    let ctx = context().await;
    let steps = [
        "CREATE TABLE models AS \
           SELECT 'platt' AS name, fit_platt(score, y) AS model FROM logit \
           UNION ALL SELECT 'iso', fit_isotonic(score, y) FROM logit \
           UNION ALL SELECT 'gaussian', fit_gaussian_calib(score, y) FROM logit \
           UNION ALL SELECT 'gamma', fit_gamma_calib(score, y) FROM logit \
           UNION ALL SELECT 'histogram', fit_histogram(score, y) FROM logit \
           UNION ALL SELECT 'iso_ips', fit_isotonic(score, y, q) FROM ips"
            .to_string(),
        format!("COPY models TO '{}' STORED AS PARQUET", file.display()),
    ];
    for s in &steps {
        if let Err(e) = query(&ctx, s).await {
            panic!("{e}");
        }
    }
    ctx.register_parquet(
        "back",
        file.to_str().unwrap(),
        ParquetReadOptions::default(),
    )
    .await
    .unwrap();
    let grid = grid_sql(&linspace(-25.0, 25.0, 51));
    let q = |t: &str| {
        format!(
            "SELECT name, g.i, calibrate(g.x, model), model['loss'], model['method'] \
             FROM {t} CROSS JOIN {grid} ORDER BY name, g.i"
        )
    };
    let (a, b) = match (
        query(&ctx, &q("models")).await,
        query(&ctx, &q("back")).await,
    ) {
        (Ok(a), Ok(b)) => (a, b),
        (a, b) => panic!("{:?}\n{:?}", a.err(), b.err()),
    };
    assert_eq!(a.num_rows(), 6 * 51);
    assert_eq!(strs(&a, 0), strs(&b, 0));
    assert_eq!(strs(&a, 4), strs(&b, 4));
    let mut fails = vec![];
    let names = strs(&a, 0);
    for col in [2, 3] {
        let (u, v) = (f64s(&a, col), f64s(&b, col));
        for k in 0..u.len() {
            let same = match (u[k], v[k]) {
                (Some(x), Some(y)) => x.to_bits() == y.to_bits(),
                (None, None) => true,
                _ => false,
            };
            if !same {
                fails.push(format!(
                    "{:?} row {k} column {col}: {:?} from the original, {:?} read back",
                    names[k], u[k], v[k]
                ));
            }
        }
    }
    let calibrated = f64s(&a, 2);
    if calibrated.iter().any(|p| p.is_none()) {
        fails.push("calibrate() gave NULL for a model".to_string());
    }
    finish("Parquet round trip", fails);
}
