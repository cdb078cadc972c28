//! A multiclass model's rows: a list of class probabilities (`probs`, any numeric list type)
//! or of scores (`logits`), and the observed class index (`label`, 0 to K − 1), read and
//! checked the one way every multiclass function reads them (the top-label and class-wise
//! metrics, `logloss`, `brier` and `auc` on a list; `fit_temperature` and `fit_ovr`).
//!
//! A row is skipped (a missing prediction, as a NULL p is) when its list is NULL or holds a
//! NULL, when its label is NULL, or when the aggregate's FILTER leaves it out. Otherwise its
//! list must be non-empty, and its label an integer index into the list; a list of
//! probabilities holds values in [0, 1] summing to 1 within [`SUM_TOLERANCE`], a list of
//! scores finite values. The errors name the function, the argument and the value.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::DataType;
use datafusion_common::{exec_err, Result};

use crate::common::{check_p, f64_list_type, f64s};
use crate::kernel::Filter;

/// Whether an argument of this type is a list of class probabilities: a function's
/// multiclass form (`logloss`, `brier`, `auc` on a list).
pub(crate) fn is_list(t: &DataType) -> bool {
    matches!(
        t,
        DataType::List(_) | DataType::LargeList(_) | DataType::FixedSizeList(..)
    )
}

/// How far a row's probabilities may sum from 1.
pub const SUM_TOLERANCE: f64 = 1e-6;

/// What a list holds: class probabilities (the argument `probs`) or scores (`logits` or
/// `scores`, named here).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Values {
    Probabilities,
    Scores(&'static str),
}

impl Values {
    /// The argument's name in errors.
    pub(crate) fn arg(self) -> &'static str {
        match self {
            Values::Probabilities => "probs",
            Values::Scores(name) => name,
        }
    }
}

/// Calls `f(i, row)` for each row `i` of the columns `probs` and `label`: `Some((probs,
/// label))` for a checked row, None for a skipped one (see the module documentation); the
/// first error, the rows' or `f`'s, ends the pass.
pub(crate) fn for_each_row(
    func: &str,
    probs: &ArrayRef,
    label: &ArrayRef,
    filter: Filter,
    f: impl FnMut(usize, Option<(&[f64], usize)>) -> Result<()>,
) -> Result<()> {
    for_each_row_of(func, Values::Probabilities, probs, label, filter, f)
}

/// [`for_each_row`] of a list holding `values`.
pub(crate) fn for_each_row_of(
    func: &str,
    values: Values,
    probs: &ArrayRef,
    label: &ArrayRef,
    filter: Filter,
    mut f: impl FnMut(usize, Option<(&[f64], usize)>) -> Result<()>,
) -> Result<()> {
    let arg = values.arg();
    let probs = if *probs.data_type() == f64_list_type() {
        Arc::clone(probs)
    } else {
        arrow::compute::cast(probs, &f64_list_type())?
    };
    let probs = probs.as_list::<i32>();
    let label = match label.data_type() {
        DataType::Float64 => Arc::clone(label),
        _ => arrow::compute::cast(label, &DataType::Float64)?,
    };
    let label = f64s(&label);
    let p = f64s(probs.values());
    let offsets = probs.value_offsets();
    for i in 0..probs.len() {
        let (start, end) = (offsets[i] as usize, offsets[i + 1] as usize);
        let skipped = probs.is_null(i)
            || label.is_null(i)
            || filter.is_some_and(|f| !f.is_valid(i) || !f.value(i))
            || (p.null_count() > 0 && (start..end).any(|j| p.is_null(j)));
        if skipped {
            f(i, None)?;
            continue;
        }
        let k = end - start;
        if k == 0 {
            let what = match values {
                Values::Probabilities => "probability",
                Values::Scores(_) => "score",
            };
            return exec_err!(
                "{func}: argument {arg} must hold one {what} a class, got an empty list"
            );
        }
        let row = &p.values()[start..end];
        if values == Values::Probabilities {
            let mut sum = 0.0;
            for &v in row {
                check_p(func, "probs", v)?;
                sum += v;
            }
            // Every value is in [0, 1] (checked above), so the sum is a number.
            if (sum - 1.0).abs() > SUM_TOLERANCE {
                return exec_err!(
                    "{func}: argument probs must sum to 1 within {SUM_TOLERANCE:e}, got a list summing to {sum}"
                );
            }
        } else if let Some(v) = row.iter().find(|v| !v.is_finite()) {
            return exec_err!("{func}: argument {arg} must be finite, got {v}");
        }
        let y = label.value(i);
        if !(y >= 0.0 && y < k as f64 && y.fract() == 0.0) {
            return exec_err!(
                "{func}: argument label must be a class index from 0 to {}, got {y}",
                k - 1
            );
        }
        f(i, Some((row, y as usize)))?;
    }
    Ok(())
}
