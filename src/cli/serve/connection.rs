//! One client connection: login (SCRAM-SHA-256 against `--users`), then its own session,
//! whose statements run through calibsql's planning (named arguments), the policy, the
//! query timeout and cancellation.
//!
//! pgwire runs the protocol; datafusion-postgres parses Postgres SQL, answers the catalog
//! queries of clients (`pg_catalog`), `SET`/`SHOW` of Postgres settings, transactions and
//! cursors, and decodes bound parameters. Every other statement is run here ([`Exec`]).

use std::collections::HashMap;
use std::fmt::Debug;
use std::os::fd::RawFd;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use async_trait::async_trait;
use datafusion::arrow::datatypes::Schema;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::{DataFusionError, ParamValues};
use datafusion::execution::SendableRecordBatchStream;
use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::SessionContext;
use datafusion::sql::parser::Statement as DFStatement;
use datafusion::sql::sqlparser::ast::{Set, Statement};
use datafusion_postgres::arrow_pg::datatypes::{encode_recordbatch, field_into_pg_type};
use datafusion_postgres::datafusion_pg_catalog::sql::PostgresCompatibilityParser;
use datafusion_postgres::hooks::cursor::CursorStatementHook;
use datafusion_postgres::hooks::set_show::SetShowHook;
use datafusion_postgres::hooks::transactions::TransactionStatementHook;
use datafusion_postgres::hooks::HookClient;
use datafusion_postgres::pgwire;
use datafusion_postgres::{DfSessionService, Parser, QueryHook};
use futures::{Sink, SinkExt, StreamExt};
use pgwire::api::auth::{
    finish_authentication, protocol_negotiation, save_startup_parameters_to_metadata,
    DefaultServerParameterProvider, StartupHandler,
};
use pgwire::api::cancel::CancelHandler;
use pgwire::api::portal::{Format, Portal};
use pgwire::api::query::{ExtendedQueryHandler, SimpleQueryHandler};
use pgwire::api::results::{FieldInfo, QueryResponse, Response, Tag};
use pgwire::api::stmt::QueryParser;
use pgwire::api::store::PortalStore;
use pgwire::api::{
    ClientInfo, ClientPortalStore, PgWireConnectionState, PgWireServerHandlers,
    PidSecretKeyGenerator, RandomPidSecretKeyGenerator, Type,
};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::cancel::CancelRequest;
use pgwire::messages::startup::Authentication;
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};
use pgwire::types::format::FormatOptions;
use tokio::sync::OwnedSemaphorePermit;

use super::log;
use super::policy::refusal;
use super::scram::{self, Verifier};
use super::sessions::{Sessions, DATABASE};
use super::statements;
use super::users::Users;

/// The statement type datafusion-postgres keeps in portals.
type DfStatementPortal = (String, Option<(Statement, LogicalPlan)>);

/// Where the client's `statement_timeout` is kept (datafusion-postgres' `SET` hook).
const STATEMENT_TIMEOUT_KEY: &str = "statement_timeout_ms";

/// A connection's process id and secret key, what a cancel request names.
type CancelKey = (i32, Vec<u8>);

/// What all connections share.
pub struct Server {
    pub sessions: Sessions,
    pub users: Users,
    pub require_tls: bool,
    pub read_only: bool,
    /// `--query-timeout` (`None`: no limit).
    pub query_timeout: Option<Duration>,
    /// The client of the cluster at `--remote`: queries over files run there.
    pub remote: Option<Arc<SessionContext>>,
    /// Salts of the users who do not exist (a login as one fails like a wrong password).
    pub mock_secret: [u8; 32],
    pids: RandomPidSecretKeyGenerator,
    /// Cancel keys of the connections logged in.
    cancels: Mutex<HashMap<CancelKey, Weak<QueryControl>>>,
    /// Where statements execute: threads of their own, so that the connections' (the
    /// protocol, cancel requests, timeouts) are never all busy with a long operator.
    queries: Option<tokio::runtime::Runtime>,
}

impl Drop for Server {
    fn drop(&mut self) {
        // Dropped on the connections' runtime, where a runtime cannot wait for its threads.
        if let Some(queries) = self.queries.take() {
            queries.shutdown_background();
        }
    }
}

impl Server {
    pub fn new(
        sessions: Sessions,
        users: Users,
        require_tls: bool,
        read_only: bool,
        query_timeout: Option<Duration>,
        remote: Option<Arc<SessionContext>>,
    ) -> anyhow::Result<Server> {
        let nonce = scram::random_nonce().map_err(anyhow::Error::msg)?;
        let mock_secret = ring::digest::digest(&ring::digest::SHA256, nonce.as_bytes());
        Ok(Server {
            sessions,
            users,
            require_tls,
            read_only,
            query_timeout,
            remote,
            mock_secret: mock_secret.as_ref().try_into().expect("32 bytes"),
            pids: RandomPidSecretKeyGenerator::default(),
            cancels: Mutex::new(HashMap::new()),
            queries: Some(
                calibsql::nesting::runtime_builder()
                    .thread_name("calibsql-query")
                    .build()
                    .map_err(|e| anyhow::anyhow!("cannot start the query runtime: {e}"))?,
            ),
        })
    }

    /// The runtime statements execute on.
    pub fn queries(&self) -> &tokio::runtime::Handle {
        self.queries
            .as_ref()
            .expect("the query runtime lives as long as the server")
            .handle()
    }
}

/// A connection's running statement: its clock, its cancellation (a Postgres cancel
/// request, the time limit, the client going away) and the connection's socket, watched for
/// the client closing it while the statement runs.
pub struct QueryControl {
    current: Mutex<Option<Arc<QueryToken>>>,
    /// The connection's socket (owned by pgwire's connection loop, which outlives every
    /// statement of the connection: it is only looked at while one runs).
    socket: Option<RawFd>,
    /// The client's address, for the log.
    peer: String,
}

/// One statement, from the arrival of its first message (a simple `Query`, or `Parse`/
/// `Execute` of the extended protocol) to the end of its answer (or `Sync`).
struct QueryToken {
    cancelled: std::sync::atomic::AtomicBool,
    notify: tokio::sync::Notify,
    /// The flag the statement's operators look at ([`calibsql::cancel`]).
    flag: calibsql::cancel::Cancel,
    /// When its first message arrived: the time limit counts from here, parsing and
    /// planning included.
    started: tokio::time::Instant,
    /// Its time limit as it began (`--query-timeout`, or the client's `statement_timeout`).
    limit: Option<Duration>,
}

impl QueryToken {
    fn new(limit: Option<Duration>) -> QueryToken {
        QueryToken {
            cancelled: Default::default(),
            notify: Default::default(),
            flag: Default::default(),
            started: tokio::time::Instant::now(),
            limit,
        }
    }

    fn is_cancelled(&self) -> bool {
        self.cancelled.load(std::sync::atomic::Ordering::SeqCst)
    }

    async fn cancelled(&self) {
        loop {
            let notified = self.notify.notified();
            if self.is_cancelled() {
                return;
            }
            notified.await;
        }
    }

    /// Stops the statement: its operators (and planning phases) see the flag, its waits end.
    fn cancel(&self) {
        self.flag.cancel();
        self.cancelled
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.notify.notify_waiters();
    }

    /// When `limit` runs out for this statement.
    fn deadline(&self, limit: Option<Duration>) -> Option<Deadline> {
        limit.map(|limit| Deadline {
            at: self.started + limit,
            limit,
        })
    }
}

/// When a statement runs out of time, and its limit (for the error).
#[derive(Clone, Copy)]
struct Deadline {
    at: tokio::time::Instant,
    limit: Duration,
}

/// How often a running statement looks whether its client closed the connection.
const CLOSED_CHECK: Duration = Duration::from_millis(250);

/// Whether the peer of `socket` closed the connection (or it broke): Linux reports the
/// peer's FIN as `POLLRDHUP` even while unread bytes are queued, a reset as `POLLHUP` or
/// `POLLERR`. What Postgres itself does with `client_connection_check_interval`.
fn peer_closed(socket: RawFd) -> bool {
    #[cfg(target_os = "linux")]
    let events = libc::POLLRDHUP;
    #[cfg(not(target_os = "linux"))]
    let events = 0;
    let mut poll = libc::pollfd {
        fd: socket,
        events,
        revents: 0,
    };
    // SAFETY: one valid pollfd; a zero timeout never blocks. The descriptor is the
    // connection's, open while its statements run.
    let ready = unsafe { libc::poll(&mut poll, 1, 0) };
    ready > 0 && poll.revents & (events | libc::POLLHUP | libc::POLLERR) != 0
}

impl QueryControl {
    fn new(socket: Option<RawFd>, peer: String) -> QueryControl {
        QueryControl {
            current: Mutex::new(None),
            socket,
            peer,
        }
    }

    /// The running statement, or a new one that starts now with `limit`.
    fn begin(&self, limit: Option<Duration>) -> Arc<QueryToken> {
        let mut current = self.current.lock().unwrap();
        Arc::clone(current.get_or_insert_with(|| Arc::new(QueryToken::new(limit))))
    }

    /// The running statement is over (its answer sent, or `Sync`).
    fn end(&self) {
        self.current.lock().unwrap().take();
    }

    /// A cancel request: the running statement stops (one that starts later is not
    /// affected).
    fn cancel(&self) {
        if let Some(token) = self.current.lock().unwrap().as_ref() {
            token.cancel();
        }
    }

    /// Resolves with the error that stops `token`'s statement: a cancel request, its
    /// `deadline`, or its client closing the connection. The statement's flag is then set,
    /// so that what it runs on the query threads stops too.
    async fn stopped(&self, token: &QueryToken, deadline: Option<Deadline>) -> PgWireError {
        let timeout = async {
            match deadline {
                Some(deadline) => tokio::time::sleep_until(deadline.at).await,
                None => std::future::pending().await,
            }
        };
        let closed = async {
            let Some(socket) = self.socket else {
                return std::future::pending().await;
            };
            loop {
                tokio::time::sleep(CLOSED_CHECK).await;
                if peer_closed(socket) {
                    return;
                }
            }
        };
        let error = tokio::select! {
            _ = token.cancelled() => cancelled(),
            _ = timeout => timed_out(deadline.map(|d| d.limit).unwrap_or_default()),
            _ = closed => {
                log(&format!(
                    "connection from {}: the client closed it while a statement ran; the \
                     statement is cancelled",
                    self.peer
                ));
                cancelled()
            }
        };
        token.cancel();
        error
    }
}

/// A connection's handlers (pgwire asks for them once per connection).
pub struct Connection {
    inner: Arc<ConnectionInner>,
}

impl Connection {
    /// A connection that may log in, holding one of the `--max-connections` permits, on
    /// `socket` (watched while a statement runs: see [`QueryControl`]).
    pub fn new(
        server: Arc<Server>,
        permit: OwnedSemaphorePermit,
        socket: RawFd,
        peer: String,
    ) -> Connection {
        Connection::with(server, Some(permit), QueryControl::new(Some(socket), peer))
    }

    /// A connection over `--max-connections`: its startup is answered with "too many
    /// clients" (a cancel request on it still works).
    pub fn refused(server: Arc<Server>, peer: String) -> Connection {
        Connection::with(server, None, QueryControl::new(None, peer))
    }

    fn with(
        server: Arc<Server>,
        permit: Option<OwnedSemaphorePermit>,
        control: QueryControl,
    ) -> Connection {
        Connection {
            inner: Arc::new(ConnectionInner {
                server,
                permit,
                auth: tokio::sync::Mutex::new(Login::Initial),
                session: OnceLock::new(),
                control: Arc::new(control),
                cancel_key: Mutex::new(None),
            }),
        }
    }
}

impl PgWireServerHandlers for Connection {
    fn simple_query_handler(&self) -> Arc<impl SimpleQueryHandler> {
        Arc::clone(&self.inner)
    }

    fn extended_query_handler(&self) -> Arc<impl ExtendedQueryHandler> {
        Arc::clone(&self.inner)
    }

    fn startup_handler(&self) -> Arc<impl StartupHandler> {
        Arc::clone(&self.inner)
    }

    fn cancel_handler(&self) -> Arc<impl CancelHandler> {
        Arc::clone(&self.inner)
    }
}

/// Where a login is.
enum Login {
    Initial,
    /// The server offered SCRAM-SHA-256 to `user`.
    Offered {
        user: String,
        verifier: Verifier,
        known: bool,
    },
    /// The server answered the client's first message.
    Challenged {
        user: String,
        verifier: Verifier,
        known: bool,
        first: scram::ServerFirst,
    },
    Done,
}

/// A logged-in connection's session.
struct Session {
    ctx: Arc<SessionContext>,
    service: Arc<DfSessionService>,
    parser: Arc<CalibsqlParser>,
    exec: Arc<Exec>,
    /// datafusion-postgres' hooks with calibsql's around them, in the order its service
    /// calls them.
    hooks: Vec<Arc<dyn QueryHook>>,
}

pub struct ConnectionInner {
    server: Arc<Server>,
    /// `None` for a connection over `--max-connections`.
    permit: Option<OwnedSemaphorePermit>,
    auth: tokio::sync::Mutex<Login>,
    session: OnceLock<Session>,
    control: Arc<QueryControl>,
    cancel_key: Mutex<Option<CancelKey>>,
}

impl Drop for ConnectionInner {
    fn drop(&mut self) {
        if let Some(key) = self.cancel_key.lock().unwrap().take() {
            self.server.cancels.lock().unwrap().remove(&key);
        }
    }
}

fn fatal(code: &str, message: impl Into<String>) -> PgWireError {
    PgWireError::UserError(Box::new(ErrorInfo::new(
        "FATAL".to_string(),
        code.to_string(),
        message.into(),
    )))
}

fn error(code: &str, message: impl Into<String>) -> PgWireError {
    PgWireError::UserError(Box::new(ErrorInfo::new(
        "ERROR".to_string(),
        code.to_string(),
        message.into(),
    )))
}

/// A DataFusion error as Postgres reports one (SQLSTATE by kind).
fn from_datafusion(e: DataFusionError) -> PgWireError {
    if let Some(refused) = refusal(&e) {
        return error("42501", refused.0.clone());
    }
    let code = match e.find_root() {
        DataFusionError::SQL(..) => "42601",
        DataFusionError::Plan(_) | DataFusionError::SchemaError(..) => "42000",
        DataFusionError::ResourcesExhausted(_) => "53200",
        DataFusionError::NotImplemented(_) => "0A000",
        DataFusionError::Execution(_) => "22000",
        _ => "XX000",
    };
    error(code, calibsql::errors::datafusion_message(&e))
}

fn cancelled() -> PgWireError {
    error("57014", statements::CANCELLED)
}

fn timed_out(limit: Duration) -> PgWireError {
    error("57014", statements::timed_out(limit))
}

impl ConnectionInner {
    fn session(&self) -> PgWireResult<&Session> {
        self.session
            .get()
            .ok_or_else(|| fatal("28000", "not logged in"))
    }

    fn peer<C: ClientInfo>(client: &C) -> String {
        client.socket_addr().to_string()
    }

    /// Builds the session of a user who just logged in.
    fn open_session(&self) -> anyhow::Result<()> {
        let ctx = Arc::new(self.server.sessions.connect(self.server.read_only)?);
        let exec = Arc::new(Exec {
            server: Arc::clone(&self.server),
            control: Arc::clone(&self.control),
        });
        let hooks: Vec<Arc<dyn QueryHook>> = vec![
            Arc::new(Hook {
                exec: Arc::clone(&exec),
                stage: Stage::First,
            }),
            Arc::new(TransactionStatementHook),
            Arc::new(CursorStatementHook),
            Arc::new(SetShowHook),
            Arc::new(Hook {
                exec: Arc::clone(&exec),
                stage: Stage::Last,
            }),
        ];
        let service = Arc::new(DfSessionService::new_with_hooks(
            Arc::clone(&ctx),
            hooks.clone(),
        ));
        let parser = Arc::new(CalibsqlParser {
            inner: service.query_parser(),
            ctx: Arc::clone(&ctx),
            hooks: hooks.clone(),
            exec: Arc::clone(&exec),
        });
        let _ = self.session.set(Session {
            ctx,
            service,
            parser,
            exec,
            hooks,
        });
        Ok(())
    }

    async fn refuse_login<C: ClientInfo>(
        &self,
        client: &C,
        user: &str,
        reason: &str,
    ) -> PgWireError {
        log(&format!(
            "login refused for user \"{user}\" from {}: {reason}",
            Self::peer(client)
        ));
        *self.auth.lock().await = Login::Done;
        fatal(
            "28P01",
            format!("password authentication failed for user \"{user}\""),
        )
    }
}

#[async_trait]
impl StartupHandler for ConnectionInner {
    async fn on_startup<C>(
        &self,
        client: &mut C,
        message: PgWireFrontendMessage,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        match message {
            PgWireFrontendMessage::Startup(startup) => {
                if self.permit.is_none() {
                    log(&format!(
                        "connection from {} refused: too many connections (--max-connections)",
                        Self::peer(client)
                    ));
                    return Err(fatal("53300", "sorry, too many clients already"));
                }
                protocol_negotiation(client, &startup).await?;
                save_startup_parameters_to_metadata(client, &startup);
                if self.server.require_tls && !client.is_secure() {
                    log(&format!(
                        "connection from {} refused: no TLS (--require-tls)",
                        Self::peer(client)
                    ));
                    return Err(fatal(
                        "28000",
                        "this server accepts TLS connections only (connect with sslmode=require)",
                    ));
                }
                let metadata = client.metadata();
                let Some(user) = metadata.get("user").cloned() else {
                    return Err(fatal("28000", "no user name given"));
                };
                let database = metadata.get("database").cloned().unwrap_or(user.clone());
                if database != DATABASE {
                    return Err(fatal(
                        "3D000",
                        format!("database \"{database}\" does not exist (connect to {DATABASE})"),
                    ));
                }
                let (verifier, known) = match self.server.users.get(&user) {
                    Some(verifier) => (verifier.clone(), true),
                    None => (scram::mock_verifier(&user, &self.server.mock_secret), false),
                };
                *self.auth.lock().await = Login::Offered {
                    user,
                    verifier,
                    known,
                };
                client.set_state(PgWireConnectionState::AuthenticationInProgress);
                client
                    .send(PgWireBackendMessage::Authentication(Authentication::SASL(
                        vec!["SCRAM-SHA-256".to_string()],
                    )))
                    .await?;
            }
            PgWireFrontendMessage::PasswordMessageFamily(message) => {
                let mut auth = self.auth.lock().await;
                match std::mem::replace(&mut *auth, Login::Done) {
                    Login::Offered {
                        user,
                        verifier,
                        known,
                    } => {
                        drop(auth);
                        let initial = message.into_sasl_initial_response()?;
                        if initial.auth_method != "SCRAM-SHA-256" {
                            return Err(self
                                .refuse_login(client, &user, "not SCRAM-SHA-256")
                                .await);
                        }
                        let data = initial.data.unwrap_or_default();
                        let text = String::from_utf8_lossy(&data);
                        let nonce = scram::random_nonce().map_err(|e| fatal("XX000", e))?;
                        let first = match scram::server_first(&text, &verifier, &nonce) {
                            Ok(first) => first,
                            Err(e) => {
                                return Err(self.refuse_login(client, &user, &e.to_string()).await)
                            }
                        };
                        client
                            .send(PgWireBackendMessage::Authentication(
                                Authentication::SASLContinue(first.message.clone().into()),
                            ))
                            .await?;
                        *self.auth.lock().await = Login::Challenged {
                            user,
                            verifier,
                            known,
                            first,
                        };
                    }
                    Login::Challenged {
                        user,
                        verifier,
                        known,
                        first,
                    } => {
                        drop(auth);
                        let response = message.into_sasl_response()?;
                        let text = String::from_utf8_lossy(&response.data);
                        let last = match first.server_final(&text, &verifier) {
                            Ok(_) if !known => {
                                return Err(self.refuse_login(client, &user, "unknown user").await)
                            }
                            Ok(last) => last,
                            Err(e) => {
                                let reason = if known {
                                    e.to_string()
                                } else {
                                    "unknown user".to_string()
                                };
                                return Err(self.refuse_login(client, &user, &reason).await);
                            }
                        };
                        if let Err(e) = self.open_session() {
                            log(&format!("cannot open a session for {user}: {e:#}"));
                            return Err(fatal("XX000", format!("cannot open a session: {e:#}")));
                        }
                        client
                            .send(PgWireBackendMessage::Authentication(
                                Authentication::SASLFinal(last.into()),
                            ))
                            .await?;
                        let (pid, secret) = self.server.pids.generate(client);
                        client.set_pid_and_secret_key(pid, secret.clone());
                        let key = (pid, secret.to_bytes().to_vec());
                        self.server
                            .cancels
                            .lock()
                            .unwrap()
                            .insert(key.clone(), Arc::downgrade(&self.control));
                        *self.cancel_key.lock().unwrap() = Some(key);
                        log(&format!("{user} logged in from {}", Self::peer(client)));
                        let mut parameters = DefaultServerParameterProvider::default();
                        parameters.is_superuser = false;
                        parameters.server_version = format!(
                            "{} (calibsql {})",
                            super::sessions::POSTGRES_VERSION,
                            env!("CARGO_PKG_VERSION")
                        );
                        parameters.default_transaction_read_only = self.server.read_only;
                        finish_authentication(client, &parameters).await?;
                    }
                    Login::Initial | Login::Done => {
                        return Err(fatal("08P01", "unexpected authentication message"));
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }
}

#[async_trait]
impl CancelHandler for ConnectionInner {
    async fn on_cancel_request(&self, request: CancelRequest) {
        let key = (request.pid, request.secret_key.to_bytes().to_vec());
        let control = self.server.cancels.lock().unwrap().get(&key).cloned();
        if let Some(control) = control.and_then(|c| c.upgrade()) {
            control.cancel();
        }
    }
}

/// The result format the client asked for, for [`Exec`] (datafusion-postgres' hooks do not
/// see the portal).
struct ResultFormat(Format);

/// A message's statements, parsed.
enum Parsed {
    /// By datafusion-postgres' Postgres parser.
    Postgres(Vec<Statement>),
    /// By calibsql's (DataFusion's syntax: `COPY … TO 'file' STORED AS …`, `CREATE EXTERNAL
    /// TABLE`), when Postgres' parser refused the text.
    Own(Vec<DFStatement>),
}

/// Parses `sql` as a client sent it (after the nesting check, before any parser builds a
/// tree of it: calibsql::nesting); with `calibsql` also in calibsql's syntax when Postgres'
/// parser refuses it.
fn parse_message(ctx: &SessionContext, sql: &str, calibsql: bool) -> PgWireResult<Parsed> {
    calibsql::nesting::check_text(sql).map_err(from_datafusion)?;
    match PostgresCompatibilityParser::new().parse(sql) {
        Ok(statements) => Ok(Parsed::Postgres(statements)),
        Err(e) => {
            if calibsql {
                if let Ok(statements) = calibsql::parse_statements(ctx, sql) {
                    return Ok(Parsed::Own(statements));
                }
            }
            // sqlparser's own recursion limit, which Postgres' parser keeps.
            const POSTGRES_PARSER_DEPTH: usize = 50;
            if calibsql::nesting::case_depth(sql) >= POSTGRES_PARSER_DEPTH {
                let error = DataFusionError::SQL(Box::new(e), None);
                return Err(from_datafusion(calibsql::nesting::explain_parse_error(
                    error,
                    sql,
                    POSTGRES_PARSER_DEPTH,
                    None,
                )));
            }
            Err(PgWireError::ApiError(Box::new(e)))
        }
    }
}

#[async_trait]
impl SimpleQueryHandler for ConnectionInner {
    /// One statement's clock and cancellation span the whole message: parsing, planning,
    /// execution and the rows sent.
    async fn on_query<C>(
        &self,
        client: &mut C,
        query: pgwire::messages::simplequery::Query,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        self.control.end();
        self.control
            .begin(time_limit(&self.server, client.metadata()));
        let result = self._on_query(client, query).await;
        self.control.end();
        result
    }

    async fn do_query<C>(&self, client: &mut C, query: &str) -> PgWireResult<Vec<Response>>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let session = self.session()?;
        client
            .session_extensions()
            .insert(ResultFormat(Format::UnifiedText));
        // Parsed on a query thread, under the statement's time limit.
        let ctx = Arc::clone(&session.ctx);
        let sql = query.to_string();
        let parsed = session
            .exec
            .off_thread(async move { parse_message(&ctx, &sql, true) })
            .await?;
        let mut responses = Vec::new();
        match parsed {
            // Statements of DataFusion's own syntax that Postgres' does not have (COPY … TO
            // 'file' STORED AS …, CREATE EXTERNAL TABLE): run as calibsql parsed them.
            Parsed::Own(statements) => {
                for statement in statements {
                    responses.push(
                        session
                            .exec
                            .run(client, &session.ctx, None, Query::Parsed(statement))
                            .await?,
                    );
                }
            }
            // What datafusion-postgres' service does with a message, on this parse.
            Parsed::Postgres(statements) if statements.is_empty() => {
                responses.push(Response::EmptyQuery);
            }
            Parsed::Postgres(statements) => {
                'statement: for statement in statements {
                    for hook in &session.hooks {
                        if let Some(response) = hook
                            .handle_simple_query(&statement, &session.ctx, client)
                            .await
                        {
                            responses.push(response?);
                            continue 'statement;
                        }
                    }
                    // calibsql's last hook answers every statement.
                    return Err(error(
                        "0A000",
                        format!("statement not supported: {statement}"),
                    ));
                }
            }
        }
        Ok(responses)
    }
}

#[async_trait]
impl ExtendedQueryHandler for ConnectionInner {
    type Statement = DfStatementPortal;
    type QueryParser = CalibsqlParser;

    fn query_parser(&self) -> Arc<Self::QueryParser> {
        match self.session.get() {
            Some(session) => Arc::clone(&session.parser),
            // pgwire asks only after login.
            None => unreachable!("the extended protocol is used after login only"),
        }
    }

    /// The statement begun at `Parse` (or here) ends with its answer.
    async fn on_execute<C>(
        &self,
        client: &mut C,
        message: pgwire::messages::extendedquery::Execute,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        self.control
            .begin(time_limit(&self.server, client.metadata()));
        let result = self._on_execute(client, message).await;
        self.control.end();
        result
    }

    /// pgwire's `Sync`, which also ends a statement begun by a `Parse` with no `Execute`.
    async fn on_sync<C>(
        &self,
        client: &mut C,
        _message: pgwire::messages::extendedquery::Sync,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        self.control.end();
        client.portal_store().rm_portal(pgwire::api::DEFAULT_NAME);
        client
            .send(PgWireBackendMessage::ReadyForQuery(
                pgwire::messages::response::ReadyForQuery::new(client.transaction_status()),
            ))
            .await?;
        client.flush().await?;
        Ok(())
    }

    async fn do_query<C>(
        &self,
        client: &mut C,
        portal: &Portal<Self::Statement>,
        max_rows: usize,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let session = self.session()?;
        client
            .session_extensions()
            .insert(ResultFormat(portal.result_column_format.clone()));
        <DfSessionService as ExtendedQueryHandler>::do_query(
            &session.service,
            client,
            portal,
            max_rows,
        )
        .await
    }
}

/// datafusion-postgres' parser, run on a query thread under the statement's time limit, with
/// nested result columns described as `json`.
pub struct CalibsqlParser {
    inner: Arc<Parser>,
    ctx: Arc<SessionContext>,
    hooks: Vec<Arc<dyn QueryHook>>,
    exec: Arc<Exec>,
}

#[async_trait]
impl QueryParser for CalibsqlParser {
    type Statement = DfStatementPortal;

    async fn parse_sql<C>(
        &self,
        client: &C,
        sql: &str,
        types: &[Option<Type>],
    ) -> PgWireResult<Option<Self::Statement>>
    where
        C: ClientInfo + Unpin + Send + Sync,
    {
        // The statement begins at Parse: its time limit counts from here.
        self.exec
            .control
            .begin(time_limit(&self.exec.server, client.metadata()));
        let ctx = Arc::clone(&self.ctx);
        let text = sql.to_string();
        let parsed = self
            .exec
            .off_thread(async move { parse_message(&ctx, &text, false) })
            .await?;
        // What datafusion-postgres' parser does with the statements, on this parse.
        let Parsed::Postgres(mut statements) = parsed else {
            return self.inner.parse_sql(client, sql, types).await;
        };
        if statements.is_empty() {
            return Ok(None);
        }
        let statement = statements.remove(0);
        let query = statement.to_string();
        for hook in &self.hooks {
            if let Some(plan) = hook
                .handle_extended_parse_query(&statement, &self.ctx, client)
                .await
            {
                return Ok(Some((query, Some((statement, plan?)))));
            }
        }
        let plan = self
            .exec
            .plan(
                &self.ctx,
                DFStatement::Statement(Box::new(statement.clone())),
            )
            .await?;
        Ok(Some((query, Some((statement, plan)))))
    }

    fn get_parameter_types(&self, statement: &Self::Statement) -> PgWireResult<Vec<Type>> {
        self.inner.get_parameter_types(statement)
    }

    fn get_result_schema(
        &self,
        statement: &Self::Statement,
        format: Option<&Format>,
    ) -> PgWireResult<Vec<FieldInfo>> {
        let (_, Some((_, plan))) = statement else {
            return Ok(vec![]);
        };
        if returns_no_rows(plan) {
            return Ok(vec![]);
        }
        pg_fields(
            plan.schema().as_arrow(),
            format.unwrap_or(&Format::UnifiedText),
            None,
        )
    }
}

/// Plans that answer with a command tag, not rows.
fn returns_no_rows(plan: &LogicalPlan) -> bool {
    matches!(
        plan,
        LogicalPlan::Ddl(_) | LogicalPlan::Dml(_) | LogicalPlan::Copy(_)
    ) || plan.schema().fields().is_empty()
}

/// The Postgres columns of `schema`: calibsql's nested values (fitted models, reliability
/// bins, lists) as `json`, everything else as arrow-pg maps it (floats `float8`, …).
pub fn pg_fields(
    schema: &Schema,
    format: &Format,
    options: Option<Arc<FormatOptions>>,
) -> PgWireResult<Vec<FieldInfo>> {
    schema
        .fields()
        .iter()
        .enumerate()
        .map(|(i, field)| {
            let pg_type = if field.data_type().is_nested() {
                Type::JSON
            } else {
                field_into_pg_type(field)?
            };
            let mut info = FieldInfo::new(
                field.name().clone(),
                None,
                None,
                pg_type,
                format.format_for(i),
            );
            if let Some(options) = &options {
                info = info.with_format_options(Arc::clone(options));
            }
            Ok(info)
        })
        .collect()
}

/// Runs statements: calibsql's planning (named arguments), the policy, the timeout and
/// cancellation; results streamed with nested values as JSON text.
pub struct Exec {
    server: Arc<Server>,
    control: Arc<QueryControl>,
}

/// calibsql's two hooks around datafusion-postgres' own (transactions, cursors, `SET`/`SHOW`).
struct Hook {
    exec: Arc<Exec>,
    stage: Stage,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Before the built-in hooks: settings of DataFusion and calibsql (`SET calibsql.…`) run
    /// here, with errors reported (datafusion-postgres' `SET` ignores them), and the query of
    /// a cursor is checked by the policy before the cursor hook runs it.
    First,
    /// After them: every statement they left runs here.
    Last,
}

fn engine_setting(statement: &Statement) -> bool {
    let name = match statement {
        Statement::Set(Set::SingleAssignment { variable, .. }) => variable.to_string(),
        Statement::ShowVariable { variable } => variable
            .iter()
            .map(|part| part.value.as_str())
            .collect::<Vec<_>>()
            .join("."),
        _ => return false,
    };
    let name = name.to_ascii_lowercase();
    name == "all" || name.starts_with("calibsql.") || name.starts_with("datafusion.")
}

/// The value of a Postgres setting that clients ask for with `SHOW` and that
/// datafusion-postgres answers wrongly or not at all ([`super::sessions::postgres_setting`]):
/// name and value.
fn postgres_setting(statement: &Statement, read_only: bool) -> Option<(&'static str, String)> {
    let Statement::ShowVariable { variable } = statement else {
        return None;
    };
    let name = variable
        .iter()
        .map(|part| part.value.to_ascii_lowercase())
        .collect::<Vec<_>>()
        .join(" ");
    super::sessions::postgres_setting(&name, read_only)
}

/// The command tag of a savepoint statement, and whether it rolls back to one. Statements
/// here change nothing (a session's only writes, `COPY … TO` and `INSERT` into files, are
/// not transactional), so a savepoint has nothing to keep: clients that nest transactions
/// (psycopg's `transaction()` inside one, as SQLAlchemy's dialect does) get the answers
/// Postgres gives.
fn savepoint_tag(statement: &Statement) -> Option<(&'static str, bool)> {
    match statement {
        Statement::Savepoint { .. } => Some(("SAVEPOINT", false)),
        Statement::ReleaseSavepoint { .. } => Some(("RELEASE", false)),
        Statement::Rollback {
            savepoint: Some(_), ..
        } => Some(("ROLLBACK", true)),
        _ => None,
    }
}

/// One row of one text column, as Postgres answers `SHOW name`.
fn show_response(name: &str, value: &str) -> PgWireResult<Response> {
    use pgwire::api::results::{DataRowEncoder, FieldFormat};
    let fields = Arc::new(vec![FieldInfo::new(
        name.to_string(),
        None,
        None,
        Type::TEXT,
        FieldFormat::Text,
    )]);
    let mut encoder = DataRowEncoder::new(Arc::clone(&fields));
    encoder.encode_field(&Some(value))?;
    let row = encoder.take_row();
    Ok(Response::Query(QueryResponse::new(
        fields,
        futures::stream::once(async move { Ok(row) }),
    )))
}

/// Named arguments as calibsql's planning expects them (`name => value` with a plain name):
/// Postgres' parser gives `ece(p, y, w => x)` with the name as an expression.
fn plain_argument_names(statement: &mut DFStatement) {
    use datafusion::sql::sqlparser::ast::{
        visit_expressions_mut, Expr, FunctionArg, FunctionArguments,
    };
    use std::ops::ControlFlow;
    let DFStatement::Statement(statement) = statement else {
        return;
    };
    let _ = visit_expressions_mut(statement.as_mut(), |expr| {
        if let Expr::Function(f) = expr {
            if let FunctionArguments::List(list) = &mut f.args {
                for arg in &mut list.args {
                    if let FunctionArg::ExprNamed {
                        name: Expr::Identifier(name),
                        arg: value,
                        operator,
                    } = arg
                    {
                        *arg = FunctionArg::Named {
                            name: name.clone(),
                            arg: value.clone(),
                            operator: operator.clone(),
                        };
                    }
                }
            }
        }
        ControlFlow::<()>::Continue(())
    });
}

impl Hook {
    /// The first hook's answers to statements datafusion-postgres does not answer as
    /// Postgres does: `SHOW` of the settings clients read ([`postgres_setting`]), and
    /// savepoints ([`savepoint_tag`]).
    fn postgres_answer(&self, statement: &Statement) -> Option<PgWireResult<Response>> {
        if let Some((name, value)) = postgres_setting(statement, self.exec.server.read_only) {
            return Some(show_response(name, &value));
        }
        let (tag, rolled_back) = savepoint_tag(statement)?;
        Some(Ok(if rolled_back {
            // Back in the transaction (pgwire keeps a failed one failed: a client then
            // rolls the whole transaction back, which reads nothing less here).
            Response::TransactionStart(Tag::new(tag))
        } else {
            Response::Execution(Tag::new(tag))
        }))
    }

    /// Whether this hook leaves `statement` to the hooks after it: the first hook takes only
    /// engine settings.
    fn passes(&self, statement: &Statement) -> bool {
        self.stage == Stage::First && !engine_setting(statement)
    }

    /// The first hook's check of a cursor's query (`DECLARE … FOR query`) by the policy.
    async fn check_cursor(&self, statement: &Statement, ctx: &SessionContext) -> PgWireResult<()> {
        if let Statement::Declare { stmts } = statement {
            for declare in stmts {
                if let Some(query) = &declare.for_query {
                    self.exec
                        .plan(
                            ctx,
                            DFStatement::Statement(Box::new(Statement::Query(query.clone()))),
                        )
                        .await?;
                }
            }
        }
        Ok(())
    }
}

#[async_trait]
impl QueryHook for Hook {
    async fn handle_simple_query(
        &self,
        statement: &Statement,
        ctx: &SessionContext,
        client: &mut dyn HookClient,
    ) -> Option<PgWireResult<Response>> {
        if self.stage == Stage::First {
            if let Some(response) = self.postgres_answer(statement) {
                return Some(response);
            }
        }
        if self.passes(statement) {
            return self.check_cursor(statement, ctx).await.err().map(Err);
        }
        Some(self.exec.run_statement(client, ctx, statement).await)
    }

    async fn handle_extended_parse_query(
        &self,
        statement: &Statement,
        ctx: &SessionContext,
        _client: &(dyn ClientInfo + Send + Sync),
    ) -> Option<PgWireResult<LogicalPlan>> {
        if self.stage == Stage::First {
            if let Some((name, value)) = postgres_setting(statement, self.exec.server.read_only) {
                // The row's shape, for Describe; Execute answers with `show_response`.
                let sql = format!("SELECT '{value}' AS {name}");
                return Some(
                    ctx.state()
                        .create_logical_plan(&sql)
                        .await
                        .map_err(from_datafusion),
                );
            }
            if savepoint_tag(statement).is_some() {
                return Some(Ok(LogicalPlan::EmptyRelation(
                    datafusion::logical_expr::EmptyRelation {
                        produce_one_row: false,
                        schema: Arc::new(datafusion::common::DFSchema::empty()),
                    },
                )));
            }
        }
        if self.passes(statement) {
            return self.check_cursor(statement, ctx).await.err().map(Err);
        }
        let statement = DFStatement::Statement(Box::new(statement.clone()));
        Some(self.exec.plan(ctx, statement).await)
    }

    async fn handle_extended_query(
        &self,
        statement: &Statement,
        plan: &LogicalPlan,
        params: &ParamValues,
        ctx: &SessionContext,
        client: &mut dyn HookClient,
    ) -> Option<PgWireResult<Response>> {
        if self.stage == Stage::First {
            if let Some(response) = self.postgres_answer(statement) {
                return Some(response);
            }
        }
        if self.passes(statement) {
            return None;
        }
        let query = Query::Bound(plan, params);
        Some(self.exec.run(client, ctx, Some(statement), query).await)
    }
}

/// What [`Exec::run`] runs.
enum Query<'a> {
    /// A statement to plan here, in DataFusion's syntax (the simple protocol, and
    /// statements only calibsql's parser reads).
    Parsed(DFStatement),
    /// The plan prepared at Parse with the parameter values of Bind (the extended protocol).
    Bound(&'a LogicalPlan, &'a ParamValues),
}

/// `statement` as DataFusion's parser would give it: Postgres' `COPY` and `CREATE EXTERNAL
/// TABLE` re-read by calibsql's parser (DataFusion plans only its own forms of them).
fn datafusion_statement(ctx: &SessionContext, statement: &Statement) -> DFStatement {
    let own_form = match statement {
        Statement::Copy { .. } => true,
        Statement::CreateTable(create) => create.external,
        _ => false,
    };
    if own_form {
        if let Ok(mut statements) = calibsql::parse_statements(ctx, &statement.to_string()) {
            if statements.len() == 1 {
                return statements.remove(0);
            }
        }
    }
    DFStatement::Statement(Box::new(statement.clone()))
}

impl Exec {
    /// Runs a statement of the simple protocol.
    async fn run_statement(
        &self,
        client: &mut dyn HookClient,
        ctx: &SessionContext,
        statement: &Statement,
    ) -> PgWireResult<Response> {
        let query = Query::Parsed(datafusion_statement(ctx, statement));
        self.run(client, ctx, Some(statement), query).await
    }

    /// Plans `statement` with named arguments completed, and checks it against the policy:
    /// on a query thread, under the statement's time limit (see [`Exec::off_thread`]).
    async fn plan(
        &self,
        ctx: &SessionContext,
        statement: DFStatement,
    ) -> PgWireResult<LogicalPlan> {
        let state = ctx.state();
        let plan = self
            .off_thread(async move {
                let mut statement = statement;
                plain_argument_names(&mut statement);
                super::catalog::postgres_functions(&mut statement);
                statements::plan(state, statement)
                    .await
                    .map_err(from_datafusion)
            })
            .await?;
        self.allowed(plan)
    }

    /// Runs `work` (parsing, planning: long synchronous work on a large statement) on the
    /// query runtime under the running statement's flag, and waits for it unless the
    /// statement is cancelled, runs out of its time limit or loses its client first: the
    /// connection's thread stays free, so the client has its error at the limit. A step
    /// already running cannot be stopped inside (a parser or planner has no place to look
    /// at the flag); `work` stops at its next look at the flag, and its result is dropped.
    async fn off_thread<T: Send + 'static>(
        &self,
        work: impl std::future::Future<Output = PgWireResult<T>> + Send + 'static,
    ) -> PgWireResult<T> {
        let token = self.control.begin(None);
        let deadline = token.deadline(token.limit);
        let flag = token.flag.clone();
        let task = AbortOnDrop(
            self.server
                .queries()
                .spawn(calibsql::cancel::scope(flag, work)),
        );
        self.guard(
            async {
                match task.await {
                    Ok(result) => result,
                    Err(e) => Err(error(
                        "XX000",
                        format!("the statement's planning failed: {e}"),
                    )),
                }
            },
            &token,
            deadline,
        )
        .await
    }

    /// Runs `work` unless the statement is cancelled, runs out of time or loses its client
    /// first ([`QueryControl::stopped`]).
    async fn guard<T>(
        &self,
        work: impl std::future::Future<Output = PgWireResult<T>>,
        token: &QueryToken,
        deadline: Option<Deadline>,
    ) -> PgWireResult<T> {
        tokio::select! {
            result = work => result,
            error = self.control.stopped(token, deadline) => Err(error),
        }
    }

    /// `plan`, when the policy allows it.
    fn allowed(&self, plan: LogicalPlan) -> PgWireResult<LogicalPlan> {
        let policy = self.server.sessions.policy();
        policy.check(&plan).map_err(from_datafusion)?;
        Ok(plan)
    }

    /// Runs `query` under the statement's time limit and cancel token; `statement` is what
    /// the client sent, when it was Postgres syntax (it names the command tag).
    async fn run(
        &self,
        client: &mut dyn HookClient,
        ctx: &SessionContext,
        statement: Option<&Statement>,
        query: Query<'_>,
    ) -> PgWireResult<Response> {
        let limit = time_limit(&self.server, client.metadata());
        let token = self.control.begin(limit);
        let plan = match query {
            Query::Parsed(df_statement) => self.plan(ctx, df_statement).await?,
            Query::Bound(plan, params) => self.allowed(
                plan.clone()
                    .replace_params_with_values(params)
                    .map_err(from_datafusion)?,
            )?,
        };
        self.execute(client, ctx, statement, plan, token, limit)
            .await
    }

    async fn execute(
        &self,
        client: &mut dyn HookClient,
        ctx: &SessionContext,
        statement: Option<&Statement>,
        plan: LogicalPlan,
        token: Arc<QueryToken>,
        limit: Option<Duration>,
    ) -> PgWireResult<Response> {
        // From the statement's first message on (parsing and planning count).
        let deadline = token.deadline(limit);
        let tag = command_tag(statement, &plan);
        let writes = matches!(plan, LogicalPlan::Dml(_) | LogicalPlan::Copy(_));
        // With --remote, a query that reads files (and nothing held here, such as pg_catalog)
        // runs on the cluster; the rest, DDL and SET run here.
        let runner = match &self.server.remote {
            Some(remote) if statements::reads_files_only(&plan) => remote.as_ref(),
            _ => ctx,
        };
        let frame = self
            .guard(
                async {
                    runner
                        .execute_logical_plan(plan)
                        .await
                        .map_err(from_datafusion)
                },
                &token,
                deadline,
            )
            .await?;
        if writes {
            let queries = self.server.queries();
            let flag = token.flag.clone();
            let batches = self
                .guard(
                    async {
                        datafusion::physical_plan::common::collect(calibsql::cancel::execute_on(
                            queries, frame, flag,
                        ))
                        .await
                        .map_err(from_datafusion)
                    },
                    &token,
                    deadline,
                )
                .await?;
            let rows = statements::rows_written(&batches);
            let mut tag = Tag::new(&tag).with_rows(rows as usize);
            if tag_is_insert(statement) {
                tag = tag.with_oid(0);
            }
            return Ok(Response::Execution(tag));
        }
        if frame.schema().fields().is_empty() {
            return Ok(Response::Execution(Tag::new(&tag)));
        }
        let format = client
            .session_extensions()
            .get::<ResultFormat>()
            .map(|f| f.0.clone())
            .unwrap_or(Format::UnifiedText);
        let options = Arc::new(FormatOptions::from_client_metadata(client.metadata()));
        let fields = Arc::new(pg_fields(
            frame.schema().as_arrow(),
            &format,
            Some(options),
        )?);
        // Planned here; executed on the query runtime (a stream of its batches comes back).
        let stream = calibsql::cancel::execute_on(self.server.queries(), frame, token.flag.clone());
        let encoded_fields = Arc::clone(&fields);
        let rows = guarded_stream(stream, Arc::clone(&self.control), token, deadline)
            .map(move |batch| {
                let rows: Box<dyn Iterator<Item = PgWireResult<_>> + Send + Sync> = match batch
                    .and_then(|b| {
                        super::super::output::nested_as_json(&b)
                            .map_err(|e| from_datafusion(e.into()))
                    }) {
                    Ok(batch) => encode_recordbatch(Arc::clone(&encoded_fields), batch),
                    Err(e) => Box::new(std::iter::once(Err(e))),
                };
                futures::stream::iter(rows)
            })
            .flatten();
        Ok(Response::Query(QueryResponse::new(fields, rows)))
    }
}

/// The batches of `stream` until the statement is cancelled, its deadline passes or its
/// client goes away ([`QueryControl::stopped`]); then one error, and the stream (and with it
/// the query's execution) is dropped.
fn guarded_stream(
    stream: SendableRecordBatchStream,
    control: Arc<QueryControl>,
    token: Arc<QueryToken>,
    deadline: Option<Deadline>,
) -> impl futures::Stream<Item = PgWireResult<RecordBatch>> + Send {
    futures::stream::unfold(Some(stream), move |state| {
        let token = Arc::clone(&token);
        let control = Arc::clone(&control);
        async move {
            let mut stream = state?;
            tokio::select! {
                batch = stream.next() => {
                    let batch = batch?;
                    Some((batch.map_err(from_datafusion), Some(stream)))
                }
                error = control.stopped(&token, deadline) => Some((Err(error), None)),
            }
        }
    })
}

/// A task aborted when its handle is dropped (the statement waiting for it was stopped).
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> std::future::Future for AbortOnDrop<T> {
    type Output = Result<T, tokio::task::JoinError>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        std::pin::Pin::new(&mut self.0).poll(cx)
    }
}

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A statement's time limit: `--query-timeout`, or the client's `statement_timeout` (from
/// its connection's `metadata`) when shorter.
fn time_limit(server: &Server, metadata: &HashMap<String, String>) -> Option<Duration> {
    let client_limit = metadata
        .get(STATEMENT_TIMEOUT_KEY)
        .and_then(|ms| ms.parse::<u64>().ok())
        .filter(|&ms| ms > 0)
        .map(Duration::from_millis);
    match (server.query_timeout, client_limit) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn tag_is_insert(statement: Option<&Statement>) -> bool {
    matches!(statement, Some(Statement::Insert(_)))
}

/// The command tag Postgres would send for a statement that returns no rows.
fn command_tag(statement: Option<&Statement>, plan: &LogicalPlan) -> String {
    use datafusion::logical_expr::{DdlStatement, Statement as PlanStatement};
    match plan {
        LogicalPlan::Copy(_) => return "COPY".to_string(),
        LogicalPlan::Dml(dml) => {
            let op = dml.op.to_string().to_uppercase();
            return op.split_whitespace().next().unwrap_or("OK").to_string();
        }
        LogicalPlan::Statement(PlanStatement::SetVariable(_)) => return "SET".to_string(),
        LogicalPlan::Ddl(ddl) => {
            return match ddl {
                DdlStatement::CreateExternalTable(_) | DdlStatement::CreateMemoryTable(_) => {
                    "CREATE TABLE"
                }
                DdlStatement::CreateView(_) => "CREATE VIEW",
                DdlStatement::DropTable(_) => "DROP TABLE",
                DdlStatement::DropView(_) => "DROP VIEW",
                DdlStatement::CreateCatalogSchema(_) => "CREATE SCHEMA",
                DdlStatement::DropCatalogSchema(_) => "DROP SCHEMA",
                DdlStatement::CreateFunction(_) => "CREATE FUNCTION",
                DdlStatement::DropFunction(_) => "DROP FUNCTION",
                _ => "OK",
            }
            .to_string()
        }
        _ => {}
    }
    match statement {
        Some(Statement::Insert(_)) => "INSERT".to_string(),
        Some(statement) => statement
            .to_string()
            .split_whitespace()
            .next()
            .unwrap_or("OK")
            .to_uppercase(),
        None => "OK".to_string(),
    }
}
