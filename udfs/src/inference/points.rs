//! `calibration_slope`'s state: per group, one point per distinct logit(p) with Σw and Σw·y,
//! kept in the parametric fits' own state ([`FitState`]) and merged, serialised and accounted
//! by the fits' kernel ([`FitKernel`]): exact up to the cap the slope gives it, then pooled
//! into the fits' fixed grid (see the `fit` module), so results do not depend on partitioning
//! either way. Rows with p = 0 or 1 (an infinite logit) are skipped and left out of the row
//! count.

use std::ops::Range;

use arrow::array::ArrayRef;
use datafusion_common::Result;

use crate::common::{check_p, check_y, f64s, for_each_row, usable_rows_pyw, weight_at};
use crate::fit::{FitKernel, FitSettings, FitState, Method};
use crate::kernel::Filter;
use crate::kernel::Kernel;
use crate::labels::{f64_labels, with_labels};

/// The value of groups from their states (`None`: a group without rows).
pub(crate) type Finish = fn(&[Option<&FitState>]) -> Result<ArrayRef>;

#[derive(Debug)]
pub(crate) struct PointsKernel {
    func: &'static str,
    w_col: Option<usize>,
    inner: FitKernel,
    finish: Finish,
}

impl PointsKernel {
    pub(crate) fn new(
        func: &'static str,
        w_col: Option<usize>,
        (grid, cap): (Method, usize),
        finish: Finish,
    ) -> Self {
        Self {
            func,
            w_col,
            finish,
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

/// The point of a row: its logit.
#[inline]
fn logit(p: f64) -> f64 {
    (p / (1.0 - p)).ln()
}

/// Whether every `p` is strictly inside (0, 1) (NaN is not), in one branch-free pass.
fn all_inside(p: &[f64]) -> bool {
    p.iter().fold(true, |ok, &x| ok & (x > 0.0) & (x < 1.0))
}

impl Kernel for PointsKernel {
    crate::kernel::delegate_to_inner!(inner: resize, num_groups, merge, state, take_state, drain, size);

    fn native_labels(&self) -> bool {
        true
    }

    fn empty(&self) -> Result<Self> {
        Ok(Self {
            inner: self.inner.empty()?,
            ..*self
        })
    }

    fn update(&mut self, values: &[ArrayRef], groups: &[usize], filter: Filter) -> Result<()> {
        let func = self.func;
        let p = f64s(&values[0]).values();
        let w = self.w_col.map(|c| f64s(&values[c]).values());
        let mask = usable_rows_pyw(values, (0, 1), self.w_col, filter);
        let one_group = self.inner.groups.len() == 1;
        if one_group && mask.is_none() && w.is_none() && all_inside(p) {
            // The one group's unweighted batch, every row usable and no p at 0 or 1: its
            // logits go through the fits' own batch path, with the labels as stored (a bad
            // label falls through to the checked path, which names it).
            let logits: Vec<f64> = p.iter().map(|&pi| logit(pi)).collect();
            if with_labels!(&values[1], |y| self.inner.update_whole(&logits, y, None)) == Some(true)
            {
                return Ok(());
            }
        }
        let y_f64 = f64_labels(&values[1])?;
        let y = &y_f64[..];
        let (states, bytes) = (&mut self.inner.groups, &mut self.inner.bytes);
        for_each_row(p.len(), &mask, |i| {
            let pi = check_p(func, "p", p[i])?;
            let yi = check_y(func, y[i])?;
            let wi = weight_at(func, w.map(|w| &w[..]), i)?;
            if pi == 0.0 || pi == 1.0 {
                return Ok(());
            }
            let s = logit(pi);
            let st = &mut states[if one_group { 0 } else { groups[i] }];
            let before = st.len_bytes();
            st.add_point(s, wi, wi * yi);
            st.rows += 1;
            st.observe_range(s, s);
            *bytes = *bytes + st.len_bytes() - before;
            Ok(())
        })
    }

    fn evaluate(&mut self, range: Range<usize>) -> Result<ArrayRef> {
        self.inner.settle_sorted(range.clone());
        // A group without rows is NULL.
        let states: Vec<Option<&FitState>> = self.inner.groups[range]
            .iter()
            .map(|st| (st.rows > 0).then_some(st))
            .collect();
        (self.finish)(&states)
    }
}
