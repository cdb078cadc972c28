//! Google Cloud Storage: `gs://bucket/path`, with the settings object_store reads from the
//! environment: a service-account file (`GOOGLE_SERVICE_ACCOUNT_PATH`, `…_KEY`), the
//! application-default credentials (`GOOGLE_APPLICATION_CREDENTIALS`, else gcloud's
//! `~/.config/gcloud/application_default_credentials.json`), else the metadata server.

use std::sync::{Arc, RwLock};

use object_store::gcp::{GoogleCloudStorageBuilder, GoogleConfigKey};
use object_store::ObjectStore;

use super::explained::{ExplainedStore, Service};
use super::options::{client_timeouts, retry_config, StoreError, DEFAULT_RETRIES, DEFAULT_TIMEOUT};

/// The service, as messages name it.
pub(super) const NAME: &str = "Google Cloud Storage";

const OTHER_CREDENTIALS: &str = "set GOOGLE_APPLICATION_CREDENTIALS (or \
     GOOGLE_SERVICE_ACCOUNT_PATH) to a service-account file, or run gcloud auth \
     application-default login";

/// Builds the store of `bucket`.
pub(super) fn build_store(bucket: &str) -> Result<Arc<dyn ObjectStore>, StoreError> {
    let mut builder = GoogleCloudStorageBuilder::from_env().with_bucket_name(bucket);
    let timeout = DEFAULT_TIMEOUT;
    let retries = DEFAULT_RETRIES;
    for (key, value) in client_timeouts(timeout) {
        builder = builder.with_config(GoogleConfigKey::Client(key), value);
    }
    builder = builder.with_retry(retry_config(timeout, retries));
    let setting = |key: GoogleConfigKey| {
        builder
            .get_config_value(&key)
            .filter(|value| !value.is_empty())
    };
    let adc_file = std::env::var("HOME")
        .ok()
        .map(|home| format!("{home}/.config/gcloud/application_default_credentials.json"))
        .filter(|path| std::path::Path::new(path).exists());
    let credentials = if let Some(path) = setting(GoogleConfigKey::ServiceAccount) {
        format!("the service account of {path} (GOOGLE_SERVICE_ACCOUNT_PATH) is refused or lacks permission on the bucket")
    } else if setting(GoogleConfigKey::ServiceAccountKey).is_some() {
        "the service account of GOOGLE_SERVICE_ACCOUNT_KEY is refused or lacks permission on the bucket".to_string()
    } else if let Some(path) = setting(GoogleConfigKey::ApplicationCredentials) {
        format!("the application-default credentials of {path} (GOOGLE_APPLICATION_CREDENTIALS) are refused or lack permission")
    } else if let Some(path) = adc_file {
        format!("gcloud's application-default credentials ({path}) are refused or lack permission; run gcloud auth application-default login again")
    } else {
        "no credential is set, so the metadata server was asked (a 1 s connect timeout)".to_string()
    };
    let endpoint = setting(GoogleConfigKey::BaseUrl)
        .unwrap_or_else(|| "https://storage.googleapis.com".to_string());
    let inner = builder.build().map_err(|e| {
        StoreError(format!(
            "cannot set up Google Cloud Storage access to gs://{bucket}: {e}; {OTHER_CREDENTIALS}"
        ))
    })?;
    Ok(Arc::new(ExplainedStore::new(
        Arc::new(inner),
        Service {
            name: NAME,
            root: format!("gs://{bucket}"),
            container: Some(format!("bucket '{bucket}'")),
            endpoint,
            endpoint_settings: "gcs_base_url in the service-account file",
            timeout_settings: "the timeout (30 s)",
            timeout,
            retries,
            credentials: Arc::new(RwLock::new(format!("{credentials}; {OTHER_CREDENTIALS}"))),
            read_only: false,
        },
    )))
}
