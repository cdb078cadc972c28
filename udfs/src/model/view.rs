//! The typed view of a model column ([`ModelRef`]): the accessors the calibrators' `apply`
//! read, the field-key index of the field-aware models, and the evaluation of a model at a
//! score.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher, RandomState};
use std::ops::Range;
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, Float64Array, Int64Array, ListArray, StringArray, StructArray,
};
use arrow::datatypes::{DataType, Float64Type, Int64Type};
use datafusion_common::{exec_err, Result};

use super::Method;

/// Evaluates one model at a score.
pub fn apply(m: &ModelRef<'_>, row: usize, s: f64) -> Result<f64> {
    m.method(row)?.calibrator().apply(m, row, s)
}

/// Whether a model method is field-aware (applied by `calibrate(score, model, field)`).
pub fn is_field_method(method: &str) -> bool {
    Method::parse(method).is_some_and(Method::is_field_aware)
}

/// A field value as `calibrate` compares it with a model's keys: as text, or, for an integer
/// field, as the integer (a key matches when it is the integer's decimal text).
#[derive(Debug, Clone, Copy)]
pub enum FieldKey<'a> {
    Text(&'a str),
    Int(i64),
}

/// A field column as [`calibrate`](Calibrate) compares it, typed once per batch: Int64 (the
/// integer fields, cast) by integer, anything else (cast to Utf8) by text.
pub(super) enum FieldColumn<'a> {
    Int(&'a Int64Array),
    Text(&'a StringArray),
}

impl<'a> FieldColumn<'a> {
    pub(super) fn of(a: &'a ArrayRef) -> Self {
        match a.data_type() {
            DataType::Int64 => FieldColumn::Int(a.as_primitive::<Int64Type>()),
            _ => FieldColumn::Text(a.as_string::<i32>()),
        }
    }

    pub(super) fn is_null(&self, i: usize) -> bool {
        match self {
            FieldColumn::Int(a) => a.is_null(i),
            FieldColumn::Text(a) => a.is_null(i),
        }
    }

    pub(super) fn key(&self, i: usize) -> FieldKey<'a> {
        match self {
            FieldColumn::Int(a) => FieldKey::Int(a.value(i)),
            FieldColumn::Text(a) => FieldKey::Text(a.value(i)),
        }
    }
}

/// Evaluates a field-aware model at a score and a field value.
pub fn apply_field(m: &ModelRef<'_>, row: usize, s: f64, key: FieldKey<'_>) -> Result<f64> {
    m.method(row)?.calibrator().apply_field(m, row, s, key)
}

/// A confcalib model takes probabilities.
pub(crate) fn check_probability(s: f64) -> Result<()> {
    if (0.0..=1.0).contains(&s) {
        Ok(())
    } else {
        exec_err!("calibrate: a confcalib model takes a probability in [0, 1] as score, got {s}")
    }
}

/// A confcalib model row's multipliers and bin edges, checked: `bins` per key.
pub(crate) struct ConfCalibRow<'a> {
    multipliers: &'a [f64],
    edges: &'a [f64],
    bins: usize,
}

impl<'a> ConfCalibRow<'a> {
    pub(crate) fn new(m: &ModelRef<'a>, row: usize) -> Result<Self> {
        let keys = m.field_keys.map_or(0, |k| k.value_length(row) as usize);
        let multipliers = m.floats(m.field_values, row, "field_values")?;
        let edges = m.floats(m.field_edges, row, "field_edges")?;
        let bins = multipliers.len() / keys.max(1);
        if bins == 0 || multipliers.len() != keys * bins || edges.len() != keys * (bins + 1) {
            return exec_err!("calibrate: argument model has malformed field_values/field_edges");
        }
        Ok(ConfCalibRow {
            multipliers,
            edges,
            bins,
        })
    }

    /// The calibrated value of the probability `s` of the key at `position`.
    pub(crate) fn scale(&self, s: f64, position: usize) -> f64 {
        let bins = self.bins;
        let own = &self.edges[position * (bins + 1)..(position + 1) * (bins + 1)];
        let b = own[1..bins].partition_point(|&e| e < s);
        (s * self.multipliers[position * bins + b]).clamp(0.0, 1.0)
    }
}

/// One confcalib model for a whole batch (a literal), resolved once: its key index and lists.
pub(super) struct PreparedConfCalib<'a> {
    index: Arc<KeyIndex>,
    row: ConfCalibRow<'a>,
}

impl<'a> PreparedConfCalib<'a> {
    /// `m`'s row 0 prepared, when it is a confcalib model; `None` for any other model.
    pub(super) fn new(m: &ModelRef<'a>) -> Result<Option<Self>> {
        if m.method.is_null(0) || m.method_name(0) != Method::ConfCalib.as_str() {
            return Ok(None);
        }
        Ok(Some(PreparedConfCalib {
            index: m.key_index(0)?,
            row: ConfCalibRow::new(m, 0)?,
        }))
    }

    pub(super) fn apply(&self, s: f64, key: FieldKey<'_>) -> Result<f64> {
        check_probability(s)?;
        Ok(match self.index.get(key) {
            Some(i) => self.row.scale(s, i),
            None => s,
        })
    }
}

/// `numpy.interp`: linear between knots, the end values outside. Knots from `fit_isotonic`
/// are increasing; the segment used is checked, so an edited model with unordered knots is
/// an error rather than a wrong number.
pub(crate) fn interp(s: f64, x: &[f64], y: &[f64]) -> Result<f64> {
    let n = x.len();
    if s <= x[0] {
        return Ok(y[0]);
    }
    if s >= x[n - 1] {
        return Ok(y[n - 1]);
    }
    let j = x.partition_point(|&v| v <= s).clamp(1, n - 1); // x[j-1] <= s < x[j]
    let (x0, x1, y0, y1) = (x[j - 1], x[j], y[j - 1], y[j]);
    if !(x0 <= s && s < x1) {
        return exec_err!("calibrate: argument model has knots_x that are not increasing");
    }
    if s == x0 {
        return Ok(y0);
    }
    Ok(y0 + (s - x0) * (y1 - y0) / (x1 - x0))
}

/// A model row's keys → their positions, by text and (keys that are an integer's decimal
/// text) by integer.
#[derive(Debug, Default)]
struct KeyIndex {
    by_text: HashMap<String, usize, RandomState>,
    by_int: HashMap<i64, usize, BuildHasherDefault<IntHasher>>,
}

/// The hash of an integer key: one multiplication (Fibonacci hashing). The keys come from
/// the model, not from a client, so a hash that resists chosen collisions is not needed.
#[derive(Debug, Default)]
struct IntHasher(u64);

impl Hasher for IntHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_i64(&mut self, v: i64) {
        self.0 = (v as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

impl KeyIndex {
    fn new(keys: &StringArray, range: Range<usize>) -> Self {
        let mut index = KeyIndex::default();
        for (i, j) in range.enumerate() {
            let key = keys.value(j);
            index.by_text.entry(key.to_string()).or_insert(i);
            if let Ok(v) = key.parse::<i64>() {
                if v.to_string() == key {
                    index.by_int.entry(v).or_insert(i);
                }
            }
        }
        index
    }

    fn get(&self, key: FieldKey<'_>) -> Option<usize> {
        match key {
            FieldKey::Text(k) => self.by_text.get(k).copied(),
            FieldKey::Int(v) => self.by_int.get(&v).copied(),
        }
    }
}

/// Where a cached key index came from: the model row's keys, identified by their buffers and
/// range. The cache holds the keys array itself, so its buffers stay allocated and no other
/// model's keys can be found at the same addresses.
struct KeySource {
    keys: ListArray,
    range: Range<usize>,
}

impl KeySource {
    fn is(&self, keys: &ListArray, range: &Range<usize>) -> bool {
        let same = |a: &ListArray, b: &ListArray| {
            let (va, vb) = (a.values().as_string::<i32>(), b.values().as_string::<i32>());
            a.offsets().inner().inner().as_ptr() == b.offsets().inner().inner().as_ptr()
                && va.values().as_ptr() == vb.values().as_ptr()
                && va.offsets().inner().inner().as_ptr() == vb.offsets().inner().inner().as_ptr()
                && va.len() == vb.len()
        };
        self.range == *range && same(&self.keys, keys)
    }
}

thread_local! {
    /// The key index of the field-aware model this thread applied last: a model passed as
    /// one literal (see calibsql's constant joins) is indexed once, not once per batch.
    static KEY_INDEX: std::cell::RefCell<Option<(KeySource, Arc<KeyIndex>)>> =
        const { std::cell::RefCell::new(None) };
}

/// Typed views of the columns of a model struct array.
pub struct ModelRef<'a> {
    pub(super) method: &'a StringArray,
    a: Option<&'a Float64Array>,
    b: Option<&'a Float64Array>,
    c: Option<&'a Float64Array>,
    shift: Option<&'a Float64Array>,
    s_min: Option<&'a Float64Array>,
    s_max: Option<&'a Float64Array>,
    knots_x: Option<&'a ListArray>,
    knots_y: Option<&'a ListArray>,
    field_keys: Option<&'a ListArray>,
    pub(crate) field_values: Option<&'a ListArray>,
    field_edges: Option<&'a ListArray>,
    /// The `knots_x` slice last checked to be increasing (a constant model is checked once).
    checked: std::cell::Cell<Option<(*const f64, usize)>>,
    /// The key index of the model row last used by a field-aware call: its key range and
    /// the index.
    key_index: std::cell::RefCell<Option<(Range<usize>, Arc<KeyIndex>)>>,
}

impl<'a> ModelRef<'a> {
    /// The stored method text of row `row`.
    pub(crate) fn method_name(&self, row: usize) -> &'a str {
        self.method.value(row)
    }

    /// The method of row `row`; an unknown one is an error that lists the known ones.
    pub(crate) fn method(&self, row: usize) -> Result<Method> {
        let name = self.method_name(row);
        match Method::parse(name) {
            Some(m) => Ok(m),
            None => {
                let known: Vec<&str> = Method::ALL.iter().map(|m| m.as_str()).collect();
                let (last, rest) = known.split_last().expect("calibrators are listed");
                exec_err!(
                    "calibrate: argument model has unknown method '{name}' (expected {} or {last})",
                    rest.join(", ")
                )
            }
        }
    }

    /// The number `name` (a Float64 field: `a`, `b`, `c`, `shift`, `s_min`, `s_max`) of row
    /// `row`, or an error naming it.
    pub(crate) fn num(&self, row: usize, name: &str) -> Result<f64> {
        let col = match name {
            "a" => self.a,
            "b" => self.b,
            "c" => self.c,
            "shift" => self.shift,
            "s_min" => self.s_min,
            "s_max" => self.s_max,
            _ => None,
        };
        match col {
            Some(c) if c.is_valid(row) => Ok(c.value(row)),
            _ => exec_err!(
                "calibrate: argument model ({} model) has no {name}",
                self.method_name(row)
            ),
        }
    }

    /// The fitted range [s_min, s_max] of row `row`. A model read back from a file may have
    /// been edited, so the range is checked (`f64::clamp` panics on NaN or reversed bounds).
    pub(crate) fn range(&self, row: usize) -> Result<(f64, f64)> {
        let (lo, hi) = (self.num(row, "s_min")?, self.num(row, "s_max")?);
        if lo <= hi {
            Ok((lo, hi))
        } else {
            exec_err!("calibrate: argument model has an empty range: s_min {lo}, s_max {hi}")
        }
    }

    /// `s` clamped into the fitted range of row `row`.
    pub(crate) fn clamp(&self, row: usize, s: f64) -> Result<f64> {
        let (lo, hi) = self.range(row)?;
        Ok(s.clamp(lo, hi))
    }

    /// A step function with bins closed on the right (`histogram_quantile`, `bbq`): the edges
    /// in `knots_x`, one more than the values in `knots_y`; `s` takes the value of the number
    /// of inner edges strictly below it.
    pub(crate) fn right_closed_step(&self, row: usize, s: f64) -> Result<f64> {
        let (x, y) = self.knots(row)?;
        if x.len() != y.len() + 1 {
            return exec_err!("calibrate: argument model has malformed knots");
        }
        let inner = &x[1..x.len() - 1];
        Ok(y[inner.partition_point(|&e| e < s).min(y.len() - 1)])
    }

    /// The knots of row `row` as the points of a curve (`isotonic`, `ilps`): as many x as y,
    /// x increasing (checked once per model slice).
    pub(crate) fn increasing_knots(&self, row: usize) -> Result<(&'a [f64], &'a [f64])> {
        let (x, y) = self.knots(row)?;
        if x.len() != y.len() {
            return exec_err!("calibrate: argument model has malformed knots");
        }
        if self.checked.get() != Some((x.as_ptr(), x.len())) {
            if !x.windows(2).all(|w| w[0] < w[1]) {
                return exec_err!("calibrate: argument model has knots_x that are not increasing");
            }
            self.checked.set(Some((x.as_ptr(), x.len())));
        }
        Ok((x, y))
    }

    /// A Float64 list of this row, or an error naming it.
    pub(crate) fn floats(
        &self,
        l: Option<&'a ListArray>,
        row: usize,
        name: &str,
    ) -> Result<&'a [f64]> {
        match l {
            Some(l) if l.is_valid(row) => {
                let offs = l.value_offsets();
                let vals = l.values().as_primitive::<Float64Type>().values();
                Ok(&vals[offs[row] as usize..offs[row + 1] as usize])
            }
            _ => exec_err!("calibrate: argument model has no {name}"),
        }
    }

    /// The position of `key` among the row's field keys, None for a value the fit never saw.
    pub(crate) fn field_position(&self, row: usize, key: FieldKey<'_>) -> Result<Option<usize>> {
        Ok(self.key_index(row)?.get(key))
    }

    /// The key index of the row's field keys.
    fn key_index(&self, row: usize) -> Result<Arc<KeyIndex>> {
        let Some(keys) = self.field_keys.filter(|k| k.is_valid(row)) else {
            return exec_err!("calibrate: argument model has no field_keys");
        };
        let offs = keys.value_offsets();
        let range = offs[row] as usize..offs[row + 1] as usize;
        let mut cache = self.key_index.borrow_mut();
        if cache.as_ref().is_none_or(|(r, _)| *r != range) {
            let index = KEY_INDEX.with_borrow_mut(|last| match last {
                Some((source, index)) if source.is(keys, &range) => Arc::clone(index),
                _ => {
                    let index = Arc::new(KeyIndex::new(
                        keys.values().as_string::<i32>(),
                        range.clone(),
                    ));
                    let source = KeySource {
                        keys: keys.clone(),
                        range: range.clone(),
                    };
                    *last = Some((source, Arc::clone(&index)));
                    index
                }
            });
            *cache = Some((range, index));
        }
        Ok(Arc::clone(&cache.as_ref().expect("indexed above").1))
    }

    /// The knots `knots_x`, `knots_y` of row `row` (`knots_y` not empty).
    pub(crate) fn knots(&self, row: usize) -> Result<(&'a [f64], &'a [f64])> {
        let (x, y) = (
            self.floats(self.knots_x, row, "knots_x")?,
            self.floats(self.knots_y, row, "knots_y")?,
        );
        if y.is_empty() {
            return exec_err!("calibrate: argument model has malformed knots");
        }
        Ok((x, y))
    }

    /// Views `s` (a struct array that passed `check_model_type`).
    pub fn new(s: &'a StructArray) -> Result<Self> {
        let f = |name: &str| -> Option<&'a Float64Array> {
            s.column_by_name(name)
                .map(|c| c.as_primitive::<Float64Type>())
        };
        let l = |name: &str| -> Option<&'a ListArray> {
            s.column_by_name(name).map(|c| c.as_list::<i32>())
        };
        let method = match s.column_by_name("method") {
            Some(c) => c.as_string::<i32>(),
            None => return exec_err!("calibrate: argument model has no method field"),
        };
        Ok(Self {
            method,
            a: f("a"),
            b: f("b"),
            c: f("c"),
            shift: f("shift"),
            s_min: f("s_min"),
            s_max: f("s_max"),
            knots_x: l("knots_x"),
            knots_y: l("knots_y"),
            field_keys: l("field_keys"),
            field_values: l("field_values"),
            field_edges: l("field_edges"),
            checked: std::cell::Cell::new(None),
            key_index: std::cell::RefCell::new(None),
        })
    }
}
