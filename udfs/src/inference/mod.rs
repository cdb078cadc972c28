//! Whether a calibration or discrimination difference is real: the inference aggregates, one
//! family per file:
//! - [`bootstrap`]: `ece_interval`, `ece_diff_interval` (a one-pass Poisson bootstrap of the
//!   ECE, with per-row weights hashed from a key, so it merges across partitions);
//! - [`delong`]: `auc_interval`, `auc_test` (DeLong's variance of the AUC: pROC's interval and
//!   paired test).

pub mod bootstrap;
pub mod delong;
