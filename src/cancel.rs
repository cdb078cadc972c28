//! Stopping a statement soon after it is cancelled (a Postgres cancel request, Ctrl-C,
//! Python's `KeyboardInterrupt`, a timeout).
//!
//! Dropping a statement's stream aborts the tasks DataFusion spawned for it, but an abort
//! takes effect only when the task's current poll returns, and one poll of some operators
//! runs long: a nested-loop join probes up to 128 input batches against its whole build side
//! before it yields. So a statement runs here as a [`cancellable`] plan: every leaf, every
//! aggregation and the probe side of every nested-loop join is read through a [`CheckCancel`]
//! node that ends its stream with an error as soon as the statement's [`Cancel`] flag is
//! set, and that makes the flag the thread's while it polls, so that the functions' own long
//! loops (a fit's optimisation) can look at it (`calibsql_udfs::cancel::check`). The probe side
//! of a nested-loop join is also handed on in slices sized so that the join spends about
//! [`PROBE_SLICE_TIME`] on each, which bounds the work between two looks at the flag: a
//! join compares a whole probe batch with its whole build side before it asks for more.
//!
//! The wrapping is done when a statement is executed ([`execute_stream`], [`collect`]), not
//! while it is planned, so `EXPLAIN` shows the plan as DataFusion made it. The flag of the
//! statement being executed is the task's ([`scope`]): the CLI, the server and the Python
//! module set it around each statement and set the flag when they cancel.

use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::Result;
use datafusion::dataframe::DataFrame;
use datafusion::execution::{RecordBatchStream, SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::aggregates::AggregateExec;
use datafusion::physical_plan::analyze::AnalyzeExec;
use datafusion::physical_plan::joins::NestedLoopJoinExec;
use datafusion::physical_plan::{
    ChildrenPropertiesMode, DisplayAs, DisplayFormatType, ExecutionPlan, PhysicalExpr,
    PlanProperties, ReplaceChildrenOptions,
};
use futures::{Stream, StreamExt};

pub use calibsql_udfs::cancel::Cancel;

/// How long a nested-loop join may work on one slice of its probe side before the slices get
/// smaller (and under a tenth of it, larger): the time between two looks at the cancel flag.
pub const PROBE_SLICE_TIME: std::time::Duration = std::time::Duration::from_millis(100);

/// Probe rows of a slice: the first one, and at the most.
const PROBE_SLICE_ROWS: (usize, usize) = (16, 8192);

tokio::task_local! {
    static CURRENT: Cancel;
}

/// Runs `work` with `cancel` as the flag of the statements it executes.
pub async fn scope<F: std::future::Future>(cancel: Cancel, work: F) -> F::Output {
    CURRENT.scope(cancel, work).await
}

/// The flag of the statement the current task executes, if it runs in a [`scope`].
pub fn current() -> Option<Cancel> {
    CURRENT.try_with(Cancel::clone).ok()
}

/// Executes `frame` as a [`cancellable`] plan under the current task's flag. The flag is
/// also looked at between the planning phases (before and after the logical optimizer, after
/// the physical planner): none of them can be stopped inside (each runs its rules to the end),
/// but a statement cancelled (or timed out) while one runs goes no further than it.
pub async fn execute_stream(frame: DataFrame) -> Result<SendableRecordBatchStream> {
    let task_ctx = Arc::new(frame.task_ctx());
    let (state, plan) = frame.into_parts();
    check_current()?;
    let optimized = state.optimize(&plan)?;
    check_current()?;
    let plan = state
        .query_planner()
        .create_physical_plan(&optimized, &state)
        .await?;
    check_current()?;
    execute_plan(plan, task_ctx)
}

/// An error if the current task's statement is cancelled (see [`scope`]).
pub fn check_current() -> Result<()> {
    match current() {
        Some(cancel) if cancel.is_cancelled() => Err(calibsql_udfs::cancel::cancelled()),
        _ => Ok(()),
    }
}

/// [`execute_stream`] of a physical plan already made.
pub fn execute_plan(
    plan: Arc<dyn ExecutionPlan>,
    task_ctx: Arc<TaskContext>,
) -> Result<SendableRecordBatchStream> {
    datafusion::physical_plan::execute_stream(under_current(plan)?, task_ctx)
}

/// `plan` [`cancellable`] under the current task's flag (as it is outside a [`scope`]).
pub fn under_current(plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    match current() {
        Some(cancel) => cancellable(plan, &cancel),
        None => Ok(plan),
    }
}

/// Executes `frame` in a task of the runtime `on` under `cancel`, and streams its batches
/// back to whoever polls the result, on any runtime. The query's operators then run on
/// `on`'s threads and leave the caller's free to notice a cancel request; dropping the
/// result sets `cancel` and aborts the task.
pub fn execute_on(
    on: &tokio::runtime::Handle,
    frame: DataFrame,
    cancel: Cancel,
) -> SendableRecordBatchStream {
    let schema: SchemaRef = Arc::new(frame.schema().as_arrow().clone());
    let (sender, receiver) = tokio::sync::mpsc::channel::<Result<RecordBatch>>(2);
    let task = on.spawn(scope(cancel.clone(), async move {
        let mut stream = match execute_stream(frame).await {
            Ok(stream) => stream,
            Err(e) => {
                let _ = sender.send(Err(e)).await;
                return;
            }
        };
        while let Some(batch) = stream.next().await {
            if sender.send(batch).await.is_err() {
                return;
            }
        }
    }));
    let stop = StopOnDrop { cancel, task };
    let batches = futures::stream::unfold((receiver, stop), |(mut receiver, stop)| async move {
        let batch = receiver.recv().await?;
        Some((batch, (receiver, stop)))
    });
    Box::pin(datafusion::physical_plan::stream::RecordBatchStreamAdapter::new(schema, batches))
}

/// Stops a statement's task when its result is dropped.
struct StopOnDrop {
    cancel: Cancel,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.cancel.cancel();
        self.task.abort();
    }
}

/// Every batch of `frame`, executed as by [`execute_stream`].
pub async fn collect(frame: DataFrame) -> Result<Vec<RecordBatch>> {
    datafusion::physical_plan::common::collect(execute_stream(frame).await?).await
}

/// `plan` with a [`CheckCancel`] above every leaf and every aggregation and on the probe side
/// of every nested-loop join. An `EXPLAIN ANALYZE` is left as it is (it prints its plan).
pub fn cancellable(
    plan: Arc<dyn ExecutionPlan>,
    cancel: &Cancel,
) -> Result<Arc<dyn ExecutionPlan>> {
    if plan.is::<AnalyzeExec>() {
        return Ok(plan);
    }
    let plan = wrap_children(plan, cancel)?;
    Ok(CheckCancel::wrap(plan, cancel, false))
}

/// `plan` with its children made cancellable, each wrapped where [`cancellable`] says.
fn wrap_children(plan: Arc<dyn ExecutionPlan>, cancel: &Cancel) -> Result<Arc<dyn ExecutionPlan>> {
    let children = plan.children();
    if children.is_empty() {
        return Ok(plan);
    }
    // A nested-loop join builds its left input and probes it with its right one.
    let probe = plan.is::<NestedLoopJoinExec>().then_some(1);
    let mut wrapped = Vec::with_capacity(children.len());
    for (i, child) in children.into_iter().enumerate() {
        let child = wrap_children(Arc::clone(child), cancel)?;
        let slice = probe == Some(i);
        let checked = child.children().is_empty() || child.is::<AggregateExec>() || slice;
        wrapped.push(if checked {
            CheckCancel::wrap(child, cancel, slice)
        } else {
            child
        });
    }
    // The wrappers keep their inputs' properties, so the parent's stay valid.
    plan.replace_children(
        wrapped,
        ReplaceChildrenOptions::new(ChildrenPropertiesMode::Keep),
    )
}

/// Reads its input until the statement is cancelled, then ends with an error; on a
/// nested-loop join's probe side (`slice`), hands the input's batches on in slices of
/// [`PROBE_SLICE_TIME`]'s worth of the join's work.
#[derive(Debug)]
pub struct CheckCancel {
    input: Arc<dyn ExecutionPlan>,
    cancel: Cancel,
    slice: bool,
}

impl CheckCancel {
    fn wrap(input: Arc<dyn ExecutionPlan>, cancel: &Cancel, slice: bool) -> Arc<dyn ExecutionPlan> {
        Arc::new(CheckCancel {
            input,
            cancel: cancel.clone(),
            slice,
        })
    }
}

impl DisplayAs for CheckCancel {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CheckCancel")
    }
}

impl ExecutionPlan for CheckCancel {
    fn name(&self) -> &str {
        "CheckCancel"
    }

    /// Invisible to parents that look at their inputs' types.
    fn downcast_delegate(&self) -> Option<&dyn ExecutionPlan> {
        Some(self.input.as_ref())
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.input.properties()
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![true]
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    /// The properties are the input's, whichever the mode.
    fn replace_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
        _options: ReplaceChildrenOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(CheckCancel::wrap(
            children.swap_remove(0),
            &self.cancel,
            self.slice,
        ))
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        self.replace_children(
            children,
            ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute),
        )
    }

    fn with_new_children_and_same_properties(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        self.replace_children(
            children,
            ReplaceChildrenOptions::new(ChildrenPropertiesMode::Keep),
        )
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        if self.cancel.is_cancelled() {
            return Err(calibsql_udfs::cancel::cancelled());
        }
        let input = self
            .cancel
            .while_polling(|| self.input.execute(partition, context))?;
        Ok(Box::pin(CheckCancelStream {
            input,
            cancel: self.cancel.clone(),
            slice_rows: self.slice.then_some(PROBE_SLICE_ROWS.0),
            handed: None,
            pending: None,
            done: false,
        }))
    }
}

struct CheckCancelStream {
    input: SendableRecordBatchStream,
    cancel: Cancel,
    /// The rows of the next slice, when slicing.
    slice_rows: Option<usize>,
    /// When the last slice was handed on: the time until the next request is the consumer's
    /// work on it.
    handed: Option<std::time::Instant>,
    /// A batch being handed on in slices, and the offset of its next slice.
    pending: Option<(RecordBatch, usize)>,
    done: bool,
}

impl CheckCancelStream {
    /// Halves the slices when the consumer spent more than [`PROBE_SLICE_TIME`] on the last
    /// one, doubles them when it spent less than a tenth of it.
    fn adapt(&mut self) {
        let (Some(rows), Some(handed)) = (self.slice_rows, self.handed) else {
            return;
        };
        let spent = handed.elapsed();
        let rows = if spent > PROBE_SLICE_TIME {
            rows / 2
        } else if spent < PROBE_SLICE_TIME / 10 {
            rows * 2
        } else {
            rows
        };
        self.slice_rows = Some(rows.clamp(1, PROBE_SLICE_ROWS.1));
    }

    /// The next slice of the pending batch, if any.
    fn next_slice(&mut self) -> Option<RecordBatch> {
        let rows = self.slice_rows?;
        let (batch, offset) = self.pending.take()?;
        let length = rows.min(batch.num_rows() - offset);
        let slice = batch.slice(offset, length);
        if offset + length < batch.num_rows() {
            self.pending = Some((batch, offset + length));
        }
        Some(slice)
    }
}

impl Stream for CheckCancelStream {
    type Item = Result<RecordBatch>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.done {
            return Poll::Ready(None);
        }
        if self.cancel.is_cancelled() {
            self.done = true;
            return Poll::Ready(Some(Err(calibsql_udfs::cancel::cancelled())));
        }
        self.adapt();
        if let Some(slice) = self.next_slice() {
            self.handed = Some(std::time::Instant::now());
            return Poll::Ready(Some(Ok(slice)));
        }
        let this = &mut *self;
        let polled = this.cancel.while_polling(|| this.input.poll_next_unpin(cx));
        match polled {
            Poll::Ready(Some(Ok(batch))) => match this.slice_rows {
                Some(rows) if batch.num_rows() > rows => {
                    this.pending = Some((batch, 0));
                    this.handed = Some(std::time::Instant::now());
                    Poll::Ready(this.next_slice().map(Ok))
                }
                Some(_) => {
                    this.handed = Some(std::time::Instant::now());
                    Poll::Ready(Some(Ok(batch)))
                }
                None => Poll::Ready(Some(Ok(batch))),
            },
            other => other,
        }
    }
}

impl RecordBatchStream for CheckCancelStream {
    fn schema(&self) -> SchemaRef {
        self.input.schema()
    }
}
