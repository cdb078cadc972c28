//! States and the things results must not depend on, one test binary:
//! `cargo test --test state` (one module with `cargo test --test state state_merge::`).
//!
//! - [`state_roundtrip`]: any split into batches and partial states merges to the one-pass
//!   result, for every aggregate, row and grouped accumulators alike;
//! - [`state_merge`]: stored states (`F_state` / `F_merge`) through Parquet, sliding windows;
//! - [`invariance`]: batch size, partitioning and thread count change nothing;
//! - [`memory`]: `--memory-limit` holds for the aggregates that keep rows.

#[path = "../support/child.rs"]
mod child;
#[path = "../support/mod.rs"]
mod support;

mod invariance;
mod memory;
mod state_merge;
mod state_roundtrip;
