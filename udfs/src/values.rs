//! Per-group storage of the rows themselves, for the metrics that need every value:
//! `auc`, and the data-dependent bins of `ece`/`mce`/`reliability`/`ace`/`rmsce`
//! (`'quantile'`, `'kumar'`).
//!
//! A row is kept in as little room as it needs: the label is not stored at all — rows go to
//! one vector of scores per class — so an unweighted row costs its 8-byte score; a weighted
//! row adds its 8-byte weight. [`ValueStore::size`] reports the bytes actually reserved so
//! DataFusion's memory pool sees them.
//!
//! The partial state is four `List<Float64>` columns: the scores of the negatives and of the
//! positives, and their weights (empty lists when the call has no weight).

use std::ops::Range;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, BooleanArray, Float64Array, ListArray};
use arrow::buffer::OffsetBuffer;
use arrow::datatypes::{DataType, Field, FieldRef};
use datafusion_common::{internal_err, Result};
use datafusion_expr::utils::format_state_name;

use crate::common::{
    check_p, check_w, check_y, f64_list_type, f64s, for_each_row, list_parts, usable_rows,
};
use crate::kernel::Kernel;

/// The names of the four state fields of a [`ValueStore`].
pub(crate) const STATE_NAMES: [&str; 4] = ["neg_p", "pos_p", "neg_w", "pos_w"];

/// The state fields of an aggregate whose state is a [`ValueStore`].
pub(crate) fn state_fields(name: &str) -> Vec<FieldRef> {
    STATE_NAMES
        .iter()
        .map(|s| {
            Arc::new(Field::new(
                format_state_name(name, s),
                f64_list_type(),
                true,
            ))
        })
        .collect()
}

/// A kernel whose state is the rows and whose value is `finish(rows)` (`auc`,
/// `ece_debiased`).
#[derive(Debug)]
pub(crate) struct RowsKernel {
    pub store: ValueStore,
    pub finish: fn(&mut Rows) -> Option<f64>,
}

impl Kernel for RowsKernel {
    fn empty(&self) -> Result<Self> {
        Ok(RowsKernel {
            store: self.store.empty(),
            finish: self.finish,
        })
    }
    fn resize(&mut self, n: usize) {
        self.store.resize(n)
    }
    fn num_groups(&self) -> usize {
        self.store.num_groups()
    }
    fn update(
        &mut self,
        values: &[ArrayRef],
        groups: &[usize],
        filter: Option<&BooleanArray>,
    ) -> Result<()> {
        self.store.update(values, groups, filter)
    }
    fn merge(&mut self, states: &[ArrayRef], groups: &[usize]) -> Result<()> {
        self.store.merge(states, groups)
    }
    fn state(&self, range: Range<usize>) -> Result<Vec<ArrayRef>> {
        Ok(self.store.state(range))
    }
    fn evaluate(&mut self, range: Range<usize>) -> Result<ArrayRef> {
        let finish = self.finish;
        Ok(Arc::new(
            range
                .map(|g| finish(&mut self.store.groups[g]))
                .collect::<Float64Array>(),
        ))
    }
    fn drain(&mut self, n: usize) {
        self.store.drain(n)
    }
    fn size(&self) -> usize {
        self.store.size()
    }
}

/// The rows of one group, split by label: index 0 the negatives, 1 the positives.
#[derive(Debug, Default, Clone)]
pub(crate) struct Rows {
    /// Scores per class.
    pub p: [Vec<f64>; 2],
    /// Weights per class, parallel to `p`; empty when the call has no weight.
    pub w: [Vec<f64>; 2],
}

impl Rows {
    pub(crate) fn len(&self) -> usize {
        self.p[0].len() + self.p[1].len()
    }

    fn bytes(&self) -> usize {
        (self.p[0].capacity() + self.p[1].capacity() + self.w[0].capacity() + self.w[1].capacity())
            * size_of::<f64>()
    }

    /// Sorts each class by score (weights follow their score).
    pub(crate) fn sort(&mut self) {
        for c in 0..2 {
            if self.w[c].is_empty() {
                radix_sort_f64(&mut self.p[c]);
            } else {
                let mut pairs: Vec<(f64, f64)> = self.p[c]
                    .iter()
                    .copied()
                    .zip(self.w[c].iter().copied())
                    .collect();
                pairs.sort_by(|a, b| a.0.total_cmp(&b.0));
                for (i, (p, w)) in pairs.into_iter().enumerate() {
                    self.p[c][i] = p;
                    self.w[c][i] = w;
                }
            }
        }
    }
}

#[derive(Debug)]
pub(crate) struct ValueStore {
    func: &'static str,
    /// Positions of p, y and (optional) w among the call's arguments.
    p_col: usize,
    y_col: usize,
    w_col: Option<usize>,
    pub(crate) groups: Vec<Rows>,
    bytes: usize,
}

impl ValueStore {
    pub(crate) fn new(
        func: &'static str,
        p_col: usize,
        y_col: usize,
        w_col: Option<usize>,
    ) -> Self {
        Self {
            func,
            p_col,
            y_col,
            w_col,
            groups: vec![],
            bytes: 0,
        }
    }

    pub(crate) fn empty(&self) -> Self {
        Self::new(self.func, self.p_col, self.y_col, self.w_col)
    }

    pub(crate) fn weighted(&self) -> bool {
        self.w_col.is_some()
    }

    pub(crate) fn resize(&mut self, n: usize) {
        if self.groups.len() < n {
            self.groups.resize_with(n, Rows::default);
        }
    }

    pub(crate) fn num_groups(&self) -> usize {
        self.groups.len()
    }

    #[inline]
    fn push(&mut self, g: usize, p: f64, y: f64, w: Option<f64>) {
        let rows = &mut self.groups[g];
        let c = (y == 1.0) as usize;
        let before = rows.p[c].capacity() + rows.w[c].capacity();
        rows.p[c].push(p);
        if let Some(w) = w {
            rows.w[c].push(w);
        }
        let after = rows.p[c].capacity() + rows.w[c].capacity();
        self.bytes += (after - before) * size_of::<f64>();
    }

    pub(crate) fn update(
        &mut self,
        values: &[ArrayRef],
        groups: &[usize],
        filter: Option<&BooleanArray>,
    ) -> Result<()> {
        let func = self.func;
        let p = f64s(&values[self.p_col]).values().clone();
        let y = f64s(&values[self.y_col]).values().clone();
        let mut data = vec![&values[self.p_col], &values[self.y_col]];
        let w = self.w_col.map(|i| {
            data.push(&values[i]);
            f64s(&values[i]).values().clone()
        });
        let mask = usable_rows(&data, filter);
        for_each_row(p.len(), &mask, |i| {
            let pi = check_p(func, "p", p[i])?;
            let yi = check_y(func, y[i])?;
            let wi = match &w {
                Some(w) => Some(check_w(func, w[i])?),
                None => None,
            };
            self.push(groups[i], pi, yi, wi);
            Ok(())
        })
    }

    /// Four list columns (negative scores, positive scores, their weights) for `range`.
    pub(crate) fn state(&self, range: Range<usize>) -> Vec<ArrayRef> {
        let groups = &self.groups[range];
        let list = |get: &dyn Fn(&Rows) -> &Vec<f64>| -> ArrayRef {
            let offsets = OffsetBuffer::from_lengths(groups.iter().map(|r| get(r).len()));
            let vals: Float64Array = groups.iter().flat_map(|r| get(r).iter().copied()).collect();
            Arc::new(ListArray::new(
                Arc::new(Field::new_list_field(DataType::Float64, true)),
                offsets,
                Arc::new(vals),
                None,
            ))
        };
        vec![
            list(&|r| &r.p[0]),
            list(&|r| &r.p[1]),
            list(&|r| &r.w[0]),
            list(&|r| &r.w[1]),
        ]
    }

    /// Merges four list columns as produced by [`ValueStore::state`].
    pub(crate) fn merge(&mut self, states: &[ArrayRef], groups: &[usize]) -> Result<()> {
        let weighted = self.weighted();
        let cols: Vec<(&[i32], &[f64])> = states[..4].iter().map(list_parts).collect();
        for (r, &g) in groups.iter().enumerate() {
            if states[0].is_null(r) {
                continue;
            }
            for c in 0..2 {
                let (op, p) = cols[c];
                let (ow, w) = cols[2 + c];
                let span = op[r] as usize..op[r + 1] as usize;
                let wspan = ow[r] as usize..ow[r + 1] as usize;
                let ok = if weighted {
                    wspan.len() == span.len()
                } else {
                    wspan.is_empty()
                };
                if !ok {
                    return internal_err!("{}: malformed value state", self.func);
                }
                let rows = &mut self.groups[g];
                let before = rows.p[c].capacity() + rows.w[c].capacity();
                rows.p[c].extend_from_slice(&p[span]);
                rows.w[c].extend_from_slice(&w[wspan]);
                let after = rows.p[c].capacity() + rows.w[c].capacity();
                self.bytes += (after - before) * size_of::<f64>();
            }
        }
        Ok(())
    }

    pub(crate) fn drain(&mut self, n: usize) {
        for rows in self.groups.drain(..n) {
            self.bytes -= rows.bytes();
        }
    }

    pub(crate) fn size(&self) -> usize {
        self.bytes + self.groups.capacity() * size_of::<Rows>()
    }
}

/// The order-preserving bit pattern of an f64: unsigned comparison of the keys is
/// `f64::total_cmp` of the values.
#[inline]
fn key(x: f64) -> u64 {
    let b = x.to_bits();
    if b >> 63 == 1 {
        !b
    } else {
        b | (1 << 63)
    }
}

#[inline]
fn unkey(k: u64) -> f64 {
    f64::from_bits(if k >> 63 == 1 { k & !(1 << 63) } else { !k })
}

/// Sorts f64 values ascending (in `total_cmp` order) with an LSD radix sort on their
/// order-preserving bit patterns, 11 bits a pass; passes in which every value has the same
/// digit (the sign and exponent bits of probabilities, mostly) are skipped. Small inputs use
/// the comparison sort.
pub(crate) fn radix_sort_f64(v: &mut [f64]) {
    const BITS: u32 = 11;
    const RADIX: usize = 1 << BITS;
    if v.len() < 4096 {
        v.sort_unstable_by(f64::total_cmp);
        return;
    }
    let mut keys: Vec<u64> = v.iter().map(|&x| key(x)).collect();
    let mut scratch = vec![0u64; keys.len()];
    let mut counts = vec![[0usize; RADIX]; 6];
    for &k in &keys {
        for (d, c) in counts.iter_mut().enumerate() {
            c[((k >> (d as u32 * BITS)) as usize) & (RADIX - 1)] += 1;
        }
    }
    let n = keys.len();
    for (d, c) in counts.iter_mut().enumerate() {
        if c.contains(&n) {
            continue;
        }
        let mut sum = 0;
        for x in c.iter_mut() {
            let t = *x;
            *x = sum;
            sum += t;
        }
        let shift = d as u32 * BITS;
        for &k in &keys {
            let digit = ((k >> shift) as usize) & (RADIX - 1);
            scratch[c[digit]] = k;
            c[digit] += 1;
        }
        std::mem::swap(&mut keys, &mut scratch);
    }
    for (x, k) in v.iter_mut().zip(keys) {
        *x = unkey(k);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn radix_sort_matches_comparison_sort() {
        let mut s = 0x9E37_79B9_7F4A_7C15u64;
        let mut v: Vec<f64> = (0..20_000)
            .map(|i| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                match i % 5 {
                    0 => (s % 1000) as f64 / 1000.0,
                    1 => -((s % 77) as f64),
                    2 => 0.0,
                    3 => -0.0,
                    _ => f64::from_bits(s) % 1e6,
                }
            })
            .filter(|x| !x.is_nan())
            .collect();
        let mut expected = v.clone();
        expected.sort_by(f64::total_cmp);
        radix_sort_f64(&mut v);
        assert!(v
            .iter()
            .zip(&expected)
            .all(|(a, b)| a.to_bits() == b.to_bits()));
    }
}
