//! `F_merge(state)`: merges stored states of `F` and returns `F`'s value.

use std::ops::Range;
use std::sync::Arc;

use arrow::array::{
    new_null_array, Array, ArrayRef, AsArray, BooleanArray, StringArray, StructArray, UInt32Array,
};
use arrow::compute::take;
use arrow::datatypes::{DataType, Field, FieldRef, Fields};
use datafusion_common::{exec_err, plan_err, Result};
use datafusion_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion_expr::utils::format_state_name;
use datafusion_expr::{AggregateUDFImpl, Documentation, Signature, TypeSignature, Volatility};

use crate::kernel::Filter;
use crate::kernel::{DynKernel, Kernel, KernelAggregate};

use super::{
    canonical_types, example_args, plain_state_fields, rebuild, section, state_type, type_list,
    STATE_FORMAT,
};
/// `F_merge(state)`: merges stored states of `F` and returns `F`'s value.
#[derive(Debug)]
pub(super) struct MergeOf {
    pub(super) inner: Arc<dyn KernelAggregate>,
    name: String,
    signature: Signature,
    doc: Documentation,
}

identified_by_name!(MergeOf);

impl MergeOf {
    pub(super) fn new(inner: Arc<dyn KernelAggregate>) -> Self {
        let f = inner.name().to_string();
        let name = format!("{f}_merge");
        let retract = if inner.states_retractable() {
            " Works over sliding window frames (`OVER (ORDER BY day ROWS BETWEEN 6 PRECEDING AND CURRENT ROW)`): \
states leaving the frame are subtracted."
        } else {
            ""
        };
        let doc = Documentation::builder(
            section(),
            format!(
                "Merges states made by `{f}_state` (e.g. one per day, read back from Parquet) and returns exactly what \
`{f}` returns over the union of their rows (to summation order). States made with other parameters, by another \
function, or in another format are an error naming both.{retract}"
            ),
            format!("{name}(state)"),
        )
        .with_sql_example(format!(
            r#"```sql
> WITH t(day, p, y, f, q) AS (VALUES (1, 0.2, 0, 'a', 0.5), (1, 0.7, 1, 'b', 0.9), (2, 0.4, 1, 'a', 0.3), (2, 0.9, 0, 'b', 0.6)),
  daily AS (SELECT day, {f}_state({args}) AS s FROM t GROUP BY day)
  SELECT arrow_typeof({name}(s)) = arrow_typeof({f}({args})) AS same_type, count(*) AS days FROM daily, (SELECT * FROM t LIMIT 1) AS t;
+-----------+------+
| same_type | days |
+-----------+------+
| true      | 2    |
+-----------+------+
```"#,
            args = example_args(&inner.call_shape()),
        ))
        .with_argument("state", format!("A state made by `{f}_state`."))
        .build();
        // User-defined coercion (a state read back from Parquet), then the exact state type so
        // that SHOW FUNCTIONS lists it (a user-defined signature alone lists nothing).
        let mut variants = vec![TypeSignature::UserDefined];
        if let Ok(t) = state_type(inner.as_ref()) {
            variants.push(TypeSignature::Exact(vec![t]));
        }
        let mut signature = Signature::one_of(variants, Volatility::Immutable);
        signature.parameter_names = Some(vec!["state".to_string()]);
        Self {
            inner,
            name,
            signature,
            doc,
        }
    }

    /// The state type a call's argument is cast to, or the error that says what is wrong.
    fn state_arg(&self, arg_types: &[DataType]) -> Result<DataType> {
        let expected = state_type(self.inner.as_ref())?;
        let [DataType::Struct(fields)] = arg_types else {
            return plan_err!(
                "{}: argument state must be a state made by {}_state, got type {}; the signature is {}(state)",
                self.name,
                self.inner.name(),
                type_list(arg_types),
                self.name
            );
        };
        let names = |t: &DataType| -> Vec<String> {
            match t {
                DataType::Struct(f) => f.iter().map(|f| f.name().clone()).collect(),
                _ => vec![],
            }
        };
        let DataType::Struct(want) = &expected else {
            unreachable!()
        };
        let state_names = |f: &Fields| f.find("state").map(|(_, f)| names(f.data_type()));
        // A stored state of an earlier layout of F, without the fields added since: the
        // state struct F has, cut to the fields it holds.
        let (got, wanted) = (state_names(fields), state_names(want));
        let earlier = match (&got, &wanted) {
            (Some(got), Some(wanted)) => {
                let added = self.inner.state_fields_added();
                added > 0 && got.len() + added == wanted.len() && wanted.starts_with(got)
            }
            _ => false,
        };
        if names(&arg_types[0]) == names(&expected) && earlier {
            let cut = got.map_or(0, |g| g.len());
            return Ok(DataType::Struct(
                want.iter()
                    .map(|f| match (f.name().as_str(), f.data_type()) {
                        ("state", DataType::Struct(inner)) => Arc::new(Field::new(
                            "state",
                            DataType::Struct(inner.iter().take(cut).cloned().collect()),
                            true,
                        )),
                        _ => Arc::clone(f),
                    })
                    .collect(),
            ));
        }
        let same_layout = names(&arg_types[0]) == names(&expected) && got == wanted;
        if !same_layout {
            let state = fields.find("state").map(|(_, f)| f.data_type().to_string());
            // The registry knows every state layout: name the functions that make this one.
            let makers: Vec<String> = crate::registry::stateful()
                .iter()
                .filter(|f| {
                    state_type(f.as_ref()).is_ok_and(|t| {
                        let DataType::Struct(theirs) = &t else {
                            return false;
                        };
                        names(&t) == names(&arg_types[0])
                            && fields.find("state").map(|(_, f)| names(f.data_type()))
                                == theirs.find("state").map(|(_, f)| names(f.data_type()))
                    })
                })
                .map(|f| format!("{}_state", f.name()))
                .collect();
            let made_by = match makers.as_slice() {
                [] => "no calibsql function makes states of this layout".to_string(),
                [one] => format!("it was made by {one}"),
                many => format!("it was made by one of {}", many.join(", ")),
            };
            return plan_err!(
                "{}: the state's layout is not {}'s (got {}); {made_by}",
                self.name,
                self.inner.name(),
                state.unwrap_or_else(|| arg_types[0].to_string())
            );
        }
        Ok(expected)
    }

    fn kernel(&self, args: &AccumulatorArgs) -> Result<MergeKernel> {
        let shape = self.inner.call_shape();
        Ok(MergeKernel {
            inner: Arc::clone(&self.inner),
            name: self.name.clone(),
            function: shape.name,
            kernel: None,
            params: None,
            groups: 0,
            state_fields: plain_state_fields(self.inner.as_ref(), &canonical_types(&shape))?,
            return_type: args.return_field.data_type().clone(),
            retractable: self.inner.states_retractable(),
        })
    }
}

crate::kernel::kernel_source!(MergeOf);

impl AggregateUDFImpl for MergeOf {
    fn name(&self) -> &str {
        &self.name
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    /// A state read back from Parquet may differ in string view types and nullability:
    /// cast it to `F`'s state type when its layout (field names) is `F`'s. Anything else is
    /// left as is, for `return_type` to report with this function's own message.
    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        Ok(match self.state_arg(arg_types) {
            Ok(t) => vec![t],
            Err(_) => arg_types.to_vec(),
        })
    }
    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.state_arg(arg_types)?;
        self.inner
            .return_type(&canonical_types(&self.inner.call_shape()))
    }
    crate::kernel::kernel_accumulators!();
    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        let mut out: Vec<FieldRef> = vec![Arc::new(Field::new(
            format_state_name(args.name, "params"),
            DataType::Utf8,
            true,
        ))];
        for f in plain_state_fields(
            self.inner.as_ref(),
            &canonical_types(&self.inner.call_shape()),
        )?
        .iter()
        {
            out.push(Arc::new(Field::new(
                format_state_name(args.name, f.name()),
                f.data_type().clone(),
                true,
            )));
        }
        Ok(out)
    }
    fn documentation(&self) -> Option<&Documentation> {
        Some(&self.doc)
    }
}

/// Each optional argument's value in a state's parameters (see `describe`): its text, `name`
/// alone for a column, the default's text for an argument left out; None for an argument
/// without a default left out. None when `params` is not such a description.
fn optional_values(shape: &crate::common::CallShape, params: &str) -> Option<Vec<Option<String>>> {
    let body = params
        .strip_prefix(shape.name)?
        .strip_prefix('(')?
        .strip_suffix(')')?;
    let mut parts = if body.is_empty() {
        vec![]
    } else {
        body.split(", ").collect::<Vec<_>>()
    };
    // The types of the field arguments come first.
    let typed = shape
        .required
        .iter()
        .filter(|a| a.role == crate::common::Role::Any)
        .count();
    parts.drain(..typed.min(parts.len()));
    let mut given = parts.into_iter();
    Some(
        shape
            .optional
            .iter()
            .map(|a| match given.next() {
                Some(part) => Some(match part.split_once(" => ") {
                    Some((_, v)) => v.to_string(),
                    None => part.to_string(),
                }),
                None => a.default.map(super::canonical_default),
            })
            .collect(),
    )
}

/// Whether two states' parameters describe the same call: every optional argument the same,
/// an argument one leaves out taking its default.
fn same_call(shape: &crate::common::CallShape, a: &str, b: &str) -> bool {
    match (optional_values(shape, a), optional_values(shape, b)) {
        (Some(x), Some(y)) => x == y,
        _ => false,
    }
}

/// Merges states into `F`'s kernel, built from the first state's parameters.
#[derive(Debug)]
struct MergeKernel {
    inner: Arc<dyn KernelAggregate>,
    name: String,
    function: &'static str,
    kernel: Option<Box<dyn DynKernel>>,
    params: Option<String>,
    groups: usize,
    state_fields: Fields,
    return_type: DataType,
    retractable: bool,
}

impl MergeKernel {
    /// Checks a state's parameters against the ones merged so far (building the kernel on
    /// the first).
    fn accept(&mut self, params: &str) -> Result<()> {
        match &self.params {
            Some(p) if p == params => Ok(()),
            // The same call described by two versions (one spelling out an argument added
            // since with its default, `w => 1.0`).
            Some(p) if same_call(&self.inner.call_shape(), p, params) => Ok(()),
            Some(p) => exec_err!(
                "{}: cannot merge states made with different parameters: {p} and {params}",
                self.name
            ),
            None => {
                let mut kernel = rebuild(self.inner.as_ref(), &self.name, params)?
                    .kernel(self.inner.as_ref())?;
                kernel.resize(self.groups);
                self.kernel = Some(kernel);
                self.params = Some(params.to_string());
                Ok(())
            }
        }
    }

    /// The rows of stored states to merge: their indices, after checking each one.
    fn stored_rows(&mut self, s: &StructArray, filter: Option<&BooleanArray>) -> Result<Vec<u32>> {
        let format = s
            .column_by_name("format")
            .and_then(|c| c.as_primitive_opt::<arrow::datatypes::Int32Type>());
        let function = s.column_by_name("function").map(|c| c.as_string::<i32>());
        let params = s.column_by_name("params").map(|c| c.as_string::<i32>());
        let (Some(format), Some(function), Some(params)) = (format, function, params) else {
            return exec_err!("{}: malformed state struct", self.name);
        };
        let mut rows = vec![];
        for r in 0..s.len() {
            if s.is_null(r) || filter.is_some_and(|f| !f.is_valid(r) || !f.value(r)) {
                continue;
            }
            if format.is_null(r) || format.value(r) != STATE_FORMAT {
                return exec_err!(
                    "{}: state format {} is not one this calibsql reads (format {STATE_FORMAT}); recompute it \
with {}_state",
                    self.name,
                    if format.is_null(r) { "NULL".to_string() } else { format.value(r).to_string() },
                    self.function
                );
            }
            if function.is_null(r) || function.value(r) != self.function {
                return exec_err!(
                    "{}: got a state of {}, made by {}_state; {} merges only {}_state states",
                    self.name,
                    if function.is_null(r) {
                        "NULL"
                    } else {
                        function.value(r)
                    },
                    if function.is_null(r) {
                        "?"
                    } else {
                        function.value(r)
                    },
                    self.name,
                    self.function
                );
            }
            if params.is_null(r) {
                return exec_err!("{}: a state without parameters", self.name);
            }
            self.accept(params.value(r))?;
            rows.push(r as u32);
        }
        Ok(rows)
    }

    /// Merges (or `unmerge`s) the chosen rows of the states' columns `children` into
    /// `groups`; `stored` states (a user's, not this aggregate's own partial states) are
    /// checked first ([`Kernel::check_stored`]).
    fn apply(
        &mut self,
        children: &[ArrayRef],
        rows: Vec<u32>,
        groups: &[usize],
        unmerge: bool,
        stored: bool,
    ) -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let idx = UInt32Array::from(rows);
        let taken = children
            .iter()
            .map(|c| take(c.as_ref(), &idx, None))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let g: Vec<usize> = idx.values().iter().map(|&r| groups[r as usize]).collect();
        let kernel = self.kernel.as_mut().expect("built by accept");
        if stored {
            kernel.check_stored(&taken)?;
        }
        if unmerge {
            kernel.unmerge(&taken, &g)
        } else {
            kernel.merge(&taken, &g)
        }
    }

    fn stored(
        &mut self,
        values: &[ArrayRef],
        groups: &[usize],
        filter: Option<&BooleanArray>,
        unmerge: bool,
    ) -> Result<()> {
        let s = values[0].as_struct();
        let rows = self.stored_rows(s, filter)?;
        let Some(state) = s.column_by_name("state") else {
            return exec_err!("{}: malformed state struct", self.name);
        };
        let children = state.as_struct().columns().to_vec();
        self.apply(&children, rows, groups, unmerge, true)
    }
}

impl Kernel for MergeKernel {
    fn empty(&self) -> Result<Self> {
        Ok(Self {
            inner: Arc::clone(&self.inner),
            name: self.name.clone(),
            function: self.function,
            kernel: None,
            params: None,
            groups: 0,
            state_fields: self.state_fields.clone(),
            return_type: self.return_type.clone(),
            retractable: self.retractable,
        })
    }
    fn resize(&mut self, n: usize) {
        self.groups = self.groups.max(n);
        if let Some(k) = &mut self.kernel {
            k.resize(n);
        }
    }
    fn num_groups(&self) -> usize {
        self.groups
    }
    fn update(&mut self, values: &[ArrayRef], groups: &[usize], filter: Filter) -> Result<()> {
        self.stored(values, groups, filter, false)
    }
    fn merge(&mut self, states: &[ArrayRef], groups: &[usize]) -> Result<()> {
        let params = states[0].as_string::<i32>();
        let mut rows = vec![];
        for r in 0..params.len() {
            if params.is_valid(r) {
                self.accept(params.value(r))?;
                rows.push(r as u32);
            }
        }
        self.apply(&states[1..], rows, groups, false, false)
    }
    fn state(&self, range: Range<usize>) -> Result<Vec<ArrayRef>> {
        let n = range.len();
        let params: ArrayRef = Arc::new(StringArray::from(vec![self.params.as_deref(); n]));
        let mut out = vec![params];
        match &self.kernel {
            Some(k) => out.extend(k.state(range)?),
            None => out.extend(
                self.state_fields
                    .iter()
                    .map(|f| new_null_array(f.data_type(), n)),
            ),
        }
        Ok(out)
    }
    fn evaluate(&mut self, range: Range<usize>) -> Result<ArrayRef> {
        match &mut self.kernel {
            Some(k) => k.evaluate(range),
            None => Ok(new_null_array(&self.return_type, range.len())),
        }
    }
    fn drain(&mut self, n: usize) {
        self.groups -= n.min(self.groups);
        if let Some(k) = &mut self.kernel {
            k.drain(n);
        }
    }
    fn size(&self) -> usize {
        self.kernel.as_ref().map_or(0, |k| k.size())
    }
    fn retractable(&self) -> bool {
        self.retractable
    }
    fn retract(&mut self, values: &[ArrayRef], groups: &[usize]) -> Result<()> {
        self.stored(values, groups, None, true)
    }
}
