//! # calibsql-udfs
//!
//! DataFusion functions to evaluate, debias and calibrate the probabilities of ranking and CTR
//! models in SQL: calibration metrics (ECE, MCE, reliability, ACE, RMSCE, smooth ECE, debiased
//! ECE, log loss, Brier, normalized entropy, IPS log loss, AUC, field-level ECE/RCE, MVCE, and
//! a multiclass model's top-label metrics and list log loss and Brier) as aggregates; the
//! performance calibrated probabilities imply without labels (`cbpe`); eleven calibrators fitted as aggregates (`fit_platt`, `fit_temperature`,
//! `fit_beta_calib`, `fit_gaussian_calib`, `fit_gamma_calib`, `fit_isotonic`,
//! `fit_histogram`, `fit_ilps`, `fit_bbq`, `fit_field_calib`, `fit_confcalib`) and applied by
//! the scalar `calibrate`; the `_state` / `_merge` twins that store and merge partial states;
//! and the Wilson / ConfCalib / propensity / downsampling helpers as scalars. What the
//! functions compute, and what calibsql chose where the papers and tools leave room, is
//! `docs/functions.md` (generated from the functions' own documentation) and
//! `docs/SEMANTICS.md`.
//!
//! ```
//! # use calibsql_udfs::{all_aggregate_functions, all_scalar_functions};
//! // register on a DataFusion SessionContext with `ctx.register_udaf((*f).clone())` …
//! assert!(all_aggregate_functions().iter().any(|f| f.name() == "ece"));
//! assert!(all_scalar_functions().iter().any(|f| f.name() == "sigmoid"));
//! ```
//!
//! ## Where things are
//!
//! - `registry.rs`: the one list of functions; everything that enumerates functions reads it.
//! - `common.rs`: argument roles and call shapes (`Arg`, `CallShape`, the shared arguments in
//!   `common::args`), literal arguments, row masks, validation.
//! - `multiclass.rs`: a multiclass row (a list of class probabilities and a class index), read
//!   and checked once for every multiclass function.
//! - [`cancel`]: a running statement's cancel flag, which the fits' solvers look at.
//! - `kernel.rs`: an aggregate written once as a `Kernel`, served as both a
//!   `GroupsAccumulator` and an `Accumulator`.
//! - [`metrics`]: one family of metrics a file; [`fit`]: one calibrator a file, plus the
//!   shared fitting aggregate, state and solvers; [`model`]: the model struct and
//!   `calibrate`; [`state`]: the `_state` / `_merge` wrappers; [`scalars`]: the scalar helpers.
//!
//! ## Adding a function
//!
//! A metric is one new file and one line. Say `my_metric(p, y [, n_bins [, w]])`:
//!
//! 1. `metrics/my_metric.rs` (and `pub mod my_metric;` in `metrics/mod.rs`): a struct holding
//!    its `Signature`, with
//!    - `fn shape(&self) -> CallShape`: its name and arguments, the shared ones from
//!      `common::args` (`args::P`, `args::Y`, `args::W`, `args::N_BINS`, …, which carry their
//!      default and documentation), its own as
//!      `Arg::lit_num("level").or("0.95").doc("Confidence level in (0, 1). Default 0.95.")`:
//!      the default, a SQL literal, and the text sit next to the name; the default is what
//!      named calls that skip the argument and the stored states' parameters use (the
//!      `signature_from_shape!` macro writes `new`, `Default` and `shape()` from a shape
//!      constant);
//!    - `fn kernel(&self, args: &AccumulatorArgs) -> Result<K>`: a `Kernel` (kernel.rs) with
//!      its per-group state, `update`, `merge`, `state`, `evaluate`; a metric that computes
//!      another value from an existing kernel's state wraps that kernel, passes the rest on
//!      with `delegate_to_inner!`, and writes only `empty` and `evaluate` (as
//!      `inference/rows.rs` does over `auc`'s state);
//!    - `impl AggregateUDFImpl` with `kernel_udaf_common!(returns DataType::Float64)` (name,
//!      signature, coercion, both accumulators, and a `return_type` that checks the call
//!      against the shape; without `returns …`, write `return_type` yourself, calling
//!      `self.shape().coerce` first), `state_fields` and `documentation` (`#[user_doc]`
//!      with the description and examples, section label as the others; return it through
//!      `common::documented(self.doc(), &self.shape())`, which adds the argument table from
//!      the shape: `common::args`' shared texts, and your own given with `.doc("…")` next to
//!      the argument's name, so a `#[user_doc]` has no `argument(…)`);
//!    - `kernel_aggregate!(MyMetric, retractable)`, which makes it a `KernelAggregate`, the
//!      form the `_state` / `_merge` wrappers take.
//! 2. One line in `registry::functions()`:
//!    - `with_states(MyMetric::new()),` registers `my_metric`, `my_metric_state` and
//!      `my_metric_merge` (a kernel whose state is bounded);
//!    - `aggregate(MyMetric::new()),` registers `my_metric` alone (its state grows with the
//!      rows); it then implements `common::Shaped` (`fn call_shape(&self) ->
//!      Option<CallShape>`, `None` for a variable argument list) and, with
//!      `kernel_source!(MyMetric)` in place of `kernel_aggregate!`, `KernelSource`, through
//!      which other hosts (`host`, the DuckDB extension) build its kernel;
//!    - `scalar(MyScalar::new()),` for a scalar (`ScalarUDFImpl + Shaped`).
//!
//! Nothing else lists functions: `all_aggregate_functions`, `SHOW FUNCTIONS`, named-argument
//! defaults ([`argument_default`]), the state functions and `docs/functions.md` follow.
//! Regenerate the reference with `CALIBSQL_UPDATE_DOCS=1 cargo test --test sql
//! functions_doc`. The registry-driven tests then ask for the new function's cases:
//! `tests/sql/bad_input.rs` (a row of bad inputs, with its stored calls when it has twins),
//! `tests/distributed.rs` (a distributed case), `tests/state/state_roundtrip.rs` (a call),
//! plus its expected values from a generator under `tests/` (see `tests/README.md`).
//!
//! ## Adding a calibrator
//!
//! A calibrator is one new file and one line. Say `fit_my_calib(score, y [, propensity [,
//! clip]])`, stored as method `my_calib`:
//!
//! 1. `fit/my_calib.rs` (and `mod my_calib;` in `fit/mod.rs`): a unit struct implementing
//!    `fit::calibrator::Calibrator`:
//!    - `shape()`: `CallShape { name: "fit_my_calib", required: &[args::SCORE, args::Y],
//!      optional: &[args::PROPENSITY, args::CLIP] }`; the settings the fitting aggregate
//!      reads by name from the arguments (`n_bins`/`n_knots`, `strategy`, `propensity`,
//!      `clip`, `lambda`/`l2`) arrive in `Settings`;
//!    - `documentation()`: its `#[user_doc]` (section "Calibrators");
//!    - `exact_cap()` / `takes_probability()` / `field_aware()` where the defaults (the
//!      parametric cap, a score, no field) do not fit;
//!    - `fit(&self, st: &FitState, settings: &Settings, m: &mut Model)`: fills the model from
//!      one group's state (`st.nodes()`, `st.sorted_points()`), or `fit_fields` for a
//!      field-aware one;
//!    - `apply(&self, m: &ModelRef, row, s)` (or `apply_field`): `calibrate`'s value, reading
//!      the model through `ModelRef`'s checked accessors (`num`, `clamp`, `knots`,
//!      `increasing_knots`, `right_closed_step`, …).
//! 2. One line in `calibrators!` (fit/mod.rs): `MyCalib = "my_calib" => my_calib::MyCalib,`.
//!    It adds the model's [`fit::Method`] value (stored as `"my_calib"`), the dispatch of
//!    `calibrate`, and the registration of `fit_my_calib` with its `_state` / `_merge` twins.
//!
//! A stored method is never renamed: `tests/fits/stored_models.rs` applies models written by
//! an earlier release.
#![deny(clippy::dbg_macro, clippy::print_stdout, clippy::print_stderr)]
#![warn(clippy::clone_on_ref_ptr)]
// Four exceptions, allowed where they are: `metrics::binning::uniform_bin`'s SSE2
// conversion, `values::spill::RunWriter::finish`'s memory map of a spilled file,
// `values::spill::forget_pages`' `madvise` of the pages a reader has read there, and
// `common::release_freed_memory`'s call of glibc's `malloc_trim`.
#![deny(unsafe_code)]

use std::sync::Arc;

use datafusion_common::Result;
use datafusion_expr::registry::FunctionRegistry;
use datafusion_expr::{AggregateUDF, ScalarUDF};

pub mod cancel;
mod common;
mod dense;
mod fastmath;
pub mod fit;
pub mod host;
pub mod inference;
mod kernel;
mod labels;
pub mod metrics;
pub mod model;
mod multiclass;
mod optim;
mod parallel;
mod registry;
pub mod scalars;
pub mod state;
pub mod stats;
mod values;

pub use metrics::{auc, binned, binning, field, loss};
pub use registry::{argument_default, literal_argument_names};
pub use values::spill::spill_to;

/// Every aggregate of this crate: the registry's aggregates, then their `_state` / `_merge`
/// twins.
pub fn all_aggregate_functions() -> Vec<Arc<AggregateUDF>> {
    registry::aggregates()
}

/// `udaf` keeping `cap` distinct scores exactly per group before pooling them into grid
/// cells, if it is one of the aggregates whose cap is a setting — `fit_isotonic`,
/// `fit_histogram`, `fit_bbq`, `fit_confcalib` and their `_state` / `_merge` forms; `None`
/// for any other
/// function. (DataFusion hands an aggregate no session settings, so the calibsql engine
/// applies `SET calibsql.fit_exact_cap` by swapping the function in the plan with this.)
pub fn with_exact_cap(udaf: &AggregateUDF, cap: usize) -> Option<AggregateUDF> {
    let inner = udaf.inner();
    // A registered aggregate answers for itself (`KernelAggregate::with_exact_cap`); a
    // `_state` / `_merge` twin is rebuilt around its aggregate's capped form.
    let capped: Arc<dyn datafusion_expr::AggregateUDFImpl> = match registry::stateful()
        .iter()
        .find(|f| f.name() == inner.name())
    {
        Some(f) => f.with_exact_cap(cap)?,
        None => state::capped_wrapper(inner.as_ref(), cap)?,
    };
    Some(AggregateUDF::new_from_shared_impl(capped))
}

/// Every scalar function of this crate.
pub fn all_scalar_functions() -> Vec<Arc<ScalarUDF>> {
    registry::scalars()
}

/// Registers every function of this crate on `registry` (a `SessionState`, or any
/// [`FunctionRegistry`]), replacing functions of the same name.
pub fn register_all(registry: &mut dyn FunctionRegistry) -> Result<()> {
    for f in all_scalar_functions() {
        registry.register_udf(f)?;
    }
    for f in all_aggregate_functions() {
        registry.register_udaf(f)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn no_duplicate_names() {
        let mut seen = HashSet::new();
        let names = all_aggregate_functions()
            .iter()
            .flat_map(|f| {
                let mut v = vec![f.name().to_string()];
                v.extend(f.aliases().iter().cloned());
                v
            })
            .chain(all_scalar_functions().iter().flat_map(|f| {
                let mut v = vec![f.name().to_string()];
                v.extend(f.aliases().iter().cloned());
                v
            }))
            .collect::<Vec<_>>();
        for n in names {
            assert!(seen.insert(n.clone()), "duplicate function name {n}");
        }
    }

    #[test]
    fn every_function_is_documented() {
        for f in all_aggregate_functions() {
            assert!(
                f.documentation().is_some(),
                "{} has no documentation",
                f.name()
            );
        }
        for f in all_scalar_functions() {
            assert!(
                f.documentation().is_some(),
                "{} has no documentation",
                f.name()
            );
        }
    }
}
