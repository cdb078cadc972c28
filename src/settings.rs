//! calibsql's session settings, set like DataFusion's (`SET calibsql.fit_exact_cap = 20000000`,
//! `information_schema.df_settings` (as `fit_exact_cap`: DataFusion 55 lists extension
//! settings without their prefix), or `SessionConfig::with_option_extension`).
//!
//! DataFusion hands an aggregate function no session settings when it builds its
//! accumulator, so a setting that changes how an aggregate computes is applied while the
//! query is planned: [`ApplySettings`], an analyzer rule, replaces the function in the plan by
//! one configured with the setting (`calibsql_udfs::with_exact_cap`).

use std::sync::Arc;

use datafusion::common::config::{ConfigExtension, ConfigOptions};
use datafusion::common::extensions_options;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::Result;
use datafusion::logical_expr::{Expr, LogicalPlan};
use datafusion::optimizer::AnalyzerRule;

use crate::udfs::fit::NONPARAMETRIC_EXACT_CAP;

extensions_options! {
    /// calibsql's settings (prefix `calibsql`).
    pub struct CalibsqlOptions {
        /// Distinct scores per group that fit_isotonic, fit_histogram, fit_bbq and
        /// fit_confcalib (and their _state/_merge forms) keep exactly, about 30 bytes each,
        /// counted by the memory pool; past it a group's scores are pooled into grid cells of
        /// relative width 2^-8 (docs/SEMANTICS.md, "Exact cap").
        pub fit_exact_cap: usize, default = NONPARAMETRIC_EXACT_CAP
    }
}

impl ConfigExtension for CalibsqlOptions {
    const PREFIX: &'static str = "calibsql";
}

/// `calibsql.fit_exact_cap` of `config` (its default when the session has no calibsql settings).
pub fn fit_exact_cap(config: &ConfigOptions) -> usize {
    config
        .extensions
        .get::<CalibsqlOptions>()
        .map_or(NONPARAMETRIC_EXACT_CAP, |o| o.fit_exact_cap)
}

/// The analyzer rule that applies [`CalibsqlOptions`] to the functions of a plan.
#[derive(Debug, Default)]
pub struct ApplySettings;

impl AnalyzerRule for ApplySettings {
    fn analyze(&self, plan: LogicalPlan, config: &ConfigOptions) -> Result<LogicalPlan> {
        let cap = fit_exact_cap(config);
        if cap == NONPARAMETRIC_EXACT_CAP {
            return Ok(plan);
        }
        plan.transform_up_with_subqueries(|node| {
            node.map_expressions(|expr| {
                expr.transform_up(|expr| match expr {
                    Expr::AggregateFunction(mut call) => {
                        match crate::udfs::with_exact_cap(&call.func, cap) {
                            Some(capped) => {
                                call.func = Arc::new(capped);
                                Ok(Transformed::yes(Expr::AggregateFunction(call)))
                            }
                            None => Ok(Transformed::no(Expr::AggregateFunction(call))),
                        }
                    }
                    other => Ok(Transformed::no(other)),
                })
            })
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "calibsql_apply_settings"
    }
}
