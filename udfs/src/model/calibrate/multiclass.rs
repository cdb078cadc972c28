//! `calibrate` on a list of scores a row (a multiclass model's logits or class scores): with a
//! temperature model, `softmax(logits / T)`; with a list of one binary model a class (from
//! `fit_ovr`), each class's score through its model, then renormalised to sum to 1 — every
//! class 1/K when they sum to 0 (scikit-learn's `CalibratedClassifierCV` one-vs-rest).

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Float64Array, ListArray, StructArray};
use arrow::buffer::{NullBuffer, OffsetBuffer};
use arrow::datatypes::{DataType, Field};
use datafusion_common::{exec_err, plan_err, Result, ScalarValue};
use datafusion_expr::{ColumnarValue, ScalarFunctionArgs};

use super::{check_model_type, stored_model_type};
use crate::common::f64_list_type;
use crate::fit::softmax_at;
use crate::model::{apply, Method, ModelRef};

/// The type of `calibrate(list, model)`: a list of probabilities.
pub(super) fn return_type(arg_types: &[DataType]) -> Result<DataType> {
    if arg_types.len() != 2 {
        return plan_err!(
            "calibrate: on a list of scores takes 2 arguments, calibrate(scores, model), got {}",
            arg_types.len()
        );
    }
    match &arg_types[1] {
        DataType::List(item) | DataType::LargeList(item) => check_model_type(item.data_type())?,
        t => check_model_type(t)?,
    }
    if let DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) =
        &arg_types[0]
    {
        if !(f.data_type().is_numeric() || f.data_type().is_null()) {
            return plan_err!(
                "calibrate: argument score must be numeric or a list of numbers, got type {}",
                arg_types[0]
            );
        }
    }
    Ok(f64_list_type())
}

/// A model column as a struct array, cast from a stored encoding if needed.
fn models(a: &ArrayRef) -> Result<ArrayRef> {
    Ok(match stored_model_type(a.data_type()) {
        Some(t) => arrow::compute::cast(a, &t)?,
        None => Arc::clone(a),
    })
}

pub(super) fn invoke(args: &ScalarFunctionArgs) -> Result<ColumnarValue> {
    let all_scalar = args
        .args
        .iter()
        .all(|a| matches!(a, ColumnarValue::Scalar(_)));
    let n = if all_scalar { 1 } else { args.number_rows };
    let as_array = |v: &ColumnarValue| -> Result<(ArrayRef, bool)> {
        Ok(match v {
            ColumnarValue::Scalar(s) => (s.to_array_of_size(1)?, true),
            ColumnarValue::Array(a) => (Arc::clone(a), false),
        })
    };
    let (scores, score_scalar) = as_array(&args.args[0])?;
    let scores = arrow::compute::cast(&scores, &f64_list_type())?;
    let scores = scores.as_list::<i32>();
    let (model, model_scalar) = as_array(&args.args[1])?;
    let per_class = matches!(
        model.data_type(),
        DataType::List(_) | DataType::LargeList(_)
    );
    let model = if per_class {
        let item = match model.data_type() {
            DataType::List(f) | DataType::LargeList(f) => f.data_type().clone(),
            _ => unreachable!("matched above"),
        };
        let target = stored_model_type(&item).unwrap_or(item);
        let list_type = DataType::List(Arc::new(Field::new_list_field(target, true)));
        arrow::compute::cast(&model, &list_type)?
    } else {
        models(&model)?
    };
    let values = scores.values();
    let values = values.as_primitive::<arrow::datatypes::Float64Type>();
    let offsets = scores.value_offsets();

    let mut out: Vec<f64> = Vec::with_capacity(values.len());
    let mut lengths = Vec::with_capacity(n);
    let mut valid = Vec::with_capacity(n);
    let mut row_scores: Vec<f64> = vec![];
    let push_null = |lengths: &mut Vec<usize>, valid: &mut Vec<bool>| {
        lengths.push(0);
        valid.push(false);
    };
    // The per-class form reads its models from the list's values.
    let (list, class_models) = if per_class {
        let list = model.as_list::<i32>().clone();
        let structs: StructArray = list.values().as_struct().clone();
        (Some(list), Some(structs))
    } else {
        (None, None)
    };
    let class_view = class_models.as_ref().map(ModelRef::new).transpose()?;
    let structs = (!per_class).then(|| model.as_struct().clone());
    let view = structs.as_ref().map(ModelRef::new).transpose()?;

    for i in 0..n {
        let si = if score_scalar { 0 } else { i };
        let mi = if model_scalar { 0 } else { i };
        let (start, end) = (offsets[si] as usize, offsets[si + 1] as usize);
        if scores.is_null(si) || (start..end).any(|j| values.is_null(j)) || model.is_null(mi) {
            push_null(&mut lengths, &mut valid);
            continue;
        }
        row_scores.clear();
        row_scores.extend_from_slice(&values.values()[start..end]);
        if let Some(v) = row_scores.iter().find(|v| !v.is_finite()) {
            return exec_err!("calibrate: argument score must be finite, got {v}");
        }
        let k = row_scores.len();
        if let (Some(list), Some(view)) = (&list, &class_view) {
            let (m0, m1) = (
                list.value_offsets()[mi] as usize,
                list.value_offsets()[mi + 1] as usize,
            );
            if m1 - m0 != k {
                return exec_err!(
                    "calibrate: argument model holds {} models (one a class), got a list of {k} scores",
                    m1 - m0
                );
            }
            if (m0..m1).any(|j| {
                view.method.is_null(j) || class_models.as_ref().is_some_and(|s| s.is_null(j))
            }) {
                push_null(&mut lengths, &mut valid);
                continue;
            }
            let start = out.len();
            let mut sum = 0.0;
            for (c, &s) in row_scores.iter().enumerate() {
                let p = apply(view, m0 + c, s)?;
                sum += p;
                out.push(p);
            }
            for p in &mut out[start..] {
                *p = if sum > 0.0 { *p / sum } else { 1.0 / k as f64 };
            }
        } else if let Some(view) = &view {
            if view.method.is_null(mi) {
                push_null(&mut lengths, &mut valid);
                continue;
            }
            let method = view.method(mi)?;
            if method != Method::Temperature {
                return exec_err!(
                    "calibrate: a list of scores takes a temperature model (fit_temperature on a list of logits) or a list of one model a class (fit_ovr), got a {} model",
                    method.as_str()
                );
            }
            let t = view.num(mi, "a")?;
            if t.is_nan() || t <= 0.0 {
                return exec_err!(
                    "calibrate: argument model has temperature a = {t}, expected > 0"
                );
            }
            softmax_at(&row_scores, t, &mut out);
        }
        lengths.push(k);
        valid.push(true);
    }
    let arr: ArrayRef = Arc::new(ListArray::try_new(
        Arc::new(Field::new_list_field(DataType::Float64, true)),
        OffsetBuffer::from_lengths(lengths),
        Arc::new(Float64Array::from(out)),
        Some(NullBuffer::from(valid)),
    )?);
    Ok(if all_scalar {
        ColumnarValue::Scalar(ScalarValue::try_from_array(&arr, 0)?)
    } else {
        ColumnarValue::Array(arr)
    })
}
