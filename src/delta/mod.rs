//! Delta Lake tables: read (with deletes, partitions and schema changes honoured), time travel,
//! and appends that are one Delta commit each.
//!
//! delta-rs (`deltalake`) does the Delta work: it reads the transaction log, skips files by the
//! log's statistics and partition values, and commits with the log's optimistic concurrency. It
//! is built on the same DataFusion, arrow, parquet and object_store as calibsql, and it reads
//! through calibsql's own object stores (the session's registry: local files, `s3://` with the
//! `--s3-*` settings and `OPTIONS ('aws.…')`, Azure and Google Cloud Storage), so a Delta table
//! in a bucket is read with exactly the credentials a Parquet table there would be.
//!
//! Where Delta tables come in:
//! - [`crate::tables::register_table`] (`--table NAME=PATH`, `calibsql.connect(tables=…)`,
//!   `calibsql serve --table`) opens PATH as a Delta table when it holds `_delta_log/`
//!   ([`holds_delta_log`]);
//! - `delta_scan('PATH' [, version => N | timestamp => 'RFC 3339'])` in FROM, and a Delta
//!   table's path in FROM (`SELECT … FROM 'logs/events'`, [`with_url_tables`]) (`sql`);
//! - `CREATE EXTERNAL TABLE name [(columns)] STORED AS DELTA LOCATION 'PATH'` (`sql`), which
//!   opens a table or creates an empty one, and then `INSERT INTO` / `INSERT OVERWRITE` it;
//! - `COPY (query) TO 'PATH' STORED AS DELTA` (`copy`), which appends a query's rows, creating
//!   the table from its columns if need be.
//!
//! The parts: `provider` (the table a session sees: it follows the latest version, or stays
//! on one), `sql` (`delta_scan`, `STORED AS DELTA`, creating a table), `copy` (`COPY … STORED
//! AS DELTA`); opening a table and explaining what went wrong is here.

mod copy;
mod provider;
mod sql;

pub use provider::DeltaTableProvider;
pub use sql::{
    name_delta_scan_arguments, with_url_tables, DeltaOrFileUrlTables, ReadableLocations,
};

use std::path::Path;
use std::sync::{Arc, Once};

use datafusion::arrow::compute::kernels::cast_utils::string_to_timestamp_nanos;
use datafusion::arrow::temporal_conversions::timestamp_ms_to_datetime;
use datafusion::catalog::Session;
use datafusion::common::{plan_datafusion_err, DataFusionError, Result};
use datafusion::execution::object_store::ObjectStoreUrl;
use datafusion::prelude::SessionContext;
use deltalake::logstore::{default_logstore, logstore_factories, LogStoreFactory, StorageConfig};
use deltalake::{DeltaTable, DeltaTableBuilder, DeltaTableError, ObjectStore};
use futures::StreamExt;
use url::Url;

/// Which version of a Delta table to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum At {
    /// The latest version, found again for every statement.
    Latest,
    /// This version (`delta_scan(…, version => N)`).
    Version(u64),
    /// The latest version committed at or before this RFC 3339 time
    /// (`delta_scan(…, timestamp => '2026-11-01T00:00:00Z')`).
    Timestamp(String),
}

impl std::fmt::Display for At {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            At::Latest => f.write_str("latest version"),
            At::Version(v) => write!(f, "version {v}"),
            At::Timestamp(t) => write!(f, "timestamp {t}"),
        }
    }
}

/// Gives `ctx` Delta tables: `delta_scan`, `CREATE EXTERNAL TABLE … STORED AS DELTA` and
/// `COPY … TO … STORED AS DELTA`. ([`crate::tables::register_table`] opens Delta tables by
/// itself.)
pub fn register_delta(ctx: &SessionContext) {
    ctx.register_udtf("delta_scan", Arc::new(sql::DeltaScanFunction));
    let state = ctx.state_ref();
    let mut state = state.write();
    state
        .table_factories_mut()
        .insert("DELTA".to_string(), Arc::new(sql::DeltaTableFactory));
    // Fails only for a format already registered under the name when told not to replace it.
    let _ = state.register_file_format(Arc::new(copy::DeltaFormatFactory), true);
}

/// The object store schemes a Delta table can live under (besides local paths): those whose
/// stores can list and put-if-absent, which the log needs. HTTP cannot.
const DELTA_SCHEMES: [&str; 7] = ["s3", "s3a", "az", "azure", "abfs", "abfss", "gs"];

/// delta-rs commits through a "log store" chosen by URL scheme; it knows `file://` and
/// `memory://` by itself. Tables under [`DELTA_SCHEMES`] use the default log store too, over
/// calibsql's stores: it commits with a conditional put (`If-None-Match: *` on S3, its
/// equivalents on Azure and GCS), which these stores honour, so two writers never both win a
/// version.
fn register_log_stores() {
    static REGISTERED: Once = Once::new();
    REGISTERED.call_once(|| {
        #[derive(Debug)]
        struct Default;
        impl LogStoreFactory for Default {
            fn with_options(
                &self,
                prefixed_store: deltalake::logstore::ObjectStoreRef,
                root_store: deltalake::logstore::ObjectStoreRef,
                location: &Url,
                options: &StorageConfig,
            ) -> deltalake::DeltaResult<Arc<dyn deltalake::logstore::LogStore>> {
                Ok(default_logstore(
                    prefixed_store,
                    root_store,
                    location,
                    options,
                ))
            }
        }
        for scheme in DELTA_SCHEMES {
            if let Ok(scheme) = Url::parse(&format!("{scheme}://")) {
                logstore_factories()
                    .entry(scheme)
                    .or_insert_with(|| Arc::new(Default));
            }
        }
    });
}

/// Refuses a write that could lose a commit: on S3, each commit claims its version with a
/// conditional put (`If-None-Match: *`); with conditional puts turned off
/// (`AWS_CONDITIONAL_PUT=disabled`) two writers could both write one version, and one of their
/// commits would be lost.
pub(crate) fn check_safe_commits(location: &str) -> Result<()> {
    let disabled = std::env::var("AWS_CONDITIONAL_PUT")
        .is_ok_and(|value| value.trim().eq_ignore_ascii_case("disabled"));
    if location.starts_with("s3://") && disabled {
        return Err(plan_datafusion_err!(
            "Delta table {location}: writing needs S3 conditional puts (If-None-Match), so that \
             two writers cannot both commit the same version, and AWS_CONDITIONAL_PUT=disabled \
             turns them off; unset it (Amazon S3, MinIO, R2 and Ceph RGW support them)"
        ));
    }
    Ok(())
}

/// The URL of the table at `location` (a local path, `file://`, or an object store URL of
/// [`DELTA_SCHEMES`]), without a trailing slash, as delta-rs keys tables.
fn table_url(location: &str) -> Result<Url> {
    let location = crate::stores::canonical_location(location);
    let location = location.as_ref();
    let url = match location.split_once("://") {
        Some(("file", _)) | None => {
            let path = match location.strip_prefix("file://") {
                Some(_) => Url::parse(location)
                    .ok()
                    .and_then(|url| url.to_file_path().ok())
                    .ok_or_else(|| plan_datafusion_err!("invalid file URL {location}"))?,
                None => std::path::PathBuf::from(location),
            };
            let absolute = std::path::absolute(&path)
                .map_err(|e| plan_datafusion_err!("cannot resolve {location}: {e}"))?;
            // Symbolic links resolved when the directory exists (a table being created may not).
            let absolute = absolute.canonicalize().unwrap_or(absolute);
            Url::from_directory_path(&absolute)
                .map_err(|()| plan_datafusion_err!("cannot turn {location} into a URL"))?
        }
        Some((scheme, _)) if DELTA_SCHEMES.contains(&scheme) => {
            Url::parse(location).map_err(|e| plan_datafusion_err!("invalid URL {location}: {e}"))?
        }
        Some((scheme, _)) => {
            return Err(plan_datafusion_err!(
                "Delta table {location}: '{scheme}://' locations are not supported (local \
                 paths, file://, s3://, az://, abfss:// and gs:// are)"
            ))
        }
    };
    let mut url = url;
    let trimmed = url.path().trim_end_matches('/').to_string();
    url.set_path(&trimmed);
    Ok(url)
}

/// The session's object store for `url` (the store of its scheme and bucket).
fn store_for(session: &dyn Session, url: &Url) -> Result<Arc<dyn ObjectStore>> {
    let root = ObjectStoreUrl::parse(&url[..url::Position::BeforePath])?;
    session.runtime_env().object_store(root)
}

/// Whether `location` holds a Delta table, i.e. a `_delta_log/` directory (local) or keys
/// under `_delta_log/` (object stores).
pub async fn holds_delta_log(session: &dyn Session, location: &str) -> Result<bool> {
    match location.split_once("://") {
        None => Ok(Path::new(location).join("_delta_log").is_dir()),
        Some(("file", _)) => Ok(Url::parse(location)
            .ok()
            .and_then(|url| url.to_file_path().ok())
            .is_some_and(|path| path.join("_delta_log").is_dir())),
        Some((scheme, _)) if DELTA_SCHEMES.contains(&scheme) => {
            // A glob is never a table root.
            if location.contains(['*', '?', '[']) {
                return Ok(false);
            }
            let url = table_url(location)?;
            let store = store_for(session, &url)?;
            let prefix = object_store::path::Path::from(format!(
                "{}/_delta_log/",
                url.path().trim_matches('/')
            ));
            match store.list(Some(&prefix)).next().await {
                Some(Ok(_)) => Ok(true),
                None => Ok(false),
                Some(Err(e)) => Err(crate::stores::failure(location, e)),
            }
        }
        Some(_) => Ok(false),
    }
}

/// Opens the Delta table at `location` at version `at`, reading it through the session's
/// object stores. Errors name the location and say what is wrong.
pub async fn open(session: &dyn Session, location: &str, at: &At) -> Result<DeltaTable> {
    register_log_stores();
    let url = table_url(location)?;
    let store = store_for(session, &url)?;
    let builder = DeltaTableBuilder::from_url(url.clone())
        .map_err(|e| explain(location, e))?
        .with_storage_backend(store, url);
    let builder = match at {
        At::Latest => builder,
        At::Version(version) => builder.with_version(*version),
        At::Timestamp(timestamp) => builder.with_datestring(timestamp).map_err(|_| {
            plan_datafusion_err!(
                "delta_scan: timestamp '{timestamp}' is not an RFC 3339 time \
                 (such as '2026-11-01T00:00:00Z')"
            )
        })?,
    };
    let table = match builder.load().await {
        Ok(table) => table,
        Err(error) => {
            // delta-rs says a version past the latest in several ways (an invalid version, a
            // log segment that ends early); the latest version says it plainly.
            if let At::Version(version) = at {
                if let Ok(latest) = latest_version(session, location).await {
                    if *version > latest {
                        return Err(plan_datafusion_err!(
                            "Delta table {location} has no version {version} (its latest is \
                             {latest})"
                        ));
                    }
                }
            }
            return Err(explain(location, error));
        }
    };
    if let At::Timestamp(timestamp) = at {
        // delta-rs answers a time before the first commit with the first version; a reader
        // asking for the table as it was then should hear that it did not exist.
        let state = table.snapshot().map_err(|e| explain(location, e))?;
        let committed = state.version_timestamp(state.version());
        let asked = string_to_timestamp_nanos(timestamp)
            .ok()
            .map(|nanos| nanos.div_euclid(1_000_000));
        if let (Some(committed), Some(asked)) = (committed, asked) {
            if committed > asked {
                let first = timestamp_ms_to_datetime(committed)
                    .map(|t| format!("{}Z", t.format("%Y-%m-%dT%H:%M:%S%.3f")))
                    .unwrap_or_else(|| committed.to_string());
                return Err(plan_datafusion_err!(
                    "Delta table {location} has no version as old as {timestamp}: its oldest \
                     (version {}) was committed at {first}",
                    state.version()
                ));
            }
        }
    }
    Ok(table)
}

/// The latest version of the table at `location`.
async fn latest_version(session: &dyn Session, location: &str) -> Result<u64> {
    let table = Box::pin(open(session, location, &At::Latest)).await?;
    table
        .version()
        .ok_or_else(|| plan_datafusion_err!("Delta table {location} has no version"))
}

/// A delta-rs error as one line that names the table: what is wrong, without the backtraces
/// and debug dumps some of its errors carry.
pub(crate) fn explain(location: &str, error: impl Into<DeltaTableError>) -> DataFusionError {
    let error = error.into();
    let message = match &error {
        DeltaTableError::NotATable(_) | DeltaTableError::InvalidTableLocation(_) => {
            format!("{location} is not a Delta table (it has no _delta_log/)")
        }
        DeltaTableError::InvalidJsonLog { .. } => {
            format!(
                "the Delta log of {location} is corrupt: {}",
                first_line(&error)
            )
        }
        other => format!("Delta table {location}: {}", first_line(other)),
    };
    DataFusionError::Plan(message)
}

/// The first line of an error and its sources, without a backtrace.
fn first_line(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(inner) = source {
        let more = inner.to_string();
        if !text.contains(&more) {
            text = format!("{text}: {more}");
        }
        source = inner.source();
    }
    let text = text.split("\nBacktrace").next().unwrap_or(&text);
    let text = text.split("\n\nStack backtrace").next().unwrap_or(text);
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}
