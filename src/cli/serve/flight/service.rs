//! The Flight SQL calls of a logged-in client ([`FlightSql`]): statements, prepared
//! statements with bound parameters (one row of them or many), updates, the catalog calls of
//! [`super::metadata`], and cancel.
//!
//! A statement is parsed as the CLI parses it (DataFusion's SQL and calibsql's named
//! arguments), planned and checked by the policy at `GetFlightInfo`, which answers the plan's
//! schema and a ticket naming the result in the session ([`super::queries::Queries`]); DDL and `SET` take
//! effect there, as DataFusion runs them while it makes the result. `DoGet` executes the
//! result on the query runtime and streams its batches as they come (the client's pace holds
//! the query back; a dropped stream stops it). Both run under one [`Stop`](super::queries::Stop): one clock,
//! `--query-timeout` from `GetFlightInfo` on, and one cancel, which `CancelFlightInfo` (or
//! Flight SQL's older `CancelQuery`) triggers.

use std::pin::Pin;
use std::sync::{Arc, Mutex};

use arrow_flight::decode::FlightRecordBatchStream;
use arrow_flight::encode::{DictionaryHandling, FlightDataEncoderBuilder};
use arrow_flight::error::FlightError;
use arrow_flight::flight_service_server::FlightService;
use arrow_flight::sql::metadata::{SqlInfoData, XdbcTypeInfoData};
use arrow_flight::sql::server::{FlightSqlService, PeekableFlightDataStream};
use arrow_flight::sql::{
    ActionCancelQueryRequest, ActionCancelQueryResult, ActionClosePreparedStatementRequest,
    ActionCreatePreparedStatementRequest, ActionCreatePreparedStatementResult, Any,
    CommandGetCatalogs, CommandGetDbSchemas, CommandGetSqlInfo, CommandGetTableTypes,
    CommandGetTables, CommandGetXdbcTypeInfo, CommandPreparedStatementQuery,
    CommandPreparedStatementUpdate, CommandStatementQuery, CommandStatementUpdate,
    DoPutPreparedStatementResult, ProstMessageExt, SqlInfo, TicketStatementQuery,
};
use arrow_flight::{
    Action, ActionType, CancelFlightInfoRequest, CancelFlightInfoResult, CancelStatus,
    FlightDescriptor, FlightEndpoint, FlightInfo, HandshakeRequest, HandshakeResponse, IpcMessage,
    SchemaAsIpc, Ticket,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::ipc::writer::IpcWriteOptions;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::{ParamValues, ScalarValue};
use datafusion::dataframe::DataFrame;
use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::SessionContext;
use futures::{Stream, StreamExt, TryStreamExt};
use prost::Message;
use ring::rand::SecureRandom;
use tonic::metadata::MetadataValue;
use tonic::{Request, Response, Status, Streaming};

use super::super::connection::Server;
use super::super::{log, scram, statements};
use super::auth::{basic_credentials, FlightSession, Tokens};
use super::queries::{Pending, Prepared, Stop};
use super::status::{arrow_status, status};
use super::{metadata, Peer};

/// Flight's action that cancels a result (Flight SQL's older `CancelQuery` action is
/// `do_action_cancel_query`).
const CANCEL_FLIGHT_INFO: &str = "CancelFlightInfo";
/// Results a session may hold unfetched, and prepared statements it may keep open.
const MAX_OPEN: usize = 256;
/// Bytes of randomness in a result's or prepared statement's handle.
const HANDLE_LEN: usize = 16;

type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

/// A task on the query runtime, aborted (and its statement cancelled) when the call waiting
/// for it goes away.
struct AbortOnDrop {
    task: tokio::task::AbortHandle,
    flag: calibsql::cancel::Cancel,
    done: bool,
}

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        if !self.done {
            self.flag.cancel();
            self.task.abort();
        }
    }
}

/// The session a call came with ([`super::auth::Guarded`] put it there).
fn session_of<T>(request: &Request<T>) -> Result<Arc<FlightSession>, Status> {
    request
        .extensions()
        .get::<Arc<FlightSession>>()
        .cloned()
        .ok_or_else(|| Status::unauthenticated("no token: log in first"))
}

fn peer_of<T>(request: &Request<T>) -> String {
    request
        .extensions()
        .get::<Peer>()
        .map(|peer| peer.0.to_string())
        .unwrap_or_else(|| "an unknown address".to_string())
}

fn new_handle() -> Result<Vec<u8>, Status> {
    let mut bytes = vec![0u8; HANDLE_LEN];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| Status::internal("no randomness available for a handle"))?;
    Ok(bytes)
}

fn schema_bytes(schema: &Schema) -> Result<bytes::Bytes, Status> {
    let IpcMessage(bytes) = SchemaAsIpc::new(schema, &IpcWriteOptions::default())
        .try_into()
        .map_err(arrow_status)?;
    Ok(bytes)
}

/// One batch as a `DoGet` answer.
fn one_batch(
    batch: Result<RecordBatch, impl Into<Status>>,
) -> Result<Response<BoxStream<arrow_flight::FlightData>>, Status> {
    let batch = batch.map_err(Into::into)?;
    let stream = FlightDataEncoderBuilder::new()
        .with_schema(batch.schema())
        .build(futures::stream::once(async move { Ok(batch) }))
        .map_err(Status::from);
    Ok(Response::new(Box::pin(stream)))
}

/// A metadata command's `FlightInfo`: `schema`, and a ticket that is the command itself.
fn command_info(
    command: &impl ProstMessageExt,
    schema: &Schema,
    descriptor: FlightDescriptor,
) -> Result<Response<FlightInfo>, Status> {
    let ticket = Ticket::new(command.as_any().encode_to_vec());
    let info = FlightInfo::new()
        .try_with_schema(schema)
        .map_err(arrow_status)?
        .with_endpoint(FlightEndpoint::new().with_ticket(ticket))
        .with_descriptor(descriptor);
    Ok(Response::new(info))
}

/// The values of each row of `batches`, cast to the placeholders' `types` where known.
fn parameter_rows(
    batches: &[RecordBatch],
    types: &[Option<DataType>],
) -> Result<Vec<Vec<ScalarValue>>, Status> {
    let mut rows = Vec::new();
    for batch in batches {
        if batch.num_columns() != types.len() {
            return Err(Status::invalid_argument(format!(
                "the statement has {} parameter(s), the bound rows have {} column(s)",
                types.len(),
                batch.num_columns()
            )));
        }
        for row in 0..batch.num_rows() {
            let mut values = Vec::with_capacity(types.len());
            for (i, column) in batch.columns().iter().enumerate() {
                let value = ScalarValue::try_from_array(column, row).map_err(status)?;
                let value = match &types[i] {
                    Some(wanted) if &value.data_type() != wanted => {
                        value.cast_to(wanted).map_err(|e| {
                            Status::invalid_argument(format!(
                                "parameter ${}: cannot use {} as {wanted}: {}",
                                i + 1,
                                value.data_type(),
                                calibsql::errors::datafusion_message(&e)
                            ))
                        })?
                    }
                    _ => value,
                };
                values.push(value);
            }
            rows.push(values);
        }
    }
    Ok(rows)
}

/// The record batches of a `DoPut` stream (its first message holds the command, and the
/// schema when rows follow).
async fn put_batches(
    request: Request<PeekableFlightDataStream>,
) -> Result<Vec<RecordBatch>, Status> {
    let stream = request.into_inner().map_err(FlightError::from);
    FlightRecordBatchStream::new_from_flight_data(stream)
        .try_collect()
        .await
        .map_err(Status::from)
}

/// The placeholders of `plan`, in order (`$1` first), with their types where known.
fn parameter_types(plan: &LogicalPlan) -> Result<Vec<Option<DataType>>, Status> {
    let types = plan.get_parameter_types().map_err(status)?;
    let mut numbered = Vec::new();
    for (name, data_type) in types {
        let number = name
            .strip_prefix('$')
            .and_then(|n| n.parse::<usize>().ok())
            .filter(|&n| n > 0)
            .ok_or_else(|| {
                Status::invalid_argument(format!(
                    "parameter {name}: name parameters $1, $2, … (by position)"
                ))
            })?;
        numbered.push((number, data_type));
    }
    numbered.sort_by_key(|(n, _)| *n);
    let count = numbered.last().map_or(0, |(n, _)| *n);
    let mut ordered = vec![None; count];
    for (n, data_type) in numbered {
        ordered[n - 1] = data_type;
    }
    Ok(ordered)
}

/// The Flight SQL service over the shared [`Server`].
pub struct FlightSql {
    server: Arc<Server>,
    tokens: Arc<Tokens>,
    sql_info: SqlInfoData,
    xdbc_types: XdbcTypeInfoData,
}

impl FlightSql {
    pub fn new(server: Arc<Server>, tokens: Arc<Tokens>) -> anyhow::Result<FlightSql> {
        let timeout = server.query_timeout.map_or(0, |t| t.as_secs());
        Ok(FlightSql {
            sql_info: metadata::sql_info(server.read_only, timeout)?,
            xdbc_types: metadata::xdbc_types()?,
            server,
            tokens,
        })
    }

    /// Runs `work` on the query runtime under `stop`'s flag, and waits for it unless the
    /// statement is cancelled or runs out of time first.
    async fn off_thread<T: Send + 'static>(
        &self,
        stop: &Stop,
        work: impl std::future::Future<Output = datafusion::common::Result<T>> + Send + 'static,
    ) -> Result<T, Status> {
        let task = self
            .server
            .queries()
            .spawn(calibsql::cancel::scope(stop.flag.clone(), work));
        let mut guard = AbortOnDrop {
            task: task.abort_handle(),
            flag: stop.flag.clone(),
            done: false,
        };
        let result = tokio::select! {
            result = task => match result {
                Ok(result) => result.map_err(|e| stop.status(e)),
                Err(e) => Err(Status::internal(format!("the statement's planning failed: {e}"))),
            },
            error = stop.stopped() => Err(error),
        };
        guard.done = result.is_ok();
        result
    }

    /// Plans `sql` (one statement) in `session` and checks it against the policy.
    async fn plan_sql(
        &self,
        session: &FlightSession,
        sql: &str,
        stop: &Stop,
    ) -> Result<LogicalPlan, Status> {
        let ctx = session.ctx.clone();
        let sql = sql.to_string();
        let policy = Arc::clone(self.server.sessions.policy());
        self.off_thread(stop, async move {
            let mut parsed = calibsql::parse_statements(&ctx, &sql)?;
            if parsed.len() != 1 {
                return datafusion::common::plan_err!(
                    "expected one SQL statement, got {}",
                    parsed.len()
                );
            }
            let plan = statements::plan(ctx.state(), parsed.remove(0)).await?;
            policy.check(&plan)?;
            Ok(plan)
        })
        .await
    }

    /// The result of `plan` in `session`: DDL and `SET` take effect now; a query is planned
    /// for its cluster (`--remote`, when it reads only files) or for the session.
    async fn frame(
        &self,
        session: &FlightSession,
        plan: LogicalPlan,
        stop: &Stop,
    ) -> Result<DataFrame, Status> {
        let runner: SessionContext = match &self.server.remote {
            Some(remote) if statements::reads_files_only(&plan) => remote.as_ref().clone(),
            _ => session.ctx.clone(),
        };
        self.off_thread(stop, async move { runner.execute_logical_plan(plan).await })
            .await
    }

    /// `plan` with one row of parameters bound, checked by the policy again.
    fn bound(&self, plan: &LogicalPlan, row: &[ScalarValue]) -> Result<LogicalPlan, Status> {
        let plan = if row.is_empty() {
            plan.clone()
        } else {
            plan.clone()
                .replace_params_with_values(&ParamValues::from(row.to_vec()))
                .map_err(status)?
        };
        self.server.sessions.policy().check(&plan).map_err(status)?;
        Ok(plan)
    }

    /// Keeps `frames` in `session` as a result to fetch, and answers its `FlightInfo`.
    fn pending_info(
        &self,
        session: &FlightSession,
        frames: Vec<DataFrame>,
        schema: &Schema,
        stop: Arc<Stop>,
        descriptor: FlightDescriptor,
    ) -> Result<Response<FlightInfo>, Status> {
        let handle = new_handle()?;
        {
            let mut results = session.queries.results.lock().map_err(|_| poisoned())?;
            if results.len() >= MAX_OPEN {
                return Err(Status::resource_exhausted(format!(
                    "this session holds {MAX_OPEN} results not fetched yet: fetch or cancel \
                     them first"
                )));
            }
            results.insert(
                handle.clone(),
                Arc::new(Pending {
                    frames: Mutex::new(Some(frames)),
                    stop,
                }),
            );
        }
        let ticket = TicketStatementQuery {
            statement_handle: handle.into(),
        };
        let info = FlightInfo::new()
            .try_with_schema(schema)
            .map_err(arrow_status)?
            .with_endpoint(
                FlightEndpoint::new().with_ticket(Ticket::new(ticket.as_any().encode_to_vec())),
            )
            .with_descriptor(descriptor);
        Ok(Response::new(info))
    }

    /// Runs `plan` to its end (an update): the rows it wrote.
    async fn run_update(
        &self,
        session: &FlightSession,
        plan: LogicalPlan,
        stop: &Arc<Stop>,
    ) -> Result<i64, Status> {
        let frame = self.frame(session, plan, stop).await?;
        let queries = self.server.queries().clone();
        let flag = stop.execution_flag();
        let batches = self
            .off_thread(stop, async move {
                datafusion::physical_plan::common::collect(calibsql::cancel::execute_on(
                    &queries, frame, flag,
                ))
                .await
            })
            .await?;
        Ok(i64::try_from(statements::rows_written(&batches)).unwrap_or(i64::MAX))
    }

    fn prepared(&self, session: &FlightSession, handle: &[u8]) -> Result<Arc<Prepared>, Status> {
        session
            .queries
            .prepared
            .lock()
            .map_err(|_| poisoned())?
            .get(handle)
            .cloned()
            .ok_or_else(|| {
                Status::not_found(
                    "no such prepared statement in this session (closed, or never made)",
                )
            })
    }

    /// Cancels the results named by `info`'s tickets; NOT_FOUND when none is this session's
    /// (ended, fetched to the end, or never made), as Flight SQL asks.
    fn cancel(&self, session: &FlightSession, info: &FlightInfo) -> Result<(), Status> {
        let mut found = false;
        let results = session.queries.results.lock().map_err(|_| poisoned())?;
        for endpoint in &info.endpoint {
            let Some(ticket) = &endpoint.ticket else {
                continue;
            };
            let Ok(any) = Any::decode(ticket.ticket.as_ref()) else {
                continue;
            };
            let Ok(Some(ticket)) = any.unpack::<TicketStatementQuery>() else {
                continue;
            };
            if let Some(pending) = results.get(ticket.statement_handle.as_ref()) {
                pending.stop.cancel();
                found = true;
            }
        }
        if !found {
            return Err(Status::not_found(
                "no such result running or waiting in this session (ended, or never made)",
            ));
        }
        log(&format!(
            "Flight SQL: a statement of {} is cancelled at its client's request",
            session.user
        ));
        Ok(())
    }
}

fn poisoned() -> Status {
    Status::internal("the session's state is unusable after an internal error")
}

/// Removes a result from its session when its stream ends or is dropped.
struct Forget {
    session: Arc<FlightSession>,
    handle: Vec<u8>,
}

impl Drop for Forget {
    fn drop(&mut self) {
        if let Ok(mut results) = self.session.queries.results.lock() {
            results.remove(&self.handle);
        }
    }
}

#[tonic::async_trait]
impl FlightSqlService for FlightSql {
    type FlightService = FlightSql;

    async fn do_handshake(
        &self,
        request: Request<Streaming<HandshakeRequest>>,
    ) -> Result<
        Response<Pin<Box<dyn Stream<Item = Result<HandshakeResponse, Status>> + Send>>>,
        Status,
    > {
        let peer = peer_of(&request);
        let (user, password) = basic_credentials(request.metadata())?;
        let (verifier, known) = match self.server.users.get(&user) {
            Some(verifier) => (verifier.clone(), true),
            None => (scram::mock_verifier(&user, &self.server.mock_secret), false),
        };
        // PBKDF2's rounds off the connections' threads.
        let checks = tokio::task::spawn_blocking(move || verifier.checks_password(&password))
            .await
            .map_err(|e| Status::internal(format!("the password check failed: {e}")))?;
        if !(known && checks) {
            let reason = if known {
                "wrong password"
            } else {
                "unknown user"
            };
            log(&format!(
                "Flight SQL login refused for user \"{user}\" from {peer}: {reason}"
            ));
            return Err(Status::unauthenticated(format!(
                "password authentication failed for user \"{user}\""
            )));
        }
        let ctx = self
            .server
            .sessions
            .connect(self.server.read_only)
            .map_err(|e| Status::internal(format!("cannot open a session: {e:#}")))?;
        let token = self.tokens.issue(&user, ctx)?;
        log(&format!(
            "{user} logged in over Flight SQL from {peer} (token valid for {} s)",
            self.tokens.lifetime().as_secs()
        ));
        let bearer = MetadataValue::try_from(format!("Bearer {token}"))
            .map_err(|_| Status::internal("the token is not a valid header value"))?;
        let answer = HandshakeResponse {
            protocol_version: 0,
            payload: token.into_bytes().into(),
        };
        let mut response: Response<
            Pin<Box<dyn Stream<Item = Result<HandshakeResponse, Status>> + Send>>,
        > = Response::new(Box::pin(futures::stream::iter(vec![Ok(answer)])));
        response.metadata_mut().insert("authorization", bearer);
        Ok(response)
    }

    async fn get_flight_info_statement(
        &self,
        query: CommandStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let session = session_of(&request)?;
        let stop = Stop::new(self.server.query_timeout);
        let plan = self.plan_sql(&session, &query.query, &stop).await?;
        let frame = self.frame(&session, plan, &stop).await?;
        let schema = frame.schema().as_arrow().clone();
        self.pending_info(&session, vec![frame], &schema, stop, request.into_inner())
    }

    async fn get_flight_info_prepared_statement(
        &self,
        command: CommandPreparedStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let session = session_of(&request)?;
        let prepared = self.prepared(&session, &command.prepared_statement_handle)?;
        let rows = {
            let bound = prepared.parameters.lock().map_err(|_| poisoned())?;
            if bound.is_empty() {
                vec![vec![]]
            } else {
                bound.clone()
            }
        };
        if rows.len() == 1 && rows[0].is_empty() && !prepared.parameter_types.is_empty() {
            return Err(Status::invalid_argument(format!(
                "the statement has {} parameter(s) and none is bound",
                prepared.parameter_types.len()
            )));
        }
        let stop = Stop::new(self.server.query_timeout);
        let mut frames = Vec::with_capacity(rows.len());
        for row in &rows {
            let plan = self.bound(&prepared.plan, row)?;
            frames.push(self.frame(&session, plan, &stop).await?);
        }
        let schema = match frames.first() {
            Some(frame) => frame.schema().as_arrow().clone(),
            None => prepared.plan.schema().as_arrow().clone(),
        };
        self.pending_info(&session, frames, &schema, stop, request.into_inner())
    }

    async fn do_get_statement(
        &self,
        ticket: TicketStatementQuery,
        request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        let session = session_of(&request)?;
        let handle = ticket.statement_handle.to_vec();
        let pending = session
            .queries
            .results
            .lock()
            .map_err(|_| poisoned())?
            .get(&handle)
            .cloned()
            .ok_or_else(|| {
                Status::not_found("no such result in this session (fetched already, or cancelled)")
            })?;
        let frames = pending
            .frames
            .lock()
            .map_err(|_| poisoned())?
            .take()
            .ok_or_else(|| Status::not_found("this result is being fetched already"))?;
        let forget = Forget {
            session: Arc::clone(&session),
            handle,
        };
        let Some(first) = frames.first() else {
            return Err(Status::internal("a result without a frame"));
        };
        let schema: SchemaRef = Arc::new(first.schema().as_arrow().clone());
        // The frames one after the other, each executed on the query runtime when the one
        // before has ended; each stream stops its query when dropped.
        let queries = self.server.queries().clone();
        let stop = Arc::clone(&pending.stop);
        let batches = futures::stream::iter(frames)
            .map(move |frame| calibsql::cancel::execute_on(&queries, frame, stop.execution_flag()))
            .flatten();
        let stop = Arc::clone(&pending.stop);
        // Until the statement is cancelled or runs out of time: then one error, and the
        // batches (and the query with them) are dropped.
        let guarded = futures::stream::unfold(
            Some((Box::pin(batches), stop, forget)),
            |state| async move {
                let (mut batches, stop, forget) = state?;
                tokio::select! {
                    batch = batches.next() => {
                        let batch = batch?;
                        let batch = batch.map_err(|e| FlightError::from(stop.status(e)));
                        Some((batch, Some((batches, stop, forget))))
                    }
                    error = stop.stopped() => Some((Err(FlightError::from(error)), None)),
                }
            },
        );
        let stream = FlightDataEncoderBuilder::new()
            .with_schema(schema)
            .with_dictionary_handling(DictionaryHandling::Resend)
            .build(guarded)
            .map_err(Status::from);
        Ok(Response::new(Box::pin(stream)))
    }

    async fn do_put_statement_update(
        &self,
        command: CommandStatementUpdate,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<i64, Status> {
        let session = session_of(&request)?;
        let stop = Stop::new(self.server.query_timeout);
        let plan = self.plan_sql(&session, &command.query, &stop).await?;
        self.run_update(&session, plan, &stop).await
    }

    async fn do_action_create_prepared_statement(
        &self,
        command: ActionCreatePreparedStatementRequest,
        request: Request<Action>,
    ) -> Result<ActionCreatePreparedStatementResult, Status> {
        let session = session_of(&request)?;
        let stop = Stop::new(self.server.query_timeout);
        let plan = self.plan_sql(&session, &command.query, &stop).await?;
        let parameter_types = parameter_types(&plan)?;
        let parameter_schema = Schema::new(
            parameter_types
                .iter()
                .enumerate()
                .map(|(i, t)| {
                    Field::new(
                        format!("${}", i + 1),
                        t.clone().unwrap_or(DataType::Null),
                        true,
                    )
                })
                .collect::<Vec<_>>(),
        );
        let dataset_schema = plan.schema().as_arrow().clone();
        let handle = new_handle()?;
        {
            let mut prepared = session.queries.prepared.lock().map_err(|_| poisoned())?;
            if prepared.len() >= MAX_OPEN {
                return Err(Status::resource_exhausted(format!(
                    "this session holds {MAX_OPEN} prepared statements: close some first"
                )));
            }
            prepared.insert(
                handle.clone(),
                Arc::new(Prepared {
                    plan,
                    parameter_types,
                    parameters: Mutex::new(Vec::new()),
                }),
            );
        }
        Ok(ActionCreatePreparedStatementResult {
            prepared_statement_handle: handle.into(),
            dataset_schema: schema_bytes(&dataset_schema)?,
            parameter_schema: schema_bytes(&parameter_schema)?,
        })
    }

    async fn do_put_prepared_statement_query(
        &self,
        command: CommandPreparedStatementQuery,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<DoPutPreparedStatementResult, Status> {
        let session = session_of(&request)?;
        let prepared = self.prepared(&session, &command.prepared_statement_handle)?;
        let batches = put_batches(request).await?;
        let rows = parameter_rows(&batches, &prepared.parameter_types)?;
        *prepared.parameters.lock().map_err(|_| poisoned())? = rows;
        Ok(DoPutPreparedStatementResult {
            prepared_statement_handle: Some(command.prepared_statement_handle),
        })
    }

    async fn do_put_prepared_statement_update(
        &self,
        command: CommandPreparedStatementUpdate,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<i64, Status> {
        let session = session_of(&request)?;
        let prepared = self.prepared(&session, &command.prepared_statement_handle)?;
        // Rows sent with the update, else those bound before, else none.
        let batches = put_batches(request).await?;
        let mut rows = parameter_rows(&batches, &prepared.parameter_types)?;
        if rows.is_empty() {
            rows = prepared.parameters.lock().map_err(|_| poisoned())?.clone();
        }
        if rows.is_empty() {
            if !prepared.parameter_types.is_empty() {
                return Err(Status::invalid_argument(format!(
                    "the statement has {} parameter(s) and none is bound",
                    prepared.parameter_types.len()
                )));
            }
            rows.push(vec![]);
        }
        let stop = Stop::new(self.server.query_timeout);
        let mut written = 0i64;
        for row in &rows {
            let plan = self.bound(&prepared.plan, row)?;
            written = written.saturating_add(self.run_update(&session, plan, &stop).await?);
        }
        Ok(written)
    }

    async fn do_action_close_prepared_statement(
        &self,
        command: ActionClosePreparedStatementRequest,
        request: Request<Action>,
    ) -> Result<(), Status> {
        let session = session_of(&request)?;
        session
            .queries
            .prepared
            .lock()
            .map_err(|_| poisoned())?
            .remove(command.prepared_statement_handle.as_ref());
        Ok(())
    }

    async fn do_action_cancel_query(
        &self,
        command: ActionCancelQueryRequest,
        request: Request<Action>,
    ) -> Result<ActionCancelQueryResult, Status> {
        let session = session_of(&request)?;
        let info = FlightInfo::decode(command.info.as_ref())
            .map_err(|e| Status::invalid_argument(format!("not a FlightInfo: {e}")))?;
        self.cancel(&session, &info)?;
        // Flight SQL's CancelResult numbers its answers as Flight's CancelStatus does
        // (CANCELLED is 1); arrow-flight does not export the former.
        Ok(ActionCancelQueryResult {
            result: CancelStatus::Cancelled as i32,
        })
    }

    async fn do_action_fallback(
        &self,
        request: Request<Action>,
    ) -> Result<Response<<Self as FlightService>::DoActionStream>, Status> {
        if request.get_ref().r#type != CANCEL_FLIGHT_INFO {
            return Err(Status::invalid_argument(format!(
                "no action {:?} here (see ListActions)",
                request.get_ref().r#type
            )));
        }
        let session = session_of(&request)?;
        let command = CancelFlightInfoRequest::decode(request.get_ref().body.as_ref())
            .map_err(|e| Status::invalid_argument(format!("not a CancelFlightInfoRequest: {e}")))?;
        let info = command
            .info
            .ok_or_else(|| Status::invalid_argument("CancelFlightInfo names no FlightInfo"))?;
        self.cancel(&session, &info)?;
        let result = CancelFlightInfoResult::new(CancelStatus::Cancelled);
        let body = arrow_flight::Result {
            body: result.encode_to_vec().into(),
        };
        Ok(Response::new(Box::pin(futures::stream::iter(vec![Ok(
            body,
        )]))))
    }

    async fn list_custom_actions(&self) -> Option<Vec<Result<ActionType, Status>>> {
        Some(vec![Ok(ActionType {
            r#type: CANCEL_FLIGHT_INFO.to_string(),
            description: "Cancels a result asked for with GetFlightInfo.\n\
                          Request Message: CancelFlightInfoRequest\n\
                          Response Message: CancelFlightInfoResult"
                .to_string(),
        })])
    }

    async fn get_flight_info_sql_info(
        &self,
        command: CommandGetSqlInfo,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = command.clone().into_builder(&self.sql_info).schema();
        command_info(&command, &schema, request.into_inner())
    }

    async fn do_get_sql_info(
        &self,
        command: CommandGetSqlInfo,
        _request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        one_batch(command.into_builder(&self.sql_info).build())
    }

    async fn get_flight_info_xdbc_type_info(
        &self,
        command: CommandGetXdbcTypeInfo,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = command.into_builder(&self.xdbc_types).schema();
        command_info(&command, &schema, request.into_inner())
    }

    async fn do_get_xdbc_type_info(
        &self,
        command: CommandGetXdbcTypeInfo,
        _request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        one_batch(command.into_builder(&self.xdbc_types).build())
    }

    async fn get_flight_info_table_types(
        &self,
        command: CommandGetTableTypes,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = command.into_builder().schema();
        command_info(&command, &schema, request.into_inner())
    }

    async fn do_get_table_types(
        &self,
        command: CommandGetTableTypes,
        _request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        one_batch(metadata::table_types(command))
    }

    async fn get_flight_info_catalogs(
        &self,
        command: CommandGetCatalogs,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = command.into_builder().schema();
        command_info(&command, &schema, request.into_inner())
    }

    async fn do_get_catalogs(
        &self,
        command: CommandGetCatalogs,
        request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        let session = session_of(&request)?;
        one_batch(metadata::catalogs(&session.ctx, command))
    }

    async fn get_flight_info_schemas(
        &self,
        command: CommandGetDbSchemas,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = command.clone().into_builder().schema();
        command_info(&command, &schema, request.into_inner())
    }

    async fn do_get_schemas(
        &self,
        command: CommandGetDbSchemas,
        request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        let session = session_of(&request)?;
        one_batch(metadata::db_schemas(&session.ctx, command))
    }

    async fn get_flight_info_tables(
        &self,
        command: CommandGetTables,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = command.clone().into_builder().schema();
        command_info(&command, &schema, request.into_inner())
    }

    async fn do_get_tables(
        &self,
        command: CommandGetTables,
        request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        let session = session_of(&request)?;
        one_batch(metadata::tables(&session.ctx, command).await)
    }

    async fn register_sql_info(&self, _id: i32, _result: &SqlInfo) {}
}
