//! The numbers of a report: what the page shows and what `--json` (and the page's
//! `calibsql-data` script element) holds. The field names are the JSON schema documented in
//! docs/report.md; every number comes from a SQL aggregate (see `queries.rs`), a few are
//! arithmetic on those (a bin's gap and share of ECE, shown on the page only).

use std::collections::BTreeMap;

use serde::Serialize;

/// Version of the JSON layout; raised when a field changes meaning or goes away.
pub const SCHEMA_VERSION: u32 = 2;

/// Everything a report holds.
#[derive(Debug, Clone, Serialize)]
pub struct ReportData {
    pub schema_version: u32,
    pub title: String,
    /// Where the rows come from (`--table` arguments), as given.
    pub source: Vec<String>,
    /// The SQL whose result the report describes.
    pub sql: String,
    pub calibsql_version: String,
    /// `now()` of the session when the report was computed (UTC).
    pub generated_at: Option<String>,
    pub parameters: Parameters,
    /// Rows the query returned.
    pub rows: i64,
    /// Rows left out because `p`, `y` (or `w`) is NULL or NaN.
    pub rows_dropped: i64,
    /// Of those, rows with a usable p (and w) but no label (`y` NULL).
    pub rows_unlabelled: i64,
    /// Total weight of the rows used (the row count without `w`).
    pub weight: Option<f64>,
    /// First and last `day`, as text (`None` without a `day` column or rows).
    pub time_range: Option<(String, String)>,
    /// The columns the query returned that the report uses.
    pub columns: Columns,
    /// One entry per `model` value (one entry `model: null` without a `model` column).
    pub models: Vec<ModelData>,
    /// Paired comparisons of the model with the lowest ECE against each other model, on the
    /// rows they share by `key` (needs a `key` column and no `w`).
    pub comparisons: Vec<Comparison>,
    /// What could not be computed, and why, for the whole report.
    pub notes: Vec<String>,
    /// The SQL that produced every number, by section.
    pub queries: Vec<Query>,
}

/// The report's parameters.
#[derive(Debug, Clone, Serialize)]
pub struct Parameters {
    pub bins: u32,
    pub strategy: String,
    pub fields: Vec<String>,
    pub reference_days: u32,
    /// Confidence level of every interval.
    pub level: f64,
    /// Segments listed per field before the rest is pooled into "other".
    pub top_segments: u32,
}

/// Which optional columns the query returned.
#[derive(Debug, Clone, Serialize)]
pub struct Columns {
    pub model: bool,
    pub w: bool,
    pub day: bool,
    /// A row id (`key`): the ECE's bootstrap interval and the paired comparison use it.
    pub key: bool,
}

/// One model's numbers.
#[derive(Debug, Clone, Serialize)]
pub struct ModelData {
    /// The `model` value as text (`None` without a `model` column).
    pub model: Option<String>,
    pub rows: i64,
    pub weight: Option<f64>,
    /// Σ w·p and Σ w·y.
    pub sum_p: Option<f64>,
    pub sum_y: Option<f64>,
    /// Calibration ratio Σ w·p / Σ w·y and its interval (the Wilson interval of the observed
    /// rate, with the Kish effective size, mapped through mean p / rate).
    pub ratio: Option<f64>,
    pub ratio_lower: Option<f64>,
    pub ratio_upper: Option<f64>,
    /// `ece(p, y, bins, 'uniform' [, w])`: with the default 15 bins, `ece(p, y)`.
    pub ece: Option<f64>,
    /// `ece_interval(p, y, key, bins, 'uniform', level)`'s bounds (a `key` column, no `w`).
    pub ece_lower: Option<f64>,
    pub ece_upper: Option<f64>,
    /// `ece(p, y, bins, 'quantile' [, w])`.
    pub ece_quantile: Option<f64>,
    /// `mce(p, y, bins, strategy [, w])`.
    pub mce: Option<f64>,
    pub logloss: Option<f64>,
    pub normalized_entropy: Option<f64>,
    pub brier: Option<f64>,
    pub auc: Option<f64>,
    /// With unlabelled rows, `cbpe(p [, 0.5, w])['roc_auc']` over every scored row (labelled
    /// or not), and how many rows that is.
    pub expected_auc: Option<f64>,
    pub scored_rows: Option<i64>,
    /// `auc_interval(p, y, level)`'s DeLong bounds (unweighted: not with `w`).
    pub auc_lower: Option<f64>,
    pub auc_upper: Option<f64>,
    /// `spiegelhalter(p, y [, w])`.
    pub spiegelhalter_z: Option<f64>,
    pub spiegelhalter_p: Option<f64>,
    /// `calibration_slope(p, y [, w])`: the logistic recalibration's intercept and slope,
    /// calibration-in-the-large, and their standard errors.
    pub intercept: Option<f64>,
    pub intercept_se: Option<f64>,
    pub slope: Option<f64>,
    pub slope_se: Option<f64>,
    pub citl: Option<f64>,
    pub citl_se: Option<f64>,
    /// `calibration_decomposition(p, y, 'brier' [, w])`: the CORP decomposition of the Brier
    /// score, `brier = miscalibration − discrimination + uncertainty`.
    pub miscalibration: Option<f64>,
    pub discrimination: Option<f64>,
    pub uncertainty: Option<f64>,
    /// `field_rce(p, y, field [, 0.01, w])` per `--field`.
    pub field_rce: BTreeMap<String, Option<f64>>,
    /// What `reliability(p, y, bins, strategy [, w])` returns, bin by bin.
    pub reliability: Vec<Bin>,
    pub status: Status,
    /// Per day (with a `day` column), in day order.
    pub daily: Vec<Day>,
    /// Per `--field`, its values ranked by weight × |ratio − 1|.
    pub segments: Vec<FieldSegments>,
    /// What could not be computed for this model, and why.
    pub notes: Vec<String>,
}

/// One bin of `reliability()`.
#[derive(Debug, Clone, Serialize)]
pub struct Bin {
    pub bin: i64,
    pub lower: Option<f64>,
    pub upper: Option<f64>,
    pub count: i64,
    pub weight: Option<f64>,
    pub mean_p: Option<f64>,
    pub frac_pos: Option<f64>,
    pub frac_pos_lower: Option<f64>,
    pub frac_pos_upper: Option<f64>,
}

/// A model's status badge (docs/report.md "Status").
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    /// `ok`, `warn`, `alert`, or `unknown` when the ratio could not be computed.
    pub level: &'static str,
    /// The rules that set the level.
    pub reasons: Vec<String>,
}

/// One day of one model: daily and 7-day rolling values, merged from daily states, and the
/// drift rule's band (reference mean ± 3 standard deviations).
#[derive(Debug, Clone, Serialize)]
pub struct Day {
    pub day: String,
    pub rows: i64,
    pub ece: Option<f64>,
    pub ece_7d: Option<f64>,
    pub ece_lower: Option<f64>,
    pub ece_upper: Option<f64>,
    pub ece_alert: bool,
    pub ratio: Option<f64>,
    pub ratio_7d: Option<f64>,
    pub ratio_lower: Option<f64>,
    pub ratio_upper: Option<f64>,
    pub ratio_alert: bool,
    pub logloss: Option<f64>,
    pub logloss_7d: Option<f64>,
    pub logloss_lower: Option<f64>,
    pub logloss_upper: Option<f64>,
    pub logloss_alert: bool,
}

/// The segments of one field.
#[derive(Debug, Clone, Serialize)]
pub struct FieldSegments {
    pub field: String,
    /// Distinct values of the field among this model's rows.
    pub values: i64,
    pub segments: Vec<Segment>,
}

/// One value of a field, or the pooled rest ("other").
#[derive(Debug, Clone, Serialize)]
pub struct Segment {
    /// The value as text (`None` for a NULL value and for "other").
    pub value: Option<String>,
    /// Whether this is the pool of the values below the top ones.
    pub other: bool,
    /// Values pooled (1 for a single value).
    pub values: i64,
    pub rows: i64,
    pub weight: Option<f64>,
    pub ratio: Option<f64>,
    pub ratio_lower: Option<f64>,
    pub ratio_upper: Option<f64>,
    /// `field_bias(p, y, field [, w])`'s Holm-adjusted p-value of this value (`None` for
    /// "other").
    pub p_adjusted: Option<f64>,
    /// `p_adjusted < 1 − level`: the value's miscalibration is real at that family-wise
    /// error rate over the field's values.
    pub significant: bool,
}

/// Two models compared on the rows they share by `key`: `ece_diff_interval` (the paired
/// Poisson bootstrap) and `auc_test` (DeLong's paired test).
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    pub model_a: Option<String>,
    pub model_b: Option<String>,
    /// Rows whose key both models have.
    pub rows: i64,
    /// Of those, rows whose labels differ between the two (`y` of `model_a` is used).
    pub label_mismatches: i64,
    /// `ece(a) − ece(b)` and its interval.
    pub ece_diff: Option<f64>,
    pub ece_diff_lower: Option<f64>,
    pub ece_diff_upper: Option<f64>,
    pub auc_a: Option<f64>,
    pub auc_b: Option<f64>,
    pub auc_diff: Option<f64>,
    pub auc_se: Option<f64>,
    pub auc_z: Option<f64>,
    pub auc_p_value: Option<f64>,
}

/// One SQL statement the report ran.
#[derive(Debug, Clone, Serialize)]
pub struct Query {
    pub section: String,
    pub sql: String,
}

impl ModelData {
    /// The name shown on the page.
    pub fn label(&self) -> &str {
        self.model.as_deref().unwrap_or("all rows")
    }
}
