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
//! The state is `auc`'s (the rows, 8 bytes an unweighted row and 16 a weighted one, or a
//! count per distinct p when p repeats), so the decomposition is exact at any size. At the end
//! one sweep over the distinct p in ascending order (`crate::values::for_each_score`) adds
//! S(p) and pools adjacent violators on a stack of blocks: S(iso) needs only each block's
//! weights of the two labels, since its rows all predict the block's mean label.

use std::sync::Arc;

use datafusion_common::{plan_err, Result};
use datafusion_expr::function::AccumulatorArgs;
use datafusion_macros::user_doc;

use super::f64_struct_fields;
use super::rows::{rows_udaf, RowsStructKernel};
use crate::common::{args, literal, weight_col, Arg, CallShape};
use crate::kernel::{kernel_aggregate, signature_from_shape};
use crate::metrics::auc::AucKernel;
use crate::values::for_each_score;

#[user_doc(
    doc_section(label = "Calibration Tests"),
    description = "The CORP score decomposition (Dimitriadis, Gneiting & Jordan 2021): with `iso` the isotonic \
(PAV) recalibration of p and `r` the mean label, `miscalibration = S(p) − S(iso)`, `discrimination = S(r) − S(iso)` \
and `uncertainty = S(r)`, so that `score = miscalibration − discrimination + uncertainty`, as \
`{score, miscalibration, discrimination, uncertainty}`; S is the mean Brier score (`'brier'`, the default) or log \
loss (`'logloss'`, `0·ln 0 = 0`, no clipping). Equal to model-diagnostics' `decompose`. Exact: keeps what `auc` \
keeps (8 bytes an unweighted row, 16 a weighted one, or a count per distinct p when p repeats). NULL when no row \
is usable or every weight is 0.",
    syntax_example = "calibration_decomposition(p, y [, score [, w]])",
    sql_example = r#"```sql
> SELECT d['score'] AS score, d['miscalibration'] AS mcb, d['discrimination'] AS dsc, d['uncertainty'] AS unc FROM (SELECT calibration_decomposition(p, y) AS d FROM (VALUES (0.5, 0), (0.5, 1), (1.0, 1), (1.0, 1)) AS t(p, y));
+-------+-----+--------+--------+
| score | mcb | dsc    | unc    |
+-------+-----+--------+--------+
| 0.125 | 0.0 | 0.0625 | 0.1875 |
+-------+-----+--------+--------+
```"#
)]
struct CalibrationDecompositionDoc;

const OUT: [&str; 4] = ["score", "miscalibration", "discrimination", "uncertainty"];

/// The scoring rule decomposed: `'brier'` or `'logloss'`.
const SCORE_RULE: Arg = Arg::lit_str("score")
    .or("'brier'")
    .doc("The scoring rule: 'brier' (the default) or 'logloss'.");

const SHAPE: CallShape = CallShape {
    name: "calibration_decomposition",
    required: &[args::P, args::Y],
    optional: &[SCORE_RULE, args::W],
};

/// `calibration_decomposition`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct CalibrationDecomposition {
    signature: datafusion_expr::Signature,
}

signature_from_shape!(CalibrationDecomposition, SHAPE);
kernel_aggregate!(CalibrationDecomposition, false);

impl CalibrationDecomposition {
    fn kernel(&self, args: &AccumulatorArgs) -> Result<RowsStructKernel<4>> {
        let func = SHAPE.name;
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
        Ok(RowsStructKernel {
            auc: AucKernel::named(func, weight_col(args.exprs, 3)),
            fields: f64_struct_fields(&OUT),
            finish: Arc::new(move |rows, tally| {
                let mut corp = Corp::new(logloss);
                for_each_score(rows, tally, |p, w0, w1| corp.add(p, w0, w1));
                corp.finish().map(|v| v.map(Some))
            }),
        })
    }
}

rows_udaf!(
    CalibrationDecomposition,
    SHAPE,
    f64_struct_fields(&OUT),
    crate::common::documented(CalibrationDecompositionDoc.doc(), &SHAPE)
);

/// `x·ln y`, 0 when x is 0 (scipy's `xlogy`).
fn xlogy(x: f64, y: f64) -> f64 {
    if x == 0.0 {
        0.0
    } else {
        x * y.ln()
    }
}

/// The total score of rows of weight `w0` with label 0 and `w1` with label 1 that all
/// predict `q`.
fn score(logloss: bool, w0: f64, w1: f64, q: f64) -> f64 {
    if logloss {
        -xlogy(w1, q) - xlogy(w0, 1.0 - q)
    } else {
        w0 * q * q + w1 * (1.0 - q) * (1.0 - q)
    }
}

/// The decomposition, fed the distinct p in ascending order with their weights per label.
struct Corp {
    logloss: bool,
    /// Σw of the rows labelled 0 and 1.
    total: [f64; 2],
    /// The total score of p.
    s_p: f64,
    /// The pool-adjacent-violators solution so far: blocks of consecutive p with their Σw
    /// per label, ascending in mean label.
    blocks: Vec<[f64; 2]>,
}

impl Corp {
    fn new(logloss: bool) -> Self {
        Self {
            logloss,
            total: [0.0; 2],
            s_p: 0.0,
            blocks: vec![],
        }
    }

    fn add(&mut self, p: f64, w0: f64, w1: f64) {
        // A p whose rows all weigh 0 takes no part in the isotonic fit (as scikit-learn's).
        if w0 + w1 <= 0.0 || (w0 + w1).is_nan() {
            return;
        }
        self.total[0] += w0;
        self.total[1] += w1;
        self.s_p += score(self.logloss, w0, w1, p);
        // Pool while the last block's mean label is not below this one's: b1 / (b0 + b1)
        // compared by cross-multiplying (both sums of weights are positive), which is exact
        // for counts and spares two divisions a step.
        let mut block = [w0, w1];
        while let Some(last) = self.blocks.last() {
            if last[1] * (block[0] + block[1]) < block[1] * (last[0] + last[1]) {
                break;
            }
            block = [last[0] + block[0], last[1] + block[1]];
            self.blocks.pop();
        }
        self.blocks.push(block);
    }

    /// [score, miscalibration, discrimination, uncertainty], or None when every weight is 0.
    fn finish(&self) -> Option<[f64; 4]> {
        let [n0, n1] = self.total;
        let n = n0 + n1;
        if n <= 0.0 || n.is_nan() {
            return None;
        }
        let s_iso: f64 = self
            .blocks
            .iter()
            .map(|&[b0, b1]| score(self.logloss, b0, b1, b1 / (b0 + b1)))
            .sum();
        let (s, s_iso) = (self.s_p / n, s_iso / n);
        let s_r = score(self.logloss, n0, n1, n1 / n) / n;
        Some([s, s - s_iso, s_r - s_iso, s_r])
    }
}
