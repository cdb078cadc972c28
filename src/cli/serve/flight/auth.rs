//! Login over Flight SQL: the Basic handshake's user name and password checked against the
//! `--users` verifiers ([`super::super::scram::Verifier::checks_password`]), answered with a
//! random bearer token valid for `--flight-token-lifetime`; and [`Guarded`], which refuses
//! every other call (`ListActions` and `DoAction` included) without a valid token, and hands
//! the token's session to the call that has one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use datafusion::prelude::SessionContext;
use ring::rand::SecureRandom;
use tonic::codegen::{http, BoxFuture, Service};
use tonic::server::NamedService;
use tonic::Status;

use super::queries::Queries;

/// The one call allowed without a token.
const HANDSHAKE_PATH: &str = "/arrow.flight.protocol.FlightService/Handshake";
/// Bytes of randomness in a token.
const TOKEN_LEN: usize = 32;

/// A logged-in client: its session (a copy of the template, as a Postgres connection's) and
/// what it prepared and asked for, until its token expires.
pub struct FlightSession {
    pub user: String,
    pub ctx: SessionContext,
    expires: Instant,
    pub queries: Queries,
}

/// The tokens given out, with their sessions.
pub struct Tokens {
    lifetime: Duration,
    sessions: Mutex<HashMap<String, Arc<FlightSession>>>,
}

impl Tokens {
    pub fn new(lifetime: Duration) -> Tokens {
        Tokens {
            lifetime,
            sessions: Mutex::new(HashMap::new()),
        }
    }

    pub fn lifetime(&self) -> Duration {
        self.lifetime
    }

    /// A new token for `user`'s new session `ctx`; expired sessions are dropped.
    pub fn issue(&self, user: &str, ctx: SessionContext) -> Result<String, Status> {
        let mut bytes = [0u8; TOKEN_LEN];
        ring::rand::SystemRandom::new()
            .fill(&mut bytes)
            .map_err(|_| Status::internal("no randomness available for a token"))?;
        let token = BASE64.encode(bytes);
        let now = Instant::now();
        let session = Arc::new(FlightSession {
            user: user.to_string(),
            ctx,
            expires: now + self.lifetime,
            queries: Queries::default(),
        });
        let mut sessions = self.sessions.lock().map_err(|_| poisoned())?;
        sessions.retain(|_, s| s.expires > now);
        sessions.insert(token.clone(), session);
        Ok(token)
    }

    /// The session of the bearer token in `headers`' `authorization`.
    fn session(&self, headers: &http::HeaderMap) -> Result<Arc<FlightSession>, Status> {
        let Some(value) = headers.get(http::header::AUTHORIZATION) else {
            return Err(Status::unauthenticated(
                "no token: log in first (the Flight handshake with a user name and password)",
            ));
        };
        let token = value
            .to_str()
            .ok()
            .and_then(|v| {
                v.strip_prefix("Bearer ")
                    .or_else(|| v.strip_prefix("bearer "))
            })
            .map(str::trim)
            .ok_or_else(|| {
                Status::unauthenticated(
                    "the authorization header is not a bearer token: log in first (the Flight \
                     handshake with a user name and password)",
                )
            })?;
        let mut sessions = self.sessions.lock().map_err(|_| poisoned())?;
        let Some(session) = sessions.get(token) else {
            return Err(Status::unauthenticated(
                "the token is not valid: log in again",
            ));
        };
        if session.expires <= Instant::now() {
            sessions.remove(token);
            return Err(Status::unauthenticated(format!(
                "the token has expired (tokens are valid for {} s, --flight-token-lifetime): \
                 log in again",
                self.lifetime.as_secs()
            )));
        }
        Ok(Arc::clone(session))
    }
}

fn poisoned() -> Status {
    Status::internal("the server's token table is unusable after an internal error")
}

/// The user name and password of a Basic `authorization` header.
pub fn basic_credentials(
    headers: &tonic::metadata::MetadataMap,
) -> Result<(String, String), Status> {
    let refused = || {
        Status::unauthenticated(
            "log in with a user name and password (Basic authorization in the handshake)",
        )
    };
    let value = headers
        .get("authorization")
        .ok_or_else(refused)?
        .to_str()
        .map_err(|_| refused())?;
    let encoded = value
        .strip_prefix("Basic ")
        .or_else(|| value.strip_prefix("basic "))
        .ok_or_else(refused)?;
    // Go's Flight client (ADBC's) leaves the padding out.
    let lenient = base64::engine::GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        base64::engine::GeneralPurposeConfig::new()
            .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
    );
    let decoded = lenient.decode(encoded.trim()).map_err(|_| refused())?;
    let text = String::from_utf8(decoded).map_err(|_| refused())?;
    let (user, password) = text.split_once(':').ok_or_else(refused)?;
    Ok((user.to_string(), password.to_string()))
}

/// The Flight service behind a check of each call's bearer token: the handshake goes through
/// as it is; any other call goes through with the token's [`FlightSession`] in its
/// extensions, or is answered `UNAUTHENTICATED`.
#[derive(Clone)]
pub struct Guarded<S> {
    inner: S,
    tokens: Arc<Tokens>,
}

impl<S> Guarded<S> {
    pub fn new(inner: S, tokens: Arc<Tokens>) -> Guarded<S> {
        Guarded { inner, tokens }
    }
}

impl<S: NamedService> NamedService for Guarded<S> {
    const NAME: &'static str = S::NAME;
}

impl<S, B> Service<http::Request<B>> for Guarded<S>
where
    S: Service<http::Request<B>, Response = http::Response<tonic::body::Body>>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    B: Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = S::Error;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<B>) -> Self::Future {
        if request.uri().path() != HANDSHAKE_PATH {
            match self.tokens.session(request.headers()) {
                Ok(session) => {
                    request.extensions_mut().insert(session);
                }
                Err(status) => return Box::pin(async move { Ok(status.into_http()) }),
            }
        }
        Box::pin(self.inner.call(request))
    }
}
