//! The object store registry of a session: a store per bucket, container or host, built on
//! first use by the service's module (`s3`, `azure`, `gcs`, `http`); every other location
//! (local files) is handed to the registry it wraps.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, RwLock};

use datafusion::common::{plan_datafusion_err, plan_err, DataFusionError, Result};
use datafusion::execution::object_store::ObjectStoreRegistry;
use object_store::ObjectStore;
use url::Url;

use super::options::S3Options;
use super::{azure, gcs, http, s3};

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

/// The bucket of an `s3://` URL.
pub(super) fn bucket_of(url: &Url) -> Result<&str> {
    match url.host_str() {
        Some(bucket) if !bucket.is_empty() => Ok(bucket),
        _ => plan_err!("{url} names no bucket; expected s3://bucket/key"),
    }
}

/// Builds the store of `url`'s bucket, container or host, or says why there is none.
fn build_for(url: &Url, root: &str, options: &S3Options) -> Result<Arc<dyn ObjectStore>> {
    let built = match url.scheme() {
        "s3" | "s3a" => s3::build_store(bucket_of(url)?, options),
        "az" | "azure" | "abfs" | "abfss" | "adl" => azure::build_store(root),
        "gs" => gcs::build_store(url.host_str().unwrap_or_default()),
        "http" | "https" if url.host_str().is_some_and(azure::is_account_host) => {
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
pub(super) struct StoreRegistry {
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
    pub(super) fn new(inner: Arc<dyn ObjectStoreRegistry>, options: S3Options) -> StoreRegistry {
        StoreRegistry {
            inner,
            options: RwLock::new(options),
            stores: RwLock::new(HashMap::new()),
        }
    }

    pub(super) fn options(&self) -> S3Options {
        self.options
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    pub(super) fn set_options(&self, options: S3Options) {
        *self
            .options
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = options;
        self.stores
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .retain(|_, (_, explicit)| *explicit);
    }

    pub(super) fn insert(
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
