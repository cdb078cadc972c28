//! Where the groups of calibsql's aggregates live inside DuckDB: each DuckDB thread has a
//! [`Store`] per overload, holding per call (argument types and constants) the function's
//! kernel with every group of that thread in its vectors ([`Groups`], as calibsql's own
//! `GROUP BY` drives it). A DuckDB group's bytes are a [`GroupRef`]: which store (one strong
//! reference), which call and which group in it. A store is freed with the last group that
//! refers to it.
//!
//! A panic while a store is locked leaves it poisoned: its groups then fail with an error
//! instead of being read half-updated, and the thread's next groups get a new store.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ops::Range;
use std::ptr;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use arrow::array::{Array, ArrayRef};
use arrow::datatypes::DataType;
use calibsql_udfs::host::{AggregateCall, Groups};
use datafusion_common::{exec_err, Result, ScalarValue};
use libduckdb_sys as ffi;

use crate::guard::message;
use crate::overload::Overload;

pub type Outcome<T> = std::result::Result<T, String>;

/// What a group's `state_size` bytes hold.
#[derive(Clone, Copy, Debug)]
pub struct GroupRef {
    /// `Arc::into_raw` of the group's store; null before `init` and after `destroy`.
    pub store: *const Store,
    /// The call's index in the store, [`NO_CALL`] until the group's first row.
    pub call: u32,
    /// The group's number in that call's [`Groups`].
    pub group: u32,
}

pub const NO_CALL: u32 = u32::MAX;

impl GroupRef {
    pub unsafe fn read(state: ffi::duckdb_aggregate_state) -> Self {
        ptr::read_unaligned(state as *const GroupRef)
    }

    pub unsafe fn write(self, state: ffi::duckdb_aggregate_state) {
        ptr::write_unaligned(state as *mut GroupRef, self)
    }

    /// The store, alive as long as this group is.
    pub unsafe fn store<'a>(&self) -> Outcome<&'a Store> {
        self.store
            .as_ref()
            .ok_or_else(|| "a group's state was not initialised".to_string())
    }

    pub fn joined(&self) -> bool {
        !self.store.is_null() && self.call != NO_CALL
    }
}

/// Partial states a combine took out of a call's groups, a row per group.
type Taken = Arc<Vec<ArrayRef>>;

/// One call's groups in a store.
pub struct Call {
    call: Arc<AggregateCall>,
    types: Vec<DataType>,
    groups: Groups,
    /// The groups combines read, and the row of their state in what was taken. DuckDB does
    /// not say whether it will read a source again (a window's segment tree does), so a
    /// source's state is taken once (an aggregate that keeps rows moves them rather than
    /// copying) and read from here afterwards.
    taken: HashMap<usize, (Taken, usize)>,
}

impl Call {
    /// Adds a chunk's rows (one array per argument, as DuckDB gave them), row `i` to group
    /// `groups[i]`.
    pub fn update(&mut self, columns: &[ArrayRef], groups: &[usize]) -> Result<()> {
        self.none_taken(groups, "rows")?;
        let values = self.call.coerce(columns)?;
        self.groups.update(&values, groups)
    }

    /// Adds partial states (as [`Call::take_states`] gives them), row `i` to group
    /// `groups[i]`.
    pub fn merge(&mut self, states: &[ArrayRef], groups: &[usize]) -> Result<()> {
        self.none_taken(groups, "partial states")?;
        self.groups.merge(states, groups)
    }

    /// An error when one of `groups` was taken by a combine: its state is read from `taken`
    /// from then on, so anything added to it in the kernel would be lost, silently.
    fn none_taken(&self, groups: &[usize], what: &str) -> Result<()> {
        if !self.taken.is_empty() && groups.iter().any(|g| self.taken.contains_key(g)) {
            return exec_err!(
                "{}: internal error: {what} for a group already combined into another",
                self.call.name()
            );
        }
        Ok(())
    }

    /// The call and its argument types, for another store to make the same call.
    pub fn made(&self) -> (Arc<AggregateCall>, Vec<DataType>) {
        (Arc::clone(&self.call), self.types.clone())
    }

    /// The partial states of `groups`, a row per group in the order given (see `taken`).
    pub fn take_states(&mut self, groups: &[usize]) -> Result<Vec<ArrayRef>> {
        let mut fresh: Vec<usize> = groups
            .iter()
            .copied()
            .filter(|g| !self.taken.contains_key(g))
            .collect();
        fresh.sort_unstable();
        fresh.dedup();
        for range in consecutive(&fresh) {
            let batch: Taken = Arc::new(self.groups.take_state(range.clone())?);
            for (row, g) in range.enumerate() {
                self.taken.insert(g, (Arc::clone(&batch), row));
            }
        }
        // Each group's (batch, row), the batches numbered in order of first use.
        let mut batches: Vec<&Taken> = vec![];
        let mut numbers: HashMap<*const Vec<ArrayRef>, usize> = HashMap::new();
        let mut at = Vec::with_capacity(groups.len());
        for g in groups {
            let (batch, row) = &self.taken[g];
            let n = *numbers.entry(Arc::as_ptr(batch)).or_insert_with(|| {
                batches.push(batch);
                batches.len() - 1
            });
            at.push((n, *row));
        }
        match batches.as_slice() {
            [one]
                if at.iter().enumerate().all(|(i, &(_, row))| row == i)
                    && one.first().is_none_or(|f| f.len() == at.len()) =>
            {
                Ok(one.to_vec())
            }
            _ => {
                let fields = batches.first().map_or(0, |b| b.len());
                (0..fields)
                    .map(|f| {
                        let columns: Vec<&dyn Array> =
                            batches.iter().map(|b| b[f].as_ref()).collect();
                        Ok(arrow::compute::interleave(&columns, &at)?)
                    })
                    .collect()
            }
        }
    }

    /// The values of `groups`, a row per group in the order given; a group a combine took
    /// is evaluated from its taken state.
    pub fn values(&mut self, groups: &[usize]) -> Result<ArrayRef> {
        let parts = if groups.iter().any(|g| self.taken.contains_key(g)) {
            groups
                .iter()
                .map(|&g| match self.taken.get(&g) {
                    Some((batch, row)) => {
                        let state: Vec<ArrayRef> = batch.iter().map(|a| a.slice(*row, 1)).collect();
                        let mut one = self.call.groups()?;
                        let g = one.add();
                        one.merge(&state, &[g])?;
                        one.evaluate(g..g + 1)
                    }
                    None => self.groups.evaluate(g..g + 1),
                })
                .collect::<Result<Vec<_>>>()?
        } else {
            consecutive(groups)
                .into_iter()
                .map(|r| self.groups.evaluate(r))
                .collect::<Result<Vec<_>>>()?
        };
        concat(&parts)
    }
}

/// The groups one DuckDB thread made for one overload, per call.
#[derive(Default)]
pub struct Store {
    calls: Mutex<Vec<Call>>,
}

thread_local! {
    /// This thread's stores, by overload (its extra info's address); a store lives as long
    /// as a group refers to it.
    static STORES: RefCell<HashMap<usize, Weak<Store>>> = RefCell::new(HashMap::new());
}

/// This thread's store for `ov` (a new one when the last is gone or poisoned), as a strong
/// reference for a group to hold.
pub fn thread_store(ov: &Overload) -> *const Store {
    let key = ov as *const Overload as usize;
    let store = STORES.with(|s| {
        let mut s = s.borrow_mut();
        match s.get(&key).and_then(Weak::upgrade) {
            Some(store) if !store.calls.is_poisoned() => store,
            _ => {
                let store = Arc::new(Store::default());
                s.insert(key, Arc::downgrade(&store));
                store
            }
        }
    });
    Arc::into_raw(store)
}

impl Store {
    pub fn lock(&self, name: &str) -> Outcome<MutexGuard<'_, Vec<Call>>> {
        self.calls.lock().map_err(|_| {
            format!("{name}: an internal error earlier in this query left its state unusable")
        })
    }
}

/// The index of the call with `types` and `call`'s constants in `calls`, added (with no
/// groups) if there is none.
pub fn call_index(
    calls: &mut Vec<Call>,
    types: &[DataType],
    make: impl FnOnce() -> Outcome<Arc<AggregateCall>>,
    constants: &[Option<ScalarValue>],
) -> Outcome<u32> {
    if let Some(i) = calls
        .iter()
        .position(|c| c.types == types && c.call.constants() == constants)
    {
        return Ok(i as u32);
    }
    let call = make()?;
    let groups = call.groups().map_err(message)?;
    calls.push(Call {
        call,
        types: types.to_vec(),
        groups,
        taken: HashMap::new(),
    });
    u32::try_from(calls.len() - 1).map_err(|_| "too many calls".to_string())
}

/// The group `state` refers to in call `index` of `calls`: joined now if it had no call
/// yet; a group whose call differs made another call on an earlier row.
pub unsafe fn group_in(
    calls: &mut [Call],
    index: u32,
    state: ffi::duckdb_aggregate_state,
) -> Outcome<usize> {
    let mut r = GroupRef::read(state);
    let call = &mut calls[index as usize];
    if r.call == NO_CALL {
        r.call = index;
        r.group = u32::try_from(call.groups.add())
            .map_err(|_| format!("{}: too many groups", call.call.name()))?;
        r.write(state);
    } else if r.call != index {
        return Err(format!(
            "{}: the constant arguments must be the same on every row",
            call.call.name()
        ));
    }
    Ok(r.group as usize)
}

/// `groups` as ranges of consecutive group numbers, in order.
fn consecutive(groups: &[usize]) -> Vec<Range<usize>> {
    let mut out: Vec<Range<usize>> = vec![];
    for &g in groups {
        match out.last_mut() {
            Some(r) if r.end == g => r.end += 1,
            _ => out.push(g..g + 1),
        }
    }
    out
}

/// Arrays of the same type, one after another.
fn concat(parts: &[ArrayRef]) -> Result<ArrayRef> {
    if let [one] = parts {
        return Ok(Arc::clone(one));
    }
    let parts: Vec<&dyn Array> = parts.iter().map(|p| p.as_ref()).collect();
    Ok(arrow::compute::concat(&parts)?)
}
