//! `multi_field_rce(p, y, field1, …, fieldK [, eps])`: the mean of `field_rce` over several
//! fields (Zhao et al. §4.1.4), in one pass: one `field_rce` kernel per field, fed the same
//! rows; the partial state is theirs, side by side.

use std::ops::Range;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Float64Array};
use arrow::datatypes::{DataType, FieldRef, Float64Type};
use datafusion_common::{plan_err, Result};
use datafusion_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion_expr::{AggregateUDFImpl, Documentation, Signature, TypeSignature, Volatility};
use datafusion_macros::user_doc;

use super::field::{FieldKernel, FieldKind, FieldMetric, DEFAULT_RCE_EPS};
use crate::common::{literal, literal_f64};
use crate::kernel::Filter;
use crate::kernel::{kernel_accumulators, Kernel};

const NAME: &str = "multi_field_rce";
const USAGE: &str = "multi_field_rce(p, y, field1, field2, … [, eps])";

#[user_doc(
    doc_section(label = "Calibration Metrics"),
    description = "Multi-field relative calibration error (Zhao et al. 2024, §4.1.4): the mean of \
`field_rce(p, y, field_k, eps)` over the given fields, computed in one pass. Fields are columns of any hashable \
type (NULL is its own value, as in `field_rce`); a numeric constant after them is `eps` (default 0.01). NULL when no \
row is usable.",
    syntax_example = "multi_field_rce(p, y, field1, field2, … [, eps])",
    sql_example = r#"```sql
> SELECT round(multi_field_rce(p, y, site, ad), 6) AS mrce -- site b has no positive: eps = 0.01 makes its term large
  FROM (VALUES (0.5, 1, 'a', 1), (0.5, 1, 'a', 2), (0.5, 0, 'b', 1), (0.5, 0, 'b', 2)) AS t(p, y, site, ad);
+-----------+
| mrce      |
+-----------+
| 12.623762 |
+-----------+
```"#,
    argument(name = "p", description = "Predicted probability in [0, 1]."),
    argument(name = "y", description = "Observed label: Boolean or a number 0/1."),
    argument(
        name = "field1, field2, …",
        description = "One or more fields: columns of any hashable type (one field gives field_rce)."
    ),
    argument(
        name = "eps",
        description = "Optional smoothing of each field_rce's denominator, a constant >= 0 after the fields. Default 0.01."
    )
)]
struct MultiFieldRceDoc;

/// The `multi_field_rce` aggregate.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct MultiFieldRce {
    signature: Signature,
}

impl Default for MultiFieldRce {
    fn default() -> Self {
        Self::new()
    }
}

impl MultiFieldRce {
    pub fn new() -> Self {
        // User-defined coercion, plus example arities that `SHOW FUNCTIONS` and
        // `information_schema` can list (2 or 3 fields, with or without eps). No parameter
        // names: with a variable number of fields, `eps => …` has no fixed position.
        let f = DataType::Float64;
        let t = DataType::Utf8;
        let examples = [
            vec![f.clone(), f.clone(), t.clone(), t.clone()],
            vec![f.clone(), f.clone(), t.clone(), t.clone(), f.clone()],
            vec![f.clone(), f.clone(), t.clone(), t.clone(), t.clone()],
        ];
        let mut variants = vec![TypeSignature::UserDefined];
        variants.extend(examples.into_iter().map(TypeSignature::Exact));
        Self {
            signature: Signature::one_of(variants, Volatility::Immutable),
        }
    }

    /// The field columns among `exprs` and eps: a trailing argument that is a constant
    /// number (at least one field before it) is eps.
    fn fields_and_eps(args: &AccumulatorArgs) -> Result<(usize, f64)> {
        let n = args.exprs.len();
        if n >= 4 {
            if let Ok(v) = literal(NAME, "eps", &args.exprs[n - 1]) {
                if args.expr_fields[n - 1].data_type().is_numeric() {
                    let eps = literal_f64(NAME, "eps", &v)?;
                    if !(eps.is_finite() && eps >= 0.0) {
                        return plan_err!("{NAME}: argument eps must be finite and >= 0, got {v}");
                    }
                    return Ok((n - 3, eps));
                }
            }
        }
        Ok((n - 2, DEFAULT_RCE_EPS))
    }

    fn kernel(&self, args: &AccumulatorArgs) -> Result<MultiFieldKernel> {
        let (fields, eps) = Self::fields_and_eps(args)?;
        let inner = (0..fields)
            .map(|k| {
                FieldKernel::new(
                    NAME,
                    FieldKind::Rce,
                    eps,
                    None,
                    args.expr_fields[2 + k].data_type().clone(),
                )
            })
            .collect::<Result<Vec<_>>>()?;
        // An eps argument has a (always empty) state slot: see `state_fields`.
        let pad = if 2 + fields < args.exprs.len() {
            Some(FieldKernel::new(
                NAME,
                FieldKind::Rce,
                eps,
                None,
                DataType::Float64,
            )?)
        } else {
            None
        };
        Ok(MultiFieldKernel { inner, pad })
    }
}

crate::kernel::kernel_source!(MultiFieldRce);

/// No fixed argument list (a variable number of fields), so no named arguments.
impl crate::common::Shaped for MultiFieldRce {
    fn call_shape(&self) -> Option<crate::common::CallShape> {
        None
    }
}

impl AggregateUDFImpl for MultiFieldRce {
    fn name(&self) -> &str {
        NAME
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    /// p and y as `field_rce` takes them; fields and eps unchanged.
    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        Ok(crate::common::leading_numbers_as_f64(arg_types, 2))
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        if arg_types.len() < 3 {
            return plan_err!(
                "{NAME}: takes at least 3 arguments, got {}; the signature is {USAGE}",
                arg_types.len()
            );
        }
        if !(arg_types[0].is_numeric() || arg_types[0].is_null()) {
            return plan_err!(
                "{NAME}: argument p must be numeric, got type {}",
                arg_types[0]
            );
        }
        let y = &arg_types[1];
        if !(y.is_numeric() || y.is_null() || *y == DataType::Boolean) {
            return plan_err!(
                "{NAME}: argument y must be a Boolean or numeric 0/1 column, got type {y}"
            );
        }
        Ok(DataType::Float64)
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        // One field_rce state per field; a trailing eps has none, but the field count is
        // not known from types alone, so every argument after y gets one (an eps's stays
        // empty).
        let single = FieldMetric::new(FieldKind::Rce);
        let mut out = vec![];
        for k in 0..args.input_fields.len().saturating_sub(2) {
            let name = format!("{}[{k}]", args.name);
            let inner = StateFieldsArgs {
                name: &name,
                input_fields: &args.input_fields[..3],
                return_field: Arc::clone(&args.return_field),
                ordering_fields: args.ordering_fields,
                is_distinct: false,
            };
            out.extend(single.state_fields(inner)?);
        }
        Ok(out)
    }

    kernel_accumulators!();

    fn documentation(&self) -> Option<&Documentation> {
        MultiFieldRceDoc.doc()
    }
}

#[derive(Debug)]
struct MultiFieldKernel {
    inner: Vec<FieldKernel>,
    /// The empty state of the eps argument's slot.
    pad: Option<FieldKernel>,
}

/// State columns of one `field_rce` kernel.
const INNER_STATE: usize = 4;

impl Kernel for MultiFieldKernel {
    fn empty(&self) -> Result<Self> {
        Ok(Self {
            inner: self
                .inner
                .iter()
                .map(Kernel::empty)
                .collect::<Result<_>>()?,
            pad: self.pad.as_ref().map(Kernel::empty).transpose()?,
        })
    }
    fn resize(&mut self, n: usize) {
        self.inner.iter_mut().for_each(|k| k.resize(n));
        if let Some(p) = &mut self.pad {
            p.resize(n);
        }
    }
    fn num_groups(&self) -> usize {
        self.inner[0].num_groups()
    }
    fn update(&mut self, values: &[ArrayRef], groups: &[usize], filter: Filter) -> Result<()> {
        for (k, kernel) in self.inner.iter_mut().enumerate() {
            let cols = [
                Arc::clone(&values[0]),
                Arc::clone(&values[1]),
                Arc::clone(&values[2 + k]),
            ];
            kernel.update(&cols, groups, filter)?;
        }
        Ok(())
    }
    fn merge(&mut self, states: &[ArrayRef], groups: &[usize]) -> Result<()> {
        for (k, kernel) in self.inner.iter_mut().enumerate() {
            kernel.merge(&states[k * INNER_STATE..(k + 1) * INNER_STATE], groups)?;
        }
        Ok(())
    }
    fn state(&self, range: Range<usize>) -> Result<Vec<ArrayRef>> {
        let mut out = vec![];
        for kernel in self.inner.iter().chain(&self.pad) {
            out.extend(kernel.state(range.clone())?);
        }
        Ok(out)
    }
    fn evaluate(&mut self, range: Range<usize>) -> Result<ArrayRef> {
        let parts = self
            .inner
            .iter_mut()
            .map(|k| k.evaluate(range.clone()))
            .collect::<Result<Vec<_>>>()?;
        let parts: Vec<&Float64Array> = parts
            .iter()
            .map(|a| a.as_primitive::<Float64Type>())
            .collect();
        let k = parts.len() as f64;
        Ok(Arc::new(
            (0..range.len())
                .map(|i| {
                    if parts.iter().any(|a| a.is_null(i)) {
                        None
                    } else {
                        Some(parts.iter().map(|a| a.value(i)).sum::<f64>() / k)
                    }
                })
                .collect::<Float64Array>(),
        ))
    }
    fn drain(&mut self, n: usize) {
        self.inner.iter_mut().for_each(|k| k.drain(n));
        if let Some(p) = &mut self.pad {
            p.drain(n);
        }
    }
    fn size(&self) -> usize {
        self.inner.iter().chain(&self.pad).map(Kernel::size).sum()
    }
}
