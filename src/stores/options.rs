//! S3 settings (the options over the AWS environment, their parsing), the request timeouts and
//! retries of every store, and the error type.

use std::fmt;
use std::time::Duration;

use datafusion::common::{plan_datafusion_err, plan_err, DataFusionError, Result};
use object_store::{BackoffConfig, ClientConfigKey, RetryConfig};

/// Timeout of one S3 request unless set otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// Retries of a failed S3 request (connection errors, 5xx, timeouts) unless set otherwise.
pub const DEFAULT_RETRIES: usize = 3;
/// Longest wait between two retries.
pub(super) const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// Longest wait for a TCP connection to the endpoint.
pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The `OPTIONS` keys of `CREATE EXTERNAL TABLE` that configure S3, without the `aws.` prefix.
pub const TABLE_OPTION_KEYS: [&str; 9] = [
    "access_key_id",
    "secret_access_key",
    "session_token",
    "region",
    "endpoint",
    "allow_http",
    "skip_signature",
    "timeout",
    "retries",
];

/// S3 settings that override the AWS environment. `None` keeps the environment's value (or
/// object_store's default: region `us-east-1`, HTTPS only).
///
/// Its `Debug` output shows whether a secret is set, never the secret.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct S3Options {
    /// Endpoint of an S3-compatible store, e.g. `http://127.0.0.1:9000` (`AWS_ENDPOINT_URL`).
    pub endpoint: Option<String>,
    /// Region (`AWS_REGION`).
    pub region: Option<String>,
    /// Allow a plain-HTTP endpoint (`AWS_ALLOW_HTTP`).
    pub allow_http: Option<bool>,
    /// Access key id (`AWS_ACCESS_KEY_ID`).
    pub access_key_id: Option<String>,
    /// Secret access key (`AWS_SECRET_ACCESS_KEY`).
    pub secret_access_key: Option<String>,
    /// Session token of temporary credentials (`AWS_SESSION_TOKEN`).
    pub session_token: Option<String>,
    /// Send unsigned requests (public buckets).
    pub skip_signature: Option<bool>,
    /// Timeout of one request [default: 30 s].
    pub timeout: Option<Duration>,
    /// Retries of a failed request [default: 3, or `AWS_MAX_ATTEMPTS` - 1].
    pub retries: Option<usize>,
}

impl fmt::Debug for S3Options {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fn hidden(secret: &Option<String>) -> Option<&'static str> {
            secret.as_ref().map(|_| "<hidden>")
        }
        f.debug_struct("S3Options")
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .field("allow_http", &self.allow_http)
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &hidden(&self.secret_access_key))
            .field("session_token", &hidden(&self.session_token))
            .field("skip_signature", &self.skip_signature)
            .field("timeout", &self.timeout)
            .field("retries", &self.retries)
            .finish()
    }
}

impl S3Options {
    /// Sets one option by its `CREATE EXTERNAL TABLE` name without the `aws.` prefix (see
    /// [`TABLE_OPTION_KEYS`]). `timeout` is in seconds (`30`, `2.5`, `30s`).
    pub fn set(&mut self, key: &str, value: &str) -> Result<()> {
        let text = || Some(value.to_string());
        match key {
            "access_key_id" => self.access_key_id = text(),
            "secret_access_key" => self.secret_access_key = text(),
            "session_token" => self.session_token = text(),
            "region" => self.region = text(),
            "endpoint" | "endpoint_url" => self.endpoint = text(),
            "allow_http" => self.allow_http = Some(parse_bool(key, value)?),
            "skip_signature" | "nosign" => self.skip_signature = Some(parse_bool(key, value)?),
            "timeout" => {
                self.timeout = Some(
                    parse_seconds(value).map_err(|e| plan_datafusion_err!("'aws.timeout': {e}"))?,
                )
            }
            "retries" => {
                self.retries = Some(value.trim().parse().map_err(|_| {
                    plan_datafusion_err!("'aws.retries' must be a whole number, not '{value}'")
                })?)
            }
            _ => {
                return plan_err!(
                    "unknown S3 option 'aws.{key}' (known: {})",
                    TABLE_OPTION_KEYS.map(|k| format!("aws.{k}")).join(", ")
                )
            }
        }
        Ok(())
    }

    /// `self` with every option that `other` sets replaced by `other`'s.
    pub fn overridden_by(&self, other: &S3Options) -> S3Options {
        fn pick<T: Clone>(base: &Option<T>, over: &Option<T>) -> Option<T> {
            over.clone().or_else(|| base.clone())
        }
        S3Options {
            endpoint: pick(&self.endpoint, &other.endpoint),
            region: pick(&self.region, &other.region),
            allow_http: pick(&self.allow_http, &other.allow_http),
            access_key_id: pick(&self.access_key_id, &other.access_key_id),
            secret_access_key: pick(&self.secret_access_key, &other.secret_access_key),
            session_token: pick(&self.session_token, &other.session_token),
            skip_signature: pick(&self.skip_signature, &other.skip_signature),
            timeout: pick(&self.timeout, &other.timeout),
            retries: pick(&self.retries, &other.retries),
        }
    }
}

fn parse_bool(key: &str, value: &str) -> Result<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Ok(true),
        "false" | "0" | "no" | "off" => Ok(false),
        _ => plan_err!("'aws.{key}' must be true or false, not '{value}'"),
    }
}

/// Seconds as a positive number, optionally followed by `s` (`30`, `2.5`, `30s`).
pub fn parse_seconds(value: &str) -> std::result::Result<Duration, String> {
    let number = value.trim();
    let number = number.strip_suffix('s').unwrap_or(number).trim();
    match number.parse::<f64>() {
        Ok(seconds) if seconds > 0.0 && seconds.is_finite() && seconds < 1e9 => {
            Ok(Duration::from_secs_f64(seconds))
        }
        _ => Err(format!(
            "expected a number of seconds above 0 such as 30 or 2.5, not '{value}'"
        )),
    }
}

/// The client settings of a store whose requests time out after `timeout`: that request
/// timeout, and a connect timeout of at most [`CONNECT_TIMEOUT`].
pub(super) fn client_timeouts(timeout: Duration) -> [(ClientConfigKey, String); 2] {
    let milliseconds = |d: Duration| format!("{}ms", d.as_millis().max(1));
    [
        (ClientConfigKey::Timeout, milliseconds(timeout)),
        (
            ClientConfigKey::ConnectTimeout,
            milliseconds(timeout.min(CONNECT_TIMEOUT)),
        ),
    ]
}

/// Retries of failed requests with back-offs from 0.1 s doubling up to [`MAX_BACKOFF`],
/// bounded as a whole so a dead endpoint fails in about `retries + 1` timeouts at most.
pub(super) fn retry_config(timeout: Duration, retries: usize) -> RetryConfig {
    RetryConfig {
        backoff: BackoffConfig {
            init_backoff: Duration::from_millis(100),
            max_backoff: MAX_BACKOFF,
            base: 2.0,
        },
        max_retries: retries,
        retry_timeout: (timeout + MAX_BACKOFF) * (retries as u32 + 1),
    }
}

/// A failed object store request, said in one line with what to change. Never contains a secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreError(pub String);

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for StoreError {}

/// The [`StoreError`] behind `error`, if any of its causes is one.
pub fn find_error<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a StoreError> {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(current) = cause {
        if let Some(found) = current.downcast_ref::<StoreError>() {
            return Some(found);
        }
        cause = current.source();
    }
    None
}

/// An object store error while reading `location` (listing it, looking for a Delta log), as
/// one line: the store's explanation when
/// there is one.
pub(crate) fn failure(location: &str, error: object_store::Error) -> DataFusionError {
    if let Some(explained) = find_error(&error) {
        return DataFusionError::Execution(explained.to_string());
    }
    if location.starts_with("http://") || location.starts_with("https://") {
        // The server's answer, without the error page it came with.
        let text = error.to_string();
        let answer = text
            .split_once("status code: ")
            .map(|(_, rest)| rest.split(':').next().unwrap_or(rest).trim().to_string())
            .unwrap_or(text);
        return DataFusionError::Execution(format!(
            "cannot list {location}: an HTTP location is one file; a prefix or a glob can be \
             listed only where the server speaks WebDAV (it answered: {answer})"
        ));
    }
    DataFusionError::Execution(format!("cannot read {location}: {error}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_hides_secrets() {
        let options = S3Options {
            access_key_id: Some("AKIDEXAMPLE".into()),
            secret_access_key: Some("very-secret-value".into()),
            session_token: Some("token-value".into()),
            ..S3Options::default()
        };
        let debug = format!("{options:?}");
        assert!(debug.contains("AKIDEXAMPLE"));
        assert!(!debug.contains("very-secret-value"));
        assert!(!debug.contains("token-value"));
    }

    #[test]
    fn table_options_parse_and_override() {
        let mut table = S3Options::default();
        table.set("endpoint", "http://127.0.0.1:9000").unwrap();
        table.set("allow_http", "true").unwrap();
        table.set("timeout", "2.5s").unwrap();
        table.set("retries", "0").unwrap();
        assert_eq!(table.timeout, Some(Duration::from_millis(2500)));
        assert!(table.set("allow_http", "maybe").is_err());
        assert!(table.set("retries", "-1").is_err());
        let error = table.set("endpiont", "x").unwrap_err().to_string();
        assert!(error.contains("aws.endpoint"), "{error}");

        let base = S3Options {
            region: Some("eu-west-1".into()),
            endpoint: Some("https://elsewhere".into()),
            ..S3Options::default()
        };
        let merged = base.overridden_by(&table);
        assert_eq!(merged.region.as_deref(), Some("eu-west-1"));
        assert_eq!(merged.endpoint.as_deref(), Some("http://127.0.0.1:9000"));
        assert_eq!(merged.retries, Some(0));
    }

    #[test]
    fn seconds() {
        assert_eq!(parse_seconds("30"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_seconds("0.5s"), Ok(Duration::from_millis(500)));
        assert!(parse_seconds("0").is_err());
        assert!(parse_seconds("soon").is_err());
    }
}
