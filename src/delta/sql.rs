//! Delta tables named in SQL: `delta_scan(…)` in FROM and `CREATE EXTERNAL TABLE … STORED AS
//! DELTA`.

use std::future::Future;
use std::ops::ControlFlow;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::DataType;
use datafusion::catalog::{
    DynamicFileCatalog, Session, TableFunctionArgs, TableFunctionImpl, TableProvider,
    TableProviderFactory, UrlTableFactory,
};
use datafusion::common::{plan_datafusion_err, plan_err, DataFusionError, Result, ScalarValue};
use datafusion::datasource::dynamic_file::DynamicListTableFactory;
use datafusion::execution::session_state::{SessionState, SessionStateBuilder};
use datafusion::logical_expr::{CreateExternalTable, Expr};
use datafusion::prelude::SessionContext;
use datafusion::sql::parser::Statement;
use datafusion::sql::sqlparser::ast::{Expr as SqlExpr, FunctionArg, TableFactor, VisitorMut};
use deltalake::kernel::engine::arrow_conversion::TryIntoKernel;
use deltalake::kernel::StructType;
use deltalake::DeltaTableBuilder;

use super::{explain, holds_delta_log, store_for, table_url, At, DeltaTableProvider};

/// Who may be read: a session whose clients must not read any path they name (the server)
/// sets this extension, and `delta_scan` asks it before reading anything at a location.
#[derive(Clone)]
pub struct ReadableLocations(pub Arc<LocationCheck>);

/// Refuses reading a location, with the reason.
pub type LocationCheck = dyn Fn(&str) -> Result<()> + Send + Sync;

impl std::fmt::Debug for ReadableLocations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ReadableLocations")
    }
}

/// `delta_scan('PATH' [, version => N | timestamp => 'RFC 3339'])`: the Delta table at PATH,
/// at its latest version or the one asked for. The second argument may also be given without
/// its name: an integer is a version, a string a timestamp.
#[derive(Debug)]
pub(super) struct DeltaScanFunction;

impl TableFunctionImpl for DeltaScanFunction {
    fn call_with_args(&self, args: TableFunctionArgs) -> Result<Arc<dyn TableProvider>> {
        let (location, at) = scan_arguments(args.exprs())?;
        let session = args.session();
        if let Some(guard) = session.config().get_extension::<ReadableLocations>() {
            (guard.0)(&location)?;
        }
        // Table functions are planned synchronously; opening a table reads its log.
        let provider = wait_for(DeltaTableProvider::open(session, &location, at))?;
        Ok(Arc::new(provider))
    }
}

fn scan_arguments(exprs: &[Expr]) -> Result<(String, At)> {
    let literal = |expr: &Expr| match expr {
        Expr::Literal(value, _) => Some(value.clone()),
        _ => None,
    };
    let location = match exprs.first().and_then(literal) {
        Some(ScalarValue::Utf8(Some(path)))
        | Some(ScalarValue::LargeUtf8(Some(path)))
        | Some(ScalarValue::Utf8View(Some(path))) => path,
        Some(_) | None => {
            return plan_err!(
                "delta_scan: the first argument must be the table's location as a string \
                 literal, as in delta_scan('logs/events')"
            )
        }
    };
    let at = match exprs.get(1) {
        None => At::Latest,
        Some(expr) => match literal(expr) {
            // A NULL version (an unset parameter, say) is refused rather than read as "the
            // latest": a time-travel query answering for another version would be silently
            // wrong.
            Some(value) if value.is_null() => {
                return plan_err!(
                    "delta_scan: version or timestamp is NULL; give a version number or a \
                     timestamp, or leave the argument out to read the latest version"
                )
            }
            Some(
                ScalarValue::Utf8(Some(t))
                | ScalarValue::LargeUtf8(Some(t))
                | ScalarValue::Utf8View(Some(t)),
            ) => At::Timestamp(t),
            Some(value) => match value.cast_to(&DataType::Int64) {
                Ok(ScalarValue::Int64(Some(v))) if v >= 0 && value.data_type().is_integer() => {
                    At::Version(v as u64)
                }
                _ => {
                    return plan_err!(
                        "delta_scan: version must be a version number (0, 1, …) and timestamp \
                         a string such as '2026-11-01T00:00:00Z', got {expr}"
                    )
                }
            },
            None => {
                return plan_err!("delta_scan: version or timestamp must be a literal, got {expr}")
            }
        },
    };
    if exprs.len() > 2 {
        return plan_err!(
            "delta_scan takes a location and at most one of version => N or timestamp => '…', \
             got {} arguments",
            exprs.len()
        );
    }
    Ok((location, at))
}

/// Runs `future` to its end from synchronous code inside the runtime (a worker thread of a
/// multi-threaded runtime is handed over for the wait), or on a thread of its own elsewhere.
fn wait_for<T, F>(future: F) -> Result<T>
where
    F: Future<Output = Result<T>> + Send,
    T: Send,
{
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(|| handle.block_on(future))
        }
        _ => std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .map_err(|e| {
                            plan_datafusion_err!(
                                "cannot start a runtime to open a Delta table: {e}"
                            )
                        })?
                        .block_on(future)
                })
                .join()
                .unwrap_or_else(|_| {
                    Err(plan_datafusion_err!(
                        "opening a Delta table failed unexpectedly (its thread panicked)"
                    ))
                })
        }),
    }
}

/// DataFusion 55 takes no named arguments in a table function's call, so `delta_scan`'s
/// `version => N` and `timestamp => '…'` become its second positional argument before planning.
/// Unknown names, or both names at once, are refused here.
pub fn name_delta_scan_arguments(statement: &mut Statement) -> Result<()> {
    let mut visitor = DeltaScanArguments(None);
    let _ = crate::table_calls::visit_queries(statement, &mut visitor);
    visitor.0.map_or(Ok(()), Err)
}

struct DeltaScanArguments(Option<DataFusionError>);

impl VisitorMut for DeltaScanArguments {
    type Break = ();

    fn pre_visit_table_factor(&mut self, factor: &mut TableFactor) -> ControlFlow<()> {
        let TableFactor::Table {
            name,
            args: Some(args),
            ..
        } = factor
        else {
            return ControlFlow::Continue(());
        };
        let is_delta_scan = name.0.len() == 1
            && name.0[0]
                .as_ident()
                .is_some_and(|ident| ident.value.eq_ignore_ascii_case("delta_scan"));
        if !is_delta_scan {
            return ControlFlow::Continue(());
        }
        let mut named = Vec::new();
        for arg in args.args.iter_mut() {
            // `name => value`; the Postgres dialect (the server's) parses the name as an
            // expression.
            let (name, value) = match arg {
                FunctionArg::Named { name, arg, .. } => (name.clone(), arg.clone()),
                FunctionArg::ExprNamed {
                    name: SqlExpr::Identifier(name),
                    arg,
                    ..
                } => (name.clone(), arg.clone()),
                _ => continue,
            };
            {
                let key = name.value.to_ascii_lowercase();
                if key != "version" && key != "timestamp" {
                    self.0 = Some(plan_datafusion_err!(
                        "delta_scan has no argument named {} (it takes version => N or \
                         timestamp => '…')",
                        name.value
                    ));
                    return ControlFlow::Break(());
                }
                named.push(key);
                *arg = FunctionArg::Unnamed(value);
            }
        }
        if named.len() > 1 {
            self.0 = Some(plan_datafusion_err!(
                "delta_scan takes version => N or timestamp => '…', not both"
            ));
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    }
}

/// `CREATE EXTERNAL TABLE name [(columns)] STORED AS DELTA LOCATION 'PATH'
/// [PARTITIONED BY (columns)]`: opens the Delta table at PATH, or, given columns and no table
/// there, creates an empty one.
#[derive(Debug)]
pub(super) struct DeltaTableFactory;

#[async_trait]
impl TableProviderFactory for DeltaTableFactory {
    async fn create(
        &self,
        session: &dyn Session,
        cmd: &CreateExternalTable,
    ) -> Result<Arc<dyn TableProvider>> {
        let [location] = cmd.locations.as_slice() else {
            return plan_err!(
                "CREATE EXTERNAL TABLE {} STORED AS DELTA takes one location, got {}",
                cmd.name,
                cmd.locations.len()
            );
        };
        let given: Vec<_> = cmd.schema.fields().iter().cloned().collect();
        if holds_delta_log(session, location).await? {
            let provider = DeltaTableProvider::open(session, location, At::Latest).await?;
            if !given.is_empty() {
                let schema = provider.schema();
                let same = schema.fields().len() == given.len()
                    && given.iter().all(|field| {
                        schema
                            .field_with_name(field.name())
                            .is_ok_and(|f| stored_as(f.data_type()) == stored_as(field.data_type()))
                    });
                if !same {
                    return plan_err!(
                        "CREATE EXTERNAL TABLE {}: the Delta table at {location} has the columns \
                         ({}), not the ones given; leave the columns out to open it as it is",
                        cmd.name,
                        describe(&schema)
                    );
                }
            }
            return Ok(Arc::new(provider));
        }
        if given.is_empty() {
            return plan_err!(
                "CREATE EXTERNAL TABLE {}: there is no Delta table at {location} (no \
                 _delta_log/); to create one, give its columns: CREATE EXTERNAL TABLE {} \
                 (column TYPE, …) STORED AS DELTA LOCATION '{location}'",
                cmd.name,
                cmd.name
            );
        }
        create_table(
            session,
            location,
            &format!("CREATE EXTERNAL TABLE {}", cmd.name),
            cmd.name.table(),
            cmd.schema.as_arrow(),
            &cmd.table_partition_cols,
        )
        .await?;
        Ok(Arc::new(
            DeltaTableProvider::open(session, location, At::Latest).await?,
        ))
    }
}

/// Creates an empty Delta table named `name` with `columns` (partitioned by
/// `partition_columns`) at `location`, where there is no table and no other file. `what` is
/// the statement, for messages.
pub(super) async fn create_table(
    session: &dyn Session,
    location: &str,
    what: &str,
    name: &str,
    columns: &datafusion::arrow::datatypes::Schema,
    partition_columns: &[String],
) -> Result<()> {
    super::check_safe_commits(location)?;
    refuse_other_files(session, location).await?;
    for column in partition_columns {
        if columns.field_with_name(column).is_err() {
            return plan_err!("{what}: partition column {column} is not among the columns");
        }
    }
    let kernel: StructType = columns
        .try_into_kernel()
        .map_err(|e| plan_datafusion_err!("{what}: a column type Delta cannot store: {e}"))?;
    super::register_log_stores();
    let url = table_url(location)?;
    let store = store_for(session, &url)?;
    let table = DeltaTableBuilder::from_url(url.clone())
        .map_err(|e| explain(location, e))?
        .with_storage_backend(store, url)
        .build()
        .map_err(|e| explain(location, e))?;
    table
        .create()
        .with_table_name(name)
        .with_columns(kernel.fields().cloned())
        .with_partition_columns(partition_columns.to_vec())
        .await
        .map_err(|e| explain(location, e))?;
    Ok(())
}

/// A new Delta table is not created over files that are there already: they would be neither
/// part of it nor visible.
async fn refuse_other_files(session: &dyn Session, location: &str) -> Result<()> {
    let url = table_url(location)?;
    let occupied = if url.scheme() == "file" {
        let path = url
            .to_file_path()
            .map_err(|()| plan_datafusion_err!("invalid location {location}"))?;
        std::fs::read_dir(&path).is_ok_and(|mut entries| entries.next().is_some())
    } else {
        use futures::StreamExt;
        let store = store_for(session, &url)?;
        let prefix = object_store::path::Path::from(format!("{}/", url.path().trim_matches('/')));
        store.list(Some(&prefix)).next().await.is_some()
    };
    if occupied {
        return plan_err!(
            "{location} holds files but no Delta table (no _delta_log/); a new Delta table \
             needs an empty or new location"
        );
    }
    Ok(())
}

/// A column type as a Delta table stores it: text and lists however they are encoded, a
/// partition column's dictionary as its values.
fn stored_as(t: &DataType) -> DataType {
    match t {
        DataType::Dictionary(_, values) => stored_as(values),
        other => super::provider::nested_as_calibsql_reads(other),
    }
}

fn describe(schema: &datafusion::arrow::datatypes::Schema) -> String {
    let columns: Vec<String> = schema
        .fields()
        .iter()
        .map(|f| format!("{} {}", f.name(), stored_as(f.data_type())))
        .collect();
    columns.join(", ")
}

/// A path in `FROM` (`SELECT … FROM 'logs/events'`): a Delta table when it holds
/// `_delta_log/`, read through its log; any other path as DataFusion's URL tables read it.
#[derive(Debug)]
pub struct DeltaOrFileUrlTables {
    files: Arc<DynamicListTableFactory>,
}

#[async_trait]
impl UrlTableFactory for DeltaOrFileUrlTables {
    async fn try_new(&self, url: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        let state = self
            .files
            .session_store()
            .get_session()
            .upgrade()
            .and_then(|session| {
                session
                    .read()
                    .as_any()
                    .downcast_ref::<SessionState>()
                    .cloned()
            });
        if let Some(state) = state {
            // A name that is no table and no directory with a log is left to the files' factory
            // (which leaves it to "table not found").
            if holds_delta_log(&state, url).await.unwrap_or(false) {
                let table = DeltaTableProvider::open(&state, url, At::Latest).await?;
                return Ok(Some(Arc::new(table)));
            }
        }
        self.files.try_new(url).await
    }
}

/// `ctx` with paths in `FROM` read as tables ([`SessionContext::enable_url_table`]), Delta
/// tables through their log. `wrap` sees the URL table factory first (the server checks its
/// paths there).
pub fn with_url_tables(
    ctx: SessionContext,
    wrap: impl FnOnce(Arc<dyn UrlTableFactory>) -> Arc<dyn UrlTableFactory>,
) -> SessionContext {
    let files = Arc::new(DynamicListTableFactory::new(Default::default()));
    let tables = wrap(Arc::new(DeltaOrFileUrlTables {
        files: Arc::clone(&files),
    }));
    let catalogs = Arc::new(DynamicFileCatalog::new(
        Arc::clone(ctx.state().catalog_list()),
        tables,
    ));
    let state = SessionStateBuilder::new_from_existing(ctx.state())
        .with_catalog_list(catalogs)
        .build();
    let ctx = SessionContext::new_with_state(state);
    files.session_store().with_state(ctx.state_weak_ref());
    ctx
}
