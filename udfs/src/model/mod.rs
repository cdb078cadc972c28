//! The calibration model — one Arrow struct type shared by every `fit_*` aggregate, so
//! models of different methods can be stored in one Parquet table, unioned and compared —
//! and `calibrate(score, model [, field])`, which applies any of them through its method's
//! calibrator (`crate::fit`). This file holds the schema ([`model_fields`]), the owned
//! [`Model`] a fit fills and its conversion to an Arrow column; `view.rs` the typed view of a
//! model column ([`ModelRef`], with the accessors the calibrators' `apply` read); `calibrate.rs`
//! the UDF.

use std::sync::Arc;

use arrow::array::{
    ArrayRef, BooleanArray, Float64Array, Int32Array, Int64Array, ListArray, StringArray,
    StructArray,
};
use arrow::buffer::{NullBuffer, OffsetBuffer};
use arrow::datatypes::{DataType, Field, Fields};
use datafusion_common::Result;

mod calibrate;
mod view;

pub use calibrate::Calibrate;
pub use view::{apply, apply_field, is_field_method, FieldKey, ModelRef};
pub(crate) use view::{check_probability, interp, ConfCalibRow};

pub use crate::fit::Method;

/// The fields of the model struct, in order.
pub fn model_fields() -> Fields {
    let list = crate::common::f64_list_type;
    Fields::from(vec![
        Field::new("method", DataType::Utf8, true),
        Field::new("a", DataType::Float64, true),
        Field::new("b", DataType::Float64, true),
        Field::new("c", DataType::Float64, true),
        Field::new("shift", DataType::Float64, true),
        Field::new("s_min", DataType::Float64, true),
        Field::new("s_max", DataType::Float64, true),
        Field::new("knots_x", list(), true),
        Field::new("knots_y", list(), true),
        Field::new("n", DataType::Int64, true),
        Field::new("weight", DataType::Float64, true),
        Field::new("loss", DataType::Float64, true),
        Field::new("iterations", DataType::Int32, true),
        Field::new("converged", DataType::Boolean, true),
        Field::new(
            "field_keys",
            DataType::List(Arc::new(Field::new_list_field(DataType::Utf8, true))),
            true,
        ),
        Field::new("field_values", list(), true),
        Field::new("field_edges", list(), true),
    ])
}

/// The model struct type.
pub fn model_type() -> DataType {
    DataType::Struct(model_fields())
}

/// A fitted model, one row of the model struct.
#[derive(Debug, Clone, PartialEq)]
pub struct Model {
    pub method: Method,
    pub a: Option<f64>,
    pub b: Option<f64>,
    pub c: Option<f64>,
    pub shift: Option<f64>,
    pub s_min: Option<f64>,
    pub s_max: Option<f64>,
    pub knots_x: Option<Vec<f64>>,
    pub knots_y: Option<Vec<f64>>,
    pub n: Option<i64>,
    pub weight: Option<f64>,
    pub loss: Option<f64>,
    pub iterations: Option<i32>,
    pub converged: Option<bool>,
    /// Field-aware models: the field's values (as text), in the order of the two lists below.
    pub field_keys: Option<Vec<String>>,
    /// `field_calib`: one offset per key; `confcalib`: `n_bins` multipliers per key.
    pub field_values: Option<Vec<f64>>,
    /// `confcalib`: `n_bins + 1` bin edges per key.
    pub field_edges: Option<Vec<f64>>,
}

impl Model {
    pub(crate) fn new(method: Method, rows: i64, s_min: f64, s_max: f64) -> Self {
        Model {
            method,
            s_min: Some(s_min),
            s_max: Some(s_max),
            n: Some(rows),
            weight: Some(rows as f64),
            a: None,
            b: None,
            c: None,
            shift: None,
            knots_x: None,
            knots_y: None,
            loss: None,
            iterations: None,
            converged: None,
            field_keys: None,
            field_values: None,
            field_edges: None,
        }
    }
}

fn f64_list(rows: impl Iterator<Item = Option<Vec<f64>>>) -> ArrayRef {
    let rows: Vec<Option<Vec<f64>>> = rows.collect();
    let offsets = OffsetBuffer::from_lengths(rows.iter().map(|r| r.as_ref().map_or(0, Vec::len)));
    let values: Float64Array = rows.iter().flatten().flatten().copied().map(Some).collect();
    let nulls = NullBuffer::from(rows.iter().map(Option::is_some).collect::<Vec<_>>());
    Arc::new(ListArray::new(
        Arc::new(Field::new_list_field(DataType::Float64, true)),
        offsets,
        Arc::new(values),
        Some(nulls),
    ))
}

fn utf8_list(rows: impl Iterator<Item = Option<Vec<String>>>) -> ArrayRef {
    let rows: Vec<Option<Vec<String>>> = rows.collect();
    let offsets = OffsetBuffer::from_lengths(rows.iter().map(|r| r.as_ref().map_or(0, Vec::len)));
    let values: StringArray = rows.iter().flatten().flatten().map(Some).collect();
    let nulls = NullBuffer::from(rows.iter().map(Option::is_some).collect::<Vec<_>>());
    Arc::new(ListArray::new(
        Arc::new(Field::new_list_field(DataType::Utf8, true)),
        offsets,
        Arc::new(values),
        Some(nulls),
    ))
}

/// Models as a struct array (NULL rows for groups without data).
pub(crate) fn models_to_array(models: &[Option<Model>]) -> Result<ArrayRef> {
    let get = |f: fn(&Model) -> Option<f64>| -> ArrayRef {
        Arc::new(
            models
                .iter()
                .map(|m| m.as_ref().and_then(f))
                .collect::<Float64Array>(),
        )
    };
    let columns: Vec<ArrayRef> = vec![
        Arc::new(
            models
                .iter()
                .map(|m| m.as_ref().map(|m| m.method.as_str()))
                .collect::<StringArray>(),
        ),
        get(|m| m.a),
        get(|m| m.b),
        get(|m| m.c),
        get(|m| m.shift),
        get(|m| m.s_min),
        get(|m| m.s_max),
        f64_list(
            models
                .iter()
                .map(|m| m.as_ref().and_then(|m| m.knots_x.clone())),
        ),
        f64_list(
            models
                .iter()
                .map(|m| m.as_ref().and_then(|m| m.knots_y.clone())),
        ),
        Arc::new(
            models
                .iter()
                .map(|m| m.as_ref().and_then(|m| m.n))
                .collect::<Int64Array>(),
        ),
        get(|m| m.weight),
        get(|m| m.loss),
        Arc::new(
            models
                .iter()
                .map(|m| m.as_ref().and_then(|m| m.iterations))
                .collect::<Int32Array>(),
        ),
        Arc::new(
            models
                .iter()
                .map(|m| m.as_ref().and_then(|m| m.converged))
                .collect::<BooleanArray>(),
        ),
        utf8_list(
            models
                .iter()
                .map(|m| m.as_ref().and_then(|m| m.field_keys.clone())),
        ),
        f64_list(
            models
                .iter()
                .map(|m| m.as_ref().and_then(|m| m.field_values.clone())),
        ),
        f64_list(
            models
                .iter()
                .map(|m| m.as_ref().and_then(|m| m.field_edges.clone())),
        ),
    ];
    let nulls = NullBuffer::from(models.iter().map(Option::is_some).collect::<Vec<_>>());
    Ok(Arc::new(StructArray::try_new(
        model_fields(),
        columns,
        Some(nulls),
    )?))
}
