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
//! (`s3` with `aws_chain`, `azure`, `gcs`, `http`), `registry` (the session's registry, which
//! builds a store per bucket, container or host), `listing` (what a table location names: an
//! object, a prefix or a glob over keys), `table` (`CREATE EXTERNAL TABLE … OPTIONS ('aws.…')`);
//! what gives a session or a runtime the registry is here.

mod aws_chain;
mod azure;
mod explained;
mod gcs;
mod http;
mod listing;
mod options;
mod registry;
mod s3;
mod table;

pub(crate) use listing::{list_location, StoreListing};
pub(crate) use options::failure;
pub use registry::canonical_location;
pub(crate) use registry::store_root;
pub use table::TablesReadElsewhere;

pub use options::{
    find_error, parse_seconds, S3Options, StoreError, DEFAULT_RETRIES, DEFAULT_TIMEOUT,
    TABLE_OPTION_KEYS,
};
pub use s3::build_store;

use std::sync::Arc;

use datafusion::common::Result;
use datafusion::execution::object_store::ObjectStoreRegistry;
use datafusion::execution::runtime_env::{RuntimeEnv, RuntimeEnvBuilder};
use datafusion::execution::SessionStateBuilder;
use datafusion::prelude::SessionContext;

use registry::StoreRegistry;
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
