//! The S3 store of one bucket, whose errors say what went wrong in terms a user can act on.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
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

use super::options::{CONNECT_TIMEOUT, MAX_BACKOFF};
use super::{S3Error, S3Options, DEFAULT_RETRIES, DEFAULT_TIMEOUT};

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
