//! calibsql's functions inside DuckDB: a loadable extension (`calibsql.duckdb_extension`,
//! built by `duckdb/build.sh`) that registers every function of the calibsql registry
//! ([`calibsql_udfs::host::host_functions`]) through DuckDB's stable C API.
//!
//! The functions are calibsql's own: the same DataFusion implementations, accumulators and
//! kernels the calibsql engine runs, driven from DuckDB's callbacks. This crate is only the
//! DuckDB face: `overload` declares each function as DuckDB overloads, `vectors` moves
//! data between DuckDB vectors and Arrow arrays, `store` keeps the aggregates' groups in
//! the functions' kernels, `aggregate` and `scalar` are the callbacks, `guard` keeps
//! every error and panic on this side of the boundary.
//!
//! DuckDB loads the file after checking its metadata footer (`append_metadata.py`): ABI
//! `C_STRUCT`, C API [`MIN_C_API`], so any DuckDB whose C API serves that version loads it.

mod aggregate;
mod guard;
mod overload;
mod scalar;
mod store;
mod vectors;

use std::ffi::c_char;

use calibsql_udfs::host::{host_functions, Implementation};
use libduckdb_sys as ffi;

/// The oldest C API whose function table has everything used here (aggregate function sets
/// and the vector functions are in v1.2.0). `build.sh` writes it into the footer.
pub const MIN_C_API: &str = "v1.2.0";

unsafe fn register_all(con: ffi::duckdb_connection) -> Result<(), String> {
    let functions = host_functions();
    let mut overloads = overload::overloads(&functions).map_err(guard::message)?;
    for f in &functions {
        let (own, rest): (Vec<_>, Vec<_>) = overloads
            .into_iter()
            .partition(|o| o.function.name == f.name);
        overloads = rest;
        match f.implementation {
            Implementation::Aggregate(_) => aggregate::register(con, &f.name, own)?,
            Implementation::Scalar(_) => scalar::register(con, &f.name, own)?,
        }
    }
    Ok(())
}

unsafe fn init(
    info: ffi::duckdb_extension_info,
    access: *const ffi::duckdb_extension_access,
) -> Result<bool, String> {
    // False without an error: DuckDB refused the C API version and said why.
    if !ffi::duckdb_rs_extension_api_init(info, access, MIN_C_API).map_err(|e| e.to_string())? {
        return Ok(false);
    }
    let get_database = (*access)
        .get_database
        .ok_or("DuckDB gave no get_database")?;
    let db = get_database(info);
    if db.is_null() {
        return Err("DuckDB gave no database".into());
    }
    let mut con: ffi::duckdb_connection = std::ptr::null_mut();
    if ffi::duckdb_connect(*db, &mut con) != ffi::DuckDBSuccess {
        return Err("could not connect to the database".into());
    }
    let registered = register_all(con);
    ffi::duckdb_disconnect(&mut con);
    registered.map(|()| true)
}

/// The entry point DuckDB looks up in a C_STRUCT extension named calibsql.
///
/// # Safety
/// Called by DuckDB with a live `info` and `access`.
#[no_mangle]
pub unsafe extern "C" fn calibsql_init_c_api(
    info: ffi::duckdb_extension_info,
    access: *const ffi::duckdb_extension_access,
) -> bool {
    let mut loaded = false;
    let failed = guard::run("calibsql", || {
        loaded = init(info, access)?;
        Ok(())
    });
    if let (Some(m), Some(set_error)) = (failed, (*access).set_error) {
        let m = guard::c_message(&format!("calibsql: {m}"));
        set_error(info, m.as_ptr() as *const c_char);
    }
    loaded
}
