//! One implementation per aggregate, two faces.
//!
//! Every aggregate here is written once as a [`Kernel`]: per-group state in vectors indexed by
//! group, updated from a batch with a group index per row. [`Groups`] turns a kernel into a
//! DataFusion [`GroupsAccumulator`] (fast `GROUP BY`), [`Single`] into a row [`Accumulator`]
//! (no `GROUP BY`, window frames) that feeds every row to group 0. Both share the same update,
//! merge and finish code, so the two paths cannot drift apart.

use std::borrow::Cow;
use std::fmt::Debug;

use std::ops::Range;

use arrow::array::{Array, ArrayRef, BooleanArray};
use arrow::datatypes::DataType;
use datafusion_common::{internal_err, Result, ScalarValue};
use datafusion_expr::{Accumulator, EmitTo, GroupsAccumulator};

use crate::labels;

/// Which rows of a batch an aggregate reads (an aggregate's `FILTER (WHERE …)`): `None` for
/// all, else the true (non-NULL) ones.
pub(crate) type Filter<'a> = Option<&'a BooleanArray>;

/// Groups evaluated between two looks at the cancel flag ([`Groups`]' `evaluate`).
const EVALUATE_CHUNK: usize = 256;

pub(crate) trait Kernel: Send + Sync + Debug + 'static {
    /// A new, empty kernel with the same parameters (bins, eps, …).
    fn empty(&self) -> Result<Self>
    where
        Self: Sized;
    /// Makes room for `n` groups (never shrinks).
    fn resize(&mut self, n: usize);
    fn num_groups(&self) -> usize;
    /// Adds the usable rows of `values` (arguments as the planner coerced them).
    fn update(&mut self, values: &[ArrayRef], groups: &[usize], filter: Filter) -> Result<()>;
    /// Adds partial states (as produced by [`Kernel::state`]).
    fn merge(&mut self, states: &[ArrayRef], groups: &[usize]) -> Result<()>;
    /// Refuses a stored state (one a `_merge` twin is given, which anyone may have written)
    /// holding values this kernel's reading is not defined for; called before
    /// [`Kernel::merge`] takes it. The partial states within a query come from the kernel's
    /// own `update` and are not checked again. Nothing to check by default.
    fn check_stored(&self, _states: &[ArrayRef]) -> Result<()> {
        Ok(())
    }
    /// The partial state of groups in `range`, one array per state field.
    fn state(&self, range: Range<usize>) -> Result<Vec<ArrayRef>>;
    /// The partial state of groups in `range` when nothing will read those groups again
    /// (the accumulators' `state`, after which DataFusion drops or drains them): kernels
    /// that keep rows move them out instead of copying (as DataFusion's `median` does).
    fn take_state(&mut self, range: Range<usize>) -> Result<Vec<ArrayRef>> {
        self.state(range)
    }
    /// The final value of groups in `range`.
    fn evaluate(&mut self, range: Range<usize>) -> Result<ArrayRef>;
    /// Forgets the first `n` groups; the rest move down by `n`.
    fn drain(&mut self, n: usize);
    /// Bytes held, in O(1).
    fn size(&self) -> usize;

    /// Whether `update` (and so `retract`) takes its label column as stored when it is one
    /// of `crate::labels::is_native`'s types (Float64, Int8, Int32, Int64); false: always
    /// Float64.
    fn native_labels(&self) -> bool {
        false
    }

    /// Whether rows (and states) can be taken out again, for sliding window frames: true
    /// when every number of the state is a sum, so taking out is subtracting.
    fn retractable(&self) -> bool {
        false
    }

    /// Takes the rows of `values` out of their groups: the rows' own partial states,
    /// subtracted (see [`negated`]). Only called when [`Kernel::retractable`].
    fn retract(&mut self, values: &[ArrayRef], groups: &[usize]) -> Result<()>
    where
        Self: Sized,
    {
        let n = self.num_groups();
        let mut rows = self.empty()?;
        rows.resize(n);
        rows.update(values, groups, None)?;
        let states = rows.state(0..n)?;
        self.unmerge(&states, &(0..n).collect::<Vec<_>>())
    }

    /// Subtracts partial states (as produced by [`Kernel::state`]).
    fn unmerge(&mut self, states: &[ArrayRef], groups: &[usize]) -> Result<()> {
        let negated = states.iter().map(negated).collect::<Result<Vec<_>>>()?;
        self.merge(&negated, groups)
    }
}

/// A state column with every number negated (Float64 values, and the Float64 values inside
/// lists); other columns (keys, counts of other types) unchanged. Merging it subtracts.
pub(crate) fn negated(a: &ArrayRef) -> Result<ArrayRef> {
    use arrow::array::{Array, AsArray, ListArray};
    use arrow::compute::kernels::numeric::neg;
    Ok(match a.data_type() {
        DataType::Float64 => neg(a)?,
        DataType::List(f) if *f.data_type() == DataType::Float64 => {
            let l = a.as_list::<i32>();
            std::sync::Arc::new(ListArray::try_new(
                std::sync::Arc::clone(f),
                l.offsets().clone(),
                neg(l.values())?,
                l.nulls().cloned(),
            )?)
        }
        _ => std::sync::Arc::clone(a),
    })
}

/// A [`Kernel`] behind a `Box`, so one wrapper (the `_state` and `_merge` aggregates) serves
/// every kernel type: `Kernel`'s own methods are callable on `dyn DynKernel`, and these two
/// stand in for the ones that need `Self: Sized`.
pub(crate) trait DynKernel: Kernel {
    /// [`Kernel::empty`], boxed.
    fn empty_box(&self) -> Result<Box<dyn DynKernel>>;
    /// [`Kernel::retract`].
    fn retract_rows(&mut self, values: &[ArrayRef], groups: &[usize]) -> Result<()>;
}

impl<K: Kernel> DynKernel for K {
    fn empty_box(&self) -> Result<Box<dyn DynKernel>> {
        Ok(Box::new(Kernel::empty(self)?))
    }
    fn retract_rows(&mut self, values: &[ArrayRef], groups: &[usize]) -> Result<()> {
        Kernel::retract(self, values, groups)
    }
}

/// Every aggregate here takes its label `y` as argument 1. The planner leaves Boolean and
/// integer labels as they are (see `crate::labels`): a kernel that reads them natively gets
/// Float64, Int8, Int32 and Int64 labels as they are, every other kernel (and every other
/// label type) gets them as Float64 0.0/1.0, cast here a batch at a time.
pub(crate) fn labels_for<'a, K: Kernel + ?Sized>(
    kernel: &K,
    values: &'a [ArrayRef],
) -> Result<Cow<'a, [ArrayRef]>> {
    match values.get(1) {
        Some(y) if kernel.native_labels() && labels::is_native(y.data_type()) => {
            Ok(Cow::Borrowed(values))
        }
        _ => labels::as_f64_labels(values),
    }
}

/// The `AggregateUDFImpl` methods every kernel-backed aggregate shares: name and signature
/// from its call shape, lenient coercion (the real check is in `return_type`), and both
/// accumulator faces built from `self.kernel(&args)`. The implementing struct provides
/// `shape()`, a `signature` field and `kernel()`. With `returns T`, also `return_type`: the
/// arguments checked against the shape, then always `T`. With `returns T, shape_for`, the
/// shape is the one `self.shape_for(arg_types)` picks (a function with a multiclass form on a
/// list), for the coercion and the check alike.
macro_rules! kernel_udaf_common {
    (returns $ret:expr, shape_for) => {
        $crate::kernel::kernel_udaf_common!(@named);

        fn coerce_types(
            &self,
            arg_types: &[arrow::datatypes::DataType],
        ) -> datafusion_common::Result<Vec<arrow::datatypes::DataType>> {
            self.shape_for(arg_types).coerce_lenient(arg_types)
        }

        fn return_type(
            &self,
            arg_types: &[arrow::datatypes::DataType],
        ) -> datafusion_common::Result<arrow::datatypes::DataType> {
            self.shape_for(arg_types).coerce(arg_types)?;
            Ok($ret)
        }
    };
    (returns $ret:expr) => {
        $crate::kernel::kernel_udaf_common!();

        fn return_type(
            &self,
            arg_types: &[arrow::datatypes::DataType],
        ) -> datafusion_common::Result<arrow::datatypes::DataType> {
            self.shape().coerce(arg_types)?;
            Ok($ret)
        }
    };
    () => {
        $crate::kernel::kernel_udaf_common!(@named);

        fn coerce_types(
            &self,
            arg_types: &[arrow::datatypes::DataType],
        ) -> datafusion_common::Result<Vec<arrow::datatypes::DataType>> {
            self.shape().coerce_lenient(arg_types)
        }
    };
    // Name and signature from the shape, and the accumulators.
    (@named) => {
        fn name(&self) -> &str {
            self.shape().name
        }

        fn signature(&self) -> &datafusion_expr::Signature {
            &self.signature
        }

        $crate::kernel::kernel_accumulators!();
    };
}

/// Both accumulator faces of an aggregate built from `self.kernel(&args)` (DISTINCT refused):
/// the kernel-backed aggregates and the `_state` / `_merge` wrappers share them.
macro_rules! kernel_accumulators {
    () => {
        fn accumulator(
            &self,
            args: datafusion_expr::function::AccumulatorArgs,
        ) -> datafusion_common::Result<Box<dyn datafusion_expr::Accumulator>> {
            $crate::common::no_distinct(self.name(), &args)?;
            Ok(Box::new($crate::kernel::Single::new(self.kernel(&args)?)))
        }

        fn groups_accumulator_supported(
            &self,
            _args: datafusion_expr::function::AccumulatorArgs,
        ) -> bool {
            true
        }

        fn create_groups_accumulator(
            &self,
            args: datafusion_expr::function::AccumulatorArgs,
        ) -> datafusion_common::Result<Box<dyn datafusion_expr::GroupsAccumulator>> {
            $crate::common::no_distinct(self.name(), &args)?;
            Ok(Box::new($crate::kernel::Groups(self.kernel(&args)?)))
        }
    };
}
pub(crate) use kernel_accumulators;
pub(crate) use kernel_udaf_common;

/// A kernel as a [`GroupsAccumulator`].
#[derive(Debug)]
pub(crate) struct Groups<K>(pub K);

impl<K: Kernel> GroupsAccumulator for Groups<K> {
    fn update_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> Result<()> {
        self.0.resize(total_num_groups);
        let values = labels_for(&self.0, values)?;
        self.0.update(&values, group_indices, opt_filter)
    }

    fn merge_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        total_num_groups: usize,
    ) -> Result<()> {
        self.0.resize(total_num_groups);
        self.0.merge(values, group_indices)
    }

    /// The groups' final values, [`EVALUATE_CHUNK`] groups at a time with a look at the
    /// statement's cancel flag between chunks: a fit's optimisation of every group of a
    /// large `GROUP BY` is one poll that could otherwise run for minutes after a cancel.
    fn evaluate(&mut self, emit_to: EmitTo) -> Result<ArrayRef> {
        let n = emit_count(emit_to, self.0.num_groups());
        let out = if n <= EVALUATE_CHUNK {
            self.0.evaluate(0..n)?
        } else {
            let mut parts = Vec::with_capacity(n.div_ceil(EVALUATE_CHUNK));
            for start in (0..n).step_by(EVALUATE_CHUNK) {
                crate::cancel::check()?;
                parts.push(self.0.evaluate(start..(start + EVALUATE_CHUNK).min(n))?);
            }
            let parts: Vec<&dyn Array> = parts.iter().map(|a| a.as_ref()).collect();
            arrow::compute::concat(&parts)?
        };
        self.0.drain(n);
        Ok(out)
    }

    fn state(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        let n = emit_count(emit_to, self.0.num_groups());
        let out = self.0.take_state(0..n)?;
        self.0.drain(n);
        Ok(out)
    }

    fn convert_to_state(
        &self,
        values: &[ArrayRef],
        opt_filter: Option<&BooleanArray>,
    ) -> Result<Vec<ArrayRef>> {
        let len = values.first().map_or(0, |a| a.len());
        let mut k = self.0.empty()?;
        k.resize(len);
        let groups: Vec<usize> = (0..len).collect();
        let values = labels_for(&k, values)?;
        k.update(&values, &groups, opt_filter)?;
        k.state(0..len)
    }

    fn size(&self) -> usize {
        size_of::<Self>() + self.0.size()
    }
}

fn emit_count(emit_to: EmitTo, total: usize) -> usize {
    match emit_to {
        EmitTo::All => total,
        EmitTo::First(n) => n.min(total),
    }
}

/// A kernel as a row [`Accumulator`]: one group, index 0.
#[derive(Debug)]
pub(crate) struct Single<K> {
    kernel: K,
    zeros: Vec<usize>,
}

impl<K: Kernel> Single<K> {
    pub(crate) fn new(mut kernel: K) -> Self {
        kernel.resize(1);
        Self {
            kernel,
            zeros: vec![],
        }
    }

    fn zeros(&mut self, len: usize) -> &[usize] {
        if self.zeros.len() < len {
            self.zeros.resize(len, 0);
        }
        &self.zeros[..len]
    }
}

impl<K: Kernel> Accumulator for Single<K> {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let len = values.first().map_or(0, |a| a.len());
        self.zeros(len);
        let values = labels_for(&self.kernel, values)?;
        self.kernel.update(&values, &self.zeros[..len], None)
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        let len = states.first().map_or(0, |a| a.len());
        self.zeros(len);
        self.kernel.merge(states, &self.zeros[..len])
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        self.kernel
            .take_state(0..1)?
            .iter()
            .map(|a| ScalarValue::try_from_array(a, 0))
            .collect()
    }

    fn retract_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let len = values.first().map_or(0, |a| a.len());
        self.zeros(len);
        let values = labels_for(&self.kernel, values)?;
        self.kernel.retract(&values, &self.zeros[..len])
    }

    fn supports_retract_batch(&self) -> bool {
        self.kernel.retractable()
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        let a = self.kernel.evaluate(0..1)?;
        if a.len() != 1 {
            return internal_err!("a kernel evaluated one group to {} values", a.len());
        }
        ScalarValue::try_from_array(&a, 0)
    }

    fn size(&self) -> usize {
        size_of::<Self>() + self.kernel.size() + self.zeros.capacity() * size_of::<usize>()
    }
}

/// An aggregate's kernel for a call, behind a trait object: what the `_state` / `_merge`
/// wrappers ([`crate::state`]) and the other hosts ([`crate::host`]) build groups from. Every
/// registered aggregate is one (see [`kernel_source`]).
pub(crate) trait KernelSource: Send + Sync {
    fn dyn_kernel(
        &self,
        args: &datafusion_expr::function::AccumulatorArgs,
    ) -> Result<Box<dyn DynKernel>>;
}

/// Implements [`KernelSource`] for a type with `kernel(&self, &AccumulatorArgs)`
/// ([`kernel_aggregate`] does it for the aggregates with twins).
macro_rules! kernel_source {
    ($t:ty) => {
        impl $crate::kernel::KernelSource for $t {
            fn dyn_kernel(
                &self,
                args: &datafusion_expr::function::AccumulatorArgs,
            ) -> datafusion_common::Result<Box<dyn $crate::kernel::DynKernel>> {
                Ok(Box::new(self.kernel(args)?))
            }
        }
    };
}
pub(crate) use kernel_source;

/// An aggregate written as a [`Kernel`], as the `_state` / `_merge` wrappers see it
/// ([`crate::state`]): its call shape and its kernel behind a trait object.
pub(crate) trait KernelAggregate: datafusion_expr::AggregateUDFImpl + KernelSource {
    fn call_shape(&self) -> crate::common::CallShape;
    /// Whether its partial states can be subtracted (every number a sum): `F_merge` over a
    /// sliding window frame.
    fn states_retractable(&self) -> bool;
    /// This aggregate keeping `cap` distinct scores exactly per group, if it is a fit whose
    /// cap is a setting (see [`crate::with_exact_cap`]).
    fn with_exact_cap(&self, _cap: usize) -> Option<std::sync::Arc<dyn KernelAggregate>> {
        None
    }
    /// How many of the last fields of its partial state were added after stored states of
    /// state format 1 were first written: `F_merge` also reads a stored state without them,
    /// and the kernel's `merge` takes such a state (fewer columns) as having none of what
    /// they hold.
    fn state_fields_added(&self) -> usize {
        0
    }
}

/// Implements [`KernelAggregate`] (and [`KernelSource`]) for a type with `shape()` and
/// `kernel()`; with `capped`, for a fit: also its `capped(cap)` (when its exact cap is a
/// setting), and the state fields added to the fits' state ([`crate::fit::STATE_FIELDS_ADDED`]).
macro_rules! kernel_aggregate {
    ($t:ty, $retractable:expr) => {
        $crate::kernel::kernel_aggregate!($t, $retractable, {});
    };
    ($t:ty, $retractable:expr, capped) => {
        $crate::kernel::kernel_aggregate!($t, $retractable, {
            fn with_exact_cap(
                &self,
                cap: usize,
            ) -> Option<std::sync::Arc<dyn $crate::kernel::KernelAggregate>> {
                self.capped(cap).map(|f| {
                    std::sync::Arc::new(f) as std::sync::Arc<dyn $crate::kernel::KernelAggregate>
                })
            }
            fn state_fields_added(&self) -> usize {
                $crate::fit::STATE_FIELDS_ADDED
            }
        });
    };
    ($t:ty, $retractable:expr, { $($extra:tt)* }) => {
        $crate::kernel::kernel_source!($t);
        impl $crate::kernel::KernelAggregate for $t {
            fn call_shape(&self) -> $crate::common::CallShape {
                self.shape()
            }
            fn states_retractable(&self) -> bool {
                $retractable
            }
            $($extra)*
        }
    };
}
pub(crate) use kernel_aggregate;

/// `enum $name { $A($KA), $B($KB) }`, a kernel that is one of two kernels (a function with
/// two forms: `auc` on a score or on a list, a fit on a score or `fit_temperature` on a list
/// of logits), each method handed to the form the call made. Retraction is left out: neither
/// such function slides.
macro_rules! either_kernel {
    ($(#[$doc:meta])* $name:ident { $a:ident($ka:ty), $b:ident($kb:ty) $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug)]
        enum $name {
            $a($ka),
            $b($kb),
        }

        impl $crate::kernel::Kernel for $name {
            fn empty(&self) -> datafusion_common::Result<Self> {
                Ok(match self {
                    $name::$a(k) => $name::$a(k.empty()?),
                    $name::$b(k) => $name::$b(k.empty()?),
                })
            }
            fn resize(&mut self, n: usize) {
                match self {
                    $name::$a(k) => k.resize(n),
                    $name::$b(k) => k.resize(n),
                }
            }
            fn num_groups(&self) -> usize {
                match self {
                    $name::$a(k) => k.num_groups(),
                    $name::$b(k) => k.num_groups(),
                }
            }
            fn update(
                &mut self,
                values: &[arrow::array::ArrayRef],
                groups: &[usize],
                filter: $crate::kernel::Filter,
            ) -> datafusion_common::Result<()> {
                match self {
                    $name::$a(k) => k.update(values, groups, filter),
                    $name::$b(k) => k.update(values, groups, filter),
                }
            }
            fn merge(
                &mut self,
                states: &[arrow::array::ArrayRef],
                groups: &[usize],
            ) -> datafusion_common::Result<()> {
                match self {
                    $name::$a(k) => k.merge(states, groups),
                    $name::$b(k) => k.merge(states, groups),
                }
            }
            fn state(
                &self,
                range: std::ops::Range<usize>,
            ) -> datafusion_common::Result<Vec<arrow::array::ArrayRef>> {
                match self {
                    $name::$a(k) => k.state(range),
                    $name::$b(k) => k.state(range),
                }
            }
            fn take_state(
                &mut self,
                range: std::ops::Range<usize>,
            ) -> datafusion_common::Result<Vec<arrow::array::ArrayRef>> {
                match self {
                    $name::$a(k) => k.take_state(range),
                    $name::$b(k) => k.take_state(range),
                }
            }
            fn evaluate(
                &mut self,
                range: std::ops::Range<usize>,
            ) -> datafusion_common::Result<arrow::array::ArrayRef> {
                match self {
                    $name::$a(k) => k.evaluate(range),
                    $name::$b(k) => k.evaluate(range),
                }
            }
            fn drain(&mut self, n: usize) {
                match self {
                    $name::$a(k) => k.drain(n),
                    $name::$b(k) => k.drain(n),
                }
            }
            fn size(&self) -> usize {
                match self {
                    $name::$a(k) => k.size(),
                    $name::$b(k) => k.size(),
                }
            }
            fn native_labels(&self) -> bool {
                match self {
                    $name::$a(k) => k.native_labels(),
                    $name::$b(k) => k.native_labels(),
                }
            }
        }
    };
}
pub(crate) use either_kernel;

/// `new`, `Default` and `shape()` of a function struct whose only field is its `signature`,
/// made from the [`CallShape`](crate::common::CallShape) constant `$shape`: the same few lines
/// every such function would otherwise repeat. With `kind: K`, the struct serves several
/// functions, told apart by its field `kind: K`; `K: Copy` has `fn shape(self) -> CallShape`,
/// and the macro writes `new(kind)` and `shape()`.
macro_rules! signature_from_shape {
    ($t:ident, kind: $k:ty) => {
        impl $t {
            pub fn new(kind: $k) -> Self {
                Self {
                    kind,
                    signature: kind.shape().signature(),
                }
            }

            fn shape(&self) -> $crate::common::CallShape {
                self.kind.shape()
            }
        }
    };
    ($t:ident, $shape:expr) => {
        impl Default for $t {
            fn default() -> Self {
                Self::new()
            }
        }

        impl $t {
            pub fn new() -> Self {
                Self {
                    signature: $shape.signature(),
                }
            }

            fn shape(&self) -> $crate::common::CallShape {
                $shape
            }
        }
    };
}
pub(crate) use signature_from_shape;

/// Inside `impl Kernel for K` of a kernel that wraps another kernel (or a store with the same
/// methods) in its field `$inner` and changes only what it computes from it: the named
/// methods, each passed on to `$inner` unchanged
/// (`delegate_to_inner!(inner: resize, num_groups, merge, state, drain, size);`).
macro_rules! delegate_to_inner {
    ($inner:ident: $($method:ident),+ $(,)?) => {
        $($crate::kernel::delegate_to_inner!(@ $inner $method);)+
    };
    (@ $inner:ident resize) => {
        fn resize(&mut self, n: usize) {
            self.$inner.resize(n)
        }
    };
    (@ $inner:ident num_groups) => {
        fn num_groups(&self) -> usize {
            self.$inner.num_groups()
        }
    };
    (@ $inner:ident update) => {
        fn update(
            &mut self,
            values: &[arrow::array::ArrayRef],
            groups: &[usize],
            filter: Option<&arrow::array::BooleanArray>,
        ) -> datafusion_common::Result<()> {
            self.$inner.update(values, groups, filter)
        }
    };
    (@ $inner:ident merge) => {
        fn merge(
            &mut self,
            states: &[arrow::array::ArrayRef],
            groups: &[usize],
        ) -> datafusion_common::Result<()> {
            self.$inner.merge(states, groups)
        }
    };
    (@ $inner:ident check_stored) => {
        fn check_stored(
            &self,
            states: &[arrow::array::ArrayRef],
        ) -> datafusion_common::Result<()> {
            self.$inner.check_stored(states)
        }
    };
    (@ $inner:ident state) => {
        fn state(
            &self,
            range: std::ops::Range<usize>,
        ) -> datafusion_common::Result<Vec<arrow::array::ArrayRef>> {
            self.$inner.state(range)
        }
    };
    (@ $inner:ident take_state) => {
        fn take_state(
            &mut self,
            range: std::ops::Range<usize>,
        ) -> datafusion_common::Result<Vec<arrow::array::ArrayRef>> {
            self.$inner.take_state(range)
        }
    };
    (@ $inner:ident drain) => {
        fn drain(&mut self, n: usize) {
            self.$inner.drain(n)
        }
    };
    (@ $inner:ident size) => {
        fn size(&self) -> usize {
            self.$inner.size()
        }
    };
}
pub(crate) use delegate_to_inner;

/// Inside `impl Kernel for K` of a kernel whose per-group state is one element of the vector
/// in its field `$groups`: `resize` (new groups made by `$make`, `Default::default` unless
/// given) and `num_groups` (`groups_in_vec!(groups, GroupState::default);`); also in an
/// inherent `impl`, with a visibility first (`groups_in_vec!(pub(crate) groups);`).
macro_rules! groups_in_vec {
    ($v:vis $groups:ident) => {
        $crate::kernel::groups_in_vec!($v $groups, Default::default);
    };
    ($v:vis $groups:ident, $make:expr) => {
        $v fn resize(&mut self, n: usize) {
            if self.$groups.len() < n {
                self.$groups.resize_with(n, $make);
            }
        }
        $v fn num_groups(&self) -> usize {
            self.$groups.len()
        }
    };
}
pub(crate) use groups_in_vec;
