//! The fitting aggregates' kernel: rows into per-group states, states merged, models out.

use std::borrow::Cow;
use std::ops::Range;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, Float64Array, Int64Array};
use arrow::buffer::{OffsetBuffer, ScalarBuffer};
use arrow::datatypes::{Float64Type, Int64Type};
use datafusion_common::{exec_err, internal_err, Result};

use crate::common::{
    check_p, check_propensity, check_y, f64_lists, f64s, for_each_row, list_array, list_parts,
    usable_rows, weight_at,
};
use crate::kernel::Filter;
use crate::kernel::Kernel;
use crate::labels::{all_labels, f64_labels, with_labels, Label};
use crate::model::Model;
use crate::values::spill::Held;

use super::calibrator::Settings;
use super::grid::{finite_range, ips_target, Entry};
use super::state::{FitState, Point};
use super::{Method, EXACT_CAP};

#[derive(Debug)]
pub(crate) struct FitKernel {
    pub(super) method: Method,
    /// Distinct scores kept exactly per group before the grid.
    pub(super) cap: usize,
    pub(super) settings: Settings,
    pub(super) prop_col: Option<usize>,
    /// The row weight's column (`w`), for the fits that take one.
    pub(super) w_col: Option<usize>,
    /// The function named in errors when it is not the method's own fit (`fit_ovr`).
    pub(super) reported_as: Option<&'static str>,
    pub(super) clip: f64,
    pub(crate) groups: Vec<FitState>,
    pub(crate) bytes: usize,
    /// The reservation that holds `bytes` under a memory limit ([`Held`]; `size` then
    /// leaves them out).
    pub(super) held: Held,
}

/// A batch at least this long on the whole-batch path reserves the exact mode's full
/// capacity at once (see [`FitState::reserve_exact_cap`]).
const FAST_RESERVE_ROWS: usize = 4096;

impl FitKernel {
    pub(super) fn func(&self) -> &'static str {
        self.reported_as
            .unwrap_or_else(|| self.method.function_name())
    }

    /// The range of a batch's scores when every score and label passes the fit's checks in
    /// bulk (finite scores, in [0, 1] for a fit of probabilities, labels 0 or 1); None when
    /// one does not (or the batch is empty), for the per-row path to name it.
    fn checked_range<Y: Label>(&self, s: &[f64], y: &[Y]) -> Option<(f64, f64)> {
        let (lo, hi) = finite_range(s)?;
        let in_range = !self.method.takes_probability() || (lo >= 0.0 && hi <= 1.0);
        (in_range && all_labels(y)).then_some((lo, hi))
    }

    /// The fast path of one group with every row usable (no `GROUP BY`, no NULLs, no
    /// filter): the columns are checked in bulk (vectorised passes), and the rows added in a
    /// tight loop that computes the targets as it goes. Returns false, having changed
    /// nothing, when a value is bad: the per-row path then finds the first bad row and
    /// reports it.
    pub(crate) fn update_whole<Y: Label>(&mut self, s: &[f64], y: &[Y], q: Option<&[f64]>) -> bool {
        let Some((lo, hi)) = self.checked_range(s, y) else {
            return false;
        };
        if let Some(q) = q {
            // Propensities in (0, 1]: finite_range also rejects NaN.
            if !finite_range(q).is_some_and(|(a, b)| a > 0.0 && b <= 1.0) {
                return false;
            }
        }
        let clip = self.clip;
        let target = |i: usize| match q {
            None => y[i].to_f64(),
            Some(q) => ips_target(y[i].to_f64(), q[i], clip),
        };
        let st = &mut self.groups[0];
        let before = st.len_bytes();
        st.rows += s.len() as i64;
        st.observe_range(lo, hi);
        // Once (the capacity is past the cap after it), for a hashed state only, and not for
        // a cap of millions of scores.
        if !st.is_grid()
            && st.appended.is_none()
            && st.cap <= EXACT_CAP
            && st.points.capacity() <= st.cap
            && s.len() >= FAST_RESERVE_ROWS
        {
            st.reserve_exact_cap();
        }
        let mut i = 0;
        if q.is_none() && st.append_labelled(s, y) {
            i = s.len();
        }
        while i < s.len() && !st.is_grid() {
            st.add_point(s[i], 1.0, target(i));
            i += 1;
        }
        if let Some(grid) = &mut st.grid {
            match q {
                None => grid.add_labelled(&s[i..], &y[i..]),
                Some(q) => grid.add_weighted(&s[i..], &y[i..], &q[i..], clip),
            }
        }
        self.bytes = self.bytes + st.len_bytes() - before;
        true
    }

    /// A batch of rows spread over groups, for states that keep rows: checked once (finite
    /// scores, in [0, 1] for a fit of probabilities, labels 0 or 1), then each row pushed to
    /// its group's class list. False, with nothing added, when a check fails (the row loop
    /// then names the bad value).
    fn update_grouped<Y: Label>(&mut self, s: &[f64], y: &[Y], groups: &[usize]) -> bool {
        if self.checked_range(s, y).is_none() {
            return false;
        }
        let mut bytes = self.bytes as isize;
        for ((&si, yi), &g) in s.iter().zip(y).zip(groups) {
            bytes += self.groups[g].add_labelled_row(si, yi.bit() as usize);
        }
        self.bytes = bytes.max(0) as usize;
        true
    }

    pub(super) fn finish(&self, st: &FitState) -> Option<Model> {
        if st.rows == 0 {
            return None;
        }
        let calibrator = self.method.calibrator();
        // The field-aware fits read the inner states themselves (see `field`).
        if calibrator.field_aware() {
            return None;
        }
        let mut m = Model::new(self.method, st.rows, st.s_min, st.s_max);
        if self.w_col.is_some() {
            let mut weight = 0.0;
            st.for_each_node_ascending(|_, n, _| weight += n);
            // Rows of weight 0 say nothing: no model, as no row.
            if weight <= 0.0 {
                return None;
            }
            m.weight = Some(weight);
        }
        calibrator.fit(st, &self.settings, &mut m);
        Some(m)
    }
}

impl FitKernel {
    /// The inner kernel of a field-aware fit: it only keeps (score, y) states per inner
    /// group and reports errors under the field-aware function's name.
    pub(crate) fn for_field(method: Method, cap: usize, settings: Settings) -> Self {
        Self {
            method,
            cap,
            settings,
            prop_col: None,
            w_col: None,
            reported_as: None,
            clip: 0.0,
            groups: vec![],
            bytes: 0,
            held: Held::new(method.function_name()),
        }
    }

    /// Whether the states append rows and sort them rather than hash them (see `FitState`):
    /// the fits that keep millions of distinct scores, and the field-aware ones, whose rows
    /// go to thousands of states (one per field value) and would miss the cache in each
    /// one's table.
    fn keeps_rows(&self) -> bool {
        self.method.cap_is_a_setting() || self.method.is_field_aware()
    }

    fn new_state(&self) -> FitState {
        FitState::new(self.cap, self.method.grid_bits(), self.keeps_rows())
    }

    /// Whether the groups in `range` are handed on with their rows sorted, however many:
    /// when there are several. Their rows share the lists' buffers, which the state that
    /// reads them could only sort on a copy; a group handed on alone may leave its rows
    /// unsorted (see [`FitState::settle`]). Never for a fit that reads rows in any order.
    fn hands_on_sorted(&self, range: &Range<usize>) -> bool {
        range.len() > 1 && !self.reads_rows_in_any_order()
    }

    fn reads_rows_in_any_order(&self) -> bool {
        self.method.calibrator().reads_rows_in_any_order()
    }

    /// Settles the groups in `range` into the form the fit reads: sorted
    /// ([`Self::settle_sorted`]) unless it reads rows in any order.
    pub(crate) fn settle_for_reading(&mut self, range: Range<usize>) {
        match self.reads_rows_in_any_order() {
            true => self.settle_with(range, FitState::settle_unsorted),
            false => self.settle_sorted(range),
        }
    }

    /// Settles the groups in `range`, so that each is handed on as it will stay (see
    /// [`FitState::settle`]).
    pub(crate) fn settle(&mut self, range: Range<usize>) {
        self.settle_with(range, FitState::settle);
    }

    /// Settles the groups in `range` and sorts their rows, so that each is read as it will
    /// stay (see [`FitState::settle_sorted`]).
    pub(crate) fn settle_sorted(&mut self, range: Range<usize>) {
        self.settle_with(range, FitState::settle_sorted);
    }

    fn settle_with(&mut self, range: Range<usize>, settle: fn(&mut FitState)) {
        for st in &mut self.groups[range] {
            let before = st.len_bytes();
            settle(st);
            self.bytes = (self.bytes + st.len_bytes()).saturating_sub(before);
        }
    }

    /// The partial state of `sts` (settled), with each class's kept rows as given.
    fn state_of(sts: &[Cow<'_, FitState>], class_rows: [ArrayRef; 2]) -> Vec<ArrayRef> {
        let exact: Vec<&[Point]> = sts
            .iter()
            .map(|st| match st.is_grid() {
                true => &[][..],
                false => &st.points[..],
            })
            .collect();
        let cells: Vec<Vec<(i64, Entry)>> = sts
            .iter()
            .map(|st| match st.is_grid() {
                true => st.keyed_entries(),
                false => vec![],
            })
            .collect();
        let offsets =
            OffsetBuffer::from_lengths(exact.iter().zip(&cells).map(|(p, c)| p.len() + c.len()));
        let grid_offsets = OffsetBuffer::from_lengths(cells.iter().map(Vec::len));
        // Per group, its points or its cells (one of the two is empty).
        let field = |point: fn(&Point) -> f64, cell: fn(&Entry) -> f64| -> ArrayRef {
            let v: Float64Array = exact
                .iter()
                .zip(&cells)
                .flat_map(|(p, c)| p.iter().map(point).chain(c.iter().map(|(_, e)| cell(e))))
                .collect();
            list_array(offsets.clone(), Arc::new(v))
        };
        let moment = |f: fn(&Entry) -> f64| -> ArrayRef {
            let v: Float64Array = cells.iter().flatten().map(|(_, e)| f(e)).collect();
            list_array(grid_offsets.clone(), Arc::new(v))
        };
        let keys: Vec<i64> = cells.iter().flatten().map(|(k, _)| *k).collect();
        let [neg, pos] = class_rows;
        vec![
            Arc::new(BooleanArray::from(
                sts.iter().map(|s| s.is_grid()).collect::<Vec<_>>(),
            )),
            Arc::new(Int64Array::from(
                sts.iter().map(|s| s.rows).collect::<Vec<_>>(),
            )),
            Arc::new(Float64Array::from(
                sts.iter().map(|s| s.s_min).collect::<Vec<_>>(),
            )),
            Arc::new(Float64Array::from(
                sts.iter().map(|s| s.s_max).collect::<Vec<_>>(),
            )),
            list_array(grid_offsets.clone(), Arc::new(Int64Array::from(keys))),
            field(|p| p.s, |e| e.lo),
            field(|p| p.n, |e| e.n),
            field(|p| p.t, |e| e.t),
            moment(|e| e.nd),
            moment(|e| e.nd2),
            moment(|e| e.td),
            moment(|e| e.td2),
            neg,
            pos,
        ]
    }

    /// Empties inner group `g` (its memory returned to the pool's count).
    pub(super) fn clear_group(&mut self, g: usize) {
        let fresh = self.new_state();
        if let Some(st) = self.groups.get_mut(g) {
            self.bytes -= st.len_bytes();
            *st = fresh;
            self.bytes += st.len_bytes();
        }
        // Shrinking cannot fail.
        let _ = self.held.follow(self.bytes);
    }
}

impl FitKernel {
    fn update_rows(&mut self, values: &[ArrayRef], groups: &[usize], filter: Filter) -> Result<()> {
        let func = self.func();
        let s = f64s(&values[0]).values();
        let q = self.prop_col.map(|pc| &f64s(&values[pc]).values()[..]);
        let w = self.w_col.map(|wc| &f64s(&values[wc]).values()[..]);
        let mut cols = vec![&values[0], &values[1]];
        cols.extend(self.prop_col.map(|pc| &values[pc]));
        cols.extend(self.w_col.map(|wc| &values[wc]));
        let mask = usable_rows(&cols, filter);
        // Labels as they are stored on the fast paths (rows of weight 1).
        if mask.is_none()
            && w.is_none()
            && self.groups.len() == 1
            && with_labels!(&values[1], |y| self.update_whole(s, y, q)) == Some(true)
        {
            return Ok(());
        }
        if mask.is_none()
            && q.is_none()
            && w.is_none()
            && self.keeps_rows()
            && with_labels!(&values[1], |y| self.update_grouped(s, y, groups)) == Some(true)
        {
            return Ok(());
        }
        let y_f64 = f64_labels(&values[1])?;
        let y = &y_f64[..];
        let clip = self.clip;
        let method = self.method;
        // The score argument's name in errors: `score`, `logit` or `p`.
        let score = method.calibrator().shape().required[0].name;
        let states = &mut self.groups;
        let bytes = &mut self.bytes;
        // Row i of group g with score si and target t: a point of weight w_i and target
        // sum w_i·t.
        let mut add = |i: usize, g: usize, si: f64, t: f64| -> Result<()> {
            if method.takes_probability() {
                check_p(func, "p", si)?;
            } else if !si.is_finite() {
                return exec_err!("{func}: argument {score} must be finite, got {si}");
            }
            let wi = weight_at(func, w, i)?;
            let st = &mut states[g];
            let before = st.len_bytes();
            st.add_point(si, wi, wi * t);
            st.rows += 1;
            st.observe_range(si, si);
            *bytes = *bytes + st.len_bytes() - before;
            Ok(())
        };
        match q {
            None => for_each_row(s.len(), &mask, |i| {
                add(i, groups[i], s[i], check_y(func, y[i])?)
            }),
            Some(q) => for_each_row(s.len(), &mask, |i| {
                let yi = check_y(func, y[i])?;
                add(
                    i,
                    groups[i],
                    s[i],
                    ips_target(yi, check_propensity(func, q[i])?, clip),
                )
            }),
        }
    }

    fn merge_states(&mut self, states: &[ArrayRef], groups: &[usize]) -> Result<()> {
        // 14 fields, or 12 in a state stored before the rows were kept.
        if states.len() != 12 && states.len() != 14 {
            return internal_err!("{}: malformed partial state", self.func());
        }
        let grid = states[0].as_boolean();
        let rows = states[1].as_primitive::<Int64Type>();
        let s_min = states[2].as_primitive::<Float64Type>();
        let s_max = states[3].as_primitive::<Float64Type>();
        // Points (lo, n, t) of every row share one offsets buffer; keys and moments, only
        // present for grid rows, another.
        let keys_list = states[4].as_list::<i32>();
        let keys = keys_list.values().as_primitive::<Int64Type>().values();
        let grid_offsets = keys_list.value_offsets();
        let cols: Vec<(&[i32], &[f64])> = states[5..12].iter().map(list_parts).collect();
        // Each class's kept rows (absent from states stored before they were kept as rows).
        let class_rows: Vec<(&[i32], &ScalarBuffer<f64>)> = states[12..]
            .iter()
            .map(|c| {
                let l = c.as_list::<i32>();
                (
                    l.value_offsets(),
                    l.values().as_primitive::<Float64Type>().values(),
                )
            })
            .collect();
        let offsets = cols[0].0;
        if cols[1..3].iter().any(|(o, _)| *o != offsets)
            || cols[3..].iter().any(|(o, _)| *o != grid_offsets)
        {
            return internal_err!("{}: malformed partial state", self.func());
        }
        for (r, &g) in groups.iter().enumerate() {
            if rows.is_null(r) || rows.value(r) == 0 {
                continue;
            }
            let (start, end) = (offsets[r] as usize, offsets[r + 1] as usize);
            let grid_start = grid_offsets[r] as usize;
            let grid_len = grid_offsets[r + 1] as usize - grid_start;
            let incoming_grid = grid.value(r);
            if grid_len != if incoming_grid { end - start } else { 0 } {
                return internal_err!("{}: malformed partial state", self.func());
            }
            // (start, length) of each class's kept rows; none in a state stored before them.
            let spans: [(usize, usize); 2] = std::array::from_fn(|c| {
                class_rows
                    .get(c)
                    .map_or((0, 0), |(o, _)| (o[r] as usize, (o[r + 1] - o[r]) as usize))
            });
            if incoming_grid && spans.iter().any(|&(_, len)| len > 0) {
                return internal_err!("{}: malformed partial state", self.func());
            }
            // A stored state is user data: a row no call could have added is refused.
            let probability = self.method.takes_probability();
            let impossible = |x: &f64| !x.is_finite() || (probability && !(0.0..=1.0).contains(x));
            for (&(start, len), (_, v)) in spans.iter().zip(&class_rows) {
                if let Some(bad) = v[start..start + len].iter().find(|x| impossible(x)) {
                    return exec_err!(
                        "{}: malformed partial state: a row's score is {bad}",
                        self.func()
                    );
                }
            }
            let st = &mut self.groups[g];
            let before = st.len_bytes();
            if incoming_grid && !st.is_grid() {
                st.switch_to_grid();
            }
            if incoming_grid {
                for j in start..end {
                    let k = grid_start + (j - start);
                    let e = Entry {
                        lo: cols[0].1[j],
                        n: cols[1].1[j],
                        t: cols[2].1[j],
                        nd: cols[3].1[k],
                        nd2: cols[4].1[k],
                        td: cols[5].1[k],
                        td2: cols[6].1[k],
                    };
                    st.add_cell(keys[k], &e)?;
                }
            } else {
                let points = |c: usize| &cols[c].1[start..end];
                let (s, n, t) = (points(0), points(1), points(2));
                // A stored state is user data: a point that no row could have made is refused,
                // not merged into the fit.
                if let Some(j) = (0..s.len()).find(|&j| {
                    !(s[j].is_finite() && n[j] >= 0.0 && n[j].is_finite() && t[j].is_finite())
                }) {
                    return exec_err!(
                        "{}: malformed partial state: point (score {}, rows {}, target {})",
                        self.func(),
                        s[j],
                        n[j],
                        t[j]
                    );
                }
                st.add_sorted_points(s, n, t);
                for (c, (&span, (_, v))) in spans.iter().zip(&class_rows).enumerate() {
                    st.add_class_rows(c, v, span);
                }
            }
            st.rows += rows.value(r);
            st.observe_range(s_min.value(r), s_max.value(r));
            self.bytes = self.bytes + st.len_bytes() - before;
        }
        Ok(())
    }
}

impl Kernel for FitKernel {
    fn empty(&self) -> Result<Self> {
        Ok(Self {
            method: self.method,
            cap: self.cap,
            settings: self.settings,
            prop_col: self.prop_col,
            w_col: self.w_col,
            reported_as: self.reported_as,
            clip: self.clip,
            groups: vec![],
            bytes: 0,
            held: Held::new(self.func()),
        })
    }

    fn resize(&mut self, n: usize) {
        if self.groups.len() < n {
            let (cap, bits, keeps_rows) = (self.cap, self.method.grid_bits(), self.keeps_rows());
            self.groups
                .resize_with(n, || FitState::new(cap, bits, keeps_rows));
        }
    }

    fn num_groups(&self) -> usize {
        self.groups.len()
    }

    fn update(&mut self, values: &[ArrayRef], groups: &[usize], filter: Filter) -> Result<()> {
        self.update_rows(values, groups, filter)?;
        self.held.follow(self.bytes)
    }

    fn merge(&mut self, states: &[ArrayRef], groups: &[usize]) -> Result<()> {
        self.merge_states(states, groups)?;
        self.held.follow(self.bytes)
    }
    /// The partial state: per group its mode, rows and range; the points' (lo, n, t) lists;
    /// for grid groups only, the cell keys and moments (exact groups leave those lists
    /// empty: 24 bytes a point instead of 64); and each class's kept rows, ascending (8 bytes
    /// a row). A group that is not settled is handed on as a settled copy.
    fn state(&self, range: Range<usize>) -> Result<Vec<ArrayRef>> {
        let sorted = self.hands_on_sorted(&range);
        let sts: Vec<Cow<'_, FitState>> = self.groups[range]
            .iter()
            .map(|st| st.settled(sorted))
            .collect();
        let class_rows = [0, 1].map(|c| {
            let rows: Vec<Cow<'_, [f64]>> = sts.iter().map(|st| st.class_rows(c)).collect();
            let offsets = OffsetBuffer::from_lengths(rows.iter().map(|r| r.len()));
            let values: Vec<f64> = rows.iter().flat_map(|r| r.iter().copied()).collect();
            list_array(offsets, Arc::new(Float64Array::from(values)))
        });
        Ok(Self::state_of(&sts, class_rows))
    }

    /// [`Kernel::state`] after settling the groups, moving their kept rows out: one group's
    /// own rows become the lists' buffers without a copy (a partition's state); several are
    /// concatenated, each group's freed once copied.
    fn take_state(&mut self, range: Range<usize>) -> Result<Vec<ArrayRef>> {
        match (self.hands_on_sorted(&range), self.reads_rows_in_any_order()) {
            (true, _) => self.settle_sorted(range.clone()),
            (false, true) => self.settle_with(range.clone(), FitState::settle_unsorted),
            (false, false) => self.settle(range.clone()),
        }
        let mut rows: [Vec<Vec<f64>>; 2] = Default::default();
        for st in &mut self.groups[range.clone()] {
            let before = st.len_bytes();
            let taken = st
                .take_class_rows()
                .unwrap_or_else(|| [0, 1].map(|c| st.class_rows(c).into_owned()));
            self.bytes = (self.bytes + st.len_bytes()).saturating_sub(before);
            for (list, v) in rows.iter_mut().zip(taken) {
                list.push(v);
            }
        }
        let class_rows = rows.map(f64_lists);
        // The rows handed on leave this state's reservation (shrinking cannot fail).
        let _ = self.held.follow(self.bytes);
        let sts: Vec<Cow<'_, FitState>> = self.groups[range].iter().map(Cow::Borrowed).collect();
        Ok(Self::state_of(&sts, class_rows))
    }

    fn evaluate(&mut self, range: Range<usize>) -> Result<ArrayRef> {
        self.settle_for_reading(range.clone());
        let models: Vec<Option<Model>> = self.groups[range]
            .iter()
            .map(|st| self.finish(st))
            .collect();
        crate::model::models_to_array(&models)
    }

    fn drain(&mut self, n: usize) {
        for st in self.groups.drain(..n) {
            self.bytes -= st.len_bytes();
        }
        let _ = self.held.follow(self.bytes);
    }

    fn size(&self) -> usize {
        let rows = if self.held.holds() { 0 } else { self.bytes };
        rows + self.groups.capacity() * size_of::<FitState>()
    }

    fn native_labels(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fit::NONPARAMETRIC_EXACT_CAP;
    use arrow::array::Int8Array;

    /// A fit's state holds its bytes under its own reservation (its `size` then leaves them
    /// out), is refused more than the pool has, and gives them back when it hands its rows on:
    /// a final aggregation can then take them while the partial's stream is still alive.
    #[test]
    fn a_state_gives_its_reservation_back_when_handed_on() {
        let settings = Settings {
            count: 0,
            quantile: false,
            ips: false,
            lambda: 0.0,
        };
        let target = crate::values::spill::SpillTarget::for_tests(1 << 20);
        let mut kernel = FitKernel::for_field(Method::Isotonic, NONPARAMETRIC_EXACT_CAP, settings);
        kernel.held = target.held("fit_isotonic");
        kernel.resize(1);
        let rows = 20_000;
        let s: ArrayRef = Arc::new(Float64Array::from(
            (0..rows)
                .map(|i| i as f64 / rows as f64)
                .collect::<Vec<_>>(),
        ));
        let y: ArrayRef = Arc::new(Int8Array::from(
            (0..rows).map(|i| (i % 2) as i8).collect::<Vec<_>>(),
        ));
        kernel.update(&[s, y], &vec![0; rows], None).unwrap();
        assert!(
            target.reserved() >= rows * size_of::<f64>(),
            "{}",
            target.reserved()
        );
        assert!(kernel.size() < 1024, "{}", kernel.size());
        kernel.take_state(0..1).unwrap();
        assert!(target.reserved() < 1024, "{}", target.reserved());
        // More than the pool: refused by the pool, by name.
        let big = 200_000;
        let s: ArrayRef = Arc::new(Float64Array::from(
            (0..big).map(|i| i as f64 / big as f64).collect::<Vec<_>>(),
        ));
        let y: ArrayRef = Arc::new(Int8Array::from(vec![1i8; big]));
        let err = kernel.update(&[s, y], &vec![0; big], None).unwrap_err();
        assert!(err.to_string().contains("fit_isotonic state"), "{err}");
    }

    /// A partial state whose exact points or kept rows hold a value no row could make (a NaN
    /// or infinite score, a negative or NaN row count, a NaN target) is refused by name, not
    /// merged; a state stored before the rows were kept (without their two fields) merges.
    #[test]
    fn a_point_no_row_could_make_is_refused() {
        let settings = Settings {
            count: 0,
            quantile: false,
            ips: false,
            lambda: 0.0,
        };
        let kernel = || FitKernel::for_field(Method::Isotonic, NONPARAMETRIC_EXACT_CAP, settings);
        let mut source = kernel();
        source.resize(1);
        let s: ArrayRef = Arc::new(Float64Array::from(vec![0.1, 0.5, 0.9]));
        let y: ArrayRef = Arc::new(Int8Array::from(vec![0, 1, 1]));
        source.update(&[s, y], &[0, 0, 0], None).unwrap();
        // Points as a merged state's: (score, rows, Σ target).
        source.groups[0].add_sorted_points(&[0.2, 0.4], &[2.0, 3.0], &[1.0, 2.5]);
        source.groups[0].rows += 5;
        let state = source.take_state(0..1).unwrap();
        // Field 5, 6, 7: the points' scores, rows and targets; 12, 13: the kept rows' scores
        // of each class.
        for (field, bad) in [
            (5, f64::NAN),
            (5, f64::INFINITY),
            (6, -1.0),
            (6, f64::NAN),
            (7, f64::NAN),
            (12, f64::NAN),
            (13, f64::NEG_INFINITY),
        ] {
            let list = state[field].as_list::<i32>();
            let mut values = list
                .values()
                .as_primitive::<Float64Type>()
                .values()
                .to_vec();
            *values.last_mut().expect("a value") = bad;
            let mut tampered = state.clone();
            tampered[field] =
                list_array(list.offsets().clone(), Arc::new(Float64Array::from(values)));
            let mut target = kernel();
            target.resize(1);
            let err = target.merge(&tampered, &[0]).unwrap_err().to_string();
            assert!(
                err.contains("fit_isotonic: malformed partial state"),
                "field {field} = {bad}: {err}"
            );
        }
        // The untouched state merges.
        let mut target = kernel();
        target.resize(1);
        target.merge(&state, &[0]).unwrap();
        assert_eq!(target.groups[0].rows, 8);
        let points = |st: &FitState| -> Vec<(f64, f64, f64)> { st.sorted_points() };
        target.settle_sorted(0..1);
        assert_eq!(
            points(&target.groups[0]),
            [
                (0.1, 1.0, 0.0),
                (0.2, 2.0, 1.0),
                (0.4, 3.0, 2.5),
                (0.5, 1.0, 1.0),
                (0.9, 1.0, 1.0)
            ]
        );
        // A fit of probabilities refuses a kept row outside [0, 1].
        let bbq = || FitKernel::for_field(Method::Bbq, NONPARAMETRIC_EXACT_CAP, settings);
        let mut source = bbq();
        source.resize(1);
        let p: ArrayRef = Arc::new(Float64Array::from(vec![0.1, 0.5, 0.9]));
        let y: ArrayRef = Arc::new(Int8Array::from(vec![0, 1, 1]));
        source.update(&[p, y], &[0, 0, 0], None).unwrap();
        let mut outside = source.take_state(0..1).unwrap();
        let list = outside[13].as_list::<i32>();
        outside[13] = list_array(
            list.offsets().clone(),
            Arc::new(Float64Array::from(vec![0.5, 1.5])),
        );
        let mut target = bbq();
        target.resize(1);
        let err = target.merge(&outside, &[0]).unwrap_err().to_string();
        assert!(
            err.contains("fit_bbq: malformed partial state: a row's score is 1.5"),
            "{err}"
        );
        // Without the kept rows' fields: the points alone.
        let mut earlier = kernel();
        earlier.resize(1);
        earlier.merge(&state[..12], &[0]).unwrap();
        earlier.settle_sorted(0..1);
        assert_eq!(
            points(&earlier.groups[0]),
            [(0.2, 2.0, 1.0), (0.4, 3.0, 2.5)]
        );
    }
}
