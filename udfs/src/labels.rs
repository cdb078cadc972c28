//! Labels as they are stored. Click logs keep `y` as Int8, Int32 or Int64 far more often
//! than as Float64; casting such a column to Float64 writes 8 bytes a row before the
//! aggregate reads it. So the planner leaves integer labels as they are (see
//! `common::coerce_one`), the hottest kernels read Int8 / Int32 / Int64 labels directly
//! ([`Label`], [`with_labels!`]), and every other kernel gets them as Float64 from
//! [`as_f64_labels`], cast one batch at a time (what the planner's cast would have done).

use std::borrow::Cow;

use arrow::array::{ArrayRef, AsArray};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Float64Type};
use datafusion_common::Result;

/// A label value as stored: 0 or 1 when it is good.
pub(crate) trait Label: Copy + Send + Sync + 'static {
    /// The label as a number (exact for 0 and 1).
    fn to_f64(self) -> f64;
    /// Whether the label is 0 or 1.
    fn is_label(self) -> bool;
    /// 1 for the label 1, 0 for the label 0 (anything for a bad label).
    fn bit(self) -> u64;
    /// Bits whose OR over any labels is at most 1 exactly when every one of them is 0 or 1:
    /// one `or` a row checks a batch (an integer label as it is, as [`Self::is_label`] reads
    /// it).
    fn check_bits(self) -> u64;
    /// The labels as Float64 values without a copy, when that is what they are.
    fn as_f64s(v: &[Self]) -> Option<&[f64]> {
        let _ = v;
        None
    }
}

impl Label for f64 {
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self
    }
    #[inline(always)]
    fn is_label(self) -> bool {
        (self == 0.0) | (self == 1.0)
    }
    /// Bit 52 of the pattern, the lowest bit of the exponent: 1 for 1.0, 0 for ±0.0 —
    /// cheaper than a float-to-integer conversion.
    #[inline(always)]
    fn bit(self) -> u64 {
        (self.to_bits() >> 52) & 1
    }
    #[inline(always)]
    fn check_bits(self) -> u64 {
        u64::from(!self.is_label()) << 1
    }
    fn as_f64s(v: &[f64]) -> Option<&[f64]> {
        Some(v)
    }
}

macro_rules! integer_label {
    ($($t:ty),*) => {$(
        impl Label for $t {
            #[inline(always)]
            fn to_f64(self) -> f64 {
                self as f64
            }
            #[inline(always)]
            fn is_label(self) -> bool {
                // 0 and 1 only: a negative value wraps to a large one.
                (self as u64) <= 1
            }
            #[inline(always)]
            fn bit(self) -> u64 {
                // Unmasked: a good label is its own bit.
                self as u64
            }
            #[inline(always)]
            fn check_bits(self) -> u64 {
                self as u64
            }
        }
    )*};
}
integer_label!(i8, i32, i64);

/// Whether the kernels that read labels natively take a label column of type `t` as it is.
pub(crate) fn is_native(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Float64 | DataType::Int8 | DataType::Int32 | DataType::Int64
    )
}

/// Whole-column check of labels (no NULLs, no filter): a branch-free fold that vectorises.
pub(crate) fn all_labels<Y: Label>(v: &[Y]) -> bool {
    v.iter().fold(true, |ok, &y| ok & y.is_label())
}

/// Binds `$y` to the values of the label column `$a` as a slice of its own type (one of
/// [`is_native`]'s) and evaluates `$body` once per type; None for any other type.
macro_rules! with_labels {
    ($a:expr, |$y:ident| $body:expr) => {{
        use arrow::array::AsArray as _;
        use arrow::datatypes::{DataType, Float64Type, Int32Type, Int64Type, Int8Type};
        let a: &arrow::array::ArrayRef = $a;
        match a.data_type() {
            DataType::Float64 => {
                let $y: &[f64] = a.as_primitive::<Float64Type>().values();
                Some($body)
            }
            DataType::Int8 => {
                let $y: &[i8] = a.as_primitive::<Int8Type>().values();
                Some($body)
            }
            DataType::Int32 => {
                let $y: &[i32] = a.as_primitive::<Int32Type>().values();
                Some($body)
            }
            DataType::Int64 => {
                let $y: &[i64] = a.as_primitive::<Int64Type>().values();
                Some($body)
            }
            _ => None,
        }
    }};
}
pub(crate) use with_labels;

/// The label column (argument 1) as Float64: Boolean and integer labels cast, one batch at a
/// time; Float64 labels borrowed.
pub(crate) fn as_f64_labels(values: &[ArrayRef]) -> Result<Cow<'_, [ArrayRef]>> {
    match values.get(1) {
        Some(y) if *y.data_type() != DataType::Float64 => {
            let mut v = values.to_vec();
            v[1] = cast(y, &DataType::Float64)?;
            Ok(Cow::Owned(v))
        }
        _ => Ok(Cow::Borrowed(values)),
    }
}

/// One label column as Float64 values: borrowed when it is Float64, converted when it is
/// another of [`is_native`]'s types, cast otherwise.
pub(crate) fn f64_labels(a: &ArrayRef) -> Result<Cow<'_, [f64]>> {
    if let Some(v) = with_labels!(a, |y| label_values(y)) {
        return Ok(v);
    }
    Ok(Cow::Owned(
        cast(a, &DataType::Float64)?
            .as_primitive::<Float64Type>()
            .values()
            .to_vec(),
    ))
}

/// Labels as Float64 values: borrowed when they are Float64 already, converted otherwise.
pub(crate) fn label_values<Y: Label>(v: &[Y]) -> Cow<'_, [f64]> {
    match Y::as_f64s(v) {
        Some(v) => Cow::Borrowed(v),
        None => Cow::Owned(v.iter().map(|y| y.to_f64()).collect()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_labels_are_zero_or_one_only() {
        for (v, ok) in [
            (0i64, true),
            (1, true),
            (2, false),
            (-1, false),
            (i64::MIN, false),
        ] {
            assert_eq!(v.is_label(), ok, "{v}");
        }
        for (v, ok) in [(0i8, true), (1, true), (-1, false), (i8::MAX, false)] {
            assert_eq!(v.is_label(), ok, "{v}");
        }
        for (v, ok) in [
            (0.0, true),
            (-0.0, true),
            (1.0, true),
            (0.5, false),
            (f64::NAN, false),
        ] {
            assert_eq!(v.is_label(), ok, "{v}");
        }
        assert_eq!(
            (1i8.bit(), 0i8.bit(), 1.0f64.bit(), (-0.0f64).bit()),
            (1, 0, 1, 0)
        );
    }
}
