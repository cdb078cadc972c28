//! calibsql's aggregates as DuckDB aggregate functions: the callbacks.
//!
//! A group's state lives where calibsql's own `GROUP BY` keeps it, in a kernel's vectors
//! shared by many groups (see [`crate::store`]); the `state_size` bytes DuckDB gives a group
//! hold only a [`GroupRef`]. DuckDB's stable C API has no bind step, so the constant arguments
//! (`n_bins`, `strategy`) are read from the rows a chunk carries, checked to be the same on
//! every row, and a group joins its call at its first row.
//!
//! * `init` / `destroy`: a group takes a reference to its thread's store, and gives it back.
//! * `update`: the chunk's rows go to their groups in one pass of the call's kernel.
//! * `combine`: the sources' partial states merged into the targets. A source's state is
//!   taken out of its kernel once (an aggregate that keeps rows moves them, as calibsql's
//!   partial aggregation does) and kept beside it, since DuckDB may read a source again (a
//!   window's segment tree combines one node into several frames). The targets that saw no
//!   row (DuckDB's combine targets) move to a store of that call's own, freed when they are:
//!   a window destroys its frames a batch at a time, and a kernel cannot free one group.
//! * `finalize`: the groups' values; a group that saw no row gets the value of a call with
//!   every constant at its default (NULL for most functions).
//!
//! A store's lock is never held while another store's is taken (a combine reads its sources,
//! lets go, then writes its targets), so two threads combining into each other's stores do
//! not deadlock.

use std::ffi::{c_void, CString};
use std::ptr;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, UInt32Array};
use arrow::datatypes::DataType;
use calibsql_udfs::host::{AggregateCall, Implementation};
use datafusion_common::{Result, ScalarValue};
use datafusion_expr::AggregateUDF;
use libduckdb_sys as ffi;

use crate::guard::{self, c_message, message};
use crate::overload::{constant_of, Overload};
use crate::store::{call_index, group_in, thread_store, GroupRef, Outcome, Store, NO_CALL};
use crate::vectors::{self, cast};

unsafe fn overload<'a>(info: ffi::duckdb_function_info) -> &'a Overload {
    &*(ffi::duckdb_aggregate_function_get_extra_info(info) as *const Overload)
}

unsafe fn guarded(info: ffi::duckdb_function_info, body: impl FnOnce() -> Outcome<()>) {
    let name = overload(info).name();
    if let Some(m) = guard::run(name, body) {
        let m = c_message(&m);
        ffi::duckdb_aggregate_function_set_error(info, m.as_ptr());
    }
}

unsafe extern "C" fn state_size(_info: ffi::duckdb_function_info) -> ffi::idx_t {
    size_of::<GroupRef>() as ffi::idx_t
}

unsafe extern "C" fn init(info: ffi::duckdb_function_info, state: ffi::duckdb_aggregate_state) {
    // Null first, so that a failure leaves nothing for `destroy` to give back.
    let empty = GroupRef {
        store: ptr::null(),
        call: NO_CALL,
        group: 0,
    };
    empty.write(state);
    guarded(info, || {
        GroupRef {
            store: thread_store(overload(info)),
            ..empty
        }
        .write(state);
        Ok(())
    })
}

/// The constant arguments a chunk's rows pass (None for a data column).
fn constants_of(ov: &Overload, columns: &[ArrayRef]) -> Outcome<Vec<Option<ScalarValue>>> {
    columns
        .iter()
        .zip(&ov.function.arguments)
        .map(|(c, a)| {
            a.kind
                .is_constant()
                .then(|| constant_of(ov.name(), a.name, c))
                .transpose()
        })
        .collect()
}

fn aggregate(ov: &Overload) -> Option<&Arc<AggregateUDF>> {
    match &ov.function.implementation {
        Implementation::Aggregate(a) => Some(a),
        Implementation::Scalar(_) => None,
    }
}

fn new_call(
    ov: &Overload,
    types: &[DataType],
    constants: &[Option<ScalarValue>],
) -> Outcome<Arc<AggregateCall>> {
    let Some(udaf) = aggregate(ov) else {
        return Err(format!("{}: not an aggregate", ov.name()));
    };
    AggregateCall::new(udaf, types, constants.to_vec())
        .map(Arc::new)
        .map_err(message)
}

/// Positions `0..n` in runs that share a key, each run's positions in order (most chunks
/// have one run).
fn runs_by<K: PartialEq>(n: usize, key: impl Fn(usize) -> K) -> Vec<(K, Vec<usize>)> {
    let mut out: Vec<(K, Vec<usize>)> = vec![];
    for i in 0..n {
        let k = key(i);
        match out.iter_mut().find(|(o, _)| *o == k) {
            Some((_, rows)) => rows.push(i),
            None => out.push((k, vec![i])),
        }
    }
    out
}

/// `columns` at `rows`, as they are when `rows` is all of them.
fn rows_of(columns: &[ArrayRef], rows: &[usize]) -> Outcome<Vec<ArrayRef>> {
    if rows.len() == columns.first().map_or(0, |c| c.len()) {
        return Ok(columns.to_vec());
    }
    let take = UInt32Array::from_iter_values(rows.iter().map(|&r| r as u32));
    columns
        .iter()
        .map(|c| arrow::compute::take(c, &take, None).map_err(|e| e.to_string()))
        .collect()
}

unsafe extern "C" fn update(
    info: ffi::duckdb_function_info,
    chunk: ffi::duckdb_data_chunk,
    states: *mut ffi::duckdb_aggregate_state,
) {
    guarded(info, || {
        let ov = overload(info);
        let rows = ffi::duckdb_data_chunk_get_size(chunk) as usize;
        if rows == 0 {
            return Ok(());
        }
        let columns = ov.columns(chunk, rows)?;
        let constants = constants_of(ov, &columns)?;
        let types: Vec<DataType> = columns.iter().map(|c| c.data_type().clone()).collect();
        let states = std::slice::from_raw_parts(states, rows);
        // Every row in one group (no GROUP BY): its number is looked up once.
        let one = states.iter().all(|&s| s == states[0]);
        let runs = if one {
            vec![(0..rows).collect()]
        } else {
            let runs = runs_by(rows, |i| GroupRef::read(states[i]).store);
            runs.into_iter()
                .map(|(_, rows)| rows)
                .collect::<Vec<Vec<usize>>>()
        };
        for rows in runs {
            let store = GroupRef::read(states[rows[0]]).store()?;
            let mut calls = store.lock(ov.name())?;
            let index = call_index(
                &mut calls,
                &types,
                || new_call(ov, &types, &constants),
                &constants,
            )?;
            let groups = if one {
                vec![group_in(&mut calls, index, states[0])?; rows.len()]
            } else {
                rows.iter()
                    .map(|&r| group_in(&mut calls, index, states[r]))
                    .collect::<Outcome<Vec<usize>>>()?
            };
            calls[index as usize]
                .update(&rows_of(&columns, &rows)?, &groups)
                .map_err(message)?;
        }
        Ok(())
    })
}

unsafe extern "C" fn combine(
    info: ffi::duckdb_function_info,
    source: *mut ffi::duckdb_aggregate_state,
    target: *mut ffi::duckdb_aggregate_state,
    count: ffi::idx_t,
) {
    guarded(info, || {
        let ov = overload(info);
        let count = count as usize;
        let pairs: Vec<(ffi::duckdb_aggregate_state, ffi::duckdb_aggregate_state)> = (0..count)
            .map(|i| (*source.add(i), *target.add(i)))
            .filter(|&(s, t)| s != t && GroupRef::read(s).joined())
            .collect();
        // Targets that saw no row (DuckDB's combine targets: a GROUP BY's merged groups, a
        // window's frames and segment-tree nodes) move to a store of this call's own, which
        // is freed when they are: a kernel cannot free one group, and a window destroys its
        // frames a batch at a time while its tree lives on.
        let mut merged: Option<Arc<Store>> = None;
        for &(_, t) in &pairs {
            let mut r = GroupRef::read(t);
            if r.call == NO_CALL && !r.store.is_null() {
                let store = merged.get_or_insert_with(|| Arc::new(Store::default()));
                drop(Arc::from_raw(r.store));
                r.store = Arc::into_raw(Arc::clone(store));
                r.write(t);
            }
        }
        drop(merged);
        let key = |i: usize| {
            let (s, t) = (GroupRef::read(pairs[i].0), GroupRef::read(pairs[i].1));
            (s.store, s.call, t.store)
        };
        for ((_, call, _), run) in runs_by(pairs.len(), key) {
            // The sources' states, read under their store's lock only.
            let (made, types, states) = {
                let source = GroupRef::read(pairs[run[0]].0);
                let mut calls = source.store()?.lock(ov.name())?;
                let c = &mut calls[call as usize];
                let groups: Vec<usize> = run
                    .iter()
                    .map(|&i| GroupRef::read(pairs[i].0).group as usize)
                    .collect();
                let states = c.take_states(&groups).map_err(message)?;
                let (made, types) = c.made();
                (made, types, states)
            };
            let target = GroupRef::read(pairs[run[0]].1);
            let mut calls = target.store()?.lock(ov.name())?;
            let index = call_index(
                &mut calls,
                &types,
                || Ok(Arc::clone(&made)),
                made.constants(),
            )?;
            let groups = run
                .iter()
                .map(|&i| group_in(&mut calls, index, pairs[i].1))
                .collect::<Outcome<Vec<usize>>>()?;
            calls[index as usize]
                .merge(&states, &groups)
                .map_err(message)?;
        }
        Ok(())
    })
}

/// The value of a group that saw no row: a call with every constant at its default.
fn empty_value(ov: &Overload) -> Result<ScalarValue> {
    let Some(udaf) = aggregate(ov) else {
        return ScalarValue::try_from(&ov.returns);
    };
    let constants = ov.function.arguments[..ov.declared.len()]
        .iter()
        .map(|a| a.kind.is_constant().then(|| a.default.clone()).flatten())
        .collect();
    let types = ov.types_with(&DataType::Utf8);
    let value = AggregateCall::new(udaf, &types, constants)
        .and_then(|c| c.groups())
        .and_then(|mut g| {
            let one = g.add();
            g.evaluate(one..one + 1)
        })
        .and_then(|a| ScalarValue::try_from_array(&a, 0));
    match value {
        Ok(v) => Ok(v),
        // A constant without a default (and no row to read it from): nothing to compute.
        Err(_) => ScalarValue::try_from(&ov.returns),
    }
}

unsafe extern "C" fn finalize(
    info: ffi::duckdb_function_info,
    source: *mut ffi::duckdb_aggregate_state,
    result: ffi::duckdb_vector,
    count: ffi::idx_t,
    offset: ffi::idx_t,
) {
    guarded(info, || {
        let ov = overload(info);
        let refs: Vec<GroupRef> = (0..count as usize)
            .map(|i| GroupRef::read(*source.add(i)))
            .collect();
        // Each run's values as one array; every position's (array, row) in them.
        let mut arrays: Vec<ArrayRef> = vec![];
        let mut at = vec![(0, 0); refs.len()];
        let key = |i: usize| refs[i].joined().then_some((refs[i].store, refs[i].call));
        for (key, run) in runs_by(refs.len(), key) {
            let values = match key {
                None => empty_value(ov)
                    .and_then(|v| v.to_array())
                    .map_err(message)?,
                Some((_, call)) => {
                    let mut calls = refs[run[0]].store()?.lock(ov.name())?;
                    let groups: Vec<usize> = run.iter().map(|&i| refs[i].group as usize).collect();
                    calls[call as usize].values(&groups).map_err(message)?
                }
            };
            let values = cast(&values, &ov.returns)?;
            for (row, &i) in run.iter().enumerate() {
                at[i] = (arrays.len(), if key.is_some() { row } else { 0 });
            }
            arrays.push(values);
        }
        let out = match arrays.as_slice() {
            [] => arrow::array::new_empty_array(&ov.returns),
            [one] if one.len() == refs.len() => Arc::clone(one),
            _ => {
                let arrays: Vec<&dyn Array> = arrays.iter().map(|a| a.as_ref()).collect();
                arrow::compute::interleave(&arrays, &at).map_err(|e| e.to_string())?
            }
        };
        vectors::write(&out, result, offset as usize)
    })
}

unsafe extern "C" fn destroy(states: *mut ffi::duckdb_aggregate_state, count: ffi::idx_t) {
    // No function info here to report through: give back what can be, never unwind.
    let _ = guard::run("destroy", || {
        for i in 0..count as usize {
            let s = *states.add(i);
            let mut r = GroupRef::read(s);
            if !r.store.is_null() {
                let store = r.store;
                r.store = ptr::null();
                r.write(s);
                drop(Arc::from_raw(store));
            }
        }
        Ok(())
    });
}

/// Registers `overloads` (all of one function) as one DuckDB aggregate function set.
///
/// # Safety
/// `con` must be a live connection of the database being loaded into.
pub unsafe fn register(
    con: ffi::duckdb_connection,
    name: &str,
    overloads: Vec<Overload>,
) -> Outcome<()> {
    let c_name = CString::new(name).map_err(|e| e.to_string())?;
    let mut set = ffi::duckdb_create_aggregate_function_set(c_name.as_ptr());
    let mut outcome = Ok(());
    for ov in overloads {
        let mut f = ffi::duckdb_create_aggregate_function();
        ffi::duckdb_aggregate_function_set_name(f, c_name.as_ptr());
        let (declared, returns) = match ov.duckdb_types() {
            Ok(types) => types,
            Err(e) => {
                ffi::duckdb_destroy_aggregate_function(&mut f);
                outcome = Err(format!("{name}: {e}"));
                break;
            }
        };
        for t in &declared {
            ffi::duckdb_aggregate_function_add_parameter(f, t.0);
        }
        ffi::duckdb_aggregate_function_set_return_type(f, returns.0);
        ffi::duckdb_aggregate_function_set_functions(
            f,
            Some(state_size),
            Some(init),
            Some(update),
            Some(combine),
            Some(finalize),
        );
        ffi::duckdb_aggregate_function_set_destructor(f, Some(destroy));
        let extra = Box::into_raw(Box::new(ov));
        ffi::duckdb_aggregate_function_set_extra_info(
            f,
            extra as *mut c_void,
            Some(Overload::drop_boxed),
        );
        let added = ffi::duckdb_add_aggregate_function_to_set(set, f);
        ffi::duckdb_destroy_aggregate_function(&mut f);
        if added != ffi::DuckDBSuccess {
            outcome = Err(format!("{name}: DuckDB refused an overload"));
            break;
        }
    }
    if outcome.is_ok()
        && ffi::duckdb_register_aggregate_function_set(con, set) != ffi::DuckDBSuccess
    {
        outcome = Err(format!("could not register aggregate {name}"));
    }
    ffi::duckdb_destroy_aggregate_function_set(&mut set);
    outcome
}
