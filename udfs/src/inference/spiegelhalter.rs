//! `spiegelhalter(p, y [, w])`: Spiegelhalter's z test of calibration (Spiegelhalter 1986), as
//! R `rms::val.prob` reports it ("S:z", "S:p").
//!
//! State per group: Σw and two sums, `Σ w (y − p)(1 − 2p)` and `Σ w² (1 − 2p)² p (1 − p)`
//! (three Float64 fields, so states merge, subtract for sliding windows and store as
//! `spiegelhalter_state`). The value is `z = num / sqrt(den)`, `p_value = 2Φ(−|z|)`.

use std::ops::Range;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Float64Array};
use arrow::datatypes::{DataType, FieldRef, Float64Type};
use datafusion_common::Result;
use datafusion_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion_expr::{AggregateUDFImpl, Documentation, Signature};
use datafusion_macros::user_doc;

use super::{f64_struct_array, f64_struct_fields};
use crate::common::{
    args, check_p, check_y, f64s, for_each_row, state_fields_of, usable_rows_pyw, weight_at,
    weight_col, CallShape,
};
use crate::kernel::Filter;
use crate::kernel::{kernel_aggregate, kernel_udaf_common, signature_from_shape, Kernel};
use crate::labels::{f64_labels, with_labels, Label};
use crate::stats::two_sided_p;

#[user_doc(
    doc_section(label = "Calibration Tests"),
    description = "Spiegelhalter's z test of calibration: `z = Σ w (y − p)(1 − 2p) / sqrt(Σ w² (1 − 2p)² p (1 − p))` and \
the two-sided `p_value = 2Φ(−|z|)`, as `{z, p_value}`; unweighted it is R `rms::val.prob`'s \"S:z\" and \"S:p\". A \
small p-value says the predictions are miscalibrated beyond chance. Rows with p = 0 or 1 count in the numerator only. \
When every p is 0, 0.5 or 1 the denominator is 0: z is NaN (numerator 0) or ±Infinity. NULL when no row is usable or every weight is 0.",
    syntax_example = "spiegelhalter(p, y [, w])",
    sql_example = r#"```sql
> SELECT round(s['z'], 6) AS z, round(s['p_value'], 6) AS p_value FROM (SELECT spiegelhalter(p, y) AS s FROM (VALUES (0.2, 0), (0.7, 1), (0.9, 1), (0.4, 1)) AS t(p, y));
+-----------+----------+
| z         | p_value  |
+-----------+----------+
| -0.502519 | 0.615303 |
+-----------+----------+
```"#
)]
struct SpiegelhalterDoc;

const OUT: [&str; 2] = ["z", "p_value"];

/// `spiegelhalter`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Spiegelhalter {
    signature: Signature,
}

const SHAPE: CallShape = CallShape {
    name: "spiegelhalter",
    required: &[args::P, args::Y],
    optional: &[args::W],
};

signature_from_shape!(Spiegelhalter, SHAPE);

impl Spiegelhalter {
    fn kernel(&self, args: &AccumulatorArgs) -> Result<SpiegelhalterKernel> {
        Ok(SpiegelhalterKernel {
            w_col: weight_col(args.exprs, 2),
            sums: vec![],
        })
    }
}

kernel_aggregate!(Spiegelhalter, true);

impl AggregateUDFImpl for Spiegelhalter {
    kernel_udaf_common!(returns DataType::Struct(f64_struct_fields(&OUT)));

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(state_fields_of(
            args.name,
            &["sum_w", "num", "den"],
            &DataType::Float64,
        ))
    }

    fn documentation(&self) -> Option<&Documentation> {
        crate::common::documented(SpiegelhalterDoc.doc(), &self.shape())
    }
}

/// Per group: Σw, Σ w (y − p)(1 − 2p), Σ w² (1 − 2p)² p (1 − p).
#[derive(Debug)]
struct SpiegelhalterKernel {
    w_col: Option<usize>,
    sums: Vec<[f64; 3]>,
}

/// The test from the sums.
pub(crate) fn spiegelhalter_z(num: f64, den: f64) -> [f64; 2] {
    let z = num / den.sqrt();
    [z, two_sided_p(z)]
}

/// The three sums of unweighted rows (rows, Σ(y − p)(1 − 2p), Σ(1 − 2p)²p(1 − p)) in four
/// lanes, added lane by lane at the end; None when a `p` is outside [0, 1] or a label is not
/// 0 or 1.
fn unweighted_sums<Y: Label>(p: &[f64], y: &[Y]) -> Option<[f64; 3]> {
    const LANES: usize = 4;
    let (mut num, mut var) = ([0.0f64; LANES], [0.0f64; LANES]);
    let mut ok = true;
    let mut add = |j: usize, pi: f64, yi: Y| {
        ok &= (0.0..=1.0).contains(&pi) & yi.is_label();
        let c = 1.0 - 2.0 * pi;
        num[j] += (yi.to_f64() - pi) * c;
        var[j] += c * c * pi * (1.0 - pi);
    };
    let (pc, yc) = (p.chunks_exact(LANES), y.chunks_exact(LANES));
    let (p_rest, y_rest) = (pc.remainder(), yc.remainder());
    for (pb, yb) in pc.zip(yc) {
        for j in 0..LANES {
            add(j, pb[j], yb[j]);
        }
    }
    for (&pi, &yi) in p_rest.iter().zip(y_rest) {
        add(0, pi, yi);
    }
    ok.then(|| [p.len() as f64, num.iter().sum(), var.iter().sum()])
}

impl Kernel for SpiegelhalterKernel {
    fn empty(&self) -> Result<Self> {
        Ok(Self {
            w_col: self.w_col,
            sums: vec![],
        })
    }

    fn resize(&mut self, n: usize) {
        if self.sums.len() < n {
            self.sums.resize(n, [0.0; 3]);
        }
    }

    fn num_groups(&self) -> usize {
        self.sums.len()
    }

    fn update(&mut self, values: &[ArrayRef], groups: &[usize], filter: Filter) -> Result<()> {
        let func = "spiegelhalter";
        let p = f64s(&values[0]).values();
        let w = self.w_col.map(|c| f64s(&values[c]).values());
        let mask = usable_rows_pyw(values, (0, 1), self.w_col, filter);
        let one_group = self.sums.len() == 1;
        if one_group && mask.is_none() && w.is_none() {
            // The one group's unweighted batch, every row usable: its labels as stored, the
            // sums in lanes (a bad value falls through to the checked path, which names it).
            if let Some(Some(s)) = with_labels!(&values[1], |y| unweighted_sums(p, y)) {
                self.sums[0].iter_mut().zip(s).for_each(|(a, b)| *a += b);
                return Ok(());
            }
        }
        let y_f64 = f64_labels(&values[1])?;
        let y = &y_f64[..];
        let sums = &mut self.sums;
        for_each_row(p.len(), &mask, |i| {
            let pi = check_p(func, "p", p[i])?;
            let yi = check_y(func, y[i])?;
            let wi = weight_at(func, w.map(|w| &w[..]), i)?;
            let s = &mut sums[if one_group { 0 } else { groups[i] }];
            let c = 1.0 - 2.0 * pi;
            s[0] += wi;
            s[1] += wi * (yi - pi) * c;
            s[2] += wi * wi * c * c * pi * (1.0 - pi);
            Ok(())
        })
    }

    fn native_labels(&self) -> bool {
        true
    }

    fn merge(&mut self, states: &[ArrayRef], groups: &[usize]) -> Result<()> {
        let cols: Vec<&Float64Array> = states[..3]
            .iter()
            .map(|a| a.as_primitive::<Float64Type>())
            .collect();
        for (r, &g) in groups.iter().enumerate() {
            if cols[0].is_valid(r) {
                for (k, c) in cols.iter().enumerate() {
                    self.sums[g][k] += c.value(r);
                }
            }
        }
        Ok(())
    }

    fn state(&self, range: Range<usize>) -> Result<Vec<ArrayRef>> {
        Ok((0..3)
            .map(|k| {
                Arc::new(
                    self.sums[range.clone()]
                        .iter()
                        .map(|s| s[k])
                        .collect::<Float64Array>(),
                ) as ArrayRef
            })
            .collect())
    }

    fn evaluate(&mut self, range: Range<usize>) -> Result<ArrayRef> {
        let rows: Vec<Option<[f64; 2]>> = self.sums[range]
            .iter()
            .map(|s| (s[0] > 0.0).then(|| spiegelhalter_z(s[1], s[2])))
            .collect();
        f64_struct_array(&OUT, &rows)
    }

    fn drain(&mut self, n: usize) {
        self.sums.drain(..n);
    }

    fn size(&self) -> usize {
        self.sums.capacity() * size_of::<[f64; 3]>()
    }

    fn retractable(&self) -> bool {
        true
    }
}
