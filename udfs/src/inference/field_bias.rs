//! `field_bias(p, y, field [, w])`: which values of a field are significantly miscalibrated.
//!
//! Per field value z (NULL is one value, as in `GROUP BY`): `n = Σw`, `mean_p = Σw·p / n`,
//! `frac_pos = Σw·y / n`, `bias = frac_pos − mean_p`, the Wilson deviation score
//! `z = wilson_z(mean_p, frac_pos, n)` (>= 0; the sign is `bias`'s), the two-sided
//! `p_value = 2Φ(−z)`, and `p_adjusted`, Holm's step-down adjustment over the values (as
//! statsmodels `multipletests(method = 'holm')`: the k-th smallest p-value times (m − k + 1),
//! running maximum, clipped to 1). Values whose weights sum to 0 carry no evidence and are
//! left out (of m too). The list is sorted by `p_adjusted`, then `p_value`, then the field
//! value's order, so it does not depend on the order rows arrive in. The value is reported as
//! text (`field_bias_merge` is planned before it reads the type its states record).
//!
//! The state is `field_ece`'s (`FieldKernel`: Σw, Σw·y, Σw·(y − p) per value, so
//! `mean_p = frac_pos − Σw·(y − p)/n`), bounded by the distinct values.

use std::ops::Range;
use std::sync::Arc;

use arrow::array::{new_empty_array, Array, ArrayRef, Float64Array, StructArray};
use arrow::buffer::{NullBuffer, OffsetBuffer};
use arrow::compute::{cast, concat, take};
use arrow::datatypes::{DataType, Field, FieldRef, Fields};
use arrow::row::{RowConverter, SortField};
use datafusion_common::Result;
use datafusion_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion_expr::{AggregateUDFImpl, Documentation, Signature};
use datafusion_macros::user_doc;

use crate::common::{args, weight_col, CallShape};
use crate::field::{FieldKernel, FieldKind, FieldMetric, FieldStats};
use crate::kernel::{kernel_aggregate, kernel_udaf_common, signature_from_shape, Kernel};
use crate::scalars::wilson_z;
use crate::stats::two_sided_p;

#[user_doc(
    doc_section(label = "Calibration Tests"),
    description = "Per value of a field (site, advertiser, …; NULL is one value): `n = Σw`, the mean prediction \
`mean_p`, the observed positive rate `frac_pos`, `bias = frac_pos − mean_p`, the Wilson deviation score \
`z = wilson_z(mean_p, frac_pos, n)` (>= 0; the direction is the sign of bias), its two-sided `p_value = 2Φ(−z)`, and \
`p_adjusted`, the Holm-adjusted p-value over the field's values (statsmodels `multipletests(method='holm')`), so \
`WHERE p_adjusted < 0.05` keeps the values whose miscalibration is real at a 5% family-wise error rate. A list of \
`{field, n, mean_p, frac_pos, bias, z, p_value, p_adjusted}` (field: the value as text), sorted by p_adjusted (then \
p_value, then the field's own order). \
Values whose weights sum to 0 are left out. NULL when no value has weight.",
    syntax_example = "field_bias(p, y, field [, w])",
    sql_example = r#"```sql
> SELECT b['field'] AS site, b['bias'] AS bias, round(b['p_adjusted'], 6) AS p_adjusted
  FROM (SELECT unnest(field_bias(p, y, site)) AS b FROM (VALUES (0.5, 1, 'a'), (0.5, 1, 'a'), (0.5, 0, 'b'), (0.5, 1, 'b')) AS t(p, y, site));
+------+------+------------+
| site | bias | p_adjusted |
+------+------+------------+
| a    | 0.5  | 0.314598   |
| b    | 0.0  | 1.0        |
+------+------+------------+
```"#
)]
struct FieldBiasDoc;

const F64_OUT: [&str; 7] = [
    "n",
    "mean_p",
    "frac_pos",
    "bias",
    "z",
    "p_value",
    "p_adjusted",
];

/// The fields of one list item. The field value is text, whatever the field's type, so that
/// `field_bias_merge` (planned before it reads the states that record the type) has one
/// return type.
fn item_fields() -> Fields {
    let mut f = vec![Field::new("field", DataType::Utf8, true)];
    f.extend(
        F64_OUT
            .iter()
            .map(|n| Field::new(*n, DataType::Float64, true)),
    );
    Fields::from(f)
}

fn list_of(fields: Fields) -> DataType {
    DataType::List(Arc::new(Field::new_list_field(
        DataType::Struct(fields),
        true,
    )))
}

/// `field_bias`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct FieldBias {
    signature: Signature,
}

const SHAPE: CallShape = CallShape {
    name: "field_bias",
    required: &[args::P, args::Y, args::FIELD],
    optional: &[args::W],
};

signature_from_shape!(FieldBias, SHAPE);

impl FieldBias {
    fn kernel(&self, args: &AccumulatorArgs) -> Result<FieldBiasKernel> {
        let field_type = args.expr_fields[2].data_type().clone();
        Ok(FieldBiasKernel {
            inner: FieldKernel::new(
                "field_bias",
                FieldKind::Ece,
                0.0,
                weight_col(args.exprs, 3),
                field_type.clone(),
            )?,
            field_type,
        })
    }
}

kernel_aggregate!(FieldBias, true);

impl AggregateUDFImpl for FieldBias {
    kernel_udaf_common!(returns list_of(item_fields()));

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        // `field_ece`'s state.
        FieldMetric::new(FieldKind::Ece).state_fields(args)
    }

    fn documentation(&self) -> Option<&Documentation> {
        crate::common::documented(FieldBiasDoc.doc(), &self.shape())
    }
}

#[derive(Debug)]
struct FieldBiasKernel {
    inner: FieldKernel,
    field_type: DataType,
}

/// Holm's step-down adjustment of `p` (statsmodels `multipletests(method='holm')`).
pub(crate) fn holm(p: &[f64]) -> Vec<f64> {
    let m = p.len();
    let mut order: Vec<usize> = (0..m).collect();
    order.sort_by(|&a, &b| p[a].total_cmp(&p[b]));
    let mut out = vec![0.0; m];
    let mut running = 0.0f64;
    for (k, &i) in order.iter().enumerate() {
        running = running.max(p[i] * (m - k) as f64);
        out[i] = running.min(1.0);
    }
    out
}

/// One value's row: n, mean_p, frac_pos, bias, z, p_value (p_adjusted filled in later).
fn value_row(&[n, wy, wd]: &FieldStats) -> [f64; 7] {
    let frac_pos = wy / n;
    let bias = wd / n;
    let mean_p = frac_pos - bias;
    let z = wilson_z(mean_p, frac_pos, n);
    [n, mean_p, frac_pos, bias, z, two_sided_p(z), f64::NAN]
}

impl FieldBiasKernel {
    /// Group `g`'s items sorted, as (field values, rows), or None when no value has weight.
    fn group_items(&self, g: usize) -> Result<Option<(ArrayRef, Vec<[f64; 7]>)>> {
        let (values, stats) = self.inner.group_entries(g)?;
        let keep: Vec<usize> = (0..stats.len()).filter(|&i| stats[i][0] > 0.0).collect();
        if keep.is_empty() {
            return Ok(None);
        }
        let mut rows: Vec<[f64; 7]> = keep.iter().map(|&i| value_row(&stats[i])).collect();
        let adjusted = holm(&rows.iter().map(|r| r[5]).collect::<Vec<_>>());
        for (r, a) in rows.iter_mut().zip(adjusted) {
            r[6] = a;
        }
        let kept = take(
            &values,
            &arrow::array::UInt32Array::from_iter_values(keep.iter().map(|&i| i as u32)),
            None,
        )?;
        // Ties broken by the field value's order (its row encoding), so the order is the same
        // whatever order the values were first seen in.
        let converter = RowConverter::new(vec![SortField::new(self.field_type.clone())])?;
        let keys = converter.convert_columns(&[Arc::clone(&kept)])?;
        let mut order: Vec<usize> = (0..rows.len()).collect();
        order.sort_by(|&a, &b| {
            rows[a][6]
                .total_cmp(&rows[b][6])
                .then(rows[a][5].total_cmp(&rows[b][5]))
                .then(keys.row(a).cmp(&keys.row(b)))
        });
        let sorted = cast(
            &take(
                &kept,
                &arrow::array::UInt32Array::from_iter_values(order.iter().map(|&i| i as u32)),
                None,
            )?,
            &DataType::Utf8,
        )?;
        Ok(Some((sorted, order.iter().map(|&i| rows[i]).collect())))
    }
}

impl Kernel for FieldBiasKernel {
    crate::kernel::delegate_to_inner!(inner: resize, num_groups, update, merge, state, take_state, drain, size);

    fn empty(&self) -> Result<Self> {
        Ok(Self {
            inner: self.inner.empty()?,
            field_type: self.field_type.clone(),
        })
    }

    fn evaluate(&mut self, range: Range<usize>) -> Result<ArrayRef> {
        let fields = item_fields();
        let mut field_parts: Vec<ArrayRef> = vec![];
        let mut rows: Vec<[f64; 7]> = vec![];
        let mut lengths = vec![];
        let mut valid = vec![];
        for g in range {
            match self.group_items(g)? {
                Some((values, r)) => {
                    lengths.push(r.len());
                    field_parts.push(values);
                    rows.extend(r);
                    valid.push(true);
                }
                None => {
                    lengths.push(0);
                    valid.push(false);
                }
            }
        }
        let field_col = if field_parts.is_empty() {
            new_empty_array(&DataType::Utf8)
        } else {
            let parts: Vec<&dyn Array> = field_parts.iter().map(|a| a.as_ref()).collect();
            concat(&parts)?
        };
        let mut columns = vec![field_col];
        for k in 0..7 {
            columns.push(Arc::new(
                rows.iter().map(|r| r[k]).collect::<Float64Array>(),
            ));
        }
        let items = StructArray::try_new(fields.clone(), columns, None)?;
        let list = arrow::array::ListArray::try_new(
            Arc::new(Field::new_list_field(DataType::Struct(fields), true)),
            OffsetBuffer::from_lengths(lengths),
            Arc::new(items),
            Some(NullBuffer::from(valid)),
        )?;
        Ok(Arc::new(list))
    }

    fn retractable(&self) -> bool {
        true
    }
}
