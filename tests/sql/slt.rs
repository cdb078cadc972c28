//! SQL logic tests: every `tests/slt/*.slt` file runs against `calibsql::new_context()`.
//!
//! Run: `cargo test --test sql slt::` (one test per file, e.g. `cargo test --test sql
//! slt::binned`). `SLT_COMPLETE=1 cargo test --test sql slt::` rewrites the files with the
//! actual output; use it only to fill in layout and error messages — every expected value is
//! computed independently by the scripts in `tests/slt/gen/` (numpy / scikit-learn) and must
//! be re-checked there.
//!
//! Cell format: NULL as `NULL`, the empty string as `(empty)`, booleans `true`/`false`, floats
//! (also inside lists and structs) as Rust's `{:?}` prints them — the shortest string that
//! round-trips (`1.0`, `0.1`, `1e-20`, `inf`, `NaN`); everything else through arrow's
//! `ArrayFormatter`. Column types: `I` integers, `R` floats and decimals, `T` everything else;
//! they are checked strictly.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::datatypes::{DataType, Field, Float16Type, Float32Type, Float64Type};
use datafusion::arrow::error::ArrowError;
use datafusion::arrow::util::display::{
    ArrayFormatter, ArrayFormatterFactory, DisplayIndex, FormatOptions, FormatResult,
};
use datafusion::error::DataFusionError;
use datafusion::prelude::SessionContext;
use sqllogictest::{DBOutput, DefaultColumnType};

/// One connection: a fresh calibsql session.
struct CalibDb {
    ctx: SessionContext,
}

/// Formats floats at any nesting depth with Rust's shortest round-trip `{:?}`.
#[derive(Debug)]
struct RustFloats;

struct FloatCells<'a, A: Array> {
    array: &'a A,
    null: &'a str,
    get: fn(&A, usize) -> f64,
}

impl<A: Array> DisplayIndex for FloatCells<'_, A> {
    fn write(&self, idx: usize, f: &mut dyn std::fmt::Write) -> FormatResult {
        if self.array.is_null(idx) {
            f.write_str(self.null)?;
        } else {
            write!(f, "{:?}", (self.get)(self.array, idx))?;
        }
        Ok(())
    }
}

struct Float32Cells<'a> {
    array: &'a datafusion::arrow::array::Float32Array,
    null: &'a str,
}

impl DisplayIndex for Float32Cells<'_> {
    fn write(&self, idx: usize, f: &mut dyn std::fmt::Write) -> FormatResult {
        if self.array.is_null(idx) {
            f.write_str(self.null)?;
        } else {
            // Print the f32 itself so `0.1f32` shows as `0.1`, not its f64 widening.
            write!(f, "{:?}", self.array.value(idx))?;
        }
        Ok(())
    }
}

impl ArrayFormatterFactory for RustFloats {
    fn create_array_formatter<'a>(
        &self,
        array: &'a dyn Array,
        options: &FormatOptions<'a>,
        _field: Option<&'a Field>,
    ) -> Result<Option<ArrayFormatter<'a>>, ArrowError> {
        let null = options.null();
        let cells: Box<dyn DisplayIndex + 'a> = match array.data_type() {
            DataType::Float64 => Box::new(FloatCells {
                array: array.as_primitive::<Float64Type>(),
                null,
                get: |a, i| a.value(i),
            }),
            DataType::Float32 => Box::new(Float32Cells {
                array: array.as_primitive::<Float32Type>(),
                null,
            }),
            DataType::Float16 => Box::new(FloatCells {
                array: array.as_primitive::<Float16Type>(),
                null,
                get: |a, i| a.value(i).to_f64(),
            }),
            _ => return Ok(None),
        };
        Ok(Some(ArrayFormatter::new(cells, options.safe())))
    }
}

fn column_type(dt: &DataType) -> DefaultColumnType {
    match dt {
        DataType::Int8
        | DataType::Int16
        | DataType::Int32
        | DataType::Int64
        | DataType::UInt8
        | DataType::UInt16
        | DataType::UInt32
        | DataType::UInt64 => DefaultColumnType::Integer,
        DataType::Float16
        | DataType::Float32
        | DataType::Float64
        | DataType::Decimal32(_, _)
        | DataType::Decimal64(_, _)
        | DataType::Decimal128(_, _)
        | DataType::Decimal256(_, _) => DefaultColumnType::FloatingPoint,
        DataType::Dictionary(_, v) => column_type(v),
        _ => DefaultColumnType::Text,
    }
}

#[async_trait]
impl sqllogictest::AsyncDB for CalibDb {
    type Error = DataFusionError;
    type ColumnType = DefaultColumnType;

    async fn run(&mut self, sql: &str) -> Result<DBOutput<DefaultColumnType>, DataFusionError> {
        let df = calibsql::sql(&self.ctx, sql).await?;
        let schema = Arc::clone(df.schema().inner());
        let batches = df.collect().await?;
        if schema.fields().is_empty() {
            // DDL (CREATE TABLE ..., SET ...) produces no columns.
            return Ok(DBOutput::StatementComplete(0));
        }
        let types = schema
            .fields()
            .iter()
            .map(|f| column_type(f.data_type()))
            .collect();
        let options = FormatOptions::new()
            .with_null("NULL")
            .with_formatter_factory(Some(&RustFloats));
        let mut rows = Vec::new();
        for batch in &batches {
            let formatters = batch
                .columns()
                .iter()
                .map(|c| ArrayFormatter::try_new(c.as_ref(), &options).map(|f| (f, c)))
                .collect::<Result<Vec<_>, _>>()?;
            for row in 0..batch.num_rows() {
                rows.push(
                    formatters
                        .iter()
                        .map(|(f, col)| cell(f, col.as_ref(), row))
                        .collect(),
                );
            }
        }
        Ok(DBOutput::Rows { types, rows })
    }

    async fn shutdown(&mut self) {}

    fn engine_name(&self) -> &str {
        "calibsql"
    }
}

fn cell(f: &ArrayFormatter<'_>, col: &dyn Array, row: usize) -> String {
    // `ArrayFormatter::try_new` ignores the factory for the top-level array, so floats are
    // handled here too.
    let s = if col.is_null(row) {
        "NULL".to_string()
    } else {
        match col.data_type() {
            DataType::Float64 => format!("{:?}", col.as_primitive::<Float64Type>().value(row)),
            DataType::Float32 => format!("{:?}", col.as_primitive::<Float32Type>().value(row)),
            _ => f.value(row).to_string(),
        }
    };
    if s.is_empty() {
        "(empty)".to_string()
    } else {
        s
    }
}

fn slt_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("slt")
}

/// Runs (or with `SLT_COMPLETE=1`, rewrites) one `.slt` file on its own tokio runtime.
fn run_file(name: &str) {
    let path = slt_dir().join(format!("{name}.slt"));
    assert!(path.exists(), "missing {}", path.display());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    rt.block_on(async {
        let mut runner = sqllogictest::Runner::new(|| async {
            Ok::<_, DataFusionError>(CalibDb {
                ctx: calibsql::new_context(),
            })
        });
        runner.with_column_validator(sqllogictest::strict_column_validator);
        if std::env::var_os("SLT_COMPLETE").is_some_and(|v| v != "0") {
            runner
                .update_test_file(
                    &path,
                    " ",
                    sqllogictest::default_validator,
                    sqllogictest::default_normalizer,
                    sqllogictest::strict_column_validator,
                )
                .await
                .unwrap_or_else(|e| panic!("completing {}: {e}", path.display()));
        } else {
            // Run every record and report all failures of the file, not only the first.
            let records = sqllogictest::parse_file::<DefaultColumnType>(&path)
                .unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()));
            let mut failures = Vec::new();
            for record in records {
                if let Err(e) = runner.run_async(record).await {
                    failures.push(e.display(false).to_string());
                }
            }
            assert!(
                failures.is_empty(),
                "{}: {} failing record(s)\n\n{}",
                path.display(),
                failures.len(),
                failures.join("\n\n")
            );
        }
    });
}

macro_rules! slt_files {
    ($($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                run_file(stringify!($name));
            }
        )*

        /// Every `.slt` file in the directory has a test above.
        #[test]
        fn every_slt_file_has_a_test() {
            let listed = [$(stringify!($name)),*];
            for entry in std::fs::read_dir(slt_dir()).expect("tests/slt") {
                let path = entry.expect("dir entry").path();
                if path.extension().is_some_and(|e| e == "slt") {
                    let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
                    assert!(
                        listed.contains(&stem.as_str()),
                        "{} has no test: add it to slt_files! in tests/sql/slt.rs",
                        path.display()
                    );
                }
            }
        }
    };
}

slt_files!(
    smoke,
    binned,
    logloss,
    auc,
    field,
    scalars,
    docs,
    fits,
    smooth,
    strategies,
    multi_field,
    labels,
    inference,
    intervals,
    top_label,
    cbpe,
    multiclass_loss,
    multiclass_fits
);
