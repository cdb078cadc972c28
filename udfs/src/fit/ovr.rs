//! `fit_ovr(scores, label [, method [, w]])`: a binary calibrator per class of a multiclass
//! model, one-vs-rest — class k's model fitted on `(scores[k], label = k)` — returned as the
//! list of the K models that `calibrate(scores, models)` applies and renormalises (scikit-learn's
//! `CalibratedClassifierCV` with `method='sigmoid'` or `'isotonic'` on K ≥ 3 classes).
//!
//! It is the fit's own kernel (`FitKernel`) behind `PerClass` (`crate::metrics::classwise`):
//! group g's class k is the kernel's group g · K + k, so each class keeps the state, and gives
//! the model, that the binary fit gives, and partial states merge as the binary fit's do.
//! Errors name `fit_ovr` and the class's argument as the binary fit names it (`p`, `w`).

use arrow::datatypes::{DataType, Field, FieldRef};
use datafusion_common::{plan_err, Result, ScalarValue};
use datafusion_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion_expr::{AggregateUDFImpl, Documentation, Signature};
use datafusion_macros::user_doc;
use std::sync::Arc;

use super::{default_settings, fit_state_fields, FitKernel, Method};
use crate::common::{args, literal, weight_col, Arg, CallShape};
use crate::kernel::{kernel_aggregate, kernel_udaf_common, signature_from_shape};
use crate::metrics::classwise::{per_class_fields, PerClass};
use crate::multiclass::Values;

const SHAPE: CallShape = CallShape {
    name: "fit_ovr",
    required: &[
        Arg::num_list("scores").doc(
            "The model's class scores, a list per row (any numeric list type): probabilities, logits or \
decision values, each finite (in [0, 1] for a method that takes probabilities).",
        ),
        args::LABEL,
    ],
    optional: &[
        Arg::lit_str("method").or("'platt'").doc(
            "The binary calibrator fitted per class, a constant: the name of any `fit_*` method that takes no \
field (`'platt'`, `'temperature'`, `'beta'`, `'gaussian'`, `'gamma'`, `'isotonic'`, `'histogram'`, \
`'histogram_quantile'`, `'ilps'`, `'bbq'`), with that fit's default settings. Default `'platt'`.",
        ),
        args::W,
    ],
};

#[user_doc(
    doc_section(label = "Calibrators"),
    description = "Fits a binary calibrator per class of a multiclass model, one-vs-rest: class k's model is \
the `fit_<method>` of `(scores[k], label = k)`. Returns the list of the K models, which \
`calibrate(scores, models)` applies class by class and renormalises to sum to 1 (every class 1/K where all \
are 0), as scikit-learn's `CalibratedClassifierCV` does for three classes or more (with two, scikit-learn \
calibrates class 1 alone: use the binary fit). `method => 'isotonic'` is scikit-learn's \
`method='isotonic'`; scikit-learn's `'sigmoid'` fits Platt's smoothed targets, calibsql's `'platt'` the \
labels themselves. Weighted by `w` for the methods that take a weight (`platt`, `temperature`, `beta`, \
`gaussian`, `gamma`, `isotonic`). Every row's list must have the same length, the number of classes; rows \
with a NULL `scores` (or a NULL in it), `label` or `w` are skipped; NULL when no row is usable.",
    syntax_example = "fit_ovr(scores, label [, method [, w]])",
    sql_example = r#"```sql
> SELECT calibrate([0.6, 0.3, 0.1], m) AS p
  FROM (SELECT fit_ovr(probs, label, 'isotonic') AS m
        FROM (VALUES ([0.6, 0.3, 0.1], 0), ([0.5, 0.4, 0.1], 1), ([0.2, 0.7, 0.1], 1), ([0.1, 0.2, 0.7], 2)) AS t(probs, label));
+-----------------+
| p               |
+-----------------+
| [1.0, 0.0, 0.0] |
+-----------------+
```"#
)]
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct FitOvr {
    signature: Signature,
}

signature_from_shape!(FitOvr, SHAPE);

/// The methods `fit_ovr` takes: every one whose fit and application take no field.
fn per_class_method(v: &ScalarValue) -> Result<Method> {
    match v.try_as_str().flatten().and_then(Method::parse) {
        Some(m) if !m.is_field_aware() => Ok(m),
        _ => {
            let names: Vec<String> = Method::ALL
                .iter()
                .filter(|m| !m.is_field_aware())
                .map(|m| format!("'{}'", m.as_str()))
                .collect();
            plan_err!(
                "fit_ovr: argument method must be one of {}, got {v}",
                names.join(", ")
            )
        }
    }
}

impl FitOvr {
    fn kernel(&self, args: &AccumulatorArgs) -> Result<PerClass<FitKernel>> {
        let method = match args.exprs.get(2) {
            Some(e) => per_class_method(&literal(SHAPE.name, "method", e)?)?,
            None => Method::Platt,
        };
        let shape = method.calibrator().shape();
        // The binary kernel's columns: the class's score, its 0/1 label, then fit_ovr's own
        // (the method, the weight) repeated.
        let w_col = weight_col(args.exprs, 3);
        if w_col.is_some() && !shape.optional.iter().any(|a| a.name() == "w") {
            return plan_err!(
                "fit_ovr: argument w is not taken by method '{}' ({} takes no weight)",
                method.as_str(),
                shape.name
            );
        }
        let (mut settings, _) = default_settings(&shape);
        settings.quantile = method == Method::HistogramQuantile;
        let mut inner = FitKernel::for_field(method, method.exact_cap(), settings);
        inner.w_col = w_col;
        inner.reported_as = Some(SHAPE.name);
        Ok(PerClass::listed(
            SHAPE.name,
            inner,
            Values::Scores("scores"),
        ))
    }
}

kernel_aggregate!(FitOvr, false);

impl AggregateUDFImpl for FitOvr {
    kernel_udaf_common!(returns DataType::List(Arc::new(Field::new_list_field(
        crate::model::model_type(),
        true
    ))));

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(per_class_fields(fit_state_fields(args.name)))
    }

    fn documentation(&self) -> Option<&Documentation> {
        crate::common::documented(self.doc(), &self.shape())
    }
}
