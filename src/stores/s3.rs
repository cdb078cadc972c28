//! The S3 store of one bucket: the AWS environment, the shared config files and the options,
//! with bounded timeouts and retries, and credentials from the AWS chain (`aws_chain`) unless
//! keys are given.

use std::sync::{Arc, RwLock};

use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::{ClientConfigKey, ObjectStore};
use url::Url;

use super::aws_chain::{self, AwsChain};
use super::explained::{ExplainedStore, Service};
use super::options::{
    client_timeouts, retry_config, S3Options, StoreError, DEFAULT_RETRIES, DEFAULT_TIMEOUT,
};

/// The service, as messages name it.
pub(super) const NAME: &str = "S3";

/// Builds the store of `bucket`. Settings, later ones winning: the AWS shared config file of
/// the profile (`region`, `endpoint_url`), the AWS environment, `options`. Credentials: keys
/// given in `options` or the environment, else the AWS credential chain, asked at the first
/// request (so building a store reads no credentials and makes no request).
pub fn build_store(bucket: &str, options: &S3Options) -> Result<Arc<dyn ObjectStore>, StoreError> {
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

    let configured = |builder: &AmazonS3Builder, key: AmazonS3ConfigKey| {
        builder
            .get_config_value(&key)
            .filter(|value| !value.trim().is_empty())
    };
    let region = configured(&builder, AmazonS3ConfigKey::Region)
        .or_else(|| configured(&builder, AmazonS3ConfigKey::DefaultRegion))
        .or_else(aws_chain::shared_region)
        .unwrap_or_else(|| "us-east-1".to_string());
    builder = builder.with_region(&region);
    let mut endpoint = configured(&builder, AmazonS3ConfigKey::Endpoint);
    if endpoint.is_none() {
        endpoint = aws_chain::shared_endpoint();
        if let Some(shared) = &endpoint {
            builder = builder.with_endpoint(shared);
        }
    }
    let allow_http = builder
        .get_config_value(&AmazonS3ConfigKey::Client(ClientConfigKey::AllowHttp))
        .is_some_and(|v| v.eq_ignore_ascii_case("true") || v == "1");
    if let Some(endpoint) = &endpoint {
        let url = Url::parse(endpoint).map_err(|e| {
            StoreError(format!(
                "invalid S3 endpoint '{endpoint}' ({e}); expected a URL such as http://127.0.0.1:9000"
            ))
        })?;
        if url.scheme() == "http" && !allow_http {
            return Err(StoreError(format!(
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
    for (key, value) in client_timeouts(timeout) {
        builder = builder.with_config(AmazonS3ConfigKey::Client(key), value);
    }
    builder = builder.with_retry(retry_config(timeout, retries));

    let signed = !builder
        .get_config_value(&AmazonS3ConfigKey::SkipSignature)
        .is_some_and(|v| v.eq_ignore_ascii_case("true") || v == "1");
    // Keys given as options or in the environment are used as they are; otherwise the chain.
    let keyed = configured(&builder, AmazonS3ConfigKey::AccessKeyId).is_some();
    let credentials = if options.access_key_id.is_some() {
        "the access key or secret given in OPTIONS ('aws.access_key_id' …, \
         'aws.secret_access_key' …) or S3Options is wrong; check them"
    } else if keyed {
        "the access key or secret is wrong; check AWS_ACCESS_KEY_ID and \
         AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN for temporary credentials)"
    } else {
        "the credentials of the AWS chain are wrong; check AWS_PROFILE and its shared files"
    };
    let credentials = Arc::new(RwLock::new(credentials.to_string()));
    if signed && !keyed {
        builder = builder.with_credentials(Arc::new(AwsChain::new(
            bucket,
            &region,
            timeout,
            Arc::clone(&credentials),
        )));
    }

    let inner = builder.build().map_err(|e| {
        // Builder errors name missing or malformed settings, never their values.
        StoreError(format!("cannot set up S3 access to bucket '{bucket}': {e}"))
    })?;
    Ok(Arc::new(ExplainedStore::new(
        Arc::new(inner),
        Service {
            name: NAME,
            root: format!("s3://{bucket}"),
            container: Some(format!("bucket '{bucket}'")),
            endpoint: endpoint.unwrap_or_else(|| format!("https://s3.{region}.amazonaws.com")),
            endpoint_settings:
                "--s3-endpoint / AWS_ENDPOINT_URL (or endpoint_url in the AWS profile)",
            timeout_settings: "--s3-timeout / 'aws.timeout'",
            timeout,
            retries,
            credentials,
            read_only: false,
        },
    )))
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
