//! Per-group storage of the rows themselves, for the metrics that need every value:
//! `auc` and the `'quantile'` bins of `ece`/`mce`/`reliability`.
//!
//! The state is three `List<Float64>` columns (p, y, w); [`ValueStore::size`] reports the
//! bytes actually reserved so DataFusion's memory pool sees them.

use std::ops::Range;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, BooleanArray, Float64Array, ListArray};
use arrow::buffer::OffsetBuffer;
use arrow::datatypes::{DataType, Field};
use datafusion_common::{internal_err, Result};

use crate::common::{check_p, check_w, check_y, f64s, for_each_row, list_parts, usable_rows};

/// One stored row: probability, label, weight (1 when the call has no weight).
pub(crate) type Row = [f64; 3];

#[derive(Debug)]
pub(crate) struct ValueStore {
    func: &'static str,
    /// Positions of p, y and (optional) w among the call's arguments.
    p_col: usize,
    y_col: usize,
    w_col: Option<usize>,
    pub(crate) groups: Vec<Vec<Row>>,
    bytes: usize,
}

const ROW_BYTES: usize = size_of::<Row>();

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

    pub(crate) fn resize(&mut self, n: usize) {
        if self.groups.len() < n {
            self.groups.resize_with(n, Vec::new);
        }
    }

    pub(crate) fn num_groups(&self) -> usize {
        self.groups.len()
    }

    fn push(&mut self, g: usize, row: Row) {
        let v = &mut self.groups[g];
        if v.len() == v.capacity() {
            self.bytes -= v.capacity() * ROW_BYTES;
            v.reserve(1);
            self.bytes += v.capacity() * ROW_BYTES;
        }
        v.push(row);
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
                Some(w) => check_w(func, w[i])?,
                None => 1.0,
            };
            self.push(groups[i], [pi, yi, wi]);
            Ok(())
        })
    }

    /// Three list columns (p, y, w) for the groups in `range`.
    pub(crate) fn state(&self, range: Range<usize>) -> Vec<ArrayRef> {
        let groups = &self.groups[range];
        let offsets = OffsetBuffer::from_lengths(groups.iter().map(Vec::len));
        (0..3)
            .map(|k| {
                let vals: Float64Array = groups.iter().flatten().map(|r| r[k]).collect();
                Arc::new(ListArray::new(
                    Arc::new(Field::new_list_field(DataType::Float64, true)),
                    offsets.clone(),
                    Arc::new(vals),
                    None,
                )) as ArrayRef
            })
            .collect()
    }

    /// Merges three list columns (p, y, w) as produced by [`ValueStore::state`].
    pub(crate) fn merge(&mut self, states: &[ArrayRef], groups: &[usize]) -> Result<()> {
        let (op, p) = list_parts(&states[0]);
        let (oy, y) = list_parts(&states[1]);
        let (ow, w) = list_parts(&states[2]);
        if op != oy || op != ow {
            return internal_err!("{}: malformed value state", self.func);
        }
        for (r, &g) in groups.iter().enumerate() {
            if states[0].is_null(r) {
                continue;
            }
            for j in op[r] as usize..op[r + 1] as usize {
                self.push(g, [p[j], y[j], w[j]]);
            }
        }
        Ok(())
    }

    pub(crate) fn drain(&mut self, n: usize) {
        for v in self.groups.drain(..n) {
            self.bytes -= v.capacity() * ROW_BYTES;
        }
    }

    pub(crate) fn size(&self) -> usize {
        self.bytes + self.groups.capacity() * size_of::<Vec<Row>>()
    }
}

/// Sorts rows ascending by (p, y, w): the order of `'quantile'` bins and of the AUC sweep.
pub(crate) fn sort_rows(rows: &mut [Row]) {
    rows.sort_unstable_by(|a, b| {
        a[0].total_cmp(&b[0])
            .then(a[1].total_cmp(&b[1]))
            .then(a[2].total_cmp(&b[2]))
    });
}
