//! What a Flight SQL session holds between calls ([`Queries`]): its prepared statements and
//! the results asked for with `GetFlightInfo` and not yet streamed, each under one [`Stop`]
//! (its cancel flag and `--query-timeout` clock).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use datafusion::arrow::datatypes::DataType;
use datafusion::common::{DataFusionError, ScalarValue};
use datafusion::dataframe::DataFrame;
use datafusion::logical_expr::LogicalPlan;
use tonic::Status;

use super::super::statements;
use super::status::status;

/// A session's prepared statements and results, by handle.
#[derive(Default)]
pub struct Queries {
    pub(super) prepared: Mutex<HashMap<Vec<u8>, Arc<Prepared>>>,
    pub(super) results: Mutex<HashMap<Vec<u8>, Arc<Pending>>>,
}

/// A prepared statement: its plan (with placeholders) and the parameter rows bound last.
pub(super) struct Prepared {
    pub(super) plan: LogicalPlan,
    /// The placeholders' types where the plan says (`$1` is index 0).
    pub(super) parameter_types: Vec<Option<DataType>>,
    pub(super) parameters: Mutex<Vec<Vec<ScalarValue>>>,
}

/// A result asked for with `GetFlightInfo`, from then until its stream ends.
pub(super) struct Pending {
    /// The frames to stream one after the other (one per parameter row); taken by `DoGet`.
    pub(super) frames: Mutex<Option<Vec<DataFrame>>>,
    /// The statement's clock and cancel flag.
    pub(super) stop: Arc<Stop>,
}

/// When a statement must stop: its cancel (by `CancelFlightInfo`, or its stream dropped) and
/// its deadline (`--query-timeout` from its `GetFlightInfo` on).
pub(super) struct Stop {
    /// The flag its parsing and planning look at ([`calibsql::cancel`]).
    pub(super) flag: calibsql::cancel::Cancel,
    /// The flags of its executions, one each ([`Stop::execution_flag`]).
    pub(super) executions: Mutex<Vec<calibsql::cancel::Cancel>>,
    pub(super) cancelled: AtomicBool,
    pub(super) notify: tokio::sync::Notify,
    pub(super) deadline: Option<(tokio::time::Instant, Duration)>,
}

impl Stop {
    pub(super) fn new(limit: Option<Duration>) -> Arc<Stop> {
        Arc::new(Stop {
            flag: Default::default(),
            executions: Mutex::new(Vec::new()),
            cancelled: AtomicBool::new(false),
            notify: tokio::sync::Notify::new(),
            deadline: limit.map(|limit| (tokio::time::Instant::now() + limit, limit)),
        })
    }

    /// A flag for one execution of the statement (one parameter row's), set when the
    /// statement is cancelled. Each has its own, since an execution's stream sets its flag
    /// when it ends ([`calibsql::cancel::execute_on`]) and the next must not see it set.
    pub(super) fn execution_flag(&self) -> calibsql::cancel::Cancel {
        let flag = calibsql::cancel::Cancel::new();
        if self.cancelled.load(Ordering::SeqCst) {
            flag.cancel();
        }
        if let Ok(mut executions) = self.executions.lock() {
            executions.push(flag.clone());
        }
        flag
    }

    pub(super) fn cancel(&self) {
        self.cancelled.store(true, Ordering::SeqCst);
        self.flag.cancel();
        if let Ok(executions) = self.executions.lock() {
            for flag in executions.iter() {
                flag.cancel();
            }
        }
        self.notify.notify_waiters();
    }

    /// Why the statement was stopped, if it was: its deadline passed, or it was cancelled.
    /// An error of its operators after a stop (the flag they saw) is reported as this.
    pub(super) fn reason(&self) -> Option<Status> {
        if let Some((at, limit)) = self.deadline {
            if tokio::time::Instant::now() >= at {
                return Some(Status::deadline_exceeded(statements::timed_out(limit)));
            }
        }
        self.cancelled
            .load(Ordering::SeqCst)
            .then(|| Status::cancelled(statements::CANCELLED))
    }

    /// The status of `error`, an error of the statement's work: why it was stopped, if it
    /// was.
    pub(super) fn status(&self, error: DataFusionError) -> Status {
        self.reason().unwrap_or_else(|| status(error))
    }

    /// Resolves with the error that stops the statement: a cancel, or its deadline.
    pub(super) async fn stopped(&self) -> Status {
        let deadline = async {
            match self.deadline {
                Some((at, limit)) => {
                    tokio::time::sleep_until(at).await;
                    limit
                }
                None => std::future::pending().await,
            }
        };
        let cancelled = async {
            loop {
                let notified = self.notify.notified();
                if self.cancelled.load(Ordering::SeqCst) {
                    return;
                }
                notified.await;
            }
        };
        let error = tokio::select! {
            _ = cancelled => Status::cancelled(statements::CANCELLED),
            limit = deadline => Status::deadline_exceeded(statements::timed_out(limit)),
        };
        self.cancel();
        error
    }
}
