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

use std::collections::HashMap;
use std::fmt;
use std::ops::Range;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use datafusion::catalog::{Session, TableProvider, TableProviderFactory};
use datafusion::common::{plan_datafusion_err, plan_err, DataFusionError, Result};
use datafusion::execution::object_store::ObjectStoreRegistry;
use datafusion::execution::runtime_env::{RuntimeEnv, RuntimeEnvBuilder};
use datafusion::execution::SessionStateBuilder;
use datafusion::logical_expr::CreateExternalTable;
use datafusion::prelude::SessionContext;
use futures::stream::BoxStream;
use futures::StreamExt;
use object_store::aws::{AmazonS3, AmazonS3Builder, AmazonS3ConfigKey};
use object_store::client::{HttpError, HttpErrorKind};
use object_store::path::Path;
use object_store::{
    BackoffConfig, ClientConfigKey, CopyOptions, GetOptions, GetResult, ListResult,
    MultipartUpload, ObjectMeta, ObjectStore, PutMultipartOptions, PutOptions, PutPayload,
    PutResult, RetryConfig,
};
use url::Url;

/// Timeout of one S3 request unless set otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// Retries of a failed S3 request (connection errors, 5xx, timeouts) unless set otherwise.
pub const DEFAULT_RETRIES: usize = 3;
/// Longest wait between two retries.
const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// Longest wait for a TCP connection to the endpoint.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The `OPTIONS` keys of `CREATE EXTERNAL TABLE` that configure S3, without the `aws.` prefix.
pub const TABLE_OPTION_KEYS: [&str; 9] = [
    "access_key_id",
    "secret_access_key",
    "session_token",
    "region",
    "endpoint",
    "allow_http",
    "skip_signature",
    "timeout",
    "retries",
];

/// S3 settings that override the AWS environment. `None` keeps the environment's value (or
/// object_store's default: region `us-east-1`, HTTPS only).
///
/// Its `Debug` output shows whether a secret is set, never the secret.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct S3Options {
    /// Endpoint of an S3-compatible store, e.g. `http://127.0.0.1:9000` (`AWS_ENDPOINT_URL`).
    pub endpoint: Option<String>,
    /// Region (`AWS_REGION`).
    pub region: Option<String>,
    /// Allow a plain-HTTP endpoint (`AWS_ALLOW_HTTP`).
    pub allow_http: Option<bool>,
    /// Access key id (`AWS_ACCESS_KEY_ID`).
    pub access_key_id: Option<String>,
    /// Secret access key (`AWS_SECRET_ACCESS_KEY`).
    pub secret_access_key: Option<String>,
    /// Session token of temporary credentials (`AWS_SESSION_TOKEN`).
    pub session_token: Option<String>,
    /// Send unsigned requests (public buckets).
    pub skip_signature: Option<bool>,
    /// Timeout of one request [default: 30 s].
    pub timeout: Option<Duration>,
    /// Retries of a failed request [default: 3, or `AWS_MAX_ATTEMPTS` - 1].
    pub retries: Option<usize>,
}

impl fmt::Debug for S3Options {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fn hidden(secret: &Option<String>) -> Option<&'static str> {
            secret.as_ref().map(|_| "<hidden>")
        }
        f.debug_struct("S3Options")
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .field("allow_http", &self.allow_http)
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &hidden(&self.secret_access_key))
            .field("session_token", &hidden(&self.session_token))
            .field("skip_signature", &self.skip_signature)
            .field("timeout", &self.timeout)
            .field("retries", &self.retries)
            .finish()
    }
}

impl S3Options {
    /// Sets one option by its `CREATE EXTERNAL TABLE` name without the `aws.` prefix (see
    /// [`TABLE_OPTION_KEYS`]). `timeout` is in seconds (`30`, `2.5`, `30s`).
    pub fn set(&mut self, key: &str, value: &str) -> Result<()> {
        let text = || Some(value.to_string());
        match key {
            "access_key_id" => self.access_key_id = text(),
            "secret_access_key" => self.secret_access_key = text(),
            "session_token" => self.session_token = text(),
            "region" => self.region = text(),
            "endpoint" | "endpoint_url" => self.endpoint = text(),
            "allow_http" => self.allow_http = Some(parse_bool(key, value)?),
            "skip_signature" | "nosign" => self.skip_signature = Some(parse_bool(key, value)?),
            "timeout" => {
                self.timeout = Some(
                    parse_seconds(value).map_err(|e| plan_datafusion_err!("'aws.timeout': {e}"))?,
                )
            }
            "retries" => {
                self.retries = Some(value.trim().parse().map_err(|_| {
                    plan_datafusion_err!("'aws.retries' must be a whole number, not '{value}'")
                })?)
            }
            _ => {
                return plan_err!(
                    "unknown S3 option 'aws.{key}' (known: {})",
                    TABLE_OPTION_KEYS.map(|k| format!("aws.{k}")).join(", ")
                )
            }
        }
        Ok(())
    }

    /// `self` with every option that `other` sets replaced by `other`'s.
    pub fn overridden_by(&self, other: &S3Options) -> S3Options {
        fn pick<T: Clone>(base: &Option<T>, over: &Option<T>) -> Option<T> {
            over.clone().or_else(|| base.clone())
        }
        S3Options {
            endpoint: pick(&self.endpoint, &other.endpoint),
            region: pick(&self.region, &other.region),
            allow_http: pick(&self.allow_http, &other.allow_http),
            access_key_id: pick(&self.access_key_id, &other.access_key_id),
            secret_access_key: pick(&self.secret_access_key, &other.secret_access_key),
            session_token: pick(&self.session_token, &other.session_token),
            skip_signature: pick(&self.skip_signature, &other.skip_signature),
            timeout: pick(&self.timeout, &other.timeout),
            retries: pick(&self.retries, &other.retries),
        }
    }
}

fn parse_bool(key: &str, value: &str) -> Result<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Ok(true),
        "false" | "0" | "no" | "off" => Ok(false),
        _ => plan_err!("'aws.{key}' must be true or false, not '{value}'"),
    }
}

/// Seconds as a positive number, optionally followed by `s` (`30`, `2.5`, `30s`).
pub fn parse_seconds(value: &str) -> std::result::Result<Duration, String> {
    let number = value.trim();
    let number = number.strip_suffix('s').unwrap_or(number).trim();
    match number.parse::<f64>() {
        Ok(seconds) if seconds > 0.0 && seconds.is_finite() && seconds < 1e9 => {
            Ok(Duration::from_secs_f64(seconds))
        }
        _ => Err(format!(
            "expected a number of seconds above 0 such as 30 or 2.5, not '{value}'"
        )),
    }
}

/// A failed S3 request, said in one line with what to change. Never contains a secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Error(pub String);

impl fmt::Display for S3Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for S3Error {}

/// The [`S3Error`] behind `error`, if any of its causes is one.
pub fn find_error<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a S3Error> {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(current) = cause {
        if let Some(found) = current.downcast_ref::<S3Error>() {
            return Some(found);
        }
        cause = current.source();
    }
    None
}

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

/// Builds the store of `bucket`: the AWS environment, overridden by `options`, with bounded
/// timeouts and retries.
pub fn build_store(
    bucket: &str,
    options: &S3Options,
) -> std::result::Result<Arc<dyn ObjectStore>, S3Error> {
    let mut builder = AmazonS3Builder::from_env().with_bucket_name(bucket);
    if let Some(endpoint) = &options.endpoint {
        builder = builder.with_endpoint(endpoint);
    }
    if let Some(region) = &options.region {
        builder = builder.with_region(region);
    }
    if let Some(allow_http) = options.allow_http {
        builder = builder.with_allow_http(allow_http);
    }
    if let Some(key) = &options.access_key_id {
        builder = builder.with_access_key_id(key);
    }
    if let Some(secret) = &options.secret_access_key {
        builder = builder.with_secret_access_key(secret);
    }
    if let Some(token) = &options.session_token {
        builder = builder.with_token(token);
    }
    if let Some(skip) = options.skip_signature {
        builder = builder.with_skip_signature(skip);
    }

    let region = builder
        .get_config_value(&AmazonS3ConfigKey::Region)
        .or_else(|| builder.get_config_value(&AmazonS3ConfigKey::DefaultRegion))
        .unwrap_or_else(|| "us-east-1".to_string());
    if builder
        .get_config_value(&AmazonS3ConfigKey::Region)
        .is_none()
    {
        builder = builder.with_region(&region);
    }
    let endpoint = builder
        .get_config_value(&AmazonS3ConfigKey::Endpoint)
        .filter(|e| !e.is_empty());
    let allow_http = builder
        .get_config_value(&AmazonS3ConfigKey::Client(ClientConfigKey::AllowHttp))
        .is_some_and(|v| v.eq_ignore_ascii_case("true") || v == "1");
    if let Some(endpoint) = &endpoint {
        let url = Url::parse(endpoint).map_err(|e| {
            S3Error(format!(
                "invalid S3 endpoint '{endpoint}' ({e}); expected a URL such as http://127.0.0.1:9000"
            ))
        })?;
        if url.scheme() == "http" && !allow_http {
            return Err(S3Error(format!(
                "the S3 endpoint {endpoint} is plain HTTP, which is refused unless allowed: \
                 add --s3-allow-http (or set AWS_ALLOW_HTTP=true, or OPTIONS ('aws.allow_http' 'true'))"
            )));
        }
    }

    let timeout = options.timeout.unwrap_or(DEFAULT_TIMEOUT);
    let retries = options.retries.unwrap_or_else(|| {
        // AWS SDKs count attempts, the first one included.
        std::env::var("AWS_MAX_ATTEMPTS")
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
            .map_or(DEFAULT_RETRIES, |attempts| attempts.saturating_sub(1))
    });
    let milliseconds = |d: Duration| format!("{}ms", d.as_millis().max(1));
    builder = builder
        .with_config(
            AmazonS3ConfigKey::Client(ClientConfigKey::Timeout),
            milliseconds(timeout),
        )
        .with_config(
            AmazonS3ConfigKey::Client(ClientConfigKey::ConnectTimeout),
            milliseconds(timeout.min(CONNECT_TIMEOUT)),
        )
        .with_retry(RetryConfig {
            backoff: BackoffConfig {
                init_backoff: Duration::from_millis(100),
                max_backoff: MAX_BACKOFF,
                base: 2.0,
            },
            max_retries: retries,
            // Bounds the whole retry loop of one request, so a dead endpoint fails in about
            // `retries + 1` timeouts at most.
            retry_timeout: (timeout + MAX_BACKOFF) * (retries as u32 + 1),
        });

    let inner = builder.build().map_err(|e| {
        // Builder errors name missing or malformed settings, never their values.
        S3Error(format!("cannot set up S3 access to bucket '{bucket}': {e}"))
    })?;
    Ok(Arc::new(S3Store {
        inner,
        bucket: bucket.to_string(),
        endpoint: endpoint.unwrap_or_else(|| format!("https://s3.{region}.amazonaws.com")),
        timeout,
        retries,
    }))
}

/// An S3 store whose errors say what went wrong in terms a user can act on.
struct S3Store {
    inner: AmazonS3,
    bucket: String,
    /// The endpoint, for messages.
    endpoint: String,
    timeout: Duration,
    retries: usize,
}

impl fmt::Debug for S3Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Not the inner store's Debug: it would show the credentials.
        f.debug_struct("S3Store")
            .field("bucket", &self.bucket)
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

impl fmt::Display for S3Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "S3(s3://{} at {})", self.bucket, self.endpoint)
    }
}

impl S3Store {
    /// `error` with an [`S3Error`] source that explains it, keeping its kind (DataFusion
    /// treats `NotFound` specially).
    fn explain(&self, path: Option<&Path>, error: object_store::Error) -> object_store::Error {
        let url = format!(
            "s3://{}/{}",
            self.bucket,
            path.map(Path::as_ref).unwrap_or("")
        );
        self.explain_url(&url, error)
    }

    /// As [`Self::explain`], for a listing of `prefix` (shown with its trailing `/`).
    fn explain_prefix(
        &self,
        prefix: Option<&Path>,
        error: object_store::Error,
    ) -> object_store::Error {
        let url = match prefix {
            Some(prefix) if !prefix.as_ref().is_empty() => {
                format!("s3://{}/{}/", self.bucket, prefix)
            }
            _ => format!("s3://{}/", self.bucket),
        };
        self.explain_url(&url, error)
    }

    fn explain_url(&self, url: &str, error: object_store::Error) -> object_store::Error {
        let Some(message) = self.describe(url, &error) else {
            return error;
        };
        let source = Box::new(S3Error(message));
        match error {
            object_store::Error::NotFound { path, .. } => {
                object_store::Error::NotFound { path, source }
            }
            object_store::Error::PermissionDenied { path, .. } => {
                object_store::Error::PermissionDenied { path, source }
            }
            object_store::Error::Unauthenticated { path, .. } => {
                object_store::Error::Unauthenticated { path, source }
            }
            _ => object_store::Error::Generic {
                store: "S3",
                source,
            },
        }
    }

    fn describe(&self, url: &str, error: &object_store::Error) -> Option<String> {
        // The whole chain: the reason of a failed connection ("Connection refused") is only
        // in the innermost errors.
        let mut text = String::new();
        let mut http_kind = None;
        let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(error);
        while let Some(current) = cause {
            if let Some(http) = current.downcast_ref::<HttpError>() {
                http_kind = Some(http.kind());
            }
            text.push_str(&current.to_string());
            text.push('\n');
            cause = current.source();
        }
        let lower = text.to_ascii_lowercase();
        let endpoint = &self.endpoint;
        let retries = self.retries;
        let credentials_hint = "check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and \
                                AWS_SESSION_TOKEN for temporary credentials)";

        if http_kind == Some(HttpErrorKind::Timeout) || lower.contains("timed out") {
            return Some(format!(
                "S3 endpoint {endpoint} did not answer within {:?} for {url} ({retries} retries); \
                 check that it is up, or raise --s3-timeout / 'aws.timeout'",
                self.timeout
            ));
        }
        if http_kind == Some(HttpErrorKind::Connect)
            || lower.contains("connection refused")
            || lower.contains("tcp connect error")
            || lower.contains("dns error")
        {
            let reason = if lower.contains("refused") {
                "connection refused"
            } else if lower.contains("dns error") {
                "host name not found"
            } else {
                "cannot connect"
            };
            return Some(format!(
                "S3 endpoint {endpoint} is unreachable ({reason}, {retries} retries) while \
                 reading {url}; check --s3-endpoint / AWS_ENDPOINT_URL and that the server is running"
            ));
        }
        let code = text
            .split_once("<Code>")
            .and_then(|(_, rest)| rest.split_once("</Code>"))
            .map(|(code, _)| code.trim().to_string());
        match code.as_deref() {
            Some("NoSuchBucket") => {
                return Some(format!(
                    "S3 bucket '{}' does not exist at {endpoint}",
                    self.bucket
                ))
            }
            Some("NoSuchKey") => return Some(format!("no such S3 object: {url}")),
            Some(
                code @ ("SignatureDoesNotMatch"
                | "InvalidAccessKeyId"
                | "InvalidToken"
                | "ExpiredToken"
                | "InvalidSecurity"
                | "TokenRefreshRequired"),
            ) => {
                return Some(format!(
                    "S3 rejected the credentials for {url} (403 {code}): the access key or \
                     secret is wrong; {credentials_hint}"
                ))
            }
            Some("AccessDenied") => {
                return Some(format!(
                    "S3 denied access to {url} (403 AccessDenied): the credentials are wrong or \
                     lack permission for bucket '{}'; {credentials_hint}",
                    self.bucket
                ))
            }
            Some(code @ ("AuthorizationHeaderMalformed" | "PermanentRedirect")) => {
                return Some(format!(
                    "S3 bucket '{}' is in another region ({code}); set AWS_REGION",
                    self.bucket
                ))
            }
            _ => {}
        }
        match error {
            object_store::Error::NotFound { .. } => Some(format!("no such S3 object: {url}")),
            object_store::Error::PermissionDenied { .. }
            | object_store::Error::Unauthenticated { .. } => Some(format!(
                "S3 refused {url} (403 Forbidden): the credentials are wrong or lack \
                 permission; {credentials_hint}"
            )),
            _ if text.contains("403 Forbidden") => Some(format!(
                "S3 refused {url} (403 Forbidden): the credentials are wrong or lack \
                 permission; {credentials_hint}"
            )),
            _ if text.contains("404 Not Found") => Some(format!("no such S3 object: {url}")),
            _ => None,
        }
    }
}

#[async_trait]
impl ObjectStore for S3Store {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        self.inner
            .put_opts(location, payload, opts)
            .await
            .map_err(|e| self.explain(Some(location), e))
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.inner
            .put_multipart_opts(location, opts)
            .await
            .map_err(|e| self.explain(Some(location), e))
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        self.inner
            .get_opts(location, options)
            .await
            .map_err(|e| self.explain(Some(location), e))
    }

    async fn get_ranges(
        &self,
        location: &Path,
        ranges: &[Range<u64>],
    ) -> object_store::Result<Vec<Bytes>> {
        self.inner
            .get_ranges(location, ranges)
            .await
            .map_err(|e| self.explain(Some(location), e))
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        let explainer = self.explainer();
        let prefix = prefix.cloned();
        self.inner
            .list(prefix.as_ref())
            .map(move |item| item.map_err(|e| explainer.explain_prefix(prefix.as_ref(), e)))
            .boxed()
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        let explainer = self.explainer();
        let prefix = prefix.cloned();
        self.inner
            .list_with_offset(prefix.as_ref(), offset)
            .map(move |item| item.map_err(|e| explainer.explain_prefix(prefix.as_ref(), e)))
            .boxed()
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.inner
            .list_with_delimiter(prefix)
            .await
            .map_err(|e| self.explain_prefix(prefix, e))
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.inner
            .copy_opts(from, to, options)
            .await
            .map_err(|e| self.explain(Some(from), e))
    }
}

impl S3Store {
    /// What `explain` needs, owned, for errors of `'static` streams.
    fn explainer(&self) -> Arc<S3Store> {
        Arc::new(S3Store {
            inner: self.inner.clone(),
            bucket: self.bucket.clone(),
            endpoint: self.endpoint.clone(),
            timeout: self.timeout,
            retries: self.retries,
        })
    }
}

/// Wraps a `CREATE EXTERNAL TABLE` factory: `OPTIONS ('aws.…' …)` configure the bucket of an
/// `s3://` location (over the session's S3 options), are taken out of the options the file
/// format sees, and secrets are masked in the stored table definition.
#[derive(Debug)]
struct S3TableFactory {
    inner: Arc<dyn TableProviderFactory>,
    registry: Arc<S3Registry>,
}

#[async_trait]
impl TableProviderFactory for S3TableFactory {
    async fn create(
        &self,
        state: &dyn Session,
        cmd: &CreateExternalTable,
    ) -> Result<Arc<dyn TableProvider>> {
        let aws: Vec<(&String, &String)> = cmd
            .options
            .iter()
            .filter(|(key, _)| key.starts_with("aws."))
            .collect();
        if aws.is_empty() {
            return self.inner.create(state, cmd).await;
        }
        if let Some(elsewhere) = state.config().get_extension::<TablesReadElsewhere>() {
            let keys: Vec<&str> = aws.iter().map(|(key, _)| key.as_str()).collect();
            return plan_err!(
                "CREATE EXTERNAL TABLE {}: OPTIONS ({}) cannot be used here: {}",
                cmd.name,
                keys.join(", "),
                elsewhere.remedy
            );
        }
        let mut table_options = S3Options::default();
        for (key, value) in &aws {
            table_options.set(&key["aws.".len()..], value)?;
        }
        let mut buckets = Vec::new();
        for location in &cmd.locations {
            let url = Url::parse(location).ok().filter(|url| url.scheme() == "s3");
            let Some(url) = url else {
                return plan_err!(
                    "the 'aws.…' options configure s3:// locations, but the location is {location}"
                );
            };
            let bucket = bucket_of(&url)?.to_string();
            if !buckets.contains(&bucket) {
                buckets.push(bucket);
            }
        }
        let options = self.registry.options().overridden_by(&table_options);
        for bucket in &buckets {
            let store = build_store(bucket, &options)
                .map_err(|e| DataFusionError::External(Box::new(e)))?;
            self.registry.insert(bucket, store, true);
        }

        let mut cmd = cmd.clone();
        cmd.options.retain(|key, _| !key.starts_with("aws."));
        let secrets: Vec<&String> = [
            &table_options.secret_access_key,
            &table_options.session_token,
        ]
        .into_iter()
        .flatten()
        .filter(|secret| !secret.is_empty())
        .collect();
        if let Some(definition) = &mut cmd.definition {
            for secret in secrets {
                *definition = definition.replace(secret.as_str(), "***");
            }
        }
        self.inner.create(state, &cmd).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_hides_secrets() {
        let options = S3Options {
            access_key_id: Some("AKIDEXAMPLE".into()),
            secret_access_key: Some("very-secret-value".into()),
            session_token: Some("token-value".into()),
            ..S3Options::default()
        };
        let debug = format!("{options:?}");
        assert!(debug.contains("AKIDEXAMPLE"));
        assert!(!debug.contains("very-secret-value"));
        assert!(!debug.contains("token-value"));
    }

    #[test]
    fn table_options_parse_and_override() {
        let mut table = S3Options::default();
        table.set("endpoint", "http://127.0.0.1:9000").unwrap();
        table.set("allow_http", "true").unwrap();
        table.set("timeout", "2.5s").unwrap();
        table.set("retries", "0").unwrap();
        assert_eq!(table.timeout, Some(Duration::from_millis(2500)));
        assert!(table.set("allow_http", "maybe").is_err());
        assert!(table.set("retries", "-1").is_err());
        let error = table.set("endpiont", "x").unwrap_err().to_string();
        assert!(error.contains("aws.endpoint"), "{error}");

        let base = S3Options {
            region: Some("eu-west-1".into()),
            endpoint: Some("https://elsewhere".into()),
            ..S3Options::default()
        };
        let merged = base.overridden_by(&table);
        assert_eq!(merged.region.as_deref(), Some("eu-west-1"));
        assert_eq!(merged.endpoint.as_deref(), Some("http://127.0.0.1:9000"));
        assert_eq!(merged.retries, Some(0));
    }

    #[test]
    fn plain_http_endpoints_need_allow_http() {
        let options = S3Options {
            endpoint: Some("http://127.0.0.1:9".into()),
            allow_http: Some(false),
            access_key_id: Some("a".into()),
            secret_access_key: Some("b".into()),
            ..S3Options::default()
        };
        let error = build_store("bucket", &options).unwrap_err().to_string();
        assert!(error.contains("--s3-allow-http"), "{error}");
        let allowed = S3Options {
            allow_http: Some(true),
            ..options
        };
        assert!(build_store("bucket", &allowed).is_ok());
    }

    #[test]
    fn seconds() {
        assert_eq!(parse_seconds("30"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_seconds("0.5s"), Ok(Duration::from_millis(500)));
        assert!(parse_seconds("0").is_err());
        assert!(parse_seconds("soon").is_err());
    }
}
