//! The calibrators, one test binary: `cargo test --test fits` (one module with
//! `cargo test --test fits fit_grid::`).
//!
//! - [`fits`]: the fitting aggregates and `calibrate` against scipy and scikit-learn;
//! - [`fit_robustness`]: degenerate input, units, files and partitions, Parquet round trips;
//! - [`calibrators`]: the papers' calibrators against numpy / scikit-learn references;
//! - [`fit_grid`]: the bounded state past the exact cap (the grid's error bound);
//! - [`inference`]: the calibration tests and estimates against statsmodels, scipy, ports of R
//!   and model-diagnostics;
//! - [`science`]: the science on generated data whose truth is known (UERM, ConfCalib, ILPS).
//!
//! Data and expected values: `tests/data/`, written by the scripts in `tests/fits_gen/`.

#[path = "../support/mod.rs"]
mod support;

mod calibrators;
mod fit_grid;
mod fit_robustness;
mod fits;
mod inference;
mod science;
mod stored_models;
