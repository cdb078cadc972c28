//! Models stored by an earlier calibsql still load and apply: `tests/data/models/
//! models.parquet` holds one model per calibrator (both stored methods of `fit_histogram`),
//! written by the calibsql binary of the commit that added it, before the model's `method`
//! became an enum (`tests/data/models/write.sql` says how). This is an invariance check, not
//! a correctness one — the expected values below were printed by that same binary (each
//! calibrator's values are checked against its reference in [`crate::fits`] and
//! [`crate::calibrators`]) — so a change to the model's layout, to its stored method names or
//! to how `calibrate` applies a model fails here.

use datafusion::prelude::ParquetReadOptions;

use super::fits::{context, f64s, query, strs};
use crate::support::close_rel;

/// (fit, stored method, row of [`SCORES`], calibrate's value), as the writing binary printed
/// them (`CAST(calibrate(…) AS VARCHAR)`, the shortest text that reads back to the same
/// float).
const EXPECTED: &[(&str, &str, i64, f64)] = &[
    ("fit_bbq", "bbq", 1, 0.17804673603693216),
    ("fit_bbq", "bbq", 2, 0.36158894355401927),
    ("fit_bbq", "bbq", 3, 0.5391411359342259),
    ("fit_bbq", "bbq", 4, 0.7413198408456663),
    ("fit_bbq", "bbq", 5, 0.8941083719368249),
    ("fit_beta_calib", "beta", 1, 0.14218758030988846),
    ("fit_beta_calib", "beta", 2, 0.4373977129609824),
    ("fit_beta_calib", "beta", 3, 0.5856045608176775),
    ("fit_beta_calib", "beta", 4, 0.7153257987272698),
    ("fit_beta_calib", "beta", 5, 0.9071626521143308),
    ("fit_gamma_calib", "gamma", 1, 0.14362768725844846),
    ("fit_gamma_calib", "gamma", 2, 0.488272722299791),
    ("fit_gamma_calib", "gamma", 3, 0.5747954236720864),
    ("fit_gamma_calib", "gamma", 4, 0.7572818697098382),
    ("fit_gamma_calib", "gamma", 5, 0.9394416402852371),
    ("fit_gaussian_calib", "gaussian", 1, 0.13741940375032813),
    ("fit_gaussian_calib", "gaussian", 2, 0.4981761169427499),
    ("fit_gaussian_calib", "gaussian", 3, 0.5846024793760359),
    ("fit_gaussian_calib", "gaussian", 4, 0.7606515709400626),
    ("fit_gaussian_calib", "gaussian", 5, 0.9325571184650655),
    ("fit_histogram", "histogram", 1, 0.18666666666666668),
    ("fit_histogram", "histogram", 2, 0.48),
    ("fit_histogram", "histogram", 3, 0.64),
    ("fit_histogram", "histogram", 4, 0.8055555555555556),
    ("fit_histogram", "histogram", 5, 0.9166666666666666),
    (
        "fit_histogram_quantile",
        "histogram_quantile",
        1,
        0.11235955056179775,
    ),
    (
        "fit_histogram_quantile",
        "histogram_quantile",
        2,
        0.5466666666666666,
    ),
    (
        "fit_histogram_quantile",
        "histogram_quantile",
        3,
        0.5466666666666666,
    ),
    (
        "fit_histogram_quantile",
        "histogram_quantile",
        4,
        0.8169014084507042,
    ),
    (
        "fit_histogram_quantile",
        "histogram_quantile",
        5,
        0.9428571428571428,
    ),
    ("fit_ilps", "ilps", 1, 0.17688799708638336),
    ("fit_ilps", "ilps", 2, 0.5359397813126927),
    ("fit_ilps", "ilps", 3, 0.6009997326971921),
    ("fit_ilps", "ilps", 4, 0.8028814956244676),
    ("fit_ilps", "ilps", 5, 0.8902891010448859),
    ("fit_isotonic", "isotonic", 1, 0.15),
    ("fit_isotonic", "isotonic", 2, 0.5333333333333333),
    ("fit_isotonic", "isotonic", 3, 0.6222222222222222),
    ("fit_isotonic", "isotonic", 4, 0.75),
    ("fit_isotonic", "isotonic", 5, 0.9285714285714286),
    ("fit_platt", "platt", 1, 0.1436413737612852),
    ("fit_platt", "platt", 2, 0.48862264311619735),
    ("fit_platt", "platt", 3, 0.5750421025493394),
    ("fit_platt", "platt", 4, 0.7572354569104636),
    ("fit_platt", "platt", 5, 0.9392461013323252),
    ("fit_temperature", "temperature", 1, 0.11495671804440054),
    ("fit_temperature", "temperature", 2, 0.41576571886873936),
    ("fit_temperature", "temperature", 3, 0.5),
    ("fit_temperature", "temperature", 4, 0.6934785011773414),
    ("fit_temperature", "temperature", 5, 0.9153871543341386),
    ("fit_confcalib", "confcalib", 1, 0.08727286533019121),
    ("fit_confcalib", "confcalib", 2, 0.3803542934711823),
    ("fit_confcalib", "confcalib", 3, 0.5249444192108687),
    ("fit_confcalib", "confcalib", 4, 0.7324084783403357),
    ("fit_confcalib", "confcalib", 5, 0.95),
    ("fit_field_calib", "field_calib", 1, 0.17924056415374184),
    ("fit_field_calib", "field_calib", 2, 0.5451754891888446),
    ("fit_field_calib", "field_calib", 3, 0.5880946613595349),
    ("fit_field_calib", "field_calib", 4, 0.8055473100750656),
    ("fit_field_calib", "field_calib", 5, 0.8903378599481783),
];

/// (row, score, probability, field): the score for the models of scores and logits, the
/// probability for those of probabilities (`beta`, `bbq`, `confcalib`); field `z` is one the
/// field-aware fits never saw.
const SCORES: &str = "(VALUES (1, -3.0, 0.05, 'a'), (2, -0.5, 0.3, 'b'), (3, 0.0, 0.5, 'c'), \
                      (4, 1.2, 0.7, 'a'), (5, 3.5, 0.95, 'z')) AS x(i, s, p, f)";

/// Same code, same float operations: the values agree to the last bit; the tolerance only
/// allows a reordering of a sum.
const REL: f64 = 1e-12;

#[tokio::test]
async fn models_stored_by_an_earlier_release_still_apply() {
    let ctx = context().await;
    let file =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/models/models.parquet");
    ctx.register_parquet(
        "stored",
        file.to_str().unwrap(),
        ParquetReadOptions::default(),
    )
    .await
    .unwrap();
    let plain = format!(
        "SELECT fit, model['method'], i, \
           calibrate(CASE WHEN fit IN ('fit_beta_calib', 'fit_bbq') THEN p ELSE s END, model) \
         FROM stored CROSS JOIN {SCORES} \
         WHERE fit NOT IN ('fit_confcalib', 'fit_field_calib') ORDER BY fit, i"
    );
    let field = format!(
        "SELECT fit, model['method'], i, \
           calibrate(CASE WHEN fit = 'fit_confcalib' THEN p ELSE s END, model, f) \
         FROM stored CROSS JOIN {SCORES} \
         WHERE fit IN ('fit_confcalib', 'fit_field_calib') ORDER BY fit, i"
    );
    let mut got = vec![];
    for sql in [plain, field] {
        let b = query(&ctx, &sql).await.unwrap_or_else(|e| panic!("{e}"));
        let (fits, methods, rows, values) = (strs(&b, 0), strs(&b, 1), f64s(&b, 2), f64s(&b, 3));
        for k in 0..b.num_rows() {
            got.push((
                fits[k].clone().unwrap_or_default(),
                methods[k].clone().unwrap_or_default(),
                rows[k].unwrap_or(f64::NAN) as i64,
                values[k].unwrap_or(f64::NAN),
            ));
        }
    }
    assert_eq!(got.len(), EXPECTED.len(), "rows: {got:?}");
    let mut fails = vec![];
    for (g, e) in got.iter().zip(EXPECTED) {
        if g.0 != e.0 || g.1 != e.1 || g.2 != e.2 || !close_rel(g.3, e.3, REL) {
            fails.push(format!("got {g:?}, want {e:?}"));
        }
    }
    assert!(fails.is_empty(), "{}", fails.join("\n"));
}
