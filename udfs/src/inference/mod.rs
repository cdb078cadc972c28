//! Is the miscalibration real? Tests and estimates with their uncertainty, as aggregates, one
//! family per file:
//!
//! - [`spiegelhalter`]: Spiegelhalter's z test (sums, so `_state` / `_merge` and windows);
//! - [`calibration_slope`]: logistic recalibration slope, intercept and calibration-in-the-large
//!   with standard errors;
//! - [`hosmer_lemeshow`]: the Hosmer–Lemeshow test as R ResourceSelection `hoslem.test`;
//! - [`decomposition`]: `calibration_decomposition`, the CORP score decomposition;
//! - [`field_bias`]: per field value bias, Wilson z, p-value and Holm-adjusted p-value;
//! - [`bootstrap`]: `ece_interval`, `ece_diff_interval` (a one-pass Poisson bootstrap of the
//!   ECE, with per-row weights hashed from a key, so it merges across partitions);
//! - [`delong`]: `auc_interval`, `auc_test` (DeLong's variance of the AUC: pROC's interval and
//!   paired test);
//! - [`cbpe`]: the ROC AUC, accuracy, precision, recall and F1 that calibrated probabilities
//!   imply without labels (NannyML's CBPE).
//!
//! `calibration_slope` keeps one point per distinct logit in the parametric fits' state
//! (`points`); `auc_interval`, `hosmer_lemeshow`, `calibration_decomposition` and `cbpe` keep
//! `auc`'s rows (`rows`); the distributions are [`crate::stats`]'s.

use std::sync::Arc;

use arrow::array::{ArrayRef, Float64Array, StructArray};
use arrow::buffer::NullBuffer;
use arrow::compute::cast;
use arrow::datatypes::{DataType, Field, Fields};
use datafusion_common::Result;

pub mod bootstrap;
pub mod calibration_slope;
pub mod cbpe;
pub mod decomposition;
pub mod delong;
pub mod field_bias;
pub mod hosmer_lemeshow;
mod points;
mod rows;
pub mod spiegelhalter;

/// A struct type whose fields are all nullable Float64, named `names`.
pub(crate) fn f64_struct_fields(names: &[&str]) -> Fields {
    names
        .iter()
        .map(|n| Field::new(*n, DataType::Float64, true))
        .collect()
}

/// A struct column of `fields` from per-group rows of numbers (`None`: a NULL struct, a NULL
/// entry: a NULL field), each number cast to its field's type (an integral count such as a
/// degree of freedom to Int64).
pub(crate) fn struct_column<const K: usize>(
    fields: &Fields,
    rows: &[Option<[Option<f64>; K]>],
) -> Result<ArrayRef> {
    let columns = (0..K)
        .map(|k| {
            let values: ArrayRef = Arc::new(
                rows.iter()
                    .map(|r| r.and_then(|r| r[k]))
                    .collect::<Float64Array>(),
            );
            match fields.get(k).map(|f| f.data_type()) {
                Some(DataType::Float64) | None => Ok(values),
                Some(t) => Ok(cast(&values, t)?),
            }
        })
        .collect::<Result<Vec<ArrayRef>>>()?;
    let nulls = NullBuffer::from(rows.iter().map(Option::is_some).collect::<Vec<_>>());
    Ok(Arc::new(StructArray::try_new(
        fields.clone(),
        columns,
        Some(nulls),
    )?))
}

/// A struct column of Float64 fields `names` (see [`struct_column`]).
pub(crate) fn f64_struct_column<const K: usize>(
    names: &[&str],
    rows: &[Option<[Option<f64>; K]>],
) -> Result<ArrayRef> {
    struct_column(&f64_struct_fields(names), rows)
}

/// [`f64_struct_column`] of rows whose fields are all set.
pub(crate) fn f64_struct_array<const K: usize>(
    names: &[&str],
    rows: &[Option<[f64; K]>],
) -> Result<ArrayRef> {
    let rows: Vec<Option<[Option<f64>; K]>> = rows.iter().map(|r| r.map(|v| v.map(Some))).collect();
    f64_struct_column(names, &rows)
}
