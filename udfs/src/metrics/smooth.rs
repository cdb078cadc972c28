//! `smooth_ece`: the smooth ECE of Błasiok & Nakkiran (2023), exactly as relplot 1.0.3's
//! `smECE(p, y)` (bandwidth chosen by relplot's search) and `smECE_sigma(p, y, sigma)`.
//!
//! relplot rounds every row onto a grid of G points in [0, 1] (each row split linearly
//! between its two neighbouring points), once for the residual p − y and once for the count;
//! it then smooths both grids with a Gaussian kernel reflected at 0 and 1, interpolates them
//! at E evaluation points and returns `Σ|r̂|·d̂ / Σd̂`. The grid sums are our state: they merge
//! by addition. The grid size depends on the bandwidth σ, and the automatic bandwidth is only
//! known at the end, so without `sigma` a group's state is the sums on all ten grid sizes the
//! search can reach (332 KB). A group keeps its raw rows until they would take more room than
//! that, then sums them per cell between the grids' points (`FineCells`) and spreads those
//! sums onto the grids when it hands on its state or computes its value.
//! docs/smooth-and-debiased.md has the algorithm step by step.

use std::ops::Range;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Float64Array};
use arrow::buffer::OffsetBuffer;
use arrow::datatypes::{DataType, Field, FieldRef, Float64Type};
use datafusion_common::{exec_err, internal_err, Result};
use datafusion_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion_expr::utils::format_state_name;
use datafusion_expr::{AggregateUDFImpl, Documentation, Signature};
use datafusion_macros::user_doc;

use crate::common::{
    all_probabilities, args, check_p, check_y, f64_list_state_fields, f64s, for_each_row,
    list_array, list_parts, list_values, literal_checked, usable_rows, Arg, CallShape,
};
use crate::kernel::Filter;
use crate::kernel::{kernel_aggregate, kernel_udaf_common, signature_from_shape, Kernel};
use crate::labels::{all_labels, f64_labels, with_labels, Label};

const SHAPE: CallShape = CallShape {
    name: "smooth_ece",
    required: &[args::P, args::Y],
    optional: const {
        &[Arg::lit_num("sigma").doc(
            "Kernel bandwidth, a constant >= 0.0001. Default: chosen as relplot's `smECE` does.",
        )]
    },
};

/// Smallest `sigma` accepted: the grid has about 10/σ points and the work grows with it.
pub const MIN_SIGMA: f64 = 1e-4;

#[user_doc(
    doc_section(label = "Calibration Metrics"),
    description = "Smooth ECE (Błasiok & Nakkiran 2023): the calibration error of the kernel-smoothed \
reliability diagram, a consistent estimator with no bins to choose. Exactly relplot 1.0.3's `smECE(p, y)` \
(the bandwidth σ chosen by relplot's fixed-point search, σ = smooth ECE(σ)) or, with `sigma`, \
`smECE_sigma(p, y, sigma)`. Rows are rounded onto relplot's grid, so the state is bounded (332 KB per group \
without `sigma`, 16 KB with σ ≥ 0.01). NULL when no row is usable.",
    syntax_example = "smooth_ece(p, y [, sigma])",
    sql_example = r#"```sql
> SELECT round(smooth_ece(p, y, 0.1), 6) AS smece FROM (VALUES (0.1, 0), (0.3, 1), (0.6, 0), (0.9, 1)) AS t(p, y);
+-------+
| smece |
+-------+
| 0.282 |
+-------+
```"#
)]
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct SmoothEce {
    signature: Signature,
}

signature_from_shape!(SmoothEce, SHAPE);

impl SmoothEce {
    fn kernel(&self, args: &AccumulatorArgs) -> Result<SmoothKernel> {
        let sigma = match args.exprs.get(2) {
            Some(e) => Some(literal_checked(
                "smooth_ece",
                "sigma",
                e,
                "finite and >= 0.0001",
                |x| x.is_finite() && x >= MIN_SIGMA,
            )?),
            None => None,
        };
        let sizes = match sigma {
            Some(s) => vec![grid_size(s)],
            None => search_grid_sizes(),
        };
        Ok(SmoothKernel::new(sigma, sizes))
    }
}

kernel_aggregate!(SmoothEce, false);

impl AggregateUDFImpl for SmoothEce {
    kernel_udaf_common!(returns DataType::Float64);

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        let mut fields = f64_list_state_fields(
            args.name,
            &["rows_p", "rows_y", "grid_residual", "grid_count"],
        );
        fields.push(Arc::new(Field::new(
            format_state_name(args.name, "n"),
            DataType::Float64,
            true,
        )));
        Ok(fields)
    }

    fn documentation(&self) -> Option<&Documentation> {
        crate::common::documented(self.doc(), &self.shape())
    }
}

/// relplot's grid size for a bandwidth: `max(2000, round(20/σ)) // 2 + 1` (round half even).
pub(crate) fn grid_size(sigma: f64) -> usize {
    let n_raw = (20.0 / sigma).round_ties_even().max(2000.0);
    n_raw as usize / 2 + 1
}

/// The bandwidths relplot's search may evaluate: 1 and k/1024 for k = 2..1023.
fn search_sigmas() -> impl Iterator<Item = f64> {
    std::iter::once(1.0).chain((2..1024).map(|k| k as f64 / 1024.0))
}

/// The distinct grid sizes of [`search_sigmas`] (ten of them), ascending.
fn search_grid_sizes() -> Vec<usize> {
    let mut sizes: Vec<usize> = search_sigmas().map(grid_size).collect();
    sizes.sort_unstable();
    sizes.dedup();
    sizes
}

/// Adds one row to a grid of `g` points: `(1 − frac)` of it at point b, `frac` at b + 1.
#[inline]
fn splat(residual: &mut [f64], count: &mut [f64], p: f64, y: f64) {
    let g = residual.len();
    let x = p * (g - 1) as f64;
    let b = (x as usize).min(g - 2);
    let frac = x - b as f64;
    let v = p - y;
    residual[b] += (1.0 - frac) * v;
    residual[b + 1] += frac * v;
    count[b] += 1.0 - frac;
    count[b + 1] += frac;
}

/// The cells between every point of every grid (the ten sizes' points merged): a row's
/// shares in each grid depend linearly on its p within such a cell, so a group sums its rows
/// per cell (rows, Σd, Σv, Σd·v, with d = p − the cell's start and v = p − y) and spreads the
/// sums onto the grids only when it hands on its state or computes its value. One row costs
/// one lookup and four additions instead of forty (relplot's splat on each grid); the
/// grids' sums are the same up to rounding.
#[derive(Debug)]
struct FineCells {
    /// The cells' bounds, ascending from 0 to 1 (cell j is `[start[j], start[j + 1])`, the
    /// last one closed).
    start: Vec<f64>,
    /// The cell of each 1/[`LOOKUP`] of [0, 1]'s start: where a row's search begins.
    lookup: Vec<u32>,
    /// Per cell and grid size (cell-major): the grid cell b it lies in, and
    /// `start·(G − 1) − b`, the fraction its start sits past point b.
    coarse: Vec<(u32, f64)>,
    /// The grid sizes, ascending.
    sizes: Vec<usize>,
    /// The points of all grids together: the length of the concatenated grids.
    points: usize,
}

/// Slots of [`FineCells::lookup`].
const LOOKUP: usize = 1 << 16;

impl FineCells {
    fn new(sizes: &[usize]) -> Self {
        let mut start: Vec<f64> = sizes
            .iter()
            .flat_map(|&g| (0..g).map(move |k| k as f64 / (g - 1) as f64))
            .collect();
        start.sort_by(f64::total_cmp);
        start.dedup();
        let cells = start.len() - 1;
        let mut lookup = Vec::with_capacity(LOOKUP);
        let mut j = 0;
        for i in 0..LOOKUP {
            let x = i as f64 / LOOKUP as f64;
            while j + 1 < cells && start[j + 1] <= x {
                j += 1;
            }
            lookup.push(j as u32);
        }
        let mut coarse = Vec::with_capacity(cells * sizes.len());
        for j in 0..cells {
            let mid = (start[j] + start[j + 1]) / 2.0;
            for &g in sizes {
                let b = ((mid * (g - 1) as f64) as usize).min(g - 2);
                coarse.push((b as u32, start[j] * (g - 1) as f64 - b as f64));
            }
        }
        Self {
            start,
            lookup,
            coarse,
            sizes: sizes.to_vec(),
            points: sizes.iter().sum(),
        }
    }

    fn len(&self) -> usize {
        self.start.len() - 1
    }

    /// The cell of `p` (in [0, 1]).
    #[inline]
    fn cell_of(&self, p: f64) -> usize {
        let mut j = self.lookup[((p * LOOKUP as f64) as usize).min(LOOKUP - 1)] as usize;
        while j + 2 < self.start.len() && p >= self.start[j + 1] {
            j += 1;
        }
        j
    }

    /// Adds one row to a group's cell sums.
    #[inline]
    fn add(&self, sums: &mut [[f64; 4]], p: f64, y: f64) {
        let j = self.cell_of(p);
        let (d, v) = (p - self.start[j], p - y);
        let s = &mut sums[j];
        s[0] += 1.0;
        s[1] += d;
        s[2] += v;
        s[3] += d * v;
    }

    /// Adds the cell sums onto the grids (concatenated, one per size): at point b, Σ(1 −
    /// frac)·v and Σ(1 − frac); at b + 1, Σfrac·v and Σfrac, with frac = c + d·(G − 1).
    fn spread(&self, sums: &[[f64; 4]], residual: &mut [f64], count: &mut [f64]) {
        let per = self.sizes.len();
        for (j, &[n, sd, sv, sdv]) in sums.iter().enumerate() {
            if n == 0.0 {
                continue;
            }
            let mut offset = 0;
            for (k, &g) in self.sizes.iter().enumerate() {
                let (b, c) = self.coarse[j * per + k];
                let at = offset + b as usize;
                let scale = (g - 1) as f64;
                let (frac_v, frac) = (c * sv + scale * sdv, c * n + scale * sd);
                residual[at] += sv - frac_v;
                residual[at + 1] += frac_v;
                count[at] += n - frac;
                count[at + 1] += frac;
                offset += g;
            }
        }
    }
}

/// One group: its raw rows while few, else its sums: per fine cell for its own rows, and on
/// the grids for the partial states it merged.
#[derive(Debug, Default, Clone)]
struct GroupState {
    rows: Vec<(f64, f64)>,
    /// Per [`FineCells`] cell: rows, Σd, Σv, Σd·v; empty while the rows are kept.
    fine: Vec<[f64; 4]>,
    /// Concatenated grids (residual sums), one per size, of merged states; empty if none.
    residual: Vec<f64>,
    count: Vec<f64>,
    n: f64,
}

impl GroupState {
    fn keeps_rows(&self) -> bool {
        self.fine.is_empty() && self.residual.is_empty()
    }

    /// Bytes held.
    fn bytes(&self) -> usize {
        self.rows.capacity() * 16 + self.fine.capacity() * 32 + self.residual.capacity() * 16
    }
}

#[derive(Debug)]
struct SmoothKernel {
    sigma: Option<f64>,
    /// The grids and their cells, shared by every copy of the kernel.
    fine: Arc<FineCells>,
    groups: Vec<GroupState>,
    bytes: usize,
}

impl SmoothKernel {
    fn new(sigma: Option<f64>, sizes: Vec<usize>) -> Self {
        Self {
            sigma,
            fine: Arc::new(FineCells::new(&sizes)),
            groups: vec![],
            bytes: 0,
        }
    }

    /// A group keeps raw rows (16 bytes each) until they would outgrow its grids.
    fn raw_limit(&self) -> usize {
        self.fine.points
    }

    /// Adds a batch of the only group's rows, their `p` in [0, 1]; false, adding nothing,
    /// when a label is not 0 or 1. The rows the group keeps raw go through [`Self::add_row`];
    /// the rest are summed per cell in a loop of their own (no per-row checks, the group's
    /// sums at hand).
    fn add_checked<Y: Label>(&mut self, p: &[f64], y: &[Y]) -> bool {
        if !all_labels(y) {
            return false;
        }
        let mut i = 0;
        while i < p.len() && self.groups[0].fine.is_empty() {
            self.add_row(0, p[i], y[i].to_f64());
            i += 1;
        }
        let st = &mut self.groups[0];
        st.n += (p.len() - i) as f64;
        for (&pi, &yi) in p[i..].iter().zip(&y[i..]) {
            self.fine.add(&mut st.fine, pi, yi.to_f64());
        }
        true
    }

    fn add_row(&mut self, g: usize, p: f64, y: f64) {
        let limit = self.raw_limit();
        let st = &mut self.groups[g];
        st.n += 1.0;
        if st.fine.is_empty() {
            let before = st.bytes();
            st.rows.push((p, y));
            if st.rows.len() > limit {
                st.fine = vec![[0.0; 4]; self.fine.len()];
                for (p, y) in std::mem::take(&mut st.rows) {
                    self.fine.add(&mut st.fine, p, y);
                }
            }
            self.bytes = self.bytes + st.bytes() - before;
            return;
        }
        self.fine.add(&mut st.fine, p, y);
    }

    /// A group's grids: its merged grids plus its cell sums (or its rows) spread onto them.
    fn grids(&self, st: &GroupState) -> (Vec<f64>, Vec<f64>) {
        let (mut residual, mut count) = if st.residual.is_empty() {
            (vec![0.0; self.fine.points], vec![0.0; self.fine.points])
        } else {
            (st.residual.clone(), st.count.clone())
        };
        self.fine.spread(&st.fine, &mut residual, &mut count);
        for &(p, y) in &st.rows {
            let mut start = 0;
            for &size in &self.fine.sizes {
                splat(
                    &mut residual[start..start + size],
                    &mut count[start..start + size],
                    p,
                    y,
                );
                start += size;
            }
        }
        (residual, count)
    }

    fn group_value(&self, g: usize) -> Option<f64> {
        let st = &self.groups[g];
        if st.n == 0.0 {
            return None;
        }
        let (residual, count) = self.grids(st);
        let grid = |size: usize| -> (&[f64], &[f64]) {
            let start: usize = self.fine.sizes.iter().take_while(|&&s| s != size).sum();
            (&residual[start..start + size], &count[start..start + size])
        };
        let at = |sigma: f64| {
            let (r, c) = grid(grid_size(sigma));
            smooth_ece_at(sigma, r, c)
        };
        Some(match self.sigma {
            Some(s) => at(s),
            None => search(at),
        })
    }
}

/// relplot's bandwidth search: bisection on σ ∈ (0, 1] for the fixed point σ = smECE(σ),
/// ten halvings from [0, 1], returning the value at the upper end.
fn search(mut at: impl FnMut(f64) -> f64) -> f64 {
    const EPS: f64 = 0.001;
    let mut cache: Vec<(f64, f64)> = vec![];
    let mut value = |s: f64| -> f64 {
        if let Some(&(_, v)) = cache.iter().find(|(x, _)| *x == s) {
            return v;
        }
        let v = at(s);
        cache.push((s, v));
        v
    };
    let mut pred = |s: f64| s < EPS || s < value(s);
    if pred(1.0) {
        return value(1.0);
    }
    let (mut lo, mut hi) = (0.0, 1.0);
    for _ in 0..10 {
        let mid = (hi + lo) / 2.0;
        if pred(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    value(hi)
}

/// linspace(0, 1, n)[i] as numpy computes it.
#[inline]
fn linspace01(i: usize, n: usize) -> f64 {
    if i == n - 1 {
        1.0
    } else {
        i as f64 * (1.0 / (n - 1) as f64)
    }
}

/// relplot's `smooth_ece(f, y, σ)` from the grid sums of size G: reflected Gaussian
/// smoothing of both grids, linear interpolation at E points, `Σ|r̂|·d̂ / Σd̂` with
/// `d̂ = smoothed count + 0.0001`.
fn smooth_ece_at(sigma: f64, residual: &[f64], count: &[f64]) -> f64 {
    let g = residual.len();
    // The kernel: a Gaussian density centred on t = 0.5, t_d = linspace(0, 1, G)[d].
    let norm = (2.0 * std::f64::consts::PI).sqrt() * sigma;
    let ker: Vec<f64> = (0..g)
        .map(|d| {
            let t = linspace01(d, g) - 0.5;
            (-t * t / (2.0 * (sigma * sigma))).exp() / norm
        })
        .collect();
    // Entries that underflow to 0 add nothing: convolve with the non-zero span only.
    let lo = ker.iter().position(|&k| k != 0.0).unwrap_or(0);
    let hi = ker.iter().rposition(|&k| k != 0.0).unwrap_or(0);
    let c = g / 2;
    let reflect = |i: isize| -> usize {
        let last = (g - 1) as isize;
        (if i < 0 {
            -i
        } else if i > last {
            2 * last - i
        } else {
            i
        }) as usize
    };
    let mut memo: Vec<Option<(f64, f64)>> = vec![None; g];
    let mut smoothed = |m: usize| -> (f64, f64) {
        if let Some(v) = memo[m] {
            return v;
        }
        let (mut r, mut n) = (0.0, 0.0);
        for (d, &k) in ker.iter().enumerate().take(hi + 1).skip(lo) {
            let j = reflect(m as isize + c as isize - d as isize);
            r += k * residual[j];
            n += k * count[j];
        }
        memo[m] = Some((r, n));
        (r, n)
    };
    let e = (10.0 / sigma).round_ties_even().max(200.0) as usize;
    let h = 1.0 / (g - 1) as f64;
    let (mut num, mut den) = (0.0, 0.0);
    for k in 0..e {
        let t = linspace01(k, e);
        let i = ((t * (g - 1) as f64) as usize).min(g - 2);
        let res = (t - i as f64 * h) / h;
        let (r0, n0) = smoothed(i);
        let (r1, n1) = smoothed(i + 1);
        let r = r0 * (1.0 - res) + r1 * res;
        let d = n0 * (1.0 - res) + n1 * res + 0.0001;
        num += (r / d).abs() * d;
        den += d;
    }
    num / den
}

impl Kernel for SmoothKernel {
    fn empty(&self) -> Result<Self> {
        Ok(Self {
            sigma: self.sigma,
            fine: Arc::clone(&self.fine),
            groups: vec![],
            bytes: 0,
        })
    }

    crate::kernel::groups_in_vec!(groups, GroupState::default);

    fn update(&mut self, values: &[ArrayRef], groups: &[usize], filter: Filter) -> Result<()> {
        let p = f64s(&values[0]).values().clone();
        let mask = usable_rows(&[&values[0], &values[1]], filter);
        if mask.is_none() && self.groups.len() == 1 && all_probabilities(&p) {
            // The one group of a query without GROUP BY, every row usable: its labels as
            // they are stored, checked in one pass (a bad one falls through to the checked
            // path, which names it).
            if let Some(true) = with_labels!(&values[1], |y| self.add_checked(&p, y)) {
                return Ok(());
            }
        }
        let y = f64_labels(&values[1])?;
        for_each_row(p.len(), &mask, |i| {
            let pi = check_p("smooth_ece", "p", p[i])?;
            let yi = check_y("smooth_ece", y[i])?;
            self.add_row(groups[i], pi, yi);
            Ok(())
        })
    }

    fn check_stored(&self, states: &[ArrayRef]) -> Result<()> {
        let p = list_values(&states[0])
            .iter()
            .find(|&&p| !(0.0..=1.0).contains(&p));
        if let Some(p) = p {
            return exec_err!(
                "smooth_ece: a stored state's rows_p holds {p}, not a probability in [0, 1]"
            );
        }
        let y = list_values(&states[1])
            .iter()
            .find(|&&y| y != 0.0 && y != 1.0);
        if let Some(y) = y {
            return exec_err!("smooth_ece: a stored state's rows_y holds {y}, not 0 or 1");
        }
        Ok(())
    }

    fn merge(&mut self, states: &[ArrayRef], groups: &[usize]) -> Result<()> {
        let (o_p, rows_p) = list_parts(&states[0]);
        let (o_y, rows_y) = list_parts(&states[1]);
        let (o_r, grid_r) = list_parts(&states[2]);
        let (o_c, grid_c) = list_parts(&states[3]);
        let n = states[4].as_primitive::<Float64Type>();
        for (r, &g) in groups.iter().enumerate() {
            if n.is_null(r) {
                continue;
            }
            let rows = o_p[r] as usize..o_p[r + 1] as usize;
            let grid = o_r[r] as usize..o_r[r + 1] as usize;
            if o_y[r + 1] - o_y[r] != o_p[r + 1] - o_p[r]
                || o_c[r + 1] - o_c[r] != o_r[r + 1] - o_r[r]
                || !(grid.is_empty() || grid.len() == self.fine.points)
            {
                return internal_err!("smooth_ece: malformed partial state");
            }
            for k in rows {
                self.add_row(g, rows_p[k], rows_y[o_y[r] as usize + k - o_p[r] as usize]);
            }
            if !grid.is_empty() {
                let cells = self.fine.points;
                let st = &mut self.groups[g];
                if st.residual.is_empty() {
                    let before = st.bytes();
                    st.residual = vec![0.0; cells];
                    st.count = vec![0.0; cells];
                    self.bytes = self.bytes + st.bytes() - before;
                }
                let c0 = o_c[r] as usize;
                for (k, j) in grid.enumerate() {
                    st.residual[k] += grid_r[j];
                    st.count[k] += grid_c[c0 + k];
                }
                st.n += n.value(r);
            }
        }
        Ok(())
    }

    fn state(&self, range: Range<usize>) -> Result<Vec<ArrayRef>> {
        let groups = &self.groups[range];
        // A group that keeps rows hands them on; any other its grids (its cell sums spread).
        let grids: Vec<Option<(Vec<f64>, Vec<f64>)>> = groups
            .iter()
            .map(|st| (!st.keeps_rows()).then(|| self.grids(st)))
            .collect();
        let list = |len: &dyn Fn(usize) -> usize, vals: &dyn Fn(usize) -> Vec<f64>| -> ArrayRef {
            let offsets = OffsetBuffer::from_lengths((0..groups.len()).map(len));
            let values: Float64Array = (0..groups.len()).flat_map(vals).collect();
            list_array(offsets, Arc::new(values))
        };
        let grid_len = |i: usize| grids[i].as_ref().map_or(0, |(r, _)| r.len());
        // A group with grids carries its row count in `n` (rows are counted as they merge).
        let n: Float64Array = groups
            .iter()
            .map(|s| Some(if s.keeps_rows() { 0.0 } else { s.n }))
            .collect();
        Ok(vec![
            list(&|i| groups[i].rows.len(), &|i| {
                groups[i].rows.iter().map(|r| r.0).collect()
            }),
            list(&|i| groups[i].rows.len(), &|i| {
                groups[i].rows.iter().map(|r| r.1).collect()
            }),
            list(&grid_len, &|i| {
                grids[i].as_ref().map_or(vec![], |(r, _)| r.clone())
            }),
            list(&grid_len, &|i| {
                grids[i].as_ref().map_or(vec![], |(_, c)| c.clone())
            }),
            Arc::new(n),
        ])
    }

    fn evaluate(&mut self, range: Range<usize>) -> Result<ArrayRef> {
        Ok(Arc::new(
            range.map(|g| self.group_value(g)).collect::<Float64Array>(),
        ))
    }

    fn drain(&mut self, n: usize) {
        for st in self.groups.drain(..n) {
            self.bytes -= st.bytes();
        }
    }

    fn native_labels(&self) -> bool {
        true
    }

    fn size(&self) -> usize {
        self.bytes + self.groups.capacity() * size_of::<GroupState>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The cell sums spread onto the ten grids give relplot's splat of every row (which the
    /// slt tests check against relplot itself), for rows on the grids' points, at 0 and 1, and
    /// spread over [0, 1]: to 1e-10 relative, since a row on a point may be split from the
    /// point's other side, off by up to (G − 1) ulps of its share (a wrong cell or formula
    /// would be off by whole shares). This compares two ways of this code with each other.
    #[test]
    fn cell_sums_spread_as_each_row_splatted() {
        let fine = FineCells::new(&search_grid_sizes());
        let mut rows: Vec<(f64, f64)> = vec![(0.0, 0.0), (1.0, 1.0), (0.5, 1.0), (1.0, 0.0)];
        for g in search_grid_sizes() {
            rows.extend(
                (0..g)
                    .step_by(97)
                    .map(|k| (k as f64 / (g - 1) as f64, (k % 2) as f64)),
            );
        }
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            rows.push(((x >> 11) as f64 / (1u64 << 53) as f64, (x & 1) as f64));
        }
        let mut sums = vec![[0.0; 4]; fine.len()];
        let (mut residual, mut count) = (vec![0.0; fine.points], vec![0.0; fine.points]);
        for &(p, y) in &rows {
            fine.add(&mut sums, p, y);
            let mut start = 0;
            for &size in &fine.sizes {
                let span = start..start + size;
                splat(&mut residual[span.clone()], &mut count[span], p, y);
                start += size;
            }
        }
        let (mut r, mut c) = (vec![0.0; fine.points], vec![0.0; fine.points]);
        fine.spread(&sums, &mut r, &mut c);
        for (got, want) in r.iter().zip(&residual).chain(c.iter().zip(&count)) {
            assert!(
                (got - want).abs() <= 1e-10 * want.abs().max(1.0),
                "{got} against {want}"
            );
        }
    }

    #[test]
    fn the_search_reaches_ten_grid_sizes() {
        // docs/notes: {1001, 1025, 1139, 1281, 1464, 1707, 2049, 2561, 3414, 5121}
        assert_eq!(
            search_grid_sizes(),
            [1001, 1025, 1139, 1281, 1464, 1707, 2049, 2561, 3414, 5121]
        );
        assert_eq!(grid_size(0.005), 2001);
    }
}
