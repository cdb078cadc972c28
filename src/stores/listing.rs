//! Listing object store locations (`s3://`, `az://`, `abfss://`, `gs://`, `http(s)://`) for a
//! table: an object, a prefix, or a glob over keys, resolved to the URLs a listing table reads
//! and the file names its format is inferred from.

use datafusion::common::{plan_datafusion_err, plan_err, DataFusionError, Result};
use datafusion::datasource::listing::ListingTableUrl;
use datafusion::execution::context::SessionState;
use datafusion::execution::object_store::ObjectStoreUrl;
use futures::TryStreamExt;
use object_store::path::Path as ObjectPath;
use object_store::ObjectStoreExt;
use url::Url;

use super::options::{failure, find_error};

/// An object store location resolved to what a listing table needs.
#[derive(Debug)]
pub(crate) struct StoreListing {
    /// The URLs the table lists (one per object for a glob).
    pub(crate) urls: Vec<ListingTableUrl>,
    /// Whether the location is a prefix (a "directory").
    pub(crate) directory: bool,
    /// The objects found, as `scheme://bucket/key`, to infer the format from.
    pub(crate) files: Vec<String>,
}

/// Lists an object store location: an object, a prefix (a key ending in `/`, the bucket
/// itself, or a key that names no object but has objects under `key/`), or a glob over keys.
/// The key is taken literally (no percent-decoding), as `aws s3` does.
pub(crate) async fn list_location(state: &SessionState, location: &str) -> Result<StoreListing> {
    let (scheme, rest) = location.split_once("://").unwrap_or(("", location));
    let (authority, key) = rest.split_once('/').unwrap_or((rest, ""));
    let service = service_name(scheme);
    if authority.is_empty() {
        return plan_err!("{location} names no bucket or host; expected {scheme}://bucket/key");
    }
    let root = format!("{scheme}://{authority}");
    let store = state
        .runtime_env()
        .object_store(ObjectStoreUrl::parse(&root)?)
        .map_err(|e| match find_error(&e) {
            Some(explained) => DataFusionError::Plan(explained.to_string()),
            None => plan_datafusion_err!(
                "{location}: this session cannot read {scheme}:// locations ({e}); give it \
                 object store support with calibsql::register_object_stores"
            ),
        })?;
    let store = store.as_ref();
    let object_url = |key: &str| -> Result<ListingTableUrl> {
        let mut url = Url::parse(&format!("{root}/"))
            .map_err(|e| plan_datafusion_err!("invalid bucket name in {location}: {e}"))?;
        if let Ok(mut segments) = url.path_segments_mut() {
            segments.pop_if_empty().extend(key.split('/'));
        }
        ListingTableUrl::try_new(url, None)
    };
    let display = |key: &str| format!("{root}/{key}");

    if let Some(wildcard) = key.find(['*', '?', '[']) {
        let prefix = &key[..key[..wildcard].rfind('/').map_or(0, |slash| slash + 1)];
        let pattern = glob::Pattern::new(key)
            .map_err(|e| plan_datafusion_err!("invalid glob {location}: {e}"))?;
        let options = glob::MatchOptions {
            case_sensitive: true,
            require_literal_separator: true,
            require_literal_leading_dot: true,
        };
        let mut keys: Vec<String> = list_objects(store, prefix, location)
            .await?
            .into_iter()
            .filter(|object| pattern.matches_with(object, options))
            .collect();
        if keys.is_empty() {
            return plan_err!("no objects match {location}");
        }
        keys.sort();
        return Ok(StoreListing {
            urls: keys.iter().map(|k| object_url(k)).collect::<Result<_>>()?,
            directory: false,
            files: keys.iter().map(|k| display(k)).collect(),
        });
    }

    let (prefix, objects) = if key.is_empty() || key.ends_with('/') {
        let objects = list_objects(store, key, location).await?;
        if objects.is_empty() {
            return plan_err!("no objects under {location}");
        }
        (key.to_string(), objects)
    } else {
        let path = ObjectPath::parse(key)
            .map_err(|e| plan_datafusion_err!("invalid {service} key in {location}: {e}"))?;
        let prefix = format!("{key}/");
        match store.head(&path).await {
            Ok(_) => {
                return Ok(StoreListing {
                    urls: vec![object_url(key)?],
                    directory: false,
                    files: vec![location.to_string()],
                })
            }
            // Explained failures (credentials, endpoint) are final.
            Err(e)
                if find_error(&e).is_some()
                    && !matches!(e, object_store::Error::NotFound { .. }) =>
            {
                return Err(failure(location, e))
            }
            // Not an object: maybe a prefix written without its trailing '/'. (Some
            // S3-compatible stores answer a HEAD of such a "directory" with a 5xx, not 404.)
            Err(e) => {
                let objects = list_objects(store, &prefix, location).await?;
                if objects.is_empty() {
                    return match e {
                        object_store::Error::NotFound { .. } => {
                            plan_err!("no such {service} object or prefix: {location}")
                        }
                        e => Err(failure(location, e)),
                    };
                }
                (prefix, objects)
            }
        }
    };
    // The files DataFusion will read: those directly under the prefix and in `key=value`
    // (Hive partition) "sub-directories"; hidden (`.x`) and marker (`_x`) names skipped.
    let files = objects
        .iter()
        .filter(|object| {
            let relative = &object[prefix.len()..];
            let mut parts: Vec<&str> = relative.split('/').collect();
            let name = parts.pop().unwrap_or_default();
            !name.is_empty()
                && !name.starts_with(['.', '_'])
                && parts
                    .iter()
                    .all(|dir| dir.contains('=') && !dir.starts_with(['.', '_']))
        })
        .map(|object| display(object))
        .collect();
    let mut url = Url::parse(&format!("{root}/"))
        .map_err(|e| plan_datafusion_err!("invalid bucket name in {location}: {e}"))?;
    if let Ok(mut segments) = url.path_segments_mut() {
        segments
            .pop_if_empty()
            .extend(
                prefix
                    .trim_end_matches('/')
                    .split('/')
                    .filter(|s| !s.is_empty()),
            )
            .push("");
    }
    Ok(StoreListing {
        urls: vec![ListingTableUrl::try_new(url, None)?],
        directory: true,
        files,
    })
}

/// The keys of all objects under `prefix` (a key prefix ending in `/`, or empty for the
/// whole bucket).
async fn list_objects(
    store: &dyn object_store::ObjectStore,
    prefix: &str,
    location: &str,
) -> Result<Vec<String>> {
    let trimmed = prefix.trim_end_matches('/');
    let path = if trimmed.is_empty() {
        None
    } else {
        Some(
            ObjectPath::parse(trimmed)
                .map_err(|e| plan_datafusion_err!("invalid key in {location}: {e}"))?,
        )
    };
    let objects: Vec<object_store::ObjectMeta> = store
        .list(path.as_ref())
        .try_collect()
        .await
        .map_err(|e| failure(location, e))?;
    Ok(objects
        .into_iter()
        .map(|object| object.location.to_string())
        .collect())
}

/// The service a scheme names, for messages.
fn service_name(scheme: &str) -> &'static str {
    match scheme {
        "s3" | "s3a" => super::s3::NAME,
        "gs" => super::gcs::NAME,
        "http" | "https" => super::http::NAME,
        _ => super::azure::NAME,
    }
}
