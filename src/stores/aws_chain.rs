//! The AWS credential chain, from the AWS SDK (`aws-config`), as object_store's S3
//! credential provider, and the region and endpoint of the AWS shared config file.
//!
//! The chain asks, in the order of the AWS SDKs: the environment (`AWS_ACCESS_KEY_ID`, …),
//! the shared files of the profile (`AWS_PROFILE`, default `default`; `AWS_CONFIG_FILE`,
//! `AWS_SHARED_CREDENTIALS_FILE`: static keys, `credential_process`, SSO tokens cached by
//! `aws sso login`, `role_arn` with `source_profile` or `credential_source`), web identity
//! (`AWS_WEB_IDENTITY_TOKEN_FILE` with `AWS_ROLE_ARN`), ECS container credentials, and EC2
//! instance metadata, which is asked once with 1 s timeouts so that a laptop is not held up.
//! Credentials that expire are fetched again before they do (see [`refresh_at`]).

use std::borrow::Cow;
use std::fmt;
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use aws_config::ecs::EcsCredentialsProvider;
use aws_config::environment::credentials::EnvironmentVariableCredentialsProvider;
use aws_config::environment::region::EnvironmentVariableRegionProvider;
use aws_config::imds;
use aws_config::imds::credentials::ImdsCredentialsProvider;
use aws_config::meta::region::RegionProviderChain;
use aws_config::profile::{ProfileFileCredentialsProvider, ProfileFileRegionProvider};
use aws_config::provider_config::ProviderConfig;
use aws_config::web_identity_token::WebIdentityTokenCredentialsProvider;
use aws_credential_types::provider::error::CredentialsError;
use aws_credential_types::provider::ProvideCredentials;
use object_store::aws::AwsCredential;
use object_store::CredentialProvider;
use tokio::sync::Mutex;

use super::options::StoreError;

/// How long the EC2 instance metadata service gets to connect and to answer, once each.
const METADATA_TIMEOUT: Duration = Duration::from_secs(1);
/// Credentials are fetched again this long before they expire (less for short-lived ones).
const REFRESH_BEFORE: Duration = Duration::from_secs(300);

/// The profile the shared files are read for: `AWS_PROFILE`, else `default`.
pub(super) fn profile_name() -> String {
    std::env::var("AWS_PROFILE")
        .ok()
        .filter(|name| !name.trim().is_empty())
        .unwrap_or_else(|| "default".to_string())
}

/// The shared files, as named in messages.
fn shared_files() -> String {
    let config = std::env::var("AWS_CONFIG_FILE").unwrap_or_else(|_| "~/.aws/config".into());
    let credentials = std::env::var("AWS_SHARED_CREDENTIALS_FILE")
        .unwrap_or_else(|_| "~/.aws/credentials".into());
    format!("{config}, {credentials}")
}

/// The region of the environment (`AWS_REGION`, `AWS_DEFAULT_REGION`) or, failing that, of
/// the profile in the shared config file. Instance metadata is not asked: set the region where
/// the bucket is not in `us-east-1`.
pub(super) fn shared_region() -> Option<String> {
    let chain = RegionProviderChain::first_try(EnvironmentVariableRegionProvider::new())
        .or_else(ProfileFileRegionProvider::new());
    // The providers read files with std::fs and make no request, so this blocks only on that.
    futures::executor::block_on(chain.region()).map(|region| region.to_string())
}

/// The endpoint of the profile's `endpoint_url` (or `AWS_ENDPOINT_URL_S3`, then
/// `AWS_ENDPOINT_URL`), as the AWS CLI reads it.
pub(super) fn shared_endpoint() -> Option<String> {
    if let Ok(endpoint) = std::env::var("AWS_ENDPOINT_URL_S3") {
        if !endpoint.trim().is_empty() {
            return Some(endpoint);
        }
    }
    let config = ProviderConfig::default();
    futures::executor::block_on(
        aws_config::default_provider::endpoint_url::endpoint_url_provider(&config),
    )
}

/// The AWS credential chain as an object_store credential provider, with its own cache.
pub(super) struct AwsChain {
    /// The chain's sources in order, each with the name messages give it.
    sources: Vec<(Cow<'static, str>, Box<dyn ProvideCredentials>)>,
    cached: Mutex<Option<Cached>>,
    /// Where the credentials came from, for the store's messages.
    described: Arc<RwLock<String>>,
    /// The longest a fetch may take.
    timeout: Duration,
    bucket: String,
}

struct Cached {
    credential: Arc<AwsCredential>,
    refresh_at: Option<SystemTime>,
}

impl fmt::Debug for AwsChain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.sources.iter().map(|(name, _)| name.as_ref()).collect();
        f.debug_struct("AwsChain")
            .field("sources", &names)
            .finish_non_exhaustive()
    }
}

impl AwsChain {
    /// The chain for `bucket` in `region`; `described` receives the source that answered.
    pub(super) fn new(
        bucket: &str,
        region: &str,
        timeout: Duration,
        described: Arc<RwLock<String>>,
    ) -> AwsChain {
        let config = ProviderConfig::default()
            .with_region(Some(aws_config::Region::new(region.to_string())));
        let metadata = imds::Client::builder()
            .connect_timeout(METADATA_TIMEOUT)
            .read_timeout(METADATA_TIMEOUT)
            .max_attempts(1)
            .configure(&config)
            .build();
        let profile = profile_name();
        let sources: Vec<(Cow<'static, str>, Box<dyn ProvideCredentials>)> =
            vec![
            (
                "the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN)"
                    .into(),
                Box::new(EnvironmentVariableCredentialsProvider::new()),
            ),
            (
                format!("profile '{profile}' of the shared files ({})", shared_files()).into(),
                Box::new(
                    ProfileFileCredentialsProvider::builder()
                        .configure(&config)
                        .build(),
                ),
            ),
            (
                "web identity (AWS_WEB_IDENTITY_TOKEN_FILE, AWS_ROLE_ARN)".into(),
                Box::new(
                    WebIdentityTokenCredentialsProvider::builder()
                        .configure(&config)
                        .build(),
                ),
            ),
            (
                "ECS container credentials (AWS_CONTAINER_CREDENTIALS_RELATIVE_URI, …_FULL_URI)"
                    .into(),
                Box::new(EcsCredentialsProvider::builder().configure(&config).build()),
            ),
            (
                "EC2 instance metadata".into(),
                Box::new(
                    ImdsCredentialsProvider::builder()
                        .configure(&config)
                        .imds_client(metadata)
                        .build(),
                ),
            ),
        ];
        AwsChain {
            sources,
            cached: Mutex::new(None),
            described,
            timeout,
            bucket: bucket.to_string(),
        }
    }

    /// The first source's credentials, or one line saying what was tried.
    async fn fetch(&self) -> Result<(aws_credential_types::Credentials, &str), StoreError> {
        let mut tried = Vec::new();
        let last = self.sources.len() - 1;
        for (index, (name, source)) in self.sources.iter().enumerate() {
            match source.provide_credentials().await {
                Ok(credentials) => return Ok((credentials, name.as_ref())),
                // This source has nothing: the next one is asked.
                Err(CredentialsError::CredentialsNotLoaded(_)) => tried.push(name.to_string()),
                // Off EC2, whatever answers at the metadata address (a refusal, a proxy's error
                // page) only means there is no instance to ask.
                Err(error) if index == last => {
                    tried.push(format!("{name} (which answered: {})", error_text(&error)))
                }
                Err(error) => {
                    return Err(StoreError(format!(
                        "cannot get AWS credentials for s3://{} from {name}: {}; fix that \
                         source, or give credentials another way (AWS_PROFILE, \
                         AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)",
                        self.bucket,
                        error_text(&error)
                    )))
                }
            }
        }
        Err(StoreError(format!(
            "no AWS credentials for s3://{}: none in {} (the instance metadata asked for {} s); \
             set AWS_PROFILE to a profile of the shared files, or AWS_ACCESS_KEY_ID and \
             AWS_SECRET_ACCESS_KEY, or AWS_SKIP_SIGNATURE=true for a public bucket",
            self.bucket,
            tried.join(", "),
            METADATA_TIMEOUT.as_secs()
        )))
    }
}

/// An SDK error and its causes, in one line. The SDK's errors carry no secret.
fn error_text(error: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(current) = cause {
        let text = current.to_string();
        if !parts.iter().any(|part| part.contains(&text)) {
            parts.push(text);
        }
        cause = current.source();
    }
    parts.join(": ").replace('\n', " ")
}

/// When credentials fetched at `fetched` and expiring at `expiry` are fetched again:
/// [`REFRESH_BEFORE`] ahead, or halfway through the life of credentials that live less than
/// twice that.
fn refresh_at(fetched: SystemTime, expiry: Option<SystemTime>) -> Option<SystemTime> {
    let expiry = expiry?;
    let life = expiry.duration_since(fetched).unwrap_or_default();
    Some(expiry - REFRESH_BEFORE.min(life / 2))
}

#[async_trait]
impl CredentialProvider for AwsChain {
    type Credential = AwsCredential;

    async fn get_credential(&self) -> object_store::Result<Arc<AwsCredential>> {
        let mut cached = self.cached.lock().await;
        if let Some(current) = cached.as_ref() {
            if current.refresh_at.is_none_or(|at| SystemTime::now() < at) {
                return Ok(Arc::clone(&current.credential));
            }
        }
        let failed = |error: StoreError| object_store::Error::Generic {
            store: "S3",
            source: Box::new(error),
        };
        let fetched_at = SystemTime::now();
        let (credentials, source) = tokio::time::timeout(self.timeout, self.fetch())
            .await
            .map_err(|_| {
                failed(StoreError(format!(
                    "getting AWS credentials for s3://{} took longer than {:?} (a \
                     credential_process, SSO or STS request that hangs?); raise --s3-timeout or \
                     fix the profile",
                    self.bucket, self.timeout
                )))
            })?
            .map_err(failed)?;
        *self
            .described
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = format!(
            "the key, secret or token from {source} is wrong or expired; check that source"
        );
        let credential = Arc::new(AwsCredential {
            key_id: credentials.access_key_id().to_string(),
            secret_key: credentials.secret_access_key().to_string(),
            token: credentials.session_token().map(str::to_string),
        });
        *cached = Some(Cached {
            credential: Arc::clone(&credential),
            refresh_at: refresh_at(fetched_at, credentials.expiry()),
        });
        Ok(credential)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refreshes_before_expiry() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let hour = Duration::from_secs(3600);
        assert_eq!(refresh_at(now, None), None);
        assert_eq!(
            refresh_at(now, Some(now + hour)),
            Some(now + hour - REFRESH_BEFORE)
        );
        // Short-lived: halfway.
        let minute = Duration::from_secs(60);
        assert_eq!(refresh_at(now, Some(now + minute)), Some(now + minute / 2));
        // Already expired: at once.
        assert_eq!(refresh_at(now, Some(now - minute)), Some(now - minute));
    }
}
