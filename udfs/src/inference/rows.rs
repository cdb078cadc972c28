//! The kernel of the inference aggregates that keep `auc`'s state (the rows, or a count per
//! distinct score when scores repeat; see `crate::metrics::auc`) and finish each group with a
//! struct of numbers: `auc_interval`, `calibration_decomposition`, `hosmer_lemeshow` and
//! `cbpe`. They merge, serialise and account their state exactly as `auc` does.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use arrow::array::ArrayRef;
use arrow::datatypes::Fields;
use datafusion_common::Result;

use super::struct_column;
use crate::kernel::Kernel;
use crate::metrics::auc::AucKernel;
use crate::values::{Rows, Tally};

/// A group's result from its rows and tallies: K fields (None: a NULL struct).
pub(crate) type Finish<const K: usize> =
    Arc<dyn Fn(&mut Rows, &[Tally; 2]) -> Option<[Option<f64>; K]> + Send + Sync>;

/// `auc`'s kernel whose value is `finish` of each group, a struct of `fields` (each number
/// cast to its field's type).
pub(crate) struct RowsStructKernel<const K: usize> {
    pub(crate) auc: AucKernel,
    pub(crate) fields: Fields,
    pub(crate) finish: Finish<K>,
}

impl<const K: usize> fmt::Debug for RowsStructKernel<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RowsStructKernel")
            .field("auc", &self.auc)
            .field("fields", &self.fields)
            .finish_non_exhaustive()
    }
}

impl<const K: usize> Kernel for RowsStructKernel<K> {
    crate::kernel::delegate_to_inner!(auc: resize, num_groups, update, merge, check_stored, state, take_state, drain, size);

    fn empty(&self) -> Result<Self> {
        Ok(Self {
            auc: self.auc.empty()?,
            fields: self.fields.clone(),
            finish: Arc::clone(&self.finish),
        })
    }
    fn evaluate(&mut self, range: Range<usize>) -> Result<ArrayRef> {
        let finish = Arc::clone(&self.finish);
        let rows: Vec<Option<[Option<f64>; K]>> = range
            .map(|g| finish(&mut self.auc.store.groups[g], &self.auc.tallies[g]))
            .collect();
        struct_column(&self.fields, &rows)
    }
    fn native_labels(&self) -> bool {
        true
    }
}

/// The `AggregateUDFImpl` (and `registry::Shaped`) of `$t`, an aggregate over this kernel with
/// call shape `$shape`: its struct result of `$fields`, `auc`'s state fields, and the
/// documentation `$doc` (an `Option<&Documentation>`).
macro_rules! rows_udaf {
    ($t:ident, $shape:expr, $fields:expr, $doc:expr) => {
        impl datafusion_expr::AggregateUDFImpl for $t {
            $crate::kernel::kernel_udaf_common!();

            fn return_type(
                &self,
                arg_types: &[arrow::datatypes::DataType],
            ) -> datafusion_common::Result<arrow::datatypes::DataType> {
                $shape.coerce(arg_types)?;
                Ok(arrow::datatypes::DataType::Struct($fields))
            }

            fn state_fields(
                &self,
                args: datafusion_expr::function::StateFieldsArgs,
            ) -> datafusion_common::Result<Vec<arrow::datatypes::FieldRef>> {
                Ok($crate::metrics::auc::state_fields(args.name))
            }

            fn documentation(&self) -> Option<&datafusion_expr::Documentation> {
                $doc
            }
        }

        impl $crate::common::Shaped for $t {
            fn call_shape(&self) -> Option<$crate::common::CallShape> {
                Some($shape)
            }
        }
    };
}
pub(crate) use rows_udaf;
