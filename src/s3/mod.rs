//! `s3://bucket/key` locations: Amazon S3 and S3-compatible stores (MinIO, Ceph, R2, …).
//!
//! [`register_s3`] gives a session an object store registry that builds an S3 store the first
//! time a statement or table names a bucket. Its settings come in three layers, later ones
//! winning:
//!
//! 1. the standard AWS environment (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
//!    `AWS_SESSION_TOKEN`, `AWS_REGION`, `AWS_ENDPOINT_URL`, `AWS_ALLOW_HTTP`, …, read by
//!    object_store's `AmazonS3Builder::from_env`, plus `AWS_MAX_ATTEMPTS`),
//! 2. the [`S3Options`] given to [`register_s3`] (the CLI's `--s3-*` flags),
//! 3. `CREATE EXTERNAL TABLE … LOCATION 's3://…' OPTIONS ('aws.endpoint' '…', …)`: as in
//!    datafusion-cli, they configure that table's bucket for the rest of the session.
//!
//! Every request has a timeout and a bounded number of retries. Failures become one-line
//! [`S3Error`]s that say what is wrong and what to change (unreachable endpoint, rejected
//! credentials, missing bucket or object). Secrets appear in no `Debug` output and no error.
//!
//! The parts: `options` (the settings, their parsing and the error type), `store` (the
//! S3 store with explained errors), `listing` (what a table location names: an object, a
//! prefix or a glob over keys), `table` (`CREATE EXTERNAL TABLE … OPTIONS ('aws.…')`);
//! the registry that builds stores per bucket is here.

mod listing;
mod options;
mod store;
mod table;

pub(crate) use listing::{list_location, S3Listing};

pub use options::{
    find_error, parse_seconds, S3Error, S3Options, DEFAULT_RETRIES, DEFAULT_TIMEOUT,
    TABLE_OPTION_KEYS,
};
pub use store::build_store;

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

use table::S3TableFactory;

/// Gives `ctx` S3 support: `s3://` locations in [`crate::tables::register_table`],
/// `CREATE EXTERNAL TABLE` (with `OPTIONS ('aws.…' …)`), `COPY … TO 's3://…'` and
/// `SELECT … FROM 's3://…'`, with `options` over the AWS environment.
///
/// Stores are built when a bucket is first used, so this reads no credentials and makes no
/// request. Calling it again replaces the options (stores built so far are dropped, stores
/// registered with `ctx.register_object_store` are kept). [`crate::new_context`] calls it with
/// [`S3Options::default`], i.e. the AWS environment alone.
pub fn register_s3(ctx: &SessionContext, options: S3Options) -> Result<()> {
    let state_ref = ctx.state_ref();
    let mut state = state_ref.write();
    if let Some(registry) = state.config().get_extension::<S3Registry>() {
        registry.set_options(options);
        return Ok(());
    }
    let (runtime, registry) = with_s3_registry(state.runtime_env(), options)?;
    let mut new_state = SessionStateBuilder::new_from_existing(state.clone())
        .with_runtime_env(runtime)
        .build();
    new_state.config_mut().set_extension(Arc::clone(&registry));
    for factory in new_state.table_factories_mut().values_mut() {
        *factory = Arc::new(S3TableFactory {
            inner: Arc::clone(factory),
            registry: Arc::clone(&registry),
        });
    }
    *state = new_state;
    Ok(())
}

/// A copy of `runtime` that reads `s3://` locations with `options` over the AWS environment:
/// what [`register_s3`] gives a session, for processes that build runtimes themselves (the
/// executors of a cluster, see `crate::distributed`).
pub fn runtime_with_s3(runtime: &Arc<RuntimeEnv>, options: S3Options) -> Result<Arc<RuntimeEnv>> {
    Ok(with_s3_registry(runtime, options)?.0)
}

fn with_s3_registry(
    runtime: &Arc<RuntimeEnv>,
    options: S3Options,
) -> Result<(Arc<RuntimeEnv>, Arc<S3Registry>)> {
    // The object store registry is fixed when a runtime is built, so this is a copy of the
    // runtime (same memory pool, disk manager and caches) whose registry knows S3 and hands
    // every other URL to the previous registry.
    let registry = Arc::new(S3Registry::new(
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

/// The bucket of an `s3://` URL.
fn bucket_of(url: &Url) -> Result<&str> {
    match url.host_str() {
        Some(bucket) if !bucket.is_empty() => Ok(bucket),
        _ => plan_err!("{url} names no bucket; expected s3://bucket/key"),
    }
}

/// An object store registry that builds an S3 store per bucket on first use and passes every
/// other scheme to the registry it wraps.
struct S3Registry {
    inner: Arc<dyn ObjectStoreRegistry>,
    options: RwLock<S3Options>,
    /// Stores by bucket, and whether they were registered explicitly (kept when the options
    /// change) rather than built from the options.
    stores: RwLock<Stores>,
}

/// Stores by bucket, with whether each was registered explicitly.
type Stores = HashMap<String, (Arc<dyn ObjectStore>, bool)>;

impl fmt::Debug for S3Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let buckets: Vec<String> = self
            .stores
            .read()
            .map(|stores| stores.keys().cloned().collect())
            .unwrap_or_default();
        f.debug_struct("S3Registry")
            .field("inner", &self.inner)
            .field("buckets", &buckets)
            .finish_non_exhaustive()
    }
}

impl S3Registry {
    fn new(inner: Arc<dyn ObjectStoreRegistry>, options: S3Options) -> S3Registry {
        S3Registry {
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
        bucket: &str,
        store: Arc<dyn ObjectStore>,
        explicit: bool,
    ) -> Option<Arc<dyn ObjectStore>> {
        self.stores
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert(bucket.to_string(), (store, explicit))
            .map(|(store, _)| store)
    }
}

impl ObjectStoreRegistry for S3Registry {
    fn register_store(
        &self,
        url: &Url,
        store: Arc<dyn ObjectStore>,
    ) -> Option<Arc<dyn ObjectStore>> {
        match (url.scheme(), url.host_str()) {
            ("s3", Some(bucket)) => self.insert(bucket, store, true),
            _ => self.inner.register_store(url, store),
        }
    }

    fn deregister_store(&self, url: &Url) -> Result<Arc<dyn ObjectStore>> {
        if url.scheme() != "s3" {
            return self.inner.deregister_store(url);
        }
        let bucket = bucket_of(url)?;
        self.stores
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .remove(bucket)
            .map(|(store, _)| store)
            .ok_or_else(|| plan_datafusion_err!("no object store is registered for {url}"))
    }

    fn get_store(&self, url: &Url) -> Result<Arc<dyn ObjectStore>> {
        if url.scheme() != "s3" {
            return self.inner.get_store(url);
        }
        let bucket = bucket_of(url)?;
        if let Some((store, _)) = self
            .stores
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get(bucket)
        {
            return Ok(Arc::clone(store));
        }
        let store = build_store(bucket, &self.options())
            .map_err(|e| DataFusionError::External(Box::new(e)))?;
        self.insert(bucket, Arc::clone(&store), false);
        Ok(store)
    }
}
