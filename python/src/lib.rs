//! `calibsql._calibsql`: the native part of the Python package `calibsql`.
//!
//! Two things live here:
//! - the bundled engine: [`Connection`] (a calibsql session, as the CLI builds it) and
//!   [`QueryResult`] (a result set that leaves by the Arrow C stream interface);
//! - the datafusion-python route: one datafusion-ffi capsule per calibsql function
//!   ([`ffi_scalar_udfs`], [`ffi_aggregate_udfs`]), which `calibsql.datafusion.register_all`
//!   hands to a user's own `datafusion.SessionContext`.
//!
//! The Python-facing API (docstrings, pandas/polars conversions) is in `python/calibsql/`;
//! this module stays small and typed.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use arrow::array::{RecordBatch, RecordBatchIterator, RecordBatchReader};
use arrow::datatypes::SchemaRef;
use arrow::ffi_stream::{ArrowArrayStreamReader, FFI_ArrowArrayStream};
use arrow::util::pretty::pretty_format_batches;
use datafusion::datasource::MemTable;
use datafusion::error::DataFusionError;
use datafusion::prelude::SessionContext;
use datafusion_ffi::udaf::FFI_AggregateUDF;
use datafusion_ffi::udf::FFI_ScalarUDF;
use futures::FutureExt;
use pyo3::create_exception;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyCapsule;

create_exception!(
    _calibsql,
    Error,
    PyValueError,
    "An error calibsql reports: bad SQL, a bad argument value (`ece` of p = 1.7), a missing \
     file or table. The message is the CLI's `Error:` line without its prefix."
);

/// The DataFusion release the engine and the FFI capsules are built on.
const DATAFUSION_VERSION: &str = "55.2.0";

/// One runtime for every connection: queries are planned and run on its worker threads,
/// whose stacks hold statements as deep as calibsql accepts ([`calibsql::nesting`]), while
/// the calling Python thread waits with the GIL released.
fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        calibsql::nesting::runtime_builder()
            .thread_name("calibsql")
            .build()
            .expect("a tokio runtime can be built")
    })
}

/// Why a wait ended without a value.
enum Stopped {
    /// The query failed: its one-line message.
    Failed(String),
    /// A Python signal handler raised (Ctrl-C: `KeyboardInterrupt`).
    Interrupted(PyErr),
}

/// Runs `work` as a task of the runtime with the GIL released, its statements under one
/// cancel flag ([`calibsql::cancel`]), while the calling thread (where CPython runs its
/// signal handlers) checks for Python signals every 100 ms. On Ctrl-C the flag is set, which
/// stops the statement's operators at once, the task is aborted, and `KeyboardInterrupt` is
/// raised. The waiting uses no tokio timer: the runtime's workers may be busy. A panic becomes
/// an [`Error`] naming it as an internal error, never a crash of the interpreter.
fn wait<T, F>(py: Python<'_>, work: F) -> PyResult<T>
where
    T: Send + 'static,
    F: Future<Output = anyhow::Result<T>> + Send + 'static,
{
    let cancel = calibsql::cancel::Cancel::new();
    let (sender, receiver) = std::sync::mpsc::sync_channel(1);
    let task = runtime().spawn(calibsql::cancel::scope(cancel.clone(), async move {
        let done = AssertUnwindSafe(work).catch_unwind().await;
        let _ = sender.send(done);
    }));
    let outcome = py.detach(move || loop {
        match receiver.recv_timeout(Duration::from_millis(100)) {
            Ok(Ok(Ok(value))) => return Ok(value),
            Ok(Ok(Err(error))) => return Err(Stopped::Failed(calibsql::errors::message(&error))),
            Ok(Err(panic)) => {
                return Err(Stopped::Failed(format!(
                    "internal error: {}",
                    panic_text(panic.as_ref())
                )))
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                return Err(Stopped::Failed(
                    "internal error: the query's task ended without a result".to_string(),
                ))
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                if let Err(error) = Python::attach(|py| py.check_signals()) {
                    cancel.cancel();
                    task.abort();
                    return Err(Stopped::Interrupted(error));
                }
            }
        }
    });
    match outcome {
        Ok(value) => Ok(value),
        Err(Stopped::Failed(message)) => Err(Error::new_err(message)),
        Err(Stopped::Interrupted(error)) => Err(error),
    }
}

fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_string())
}

fn datafusion_error(error: DataFusionError) -> PyErr {
    Error::new_err(calibsql::errors::datafusion_message(&error))
}

/// A calibsql session: every calibsql function, tables from paths, globs, object store URLs
/// (`s3://`, `az://`, `abfss://`, `gs://`, `http(s)://`) and Arrow data, with the credentials of
/// the environment and the AWS shared files.
#[pyclass(module = "calibsql._calibsql", frozen)]
struct Connection {
    ctx: SessionContext,
}

#[pymethods]
impl Connection {
    #[new]
    #[pyo3(signature = (*, memory_limit=None, target_partitions=None, batch_size=None))]
    fn new(
        memory_limit: Option<usize>,
        target_partitions: Option<usize>,
        batch_size: Option<usize>,
    ) -> PyResult<Self> {
        if target_partitions == Some(0) {
            return Err(Error::new_err(
                "connect: target_partitions must be >= 1, got 0",
            ));
        }
        if batch_size == Some(0) {
            return Err(Error::new_err("connect: batch_size must be >= 1, got 0"));
        }
        let ctx = calibsql::build_context(&calibsql::ContextOptions {
            batch_size,
            target_partitions,
            memory_limit,
            s3: Default::default(),
        })
        .map_err(datafusion_error)?;
        Ok(Connection { ctx })
    }

    /// Registers a file, directory, glob or object store location (`s3://`, `az://`, `gs://`,
    /// `https://`, …) as table `name`.
    #[pyo3(signature = (name, location, format=None))]
    fn register_location(
        &self,
        py: Python<'_>,
        name: &str,
        location: &str,
        format: Option<&str>,
    ) -> PyResult<()> {
        let format = match format {
            None => None,
            Some(text) => Some(calibsql::tables::TableFormat::from_name(text).ok_or_else(
                || {
                    Error::new_err(format!(
                        "register: format must be one of parquet, csv, json (ndjson), got '{text}'"
                    ))
                },
            )?),
        };
        let ctx = self.ctx.clone();
        let (name, location) = (name.to_string(), location.to_string());
        wait(py, async move {
            calibsql::tables::register_table(&ctx, &name, &location, format).await?;
            Ok(())
        })
    }

    /// Registers Arrow data (any object with `__arrow_c_stream__`: a pyarrow Table or
    /// RecordBatchReader, a polars or pandas DataFrame) as in-memory table `name`. The
    /// stream is read once, in Arrow's C layout: no Python row is made.
    fn register_arrow(&self, name: &str, data: &Bound<'_, PyAny>) -> PyResult<()> {
        let reader = import_stream(data)
            .map_err(|e| Error::new_err(format!("register {name}: not Arrow data: {e}")))?;
        let schema = reader.schema();
        let batches: Vec<RecordBatch> = reader
            .collect::<Result<_, _>>()
            .map_err(|e| Error::new_err(format!("register {name}: {e}")))?;
        // One partition per core, so a query over a large frame runs in parallel.
        let partitions = self.ctx.state().config().target_partitions().max(1);
        let mut split: Vec<Vec<RecordBatch>> =
            vec![Vec::new(); partitions.min(batches.len().max(1))];
        let n = split.len();
        for (i, batch) in batches.into_iter().enumerate() {
            split[i % n].push(batch);
        }
        let table = MemTable::try_new(schema, split).map_err(datafusion_error)?;
        if self.ctx.table_exist(name).map_err(datafusion_error)? {
            return Err(Error::new_err(format!("table '{name}' already exists")));
        }
        self.ctx
            .register_table(name, Arc::new(table))
            .map_err(datafusion_error)?;
        Ok(())
    }

    /// Drops table `name` (no error if it does not exist).
    fn deregister(&self, name: &str) -> PyResult<()> {
        self.ctx.deregister_table(name).map_err(datafusion_error)?;
        Ok(())
    }

    /// Names of the tables of the default schema, sorted.
    fn tables(&self) -> PyResult<Vec<String>> {
        let mut names: Vec<String> = self
            .ctx
            .catalog("datafusion")
            .and_then(|c| c.schema("public"))
            .map(|s| s.table_names())
            .unwrap_or_default();
        names.sort();
        Ok(names)
    }

    /// Runs every statement of `sql` in order and returns the result of the last.
    fn sql(&self, py: Python<'_>, sql: &str) -> PyResult<QueryResult> {
        let ctx = self.ctx.clone();
        let sql = sql.to_string();
        wait(py, async move {
            let statements = calibsql::parse_statements(&ctx, &sql)?;
            let Some(count) = std::num::NonZeroUsize::new(statements.len()) else {
                anyhow::bail!("no SQL statement to run");
            };
            let mut result = None;
            for (i, statement) in statements.into_iter().enumerate() {
                let frame = calibsql::plan_statement(&ctx, statement).await?;
                let schema: SchemaRef = Arc::new(frame.schema().as_arrow().clone());
                let batches = calibsql::cancel::collect(frame).await?;
                if i + 1 == count.get() {
                    result = Some(QueryResult { schema, batches });
                }
            }
            Ok(result.expect("the last statement sets the result"))
        })
    }

    /// The reliability diagram of the query's `p`, `y` (and optional `series`) columns as
    /// SVG text.
    #[pyo3(signature = (sql, bins=15, strategy="uniform", title=None, intervals=true))]
    fn reliability_svg(
        &self,
        py: Python<'_>,
        sql: &str,
        bins: u32,
        strategy: &str,
        title: Option<String>,
        intervals: bool,
    ) -> PyResult<String> {
        let strategy = calibsql::plot::Strategy::from_name(strategy).ok_or_else(|| {
            Error::new_err(format!(
                "plot_reliability: strategy must be one of {}, got '{strategy}'",
                calibsql::plot::Strategy::NAMES.join(", ")
            ))
        })?;
        if bins == 0 {
            return Err(Error::new_err("plot_reliability: bins must be >= 1, got 0"));
        }
        let ctx = self.ctx.clone();
        let sql = sql.to_string();
        wait(py, async move {
            let panels = calibsql::plot::reliability_panels(&ctx, &sql, bins, strategy).await?;
            calibsql::plot::reliability_svg(&panels, title.as_deref(), strategy, intervals)
        })
    }

    /// The calibration report of the query (`calibsql report`): its page, its numbers and
    /// `save`.
    #[pyo3(signature = (sql, fields=Vec::new(), bins=15, strategy="uniform", title=None,
                        reference_days=7, axis="auto"))]
    #[allow(clippy::too_many_arguments)]
    fn report(
        &self,
        py: Python<'_>,
        sql: &str,
        fields: Vec<String>,
        bins: u32,
        strategy: &str,
        title: Option<String>,
        reference_days: u32,
        axis: &str,
    ) -> PyResult<Report> {
        let strategy = calibsql::plot::Strategy::from_name(strategy).ok_or_else(|| {
            Error::new_err(format!(
                "report: strategy must be one of {}, got '{strategy}'",
                calibsql::plot::Strategy::NAMES.join(", ")
            ))
        })?;
        let axis = calibsql::report::Axis::from_name(axis).ok_or_else(|| {
            Error::new_err(format!(
                "report: axis must be one of {}, got '{axis}'",
                calibsql::report::Axis::NAMES.join(", ")
            ))
        })?;
        let options = calibsql::report::ReportOptions {
            bins,
            strategy,
            fields,
            title,
            reference_days,
            source: vec![],
            axis,
        };
        let ctx = self.ctx.clone();
        let sql = sql.to_string();
        let report = wait(py, async move {
            calibsql::report::compute(&ctx, &sql, &options).await
        })?;
        Ok(Report { report })
    }
}

/// A computed calibration report.
#[pyclass(module = "calibsql._calibsql", frozen)]
struct Report {
    report: calibsql::report::Report,
}

#[pymethods]
impl Report {
    /// The page (HTML).
    fn html(&self) -> PyResult<String> {
        self.report
            .html()
            .map_err(|e| Error::new_err(calibsql::errors::message(&e)))
    }

    /// The numbers as JSON text.
    fn json(&self) -> PyResult<String> {
        self.report
            .json()
            .map_err(|e| Error::new_err(calibsql::errors::message(&e)))
    }

    /// Writes the page to `path` atomically (a temporary file renamed into place).
    fn save(&self, py: Python<'_>, path: std::path::PathBuf) -> PyResult<()> {
        py.detach(|| self.report.save(&path))
            .map_err(|e| Error::new_err(calibsql::errors::message(&e)))
    }
}

/// A query's result: its schema and record batches, held in Arrow memory.
#[pyclass(module = "calibsql._calibsql", name = "Result", frozen)]
struct QueryResult {
    schema: SchemaRef,
    batches: Vec<RecordBatch>,
}

#[pymethods]
impl QueryResult {
    /// The Arrow PyCapsule stream interface: `pa.table(result)`, `pl.DataFrame(result)`.
    /// `requested_schema` is accepted and ignored (the columns keep their types).
    #[pyo3(signature = (requested_schema=None))]
    fn __arrow_c_stream__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        let _ = requested_schema;
        let reader = RecordBatchIterator::new(
            self.batches.clone().into_iter().map(Ok),
            Arc::clone(&self.schema),
        );
        let stream = FFI_ArrowArrayStream::new(Box::new(reader));
        // The consumer moves the stream out (and clears its release callback); an unused
        // capsule releases it when dropped.
        PyCapsule::new_with_value(py, stream, c"arrow_array_stream")
    }

    #[getter]
    fn num_rows(&self) -> usize {
        self.batches.iter().map(RecordBatch::num_rows).sum()
    }

    #[getter]
    fn column_names(&self) -> Vec<String> {
        self.schema
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect()
    }

    fn __len__(&self) -> usize {
        self.num_rows()
    }

    /// The first `max_rows` rows as a text table, as the CLI prints them.
    #[pyo3(signature = (max_rows=20))]
    fn format(&self, max_rows: usize) -> PyResult<String> {
        let mut shown = Vec::new();
        let mut left = max_rows;
        for batch in &self.batches {
            if left == 0 {
                break;
            }
            let take = left.min(batch.num_rows());
            shown.push(batch.slice(0, take));
            left -= take;
        }
        if shown.is_empty() {
            shown.push(RecordBatch::new_empty(Arc::clone(&self.schema)));
        }
        let mut text = pretty_format_batches(&shown)
            .map_err(|e| Error::new_err(e.to_string()))?
            .to_string();
        let total = self.num_rows();
        if total > max_rows {
            text.push_str(&format!("\n{max_rows} of {total} rows shown"));
        }
        Ok(text)
    }
}

/// Reads the Arrow C stream of `data` (its `__arrow_c_stream__()` capsule).
///
/// Done here with arrow's C stream interface rather than arrow's `pyarrow` feature, which
/// would make arrow — and so every DataFusion crate of the workspace — depend on PyO3 and be
/// rebuilt whenever the Python interpreter PyO3 finds changes.
fn import_stream(data: &Bound<'_, PyAny>) -> PyResult<ArrowArrayStreamReader> {
    if !data.hasattr("__arrow_c_stream__")? {
        return Err(Error::new_err(format!(
            "{} has no __arrow_c_stream__ method",
            data.get_type().name()?
        )));
    }
    let capsule = data.call_method0("__arrow_c_stream__")?;
    let capsule = capsule
        .cast::<PyCapsule>()
        .map_err(|_| Error::new_err("__arrow_c_stream__ did not return a PyCapsule"))?;
    let pointer = capsule.pointer_checked(Some(c"arrow_array_stream"))?;
    // SAFETY: a capsule named "arrow_array_stream" holds an ArrowArrayStream (the Arrow
    // PyCapsule interface); `from_raw` moves it out and leaves a released (empty) stream
    // behind, so the capsule's destructor does not release it a second time.
    let stream = unsafe { FFI_ArrowArrayStream::from_raw(pointer.as_ptr().cast()) };
    ArrowArrayStreamReader::try_new(stream).map_err(|e| Error::new_err(e.to_string()))
}

/// Wraps an `Arc<T>` UDF for the FFI: the capsule datafusion-python's `udf()`/`udaf()` take.
fn ffi_capsules<'py, U, F>(
    py: Python<'py>,
    functions: Vec<Arc<U>>,
    name: &'static std::ffi::CStr,
    to_ffi: impl Fn(Arc<U>) -> F,
) -> PyResult<Vec<(String, Bound<'py, PyCapsule>)>>
where
    F: Send + 'static,
    U: Named,
{
    functions
        .into_iter()
        .map(|f| {
            let fname = f.function_name().to_string();
            Ok((fname, PyCapsule::new_with_value(py, to_ffi(f), name)?))
        })
        .collect()
}

trait Named {
    fn function_name(&self) -> &str;
}
impl Named for datafusion::logical_expr::ScalarUDF {
    fn function_name(&self) -> &str {
        self.name()
    }
}
impl Named for datafusion::logical_expr::AggregateUDF {
    fn function_name(&self) -> &str {
        self.name()
    }
}

/// `(name, capsule)` for every calibsql scalar function, as `FFI_ScalarUDF`s.
#[pyfunction]
fn ffi_scalar_udfs(py: Python<'_>) -> PyResult<Vec<(String, Bound<'_, PyCapsule>)>> {
    ffi_capsules(
        py,
        calibsql_udfs::all_scalar_functions(),
        c"datafusion_scalar_udf",
        FFI_ScalarUDF::from,
    )
}

/// `(name, capsule)` for every calibsql aggregate function, as `FFI_AggregateUDF`s.
#[pyfunction]
fn ffi_aggregate_udfs(py: Python<'_>) -> PyResult<Vec<(String, Bound<'_, PyCapsule>)>> {
    ffi_capsules(
        py,
        calibsql_udfs::all_aggregate_functions(),
        c"datafusion_aggregate_udf",
        FFI_AggregateUDF::from,
    )
}

#[pymodule]
fn _calibsql(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("Error", m.py().get_type::<Error>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("DATAFUSION_VERSION", DATAFUSION_VERSION)?;
    m.add("FFI_MAJOR_VERSION", datafusion_ffi::version())?;
    m.add_class::<Connection>()?;
    m.add_class::<QueryResult>()?;
    m.add_class::<Report>()?;
    m.add_function(wrap_pyfunction!(ffi_scalar_udfs, m)?)?;
    m.add_function(wrap_pyfunction!(ffi_aggregate_udfs, m)?)?;
    Ok(())
}
