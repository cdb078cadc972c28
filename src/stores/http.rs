//! Read-only HTTP(S) tables: `https://host/path/file.parquet` (and `http://` on any host:
//! nothing secret is sent, as no credential is).

use std::sync::{Arc, RwLock};

use object_store::http::HttpBuilder;
use object_store::{ClientConfigKey, ObjectStore};

use super::explained::{ExplainedStore, Service};
use super::options::{client_timeouts, retry_config, StoreError, DEFAULT_RETRIES, DEFAULT_TIMEOUT};

/// The service, as messages name it.
pub(super) const NAME: &str = "HTTP";

/// Builds the store of `root` (`https://host[:port]`).
pub(super) fn build_store(root: &str) -> Result<Arc<dyn ObjectStore>, StoreError> {
    let timeout = DEFAULT_TIMEOUT;
    let retries = DEFAULT_RETRIES;
    let mut builder = HttpBuilder::new()
        .with_url(root)
        .with_config(ClientConfigKey::AllowHttp, "true")
        .with_retry(retry_config(timeout, retries));
    for (key, value) in client_timeouts(timeout) {
        builder = builder.with_config(key, value);
    }
    let inner = builder
        .build()
        .map_err(|e| StoreError(format!("cannot read from {root}: {e}")))?;
    Ok(Arc::new(ExplainedStore::new(
        Arc::new(inner),
        Service {
            name: NAME,
            root: root.to_string(),
            container: None,
            endpoint: root.to_string(),
            endpoint_settings: "the URL",
            timeout_settings: "the timeout (30 s)",
            timeout,
            retries,
            credentials: Arc::new(RwLock::new(
                "the server wants a login, which HTTP tables do not send; download the file \
                 or serve it without one"
                    .to_string(),
            )),
            read_only: true,
        },
    )))
}
