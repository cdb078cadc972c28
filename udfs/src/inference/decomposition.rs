//! `calibration_decomposition(p, y [, score [, w]])`: the CORP decomposition of the Brier score
//! or the log loss (Dimitriadis, Gneiting & Jordan 2021), as model-diagnostics 1.5's
//! `decompose` computes it.
//!
//! With S the mean score (weighted), `iso` the isotonic regression of y on p (pool adjacent
//! violators over the distinct p, weights Σw; what scikit-learn's `IsotonicRegression` fits,
//! which `decompose` uses) and `r` the weighted mean of y:
//! `miscalibration = S(p) − S(iso)`, `discrimination = S(r) − S(iso)`, `uncertainty = S(r)`,
//! so `score = miscalibration − discrimination + uncertainty`. The log loss takes `0·ln 0 = 0`
//! (scipy's `xlogy`, as model-diagnostics' `LogLoss`): a p of 0 or 1 on the wrong label gives an
//! infinite score and miscalibration.
//!
//! The state is `points`'s with the score p: exact up to the exact cap; past it each
//! grid cell's rows share the cell's mean p.

use arrow::array::ArrayRef;
use datafusion_common::{plan_err, Result};
use datafusion_expr::function::AccumulatorArgs;
use datafusion_macros::user_doc;

use super::points::{points_aggregate, points_udaf, Out, PointsKernel, Score, NONPARAMETRIC_GRID};
use super::{f64_struct_array, f64_struct_fields};
use crate::common::{args, literal, weight_col, Arg, CallShape};
use crate::fit::{pav, FitState};

#[user_doc(
    doc_section(label = "Calibration Tests"),
    description = "The CORP score decomposition (Dimitriadis, Gneiting & Jordan 2021): with `iso` the isotonic \
(PAV) recalibration of p and `r` the mean label, `miscalibration = S(p) − S(iso)`, `discrimination = S(r) − S(iso)` \
and `uncertainty = S(r)`, so that `score = miscalibration − discrimination + uncertainty`, as \
`{score, miscalibration, discrimination, uncertainty}`; S is the mean Brier score (`'brier'`, the default) or log \
loss (`'logloss'`, `0·ln 0 = 0`, no clipping). Equal to model-diagnostics' `decompose`. Exact up to \
`calibsql.fit_exact_cap` distinct p per group (default 10,000,000); past it each of the fits' grid cells counts at \
its mean p. NULL when no row is usable or every weight is 0.",
    syntax_example = "calibration_decomposition(p, y [, score [, w]])",
    sql_example = r#"```sql
> SELECT d['score'] AS score, d['miscalibration'] AS mcb, d['discrimination'] AS dsc, d['uncertainty'] AS unc FROM (SELECT calibration_decomposition(p, y) AS d FROM (VALUES (0.5, 0), (0.5, 1), (1.0, 1), (1.0, 1)) AS t(p, y));
+-------+-----+--------+--------+
| score | mcb | dsc    | unc    |
+-------+-----+--------+--------+
| 0.125 | 0.0 | 0.0625 | 0.1875 |
+-------+-----+--------+--------+
```"#,
    argument(
        name = "score",
        description = "The scoring rule: 'brier' (the default) or 'logloss'."
    )
)]
struct CalibrationDecompositionDoc;

const OUT: [&str; 4] = ["score", "miscalibration", "discrimination", "uncertainty"];

/// The scoring rule decomposed: `'brier'` or `'logloss'`.
const SCORE_RULE: Arg = Arg::lit_str("score").or("'brier'");

points_aggregate!(
    /// `calibration_decomposition`.
    CalibrationDecomposition
);

impl CalibrationDecomposition {
    fn shape(&self) -> CallShape {
        CallShape {
            name: "calibration_decomposition",
            required: &[args::P, args::Y],
            optional: &[SCORE_RULE, args::W],
        }
    }

    fn kernel(&self, args: &AccumulatorArgs) -> Result<PointsKernel> {
        let func = "calibration_decomposition";
        let logloss = match args.exprs.get(2) {
            Some(e) => {
                let v = literal(func, "score", e)?;
                match v.try_as_str().flatten() {
                    Some("brier") => false,
                    Some("logloss") => true,
                    _ => {
                        return plan_err!(
                            "{func}: argument score must be 'brier' or 'logloss', got {v}"
                        )
                    }
                }
            }
            None => false,
        };
        Ok(PointsKernel::new(
            func,
            Score::P,
            weight_col(args.exprs, 3),
            Out::Decomposition { logloss },
            (NONPARAMETRIC_GRID, self.cap()),
        ))
    }
}

points_udaf!(
    CalibrationDecomposition,
    f64_struct_fields(&OUT),
    CalibrationDecompositionDoc
);

/// `x·ln y`, 0 when x is 0 (scipy's `xlogy`).
fn xlogy(x: f64, y: f64) -> f64 {
    if x == 0.0 {
        0.0
    } else {
        x * y.ln()
    }
}

/// The total score of the points (p, Σw, Σw·y) when they predict `q(i)`.
fn total_score(pts: &[(f64, f64, f64)], logloss: bool, q: impl Fn(usize) -> f64) -> f64 {
    pts.iter()
        .enumerate()
        .map(|(i, &(_, n, t))| {
            let q = q(i);
            if logloss {
                -xlogy(t, q) - xlogy(n - t, 1.0 - q)
            } else {
                (n - t) * q * q + t * (1.0 - q) * (1.0 - q)
            }
        })
        .sum()
}

/// The decomposition of points (p, Σw, Σw·y) sorted by p, or None when every weight is 0.
pub(crate) fn decompose(pts: &[(f64, f64, f64)], logloss: bool) -> Option<[f64; 4]> {
    let pts: Vec<(f64, f64, f64)> = pts.iter().copied().filter(|pt| pt.1 > 0.0).collect();
    let n: f64 = pts.iter().map(|pt| pt.1).sum();
    if n.is_nan() || n <= 0.0 {
        return None;
    }
    let r = pts.iter().map(|pt| pt.2).sum::<f64>() / n;
    let iso = pav(&pts);
    let s = total_score(&pts, logloss, |i| pts[i].0) / n;
    let s_iso = total_score(&pts, logloss, |i| iso[i]) / n;
    let s_r = total_score(&pts, logloss, |_| r) / n;
    Some([s, s - s_iso, s_r - s_iso, s_r])
}

/// The values of groups' states (None: no usable row, NULL).
pub(super) fn evaluate(states: &[Option<&FitState>], logloss: bool) -> Result<ArrayRef> {
    let rows: Vec<Option<[f64; 4]>> = states
        .iter()
        .map(|st| st.and_then(|st| decompose(&st.sorted_points(), logloss)))
        .collect();
    f64_struct_array(f64_struct_fields(&OUT), &rows)
}
