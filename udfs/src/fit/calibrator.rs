//! What a calibrator is: a [`Calibrator`] owns its SQL signature and documentation, its fit
//! from the shared fit state ([`super::state::FitState`]: exact points, then the grid) and
//! its application by `calibrate`. The list of calibrators, and so of the model's `method`
//! values, is [`super::Method`] (`calibrators!` in `fit/mod.rs`).

use datafusion_common::{exec_err, Result};
use datafusion_expr::Documentation;

use crate::common::CallShape;
use crate::model::{FieldKey, Model, ModelRef};

use super::state::FitState;
use super::EXACT_CAP;

/// What a fit's call says beyond the rows, read from its arguments by name (see `Fit::kernel`
/// and `FieldFit::kernel`); an argument the calibrator does not take leaves its default here.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Settings {
    /// `n_bins` or `n_knots`.
    pub count: usize,
    /// `fit_histogram`'s strategy is `'quantile'`.
    pub quantile: bool,
    /// The call has a propensity column (the fit is on IPS pseudo-labels).
    pub ips: bool,
    /// `fit_confcalib`'s `lambda` or `fit_field_calib`'s `l2`.
    pub lambda: f64,
}

/// One calibration method (see the module documentation). A calibrator is a unit struct in a
/// file of its own under `fit/`, listed once in `calibrators!` (`fit/mod.rs`).
pub(crate) trait Calibrator: Send + Sync + 'static {
    /// The fitting function's arguments (its name is the function's: `fit_platt`).
    fn shape(&self) -> CallShape;

    /// The fitting function's documentation (`SHOW FUNCTIONS`, `docs/functions.md`).
    fn documentation(&self) -> Option<&'static Documentation>;

    /// Distinct scores kept exactly per group before the grid: [`EXACT_CAP`], or
    /// [`super::NONPARAMETRIC_EXACT_CAP`] for a fit compared with its reference point by
    /// point (which makes the cap the session setting `calibsql.fit_exact_cap`).
    fn exact_cap(&self) -> usize {
        EXACT_CAP
    }

    /// Whether the score is a probability (checked to lie in [0, 1] when fitting).
    fn takes_probability(&self) -> bool {
        false
    }

    /// Whether the fit reads a state's kept rows in any order ([`FitState::rows_only`]), so
    /// that states are handed on and read without sorting them.
    fn reads_rows_in_any_order(&self) -> bool {
        false
    }

    /// Whether the fit takes a field (`FieldFit`) and `calibrate` takes it too.
    fn field_aware(&self) -> bool {
        false
    }

    /// Fills `m` (which holds the method, rows and score range) from one group's state.
    /// Not called for a field-aware calibrator.
    fn fit(&self, _st: &FitState, _settings: &Settings, _m: &mut Model) {}

    /// The model of one group of a field-aware fit from its field values' states (sorted by
    /// value, none empty); `None` for a calibrator that is not field-aware.
    fn fit_fields(&self, _states: &[(&str, &FitState)], _settings: &Settings) -> Option<Model> {
        None
    }

    /// `calibrate(s, m)` for row `row` of the models `m`.
    fn apply(&self, m: &ModelRef<'_>, row: usize, _s: f64) -> Result<f64> {
        let method = m.method_name(row);
        exec_err!(
            "calibrate: a {method} model needs the field: call calibrate(score, model, field)"
        )
    }

    /// `calibrate(s, m, field)` for row `row` of the models `m`.
    fn apply_field(
        &self,
        m: &ModelRef<'_>,
        row: usize,
        _s: f64,
        _key: FieldKey<'_>,
    ) -> Result<f64> {
        let method = m.method_name(row);
        exec_err!("calibrate: a {method} model takes no field; call calibrate(score, model)")
    }
}
