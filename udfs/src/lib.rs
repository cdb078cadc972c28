//! Placeholder while the functions are written.
use std::sync::Arc;
use datafusion_expr::{AggregateUDF, ScalarUDF};

pub fn all_scalar_functions() -> Vec<Arc<ScalarUDF>> { vec![] }
pub fn all_aggregate_functions() -> Vec<Arc<AggregateUDF>> { vec![] }
