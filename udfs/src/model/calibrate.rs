//! `calibrate(score, model [, field])`: the scalar UDF that applies a model column to scores
//! through [`super::apply`] / [`super::apply_field`].

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Float64Array};
use arrow::datatypes::{DataType, Field, FieldRef, Float64Type};
use datafusion_common::{exec_err, plan_err, Result, ScalarValue};
use datafusion_expr::{
    ColumnarValue, Documentation, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDFImpl, Signature,
    TypeSignature, Volatility,
};
use datafusion_macros::user_doc;

use super::view::{FieldColumn, PreparedConfCalib};

mod multiclass;
use super::{apply, apply_field, model_fields, model_type, ModelRef};

/// The model argument must be a struct whose fields calibrate reads have the model's types.
pub(super) fn check_model_type(t: &DataType) -> Result<()> {
    let DataType::Struct(fields) = t else {
        return plan_err!(
            "calibrate: argument model must be a model struct (the result of a fit_* aggregate), got type {t}"
        );
    };
    let want = model_fields();
    for f in fields {
        if let Some((_, w)) = want.find(f.name()) {
            if !same_but_encoding(f.data_type(), w.data_type()) {
                return plan_err!(
                    "calibrate: argument model field {} must be {}, got {}",
                    f.name(),
                    w.data_type(),
                    f.data_type()
                );
            }
        }
    }
    if fields.find("method").is_none() {
        return plan_err!("calibrate: argument model must have a method field");
    }
    Ok(())
}

/// A model read back from a table that encodes its text or lists differently (Delta and
/// Parquet readers give `Utf8View`, other writers `LargeUtf8` or large lists): the type it is
/// cast to before calibrate reads it, its fields' types made the model's. `None` when there is
/// nothing to cast, or when a field differs by more than its encoding ([`check_model_type`]
/// refuses that model when the call is planned).
pub(super) fn stored_model_type(t: &DataType) -> Option<DataType> {
    let DataType::Struct(fields) = t else {
        return None;
    };
    let want = model_fields();
    let mut cast = false;
    let mut target = Vec::with_capacity(fields.len());
    for f in fields {
        match want.find(f.name()) {
            Some((_, w)) if w.data_type() != f.data_type() => {
                if !same_but_encoding(f.data_type(), w.data_type()) {
                    return None;
                }
                cast = true;
                target.push(Arc::new(Field::new(
                    f.name(),
                    w.data_type().clone(),
                    f.is_nullable(),
                )));
            }
            _ => target.push(Arc::clone(f)),
        }
    }
    cast.then(|| DataType::Struct(target.into()))
}

/// Whether `stored` holds what `model` does, encoded differently (string and list kinds, list
/// item names).
fn same_but_encoding(stored: &DataType, model: &DataType) -> bool {
    use DataType::*;
    match (stored, model) {
        (Utf8 | LargeUtf8 | Utf8View, Utf8) => true,
        (List(item) | LargeList(item) | ListView(item) | LargeListView(item), List(want)) => {
            item.data_type() == want.data_type()
                || same_but_encoding(item.data_type(), want.data_type())
        }
        _ => stored == model,
    }
}

#[user_doc(
    doc_section(label = "Calibrators"),
    description = "Applies a calibration model fitted by any `fit_*` aggregate to a score and returns the calibrated \
probability. Gaussian and Gamma models clamp the score into the fitted range [s_min, s_max]; isotonic models \
interpolate between their knots and clip outside; histogram models clamp into the range. Field-aware models \
(`field_calib`, `confcalib`) take the field as a third argument, the others refuse it. On a list of scores a row \
(a multiclass model's logits), a temperature model gives `softmax(logits / T)` and a list of one model a class \
(`fit_ovr`) applies each class's model to its score and renormalises to sum 1; both return a list.",
    syntax_example = "calibrate(score, model [, field])",
    sql_example = r#"```sql
> SELECT calibrate(s, m) AS p
  FROM (VALUES (1.0), (2.5), (9.0)) AS t(s)
  CROSS JOIN (SELECT fit_isotonic(x, y) AS m FROM (VALUES (1.0, 0), (2.0, 1), (3.0, 0), (4.0, 1)) AS v(x, y));
+-----+
| p   |
+-----+
| 0.0 |
| 0.5 |
| 1.0 |
+-----+
```"#,
    argument(name = "score", description = "The raw score to calibrate."),
    argument(
        name = "model",
        description = "A model struct from any fit_* aggregate."
    ),
    argument(
        name = "field",
        description = "The field value, for the field-aware models (fit_field_calib, fit_confcalib) and only for them; compared as text. A value the fit never saw gets offset 0 (field_calib) or is left unchanged (confcalib)."
    )
)]
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Calibrate {
    signature: Signature,
}

impl Default for Calibrate {
    fn default() -> Self {
        Self::new()
    }
}

impl Calibrate {
    pub fn new() -> Self {
        let mut signature = Signature::one_of(
            vec![
                TypeSignature::UserDefined,
                TypeSignature::Exact(vec![DataType::Float64, model_type()]),
                TypeSignature::Exact(vec![DataType::Float64, model_type(), DataType::Utf8]),
            ],
            Volatility::Immutable,
        );
        // Named arguments, as every other function takes them (`calibrate(s, m, field =>
        // site)`). Set directly: `with_parameter_names` refuses a variable arity.
        signature.parameter_names = Some(vec![
            "score".to_string(),
            "model".to_string(),
            "field".to_string(),
        ]);
        Self { signature }
    }
}

/// `calibrate(score, model [, field])` has no argument with a default.
impl crate::common::Shaped for Calibrate {
    fn call_shape(&self) -> Option<crate::common::CallShape> {
        None
    }
}

impl ScalarUDFImpl for Calibrate {
    fn name(&self) -> &str {
        "calibrate"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    /// Numeric scores to Float64, everything else unchanged, so `return_type` reports a bad
    /// call with this function's own message. (A model stored with other encodings is cast
    /// when it is read, `stored_model_type`: DataFusion's coercion casts no struct.)
    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        Ok(crate::common::leading_numbers_as_f64(arg_types, 1))
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        if !(2..=3).contains(&arg_types.len()) {
            return plan_err!(
                "calibrate: takes 2 or 3 arguments, got {}; the signature is calibrate(score, model [, field])",
                arg_types.len()
            );
        }
        if crate::multiclass::is_list(&arg_types[0]) {
            return multiclass::return_type(arg_types);
        }
        if let DataType::List(_) = &arg_types[1] {
            return plan_err!(
                "calibrate: a list of models (one a class, from fit_ovr) takes a list of scores, got a score of type {}",
                arg_types[0]
            );
        }
        if !(arg_types[0].is_numeric() || arg_types[0].is_null()) {
            return plan_err!(
                "calibrate: argument score must be numeric, got type {}",
                arg_types[0]
            );
        }
        check_model_type(&arg_types[1])?;
        Ok(DataType::Float64)
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        let types: Vec<DataType> = args
            .arg_fields
            .iter()
            .map(|f| f.data_type().clone())
            .collect();
        Ok(Arc::new(Field::new(
            "calibrate",
            self.return_type(&types)?,
            true,
        )))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        if crate::multiclass::is_list(&args.args[0].data_type()) {
            return multiclass::invoke(&args);
        }
        let all_scalar = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let score_scalar = matches!(args.args[0], ColumnarValue::Scalar(_));
        let model_scalar = matches!(args.args[1], ColumnarValue::Scalar(_));
        let n = if all_scalar { 1 } else { args.number_rows };
        let score = match &args.args[0] {
            ColumnarValue::Scalar(s) => s.to_array_of_size(1)?,
            ColumnarValue::Array(a) => Arc::clone(a),
        };
        let score = arrow::compute::cast(&score, &DataType::Float64)?;
        let score = score.as_primitive::<Float64Type>();
        let model = match &args.args[1] {
            // One model for every row (a literal): read where it lies, so that the same
            // model's keys are recognised from batch to batch.
            ColumnarValue::Scalar(ScalarValue::Struct(a)) => Arc::clone(a) as ArrayRef,
            ColumnarValue::Scalar(s) => s.to_array_of_size(1)?,
            ColumnarValue::Array(a) => Arc::clone(a),
        };
        let model = match stored_model_type(model.data_type()) {
            Some(model_type) => arrow::compute::cast(&model, &model_type)?,
            None => model,
        };
        let structs = model.as_struct();
        let view = ModelRef::new(structs)?;
        // The field, as text (the form the field-aware fits store their keys in).
        let field = match args.args.get(2) {
            Some(ColumnarValue::Scalar(s)) => Some((s.to_array_of_size(1)?, true)),
            Some(ColumnarValue::Array(a)) => Some((Arc::clone(a), false)),
            None => None,
        };
        // Integer fields are compared as integers (no text per row), others as text.
        let field = match &field {
            Some((a, scalar))
                if matches!(
                    a.data_type(),
                    DataType::Int8
                        | DataType::Int16
                        | DataType::Int32
                        | DataType::Int64
                        | DataType::UInt8
                        | DataType::UInt16
                        | DataType::UInt32
                ) =>
            {
                Some((arrow::compute::cast(a, &DataType::Int64)?, *scalar))
            }
            Some((a, scalar)) => Some((arrow::compute::cast(a, &DataType::Utf8)?, *scalar)),
            None => None,
        };
        let field = field
            .as_ref()
            .map(|(a, scalar)| (FieldColumn::of(a), *scalar));
        // One confcalib model for the batch: resolved once, not per row.
        let prepared = if n > 0 && model_scalar && field.is_some() && !structs.is_null(0) {
            PreparedConfCalib::new(&view)?
        } else {
            None
        };
        let mut out = Vec::with_capacity(n);
        for i in 0..n {
            let si = if score_scalar { 0 } else { i };
            let mi = if model_scalar { 0 } else { i };
            if score.is_null(si) || structs.is_null(mi) || view.method.is_null(mi) {
                out.push(None);
                continue;
            }
            let s = score.value(si);
            if s.is_nan() {
                return exec_err!("calibrate: argument score must be a number, got NaN");
            }
            out.push(match &field {
                None => Some(apply(&view, mi, s)?),
                Some((keys, scalar)) => {
                    let fi = if *scalar { 0 } else { i };
                    if keys.is_null(fi) {
                        None
                    } else if let Some(p) = &prepared {
                        Some(p.apply(s, keys.key(fi))?)
                    } else {
                        Some(apply_field(&view, mi, s, keys.key(fi))?)
                    }
                }
            });
        }
        let arr: ArrayRef = Arc::new(Float64Array::from(out));
        Ok(if all_scalar {
            ColumnarValue::Scalar(ScalarValue::try_from_array(&arr, 0)?)
        } else {
            ColumnarValue::Array(arr)
        })
    }

    fn documentation(&self) -> Option<&Documentation> {
        self.doc()
    }
}
