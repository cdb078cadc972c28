//! The field-aware fitting aggregate [`FieldFit`] (`fit_confcalib`, confcalib.rs, and
//! `fit_field_calib`, field_calib.rs): one fit state per value of a field inside each group.
//!
//! The kernel nests the fits' own [`FitKernel`]: each (group, field value) pair is one inner
//! group, so rows, merges and memory accounting are the fits' (exact distinct scores, then
//! the fixed grid). The partial state is the group's field values (`keys`, as text) and,
//! for each of the fits' state columns, the list of the inner states of those values.
//! Each group's model is its calibrator's [`fit_fields`](super::calibrator::Calibrator::fit_fields)
//! over the group's field values' states.

use hashbrown::HashMap;
use std::ops::Range;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, StringArray, UInt32Array};
use arrow::buffer::OffsetBuffer;
use arrow::compute::{and, cast, is_not_null, take};
use arrow::datatypes::{DataType, Field, FieldRef, Int64Type};
use datafusion_common::{internal_err, Result};
use datafusion_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion_expr::utils::format_state_name;
use datafusion_expr::{AggregateUDFImpl, Documentation, Signature, Volatility};

use crate::common::{list_array, list_type, CallShape};
use crate::dense::{is_small_int, DenseIndex, NO_ENTRY};
use crate::kernel::Filter;
use crate::kernel::{kernel_aggregate, kernel_udaf_common, Kernel};
use crate::model::Model;

use super::calibrator::Settings;
use super::kernel::FitKernel;
use super::state::FitState;
use super::{fit_state_fields, Method};

/// A field-aware fitting aggregate.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct FieldFit {
    method: Method,
    signature: Signature,
    /// Distinct scores kept exactly per (group, field value); `None`: the method's default.
    exact_cap: Option<usize>,
}

super::fit_constructors!(FieldFit);

impl FieldFit {
    fn shape(&self) -> CallShape {
        self.method.calibrator().shape()
    }

    fn kernel(&self, args: &AccumulatorArgs) -> Result<FieldFitKernel> {
        let (settings, _) = super::settings(&self.shape(), args)?;
        Ok(FieldFitKernel {
            method: self.method,
            settings,
            inner: FitKernel::for_field(
                self.method,
                self.exact_cap.unwrap_or(self.method.exact_cap()),
                settings,
            ),
            keys: vec![],
            dense: DenseIndex::default(),
        })
    }
}

kernel_aggregate!(FieldFit, false, capped);

impl AggregateUDFImpl for FieldFit {
    kernel_udaf_common!(returns crate::model::model_type());

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        let mut fields: Vec<FieldRef> = vec![Arc::new(Field::new(
            format_state_name(args.name, "field_keys"),
            list_type(DataType::Utf8),
            true,
        ))];
        fields.extend(fit_state_fields(args.name).into_iter().map(|f| {
            Arc::new(Field::new(f.name(), list_type(f.data_type().clone()), true)) as FieldRef
        }));
        Ok(fields)
    }

    fn documentation(&self) -> Option<&Documentation> {
        self.method.documentation()
    }
}

/// The field values of one group: each value's inner group, in first-seen order.
#[derive(Debug, Default)]
struct GroupKeys {
    index: HashMap<String, usize>,
    order: Vec<(String, usize)>,
}

impl GroupKeys {
    fn inner(&mut self, key: &str, next: &mut usize) -> usize {
        if let Some(&i) = self.index.get(key) {
            return i;
        }
        let i = *next;
        *next += 1;
        self.index.insert(key.to_string(), i);
        self.order.push((key.to_string(), i));
        i
    }

    fn bytes(&self) -> usize {
        self.order
            .iter()
            .map(|(k, _)| 2 * k.capacity() + 48)
            .sum::<usize>()
    }
}

#[derive(Debug)]
pub(crate) struct FieldFitKernel {
    method: Method,
    settings: Settings,
    /// One fit state per (group, field value).
    inner: FitKernel,
    keys: Vec<GroupKeys>,
    /// Integer fields without `GROUP BY`: each value's inner group indexed directly, so a
    /// row's value is formatted as text only the first time it is met.
    dense: DenseIndex,
}

impl FieldFitKernel {
    fn func(&self) -> &'static str {
        self.method.function_name()
    }

    /// Inner groups for `keys` of outer group `g`, created as needed.
    fn inner_groups<'k>(
        &mut self,
        g: usize,
        keys: impl Iterator<Item = Option<&'k str>>,
    ) -> Vec<usize> {
        let mut next = self.inner.num_groups();
        let out = keys
            .map(|k| match k {
                Some(k) => self.keys[g].inner(k, &mut next),
                None => 0,
            })
            .collect();
        self.inner.resize(next.max(1));
        out
    }

    /// The inner groups of the groups in `range`, in order.
    fn inner_order(&self, range: Range<usize>) -> Vec<u32> {
        self.keys[range]
            .iter()
            .flat_map(|k| k.order.iter().map(|(_, i)| *i as u32))
            .collect()
    }

    /// Whether `order` (the inner groups of some groups) is every inner group, in creation
    /// order (one outer group, no `GROUP BY`).
    fn is_every_inner_group(&self, order: &[u32]) -> bool {
        order.len() == self.inner.num_groups()
            && order.iter().enumerate().all(|(i, &o)| o as usize == i)
    }

    /// The partial state of the groups in `range`, whose inner groups are `order`, given the
    /// partial state of every inner group: the field values, and each inner state field as a
    /// list per group.
    fn state_with(
        &self,
        range: Range<usize>,
        order: Vec<u32>,
        inner: Vec<ArrayRef>,
    ) -> Result<Vec<ArrayRef>> {
        let groups = &self.keys[range.clone()];
        let offsets = OffsetBuffer::from_lengths(groups.iter().map(|k| k.order.len()));
        let names: StringArray = groups
            .iter()
            .flat_map(|k| k.order.iter().map(|(s, _)| Some(s.as_str())))
            .collect();
        let wrap = |values: ArrayRef| list_array(offsets.clone(), values);
        let mut out = vec![wrap(Arc::new(names))];
        // The inner groups in the order of the states' rows: as they are when these groups
        // own every inner group, so the inner states (millions of points) are not copied
        // again.
        if self.is_every_inner_group(&order) {
            out.extend(inner.into_iter().map(wrap));
            return Ok(out);
        }
        let indices = UInt32Array::from(order);
        for column in inner {
            out.push(wrap(take(&column, &indices, None)?));
        }
        Ok(out)
    }

    fn finish(&self, g: usize) -> Option<Model> {
        let keys = &self.keys[g];
        // Sorted by value, so the model does not depend on the order rows arrived in.
        let mut states: Vec<(&str, &FitState)> = keys
            .order
            .iter()
            .map(|(k, i)| (k.as_str(), &self.inner.groups[*i]))
            .filter(|(_, st)| st.rows > 0)
            .collect();
        states.sort_by(|a, b| a.0.cmp(b.0));
        if states.is_empty() {
            return None;
        }
        self.method.calibrator().fit_fields(&states, &self.settings)
    }
}

impl Kernel for FieldFitKernel {
    fn empty(&self) -> Result<Self> {
        Ok(Self {
            method: self.method,
            settings: self.settings,
            inner: self.inner.empty()?,
            keys: vec![],
            dense: DenseIndex::default(),
        })
    }

    crate::kernel::groups_in_vec!(keys, GroupKeys::default);

    fn update(&mut self, values: &[ArrayRef], groups: &[usize], filter: Filter) -> Result<()> {
        if self.keys.len() == 1
            && is_small_int(values[2].data_type())
            && values[2].null_count() == 0
        {
            let field = cast(&values[2], &DataType::Int64)?;
            let field = field.as_primitive::<Int64Type>().values();
            if self.dense.cover_all(field) {
                let mut next = self.inner.num_groups();
                let (keys, dense) = (&mut self.keys[0], &mut self.dense);
                let inner: Vec<usize> = field
                    .iter()
                    .map(|&v| {
                        let slot = dense.slot(v);
                        if *slot == NO_ENTRY {
                            // The text `cast` gives an integer, as the model keys it.
                            *slot = keys.inner(&v.to_string(), &mut next) as u32;
                        }
                        *slot as usize
                    })
                    .collect();
                self.inner.resize(next.max(1));
                return self.inner.update(&values[..2], &inner, filter);
            }
        }
        let field = cast(&values[2], &DataType::Utf8)?;
        let field = field.as_string::<i32>();
        let mut next = self.inner.num_groups();
        let keys = &mut self.keys;
        let inner: Vec<usize> = groups
            .iter()
            .enumerate()
            .map(|(i, &g)| {
                if field.is_valid(i) {
                    keys[g].inner(field.value(i), &mut next)
                } else {
                    0
                }
            })
            .collect();
        self.inner.resize(next.max(1));
        // Rows with a NULL field are skipped, as rows with any NULL data argument.
        let valid = is_not_null(&values[2])?;
        let filter = match filter {
            Some(f) => and(f, &valid)?,
            None => valid,
        };
        self.inner.update(&values[..2], &inner, Some(&filter))
    }

    fn merge(&mut self, states: &[ArrayRef], groups: &[usize]) -> Result<()> {
        let keys = states[0].as_list::<i32>();
        let key_values = keys.values().as_string::<i32>();
        let offsets = keys.value_offsets();
        // The entries of these rows only: a sliced state's lists share their values with
        // rows outside the slice.
        let (first, last) = (offsets[0] as usize, offsets[keys.len()] as usize);
        let mut inner = vec![0; last - first];
        for (r, &g) in groups.iter().enumerate() {
            let span = offsets[r] as usize..offsets[r + 1] as usize;
            let ids = self.inner_groups(g, span.clone().map(|j| Some(key_values.value(j))));
            for (j, id) in span.zip(ids) {
                inner[j - first] = id;
            }
        }
        let mut children = Vec::with_capacity(states.len() - 1);
        for s in &states[1..] {
            let l = s.as_list::<i32>();
            if l.value_offsets() != offsets {
                return internal_err!("{}: malformed partial state", self.func());
            }
            children.push(l.values().slice(first, last - first));
        }
        self.inner.merge(&children, &inner)
    }

    fn state(&self, range: Range<usize>) -> Result<Vec<ArrayRef>> {
        let inner = self.inner.state(0..self.inner.num_groups())?;
        self.state_with(range.clone(), self.inner_order(range), inner)
    }

    fn take_state(&mut self, range: Range<usize>) -> Result<Vec<ArrayRef>> {
        // When these groups own every inner group, the inner states are moved out; else
        // they are settled and copied.
        let order = self.inner_order(range.clone());
        let inner = if self.is_every_inner_group(&order) {
            self.inner.take_state(0..self.inner.num_groups())?
        } else {
            self.inner.settle_for_reading(0..self.inner.num_groups());
            self.inner.state(0..self.inner.num_groups())?
        };
        self.state_with(range, order, inner)
    }

    fn evaluate(&mut self, range: Range<usize>) -> Result<ArrayRef> {
        for keys in &self.keys[range.clone()] {
            for &(_, i) in &keys.order {
                self.inner.settle_for_reading(i..i + 1);
            }
        }
        let models: Vec<Option<Model>> = range.map(|g| self.finish(g)).collect();
        crate::model::models_to_array(&models)
    }

    fn drain(&mut self, n: usize) {
        // The index is the first group's, which is now another group's.
        self.dense = DenseIndex::default();
        // The drained groups' inner states are emptied (their memory returned); their slots
        // stay, so the other groups' inner indices remain valid.
        for keys in self.keys.drain(..n) {
            for (_, i) in keys.order {
                self.inner.clear_group(i);
            }
        }
    }

    fn size(&self) -> usize {
        self.inner.size()
            + self.dense.bytes()
            + self.keys.iter().map(GroupKeys::bytes).sum::<usize>()
            + self.keys.capacity() * size_of::<GroupKeys>()
    }
}
