//! The class-wise (one-vs-rest) form of a binary metric on a multiclass model: the mean over
//! classes k of the binary metric of `(probs[k], label = k)`. `PerClass` makes it from the
//! binary metric's kernel; `ece_classwise` (Kumar et al. 2019's marginal calibration error,
//! p = 1) is `ece`'s, and `auc` on a list (`auc.rs`) is `auc`'s.
//!
//! One binary kernel holds every class of every group: group g's class k is its group
//! g · K + k, where K, the number of classes, is the length of the first list the kernel
//! sees. So each class is binned (or ranked) on its own, and a group's partial state is its K
//! classes' states, each state field a list of K entries.

use std::ops::Range;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Float64Array, ListArray, UInt32Array};
use arrow::buffer::OffsetBuffer;
use arrow::datatypes::{DataType, Field, FieldRef};
use datafusion_common::{exec_err, Result};
use datafusion_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion_expr::{AggregateUDFImpl, Documentation, Signature};
use datafusion_macros::user_doc;

use super::binned::{state_fields, BinnedKernel, BinnedKind};
use super::top_label::OPTIONAL;
use crate::common::{args, CallShape};
use crate::kernel::{kernel_aggregate, kernel_udaf_common, Filter, Kernel};
use crate::multiclass;

const SHAPE: CallShape = CallShape {
    name: "ece_classwise",
    required: &[args::PROBS, args::LABEL],
    optional: OPTIONAL,
};

#[user_doc(
    doc_section(label = "Multiclass Metrics"),
    description = "Class-wise (marginal) expected calibration error of a multiclass model: the mean over the \
classes k of `ece(probs[k], label = k)`, each class binned on its own in the strategy given (Kumar et al. \
2019's marginal calibration error with p = 1; with `strategy => 'kumar'` it is uncertainty-calibration 0.1 \
`get_ece(probs, label, num_bins, mode='marginal')`). Every row's list must have the same length, the number \
of classes. Rows with a NULL `probs` (or a NULL in it), `label` or `w` are skipped; NULL when no row is \
usable.",
    syntax_example = "ece_classwise(probs, label [, n_bins [, strategy [, w]]])",
    sql_example = r#"```sql
> SELECT ece_classwise(probs, label, 2) AS ece FROM (VALUES ([0.75, 0.25, 0.0], 0), ([0.25, 0.5, 0.25], 2)) AS t(probs, label);
+--------------------+
| ece                |
+--------------------+
| 0.3333333333333333 |
+--------------------+
```"#
)]
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct EceClasswise {
    signature: Signature,
}

crate::kernel::signature_from_shape!(EceClasswise, SHAPE);

impl EceClasswise {
    fn kernel(&self, args: &AccumulatorArgs) -> Result<PerClass<BinnedKernel>> {
        Ok(PerClass::new(
            SHAPE.name,
            BinnedKernel::new(SHAPE.name, BinnedKind::Ece, args)?,
        ))
    }
}

// The state's fields are lists of the binned kernel's, which `negated` cannot subtract: the
// stored states do not slide (the rows do, through `retract`).
kernel_aggregate!(EceClasswise, false);

impl AggregateUDFImpl for EceClasswise {
    kernel_udaf_common!(returns DataType::Float64);

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(per_class_fields(state_fields(args.name)))
    }

    fn documentation(&self) -> Option<&Documentation> {
        crate::common::documented(self.doc(), &self.shape())
    }
}

/// The state fields of a [`PerClass`] kernel: each of its binary kernel's, as a list.
pub(crate) fn per_class_fields(binary: Vec<FieldRef>) -> Vec<FieldRef> {
    binary
        .into_iter()
        .map(|f| {
            Arc::new(Field::new(
                f.name(),
                DataType::List(Arc::new(Field::new_list_field(f.data_type().clone(), true))),
                true,
            ))
        })
        .collect()
}

/// How a [`PerClass`] kernel's value is made from its classes' values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Combine {
    /// The mean of the classes' numbers, NULL when one is NULL (the class-wise metrics).
    Mean,
    /// The list of the classes' values, NULL for a group without a row (`fit_ovr`'s models).
    List,
}

/// A binary kernel over each (group, class); the value combines the classes' values
/// ([`Combine`]).
#[derive(Debug)]
pub(crate) struct PerClass<K> {
    func: &'static str,
    inner: K,
    /// What the rows' lists hold.
    values: multiclass::Values,
    combine: Combine,
    /// K, once a row or a state has said it.
    classes: Option<usize>,
    groups: usize,
}

impl<K: Kernel> PerClass<K> {
    /// The mean over the classes of a binary metric of `(probs[k], label = k)`.
    pub(crate) fn new(func: &'static str, inner: K) -> Self {
        Self {
            func,
            inner,
            values: multiclass::Values::Probabilities,
            combine: Combine::Mean,
            classes: None,
            groups: 0,
        }
    }

    /// The list of the classes' values of a binary kernel over `(values[k], label = k)`, the
    /// lists holding `values`.
    pub(crate) fn listed(func: &'static str, inner: K, values: multiclass::Values) -> Self {
        Self {
            values,
            combine: Combine::List,
            ..Self::new(func, inner)
        }
    }

    /// Takes K = `k` (or checks it against the K already taken) and makes room for every
    /// group's classes.
    fn classes_are(&mut self, k: usize, what: &str) -> Result<usize> {
        match self.classes {
            Some(known) if known != k => exec_err!(
                "{}: argument {} must hold the same number of classes on every row, got {what} of {k} after \
{known}",
                self.func,
                self.values.arg()
            ),
            Some(known) => Ok(known),
            None => {
                self.classes = Some(k);
                self.inner.resize(self.groups * k);
                Ok(k)
            }
        }
    }

    /// `values` with each usable row as K rows, (probs[k], label = k) as p and y, and the
    /// group of each (g · K + k); the other columns (the weight) repeated.
    fn as_binary(
        &mut self,
        values: &[ArrayRef],
        groups: &[usize],
        filter: Filter,
    ) -> Result<Option<(Vec<ArrayRef>, Vec<usize>)>> {
        let (mut p, mut y, mut rows, mut lists) = (vec![], vec![], vec![], vec![]);
        multiclass::for_each_row_of(
            self.func,
            self.values,
            &values[0],
            &values[1],
            filter,
            |i, row| {
                if let Some((probs, label)) = row {
                    lists.push(probs.len());
                    rows.push(i);
                    for (k, &v) in probs.iter().enumerate() {
                        p.push(v);
                        y.push(if k == label { 1.0 } else { 0.0 });
                    }
                }
                Ok(())
            },
        )?;
        let Some(&first) = lists.first() else {
            return Ok(None);
        };
        let k = self.classes_are(first, "a list")?;
        if let Some(&other) = lists.iter().find(|&&l| l != k) {
            self.classes_are(other, "a list")?;
        }
        let repeat = UInt32Array::from_iter_values(
            rows.iter().flat_map(|&i| std::iter::repeat_n(i as u32, k)),
        );
        let mut out: Vec<ArrayRef> = vec![
            Arc::new(Float64Array::from(p)),
            Arc::new(Float64Array::from(y)),
        ];
        for v in &values[2..] {
            out.push(arrow::compute::take(v, &repeat, None)?);
        }
        let virtual_groups = rows
            .iter()
            .flat_map(|&i| (0..k).map(move |c| groups[i] * k + c))
            .collect();
        Ok(Some((out, virtual_groups)))
    }

    /// [`Combine::List`]: each group's classes' values as a list, NULL for a group whose
    /// classes all have none (no row).
    fn evaluate_list(&mut self, range: Range<usize>) -> Result<ArrayRef> {
        let n = range.len();
        let k = self.classes.unwrap_or(0);
        let per_class = if k == 0 {
            self.inner.empty()?.evaluate(0..0)?
        } else {
            self.inner.evaluate(range.start * k..range.end * k)?
        };
        let valid: Vec<bool> = (0..n)
            .map(|g| (g * k..(g + 1) * k).any(|c| per_class.is_valid(c)))
            .collect();
        let field = Arc::new(Field::new_list_field(per_class.data_type().clone(), true));
        let lengths = valid.iter().map(|&v| if v { k } else { 0 });
        // A NULL group's classes are left out of the values.
        let keep: Vec<u32> = (0..n)
            .filter(|&g| valid[g])
            .flat_map(|g| (g * k) as u32..((g + 1) * k) as u32)
            .collect();
        let values = arrow::compute::take(&per_class, &UInt32Array::from(keep), None)?;
        Ok(Arc::new(ListArray::try_new(
            field,
            OffsetBuffer::from_lengths(lengths),
            values,
            Some(arrow::buffer::NullBuffer::from(valid)),
        )?))
    }

    /// The inner kernel's arrays of a range of groups' classes, each as a list per group.
    fn per_group(&self, arrays: Vec<ArrayRef>, n: usize) -> Result<Vec<ArrayRef>> {
        let k = self.classes.unwrap_or(0);
        arrays
            .into_iter()
            .map(|a| {
                let field = Arc::new(Field::new_list_field(a.data_type().clone(), true));
                let offsets = OffsetBuffer::from_lengths(std::iter::repeat_n(k, n));
                Ok(Arc::new(ListArray::try_new(field, offsets, a, None)?) as ArrayRef)
            })
            .collect()
    }
}

impl<K: Kernel> Kernel for PerClass<K> {
    fn empty(&self) -> Result<Self> {
        Ok(Self {
            func: self.func,
            inner: self.inner.empty()?,
            values: self.values,
            combine: self.combine,
            classes: None,
            groups: 0,
        })
    }

    fn resize(&mut self, n: usize) {
        if n > self.groups {
            self.groups = n;
            if let Some(k) = self.classes {
                self.inner.resize(n * k);
            }
        }
    }

    fn num_groups(&self) -> usize {
        self.groups
    }

    fn update(&mut self, values: &[ArrayRef], groups: &[usize], filter: Filter) -> Result<()> {
        match self.as_binary(values, groups, filter)? {
            Some((binary, groups)) => self.inner.update(&binary, &groups, None),
            None => Ok(()),
        }
    }

    fn retract(&mut self, values: &[ArrayRef], groups: &[usize]) -> Result<()> {
        match self.as_binary(values, groups, None)? {
            Some((binary, groups)) => self.inner.retract(&binary, &groups),
            None => Ok(()),
        }
    }

    fn retractable(&self) -> bool {
        self.inner.retractable()
    }

    fn check_stored(&self, states: &[ArrayRef]) -> Result<()> {
        // Each field lists the classes' binary states: their values are the inner state.
        let inner: Vec<ArrayRef> = states
            .iter()
            .map(|s| Arc::clone(s.as_list::<i32>().values()))
            .collect();
        self.inner.check_stored(&inner)
    }

    fn merge(&mut self, states: &[ArrayRef], groups: &[usize]) -> Result<()> {
        let lists: Vec<&ListArray> = states.iter().map(|s| s.as_list::<i32>()).collect();
        let Some(first) = lists.first() else {
            return Ok(());
        };
        let offsets = first.value_offsets();
        let mut rows = vec![];
        for (r, &g) in groups.iter().enumerate() {
            let (start, end) = (offsets[r] as usize, offsets[r + 1] as usize);
            if end == start {
                continue;
            }
            let k = self.classes_are(end - start, "a partial state")?;
            rows.extend((start..end).map(|i| (i, g * k + (i - start))));
        }
        if rows.is_empty() {
            return Ok(());
        }
        let take = UInt32Array::from_iter_values(rows.iter().map(|&(i, _)| i as u32));
        let inner = lists
            .iter()
            .map(|l| Ok(arrow::compute::take(l.values(), &take, None)?))
            .collect::<Result<Vec<_>>>()?;
        let groups: Vec<usize> = rows.iter().map(|&(_, g)| g).collect();
        self.inner.merge(&inner, &groups)
    }

    fn state(&self, range: Range<usize>) -> Result<Vec<ArrayRef>> {
        let n = range.len();
        let inner = match self.classes {
            Some(k) => self.inner.state(range.start * k..range.end * k)?,
            None => self.inner.empty()?.state(0..0)?,
        };
        self.per_group(inner, n)
    }

    fn take_state(&mut self, range: Range<usize>) -> Result<Vec<ArrayRef>> {
        let Some(k) = self.classes else {
            return self.state(range);
        };
        let n = range.len();
        let inner = self.inner.take_state(range.start * k..range.end * k)?;
        self.per_group(inner, n)
    }

    fn evaluate(&mut self, range: Range<usize>) -> Result<ArrayRef> {
        if self.combine == Combine::List {
            return self.evaluate_list(range);
        }
        let Some(k) = self.classes else {
            return Ok(Arc::new(Float64Array::new_null(range.len())));
        };
        let per_class = self.inner.evaluate(range.start * k..range.end * k)?;
        let per_class = per_class.as_primitive::<arrow::datatypes::Float64Type>();
        Ok(Arc::new(
            (0..range.len())
                .map(|g| {
                    let classes = g * k..(g + 1) * k;
                    // A group without a usable row has no class value.
                    classes
                        .clone()
                        .all(|c| per_class.is_valid(c))
                        .then(|| classes.map(|c| per_class.value(c)).sum::<f64>() / k as f64)
                })
                .collect::<Float64Array>(),
        ))
    }

    fn drain(&mut self, n: usize) {
        if let Some(k) = self.classes {
            self.inner.drain(n * k);
        }
        self.groups -= n.min(self.groups);
    }

    fn size(&self) -> usize {
        self.inner.size()
    }
}
