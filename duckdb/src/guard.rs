//! Nothing unwinds into DuckDB: every callback runs its body here, and an error or a panic
//! becomes a DuckDB error with the function's name.

use std::any::Any;
use std::ffi::CString;
use std::panic::{catch_unwind, AssertUnwindSafe};

use datafusion_common::DataFusionError;

/// The text of a caught panic.
pub fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".to_string()
    }
}

/// A message for DuckDB (interior NULs would cut it short).
pub fn c_message(msg: &str) -> CString {
    CString::new(msg.replace('\0', "")).unwrap_or_default()
}

/// `body`'s error or panic as text, None when it succeeded. `function` names the SQL
/// function in a panic's message (calibsql's own errors already name it).
pub fn run(function: &str, body: impl FnOnce() -> Result<(), String>) -> Option<String> {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => None,
        Ok(Err(message)) => Some(message),
        Err(payload) => Some(format!(
            "{function}: internal error: {}",
            panic_message(payload.as_ref())
        )),
    }
}

/// A calibsql error as DuckDB shows it: the function's own message, without DataFusion's
/// "Execution error: " prefix (DuckDB adds its own "Invalid Input Error: ").
pub fn message(e: DataFusionError) -> String {
    match e.find_root() {
        DataFusionError::Execution(m) | DataFusionError::Plan(m) => m.clone(),
        root => root.to_string(),
    }
}
