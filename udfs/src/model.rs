//! The calibration model — one Arrow struct type shared by every `fit_*` aggregate, so
//! models of different methods can be stored in one Parquet table, unioned and compared —
//! and `calibrate(score, model [, field])`, which applies any of them through its method's
//! calibrator (`crate::fit`): the schema and its Arrow conversion, the typed view of a model
//! column ([`ModelRef`], with the accessors the calibrators' `apply` read), and the UDF.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher, RandomState};
use std::ops::Range;
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, Float64Array, Int32Array, Int64Array, ListArray,
    StringArray, StructArray,
};
use arrow::buffer::{NullBuffer, OffsetBuffer};
use arrow::datatypes::{DataType, Field, FieldRef, Fields, Float64Type, Int64Type};
use datafusion_common::{exec_err, plan_err, Result, ScalarValue};
use datafusion_expr::{
    ColumnarValue, Documentation, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDFImpl, Signature,
    TypeSignature, Volatility,
};
use datafusion_macros::user_doc;

pub use crate::fit::Method;

/// The fields of the model struct, in order.
pub fn model_fields() -> Fields {
    let list = crate::common::f64_list_type;
    Fields::from(vec![
        Field::new("method", DataType::Utf8, true),
        Field::new("a", DataType::Float64, true),
        Field::new("b", DataType::Float64, true),
        Field::new("c", DataType::Float64, true),
        Field::new("shift", DataType::Float64, true),
        Field::new("s_min", DataType::Float64, true),
        Field::new("s_max", DataType::Float64, true),
        Field::new("knots_x", list(), true),
        Field::new("knots_y", list(), true),
        Field::new("n", DataType::Int64, true),
        Field::new("weight", DataType::Float64, true),
        Field::new("loss", DataType::Float64, true),
        Field::new("iterations", DataType::Int32, true),
        Field::new("converged", DataType::Boolean, true),
        Field::new(
            "field_keys",
            DataType::List(Arc::new(Field::new_list_field(DataType::Utf8, true))),
            true,
        ),
        Field::new("field_values", list(), true),
        Field::new("field_edges", list(), true),
    ])
}

/// The model struct type.
pub fn model_type() -> DataType {
    DataType::Struct(model_fields())
}

/// A fitted model, one row of the model struct.
#[derive(Debug, Clone, PartialEq)]
pub struct Model {
    pub method: Method,
    pub a: Option<f64>,
    pub b: Option<f64>,
    pub c: Option<f64>,
    pub shift: Option<f64>,
    pub s_min: Option<f64>,
    pub s_max: Option<f64>,
    pub knots_x: Option<Vec<f64>>,
    pub knots_y: Option<Vec<f64>>,
    pub n: Option<i64>,
    pub weight: Option<f64>,
    pub loss: Option<f64>,
    pub iterations: Option<i32>,
    pub converged: Option<bool>,
    /// Field-aware models: the field's values (as text), in the order of the two lists below.
    pub field_keys: Option<Vec<String>>,
    /// `field_calib`: one offset per key; `confcalib`: `n_bins` multipliers per key.
    pub field_values: Option<Vec<f64>>,
    /// `confcalib`: `n_bins + 1` bin edges per key.
    pub field_edges: Option<Vec<f64>>,
}

impl Model {
    pub(crate) fn new(method: Method, rows: i64, s_min: f64, s_max: f64) -> Self {
        Model {
            method,
            s_min: Some(s_min),
            s_max: Some(s_max),
            n: Some(rows),
            weight: Some(rows as f64),
            a: None,
            b: None,
            c: None,
            shift: None,
            knots_x: None,
            knots_y: None,
            loss: None,
            iterations: None,
            converged: None,
            field_keys: None,
            field_values: None,
            field_edges: None,
        }
    }
}

fn f64_list(rows: impl Iterator<Item = Option<Vec<f64>>>) -> ArrayRef {
    let rows: Vec<Option<Vec<f64>>> = rows.collect();
    let offsets = OffsetBuffer::from_lengths(rows.iter().map(|r| r.as_ref().map_or(0, Vec::len)));
    let values: Float64Array = rows.iter().flatten().flatten().copied().map(Some).collect();
    let nulls = NullBuffer::from(rows.iter().map(Option::is_some).collect::<Vec<_>>());
    Arc::new(ListArray::new(
        Arc::new(Field::new_list_field(DataType::Float64, true)),
        offsets,
        Arc::new(values),
        Some(nulls),
    ))
}

fn utf8_list(rows: impl Iterator<Item = Option<Vec<String>>>) -> ArrayRef {
    let rows: Vec<Option<Vec<String>>> = rows.collect();
    let offsets = OffsetBuffer::from_lengths(rows.iter().map(|r| r.as_ref().map_or(0, Vec::len)));
    let values: StringArray = rows.iter().flatten().flatten().map(Some).collect();
    let nulls = NullBuffer::from(rows.iter().map(Option::is_some).collect::<Vec<_>>());
    Arc::new(ListArray::new(
        Arc::new(Field::new_list_field(DataType::Utf8, true)),
        offsets,
        Arc::new(values),
        Some(nulls),
    ))
}

/// Models as a struct array (NULL rows for groups without data).
pub(crate) fn models_to_array(models: &[Option<Model>]) -> Result<ArrayRef> {
    let get = |f: fn(&Model) -> Option<f64>| -> ArrayRef {
        Arc::new(
            models
                .iter()
                .map(|m| m.as_ref().and_then(f))
                .collect::<Float64Array>(),
        )
    };
    let columns: Vec<ArrayRef> = vec![
        Arc::new(
            models
                .iter()
                .map(|m| m.as_ref().map(|m| m.method.as_str()))
                .collect::<StringArray>(),
        ),
        get(|m| m.a),
        get(|m| m.b),
        get(|m| m.c),
        get(|m| m.shift),
        get(|m| m.s_min),
        get(|m| m.s_max),
        f64_list(
            models
                .iter()
                .map(|m| m.as_ref().and_then(|m| m.knots_x.clone())),
        ),
        f64_list(
            models
                .iter()
                .map(|m| m.as_ref().and_then(|m| m.knots_y.clone())),
        ),
        Arc::new(
            models
                .iter()
                .map(|m| m.as_ref().and_then(|m| m.n))
                .collect::<Int64Array>(),
        ),
        get(|m| m.weight),
        get(|m| m.loss),
        Arc::new(
            models
                .iter()
                .map(|m| m.as_ref().and_then(|m| m.iterations))
                .collect::<Int32Array>(),
        ),
        Arc::new(
            models
                .iter()
                .map(|m| m.as_ref().and_then(|m| m.converged))
                .collect::<BooleanArray>(),
        ),
        utf8_list(
            models
                .iter()
                .map(|m| m.as_ref().and_then(|m| m.field_keys.clone())),
        ),
        f64_list(
            models
                .iter()
                .map(|m| m.as_ref().and_then(|m| m.field_values.clone())),
        ),
        f64_list(
            models
                .iter()
                .map(|m| m.as_ref().and_then(|m| m.field_edges.clone())),
        ),
    ];
    let nulls = NullBuffer::from(models.iter().map(Option::is_some).collect::<Vec<_>>());
    Ok(Arc::new(StructArray::try_new(
        model_fields(),
        columns,
        Some(nulls),
    )?))
}

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
enum FieldColumn<'a> {
    Int(&'a Int64Array),
    Text(&'a StringArray),
}

impl<'a> FieldColumn<'a> {
    fn of(a: &'a ArrayRef) -> Self {
        match a.data_type() {
            DataType::Int64 => FieldColumn::Int(a.as_primitive::<Int64Type>()),
            _ => FieldColumn::Text(a.as_string::<i32>()),
        }
    }

    fn is_null(&self, i: usize) -> bool {
        match self {
            FieldColumn::Int(a) => a.is_null(i),
            FieldColumn::Text(a) => a.is_null(i),
        }
    }

    fn key(&self, i: usize) -> FieldKey<'a> {
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
struct PreparedConfCalib<'a> {
    index: Arc<KeyIndex>,
    row: ConfCalibRow<'a>,
}

impl<'a> PreparedConfCalib<'a> {
    /// `m`'s row 0 prepared, when it is a confcalib model; `None` for any other model.
    fn new(m: &ModelRef<'a>) -> Result<Option<Self>> {
        if m.method.is_null(0) || m.method_name(0) != Method::ConfCalib.as_str() {
            return Ok(None);
        }
        Ok(Some(PreparedConfCalib {
            index: m.key_index(0)?,
            row: ConfCalibRow::new(m, 0)?,
        }))
    }

    fn apply(&self, s: f64, key: FieldKey<'_>) -> Result<f64> {
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
    method: &'a StringArray,
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
        let part = |l: Option<&'a ListArray>, name: &str| -> Result<&'a [f64]> {
            match l {
                Some(l) if l.is_valid(row) => {
                    let offs = l.value_offsets();
                    let vals = l.values().as_primitive::<Float64Type>().values();
                    Ok(&vals[offs[row] as usize..offs[row + 1] as usize])
                }
                _ => exec_err!("calibrate: argument model has no {name}"),
            }
        };
        let (x, y) = (
            part(self.knots_x, "knots_x")?,
            part(self.knots_y, "knots_y")?,
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

/// The model argument must be a struct whose fields calibrate reads have the model's types.
fn check_model_type(t: &DataType) -> Result<()> {
    let DataType::Struct(fields) = t else {
        return plan_err!(
            "calibrate: argument model must be a model struct (the result of a fit_* aggregate), got type {t}"
        );
    };
    let want = model_fields();
    for f in fields {
        if let Some((_, w)) = want.find(f.name()) {
            if w.data_type() != f.data_type() {
                return plan_err!(
                    "calibrate: argument model field {} must be {}, got {}",
                    f.name(),
                    w.data_type(),
                    f.data_type()
                );
            }
        }
    }
    if fields.find("method").is_none() {
        return plan_err!("calibrate: argument model must have a method field");
    }
    Ok(())
}

#[user_doc(
    doc_section(label = "Calibrators"),
    description = "Applies a calibration model fitted by any `fit_*` aggregate to a score and returns the calibrated \
probability. Gaussian and Gamma models clamp the score into the fitted range [s_min, s_max]; isotonic models \
interpolate between their knots and clip outside; histogram models clamp into the range. Field-aware models \
(`field_calib`, `confcalib`) take the field as a third argument, the others refuse it.",
    syntax_example = "calibrate(score, model [, field])",
    sql_example = r#"```sql
> SELECT calibrate(s, m) AS p
  FROM (VALUES (1.0), (2.5), (9.0)) AS t(s)
  CROSS JOIN (SELECT fit_isotonic(x, y) AS m FROM (VALUES (1.0, 0), (2.0, 1), (3.0, 0), (4.0, 1)) AS v(x, y));
+-----+
| p   |
+-----+
| 0.0 |
| 0.5 |
| 1.0 |
+-----+
```"#,
    argument(name = "score", description = "The raw score to calibrate."),
    argument(
        name = "model",
        description = "A model struct from any fit_* aggregate."
    ),
    argument(
        name = "field",
        description = "The field value, for the field-aware models (fit_field_calib, fit_confcalib) and only for them; compared as text. A value the fit never saw gets offset 0 (field_calib) or is left unchanged (confcalib)."
    )
)]
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Calibrate {
    signature: Signature,
}

impl Default for Calibrate {
    fn default() -> Self {
        Self::new()
    }
}

impl Calibrate {
    pub fn new() -> Self {
        let mut signature = Signature::one_of(
            vec![
                TypeSignature::UserDefined,
                TypeSignature::Exact(vec![DataType::Float64, model_type()]),
                TypeSignature::Exact(vec![DataType::Float64, model_type(), DataType::Utf8]),
            ],
            Volatility::Immutable,
        );
        // Named arguments, as every other function takes them (`calibrate(s, m, field =>
        // site)`). Set directly: `with_parameter_names` refuses a variable arity.
        signature.parameter_names = Some(vec![
            "score".to_string(),
            "model".to_string(),
            "field".to_string(),
        ]);
        Self { signature }
    }
}

/// `calibrate(score, model [, field])` has no argument with a default.
impl crate::registry::Shaped for Calibrate {
    fn call_shape(&self) -> Option<crate::common::CallShape> {
        None
    }
}

impl ScalarUDFImpl for Calibrate {
    fn name(&self) -> &str {
        "calibrate"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    /// Numeric scores to Float64, everything else unchanged, so `return_type` reports a bad
    /// call with this function's own message.
    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        Ok(arg_types
            .iter()
            .enumerate()
            .map(|(i, t)| {
                if i == 0 && t.is_numeric() {
                    DataType::Float64
                } else {
                    t.clone()
                }
            })
            .collect())
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        if !(2..=3).contains(&arg_types.len()) {
            return plan_err!(
                "calibrate: takes 2 or 3 arguments, got {}; the signature is calibrate(score, model [, field])",
                arg_types.len()
            );
        }
        if !(arg_types[0].is_numeric() || arg_types[0].is_null()) {
            return plan_err!(
                "calibrate: argument score must be numeric, got type {}",
                arg_types[0]
            );
        }
        check_model_type(&arg_types[1])?;
        Ok(DataType::Float64)
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        let types: Vec<DataType> = args
            .arg_fields
            .iter()
            .map(|f| f.data_type().clone())
            .collect();
        Ok(Arc::new(Field::new(
            "calibrate",
            self.return_type(&types)?,
            true,
        )))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let all_scalar = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let score_scalar = matches!(args.args[0], ColumnarValue::Scalar(_));
        let model_scalar = matches!(args.args[1], ColumnarValue::Scalar(_));
        let n = if all_scalar { 1 } else { args.number_rows };
        let score = match &args.args[0] {
            ColumnarValue::Scalar(s) => s.to_array_of_size(1)?,
            ColumnarValue::Array(a) => Arc::clone(a),
        };
        let score = arrow::compute::cast(&score, &DataType::Float64)?;
        let score = score.as_primitive::<Float64Type>();
        let model = match &args.args[1] {
            // One model for every row (a literal): read where it lies, so that the same
            // model's keys are recognised from batch to batch.
            ColumnarValue::Scalar(ScalarValue::Struct(a)) => Arc::clone(a) as ArrayRef,
            ColumnarValue::Scalar(s) => s.to_array_of_size(1)?,
            ColumnarValue::Array(a) => Arc::clone(a),
        };
        let structs = model.as_struct();
        let view = ModelRef::new(structs)?;
        // The field, as text (the form the field-aware fits store their keys in).
        let field = match args.args.get(2) {
            Some(ColumnarValue::Scalar(s)) => Some((s.to_array_of_size(1)?, true)),
            Some(ColumnarValue::Array(a)) => Some((Arc::clone(a), false)),
            None => None,
        };
        // Integer fields are compared as integers (no text per row), others as text.
        let field = match &field {
            Some((a, scalar))
                if matches!(
                    a.data_type(),
                    DataType::Int8
                        | DataType::Int16
                        | DataType::Int32
                        | DataType::Int64
                        | DataType::UInt8
                        | DataType::UInt16
                        | DataType::UInt32
                ) =>
            {
                Some((arrow::compute::cast(a, &DataType::Int64)?, *scalar))
            }
            Some((a, scalar)) => Some((arrow::compute::cast(a, &DataType::Utf8)?, *scalar)),
            None => None,
        };
        let field = field
            .as_ref()
            .map(|(a, scalar)| (FieldColumn::of(a), *scalar));
        // One confcalib model for the batch: resolved once, not per row.
        let prepared = if n > 0 && model_scalar && field.is_some() && !structs.is_null(0) {
            PreparedConfCalib::new(&view)?
        } else {
            None
        };
        let mut out = Vec::with_capacity(n);
        for i in 0..n {
            let si = if score_scalar { 0 } else { i };
            let mi = if model_scalar { 0 } else { i };
            if score.is_null(si) || structs.is_null(mi) || view.method.is_null(mi) {
                out.push(None);
                continue;
            }
            let s = score.value(si);
            if s.is_nan() {
                return exec_err!("calibrate: argument score must be a number, got NaN");
            }
            out.push(match &field {
                None => Some(apply(&view, mi, s)?),
                Some((keys, scalar)) => {
                    let fi = if *scalar { 0 } else { i };
                    if keys.is_null(fi) {
                        None
                    } else if let Some(p) = &prepared {
                        Some(p.apply(s, keys.key(fi))?)
                    } else {
                        Some(apply_field(&view, mi, s, keys.key(fi))?)
                    }
                }
            });
        }
        let arr: ArrayRef = Arc::new(Float64Array::from(out));
        Ok(if all_scalar {
            ColumnarValue::Scalar(ScalarValue::try_from_array(&arr, 0)?)
        } else {
            ColumnarValue::Array(arr)
        })
    }

    fn documentation(&self) -> Option<&Documentation> {
        self.doc()
    }
}
