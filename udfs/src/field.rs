//! `field_ece` and `field_rce`: calibration error per value of a field [Pan et al. eq. 5–6].
//!
//! State per group: one entry per distinct field value — Σw, Σw·y, Σw·(y − p) — so memory is
//! O(distinct values). Field values of any hashable type are keyed by their arrow row encoding
//! (NULL is its own key, as in `GROUP BY`); the partial state carries the keys as
//! `List<Binary>` next to three `List<Float64>` columns.

use std::ops::Range;
use std::sync::Arc;

use arrow::array::{ArrayRef, AsArray, BinaryArray, BooleanArray, Float64Array, ListArray};
use arrow::buffer::OffsetBuffer;
use arrow::datatypes::{DataType, Field, FieldRef};
use arrow::row::{RowConverter, SortField};
use datafusion_common::{internal_err, Result};
use datafusion_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion_expr::utils::format_state_name;
use datafusion_expr::{
    Accumulator, AggregateUDFImpl, Documentation, GroupsAccumulator, Signature, Volatility,
};
use datafusion_macros::user_doc;
use hashbrown::HashMap;

use crate::common::{
    check_p, check_w, check_y, f64_list_type, f64s, for_each_row, list_parts, literal_checked,
    usable_rows, Arg, CallShape,
};
use crate::kernel::{Groups, Kernel, Single};

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
```"#,
    argument(name = "p", description = "Predicted probability in [0, 1]."),
    argument(name = "y", description = "Observed label: Boolean or a number 0/1."),
    argument(
        name = "field",
        description = "The field: a column of any hashable type."
    ),
    argument(
        name = "w",
        description = "Optional row weight, finite and >= 0. Default 1."
    )
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
```"#,
    argument(name = "p", description = "Predicted probability in [0, 1]."),
    argument(name = "y", description = "Observed label: Boolean or a number 0/1."),
    argument(
        name = "field",
        description = "The field: a column of any hashable type."
    ),
    argument(
        name = "eps",
        description = "Smoothing of the denominator, a constant >= 0. Default 0.01."
    ),
    argument(
        name = "w",
        description = "Optional row weight, finite and >= 0. Default 1."
    )
)]
struct FieldRceDoc;

/// `field_ece` or `field_rce`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct FieldMetric {
    kind: FieldKind,
    signature: Signature,
}

impl FieldMetric {
    pub fn new(kind: FieldKind) -> Self {
        let mut f = Self {
            kind,
            signature: Signature::user_defined(Volatility::Immutable),
        };
        f.signature = f.shape().signature();
        f
    }

    fn shape(&self) -> CallShape {
        match self.kind {
            FieldKind::Ece => CallShape {
                name: "field_ece",
                required: &[Arg::Num("p"), Arg::Label("y"), Arg::Any("field")],
                optional: &[Arg::Num("w")],
            },
            FieldKind::Rce => CallShape {
                name: "field_rce",
                required: &[Arg::Num("p"), Arg::Label("y"), Arg::Any("field")],
                optional: &[Arg::LitNum("eps"), Arg::Num("w")],
            },
        }
    }

    fn kernel(&self, args: &AccumulatorArgs) -> Result<FieldKernel> {
        let func = self.shape().name;
        let (eps, w_col) = match self.kind {
            FieldKind::Ece => (0.0, (args.exprs.len() > 3).then_some(3)),
            FieldKind::Rce => {
                let eps = match args.exprs.get(3) {
                    Some(e) => literal_checked(func, "eps", e, "finite and >= 0", |x| {
                        x.is_finite() && x >= 0.0
                    })?,
                    None => DEFAULT_RCE_EPS,
                };
                (eps, (args.exprs.len() > 4).then_some(4))
            }
        };
        let field_type = args.expr_fields[2].data_type().clone();
        Ok(FieldKernel {
            func,
            kind: self.kind,
            eps,
            w_col,
            converter: RowConverter::new(vec![SortField::new(field_type.clone())])?,
            field_type,
            groups: vec![],
            bytes: 0,
        })
    }
}

impl AggregateUDFImpl for FieldMetric {
    fn name(&self) -> &str {
        self.shape().name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        self.shape().coerce_lenient(arg_types)
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.shape().coerce(arg_types)?;
        Ok(DataType::Float64)
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        Ok(Box::new(Single::new(self.kernel(&args)?)))
    }

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

    fn groups_accumulator_supported(&self, _args: AccumulatorArgs) -> bool {
        true
    }

    fn create_groups_accumulator(
        &self,
        args: AccumulatorArgs,
    ) -> Result<Box<dyn GroupsAccumulator>> {
        Ok(Box::new(Groups(self.kernel(&args)?)))
    }

    fn documentation(&self) -> Option<&Documentation> {
        match self.kind {
            FieldKind::Ece => FieldEceDoc.doc(),
            FieldKind::Rce => FieldRceDoc.doc(),
        }
    }
}

/// Σw, Σw·y, Σw·(y − p) of one field value.
type FieldStats = [f64; 3];

/// The field values seen in one group and their sums.
#[derive(Debug, Default)]
struct FieldMap {
    index: HashMap<Box<[u8]>, usize>,
    keys: Vec<Box<[u8]>>,
    stats: Vec<FieldStats>,
}

/// Bytes a new field value costs, roughly (map slot, key vector slot, stats, key bytes).
fn entry_bytes(key_len: usize) -> usize {
    2 * size_of::<Box<[u8]>>() + size_of::<usize>() + size_of::<FieldStats>() + 2 * key_len
}

impl FieldMap {
    /// Adds `s` to the entry of `key`; returns the bytes a new entry cost.
    #[inline]
    fn add(&mut self, key: &[u8], s: FieldStats) -> usize {
        match self.index.get(key) {
            Some(&i) => {
                let e = &mut self.stats[i];
                e[0] += s[0];
                e[1] += s[1];
                e[2] += s[2];
                0
            }
            None => {
                let k: Box<[u8]> = key.into();
                self.index.insert(k.clone(), self.stats.len());
                self.keys.push(k);
                self.stats.push(s);
                entry_bytes(key.len())
            }
        }
    }
}

#[derive(Debug)]
struct FieldKernel {
    func: &'static str,
    kind: FieldKind,
    eps: f64,
    w_col: Option<usize>,
    converter: RowConverter,
    field_type: DataType,
    groups: Vec<FieldMap>,
    bytes: usize,
}

impl FieldKernel {
    fn finish(&self, m: &FieldMap) -> Option<f64> {
        let n: f64 = m.stats.iter().map(|s| s[0]).sum();
        if n <= 0.0 {
            return None;
        }
        let total: f64 = match self.kind {
            FieldKind::Ece => m.stats.iter().map(|s| s[2].abs()).sum(),
            FieldKind::Rce => m
                .stats
                .iter()
                .filter(|s| s[0] > 0.0)
                .map(|&[nz, wy, wd]| {
                    if wd == 0.0 {
                        0.0
                    } else {
                        nz * wd.abs() / (wy + self.eps * nz)
                    }
                })
                .sum(),
        };
        Some(total / n)
    }
}

impl Kernel for FieldKernel {
    fn empty(&self) -> Result<Self> {
        Ok(Self {
            func: self.func,
            kind: self.kind,
            eps: self.eps,
            w_col: self.w_col,
            converter: RowConverter::new(vec![SortField::new(self.field_type.clone())])?,
            field_type: self.field_type.clone(),
            groups: vec![],
            bytes: 0,
        })
    }

    fn resize(&mut self, n: usize) {
        if self.groups.len() < n {
            self.groups.resize_with(n, FieldMap::default);
        }
    }

    fn num_groups(&self) -> usize {
        self.groups.len()
    }

    fn update(
        &mut self,
        values: &[ArrayRef],
        groups: &[usize],
        filter: Option<&BooleanArray>,
    ) -> Result<()> {
        let func = self.func;
        let p = f64s(&values[0]).values();
        let y = f64s(&values[1]).values();
        let keys = self.converter.convert_columns(&[Arc::clone(&values[2])])?;
        let w = self.w_col.map(|c| f64s(&values[c]).values());
        let mut data = vec![&values[0], &values[1]];
        if let Some(c) = self.w_col {
            data.push(&values[c]);
        }
        let mask = usable_rows(&data, filter);
        let (maps, bytes) = (&mut self.groups, &mut self.bytes);
        for_each_row(p.len(), &mask, |i| {
            let pi = check_p(func, "p", p[i])?;
            let yi = check_y(func, y[i])?;
            let wi = match w {
                Some(w) => check_w(func, w[i])?,
                None => 1.0,
            };
            *bytes += maps[groups[i]].add(keys.row(i).as_ref(), [wi, wi * yi, wi * (yi - pi)]);
            Ok(())
        })
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
                self.bytes += self.groups[g].add(keys.value(j), s);
            }
        }
        Ok(())
    }

    fn state(&self, range: Range<usize>) -> Result<Vec<ArrayRef>> {
        let maps = &self.groups[range];
        let offsets = OffsetBuffer::from_lengths(maps.iter().map(|m| m.keys.len()));
        let keys: BinaryArray = maps
            .iter()
            .flat_map(|m| m.keys.iter().map(|k| Some(k.as_ref())))
            .collect();
        let keys = ListArray::new(
            Arc::new(Field::new_list_field(DataType::Binary, true)),
            offsets,
            Arc::new(keys),
            None,
        );
        let mut out: Vec<ArrayRef> = vec![Arc::new(keys)];
        for k in 0..3 {
            let vals: Vec<f64> = maps
                .iter()
                .flat_map(|m| m.stats.iter().map(|s| s[k]))
                .collect();
            // One list per group with as many entries as the group has keys.
            let lens: Vec<usize> = maps.iter().map(|m| m.keys.len()).collect();
            out.push(Arc::new(ListArray::new(
                Arc::new(Field::new_list_field(DataType::Float64, true)),
                OffsetBuffer::from_lengths(lens),
                Arc::new(Float64Array::from(vals)),
                None,
            )));
        }
        Ok(out)
    }

    fn evaluate(&mut self, range: Range<usize>) -> Result<ArrayRef> {
        Ok(Arc::new(
            self.groups[range]
                .iter()
                .map(|m| self.finish(m))
                .collect::<Float64Array>(),
        ))
    }

    fn drain(&mut self, n: usize) {
        for m in self.groups.drain(..n) {
            self.bytes -= m.keys.iter().map(|k| entry_bytes(k.len())).sum::<usize>();
        }
    }

    fn size(&self) -> usize {
        self.bytes + self.groups.capacity() * size_of::<FieldMap>() + self.converter.size()
    }
}
