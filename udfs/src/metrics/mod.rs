//! The metric aggregates, one family per file:
//! - [`binning`]: the bin rules of every tool whose numbers we reproduce (shared);
//! - [`binned`]: `ece`, `mce`, `reliability`, `ace`, `rmsce`;
//! - `bin_sums`: their per-bin sums (fixed-edge bins);
//! - `quantile_bins`: their `'quantile'` bins over kept rows (`quantile_pass`: in one pass);
//! - [`loss`]: `logloss`, `brier`, `ips_logloss`, `normalized_entropy`;
//! - [`auc`]: exact ROC AUC;
//! - [`field`]: `field_ece`, `field_rce`;
//! - [`smooth`]: `smooth_ece` (relplot's smooth ECE);
//! - [`debiased`]: `ece_debiased` (Kumar et al.'s debiased L2 error);
//! - [`multi_field`]: `multi_field_rce` (field_rce over several fields);
//! - [`mvce`]: `mvce` (multi-view calibration error);
//! - [`top_label`]: `ece_top_label`, `mce_top_label`, `reliability_top_label` (multiclass,
//!   over `binned`'s kernel);
//! - [`classwise`]: `ece_classwise` (multiclass, `binned`'s kernel per class).

pub mod auc;
mod bin_sums;
pub mod binned;
pub mod binning;
pub mod classwise;
pub mod debiased;
pub mod field;
pub mod loss;
pub mod multi_field;
pub mod mvce;
mod quantile_bins;
mod quantile_pass;
pub mod smooth;
pub mod top_label;
