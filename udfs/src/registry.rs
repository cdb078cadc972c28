//! The one list of calibsql's functions, [`functions`]: each aggregate and scalar written
//! once, an aggregate whose state is bounded with its `_state` / `_merge` twins
//! ([`crate::state`]). Everything else derives from it: [`crate::all_aggregate_functions`],
//! [`crate::all_scalar_functions`] (so `SHOW FUNCTIONS` and `information_schema`, which list
//! what is registered), the named-argument defaults ([`crate::argument_default`], read from
//! each function's [`CallShape`]) and the generated `docs/functions.md` (which reads the
//! registered functions' documentation).
//!
//! Adding a function is one line here: see the crate documentation, "Adding a function".

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use datafusion_expr::{AggregateUDF, AggregateUDFImpl, ScalarUDF, ScalarUDFImpl};

use crate::common::{CallShape, Shaped};
use crate::fit::{FieldFit, Fit, FitOvr, Method};
use crate::inference::bootstrap::{BootstrapEce, BootstrapKind};
use crate::inference::calibration_slope::CalibrationSlope;
use crate::inference::cbpe::Cbpe;
use crate::inference::decomposition::CalibrationDecomposition;
use crate::inference::delong::{AucInterval, AucTest};
use crate::inference::field_bias::FieldBias;
use crate::inference::hosmer_lemeshow::HosmerLemeshow;
use crate::inference::spiegelhalter::Spiegelhalter;
use crate::kernel::{KernelAggregate, KernelSource};
use crate::metrics::auc::Auc;
use crate::metrics::binned::{Binned, BinnedKind};
use crate::metrics::classwise::EceClasswise;
use crate::metrics::debiased::EceDebiased;
use crate::metrics::field::{FieldKind, FieldMetric};
use crate::metrics::loss::{LossKind, MeanLoss};
use crate::metrics::multi_field::MultiFieldRce;
use crate::metrics::mvce::Mvce;
use crate::metrics::smooth::SmoothEce;
use crate::metrics::top_label::{TopLabel, TopLabelKind};
use crate::model::Calibrate;
use crate::scalars::{CalibScalar, ScalarKind};

/// Every function of the crate, in documentation order (within a section of
/// `docs/functions.md`, functions appear in this order; the twins of the aggregates
/// registered [`with_states`] follow in the same order in the "Stored States" section).
fn functions() -> Vec<Function> {
    let mut functions = vec![
        with_states(Binned::new(BinnedKind::Ece)),
        with_states(Binned::new(BinnedKind::Mce)),
        with_states(Binned::new(BinnedKind::Reliability)),
        with_states(Binned::new(BinnedKind::Ace)),
        with_states(Binned::new(BinnedKind::Rmsce)),
        with_states(MeanLoss::new(LossKind::LogLoss)),
        with_states(MeanLoss::new(LossKind::Brier)),
        with_states(MeanLoss::new(LossKind::IpsLogLoss)),
        with_states(MeanLoss::new(LossKind::NormalizedEntropy)),
        aggregate(Auc::new()),
        with_states(SmoothEce::new()),
        aggregate(EceDebiased::new()),
        with_states(FieldMetric::new(FieldKind::Ece)),
        with_states(FieldMetric::new(FieldKind::Rce)),
        aggregate(MultiFieldRce::new()),
        with_states(Mvce::new()),
        with_states(TopLabel::new(TopLabelKind::Ece)),
        with_states(TopLabel::new(TopLabelKind::Mce)),
        with_states(TopLabel::new(TopLabelKind::Reliability)),
        with_states(EceClasswise::new()),
        with_states(Spiegelhalter::new()),
        with_states(CalibrationSlope::new()),
        with_states(HosmerLemeshow::new()),
        with_states(CalibrationDecomposition::new()),
        with_states(FieldBias::new()),
        with_states(BootstrapEce::new(BootstrapKind::Ece)),
        with_states(BootstrapEce::new(BootstrapKind::EceDiff)),
        aggregate(AucInterval::new()),
        aggregate(AucTest::new()),
        with_states(Cbpe::new()),
    ];
    // The calibrators' `fit_*`, listed in `calibrators!` (fit/mod.rs).
    functions.extend(Method::fitted().map(|m| {
        if m.is_field_aware() {
            with_states(FieldFit::new(m))
        } else {
            with_states(Fit::new(m))
        }
    }));
    functions.push(with_states(FitOvr::new()));
    functions.extend([
        scalar(CalibScalar::new(ScalarKind::Sigmoid)),
        scalar(CalibScalar::new(ScalarKind::Logit)),
        scalar(CalibScalar::new(ScalarKind::WilsonInterval)),
        scalar(CalibScalar::new(ScalarKind::WilsonZ)),
        scalar(CalibScalar::new(ScalarKind::ConfCalibMultiplier)),
        scalar(CalibScalar::new(ScalarKind::PopularityPropensity)),
        scalar(CalibScalar::new(ScalarKind::DownsampleCorrect)),
        scalar(Calibrate::new()),
    ]);
    functions
}

/// A function as the registry holds it.
enum Function {
    Aggregate {
        udaf: Arc<AggregateUDF>,
        kernel: Arc<dyn KernelSource>,
        shape: Option<CallShape>,
        /// `F` and its `F_state` and `F_merge`, for an aggregate whose state is bounded.
        twins: Option<Twins>,
    },
    Scalar {
        udf: Arc<ScalarUDF>,
        shape: Option<CallShape>,
    },
}

/// An aggregate whose state is bounded, as the `_state` / `_merge` wrappers see it, and
/// those two.
type Twins = (
    Arc<dyn KernelAggregate>,
    [(Arc<AggregateUDF>, Arc<dyn KernelSource>); 2],
);

/// An aggregate with `_state` and `_merge` twins: a [`KernelAggregate`] whose state is
/// bounded.
fn with_states(f: impl KernelAggregate) -> Function {
    let shape = f.call_shape();
    let inner: Arc<dyn KernelAggregate> = Arc::new(f);
    Function::Aggregate {
        udaf: Arc::new(AggregateUDF::new_from_shared_impl(
            Arc::clone(&inner) as Arc<dyn AggregateUDFImpl>
        )),
        kernel: Arc::clone(&inner) as Arc<dyn KernelSource>,
        shape: Some(shape),
        twins: Some((Arc::clone(&inner), crate::state::twins(inner))),
    }
}

/// An aggregate without stored states (its state grows with the rows, or it is not a kernel).
fn aggregate(f: impl AggregateUDFImpl + Shaped + KernelSource) -> Function {
    let f = Arc::new(f);
    Function::Aggregate {
        shape: f.call_shape(),
        udaf: Arc::new(AggregateUDF::new_from_shared_impl(
            Arc::clone(&f) as Arc<dyn AggregateUDFImpl>
        )),
        kernel: f,
        twins: None,
    }
}

fn scalar(f: impl ScalarUDFImpl + Shaped) -> Function {
    Function::Scalar {
        shape: f.call_shape(),
        udf: Arc::new(ScalarUDF::new_from_impl(f)),
    }
}

/// The registry, built once.
struct Registry {
    /// The functions' aggregates, then their twins.
    aggregates: Vec<Arc<AggregateUDF>>,
    twins: Vec<Arc<AggregateUDF>>,
    /// The aggregates that have twins.
    stateful: Vec<Arc<dyn KernelAggregate>>,
    scalars: Vec<Arc<ScalarUDF>>,
    /// Every aggregate's kernel source (the twins' too), by name.
    kernels: HashMap<String, Arc<dyn KernelSource>>,
    /// In registry order.
    shapes: Vec<CallShape>,
    /// By function name (the `_state` twins under their own names, with the shape of the
    /// aggregate they wrap, whose arguments they take).
    by_name: HashMap<String, CallShape>,
}

fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(|| {
        let mut r = Registry {
            aggregates: vec![],
            twins: vec![],
            stateful: vec![],
            scalars: vec![],
            kernels: HashMap::new(),
            shapes: vec![],
            by_name: HashMap::new(),
        };
        for f in functions() {
            match f {
                Function::Aggregate {
                    udaf,
                    kernel,
                    shape,
                    twins,
                } => {
                    if let Some(shape) = shape {
                        r.shapes.push(shape);
                        r.by_name.insert(udaf.name().to_string(), shape);
                        if let Some((_, [(state, _), _])) = &twins {
                            r.by_name.insert(state.name().to_string(), shape);
                        }
                    }
                    r.kernels.insert(udaf.name().to_string(), kernel);
                    r.aggregates.push(udaf);
                    if let Some((inner, pair)) = twins {
                        r.stateful.push(inner);
                        for (twin, kernel) in pair {
                            r.kernels.insert(twin.name().to_string(), kernel);
                            r.twins.push(twin);
                        }
                    }
                }
                Function::Scalar { udf, shape } => {
                    if let Some(shape) = shape {
                        r.shapes.push(shape);
                        r.by_name.insert(udf.name().to_string(), shape);
                    }
                    r.scalars.push(udf);
                }
            }
        }
        r.aggregates.extend(r.twins.iter().cloned());
        r
    })
}

/// Every aggregate: the functions of [`functions`], then their `_state` / `_merge` twins.
pub(crate) fn aggregates() -> Vec<Arc<AggregateUDF>> {
    registry().aggregates.clone()
}

pub(crate) fn scalars() -> Vec<Arc<ScalarUDF>> {
    registry().scalars.clone()
}

/// The `_state` and `_merge` twins, in registry order.
pub(crate) fn twins() -> Vec<Arc<AggregateUDF>> {
    registry().twins.clone()
}

/// The aggregates that have `_state` / `_merge` twins, in registry order.
pub(crate) fn stateful() -> &'static [Arc<dyn KernelAggregate>] {
    &registry().stateful
}

/// The kernel source of the aggregate registered under `name` (a twin's too).
pub(crate) fn kernel_source(name: &str) -> Option<&'static Arc<dyn KernelSource>> {
    registry().kernels.get(name)
}

/// The call shape registered under `name` (a `_state` twin has its aggregate's), if any.
pub(crate) fn shape_of(name: &str) -> Option<CallShape> {
    registry().by_name.get(name).copied()
}

/// The SQL literal an optional argument of `func` stands for when a call leaves it out, as
/// the function's signature declares it; None for an unknown function or argument, or one
/// without a literal default (a data column such as `propensity`, or `sigma`, whose absence
/// means "choose it"). Named calls that skip an optional argument (`ece(p, y, w => weight)`)
/// are completed with these by the engine (see `calibsql::named_args`), since DataFusion 55
/// itself cannot skip one.
pub fn argument_default(func: &str, arg: &str) -> Option<&'static str> {
    let shape = registry().by_name.get(func)?;
    shape
        .required
        .iter()
        .chain(shape.optional)
        .find(|a| a.name == arg)?
        .default
}

/// The name of every constant-only argument of any function, in registry order: what
/// `docs/functions.md` lists as "must be constants".
pub fn literal_argument_names() -> Vec<&'static str> {
    let mut names: Vec<&'static str> = vec![];
    for a in registry()
        .shapes
        .iter()
        .flat_map(|s| s.required.iter().chain(s.optional))
    {
        if a.is_literal() && !names.contains(&a.name) {
            names.push(a.name);
        }
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_come_from_the_signatures() {
        assert_eq!(argument_default("ece", "n_bins"), Some("15"));
        assert_eq!(argument_default("ace", "strategy"), Some("'quantile'"));
        assert_eq!(argument_default("ece_state", "strategy"), Some("'uniform'"));
        assert_eq!(argument_default("fit_confcalib", "n_bins"), Some("10"));
        assert_eq!(argument_default("field_rce", "eps"), Some("0.01"));
        assert_eq!(argument_default("fit_platt", "propensity"), Some("1.0"));
        assert_eq!(argument_default("fit_ilps", "propensity"), None);
        assert_eq!(argument_default("ece_merge", "n_bins"), None);
        assert_eq!(argument_default("no_such_function", "w"), None);
    }
}
