//! The SQL surface, one test binary: `cargo test --test sql` (one module with
//! `cargo test --test sql slt::`, one slt file with `cargo test --test sql slt::binned`).
//!
//! - [`slt`]: every `tests/slt/*.slt` file, values from the generators in `tests/slt/gen/`;
//! - [`docs_examples`]: every function's documented example prints what its doc shows;
//! - [`functions_doc`]: `docs/functions.md` is generated and not stale;
//! - [`named_args`]: optional arguments by name mean what leaving them out means;
//! - [`errors`]: bad input is rejected with the function, argument and value, never a panic;
//! - [`reports`]: every report in `sql/` runs through the binary.

#[path = "../support/command.rs"]
mod command;

mod docs_examples;
mod errors;
mod functions_doc;
mod named_args;
mod reports;
mod slt;
