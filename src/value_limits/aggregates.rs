//! `string_agg` and `array_agg` under `--memory-limit`: their state grows with every value
//! they aggregate, and DataFusion accounts for it only after each batch is added, then copies
//! it (the partitions' states, the final merge, the result): under a 512 MiB limit a
//! `string_agg` of 400 MB was answered with the process at 1.4 GiB.
//!
//! Under a limit they are registered wrapped ([`bound_aggregates`]): every accumulator counts
//! the bytes of the values it holds, as batches are added and partial states merged, into
//! one [`Budget`] that all the session's bounded accumulators share (every partition's, the
//! final merge's, every group's, both functions'), and refuses the batch that would take the
//! budget past the ceiling of a function's result (a quarter of the limit,
//! [`super::ceiling`]) before the built-in adds it. What an accumulator holds leaves the
//! budget when it hands its state on (a partition's state to the final merge, emitted groups)
//! or is dropped. An accumulator with an `ORDER BY` keeps its values and their sort keys as
//! one scalar value each and sorts them at the end, about twice what the same values take in
//! a plain one: its bytes count twice. A `DISTINCT` accumulator holds each value once, which
//! cannot be known before it is added: it is checked by the built-in's own count of its state
//! after each batch.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, BooleanArray};
use datafusion::arrow::datatypes::{DataType, FieldRef};
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::expr::{
    AggregateFunction, AggregateFunctionParams, WindowFunctionParams,
};
use datafusion::logical_expr::function::{
    AccumulatorArgs, AggregateFunctionSimplification, StateFieldsArgs,
};
use datafusion::logical_expr::udf_eq::UdfEq;
use datafusion::logical_expr::utils::AggregateOrderSensitivity;
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, Documentation, EmitTo, Expr, GroupsAccumulator,
    Operator, ReversedUDAF, SetMonotonicity, Signature, StatisticsArgs,
};
use datafusion::prelude::SessionContext;

use super::{refusal, size};

/// The aggregates whose state holds every value they aggregate.
const BOUNDED: [&str; 2] = ["string_agg", "array_agg"];

/// Replaces [`BOUNDED`] by wrappers whose accumulators together refuse to hold more than the
/// ceiling of `memory_limit`. Aggregates the session does not have are skipped.
pub(super) fn bound_aggregates(ctx: &SessionContext, memory_limit: usize) {
    let budget = Arc::new(Budget::default());
    for name in BOUNDED {
        let Some(udaf) = ctx.state().aggregate_functions().get(name).cloned() else {
            continue;
        };
        ctx.register_udaf(AggregateUDF::new_from_impl(BoundedAggregate {
            inner: Arc::clone(udaf.inner()).into(),
            memory_limit,
            budget: Arc::clone(&budget),
        }));
    }
}

/// The bytes all the bounded accumulators of a session hold together.
#[derive(Debug, Default)]
struct Budget {
    held: AtomicUsize,
}

impl PartialEq for Budget {
    /// Every budget is alike: the wrappers of two sessions plan alike.
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for Budget {}

impl std::hash::Hash for Budget {
    fn hash<H: std::hash::Hasher>(&self, _: &mut H) {}
}

/// A built-in aggregate whose accumulators count what they hold; everything else is the
/// built-in's.
#[derive(Debug, PartialEq, Eq, Hash)]
struct BoundedAggregate {
    inner: UdfEq<Arc<dyn AggregateUDFImpl>>,
    memory_limit: usize,
    budget: Arc<Budget>,
}

impl BoundedAggregate {
    fn wrap(&self, inner: Arc<dyn AggregateUDFImpl>) -> Arc<dyn AggregateUDFImpl> {
        Arc::new(BoundedAggregate {
            inner: inner.into(),
            memory_limit: self.memory_limit,
            budget: Arc::clone(&self.budget),
        })
    }

    /// The bound of an accumulator made with `args`.
    fn bound(&self, args: &AccumulatorArgs) -> Bound {
        Bound {
            name: self.inner.name().to_string(),
            memory_limit: self.memory_limit,
            ceiling: super::ceiling(self.memory_limit),
            budget: Arc::clone(&self.budget),
            weight: if args.order_bys.is_empty() { 1 } else { 2 },
        }
    }

    fn counted(
        &self,
        inner: Box<dyn Accumulator>,
        bound: Bound,
        distinct: bool,
    ) -> Box<dyn Accumulator> {
        Box::new(CountedAccumulator {
            inner,
            bound,
            distinct,
            held: 0,
        })
    }
}

/// The session's budget as one accumulator takes from it, and the error past its ceiling.
#[derive(Debug)]
struct Bound {
    name: String,
    memory_limit: usize,
    ceiling: usize,
    budget: Arc<Budget>,
    /// How many times a byte of the accumulator's values counts (2 with an `ORDER BY`).
    weight: usize,
}

impl Bound {
    /// Takes `more` bytes of values from the budget, weighted, and returns the bytes taken,
    /// unless the budget would pass the ceiling: then nothing is taken.
    fn take(&self, more: usize) -> Result<usize> {
        self.take_exact(more.saturating_mul(self.weight))
    }

    /// Takes `more` bytes from the budget, unweighted (a count of what the accumulator
    /// holds, not of the values it was given), unless that would pass the ceiling.
    fn take_exact(&self, more: usize) -> Result<usize> {
        let mut held = self.budget.held.load(Ordering::Relaxed);
        loop {
            let total = held.saturating_add(more);
            if total > self.ceiling {
                return Err(refusal(
                    &self.name,
                    &format!("its state would take {}", size(total as f64)),
                    self.memory_limit,
                    "",
                ));
            }
            match self.budget.held.compare_exchange_weak(
                held,
                total,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Ok(more),
                Err(now) => held = now,
            }
        }
    }

    /// Gives `bytes` taken by [`Bound::take`] back to the budget.
    fn give_back(&self, bytes: usize) {
        let _ = self
            .budget
            .held
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
                Some(held.saturating_sub(bytes))
            });
    }
}

/// The bytes of the values of `array` (what an aggregate that keeps them holds), without
/// the buffers a slice of it only shares: a string's bytes, a fixed width per row, a nested
/// value's own slice.
fn value_bytes(array: &ArrayRef) -> Result<usize> {
    Ok(match array.data_type() {
        DataType::Utf8View => array
            .as_string_view()
            .lengths()
            .map(|l| l as usize + 16)
            .sum(),
        DataType::BinaryView => array
            .as_binary_view()
            .lengths()
            .map(|l| l as usize + 16)
            .sum(),
        _ => array.to_data().get_slice_memory_size()?,
    })
}

/// The bytes of each row of `array` (its share of [`value_bytes`] for nested values).
fn row_bytes(array: &ArrayRef) -> Result<Vec<usize>> {
    fn offsets<O: Copy + Into<i64>>(offsets: &[O]) -> Vec<usize> {
        offsets
            .windows(2)
            .map(|w| (w[1].into() - w[0].into()) as usize)
            .collect()
    }
    Ok(match array.data_type() {
        DataType::Utf8 => offsets(array.as_string::<i32>().value_offsets()),
        DataType::LargeUtf8 => offsets(array.as_string::<i64>().value_offsets()),
        DataType::Binary => offsets(array.as_binary::<i32>().value_offsets()),
        DataType::LargeBinary => offsets(array.as_binary::<i64>().value_offsets()),
        DataType::Utf8View => array
            .as_string_view()
            .lengths()
            .map(|l| l as usize + 16)
            .collect(),
        DataType::BinaryView => array
            .as_binary_view()
            .lengths()
            .map(|l| l as usize + 16)
            .collect(),
        other => match other.primitive_width() {
            Some(width) => vec![width; array.len()],
            None => {
                let share = value_bytes(array)?.div_ceil(array.len().max(1));
                vec![share; array.len()]
            }
        },
    })
}

/// An accumulator of a [`BoundedAggregate`] (one group, a window frame, or the final merge).
#[derive(Debug)]
struct CountedAccumulator {
    inner: Box<dyn Accumulator>,
    bound: Bound,
    /// A `DISTINCT` accumulator: checked by its state's size after each batch.
    distinct: bool,
    /// The bytes this accumulator has taken from the budget.
    held: usize,
}

impl CountedAccumulator {
    fn add(
        &mut self,
        values: &[ArrayRef],
        add: impl FnOnce(&mut dyn Accumulator, &[ArrayRef]) -> Result<()>,
    ) -> Result<()> {
        if self.distinct {
            add(self.inner.as_mut(), values)?;
            let size = self.inner.size();
            if size > self.held {
                self.held += self.bound.take_exact(size - self.held)?;
            }
            return Ok(());
        }
        let mut more = 0usize;
        for array in values {
            more = more.saturating_add(value_bytes(array)?);
        }
        self.held += self.bound.take(more)?;
        add(self.inner.as_mut(), values)
    }

    /// Gives back all this accumulator holds (its state has been handed on, or it is gone).
    fn give_back_all(&mut self) {
        self.bound.give_back(std::mem::take(&mut self.held));
    }
}

impl Drop for CountedAccumulator {
    fn drop(&mut self) {
        self.give_back_all();
    }
}

// Delegates every method to the built-in's accumulator; only the additions are counted.
#[warn(clippy::missing_trait_methods)]
impl Accumulator for CountedAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.add(values, |inner, values| inner.update_batch(values))
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        self.inner.evaluate()
    }

    fn size(&self) -> usize {
        self.inner.size()
    }

    /// A partition's state, handed on to the final merge (which counts it again).
    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        let state = self.inner.state()?;
        self.give_back_all();
        Ok(state)
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        self.add(states, |inner, states| inner.merge_batch(states))
    }

    fn retract_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.inner.retract_batch(values)?;
        if !self.distinct {
            let mut less = 0usize;
            for array in values {
                less = less.saturating_add(value_bytes(array)?);
            }
            let less = less.saturating_mul(self.bound.weight).min(self.held);
            self.held -= less;
            self.bound.give_back(less);
        }
        Ok(())
    }

    fn supports_retract_batch(&self) -> bool {
        self.inner.supports_retract_batch()
    }
}

/// The grouped accumulator of a [`BoundedAggregate`]: the bytes held by each group, so that
/// the groups emitted are no longer counted.
struct CountedGroups {
    inner: Box<dyn GroupsAccumulator>,
    bound: Bound,
    /// The bytes each group has taken from the budget, and their sum.
    groups: Vec<usize>,
    held: usize,
}

impl Drop for CountedGroups {
    fn drop(&mut self) {
        self.bound.give_back(std::mem::take(&mut self.held));
    }
}

impl CountedGroups {
    /// Counts the rows of `values` (those `filter` keeps) into their groups, unless the
    /// total would pass the ceiling.
    fn count(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> Result<()> {
        let mut rows = vec![0usize; group_indices.len()];
        for array in values {
            for (row, bytes) in rows.iter_mut().zip(row_bytes(array)?) {
                *row = row.saturating_add(bytes);
            }
        }
        if let Some(filter) = filter {
            for (i, row) in rows.iter_mut().enumerate() {
                if !filter.is_valid(i) || !filter.value(i) {
                    *row = 0;
                }
            }
        }
        let more = rows.iter().fold(0usize, |a, b| a.saturating_add(*b));
        self.held += self.bound.take(more)?;
        if self.groups.len() < total_num_groups {
            self.groups.resize(total_num_groups, 0);
        }
        let weight = self.bound.weight;
        for (&group, bytes) in group_indices.iter().zip(rows) {
            self.groups[group] = self.groups[group].saturating_add(bytes.saturating_mul(weight));
        }
        Ok(())
    }

    /// The groups `emit_to` hands on are no longer held here.
    fn emitted(&mut self, emit_to: EmitTo) {
        let n = match emit_to {
            EmitTo::All => self.groups.len(),
            EmitTo::First(n) => n.min(self.groups.len()),
        };
        let less = self
            .groups
            .drain(..n)
            .fold(0usize, |a, b| a.saturating_add(b))
            .min(self.held);
        self.held -= less;
        self.bound.give_back(less);
    }
}

// Delegates every method to the built-in's grouped accumulator; only the additions are
// counted.
#[warn(clippy::missing_trait_methods)]
impl GroupsAccumulator for CountedGroups {
    fn update_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> Result<()> {
        self.count(values, group_indices, opt_filter, total_num_groups)?;
        self.inner
            .update_batch(values, group_indices, opt_filter, total_num_groups)
    }

    fn evaluate(&mut self, emit_to: EmitTo) -> Result<ArrayRef> {
        let result = self.inner.evaluate(emit_to)?;
        self.emitted(emit_to);
        Ok(result)
    }

    fn state(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        let state = self.inner.state(emit_to)?;
        self.emitted(emit_to);
        Ok(state)
    }

    fn merge_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        total_num_groups: usize,
    ) -> Result<()> {
        self.count(values, group_indices, None, total_num_groups)?;
        self.inner
            .merge_batch(values, group_indices, total_num_groups)
    }

    fn convert_to_state(
        &self,
        values: &[ArrayRef],
        opt_filter: Option<&BooleanArray>,
    ) -> Result<Vec<ArrayRef>> {
        self.inner.convert_to_state(values, opt_filter)
    }

    fn size(&self) -> usize {
        self.inner.size() + self.groups.capacity() * std::mem::size_of::<usize>()
    }
}

// Delegates every method to the built-in, so that the wrapper plans, orders and reverses
// exactly as the built-in does (re-wrapping the aggregates those return); only the
// accumulators are wrapped.
#[warn(clippy::missing_trait_methods)]
impl AggregateUDFImpl for BoundedAggregate {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }

    fn schema_name(&self, params: &AggregateFunctionParams) -> Result<String> {
        self.inner.schema_name(params)
    }

    fn human_display(&self, params: &AggregateFunctionParams) -> Result<String> {
        self.inner.human_display(params)
    }

    fn window_function_schema_name(&self, params: &WindowFunctionParams) -> Result<String> {
        self.inner.window_function_schema_name(params)
    }

    fn display_name(&self, params: &AggregateFunctionParams) -> Result<String> {
        self.inner.display_name(params)
    }

    fn window_function_display_name(&self, params: &WindowFunctionParams) -> Result<String> {
        self.inner.window_function_display_name(params)
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.inner.return_type(arg_types)
    }

    fn return_field(&self, arg_fields: &[FieldRef]) -> Result<FieldRef> {
        self.inner.return_field(arg_fields)
    }

    fn is_nullable(&self) -> bool {
        self.inner.is_nullable()
    }

    fn accumulator(&self, acc_args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let bound = self.bound(&acc_args);
        let distinct = acc_args.is_distinct;
        Ok(self.counted(self.inner.accumulator(acc_args)?, bound, distinct))
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        self.inner.state_fields(args)
    }

    fn groups_accumulator_supported(&self, args: AccumulatorArgs) -> bool {
        self.inner.groups_accumulator_supported(args)
    }

    fn create_groups_accumulator(
        &self,
        args: AccumulatorArgs,
    ) -> Result<Box<dyn GroupsAccumulator>> {
        let bound = self.bound(&args);
        Ok(Box::new(CountedGroups {
            inner: self.inner.create_groups_accumulator(args)?,
            bound,
            groups: Vec::new(),
            held: 0,
        }))
    }

    fn create_sliding_accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let bound = self.bound(&args);
        let distinct = args.is_distinct;
        Ok(self.counted(
            self.inner.create_sliding_accumulator(args)?,
            bound,
            distinct,
        ))
    }

    fn with_beneficial_ordering(
        self: Arc<Self>,
        beneficial_ordering: bool,
    ) -> Result<Option<Arc<dyn AggregateUDFImpl>>> {
        Ok(Arc::clone(&self.inner)
            .with_beneficial_ordering(beneficial_ordering)?
            .map(|inner| self.wrap(inner)))
    }

    fn order_sensitivity(&self) -> AggregateOrderSensitivity {
        self.inner.order_sensitivity()
    }

    fn simplify(&self) -> Option<AggregateFunctionSimplification> {
        self.inner.simplify()
    }

    fn simplify_expr_op_literal(
        &self,
        agg_function: &AggregateFunction,
        arg: &Expr,
        op: Operator,
        lit: &Expr,
        arg_is_left: bool,
    ) -> Result<Option<Expr>> {
        self.inner
            .simplify_expr_op_literal(agg_function, arg, op, lit, arg_is_left)
    }

    fn reverse_expr(&self) -> ReversedUDAF {
        match self.inner.reverse_expr() {
            ReversedUDAF::Reversed(reversed) => ReversedUDAF::Reversed(Arc::new(
                AggregateUDF::new_from_shared_impl(self.wrap(Arc::clone(reversed.inner()))),
            )),
            other => other,
        }
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        self.inner.coerce_types(arg_types)
    }

    fn is_descending(&self) -> Option<bool> {
        self.inner.is_descending()
    }

    fn value_from_stats(&self, statistics_args: &StatisticsArgs) -> Option<ScalarValue> {
        self.inner.value_from_stats(statistics_args)
    }

    fn default_value(&self, data_type: &DataType) -> Result<ScalarValue> {
        self.inner.default_value(data_type)
    }

    fn supports_null_handling_clause(&self) -> bool {
        self.inner.supports_null_handling_clause()
    }

    fn supports_within_group_clause(&self) -> bool {
        self.inner.supports_within_group_clause()
    }

    fn documentation(&self) -> Option<&Documentation> {
        self.inner.documentation()
    }

    fn set_monotonicity(&self, data_type: &DataType) -> SetMonotonicity {
        self.inner.set_monotonicity(data_type)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bounded(name: &str) -> Arc<BoundedAggregate> {
        let ctx = SessionContext::new();
        let inner = Arc::clone(ctx.state().aggregate_functions()[name].inner());
        Arc::new(BoundedAggregate {
            inner: inner.into(),
            memory_limit: 4096,
            budget: Arc::default(),
        })
    }

    fn bound(budget: &Arc<Budget>, weight: usize) -> Bound {
        Bound {
            name: "string_agg".into(),
            memory_limit: 4096,
            ceiling: 1024,
            budget: Arc::clone(budget),
            weight,
        }
    }

    #[test]
    fn what_the_built_in_returns_is_wrapped_again() {
        let array_agg = bounded("array_agg");
        let ordered = Arc::clone(&array_agg)
            .with_beneficial_ordering(true)
            .unwrap()
            .unwrap();
        assert!((ordered.as_ref() as &dyn std::any::Any).is::<BoundedAggregate>());
        for udaf in [bounded("string_agg"), array_agg] {
            let ReversedUDAF::Reversed(reversed) = udaf.reverse_expr() else {
                panic!("{} reverses", udaf.name());
            };
            assert!((reversed.inner().as_ref() as &dyn std::any::Any).is::<BoundedAggregate>());
            assert_eq!(reversed.name(), udaf.name());
        }
    }

    #[test]
    fn the_accumulators_share_a_quarter_of_the_limit() {
        let budget = Arc::default();
        let (plain, ordered) = (bound(&budget, 1), bound(&budget, 2));
        assert_eq!(plain.take(600).unwrap(), 600);
        // An ordered accumulator's bytes count twice, and a refused take takes nothing.
        let error = crate::errors::datafusion_message(&ordered.take(300).unwrap_err());
        assert_eq!(
            error,
            "string_agg: its state would take 1.2 KB, more than the 1.0 KB a function's result \
             may take under --memory-limit 4.0 KB (a quarter of it; docs/SEMANTICS.md, \
             \"Memory limit\")"
        );
        assert_eq!(ordered.take(200).unwrap(), 400);
        assert!(plain.take(25).is_err());
        plain.give_back(600);
        assert_eq!(plain.take(624).unwrap(), 624);
        assert_eq!(budget.held.load(Ordering::Relaxed), 1024);
    }

    #[test]
    fn a_batch_counts_its_values_not_the_buffers_a_slice_shares() {
        use datafusion::arrow::array::{StringArray, StringViewArray};
        let strings: ArrayRef = Arc::new(StringArray::from(vec![Some("abc"), None, Some("de")]));
        assert_eq!(row_bytes(&strings).unwrap(), vec![3, 0, 2]);
        let slice = strings.slice(2, 1);
        assert_eq!(row_bytes(&slice).unwrap(), vec![2]);
        assert!(value_bytes(&slice).unwrap() < value_bytes(&strings).unwrap());
        let views: ArrayRef = Arc::new(StringViewArray::from(vec!["x".repeat(100), "y".into()]));
        assert_eq!(row_bytes(&views).unwrap(), vec![116, 17]);
        assert_eq!(value_bytes(&views.slice(1, 1)).unwrap(), 17);
    }
}
