//! calibsql's scalar functions as DuckDB scalar functions: a chunk's columns read as Arrow
//! arrays (a constant argument as a constant), the function invoked
//! ([`calibsql_udfs::host::invoke_scalar`]), its result written into DuckDB's result vector.

use std::ffi::{c_void, CString};
use std::sync::Arc;

use calibsql_udfs::host::{invoke_scalar, Implementation};
use datafusion_expr::ColumnarValue;
use libduckdb_sys as ffi;

use crate::guard::{self, c_message, message};
use crate::overload::{constant_of, Overload};
use crate::vectors::{self, cast};

unsafe fn overload<'a>(info: ffi::duckdb_function_info) -> &'a Overload {
    &*(ffi::duckdb_scalar_function_get_extra_info(info) as *const Overload)
}

unsafe fn invoke(
    ov: &Overload,
    chunk: ffi::duckdb_data_chunk,
    output: ffi::duckdb_vector,
) -> Result<(), String> {
    let Implementation::Scalar(udf) = &ov.function.implementation else {
        return Err(format!("{}: not a scalar function", ov.name()));
    };
    let rows = ffi::duckdb_data_chunk_get_size(chunk) as usize;
    if rows == 0 {
        return Ok(());
    }
    let columns = ov.columns(chunk, rows)?;
    let args = columns
        .iter()
        .zip(&ov.function.arguments)
        .map(|(c, a)| {
            Ok(if a.kind.is_constant() {
                ColumnarValue::Scalar(constant_of(ov.name(), a.name, c)?)
            } else {
                ColumnarValue::Array(Arc::clone(c))
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    let out = invoke_scalar(udf, args, rows, &ov.returns, &ov.config).map_err(message)?;
    vectors::write(&cast(&out, &ov.returns)?, output, 0)
}

unsafe extern "C" fn function(
    info: ffi::duckdb_function_info,
    chunk: ffi::duckdb_data_chunk,
    output: ffi::duckdb_vector,
) {
    let ov = overload(info);
    if let Some(m) = guard::run(ov.name(), || invoke(ov, chunk, output)) {
        let m = c_message(&m);
        ffi::duckdb_scalar_function_set_error(info, m.as_ptr());
    }
}

/// Registers `overloads` (all of one function) as one DuckDB scalar function set.
///
/// # Safety
/// `con` must be a live connection of the database being loaded into.
pub unsafe fn register(
    con: ffi::duckdb_connection,
    name: &str,
    overloads: Vec<Overload>,
) -> Result<(), String> {
    let c_name = CString::new(name).map_err(|e| e.to_string())?;
    let mut set = ffi::duckdb_create_scalar_function_set(c_name.as_ptr());
    let mut outcome = Ok(());
    for ov in overloads {
        let (declared, returns) = match ov.duckdb_types() {
            Ok(types) => types,
            Err(e) => {
                outcome = Err(format!("{name}: {e}"));
                break;
            }
        };
        let mut f = ffi::duckdb_create_scalar_function();
        ffi::duckdb_scalar_function_set_name(f, c_name.as_ptr());
        for t in &declared {
            ffi::duckdb_scalar_function_add_parameter(f, t.0);
        }
        ffi::duckdb_scalar_function_set_return_type(f, returns.0);
        ffi::duckdb_scalar_function_set_function(f, Some(function));
        let extra = Box::into_raw(Box::new(ov));
        ffi::duckdb_scalar_function_set_extra_info(
            f,
            extra as *mut c_void,
            Some(Overload::drop_boxed),
        );
        let added = ffi::duckdb_add_scalar_function_to_set(set, f);
        ffi::duckdb_destroy_scalar_function(&mut f);
        if added != ffi::DuckDBSuccess {
            outcome = Err(format!("{name}: DuckDB refused an overload"));
            break;
        }
    }
    if outcome.is_ok() && ffi::duckdb_register_scalar_function_set(con, set) != ffi::DuckDBSuccess {
        outcome = Err(format!("could not register function {name}"));
    }
    ffi::duckdb_destroy_scalar_function_set(&mut set);
    outcome
}
