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
pub mod inference;
mod kernel;
mod labels;
pub mod metrics;
pub mod model;
mod optim;
pub mod scalars;
pub mod state;
pub mod stats;
mod values;

pub use common::argument_default;
pub use metrics::{auc, binned, binning, field, loss};

use binned::{Binned, BinnedKind};
use field::{FieldKind, FieldMetric};
use fit::{Fit, FitMethod};
use inference::bootstrap::{BootstrapEce, BootstrapKind};
use loss::{LossKind, MeanLoss};
use scalars::{CalibScalar, ScalarKind};

/// Every aggregate of this crate.
pub fn all_aggregate_functions() -> Vec<Arc<AggregateUDF>> {
    let udaf = |f| Arc::new(AggregateUDF::new_from_shared_impl(f));
    vec![
        udaf(Arc::new(Binned::new(BinnedKind::Ece))),
        udaf(Arc::new(Binned::new(BinnedKind::Mce))),
        udaf(Arc::new(Binned::new(BinnedKind::Reliability))),
        udaf(Arc::new(Binned::new(BinnedKind::Ace))),
        udaf(Arc::new(Binned::new(BinnedKind::Rmsce))),
        udaf(Arc::new(MeanLoss::new(LossKind::LogLoss))),
        udaf(Arc::new(MeanLoss::new(LossKind::Brier))),
        udaf(Arc::new(MeanLoss::new(LossKind::IpsLogLoss))),
        udaf(Arc::new(MeanLoss::new(LossKind::NormalizedEntropy))),
        udaf(Arc::new(auc::Auc::new())),
        udaf(Arc::new(metrics::smooth::SmoothEce::new())),
        udaf(Arc::new(metrics::debiased::EceDebiased::new())),
        udaf(Arc::new(FieldMetric::new(FieldKind::Ece))),
        udaf(Arc::new(FieldMetric::new(FieldKind::Rce))),
        udaf(Arc::new(metrics::multi_field::MultiFieldRce::new())),
        udaf(Arc::new(metrics::mvce::Mvce::new())),
        udaf(Arc::new(Fit::new(FitMethod::Platt))),
        udaf(Arc::new(Fit::new(FitMethod::Temperature))),
        udaf(Arc::new(Fit::new(FitMethod::Beta))),
        udaf(Arc::new(Fit::new(FitMethod::Gaussian))),
        udaf(Arc::new(Fit::new(FitMethod::Gamma))),
        udaf(Arc::new(Fit::new(FitMethod::Isotonic))),
        udaf(Arc::new(Fit::new(FitMethod::Histogram))),
        udaf(Arc::new(Fit::new(FitMethod::Ilps))),
        udaf(Arc::new(Fit::new(FitMethod::Bbq))),
        udaf(Arc::new(fit::FieldFit::new(FitMethod::ConfCalib))),
        udaf(Arc::new(fit::FieldFit::new(FitMethod::FieldCalib))),
        udaf(Arc::new(BootstrapEce::new(BootstrapKind::Ece))),
        udaf(Arc::new(BootstrapEce::new(BootstrapKind::EceDiff))),
        udaf(Arc::new(inference::delong::AucInterval::new())),
        udaf(Arc::new(inference::delong::AucTest::new())),
    ]
    .into_iter()
    .chain(state::state_functions())
    .collect()
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
    [
        ScalarKind::Sigmoid,
        ScalarKind::Logit,
        ScalarKind::WilsonInterval,
        ScalarKind::WilsonZ,
        ScalarKind::ConfCalibMultiplier,
        ScalarKind::PopularityPropensity,
    ]
    .into_iter()
    .map(|k| Arc::new(ScalarUDF::new_from_impl(CalibScalar::new(k))))
    .chain(std::iter::once(Arc::new(ScalarUDF::new_from_impl(
        model::Calibrate::new(),
    ))))
    .collect()
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
