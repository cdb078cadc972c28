//! # calibsql-udfs
//!
//! DataFusion functions to evaluate, debias and calibrate the probabilities of ranking and CTR
//! models in SQL: calibration metrics (ECE, MCE, reliability, log loss, Brier, AUC, field-level
//! ECE/RCE, IPS log loss) as aggregates, and the Wilson / ConfCalib / propensity helpers as
//! scalars. The SQL contract is `SPEC.md`; where it is silent, `docs/SEMANTICS.md`.
//!
//! ```
//! # use calibsql_udfs::{all_aggregate_functions, all_scalar_functions};
//! // register on a DataFusion SessionContext with `ctx.register_udaf((*f).clone())` …
//! assert!(all_aggregate_functions().iter().any(|f| f.name() == "ece"));
//! assert!(all_scalar_functions().iter().any(|f| f.name() == "sigmoid"));
//! ```
#![deny(clippy::dbg_macro, clippy::print_stdout, clippy::print_stderr)]
#![warn(clippy::clone_on_ref_ptr)]
// One exception, allowed where it is: `metrics::binning::uniform_bin`'s SSE2 conversion.
#![deny(unsafe_code)]

use std::sync::Arc;

use datafusion_common::Result;
use datafusion_expr::registry::FunctionRegistry;
use datafusion_expr::{AggregateUDF, ScalarUDF};

mod common;
mod fastmath;
pub mod fit;
mod kernel;
mod labels;
pub mod metrics;
pub mod model;
mod optim;
mod registry;
pub mod scalars;
pub mod state;
pub mod stats;
mod values;

pub use metrics::{auc, binned, binning, field, loss};
pub use registry::{argument_default, literal_argument_names};

use fit::Fit;

/// Every aggregate of this crate: the registry's aggregates, then their `_state` / `_merge`
/// twins.
pub fn all_aggregate_functions() -> Vec<Arc<AggregateUDF>> {
    registry::aggregates()
}

/// `udaf` keeping `cap` distinct scores exactly per group before pooling them into grid
/// cells, if it is one of the fits whose cap is a setting — `fit_isotonic`, `fit_histogram`,
/// `fit_bbq`, `fit_confcalib` and their `_state` / `_merge` forms; `None` for any other
/// function. (DataFusion hands an aggregate no session settings, so the calibsql engine
/// applies `SET calibsql.fit_exact_cap` by swapping the function in the plan with this.)
pub fn with_exact_cap(udaf: &AggregateUDF, cap: usize) -> Option<AggregateUDF> {
    let inner = udaf.inner();
    let capped: Arc<dyn datafusion_expr::AggregateUDFImpl> =
        if let Some(f) = inner.downcast_ref::<Fit>() {
            Arc::new(f.capped(cap)?)
        } else if let Some(f) = inner.downcast_ref::<fit::FieldFit>() {
            Arc::new(f.capped(cap)?)
        } else {
            state::capped_wrapper(inner.as_ref(), cap)?
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
