//! `F_state(…)`: an aggregate whose value is its partial state, wrapped for storage.

use std::ops::Range;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, Int32Array, StringArray, StructArray};
use arrow::datatypes::{DataType, Field, FieldRef, Fields};
use datafusion_common::{plan_err, Result};
use datafusion_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion_expr::{AggregateUDFImpl, Documentation, Signature};

use crate::kernel::{DynKernel, Kernel, KernelAggregate};

use super::{
    canonical_types, describe, example_args, plain_state_fields, section, state_type, type_list,
    STATE_FORMAT,
};
/// `F_state`: `F` whose value is its partial state.
#[derive(Debug)]
pub(super) struct StateOf {
    pub(super) inner: Arc<dyn KernelAggregate>,
    name: String,
    signature: Signature,
    doc: Documentation,
}

identified_by_name!(StateOf);

impl StateOf {
    pub(super) fn new(inner: Arc<dyn KernelAggregate>) -> Self {
        let f = inner.name().to_string();
        let name = format!("{f}_state");
        let usage = inner.call_shape().usage().replacen(&f, &name, 1);
        let mut doc = Documentation::builder(
            section(),
            format!(
                "The partial state of `{f}` as one storable value: a struct `{{format, function, params, \
state}}` whose `params` record `{f}`'s arguments (defaults spelled out). Store it (`COPY … TO 'states.parquet'`), \
then `{f}_merge(state)` over any set of such states returns exactly what `{f}` returns over the union of their \
rows. Same arguments as `{f}`."
            ),
            usage,
        )
        .with_sql_example(format!(
            r#"```sql
> SELECT s['function'] AS function, s['format'] AS format FROM (SELECT {name}({args}) AS s FROM (VALUES (0.2, 0, 'a', 0.5), (0.7, 1, 'b', 0.9)) AS t(p, y, f, q));
+{dash}+--------+
| function{pad} | format |
+{dash}+--------+
| {f}{fpad} | 1      |
+{dash}+--------+
```"#,
            args = example_args(&inner.call_shape()),
            dash = "-".repeat(f.len().max(8) + 2),
            pad = " ".repeat(f.len().max(8) - 8),
            fpad = " ".repeat(f.len().max(8) - f.len()),
        ));
        // `F`'s arguments: `SHOW FUNCTIONS` and `information_schema` name the parameters
        // after the documented arguments (without them they listed NULL names).
        for (arg, text) in inner
            .documentation()
            .and_then(|d| d.arguments.clone())
            .unwrap_or_default()
        {
            doc = doc.with_argument(arg, text);
        }
        let doc = doc.build();
        Self {
            signature: inner.signature().clone(),
            inner,
            name,
            doc,
        }
    }

    fn kernel(&self, args: &AccumulatorArgs) -> Result<StateKernel> {
        let shape = self.inner.call_shape();
        let params = describe(&shape, args)?;
        // The binned metrics keep every row for 'quantile' bins; fit_histogram keeps its
        // bounded fit state whatever the strategy.
        if params.contains("strategy => 'quantile'") && !shape.name.starts_with("fit_") {
            return plan_err!(
                "{}: strategy 'quantile' keeps every row, so its state is not bounded; store the state of a \
fixed-edge strategy ('uniform', 'sklearn', …) or compute {} over the rows",
                self.name,
                shape.name
            );
        }
        let types: Vec<DataType> = args
            .expr_fields
            .iter()
            .map(|f| f.data_type().clone())
            .collect();
        Ok(StateKernel {
            kernel: self.inner.dyn_kernel(args)?,
            function: shape.name,
            params,
            fields: plain_state_fields(self.inner.as_ref(), &types)?,
        })
    }
}

crate::kernel::kernel_source!(StateOf);

impl AggregateUDFImpl for StateOf {
    fn name(&self) -> &str {
        &self.name
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        self.inner.coerce_types(arg_types)
    }
    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        // F's own check of the call (its shape, or the one its argument types pick).
        self.inner.return_type(arg_types)?;
        // A call whose state is not the stored one (`fit_temperature` on a list of logits,
        // which keeps its rows) has no stored state.
        let canonical = plain_state_fields(
            self.inner.as_ref(),
            &canonical_types(&self.inner.call_shape()),
        )?;
        let coerced = self.inner.coerce_types(arg_types)?;
        if plain_state_fields(self.inner.as_ref(), &coerced)? != canonical {
            return plan_err!(
                "{}: {} on arguments of types ({}) keeps no storable state",
                self.name,
                self.inner.name(),
                type_list(arg_types)
            );
        }
        state_type(self.inner.as_ref())
    }
    crate::kernel::kernel_accumulators!();
    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        self.inner.state_fields(args)
    }
    fn documentation(&self) -> Option<&Documentation> {
        Some(&self.doc)
    }
}

/// `F`'s kernel, evaluated to its state struct.
#[derive(Debug)]
struct StateKernel {
    kernel: Box<dyn DynKernel>,
    function: &'static str,
    params: String,
    fields: Fields,
}

impl Kernel for StateKernel {
    crate::kernel::delegate_to_inner!(kernel: resize, num_groups, update, merge, state, drain, size);

    fn empty(&self) -> Result<Self> {
        Ok(Self {
            kernel: self.kernel.empty_box()?,
            function: self.function,
            params: self.params.clone(),
            fields: self.fields.clone(),
        })
    }
    fn evaluate(&mut self, range: Range<usize>) -> Result<ArrayRef> {
        let n = range.len();
        let parts = self.kernel.state(range)?;
        let state = StructArray::try_new(self.fields.clone(), parts, None)?;
        let DataType::Struct(outer) = DataType::Struct(Fields::from(vec![
            Field::new("format", DataType::Int32, true),
            Field::new("function", DataType::Utf8, true),
            Field::new("params", DataType::Utf8, true),
            Field::new("state", state.data_type().clone(), true),
        ])) else {
            unreachable!()
        };
        Ok(Arc::new(StructArray::try_new(
            outer,
            vec![
                Arc::new(Int32Array::from(vec![STATE_FORMAT; n])),
                Arc::new(StringArray::from(vec![self.function; n])),
                Arc::new(StringArray::from(vec![self.params.as_str(); n])),
                Arc::new(state),
            ],
            None,
        )?))
    }
    fn retractable(&self) -> bool {
        self.kernel.retractable()
    }
    fn retract(&mut self, values: &[ArrayRef], groups: &[usize]) -> Result<()> {
        self.kernel.retract_rows(values, groups)
    }
}
