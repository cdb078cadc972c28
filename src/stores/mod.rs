//! Object store locations: Amazon S3 and S3-compatible stores (`s3://bucket/key`), Azure Blob
//! Storage and ADLS Gen2 (`az://container/path`, `abfss://container@account.dfs.core.windows.net/path`,
//! `https://account.blob.core.windows.net/container/path`), Google Cloud Storage
//! (`gs://bucket/path`) and read-only HTTP(S) files (`https://host/path/file.parquet`).
//!
//! [`register_object_stores`] gives a session an object store registry that builds a store the
//! first time a statement or table names a bucket, container or host, in the process that
//! reads it (credentials never travel in a plan). S3 settings come in four layers, later ones
//! winning:
//!
//! 1. the AWS shared config file of the profile (`region`, `endpoint_url`; `AWS_PROFILE`),
//! 2. the standard AWS environment (`AWS_ACCESS_KEY_ID`, `AWS_REGION`, `AWS_ENDPOINT_URL`,
//!    `AWS_ALLOW_HTTP`, …, read by object_store's `AmazonS3Builder::from_env`, plus
//!    `AWS_MAX_ATTEMPTS`),
//! 3. the [`S3Options`] given to [`register_object_stores`] (the CLI's `--s3-*` flags),
//! 4. `CREATE EXTERNAL TABLE … LOCATION 's3://…' OPTIONS ('aws.endpoint' '…', …)`: as in
//!    datafusion-cli, they configure that table's bucket for the rest of the session.
//!
//! S3 credentials are the keys of layers 2–4 when given, else the AWS SDK's credential chain
//! (`aws_chain`). Azure and Google Cloud Storage take the settings object_store reads from the
//! environment (`AZURE_*`, `GOOGLE_*`); HTTP needs none.
//!
//! Every request has a timeout and a bounded number of retries. Failures become one-line
//! [`StoreError`]s that say what is wrong and what to change (unreachable endpoint, rejected
//! credentials and where they came from, missing bucket or object). Secrets appear in no
//! `Debug` output and no error.
//!
//! The parts: `options` (S3 settings, their parsing, request timeouts, the error type),
//! `explained` (the store wrapper whose errors say what to change), one module per service
//! (`s3` with `aws_chain`, `azure`, `gcs`, `http`), `listing` (what a table location names: an
//! object, a prefix or a glob over keys), `table` (`CREATE EXTERNAL TABLE … OPTIONS ('aws.…')`);
//! the registry that builds stores per bucket is here.

mod aws_chain;
mod azure;
mod explained;
mod gcs;
mod http;
mod listing;
mod options;
mod s3;
mod table;

pub(crate) use listing::{list_location, StoreListing};

pub use options::{
    find_error, parse_seconds, S3Options, StoreError, DEFAULT_RETRIES, DEFAULT_TIMEOUT,
    TABLE_OPTION_KEYS,
};
pub use s3::build_store;

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, RwLock};

use datafusion::common::{plan_datafusion_err, plan_err, DataFusionError, Result};
use datafusion::execution::object_store::ObjectStoreRegistry;
use datafusion::execution::runtime_env::{RuntimeEnv, RuntimeEnvBuilder};
use datafusion::execution::SessionStateBuilder;
use datafusion::prelude::SessionContext;
use object_store::ObjectStore;
use url::Url;

use table::StoreTableFactory;

/// Gives `ctx` object store support: `s3://`, `az://`, `abfss://`, `gs://` and `http(s)://`
/// locations in [`crate::tables::register_table`], `CREATE EXTERNAL TABLE` (with
/// `OPTIONS ('aws.…' …)` for S3), `COPY … TO` and `SELECT … FROM 'url'`, with `options` over
/// the AWS environment for S3.
///
/// Stores are built when a bucket is first used, so this reads no credentials and makes no
/// request. Calling it again replaces the options (stores built so far are dropped, stores
/// registered with `ctx.register_object_store` are kept). [`crate::new_context`] calls it with
/// [`S3Options::default`], i.e. the AWS environment and shared files alone.
pub fn register_object_stores(ctx: &SessionContext, options: S3Options) -> Result<()> {
    let state_ref = ctx.state_ref();
    let mut state = state_ref.write();
    if let Some(registry) = state.config().get_extension::<StoreRegistry>() {
        registry.set_options(options);
        return Ok(());
    }
    let (runtime, registry) = with_store_registry(state.runtime_env(), options)?;
    let mut new_state = SessionStateBuilder::new_from_existing(state.clone())
        .with_runtime_env(runtime)
        .build();
    new_state.config_mut().set_extension(Arc::clone(&registry));
    for factory in new_state.table_factories_mut().values_mut() {
        *factory = Arc::new(StoreTableFactory {
            inner: Arc::clone(factory),
            registry: Arc::clone(&registry),
        });
    }
    *state = new_state;
    Ok(())
}

/// A copy of `runtime` that reads object store locations with `options` over the AWS
/// environment for S3: what [`register_object_stores`] gives a session, for processes that
/// build runtimes themselves (the executors of a cluster, see `crate::distributed`).
pub fn runtime_with_object_stores(
    runtime: &Arc<RuntimeEnv>,
    options: S3Options,
) -> Result<Arc<RuntimeEnv>> {
    Ok(with_store_registry(runtime, options)?.0)
}

fn with_store_registry(
    runtime: &Arc<RuntimeEnv>,
    options: S3Options,
) -> Result<(Arc<RuntimeEnv>, Arc<StoreRegistry>)> {
    // The object store registry is fixed when a runtime is built, so this is a copy of the
    // runtime (same memory pool, disk manager and caches) whose registry knows the cloud
    // schemes and hands every other URL to the previous registry.
    let registry = Arc::new(StoreRegistry::new(
        Arc::clone(&runtime.object_store_registry),
        options,
    ));
    let runtime = RuntimeEnvBuilder::from_runtime_env(runtime)
        .with_object_store_registry(Arc::clone(&registry) as Arc<dyn ObjectStoreRegistry>)
        .build_arc()?;
    Ok((runtime, registry))
}

/// Marks a session whose tables are read by other processes (the executors of a cluster):
/// `CREATE EXTERNAL TABLE … OPTIONS ('aws.…')` is refused there, since those options would
/// configure this process's S3 access only, and the executors would read the table with their
/// own settings.
#[derive(Debug, Clone)]
pub struct TablesReadElsewhere {
    /// What reads the tables, and where their S3 settings are set instead (for the error).
    pub remedy: String,
}

/// The scheme and authority of an object store location (`s3://bucket`, `az://container`,
/// `abfss://container@account.dfs.core.windows.net`, `https://host:port`), the key its store
/// is registered under, or `None` for a location no cloud store reads (local paths, `file://`).
pub(crate) fn store_root(url: &Url) -> Option<String> {
    let cloud = matches!(
        url.scheme(),
        "s3" | "s3a" | "az" | "azure" | "abfs" | "abfss" | "adl" | "gs" | "http" | "https"
    );
    (cloud && url.has_host()).then(|| url[..url::Position::BeforePath].to_string())
}

/// `location` in the form calibsql's stores read: `https://account.blob.core.windows.net/container/path`
/// becomes `abfss://container@account.dfs.core.windows.net/path` (one store per container);
/// every other location is returned as it is.
pub fn canonical_location(location: &str) -> std::borrow::Cow<'_, str> {
    match azure::as_abfss(location) {
        Some(abfss) => abfss.into(),
        None => location.into(),
    }
}

/// An object store error while reading `location` (listing it, looking for a Delta log), as
/// one line: the store's explanation when
/// there is one.
pub(crate) fn failure(location: &str, error: object_store::Error) -> DataFusionError {
    if let Some(explained) = find_error(&error) {
        return DataFusionError::Execution(explained.to_string());
    }
    if location.starts_with("http://") || location.starts_with("https://") {
        // The server's answer, without the error page it came with.
        let text = error.to_string();
        let answer = text
            .split_once("status code: ")
            .map(|(_, rest)| rest.split(':').next().unwrap_or(rest).trim().to_string())
            .unwrap_or(text);
        return DataFusionError::Execution(format!(
            "cannot list {location}: an HTTP location is one file; a prefix or a glob can be \
             listed only where the server speaks WebDAV (it answered: {answer})"
        ));
    }
    DataFusionError::Execution(format!("cannot read {location}: {error}"))
}

/// The bucket of an `s3://` URL.
fn bucket_of(url: &Url) -> Result<&str> {
    match url.host_str() {
        Some(bucket) if !bucket.is_empty() => Ok(bucket),
        _ => plan_err!("{url} names no bucket; expected s3://bucket/key"),
    }
}

/// Builds the store of `url`'s bucket, container or host, or says why there is none.
fn build_for(url: &Url, root: &str, options: &S3Options) -> Result<Arc<dyn ObjectStore>> {
    let built = match url.scheme() {
        "s3" | "s3a" => build_store(bucket_of(url)?, options),
        "az" | "azure" | "abfs" | "abfss" | "adl" => azure::build_store(root),
        "gs" => gcs::build_store(url.host_str().unwrap_or_default()),
        "http" | "https" if azure::as_abfss(&format!("{root}/x/y")).is_some() => {
            return plan_err!(
                "{root}/…: write Azure locations as abfss://container@account.dfs.core.windows.net/path \
                 or az://container/path"
            )
        }
        _ => http::build_store(root),
    };
    built.map_err(|e| DataFusionError::External(Box::new(e)))
}

/// An object store registry that builds a cloud store per bucket, container or host on first
/// use and passes every other location (local files) to the registry it wraps.
struct StoreRegistry {
    inner: Arc<dyn ObjectStoreRegistry>,
    options: RwLock<S3Options>,
    /// Stores by root, and whether they were registered explicitly (kept when the options
    /// change) rather than built from the options.
    stores: RwLock<Stores>,
}

/// Stores by root (`s3://bucket`), with whether each was registered explicitly.
type Stores = HashMap<String, (Arc<dyn ObjectStore>, bool)>;

impl fmt::Debug for StoreRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let roots: Vec<String> = self
            .stores
            .read()
            .map(|stores| stores.keys().cloned().collect())
            .unwrap_or_default();
        f.debug_struct("StoreRegistry")
            .field("inner", &self.inner)
            .field("roots", &roots)
            .finish_non_exhaustive()
    }
}

impl StoreRegistry {
    fn new(inner: Arc<dyn ObjectStoreRegistry>, options: S3Options) -> StoreRegistry {
        StoreRegistry {
            inner,
            options: RwLock::new(options),
            stores: RwLock::new(HashMap::new()),
        }
    }

    fn options(&self) -> S3Options {
        self.options
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    fn set_options(&self, options: S3Options) {
        *self
            .options
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = options;
        self.stores
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .retain(|_, (_, explicit)| *explicit);
    }

    fn insert(
        &self,
        root: &str,
        store: Arc<dyn ObjectStore>,
        explicit: bool,
    ) -> Option<Arc<dyn ObjectStore>> {
        self.stores
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert(root.to_string(), (store, explicit))
            .map(|(store, _)| store)
    }
}

impl ObjectStoreRegistry for StoreRegistry {
    fn register_store(
        &self,
        url: &Url,
        store: Arc<dyn ObjectStore>,
    ) -> Option<Arc<dyn ObjectStore>> {
        match store_root(url) {
            Some(root) => self.insert(&root, store, true),
            None => self.inner.register_store(url, store),
        }
    }

    fn deregister_store(&self, url: &Url) -> Result<Arc<dyn ObjectStore>> {
        let Some(root) = store_root(url) else {
            return self.inner.deregister_store(url);
        };
        self.stores
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .remove(&root)
            .map(|(store, _)| store)
            .ok_or_else(|| plan_datafusion_err!("no object store is registered for {url}"))
    }

    fn get_store(&self, url: &Url) -> Result<Arc<dyn ObjectStore>> {
        let Some(root) = store_root(url) else {
            return self.inner.get_store(url);
        };
        if let Some((store, _)) = self
            .stores
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get(&root)
        {
            return Ok(Arc::clone(store));
        }
        let store = build_for(url, &root, &self.options())?;
        self.insert(&root, Arc::clone(&store), false);
        Ok(store)
    }
}
