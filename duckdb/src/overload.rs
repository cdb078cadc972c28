//! Each calibsql function as DuckDB overloads: one per arity and argument type, since
//! DuckDB's stable C API has no bind step that would see the arguments' types or values.
//! Numbers are DOUBLE (DuckDB casts INTEGER, FLOAT and DECIMAL to it), a label DOUBLE or
//! BOOLEAN, a field or model ANY (passed as it is), a constant BIGINT, DOUBLE or VARCHAR, a
//! `_merge` twin's state the STRUCT its `_state` twin returns. A function with a multiclass
//! form (`auc`, `logloss`, `brier`, `fit_temperature`, `calibrate`) also takes a DOUBLE[] in
//! place of its first number.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::ArrayRef;
use arrow::datatypes::{DataType, Field};
use calibsql_udfs::host::{ArgumentKind, HostFunction};

use crate::vectors::LogicalType;
use datafusion_common::config::ConfigOptions;
use datafusion_common::{DataFusionError, Result, ScalarValue};

/// One overload as registered: a function, how many of its arguments the call passes and
/// the Arrow type each is read as (None: as DuckDB gives it, an ANY parameter).
#[derive(Debug)]
pub struct Overload {
    pub function: HostFunction,
    pub declared: Vec<Option<DataType>>,
    pub returns: DataType,
    /// The scalar functions' execution settings (DataFusion's defaults).
    pub config: Arc<ConfigOptions>,
}

impl Overload {
    pub fn name(&self) -> &str {
        &self.function.name
    }

    /// A chunk's columns as Arrow arrays of their declared types.
    ///
    /// # Safety
    /// `chunk` must be a live data chunk of this overload's arguments with `rows` rows.
    pub unsafe fn columns(
        &self,
        chunk: libduckdb_sys::duckdb_data_chunk,
        rows: usize,
    ) -> std::result::Result<Vec<ArrayRef>, String> {
        (0..self.declared.len())
            .map(|i| {
                let vector = libduckdb_sys::duckdb_data_chunk_get_vector(chunk, i as u64);
                let what = self.function.arguments[i].name;
                let a = crate::vectors::read(vector, rows)
                    .map_err(|e| format!("{}: argument {what}: {e}", self.name()))?;
                match &self.declared[i] {
                    Some(t) => crate::vectors::cast(&a, t),
                    None => Ok(a),
                }
            })
            .collect()
    }

    /// The DuckDB types of the parameters (ANY for a column passed as it is) and of the
    /// result.
    pub fn duckdb_types(&self) -> std::result::Result<(Vec<LogicalType>, LogicalType), String> {
        let parameters = self
            .declared
            .iter()
            .map(|d| match d {
                Some(t) => LogicalType::from_arrow(t),
                None => Ok(LogicalType::of(libduckdb_sys::DUCKDB_TYPE_DUCKDB_TYPE_ANY)),
            })
            .collect::<std::result::Result<Vec<_>, _>>()?;
        Ok((parameters, LogicalType::from_arrow(&self.returns)?))
    }

    /// Frees an overload DuckDB holds as a function's extra info (its destructor callback).
    ///
    /// # Safety
    /// `data` is null or a `Box<Overload>` turned into a raw pointer, freed once.
    pub unsafe extern "C" fn drop_boxed(data: *mut std::ffi::c_void) {
        if !data.is_null() {
            drop(Box::from_raw(data as *mut Overload));
        }
    }

    /// The types of a call: the declared ones, `any` for the ANY parameters.
    pub fn types_with(&self, any: &DataType) -> Vec<DataType> {
        self.declared
            .iter()
            .map(|d| d.clone().unwrap_or_else(|| any.clone()))
            .collect()
    }
}

/// Every overload of every function in `functions`.
pub fn overloads(functions: &[HostFunction]) -> Result<Vec<Overload>> {
    let by_name: HashMap<&str, &HostFunction> =
        functions.iter().map(|f| (f.name.as_str(), f)).collect();
    // The type an ANY parameter is assumed to have when the return type is worked out at
    // registration: text (a field), else a calibrator's model (`calibrate`).
    let model = by_name
        .get("fit_platt")
        .map(|f| f.return_type(&[DataType::Float64, DataType::Float64]))
        .transpose()?
        .unwrap_or(DataType::Null);
    let config = Arc::new(ConfigOptions::default());
    let mut out = vec![];
    for f in functions {
        for arity in f.required..=f.arguments.len() {
            let mut combos: Vec<Vec<Option<DataType>>> = vec![vec![]];
            for a in &f.arguments[..arity] {
                let choices = choices(&a.kind, &by_name)?;
                combos = combos
                    .into_iter()
                    .flat_map(|c| {
                        choices.iter().map(move |t| {
                            let mut c = c.clone();
                            c.push(t.clone());
                            c
                        })
                    })
                    .collect();
            }
            for declared in combos {
                let listed = list_form(f, &declared);
                let returns = return_of(f, &declared, &model)?;
                out.push(Overload {
                    function: f.clone(),
                    declared,
                    returns,
                    config: Arc::clone(&config),
                });
                // The multiclass form, where the function has one: a list of numbers (a
                // model's class probabilities or logits) in place of the first number.
                if let Some(declared) = listed {
                    if let Ok(returns) = return_of(f, &declared, &model) {
                        out.push(Overload {
                            function: f.clone(),
                            declared,
                            returns,
                            config: Arc::clone(&config),
                        });
                    }
                }
            }
        }
    }
    Ok(out)
}

/// What `f` returns for arguments of the `declared` types: with an ANY parameter taken for
/// text (a field), else for a calibrator's `model` (`calibrate`).
fn return_of(
    f: &HostFunction,
    declared: &[Option<DataType>],
    model: &DataType,
) -> Result<DataType> {
    let probe = |any: &DataType| -> Vec<DataType> {
        declared
            .iter()
            .map(|d| d.clone().unwrap_or_else(|| any.clone()))
            .collect()
    };
    f.return_type(&probe(&DataType::Utf8))
        .or_else(|_| f.return_type(&probe(model)))
}

/// `declared` with a list of numbers in place of its first argument, when that is a number
/// of `f` (the functions with a multiclass form take the list there; the others refuse it
/// when the form's return type is asked for).
fn list_form(f: &HostFunction, declared: &[Option<DataType>]) -> Option<Vec<Option<DataType>>> {
    let first = f.arguments.first()?;
    (first.kind == ArgumentKind::Number && declared.first()? == &Some(DataType::Float64)).then(
        || {
            let mut listed = declared.to_vec();
            listed[0] = Some(number_list());
            listed
        },
    )
}

/// A list of Float64, as a multiclass row's probabilities are read.
fn number_list() -> DataType {
    DataType::List(Arc::new(Field::new_list_field(DataType::Float64, true)))
}

fn choices(
    kind: &ArgumentKind,
    by_name: &HashMap<&str, &HostFunction>,
) -> Result<Vec<Option<DataType>>> {
    let list = number_list();
    Ok(match kind {
        ArgumentKind::Number | ArgumentKind::ConstantNumber => vec![Some(DataType::Float64)],
        ArgumentKind::Label => vec![Some(DataType::Float64), Some(DataType::Boolean)],
        ArgumentKind::Column => vec![None],
        ArgumentKind::NumberList => vec![Some(list)],
        ArgumentKind::ConstantInteger => vec![Some(DataType::Int64)],
        ArgumentKind::ConstantText => vec![Some(DataType::Utf8)],
        ArgumentKind::StateOf(state) => {
            let f = by_name.get(state.as_str()).ok_or_else(|| {
                DataFusionError::Internal(format!("no aggregate {state} for a _merge"))
            })?;
            let types: Vec<DataType> = f.arguments[..f.required]
                .iter()
                .map(|a| match a.kind {
                    ArgumentKind::Column | ArgumentKind::ConstantText => DataType::Utf8,
                    ArgumentKind::NumberList => list.clone(),
                    ArgumentKind::ConstantInteger => DataType::Int64,
                    _ => DataType::Float64,
                })
                .collect();
            let mut states = vec![Some(f.return_type(&types)?)];
            // The state of the multiclass form, where the `_state` twin has one of its own.
            if f.arguments
                .first()
                .is_some_and(|a| a.kind == ArgumentKind::Number)
            {
                let mut listed = types;
                listed[0] = list.clone();
                if let Ok(state) = f.return_type(&listed) {
                    if !states.contains(&Some(state.clone())) {
                        states.push(Some(state));
                    }
                }
            }
            states
        }
    })
}

/// The constant argument `arg` of `function` (the same non-NULL value on every row).
pub fn constant_of(
    function: &str,
    arg: &str,
    a: &arrow::array::ArrayRef,
) -> std::result::Result<ScalarValue, String> {
    use arrow::array::{Array, Scalar};
    if a.is_empty() {
        return Err(format!("{function}: argument {arg} has no value"));
    }
    if a.null_count() > 0 {
        return Err(format!(
            "{function}: argument {arg} must be a constant, got NULL"
        ));
    }
    let first = a.slice(0, 1);
    let same = arrow::compute::kernels::cmp::not_distinct(a, &Scalar::new(&first))
        .map_err(|e| e.to_string())?;
    if same.true_count() != a.len() {
        return Err(format!(
            "{function}: argument {arg} must be a constant, got different values on different rows"
        ));
    }
    ScalarValue::try_from_array(a, 0).map_err(crate::guard::message)
}
