//! The state `calibration_slope` and `hosmer_lemeshow` share: per
//! group, one point per distinct score with Σw and Σw·y, kept in the fits' own state
//! ([`FitState`]) and merged, serialised and accounted by the fits' kernel ([`FitKernel`]):
//! exact up to `calibsql.fit_exact_cap` distinct scores per group (default
//! [`NONPARAMETRIC_EXACT_CAP`]), then pooled into the fits' fixed grid of 2⁸ cells per power of
//! two (see the `fit` module), so results do not depend on partitioning either way.
//!
//! The score is p itself, or logit(p) for `calibration_slope`, which skips rows with p = 0 or
//! 1 (their logit is infinite) and leaves them out of its row count.

use std::ops::Range;

use arrow::array::{ArrayRef, BooleanArray};
use datafusion_common::Result;

use crate::common::{check_p, check_w, check_y, f64s, for_each_row, usable_rows};
use crate::fit::{FitKernel, FitSettings, FitState, Method, NONPARAMETRIC_EXACT_CAP};
use crate::kernel::Kernel;
use crate::labels::f64_labels;

/// What a point's score is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Score {
    /// p.
    P,
    /// ln(p / (1 − p)); rows with p = 0 or 1 are skipped.
    Logit,
}

/// What the kernel's value is: one of the aggregates that keep points.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Out {
    Slope,
    HosmerLemeshow { groups: usize },
}

/// The grid resolution of the nonparametric aggregates is `fit_isotonic`'s (the method only
/// picks it; the kernel never fits).
pub(crate) const NONPARAMETRIC_GRID: Method = Method::Isotonic;

/// The default exact cap, which `calibsql.fit_exact_cap` replaces.
pub(crate) const DEFAULT_CAP: usize = NONPARAMETRIC_EXACT_CAP;

#[derive(Debug)]
pub(crate) struct PointsKernel {
    func: &'static str,
    score: Score,
    w_col: Option<usize>,
    out: Out,
    inner: FitKernel,
}

impl PointsKernel {
    pub(crate) fn new(
        func: &'static str,
        score: Score,
        w_col: Option<usize>,
        out: Out,
        (grid, cap): (Method, usize),
    ) -> Self {
        Self {
            func,
            score,
            w_col,
            out,
            inner: FitKernel::for_field(
                grid,
                cap,
                FitSettings {
                    count: 0,
                    quantile: false,
                    ips: false,
                    lambda: 0.0,
                },
            ),
        }
    }
}

impl Kernel for PointsKernel {
    fn empty(&self) -> Result<Self> {
        Ok(Self {
            inner: self.inner.empty()?,
            ..*self
        })
    }

    fn resize(&mut self, n: usize) {
        self.inner.resize(n)
    }

    fn num_groups(&self) -> usize {
        self.inner.num_groups()
    }

    fn update(
        &mut self,
        values: &[ArrayRef],
        groups: &[usize],
        filter: Option<&BooleanArray>,
    ) -> Result<()> {
        let func = self.func;
        let p = f64s(&values[0]).values();
        let y_f64 = f64_labels(&values[1])?;
        let y = &y_f64[..];
        let w = self.w_col.map(|c| f64s(&values[c]).values());
        let mut data = vec![&values[0], &values[1]];
        data.extend(self.w_col.map(|c| &values[c]));
        let mask = usable_rows(&data, filter);
        let score = self.score;
        let one_group = self.inner.groups.len() == 1;
        let (states, bytes) = (&mut self.inner.groups, &mut self.inner.bytes);
        for_each_row(p.len(), &mask, |i| {
            let pi = check_p(func, "p", p[i])?;
            let yi = check_y(func, y[i])?;
            let wi = match w {
                Some(w) => check_w(func, w[i])?,
                None => 1.0,
            };
            let s = match score {
                Score::P => pi,
                Score::Logit if pi == 0.0 || pi == 1.0 => return Ok(()),
                Score::Logit => (pi / (1.0 - pi)).ln(),
            };
            let st = &mut states[if one_group { 0 } else { groups[i] }];
            let before = st.len_bytes();
            st.add_point(s, wi, wi * yi);
            st.rows += 1;
            st.observe_range(s, s);
            *bytes = *bytes + st.len_bytes() - before;
            Ok(())
        })
    }

    fn merge(&mut self, states: &[ArrayRef], groups: &[usize]) -> Result<()> {
        self.inner.merge(states, groups)
    }

    fn state(&self, range: Range<usize>) -> Result<Vec<ArrayRef>> {
        self.inner.state(range)
    }

    fn evaluate(&mut self, range: Range<usize>) -> Result<ArrayRef> {
        // A group without rows is NULL.
        let states: Vec<Option<&FitState>> = self.inner.groups[range]
            .iter()
            .map(|st| (st.rows > 0).then_some(st))
            .collect();
        match self.out {
            Out::Slope => super::calibration_slope::evaluate(&states),
            Out::HosmerLemeshow { groups } => super::hosmer_lemeshow::evaluate(&states, groups),
        }
    }

    fn drain(&mut self, n: usize) {
        self.inner.drain(n)
    }

    fn size(&self) -> usize {
        self.inner.size()
    }
}

/// Declares a point-keeping aggregate `$t`: its struct (signature, exact cap), `new`, `capped`,
/// `cap` and its `KernelAggregate` form, whose exact cap is the `calibsql.fit_exact_cap`
/// setting. The type's own `impl` supplies `shape()` and `kernel()`.
macro_rules! points_aggregate {
    ($(#[$doc:meta])* $t:ident) => {
        $(#[$doc])*
        #[derive(Debug, PartialEq, Eq, Hash)]
        pub struct $t {
            signature: datafusion_expr::Signature,
            /// Distinct scores kept exactly per group; `None`: the default.
            exact_cap: Option<usize>,
        }

        impl Default for $t {
            fn default() -> Self {
                Self::new()
            }
        }

        impl $t {
            pub fn new() -> Self {
                let mut f = Self {
                    signature: datafusion_expr::Signature::user_defined(
                        datafusion_expr::Volatility::Immutable,
                    ),
                    exact_cap: None,
                };
                f.signature = f.shape().signature();
                f
            }

            /// This aggregate with `cap` distinct scores kept exactly.
            pub(crate) fn capped(&self, cap: usize) -> Self {
                Self {
                    signature: self.signature.clone(),
                    exact_cap: Some(cap),
                }
            }

            /// Distinct scores kept exactly per group.
            fn cap(&self) -> usize {
                self.exact_cap.unwrap_or($crate::inference::points::DEFAULT_CAP)
            }
        }

        $crate::kernel::kernel_aggregate!($t, false, {
            fn with_exact_cap(
                &self,
                cap: usize,
            ) -> Option<std::sync::Arc<dyn $crate::kernel::KernelAggregate>> {
                Some(std::sync::Arc::new(self.capped(cap)))
            }
        });
    };
}
pub(crate) use points_aggregate;

/// The `AggregateUDFImpl` of an aggregate over this state: its struct result of `$fields`,
/// the fits' state fields, and its documentation `$doc` with the shared argument texts.
macro_rules! points_udaf {
    ($t:ident, $fields:expr, $doc:ident) => {
        impl datafusion_expr::AggregateUDFImpl for $t {
            $crate::kernel::kernel_udaf_common!();

            fn return_type(
                &self,
                arg_types: &[arrow::datatypes::DataType],
            ) -> datafusion_common::Result<arrow::datatypes::DataType> {
                self.shape().coerce(arg_types)?;
                Ok(arrow::datatypes::DataType::Struct($fields))
            }

            fn state_fields(
                &self,
                args: datafusion_expr::function::StateFieldsArgs,
            ) -> datafusion_common::Result<Vec<arrow::datatypes::FieldRef>> {
                Ok($crate::fit::fit_state_fields(args.name))
            }

            fn documentation(&self) -> Option<&datafusion_expr::Documentation> {
                $crate::common::documented($doc.doc(), &self.shape())
            }
        }
    };
}
pub(crate) use points_udaf;
