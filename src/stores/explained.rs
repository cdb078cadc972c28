//! An object store whose errors say what went wrong in terms a user can act on: which
//! endpoint did not answer, which bucket or object is missing, which credentials were refused
//! and where they came from. Every cloud store calibsql builds is wrapped in one.

use std::fmt;
use std::ops::Range;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use futures::StreamExt;
use object_store::client::{HttpError, HttpErrorKind};
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult,
};

use super::options::{find_error, StoreError};

/// What the messages of one store say about it.
#[derive(Debug)]
pub(super) struct Service {
    /// The service, as users name it: `S3`, `Azure Blob Storage`, `Google Cloud Storage`, `HTTP`.
    pub(super) name: &'static str,
    /// The store's root URL (`s3://bucket`, `az://container`, `http://host:port`), which
    /// object paths are appended to in messages.
    pub(super) root: String,
    /// What holds the objects (`bucket 'logs'`, `container 'logs' of account 'acme'`), for
    /// "does not exist" messages; `None` where there is nothing such (HTTP).
    pub(super) container: Option<String>,
    /// Where requests go, for messages.
    pub(super) endpoint: String,
    /// The settings that change the endpoint (`--s3-endpoint / AWS_ENDPOINT_URL`).
    pub(super) endpoint_settings: &'static str,
    /// The settings that change the timeout.
    pub(super) timeout_settings: &'static str,
    pub(super) timeout: Duration,
    pub(super) retries: usize,
    /// Where the credentials came from and what to change when they are refused. A credential
    /// chain updates it once it knows which source answered.
    pub(super) credentials: Arc<RwLock<String>>,
    /// Whether the store refuses writes (HTTP tables are read-only).
    pub(super) read_only: bool,
}

impl Service {
    fn credentials(&self) -> String {
        self.credentials
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    fn url(&self, path: &str) -> String {
        format!("{}/{path}", self.root)
    }

    /// One line for `error` on `url`, or `None` where object_store's own text is as good.
    fn describe(&self, url: &str, error: &object_store::Error) -> Option<String> {
        if let Some(explained) = find_error(error) {
            // Already said (a credential provider's failure).
            return Some(explained.to_string());
        }
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
        let Service {
            name,
            endpoint,
            retries,
            ..
        } = self;

        // A credential provider's request (managed identity, OAuth, a service-account token)
        // failed: the endpoint is not at fault.
        if lower.contains("token request")
            || lower.contains("token response")
            || lower.contains("get-access-token")
            || lower.contains("service account file")
        {
            let reason = if lower.contains("refused") {
                "connection refused".to_string()
            } else if http_kind == Some(HttpErrorKind::Timeout) || lower.contains("timed out") {
                "timed out".to_string()
            } else {
                text.lines().last().unwrap_or_default().to_string()
            };
            return Some(format!(
                "cannot get {name} credentials for {url} ({reason}): {}",
                self.credentials()
            ));
        }
        if lower.contains("range request not supported") {
            return Some(format!(
                "the {name} server {endpoint} does not answer ranged requests (Range headers), \
                 which reading {url} needs (Parquet is read in pieces); serve it from a server \
                 that does (nginx, Apache, a CDN, an object store)"
            ));
        }
        if http_kind == Some(HttpErrorKind::Timeout) || lower.contains("timed out") {
            return Some(format!(
                "{name} endpoint {endpoint} did not answer within {:?} for {url} ({retries} \
                 retries); check that it is up, or raise {}",
                self.timeout, self.timeout_settings
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
                "{name} endpoint {endpoint} is unreachable ({reason}, {retries} retries) while \
                 reading {url}; check {} and that the server is running",
                self.endpoint_settings
            ));
        }
        // S3, Azure and the XML API of GCS name the failure in an XML `<Code>`.
        let code = text
            .split_once("<Code>")
            .and_then(|(_, rest)| rest.split_once("</Code>"))
            .map(|(code, _)| code.trim().to_string());
        let missing_container = |container: &String| {
            format!("{name} {container} does not exist at {endpoint} (while reading {url})")
        };
        match code.as_deref() {
            Some("NoSuchBucket" | "ContainerNotFound" | "BucketNotFound") => {
                if let Some(container) = &self.container {
                    return Some(missing_container(container));
                }
            }
            Some("NoSuchKey" | "BlobNotFound" | "PathNotFound") => {
                return Some(format!("no such {name} object: {url}"))
            }
            Some(
                code @ ("SignatureDoesNotMatch"
                | "InvalidAccessKeyId"
                | "InvalidToken"
                | "ExpiredToken"
                | "InvalidSecurity"
                | "TokenRefreshRequired"
                | "AuthenticationFailed"
                | "InvalidAuthenticationInfo"
                | "NoAuthenticationInformation"),
            ) => {
                return Some(format!(
                    "{name} rejected the credentials for {url} (403 {code}): {}",
                    self.credentials()
                ))
            }
            Some(
                code @ ("AccessDenied"
                | "AuthorizationFailure"
                | "AuthorizationPermissionMismatch"
                | "AuthorizationResourceTypeMismatch"),
            ) => {
                return Some(format!(
                    "{name} denied access to {url} (403 {code}): the credentials are wrong or \
                     lack permission; {}",
                    self.credentials()
                ))
            }
            Some(code @ ("AuthorizationHeaderMalformed" | "PermanentRedirect")) => {
                if let Some(container) = &self.container {
                    return Some(format!(
                        "{name} {container} is in another region ({code}); set AWS_REGION (or \
                         region in the AWS profile, or --s3-region)"
                    ));
                }
            }
            _ => {}
        }
        let refused = || {
            format!(
                "{name} refused {url} (403 Forbidden or 401): the credentials are wrong or lack \
                 permission; {}",
                self.credentials()
            )
        };
        match error {
            object_store::Error::NotFound { .. } => Some(format!("no such {name} object: {url}")),
            object_store::Error::PermissionDenied { .. }
            | object_store::Error::Unauthenticated { .. } => Some(refused()),
            _ if text.contains("403 Forbidden") || text.contains("401 Unauthorized") => {
                Some(refused())
            }
            _ if text.contains("404 Not Found") => Some(format!("no such {name} object: {url}")),
            _ => None,
        }
    }
}

/// A store whose errors carry a [`StoreError`] source that explains them.
pub(super) struct ExplainedStore {
    inner: Arc<dyn ObjectStore>,
    service: Arc<Service>,
}

impl ExplainedStore {
    pub(super) fn new(inner: Arc<dyn ObjectStore>, service: Service) -> ExplainedStore {
        ExplainedStore {
            inner,
            service: Arc::new(service),
        }
    }

    /// `error` with an explaining [`StoreError`] source, keeping its kind (DataFusion treats
    /// `NotFound` specially).
    fn explain(&self, path: Option<&Path>, error: object_store::Error) -> object_store::Error {
        explain(&self.service, path, false, error)
    }

    fn refuse_write(&self, location: &Path) -> object_store::Result<()> {
        if !self.service.read_only {
            return Ok(());
        }
        Err(object_store::Error::NotSupported {
            source: Box::new(StoreError(format!(
                "{} is read-only: {} tables are read, never written (write to a local path, \
                 s3://, az://, abfss:// or gs:// instead)",
                self.service.url(location.as_ref()),
                self.service.name
            ))),
        })
    }
}

fn explain(
    service: &Service,
    path: Option<&Path>,
    prefix: bool,
    error: object_store::Error,
) -> object_store::Error {
    let path = path.map(Path::as_ref).unwrap_or("");
    let url = if prefix && !path.is_empty() {
        service.url(&format!("{path}/"))
    } else {
        service.url(path)
    };
    let Some(message) = service.describe(&url, &error) else {
        return error;
    };
    let source = Box::new(StoreError(message));
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
            store: service.name,
            source,
        },
    }
}

impl fmt::Debug for ExplainedStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Not the inner store's Debug: it may show credentials.
        f.debug_struct("ExplainedStore")
            .field("root", &self.service.root)
            .field("endpoint", &self.service.endpoint)
            .finish_non_exhaustive()
    }
}

impl fmt::Display for ExplainedStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}({} at {})",
            self.service.name, self.service.root, self.service.endpoint
        )
    }
}

#[async_trait]
impl ObjectStore for ExplainedStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        self.refuse_write(location)?;
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
        self.refuse_write(location)?;
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
        let service = Arc::clone(&self.service);
        let prefix = prefix.cloned();
        self.inner
            .list(prefix.as_ref())
            .map(move |item| item.map_err(|e| explain(&service, prefix.as_ref(), true, e)))
            .boxed()
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        let service = Arc::clone(&self.service);
        let prefix = prefix.cloned();
        self.inner
            .list_with_offset(prefix.as_ref(), offset)
            .map(move |item| item.map_err(|e| explain(&service, prefix.as_ref(), true, e)))
            .boxed()
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.inner
            .list_with_delimiter(prefix)
            .await
            .map_err(|e| explain(&self.service, prefix, true, e))
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.refuse_write(to)?;
        self.inner
            .copy_opts(from, to, options)
            .await
            .map_err(|e| self.explain(Some(from), e))
    }
}
