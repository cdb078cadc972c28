//! Azure Blob Storage and ADLS Gen2: `az://container/path`, `abfs[s]://container@account.dfs.core.windows.net/path`
//! (and `https://account.blob.core.windows.net/container/path`, read as the latter), with the
//! settings object_store reads from the environment.

use std::sync::{Arc, RwLock};

use object_store::azure::{AzureConfigKey, MicrosoftAzureBuilder};
use object_store::ObjectStore;

use super::explained::{ExplainedStore, Service};
use super::options::{client_timeouts, retry_config, StoreError, DEFAULT_RETRIES, DEFAULT_TIMEOUT};

/// The service, as messages name it.
pub(super) const NAME: &str = "Azure Blob Storage";

/// The settings that choose a credential, in the order object_store tries them, each with what
/// messages say of it.
const CREDENTIALS: [(&[AzureConfigKey], &str); 6] = [
    (
        &[AzureConfigKey::Token],
        "the bearer token (AZURE_STORAGE_TOKEN) is wrong or expired",
    ),
    (
        &[AzureConfigKey::AccessKey],
        "the account key (AZURE_STORAGE_ACCOUNT_KEY) is wrong for this account",
    ),
    (
        &[AzureConfigKey::ClientId, AzureConfigKey::FederatedTokenFile],
        "the workload identity (AZURE_CLIENT_ID, AZURE_TENANT_ID, AZURE_FEDERATED_TOKEN_FILE) is refused",
    ),
    (
        &[AzureConfigKey::ClientId, AzureConfigKey::ClientSecret],
        "the service principal (AZURE_CLIENT_ID, AZURE_CLIENT_SECRET, AZURE_TENANT_ID) is refused",
    ),
    (
        &[AzureConfigKey::SasKey],
        "the SAS token (AZURE_STORAGE_SAS_TOKEN) is wrong, expired or lacks permission",
    ),
    (
        &[AzureConfigKey::UseAzureCli],
        "the token of `az login` (AZURE_USE_AZURE_CLI) is refused; run az login again",
    ),
];

const OTHER_CREDENTIALS: &str = "set AZURE_STORAGE_ACCOUNT_KEY, AZURE_STORAGE_SAS_TOKEN, a \
     service principal (AZURE_CLIENT_ID, AZURE_CLIENT_SECRET, AZURE_TENANT_ID) or \
     AZURE_USE_AZURE_CLI=true for the account of az login";

/// Builds the store of `root`, the scheme and authority of an Azure URL (`az://container`,
/// `abfss://container@account.dfs.core.windows.net`).
pub(super) fn build_store(root: &str) -> Result<Arc<dyn ObjectStore>, StoreError> {
    let mut builder = MicrosoftAzureBuilder::from_env().with_url(root);
    let timeout = DEFAULT_TIMEOUT;
    let retries = DEFAULT_RETRIES;
    for (key, value) in client_timeouts(timeout) {
        builder = builder.with_config(AzureConfigKey::Client(key), value);
    }
    builder = builder.with_retry(retry_config(timeout, retries));
    let set = |key: &AzureConfigKey| {
        builder
            .get_config_value(key)
            .is_some_and(|value| !value.is_empty() && value != "false")
    };
    let emulator = set(&AzureConfigKey::UseEmulator);
    let credentials = if emulator {
        format!(
            "the emulator's account key or SAS token is wrong (AZURE_STORAGE_USE_EMULATOR is \
             set; without a key the development account's is used); {OTHER_CREDENTIALS}"
        )
    } else if set(&AzureConfigKey::SkipSignature) {
        "the requests are unsigned (AZURE_SKIP_SIGNATURE) and the container is not public; \
         unset it and give credentials"
            .to_string()
    } else {
        match CREDENTIALS.iter().find(|(keys, _)| keys.iter().all(&set)) {
            Some((_, said)) => format!("{said}; or {OTHER_CREDENTIALS}"),
            None => format!(
                "no credential is set, so managed identity was asked (the instance metadata \
                 endpoint, with a 1 s connect timeout); {OTHER_CREDENTIALS}"
            ),
        }
    };
    let inner = builder.clone().build().map_err(|e| {
        StoreError(format!(
            "cannot set up Azure access to {root}: {e}; Azure locations are \
             az://container/path or abfss://container@account.dfs.core.windows.net/path \
             (account from AZURE_STORAGE_ACCOUNT_NAME for az://)"
        ))
    })?;
    let account = builder
        .get_config_value(&AzureConfigKey::AccountName)
        .unwrap_or_else(|| "devstoreaccount1".to_string());
    let container = builder
        .get_config_value(&AzureConfigKey::ContainerName)
        .unwrap_or_default();
    let endpoint = if emulator {
        let base = std::env::var("AZURITE_BLOB_STORAGE_URL")
            .unwrap_or_else(|_| "http://127.0.0.1:10000".to_string());
        format!("{}/{account}", base.trim_end_matches('/'))
    } else {
        builder
            .get_config_value(&AzureConfigKey::Endpoint)
            .unwrap_or_else(|| format!("https://{account}.blob.core.windows.net"))
    };
    Ok(Arc::new(ExplainedStore::new(
        Arc::new(inner),
        Service {
            name: NAME,
            root: root.to_string(),
            container: Some(format!("container '{container}' of account '{account}'")),
            endpoint,
            endpoint_settings: "AZURE_STORAGE_ACCOUNT_NAME, AZURE_STORAGE_ENDPOINT (or \
                                AZURITE_BLOB_STORAGE_URL with AZURE_STORAGE_USE_EMULATOR)",
            timeout_settings: "the timeout (30 s)",
            timeout,
            retries,
            credentials: Arc::new(RwLock::new(credentials)),
            read_only: false,
        },
    )))
}

/// Whether `host` is an Azure storage account's (`account.blob.core.windows.net`,
/// `account.dfs.core.windows.net`).
pub(super) fn is_account_host(host: &str) -> bool {
    host.ends_with(".blob.core.windows.net") || host.ends_with(".dfs.core.windows.net")
}

/// `https://account.blob.core.windows.net/container/path` (or `.dfs.`) as
/// `abfss://container@account.dfs.core.windows.net/path`, the form whose scheme and authority
/// name one container; `None` for any other location.
pub(super) fn as_abfss(location: &str) -> Option<String> {
    let rest = location.strip_prefix("https://")?;
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    let account = host
        .strip_suffix(".blob.core.windows.net")
        .or_else(|| host.strip_suffix(".dfs.core.windows.net"))?;
    let (container, key) = path.split_once('/').unwrap_or((path, ""));
    if account.is_empty() || container.is_empty() {
        return None;
    }
    Some(format!(
        "abfss://{container}@{account}.dfs.core.windows.net/{key}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn https_blob_urls_become_abfss() {
        assert_eq!(
            as_abfss("https://acme.blob.core.windows.net/logs/2026/x.parquet").as_deref(),
            Some("abfss://logs@acme.dfs.core.windows.net/2026/x.parquet")
        );
        assert_eq!(
            as_abfss("https://acme.dfs.core.windows.net/logs").as_deref(),
            Some("abfss://logs@acme.dfs.core.windows.net/")
        );
        assert_eq!(as_abfss("https://acme.blob.core.windows.net/"), None);
        assert_eq!(as_abfss("https://example.com/logs/x.parquet"), None);
    }
}
