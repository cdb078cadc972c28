//! calibsql on an Apache Ballista cluster (cargo feature `distributed`).
//!
//! Three roles, each a few lines for an embedder and a subcommand of the binary:
//!
//! - a **scheduler** ([`start_scheduler`], `calibsql scheduler`) plans queries: its sessions
//!   are Ballista's (with Ballista's optimizer rules) plus every calibsql function, calibsql's
//!   settings and `s3://` locations;
//! - **executors** ([`run_executor`], `calibsql executor`) run the tasks: every calibsql
//!   function is in their function registry (functions travel by name), and their runtimes
//!   read `s3://` with the same settings;
//! - a **client** ([`remote_context`], `calibsql --remote df://host:port`) plans statements
//!   against the scheduler; its `SessionContext` works like [`crate::build_context`]'s.
//!
//! Every role uses pull-based scheduling (executors ask for work; the scheduler needs no
//! address of theirs besides the one they register). An executor that stops answering is
//! declared dead after [`EXECUTOR_TIMEOUT`] and its tasks, and the stages whose shuffle
//! output it held, are run again on the others (Ballista's task and stage retries); a query
//! fails only when no executor is left or a task fails [`TASK_MAX_FAILURES`] times.
//! docs/distributed.md says the same for users.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ballista::prelude::{SessionConfigExt, SessionContextExt};
use ballista_core::config::TaskSchedulingPolicy;
use ballista_core::registry::BallistaFunctionRegistry;
use ballista_core::serde::protobuf::scheduler_grpc_client::SchedulerGrpcClient;
use ballista_core::serde::BallistaCodec;
use ballista_core::utils::{create_grpc_client_connection, GrpcClientConfig};
use ballista_core::{ConfigProducer, RuntimeProducer};
use ballista_executor::executor_process::{start_executor_process, ExecutorProcessConfig};
use ballista_scheduler::cluster::BallistaCluster;
use ballista_scheduler::config::SchedulerConfig as BallistaSchedulerConfig;
use ballista_scheduler::scheduler_process::{create_scheduler, start_grpc_service_with_listener};
use ballista_scheduler::SessionBuilder;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{plan_datafusion_err, plan_err, DataFusionError, Result};
use datafusion::config::ConfigOptions;
use datafusion::datasource::{source_as_provider, MemTable};
use datafusion::execution::disk_manager::{DiskManager, DiskManagerMode};
use datafusion::execution::memory_pool::{GreedyMemoryPool, MemoryPool};
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::execution::{SessionState, SessionStateBuilder};
use datafusion::logical_expr::{Expr, LogicalPlan, TableSource};
use datafusion::optimizer::AnalyzerRule;
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion_proto::protobuf::{LogicalPlanNode, PhysicalPlanNode};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

pub use crate::address::DEFAULT_SCHEDULER_PORT;
use crate::address::{parse_host_port, parse_remote_url};
use crate::stores::{
    register_object_stores, runtime_with_object_stores, S3Options, TablesReadElsewhere,
};
use crate::udfs::fit::NONPARAMETRIC_EXACT_CAP;
use crate::ContextOptions;
pub use ballista_core::BALLISTA_VERSION;

/// Port of `calibsql executor`'s data (Arrow Flight) service unless `--bind` says otherwise.
pub const DEFAULT_EXECUTOR_PORT: u16 = 50051;
/// How often an executor reports to the scheduler when it has no task to ask for. (With
/// pull-based scheduling every request for work is a heartbeat too.)
pub const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(3);
/// An executor silent for this long is dead: its running tasks and the shuffle output it held
/// are scheduled again on the others. Ballista's default is 180 s; calibsql's is short so a
/// lost machine costs seconds, not minutes.
pub const EXECUTOR_TIMEOUT: Duration = Duration::from_secs(15);
/// How often the scheduler looks for dead executors (Ballista's default is 15 s).
pub const EXPIRE_CHECK_INTERVAL: Duration = Duration::from_secs(3);
/// Attempts of one task before its query fails (Ballista's default).
pub const TASK_MAX_FAILURES: usize = 4;
/// How long a client or an executor waits for the scheduler to answer a connection.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Client optimizer rules whose output cannot be serialised (see [`remote_context`]).
const SHIP_UNSAFE_RULES: [&str; 3] = [
    "eliminate_filter",
    "eliminate_limit",
    "propagate_empty_relation",
];

/// The session configuration every role starts from: Ballista's (it turns some DataFusion
/// settings off, e.g. Utf8View strings and round-robin repartitioning), calibsql's settings
/// and `information_schema`.
pub fn cluster_config() -> SessionConfig {
    crate::with_calibsql_settings(SessionConfig::new_with_ballista().with_information_schema(true))
}

/// A scheduler's session for `config`: Ballista's session (its optimizer rules and planner)
/// with every calibsql function and `s3://` locations read with `s3`.
pub fn scheduler_session(config: SessionConfig, s3: &S3Options) -> Result<SessionState> {
    let config = crate::with_calibsql_settings(config);
    let state = ballista_core::utils::default_session_builder(config)?;
    let ctx = SessionContext::new_with_state(state);
    crate::register_all(&ctx);
    register_object_stores(&ctx, s3.clone())?;
    Ok(ctx.state())
}

/// The functions an executor can run: DataFusion's (as Ballista registers them) and every
/// calibsql function; under a memory limit, the functions whose results grow with an
/// argument's value bounded by it ([`crate::value_limits`]).
pub fn function_registry(memory_limit: Option<u64>) -> Result<BallistaFunctionRegistry> {
    let state = scheduler_session(cluster_config(), &S3Options::default())?;
    let ctx = SessionContext::new_with_state(state);
    if let Some(limit) = memory_limit {
        crate::value_limits::bound_value_functions(
            &ctx,
            usize::try_from(limit).unwrap_or(usize::MAX),
        );
    }
    Ok(BallistaFunctionRegistry::from(&ctx.state()))
}

/// Executor runtimes: spill files under `work_dir` and `s3://` read with `s3`. (The
/// executor's memory pool is added by Ballista, from `--memory-limit`.)
pub fn runtime_producer(s3: S3Options, work_dir: Option<PathBuf>) -> RuntimeProducer {
    Arc::new(move |_config: &SessionConfig| {
        let mut runtime = RuntimeEnvBuilder::new();
        if let Some(dir) = &work_dir {
            runtime = runtime.with_temp_file_path(dir);
        }
        runtime_with_object_stores(&runtime.build_arc()?, s3.clone())
    })
}

fn config_producer() -> ConfigProducer {
    Arc::new(cluster_config)
}

fn session_builder(s3: S3Options) -> SessionBuilder {
    Arc::new(move |config: SessionConfig| scheduler_session(config, &s3))
}

/// A scheduler's settings (`calibsql scheduler`).
#[derive(Debug, Clone)]
pub struct SchedulerConfig {
    /// Address to listen on; port 0 picks a free one ([`Scheduler::address`] says which).
    pub bind: SocketAddr,
    /// S3 settings over the AWS environment, for the files the scheduler lists while planning.
    pub s3: S3Options,
    /// After how long without news an executor is dead.
    pub executor_timeout: Duration,
}

impl SchedulerConfig {
    /// Listens on `bind`; S3 from the AWS environment; [`EXECUTOR_TIMEOUT`].
    pub fn new(bind: SocketAddr) -> SchedulerConfig {
        SchedulerConfig {
            bind,
            s3: S3Options::default(),
            executor_timeout: EXECUTOR_TIMEOUT,
        }
    }
}

/// A scheduler running on the current tokio runtime.
pub struct Scheduler {
    /// The address it listens on.
    pub address: SocketAddr,
    server: JoinHandle<Result<()>>,
}

impl Scheduler {
    /// The URL clients connect to (`df://host:port`).
    pub fn url(&self) -> String {
        format!("df://{}", self.address)
    }

    /// Waits until the scheduler stops (it runs until the process ends or fails).
    pub async fn wait(mut self) -> Result<()> {
        (&mut self.server)
            .await
            .map_err(|e| DataFusionError::External(Box::new(e)))?
    }
}

impl Drop for Scheduler {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// Starts a scheduler on the current tokio runtime; it runs until dropped.
pub async fn start_scheduler(config: SchedulerConfig) -> Result<Scheduler> {
    let listener = TcpListener::bind(config.bind).await.map_err(|e| {
        crate::errors::Plain::error(format!(
            "calibsql scheduler: cannot listen on {} ({e})",
            config.bind
        ))
    })?;
    let address = listener.local_addr()?;
    let ballista_config = BallistaSchedulerConfig {
        bind_host: address.ip().to_string(),
        bind_port: address.port(),
        external_host: address.ip().to_string(),
        scheduling_policy: TaskSchedulingPolicy::PullStaged,
        executor_timeout_seconds: config.executor_timeout.as_secs().max(1),
        expire_dead_executor_interval_seconds: EXPIRE_CHECK_INTERVAL.as_secs(),
        no_executors_grace_period_seconds: config.executor_timeout.as_secs().max(1),
        task_max_failures: TASK_MAX_FAILURES,
        override_session_builder: Some(session_builder(config.s3.clone())),
        override_config_producer: Some(config_producer()),
        ..BallistaSchedulerConfig::default()
    };
    ballista_config.validate().map_err(ballista_error)?;
    let cluster = BallistaCluster::new_from_config(&ballista_config)
        .await
        .map_err(ballista_error)?;
    let scheduler =
        create_scheduler::<LogicalPlanNode, PhysicalPlanNode>(cluster, Arc::new(ballista_config))
            .await
            .map_err(ballista_error)?;
    let server = tokio::spawn(async move {
        start_grpc_service_with_listener(listener, scheduler)
            .await
            .map_err(ballista_error)
    });
    Ok(Scheduler { address, server })
}

/// An executor's settings (`calibsql executor`).
#[derive(Debug, Clone)]
pub struct ExecutorConfig {
    /// The scheduler, `host:port`.
    pub scheduler: String,
    /// Address of the executor's data service, which other executors and the client fetch
    /// results from.
    pub bind: SocketAddr,
    /// Tasks run at once [default: the number of CPU cores].
    pub concurrent_tasks: usize,
    /// Directory for shuffle files and spills [default: a new temporary directory].
    pub work_dir: Option<PathBuf>,
    /// Bytes of memory the executor's tasks may use before they spill or fail, shared by its
    /// task slots [default: Ballista's, a fraction of the machine's memory].
    pub memory_limit: Option<u64>,
    /// S3 settings over the AWS environment.
    pub s3: S3Options,
}

impl ExecutorConfig {
    /// An executor of the scheduler at `scheduler` (`host:port`) listening on `bind`.
    pub fn new(scheduler: &str, bind: SocketAddr) -> ExecutorConfig {
        ExecutorConfig {
            scheduler: scheduler.to_string(),
            bind,
            concurrent_tasks: std::thread::available_parallelism().map_or(1, |n| n.get()),
            work_dir: None,
            memory_limit: None,
            s3: S3Options::default(),
        }
    }
}

/// Runs an executor until the process gets Ctrl-C / SIGTERM or the scheduler stops it.
pub async fn run_executor(config: ExecutorConfig) -> Result<()> {
    let (host, port) = parse_host_port(&config.scheduler)
        .map_err(|e| plan_datafusion_err!("calibsql executor --scheduler {e}"))?;
    if config.concurrent_tasks == 0 {
        return plan_err!("calibsql executor: --concurrent-tasks must be at least 1");
    }
    let registry = Arc::new(function_registry(config.memory_limit)?);
    // Under a memory limit, the rows the aggregates keep (and the fits' states) are held in a
    // pool of the limit of their own and spill to the work directory: Ballista gives each
    // task a pool of its own, which an aggregate cannot reach. Held here for the executor's
    // life (the functions hold them weakly).
    let _kept_rows = match config.memory_limit {
        Some(limit) => Some(kept_rows_target(limit, config.work_dir.as_deref())?),
        None => None,
    };
    let process = ExecutorProcessConfig {
        bind_host: config.bind.ip().to_string(),
        // Bound to every interface (0.0.0.0): the scheduler takes the address the executor's
        // connection comes from.
        external_host: (!config.bind.ip().is_unspecified()).then(|| config.bind.ip().to_string()),
        port: config.bind.port(),
        scheduler_host: host,
        scheduler_port: port,
        scheduler_connect_timeout_seconds: CONNECT_TIMEOUT.as_secs() as u16,
        vcores: config.concurrent_tasks,
        task_scheduling_policy: TaskSchedulingPolicy::PullStaged,
        work_dir: config
            .work_dir
            .as_ref()
            .map(|dir| dir.display().to_string()),
        executor_heartbeat_interval_seconds: HEARTBEAT_INTERVAL.as_secs(),
        memory_pool_size: config.memory_limit,
        override_function_registry: Some(registry),
        override_runtime_producer: Some(runtime_producer(
            config.s3.clone(),
            config.work_dir.clone(),
        )),
        override_config_producer: Some(config_producer()),
        ..ExecutorProcessConfig::default()
    };
    start_executor_process(Arc::new(process))
        .await
        .map_err(ballista_error)
}

/// The pool of `limit` bytes and the disk manager (temporary files under `work_dir`, else
/// the system's) that the aggregates keeping rows use in an executor
/// ([`calibsql_udfs::spill_to`]); they stay installed while the returned pair lives.
fn kept_rows_target(
    limit: u64,
    work_dir: Option<&std::path::Path>,
) -> Result<(Arc<DiskManager>, Arc<dyn MemoryPool>)> {
    let mode = match work_dir {
        Some(dir) => DiskManagerMode::Directories(vec![dir.to_path_buf()]),
        None => DiskManagerMode::OsTmpDirectory,
    };
    let disk = Arc::new(DiskManager::builder().with_mode(mode).build()?);
    let pool: Arc<dyn MemoryPool> = Arc::new(GreedyMemoryPool::new(
        usize::try_from(limit).unwrap_or(usize::MAX),
    ));
    calibsql_udfs::spill_to(&disk, &pool);
    Ok((disk, pool))
}

/// Starts an executor on the current tokio runtime, in this process, with `concurrent_tasks`
/// task slots, listening on a free port of 127.0.0.1: for tests, benches and single-machine
/// trials ([`LocalCluster`]).
pub async fn start_local_executor(
    scheduler: SocketAddr,
    concurrent_tasks: usize,
    s3: S3Options,
) -> Result<()> {
    let channel =
        create_grpc_client_connection(format!("http://{scheduler}"), &GrpcClientConfig::default())
            .await
            .map_err(|e| scheduler_unreachable(&scheduler.to_string(), &e.to_string()))?;
    let config = cluster_config();
    let codec: BallistaCodec<LogicalPlanNode, PhysicalPlanNode> = BallistaCodec::new(
        config.ballista_logical_extension_codec(),
        config.ballista_physical_extension_codec(),
    );
    ballista_executor::new_standalone_executor_from_builder(
        SchedulerGrpcClient::new(channel),
        concurrent_tasks,
        config_producer(),
        runtime_producer(s3, None),
        codec,
        function_registry(None)?,
    )
    .await
    .map_err(ballista_error)
}

/// A scheduler and executors in this process, on 127.0.0.1: what `tests/distributed.rs` and
/// `benches/distributed.rs` run queries on. It lives as long as the tokio runtime it was
/// started on (the executors cannot be stopped on their own).
pub struct LocalCluster {
    pub scheduler: Scheduler,
}

impl LocalCluster {
    /// A scheduler and `executors` executors with `concurrent_tasks` task slots each.
    pub async fn start(executors: usize, concurrent_tasks: usize) -> Result<LocalCluster> {
        let scheduler =
            start_scheduler(SchedulerConfig::new(SocketAddr::from(([127, 0, 0, 1], 0)))).await?;
        for _ in 0..executors {
            start_local_executor(scheduler.address, concurrent_tasks, S3Options::default()).await?;
        }
        Ok(LocalCluster { scheduler })
    }

    /// The URL clients connect to.
    pub fn url(&self) -> String {
        self.scheduler.url()
    }
}

/// A session that plans and runs its queries on the cluster whose scheduler is at `url`
/// (`df://host:port`), with `options` (batch size, partitions, S3 settings of this client,
/// which lists and reads files while planning). Fails with one clear line when the scheduler
/// does not answer within [`CONNECT_TIMEOUT`].
///
/// Differences from a local session: tables held in this process's memory (`CREATE TABLE …
/// AS VALUES`, registered record batches) cannot be shipped and are refused by name; `CREATE
/// EXTERNAL TABLE … OPTIONS ('aws.…')` is refused (executors read S3 with their own
/// settings); `SET calibsql.fit_exact_cap` to anything but its default is refused, since
/// executors rebuild functions by name with the default.
pub async fn remote_context(url: &str, options: &ContextOptions) -> Result<SessionContext> {
    let address = parse_remote_url(url).map_err(|e| plan_datafusion_err!("--remote {e}"))?;
    if options.memory_limit.is_some() {
        return plan_err!(
            "--memory-limit limits a local query; on a cluster each executor has its own \
             (calibsql executor --memory-limit SIZE)"
        );
    }
    check_scheduler(&address).await?;
    let mut config = cluster_config();
    if let Some(n) = options.batch_size {
        config = config.with_batch_size(n);
    }
    if let Some(n) = options.target_partitions {
        config = config.with_target_partitions(n);
    }
    let state = SessionStateBuilder::new()
        .with_config(config)
        .with_default_features()
        .build();
    let ctx = SessionContext::remote_with_state(&format!("df://{address}"), state).await?;
    // Ballista's upgrade of the session replaced its function lists: register ours after it.
    crate::register_all(&ctx);
    // These rules turn a filter that is always false, LIMIT 0 and what they empty into an
    // `EmptyRelation`, whose serialised form (datafusion-proto 55) drops its schema: the
    // scheduler then fails with "No field named …". Unoptimised, those plans travel fine and
    // the scheduler, which optimises again with every rule, empties them there.
    for rule in SHIP_UNSAFE_RULES {
        ctx.remove_optimizer_rule(rule);
    }
    ctx.add_analyzer_rule(Arc::new(RefuseWhatCannotBeShipped));
    register_object_stores(&ctx, options.s3.clone())?;
    ctx.state_ref()
        .write()
        .config_mut()
        .set_extension(Arc::new(TablesReadElsewhere {
            remedy: "on a cluster the executors read S3 with their own settings; start \
                     calibsql scheduler and calibsql executor with the --s3-* flags or the \
                     AWS_* environment instead"
                .to_string(),
        }));
    Ok(crate::delta::with_url_tables(ctx, |tables| tables))
}

/// Fails with one line when nothing answers at `address` (`host:port`).
async fn check_scheduler(address: &str) -> Result<()> {
    let config = GrpcClientConfig {
        connect_timeout_seconds: CONNECT_TIMEOUT.as_secs(),
        ..GrpcClientConfig::default()
    };
    let connect = create_grpc_client_connection(format!("http://{address}"), &config);
    match tokio::time::timeout(CONNECT_TIMEOUT, connect).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(scheduler_unreachable(address, &error_chain(&e))),
        Err(_) => Err(scheduler_unreachable(
            address,
            &format!("no answer within {} s", CONNECT_TIMEOUT.as_secs()),
        )),
    }
}

fn scheduler_unreachable(address: &str, why: &str) -> DataFusionError {
    crate::errors::Plain::error(format!(
        "cannot reach the Ballista scheduler at df://{address} ({why}); is `calibsql \
         scheduler` running there, and is the address right?"
    ))
}

/// An error and its causes, `: `-separated (tonic's transport error says only "transport
/// error" at the top).
fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = vec![error.to_string()];
    let mut cause = error.source();
    while let Some(current) = cause {
        let text = current.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        cause = current.source();
    }
    parts.join(": ")
}

fn ballista_error(error: ballista_core::error::BallistaError) -> DataFusionError {
    match error {
        ballista_core::error::BallistaError::DataFusionError(e) => *e,
        other => DataFusionError::External(Box::new(other)),
    }
}

/// The client's check that a plan can run on the cluster: no table held in this process's
/// memory, no setting the executors would not see.
#[derive(Debug)]
struct RefuseWhatCannotBeShipped;

impl AnalyzerRule for RefuseWhatCannotBeShipped {
    fn analyze(&self, plan: LogicalPlan, config: &ConfigOptions) -> Result<LogicalPlan> {
        let cap = crate::settings::fit_exact_cap(config);
        plan.apply_with_subqueries(|node| {
            let source = match node {
                LogicalPlan::TableScan(scan) => Some((&scan.table_name, &scan.source)),
                LogicalPlan::Dml(dml) => Some((&dml.table_name, &dml.target)),
                _ => None,
            };
            if let Some((name, source)) = source {
                refuse_table_held_here(&name.to_string(), source)?;
            }
            if cap != NONPARAMETRIC_EXACT_CAP {
                for expr in node.expressions() {
                    refuse_capped_fit(&expr, cap)?;
                }
            }
            Ok(TreeNodeRecursion::Continue)
        })?;
        Ok(plan)
    }

    fn name(&self) -> &str {
        "calibsql_refuse_what_cannot_be_shipped"
    }
}

fn refuse_table_held_here(name: &str, source: &Arc<dyn TableSource>) -> Result<()> {
    let Ok(provider) = source_as_provider(source) else {
        return Ok(());
    };
    if provider.is::<MemTable>() {
        return plan_err!(
            "table {name} is held in this client's memory (CREATE TABLE … AS, VALUES or \
             registered batches) and cannot be shipped to the cluster; write it to a file \
             the executors can read (COPY … TO 'dir/t.parquet') and use that as a table"
        );
    }
    if let Some(delta) = provider.downcast_ref::<crate::delta::DeltaTableProvider>() {
        return plan_err!(
            "table {name} is a Delta table ({}), which calibsql reads in this process only; \
             run the query without --remote, or COPY the rows the query needs to Parquet the \
             executors can read",
            delta.location()
        );
    }
    Ok(())
}

fn refuse_capped_fit(expr: &Expr, cap: usize) -> Result<()> {
    expr.apply(|e| {
        if let Expr::AggregateFunction(call) = e {
            if crate::udfs::with_exact_cap(&call.func, cap).is_some() {
                return plan_err!(
                    "{}: SET calibsql.fit_exact_cap = {cap} is not applied on a cluster (the \
                     executors use the default, {NONPARAMETRIC_EXACT_CAP}); RESET \
                     calibsql.fit_exact_cap or run the query locally",
                    call.func.name()
                );
            }
        }
        Ok(TreeNodeRecursion::Continue)
    })
    .map(|_| ())
}
