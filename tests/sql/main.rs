//! The SQL surface, one test binary: `cargo test --test sql` (one module with
//! `cargo test --test sql slt::`, one slt file with `cargo test --test sql slt::binned`).
//!
//! - [`constant_join`]: a join with a one-row side (a model) becomes constants, same results;
//! - [`slt`]: every `tests/slt/*.slt` file, values from the generators in `tests/slt/gen/`;
//! - [`docs_examples`]: every function's documented example prints what its doc shows;
//! - [`functions_doc`]: `docs/functions.md` is generated and not stale;
//! - [`named_args`]: optional arguments by name mean what leaving them out means;
//! - [`errors`]: bad input is rejected with the function, argument and value, never a panic;
//! - [`bad_input`]: every registered aggregate × every kind of bad input gives its documented
//!   outcome (a table a new function must join);
//! - [`reports`]: every report in `sql/` runs through the binary.

#[path = "../support/command.rs"]
mod command;

mod bad_input;
mod constant_join;
mod docs_examples;
mod errors;
mod functions_doc;
mod named_args;
mod reports;
mod slt;
