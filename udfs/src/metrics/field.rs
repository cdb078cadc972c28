//! `field_ece` and `field_rce`: calibration error per value of a field [Pan et al. eq. 5–6].
//!
//! State per group: one entry per distinct field value — Σw, Σw·y, Σw·(y − p) — so memory is
//! O(distinct values). Field values of any hashable type are keyed by their arrow row encoding
//! (NULL is its own key, as in `GROUP BY`); the partial state carries the keys as
//! `List<Binary>` next to three `List<Float64>` columns.

use std::hash::Hash;
use std::ops::Range;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BinaryArray, Float64Array, Int64Array};
use arrow::buffer::OffsetBuffer;
use arrow::compute::cast;
use arrow::datatypes::{DataType, Field, FieldRef, Int64Type};
use arrow::row::{RowConverter, SortField};
use datafusion_common::{internal_err, Result};
use datafusion_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion_expr::utils::format_state_name;
use datafusion_expr::{AggregateUDFImpl, Documentation, Signature};
use datafusion_macros::user_doc;
use hashbrown::HashMap;

use crate::common::{
    all_probabilities, all_weights, args, check_p, check_w, check_y, f64_list_type, f64s,
    for_each_row, list_array, list_parts, literal_checked, sum_in_order, usable_rows_pyw,
    weight_col, CallShape,
};
use crate::dense::{is_small_int, DenseIndex, NO_ENTRY};
use crate::kernel::Filter;
use crate::kernel::{kernel_aggregate, kernel_udaf_common, Kernel};
use crate::labels::all_labels;

/// Default smoothing of the RCE denominator [Pan et al.].
pub const DEFAULT_RCE_EPS: f64 = 0.01;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FieldKind {
    Ece,
    Rce,
}

#[user_doc(
    doc_section(label = "Calibration Metrics"),
    description = "Field-level expected calibration error (Pan et al. eq. 5): `Σ_z |Σ_{field=z} w (y − p)| / Σ w`, \
the calibration gap measured per value z of a field (advertiser, site, …), where a global metric hides opposite \
biases. NULL field values form one group. NULL when no row is usable.",
    syntax_example = "field_ece(p, y, field [, w])",
    sql_example = r#"```sql
> SELECT field_ece(p, y, site) AS fece FROM (VALUES (0.5, 1, 'a'), (0.5, 1, 'a'), (0.5, 0, 'b'), (0.5, 0, 'b')) AS t(p, y, site);
+------+
| fece |
+------+
| 0.5  |
+------+
```"#
)]
struct FieldEceDoc;

#[user_doc(
    doc_section(label = "Calibration Metrics"),
    description = "Field-level relative calibration error (Pan et al. eq. 6): \
`(1/N) Σ_z N_z · |Σ_z w (y − p)| / (Σ_z w·y + eps·N_z)` with `N_z = Σ_{field=z} w` and `N = Σ w`. Multi-field RCE \
(Zhao et al.) is the mean of `field_rce` over several fields. NULL field values form one group. A value with no \
weight is skipped; with eps = 0, a value without positives whose gap is not 0 gives Infinity. NULL when no row is \
usable.",
    syntax_example = "field_rce(p, y, field [, eps [, w]])",
    sql_example = r#"```sql
> SELECT field_rce(p, y, site, 0) AS frce FROM (VALUES (0.25, 1, 'a'), (0.25, 0, 'a'), (0.5, 1, 'b'), (0.5, 1, 'b')) AS t(p, y, site);
+------+
| frce |
+------+
| 0.5  |
+------+
```"#
)]
struct FieldRceDoc;

/// `field_ece` or `field_rce`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct FieldMetric {
    kind: FieldKind,
    signature: Signature,
}

crate::kernel::signature_from_shape!(FieldMetric, kind: FieldKind);

impl FieldKind {
    /// This function's name and arguments.
    fn shape(self) -> CallShape {
        match self {
            FieldKind::Ece => CallShape {
                name: "field_ece",
                required: &[args::P, args::Y, args::FIELD],
                optional: &[args::W],
            },
            FieldKind::Rce => CallShape {
                name: "field_rce",
                required: &[args::P, args::Y, args::FIELD],
                optional: const {
                    &[
                        args::EPS
                            .or("0.01")
                            .doc("Smoothing of the denominator, a constant >= 0. Default 0.01."),
                        args::W,
                    ]
                },
            },
        }
    }
}

impl FieldMetric {
    fn kernel(&self, args: &AccumulatorArgs) -> Result<FieldKernel> {
        let func = self.shape().name;
        let (eps, w_col) = match self.kind {
            FieldKind::Ece => (0.0, weight_col(args.exprs, 3)),
            FieldKind::Rce => {
                let eps = match args.exprs.get(3) {
                    Some(e) => literal_checked(func, "eps", e, "finite and >= 0", |x| {
                        x.is_finite() && x >= 0.0
                    })?,
                    None => DEFAULT_RCE_EPS,
                };
                (eps, weight_col(args.exprs, 4))
            }
        };
        let field_type = args.expr_fields[2].data_type().clone();
        FieldKernel::new(func, self.kind, eps, w_col, field_type)
    }
}

kernel_aggregate!(FieldMetric, true);

impl AggregateUDFImpl for FieldMetric {
    kernel_udaf_common!(returns DataType::Float64);

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        let keys = DataType::List(Arc::new(Field::new_list_field(DataType::Binary, true)));
        Ok(vec![
            Arc::new(Field::new(format_state_name(args.name, "keys"), keys, true)),
            Arc::new(Field::new(
                format_state_name(args.name, "w"),
                f64_list_type(),
                true,
            )),
            Arc::new(Field::new(
                format_state_name(args.name, "wy"),
                f64_list_type(),
                true,
            )),
            Arc::new(Field::new(
                format_state_name(args.name, "wd"),
                f64_list_type(),
                true,
            )),
        ])
    }

    fn documentation(&self) -> Option<&Documentation> {
        let doc = match self.kind {
            FieldKind::Ece => FieldEceDoc.doc(),
            FieldKind::Rce => FieldRceDoc.doc(),
        };
        crate::common::documented(doc, &self.shape())
    }
}

/// Σw, Σw·y, Σw·(y − p) of one field value.
pub(crate) type FieldStats = [f64; 3];

/// A field value as a hash key: integers as themselves (the fast path: no row encoding, one
/// 8-byte hash), any other type as its arrow row encoding (which encodes NULL itself). Keys
/// serialise to bytes in the partial state: integers as 8 little-endian bytes, NULL as none.
trait FieldKey: Hash + Eq + Clone + std::fmt::Debug + Send + Sync + 'static {
    fn to_bytes(&self) -> Vec<u8>;
    fn from_bytes(b: &[u8]) -> Result<Self>;
    fn heap_bytes(&self) -> usize;
}

impl FieldKey for i64 {
    fn to_bytes(&self) -> Vec<u8> {
        self.to_le_bytes().to_vec()
    }
    fn from_bytes(b: &[u8]) -> Result<Self> {
        match <[u8; 8]>::try_from(b) {
            Ok(a) => Ok(i64::from_le_bytes(a)),
            Err(_) => internal_err!("field key of {} bytes in an integer field state", b.len()),
        }
    }
    fn heap_bytes(&self) -> usize {
        0
    }
}

impl FieldKey for Box<[u8]> {
    fn to_bytes(&self) -> Vec<u8> {
        self.to_vec()
    }
    fn from_bytes(b: &[u8]) -> Result<Self> {
        Ok(b.into())
    }
    fn heap_bytes(&self) -> usize {
        2 * self.len()
    }
}

/// The field values seen in one group and their sums. `keys[i]` is the key of `stats[i]`,
/// `None` for the NULL field value (integer fields keep NULL out of the hash map).
#[derive(Debug)]
struct FieldMap<K> {
    index: HashMap<K, usize>,
    null: Option<usize>,
    keys: Vec<Option<K>>,
    stats: Vec<FieldStats>,
}

impl<K> Default for FieldMap<K> {
    fn default() -> Self {
        Self {
            index: HashMap::default(),
            null: None,
            keys: vec![],
            stats: vec![],
        }
    }
}

#[inline]
fn add_stats(e: &mut FieldStats, s: FieldStats) {
    e[0] += s[0];
    e[1] += s[1];
    e[2] += s[2];
}

impl<K: FieldKey> FieldMap<K> {
    /// Bytes one entry costs, roughly (map slot, key vector slot, stats, key heap bytes).
    fn entry_bytes(key: &Option<K>) -> usize {
        2 * size_of::<Option<K>>()
            + size_of::<usize>()
            + size_of::<FieldStats>()
            + key.as_ref().map_or(0, K::heap_bytes)
    }

    /// Adds `s` to the entry of `key`; returns the bytes a new entry cost.
    #[inline]
    fn add<Q>(&mut self, key: &Q, s: FieldStats, own: impl FnOnce(&Q) -> K) -> usize
    where
        K: std::borrow::Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        match self.index.get(key) {
            Some(&i) => {
                add_stats(&mut self.stats[i], s);
                0
            }
            None => {
                let k = own(key);
                self.index.insert(k.clone(), self.stats.len());
                self.push(Some(k), s)
            }
        }
    }

    /// Adds `s` to the NULL field value's entry; returns the bytes a new entry cost.
    fn add_null(&mut self, s: FieldStats) -> usize {
        match self.null {
            Some(i) => {
                add_stats(&mut self.stats[i], s);
                0
            }
            None => {
                self.null = Some(self.stats.len());
                self.push(None, s)
            }
        }
    }

    fn push(&mut self, key: Option<K>, s: FieldStats) -> usize {
        let cost = Self::entry_bytes(&key);
        self.keys.push(key);
        self.stats.push(s);
        cost
    }

    fn bytes(&self) -> usize {
        self.keys.iter().map(Self::entry_bytes).sum()
    }
}

/// Per-group maps, keyed the fast way for integer fields.
#[derive(Debug)]
enum Maps {
    Int(Vec<FieldMap<i64>>),
    Rows(Vec<FieldMap<Box<[u8]>>>, RowConverter),
}

#[derive(Debug)]
pub(crate) struct FieldKernel {
    func: &'static str,
    kind: FieldKind,
    eps: f64,
    w_col: Option<usize>,
    field_type: DataType,
    maps: Maps,
    /// Integer fields: the first group's keys indexed directly, for batches of one group
    /// with no NULL key whose keys span at most `dense::DENSE_MAX_SLOTS`.
    dense: DenseIndex,
    bytes: usize,
}

impl FieldKernel {
    /// Adds the (checked) rows `rows` to their groups' maps. Plain loops per key kind, with
    /// the common cases (one group, no NULL keys) apart, so that the stats and the map probe
    /// inline into one loop body.
    fn add_rows(
        &mut self,
        key_col: &ArrayRef,
        groups: &[usize],
        rows: impl Iterator<Item = usize>,
        stats: impl Fn(usize) -> FieldStats,
    ) -> Result<()> {
        let one_group = self.num_groups() == 1;
        let group = |i: usize| if one_group { 0 } else { groups[i] };
        let bytes = &mut self.bytes;
        match &mut self.maps {
            Maps::Int(maps) => {
                let f = cast(key_col, &DataType::Int64)?;
                let f = f.as_primitive::<Int64Type>();
                let vals = f.values();
                let dense = &mut self.dense;
                let before = dense.bytes();
                if one_group && f.null_count() == 0 && dense.cover_all(vals) {
                    *bytes = *bytes + dense.bytes() - before;
                    let map = &mut maps[0];
                    for i in rows {
                        let slot = dense.slot(vals[i]);
                        if *slot == NO_ENTRY {
                            // First met here: the map adds it (or finds it, merged).
                            *bytes += map.add(&vals[i], stats(i), |k| *k);
                            *slot = map.index[&vals[i]] as u32;
                        } else {
                            add_stats(&mut map.stats[*slot as usize], stats(i));
                        }
                    }
                    return Ok(());
                }
                match f.nulls().filter(|n| n.null_count() > 0) {
                    None if one_group => {
                        let map = &mut maps[0];
                        for i in rows {
                            *bytes += map.add(&vals[i], stats(i), |k| *k);
                        }
                    }
                    None => {
                        for i in rows {
                            *bytes += maps[groups[i]].add(&vals[i], stats(i), |k| *k);
                        }
                    }
                    Some(nulls) => {
                        for i in rows {
                            let map = &mut maps[group(i)];
                            *bytes += if nulls.is_null(i) {
                                map.add_null(stats(i))
                            } else {
                                map.add(&vals[i], stats(i), |k| *k)
                            };
                        }
                    }
                }
            }
            Maps::Rows(maps, converter) => {
                let keys = converter.convert_columns(&[Arc::clone(key_col)])?;
                for i in rows {
                    *bytes += maps[group(i)]
                        .add(keys.row(i).as_ref(), stats(i), |k| Box::<[u8]>::from(k));
                }
            }
        }
        Ok(())
    }

    pub(crate) fn new(
        func: &'static str,
        kind: FieldKind,
        eps: f64,
        w_col: Option<usize>,
        field_type: DataType,
    ) -> Result<Self> {
        let maps = if is_small_int(&field_type) {
            Maps::Int(vec![])
        } else {
            Maps::Rows(
                vec![],
                RowConverter::new(vec![SortField::new(field_type.clone())])?,
            )
        };
        Ok(Self {
            func,
            kind,
            eps,
            w_col,
            field_type,
            maps,
            dense: DenseIndex::default(),
            bytes: 0,
        })
    }

    /// The metric of one group's values. The values' sums are added in ascending order (not
    /// the order the values were first met, which depends on the order partial states
    /// arrive in), so the result does not change from one run to the next.
    fn finish(&self, stats: &[FieldStats]) -> Option<f64> {
        let n = sum_in_order(stats.iter().map(|s| s[0]).collect());
        if n <= 0.0 {
            return None;
        }
        let total = sum_in_order(match self.kind {
            FieldKind::Ece => stats.iter().map(|s| s[2].abs()).collect(),
            FieldKind::Rce => stats
                .iter()
                .filter(|s| s[0] > 0.0)
                .map(|&[nz, wy, wd]| {
                    if wd == 0.0 {
                        0.0
                    } else {
                        nz * wd.abs() / (wy + self.eps * nz)
                    }
                })
                .collect(),
        });
        Some(total / n)
    }

    /// The stats of each group in `range`.
    fn group_stats(&self, range: Range<usize>) -> Vec<&[FieldStats]> {
        match &self.maps {
            Maps::Int(m) => m[range].iter().map(|g| g.stats.as_slice()).collect(),
            Maps::Rows(m, _) => m[range].iter().map(|g| g.stats.as_slice()).collect(),
        }
    }

    /// The serialised keys of each group in `range`.
    fn group_keys(&self, range: Range<usize>) -> Vec<Vec<Vec<u8>>> {
        fn keys<K: FieldKey>(m: &[FieldMap<K>]) -> Vec<Vec<Vec<u8>>> {
            m.iter()
                .map(|g| {
                    g.keys
                        .iter()
                        .map(|k| k.as_ref().map_or(vec![], FieldKey::to_bytes))
                        .collect()
                })
                .collect()
        }
        match &self.maps {
            Maps::Int(m) => keys(&m[range]),
            Maps::Rows(m, _) => keys(&m[range]),
        }
    }
}

impl FieldKernel {
    /// The field values of group `g`, as an array of the field's type, and their sums, in the
    /// same order (`field_bias` reports them per value).
    pub(crate) fn group_entries(&self, g: usize) -> Result<(ArrayRef, Vec<FieldStats>)> {
        let (values, stats) = match &self.maps {
            Maps::Int(m) => {
                let keys: Int64Array = m[g].keys.iter().copied().collect();
                (Arc::new(keys) as ArrayRef, m[g].stats.clone())
            }
            Maps::Rows(m, converter) => {
                let parser = converter.parser();
                let rows = m[g]
                    .keys
                    .iter()
                    .map(|k| parser.parse(k.as_deref().unwrap_or_default()));
                match converter.convert_rows(rows)?.pop() {
                    Some(a) => (a, m[g].stats.clone()),
                    None => return internal_err!("{}: no column from the field keys", self.func),
                }
            }
        };
        let values = if values.data_type() == &self.field_type {
            values
        } else {
            cast(&values, &self.field_type)?
        };
        Ok((values, stats))
    }
}

impl Kernel for FieldKernel {
    fn empty(&self) -> Result<Self> {
        Self::new(
            self.func,
            self.kind,
            self.eps,
            self.w_col,
            self.field_type.clone(),
        )
    }

    fn resize(&mut self, n: usize) {
        match &mut self.maps {
            Maps::Int(m) if m.len() < n => m.resize_with(n, FieldMap::default),
            Maps::Rows(m, _) if m.len() < n => m.resize_with(n, FieldMap::default),
            _ => {}
        }
    }

    fn num_groups(&self) -> usize {
        match &self.maps {
            Maps::Int(m) => m.len(),
            Maps::Rows(m, _) => m.len(),
        }
    }

    fn update(&mut self, values: &[ArrayRef], groups: &[usize], filter: Filter) -> Result<()> {
        let func = self.func;
        let p = f64s(&values[0]).values();
        let y = f64s(&values[1]).values();
        let w = self.w_col.map(|c| f64s(&values[c]).values());
        let mask = usable_rows_pyw(values, (0, 1), self.w_col, filter);
        // No NULLs and no filter: check whole columns once, then skip per-row checks.
        let checked = mask.is_none()
            && all_probabilities(p)
            && all_labels(y)
            && w.is_none_or(|w| all_weights(w));
        if !checked {
            // Report the first bad usable row before adding any.
            for_each_row(p.len(), &mask, |i| {
                check_p(func, "p", p[i])?;
                check_y(func, y[i])?;
                if let Some(w) = w {
                    check_w(func, w[i])?;
                }
                Ok(())
            })?;
        }
        let stats = |i: usize| -> FieldStats {
            let wi = w.map_or(1.0, |w| w[i]);
            [wi, wi * y[i], wi * (y[i] - p[i])]
        };
        match &mask {
            None => self.add_rows(&values[2], groups, 0..p.len(), stats),
            Some(m) => self.add_rows(&values[2], groups, m.set_indices(), stats),
        }
    }

    fn merge(&mut self, states: &[ArrayRef], groups: &[usize]) -> Result<()> {
        let key_lists = states[0].as_list::<i32>();
        let keys = key_lists.values().as_binary::<i32>();
        let parts: Vec<(&[i32], &[f64])> = states[1..4].iter().map(list_parts).collect();
        let offsets = key_lists.value_offsets();
        for (r, &g) in groups.iter().enumerate() {
            if parts
                .iter()
                .any(|(o, _)| o[r] != offsets[r] || o[r + 1] != offsets[r + 1])
            {
                return internal_err!("{}: malformed partial state", self.func);
            }
            for j in offsets[r] as usize..offsets[r + 1] as usize {
                let s = [parts[0].1[j], parts[1].1[j], parts[2].1[j]];
                let k = keys.value(j);
                self.bytes += match &mut self.maps {
                    Maps::Int(m) if k.is_empty() => m[g].add_null(s),
                    Maps::Int(m) => m[g].add(&i64::from_bytes(k)?, s, |k| *k),
                    Maps::Rows(m, _) => m[g].add(k, s, |k| Box::<[u8]>::from(k)),
                };
            }
        }
        Ok(())
    }

    fn state(&self, range: Range<usize>) -> Result<Vec<ArrayRef>> {
        let keys = self.group_keys(range.clone());
        let stats = self.group_stats(range);
        let lens: Vec<usize> = stats.iter().map(|s| s.len()).collect();
        let offsets = OffsetBuffer::from_lengths(lens);
        let keys: BinaryArray = keys
            .iter()
            .flat_map(|g| g.iter().map(|k| Some(k.as_slice())))
            .collect();
        let list = |values: ArrayRef| list_array(offsets.clone(), values);
        let mut out: Vec<ArrayRef> = vec![list(Arc::new(keys))];
        for k in 0..3 {
            let vals: Float64Array = stats.iter().flat_map(|g| g.iter().map(|s| s[k])).collect();
            out.push(list(Arc::new(vals)));
        }
        Ok(out)
    }

    fn evaluate(&mut self, range: Range<usize>) -> Result<ArrayRef> {
        Ok(Arc::new(
            self.group_stats(range)
                .into_iter()
                .map(|s| self.finish(s))
                .collect::<Float64Array>(),
        ))
    }

    fn drain(&mut self, n: usize) {
        let freed: usize = match &mut self.maps {
            Maps::Int(m) => m.drain(..n).map(|g| g.bytes()).sum(),
            Maps::Rows(m, _) => m.drain(..n).map(|g| g.bytes()).sum(),
        };
        // The index points into the first group's map, which is now another group's.
        self.bytes -= freed + self.dense.bytes();
        self.dense = DenseIndex::default();
    }

    fn size(&self) -> usize {
        let per_group = match &self.maps {
            Maps::Int(m) => m.capacity() * size_of::<FieldMap<i64>>(),
            Maps::Rows(m, c) => m.capacity() * size_of::<FieldMap<Box<[u8]>>>() + c.size(),
        };
        self.bytes + per_group
    }

    fn retractable(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn batch(keys: &[i64]) -> Vec<ArrayRef> {
        let p: Vec<f64> = keys
            .iter()
            .map(|&k| (k.rem_euclid(10) as f64 + 0.5) / 10.0)
            .collect();
        let y: Vec<f64> = keys
            .iter()
            .map(|&k| (k.rem_euclid(3) == 0) as u8 as f64)
            .collect();
        vec![
            Arc::new(Float64Array::from(p)),
            Arc::new(Float64Array::from(y)),
            Arc::new(Int64Array::from(keys.to_vec())),
        ]
    }

    /// Per key: rows, Σy, Σ(y − p), from the state's lists.
    fn sums_of(state: &[ArrayRef]) -> BTreeMap<i64, [f64; 3]> {
        let keys = state[0].as_list::<i32>();
        let keys = keys.values().as_binary::<i32>();
        let cols: Vec<(&[i32], &[f64])> = state[1..4].iter().map(list_parts).collect();
        (0..keys.len())
            .map(|j| {
                let k = i64::from_bytes(keys.value(j)).unwrap();
                (k, [cols[0].1[j], cols[1].1[j], cols[2].1[j]])
            })
            .collect()
    }

    /// The direct index of integer keys, checked against sums made in the test from the
    /// rows: batches of one group whose keys widen the index down and up, a merged state
    /// holding keys the index has not met (they must not be made twice), a batch of two
    /// groups, and a key too far away for the index (the hash map takes that batch).
    #[test]
    fn dense_keys_give_the_sums_of_the_rows() {
        let mut k =
            FieldKernel::new("field_rce", FieldKind::Rce, 0.01, None, DataType::Int64).unwrap();
        k.resize(1);
        let mut want: BTreeMap<i64, [f64; 3]> = BTreeMap::new();
        let add = |want: &mut BTreeMap<i64, [f64; 3]>, keys: &[i64]| {
            for &key in keys {
                let p = (key.rem_euclid(10) as f64 + 0.5) / 10.0;
                let y = (key.rem_euclid(3) == 0) as u8 as f64;
                let e = want.entry(key).or_default();
                e[0] += 1.0;
                e[1] += y;
                e[2] += y - p;
            }
        };
        let first: Vec<i64> = (100..400).chain(150..160).collect();
        k.update(&batch(&first), &vec![0; first.len()], None)
            .unwrap();
        add(&mut want, &first);
        // Merged: keys inside and outside the index's span.
        let mut other = k.empty().unwrap();
        other.resize(1);
        let merged: Vec<i64> = (350..600).chain([1_000_000_000]).collect();
        other
            .update(&batch(&merged), &vec![0; merged.len()], None)
            .unwrap();
        k.merge(&other.state(0..1).unwrap(), &[0]).unwrap();
        add(&mut want, &merged);
        // One group again, widening the index below and above.
        let wider: Vec<i64> = (-50..700).collect();
        k.update(&batch(&wider), &vec![0; wider.len()], None)
            .unwrap();
        add(&mut want, &wider);
        // Too wide a span for the index.
        let far = [5, 1 << 40, 5];
        k.update(&batch(&far), &[0, 0, 0], None).unwrap();
        add(&mut want, &far);
        assert!(k.dense.slots.len() == 750, "the index spans -50..700");
        // Two groups: group 1's rows go through the maps.
        k.resize(2);
        let two = [5, 6, 7, 5];
        k.update(&batch(&two), &[0, 1, 0, 1], None).unwrap();
        add(&mut want, &[5, 7]);
        let got = sums_of(&k.state(0..1).unwrap());
        assert_eq!(got.len(), want.len(), "one entry per key");
        for (key, w) in &want {
            let g = got[key];
            for j in 0..3 {
                assert!((g[j] - w[j]).abs() <= 1e-12, "key {key}: {g:?} vs {w:?}");
            }
        }
    }
}
