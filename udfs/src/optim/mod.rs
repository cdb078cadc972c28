//! The solvers of the fits, leaves that know nothing of the aggregates: [`active_set`] for
//! the parametric calibrators (at most three parameters under linear inequalities), and
//! [`ordered`] for ILPS and the field-aware fit (ordered knot values and free offsets).

pub(crate) mod active_set;
pub(crate) mod ordered;

pub(crate) use active_set::{minimise, objective, Node};
