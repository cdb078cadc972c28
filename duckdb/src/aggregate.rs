//! calibsql's aggregates as DuckDB aggregate functions.
//!
//! DuckDB gives each group `state_size` bytes; here they hold one pointer to a [`Slot`],
//! which `init` allocates and `destroy` frees (its only owner). A slot holds the group's
//! [`Partial`] (the function's own accumulator) and the [`AggregateCall`] it was made for,
//! created at the group's first row: DuckDB's stable C API has no bind step, so the constant
//! arguments (`n_bins`, `strategy`) are read from the rows a chunk carries and checked to be
//! the same on every row.
//!
//! * `update`: when every row of a chunk belongs to one group (no `GROUP BY`) the rows go
//!   to its partial; otherwise the call makes every group's partial state in one pass over
//!   the chunk, and each is merged into its group's partial.
//! * `combine`: the source's partial state merged into the target. DuckDB may combine a
//!   source again (window frames' segment trees), so the source is rebuilt from that state
//!   (an aggregate that keeps rows hands them over in its state).
//! * `finalize`: the partial's value; a group that saw no row gets the value of a call with
//!   every constant at its default (NULL for most functions).

use std::collections::HashMap;
use std::ffi::{c_void, CString};
use std::ptr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use arrow::array::ArrayRef;
use arrow::datatypes::DataType;
use calibsql_udfs::host::{AggregateCall, Implementation, Partial};
use datafusion_common::{Result, ScalarValue};
use datafusion_expr::AggregateUDF;
use libduckdb_sys as ffi;

use crate::guard::{self, c_message, message};
use crate::overload::{constant_of, Overload};
use crate::vectors::{self, cast};

/// A group's partial aggregate and the call it was made for.
type Accumulated = Option<(Arc<AggregateCall>, Partial)>;

/// One group's state. DuckDB may combine one source into several targets at once (the
/// nodes of a window's segment tree), and reading a state takes `&mut` (an accumulator that
/// keeps rows hands them over): the lock makes each read whole.
#[derive(Default)]
struct Slot {
    state: Mutex<Accumulated>,
}

impl Slot {
    fn lock(&self) -> MutexGuard<'_, Accumulated> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The partial aggregate of `state`, made for `call` if the group has none yet; a group's
/// constants cannot change from row to row.
fn for_call<'a>(
    state: &'a mut Accumulated,
    call: &Arc<AggregateCall>,
) -> std::result::Result<&'a mut Partial, String> {
    if let Some((own, _)) = state {
        if own.constants() != call.constants() {
            return Err(format!(
                "{}: the constant arguments must be the same on every row",
                call.name()
            ));
        }
    } else {
        let partial = call.partial().map_err(message)?;
        *state = Some((Arc::clone(call), partial));
    }
    match state {
        Some((_, partial)) => Ok(partial),
        None => Err(format!("{}: no partial aggregate", call.name())),
    }
}

unsafe fn overload<'a>(info: ffi::duckdb_function_info) -> &'a Overload {
    &*(ffi::duckdb_aggregate_function_get_extra_info(info) as *const Overload)
}

unsafe fn slot<'a>(state: ffi::duckdb_aggregate_state) -> std::result::Result<&'a Slot, String> {
    let p = ptr::read_unaligned(state as *const *const Slot);
    p.as_ref()
        .ok_or_else(|| "a group's state was not initialised".to_string())
}

unsafe fn guarded(
    info: ffi::duckdb_function_info,
    body: impl FnOnce() -> std::result::Result<(), String>,
) {
    let name = overload(info).name();
    if let Some(m) = guard::run(name, body) {
        let m = c_message(&m);
        ffi::duckdb_aggregate_function_set_error(info, m.as_ptr());
    }
}

unsafe extern "C" fn state_size(_info: ffi::duckdb_function_info) -> ffi::idx_t {
    size_of::<*mut Slot>() as ffi::idx_t
}

unsafe extern "C" fn init(info: ffi::duckdb_function_info, state: ffi::duckdb_aggregate_state) {
    // Null first, so that a failed allocation leaves nothing for `destroy` to free.
    ptr::write_unaligned(state as *mut *mut Slot, ptr::null_mut());
    guarded(info, || {
        ptr::write_unaligned(
            state as *mut *mut Slot,
            Box::into_raw(Box::<Slot>::default()),
        );
        Ok(())
    })
}

/// The constant arguments a chunk's rows pass (None for a data column).
fn constants_of(
    ov: &Overload,
    columns: &[ArrayRef],
) -> std::result::Result<Vec<Option<ScalarValue>>, String> {
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

/// The call a chunk's rows make: the call `known` already made with the same constants (a
/// call site's argument types do not change from chunk to chunk), else a new one.
fn call_of(
    ov: &Overload,
    columns: &[ArrayRef],
    known: Option<&Arc<AggregateCall>>,
) -> std::result::Result<Arc<AggregateCall>, String> {
    let constants = constants_of(ov, columns)?;
    if let Some(call) = known.filter(|c| c.constants() == constants.as_slice()) {
        return Ok(Arc::clone(call));
    }
    let Some(udaf) = aggregate(ov) else {
        return Err(format!("{}: not an aggregate", ov.name()));
    };
    let types: Vec<DataType> = columns.iter().map(|c| c.data_type().clone()).collect();
    AggregateCall::new(udaf, &types, constants)
        .map(Arc::new)
        .map_err(message)
}

fn aggregate(ov: &Overload) -> Option<&Arc<AggregateUDF>> {
    match &ov.function.implementation {
        Implementation::Aggregate(a) => Some(a),
        Implementation::Scalar(_) => None,
    }
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
        let states = std::slice::from_raw_parts(states, rows);
        if states.iter().all(|&s| s == states[0]) {
            let mut state = slot(states[0])?.lock();
            let call = call_of(ov, &columns, state.as_ref().map(|(c, _)| c))?;
            let values = call.coerce(&columns).map_err(message)?;
            return for_call(&mut state, &call)?
                .update(&values)
                .map_err(message);
        }
        // The chunk's groups numbered in order of first appearance, each group's partial
        // state made in one pass over the chunk, then merged into the group's own.
        let mut local: HashMap<ffi::duckdb_aggregate_state, usize> = HashMap::new();
        let mut targets = vec![];
        let groups: Vec<usize> = states
            .iter()
            .map(|&s| {
                *local.entry(s).or_insert_with(|| {
                    targets.push(s);
                    targets.len() - 1
                })
            })
            .collect();
        let call = {
            let first = slot(targets[0])?.lock();
            call_of(ov, &columns, first.as_ref().map(|(c, _)| c))?
        };
        let values = call.coerce(&columns).map_err(message)?;
        let parts = call
            .partial_states(&values, &groups, targets.len())
            .map_err(message)?;
        for (part, &t) in parts.iter().zip(&targets) {
            for_call(&mut slot(t)?.lock(), &call)?
                .merge(part)
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
        for i in 0..count as usize {
            let (src, dst) = (*source.add(i), *target.add(i));
            if src == dst {
                continue;
            }
            // The source's partial state, and the source rebuilt from it (reading it took
            // the rows of an aggregate that keeps them); then the target's merge of it.
            let (call, part) = {
                let mut source = slot(src)?.lock();
                let Some((call, partial)) = source.as_mut() else {
                    continue;
                };
                let part = partial.take_state().map_err(message)?;
                let mut rebuilt = call.partial().map_err(message)?;
                rebuilt.merge(&part).map_err(message)?;
                *partial = rebuilt;
                (Arc::clone(call), part)
            };
            for_call(&mut slot(dst)?.lock(), &call)?
                .merge(&part)
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
    match AggregateCall::new(udaf, &types, constants).and_then(|c| c.partial()) {
        Ok(mut partial) => partial.value(),
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
        let mut values = Vec::with_capacity(count as usize);
        for i in 0..count as usize {
            let v = match slot(*source.add(i))?.lock().as_mut() {
                Some((_, partial)) => partial.value(),
                None => empty_value(ov),
            };
            values.push(v.map_err(message)?);
        }
        let out = if values.is_empty() {
            arrow::array::new_empty_array(&ov.returns)
        } else {
            ScalarValue::iter_to_array(values).map_err(message)?
        };
        let out = cast(&out, &ov.returns)?;
        vectors::write(&out, result, offset as usize)
    })
}

unsafe extern "C" fn destroy(states: *mut ffi::duckdb_aggregate_state, count: ffi::idx_t) {
    // No function info here to report through: free what can be freed, never unwind.
    let _ = guard::run("destroy", || {
        for i in 0..count as usize {
            let s = *states.add(i);
            let p = ptr::read_unaligned(s as *const *mut Slot);
            if !p.is_null() {
                ptr::write_unaligned(s as *mut *mut Slot, ptr::null_mut());
                drop(Box::from_raw(p));
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
) -> std::result::Result<(), String> {
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
