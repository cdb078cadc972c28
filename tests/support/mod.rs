//! Shared by tests and benches (`#[path]`-included): one of calibsql's aggregates called on
//! columns of a schema, with the accumulator arguments the planner would build.
#![allow(dead_code)] // each including target uses part of it

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, FieldRef, SchemaRef};
use datafusion::logical_expr::function::AccumulatorArgs;
use datafusion::logical_expr::{Accumulator, AggregateUDF, GroupsAccumulator};
use datafusion::physical_expr::expressions::col;
use datafusion::physical_expr::PhysicalExpr;

pub struct UdafCall {
    pub udaf: Arc<AggregateUDF>,
    schema: SchemaRef,
    pub exprs: Vec<Arc<dyn PhysicalExpr>>,
    fields: Vec<FieldRef>,
    ret: FieldRef,
}

impl UdafCall {
    /// `name(exprs…)` over `schema`.
    pub fn new(name: &str, schema: SchemaRef, exprs: Vec<Arc<dyn PhysicalExpr>>) -> Self {
        let udaf = calibsql::udfs::all_aggregate_functions()
            .into_iter()
            .find(|f| f.name() == name)
            .unwrap_or_else(|| panic!("no aggregate {name}"));
        let fields: Vec<FieldRef> = exprs
            .iter()
            .map(|e| e.return_field(&schema).unwrap())
            .collect();
        let types: Vec<DataType> = fields.iter().map(|f| f.data_type().clone()).collect();
        let ret = Arc::new(Field::new("r", udaf.return_type(&types).unwrap(), true));
        Self {
            udaf,
            schema,
            exprs,
            fields,
            ret,
        }
    }

    /// `name(col1, col2, …)` over the named columns of `schema`.
    pub fn columns(name: &str, schema: SchemaRef, cols: &[&str]) -> Self {
        let exprs = cols.iter().map(|c| col(c, &schema).unwrap()).collect();
        Self::new(name, schema, exprs)
    }

    /// `name(…)` over Float64 columns `cols` (a schema of just those).
    pub fn float_columns(name: &str, cols: &[&str]) -> Self {
        let fields: Vec<Field> = cols
            .iter()
            .map(|c| Field::new(*c, DataType::Float64, true))
            .collect();
        let schema = Arc::new(datafusion::arrow::datatypes::Schema::new(fields));
        Self::columns(name, schema, cols)
    }

    pub fn args(&self) -> AccumulatorArgs<'_> {
        AccumulatorArgs {
            return_field: Arc::clone(&self.ret),
            schema: &self.schema,
            ignore_nulls: false,
            order_bys: &[],
            is_reversed: false,
            name: self.udaf.name(),
            is_distinct: false,
            exprs: &self.exprs,
            expr_fields: &self.fields,
        }
    }

    pub fn accumulator(&self) -> Box<dyn Accumulator> {
        self.udaf.accumulator(self.args()).unwrap()
    }

    pub fn groups_accumulator(&self) -> Box<dyn GroupsAccumulator> {
        self.udaf.create_groups_accumulator(self.args()).unwrap()
    }
}
