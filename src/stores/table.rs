//! `CREATE EXTERNAL TABLE` on object store locations: `OPTIONS ('aws.…' …)` configure the
//! location's bucket, and Azure `https://` locations are read in their `abfss://` form.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::catalog::{Session, TableProvider, TableProviderFactory};
use datafusion::common::{plan_err, DataFusionError, Result};
use datafusion::logical_expr::CreateExternalTable;
use url::Url;

use super::options::S3Options;
use super::registry::{bucket_of, canonical_location, StoreRegistry};
use super::s3::build_store;

/// Marks a session whose tables are read by other processes (the executors of a cluster):
/// `CREATE EXTERNAL TABLE … OPTIONS ('aws.…')` is refused there, since those options would
/// configure this process's S3 access only, and the executors would read the table with their
/// own settings.
#[derive(Debug, Clone)]
pub struct TablesReadElsewhere {
    /// What reads the tables, and where their S3 settings are set instead (for the error).
    pub remedy: String,
}

/// Wraps a `CREATE EXTERNAL TABLE` factory: `OPTIONS ('aws.…' …)` configure the bucket of an
/// `s3://` location (over the session's S3 options), are taken out of the options the file
/// format sees, and secrets are masked in the stored table definition. Locations are passed on
/// in their canonical form (`canonical_location`).
#[derive(Debug)]
pub(super) struct StoreTableFactory {
    pub(super) inner: Arc<dyn TableProviderFactory>,
    pub(super) registry: Arc<StoreRegistry>,
}

#[async_trait]
impl TableProviderFactory for StoreTableFactory {
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
        let canonical: Vec<String> = cmd
            .locations
            .iter()
            .map(|location| canonical_location(location).into_owned())
            .collect();
        if aws.is_empty() {
            if canonical == cmd.locations {
                return self.inner.create(state, cmd).await;
            }
            let mut cmd = cmd.clone();
            cmd.locations = canonical;
            return self.inner.create(state, &cmd).await;
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
            self.registry.insert(&format!("s3://{bucket}"), store, true);
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
