//! `calibsql scheduler` and `calibsql executor`: the roles of an Apache Ballista cluster
//! (`calibsql::distributed`), when the binary is built with `--features distributed`.

use super::args::{ExecutorArgs, SchedulerArgs};

/// Ballista's log lines on standard error: warnings and errors, or what `RUST_LOG` asks for
/// (e.g. `RUST_LOG=info` shows executors registering and jobs finishing).
#[cfg(feature = "distributed")]
fn init_logging() {
    let env = env_logger::Env::default().default_filter_or("warn");
    let _ = env_logger::Builder::from_env(env).try_init();
}

#[cfg(feature = "distributed")]
pub async fn scheduler(args: &SchedulerArgs) -> anyhow::Result<()> {
    use calibsql::distributed::{start_scheduler, SchedulerConfig};
    use std::io::Write;

    init_logging();
    let scheduler = start_scheduler(SchedulerConfig {
        bind: args.bind,
        s3: args.s3.options(),
        executor_timeout: std::time::Duration::from_secs(args.executor_timeout),
    })
    .await?;
    let _ = writeln!(
        std::io::stderr(),
        "calibsql scheduler listening on {} (Ballista {}, DataFusion {}); clients: \
         calibsql --remote {}; executors: calibsql executor --scheduler {}",
        scheduler.address,
        calibsql::distributed::BALLISTA_VERSION,
        datafusion::DATAFUSION_VERSION,
        scheduler.url(),
        scheduler.address,
    );
    // Runs until Ctrl-C (handled by the caller) or SIGTERM.
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        result = scheduler.wait() => Ok(result?),
        _ = terminate.recv() => Ok(()),
    }
}

#[cfg(feature = "distributed")]
pub async fn executor(args: &ExecutorArgs) -> anyhow::Result<()> {
    use calibsql::distributed::{run_executor, ExecutorConfig};
    use std::io::Write;

    init_logging();
    let mut config = ExecutorConfig::new(&args.scheduler, args.bind);
    if let Some(n) = args.concurrent_tasks {
        config.concurrent_tasks = n;
    }
    config.work_dir = args.work_dir.clone();
    config.memory_limit = args.memory_limit.map(|n| n as u64);
    config.s3 = args.s3.options();
    let _ = writeln!(
        std::io::stderr(),
        "calibsql executor on {} for the scheduler at {}, {} task slot(s)",
        args.bind,
        args.scheduler,
        config.concurrent_tasks,
    );
    // Ballista's executor stops on Ctrl-C and SIGTERM by itself.
    Ok(run_executor(config).await?)
}

#[cfg(not(feature = "distributed"))]
pub async fn scheduler(_: &SchedulerArgs) -> anyhow::Result<()> {
    Err(not_built("scheduler"))
}

#[cfg(not(feature = "distributed"))]
pub async fn executor(_: &ExecutorArgs) -> anyhow::Result<()> {
    Err(not_built("executor"))
}

#[cfg(not(feature = "distributed"))]
fn not_built(role: &str) -> anyhow::Error {
    super::options::UsageError(format!(
        "calibsql {role}: this calibsql was built without the cluster roles; build it with \
         `cargo install --path . --features distributed` (docs/distributed.md)"
    ))
    .into()
}
