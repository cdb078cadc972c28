//! The `calibsql` command line: parse options, build the session, run statements, map the
//! outcome to an exit code (documented in `--help`, see `args.rs`).

mod args;
mod cluster;
mod demo;
mod generate;
mod interrupt;
mod options;
mod output;
mod plot;
mod progress;
mod repl;
mod report;
#[cfg(feature = "serve")]
mod serve;
mod session;

use std::io::{self, Read, Write};
use std::process::ExitCode;

use anyhow::Context;

use options::{Mode, Options, Source, Terminals, UsageError};
use output::{print_error, stdout_closed, Interrupted};
use session::Session;

/// Exit code of a failed statement or run-time error.
const EXIT_FAILURE: u8 = 1;
/// Exit code of a usage error (clap uses the same).
const EXIT_USAGE: u8 = 2;
/// Exit code after Ctrl-C (128 + SIGINT), as shells report it.
const EXIT_INTERRUPTED: u8 = 130;

/// The program: runs, then turns the outcome into an exit code.
pub fn main() -> ExitCode {
    install_panic_hook();
    large_stacks_for_every_thread();
    let outcome = run();
    report_peak_memory();
    if stdout_closed() {
        // The reader of our output went away (`| head`): that is not a failure.
        return ExitCode::SUCCESS;
    }
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            if let Some(clap_error) = error.downcast_ref::<clap::Error>() {
                // Usage errors, and --help/--version (exit code 0).
                let _ = clap_error.print();
                return ExitCode::from(clap_error.exit_code().clamp(0, 255) as u8);
            }
            if error.is::<Interrupted>() {
                return ExitCode::from(EXIT_INTERRUPTED);
            }
            print_error(&error);
            if error.is::<UsageError>() {
                ExitCode::from(EXIT_USAGE)
            } else {
                ExitCode::from(EXIT_FAILURE)
            }
        }
    }
}

/// With `CALIBSQL_PEAK_RSS=1` in the environment, prints the process's peak resident memory
/// (`VmHWM` of /proc/self/status, Linux) on standard error at exit: what the end-to-end bench
/// reads for the memory of `auc` and `'quantile'` queries.
fn report_peak_memory() {
    if std::env::var_os("CALIBSQL_PEAK_RSS").is_none_or(|v| v == "0") {
        return;
    }
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    if let Some(line) = status.lines().find(|l| l.starts_with("VmHWM:")) {
        let kib: u64 = line
            .split_whitespace()
            .nth(1)
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        let _ = writeln!(io::stderr(), "calibsql: peak RSS {} MiB", kib / 1024);
    }
}

/// Threads this process starts without a stack size of their own (a cluster executor's task
/// runtime, DataFusion's blocking tasks) get calibsql's statement stack too
/// ([`calibsql::nesting`]), unless `RUST_MIN_STACK` says otherwise. Called before any thread
/// starts: the standard library reads the variable once.
fn large_stacks_for_every_thread() {
    if std::env::var_os("RUST_MIN_STACK").is_none() {
        std::env::set_var(
            "RUST_MIN_STACK",
            calibsql::nesting::THREAD_STACK.to_string(),
        );
    }
}

fn run() -> anyhow::Result<()> {
    let options = options::parse(std::env::args_os(), Terminals::detect())?;
    let statements = matches!(options.mode, Mode::Interactive | Mode::Batch(_));
    if statements {
        // Listen for Ctrl-C before anything slow: until then a SIGINT ends the process, or is
        // lost when the process was started with SIGINT ignored (a script's `cmd &`).
        interrupt::watch();
    }
    let runtime = calibsql::nesting::runtime_builder()
        .build()
        .context("cannot start the async runtime")?;
    // Statements are parsed and planned on the thread that drives the runtime too.
    let result = calibsql::nesting::on_large_stack(|| runtime.block_on(run_async(options)));
    if statements && result.as_ref().is_err_and(|e| e.is::<Interrupted>()) {
        // A statement cancelled by Ctrl-C can leave a task of its plan inside one long poll
        // (an operator between two looks at the cancel flag); dropping the runtime would wait
        // for that poll to return, which can take minutes. Nothing is left to write: the
        // process exits now, and the task with it. (The tools keep the waiting drop: `generate`
        // removes its half-written files on a blocking thread the runtime waits for.)
        runtime.shutdown_background();
    }
    result
}

async fn run_async(options: Options) -> anyhow::Result<()> {
    match &options.mode {
        Mode::Interactive => {
            let mut session = Session::new(&options).await?;
            repl::run(&mut session).await?;
            session.flush()?;
            Ok(())
        }
        Mode::Batch(sources) => {
            // Ctrl-C ends the whole run (exit 130); dropping the future cancels the query.
            // Checked first: the statement it cancelled may fail at the same moment. A Ctrl-C
            // before `ctrl_c()` listens still made the statement start cancelled: its error
            // is the Ctrl-C's too.
            tokio::select! {
                biased;
                _ = tokio::signal::ctrl_c() => Err(Interrupted.into()),
                result = run_batch(&options, sources) => result.map_err(|error| {
                    if interrupt::seen() {
                        Interrupted.into()
                    } else {
                        error
                    }
                }),
            }
        }
        Mode::Tool(command) => {
            tokio::select! {
                result = run_tool(&options, command) => result,
                _ = tokio::signal::ctrl_c() => {
                    // Data generation runs on a blocking thread the runtime waits for.
                    generate::cancel();
                    Err(Interrupted.into())
                }
            }
        }
    }
}

async fn run_tool(options: &Options, command: &args::Command) -> anyhow::Result<()> {
    match command {
        args::Command::Generate(args) => {
            let (args, progress) = (args.clone(), options.progress);
            tokio::task::spawn_blocking(move || generate::run(&args, progress)).await?
        }
        args::Command::Demo(args) => demo::run(args, options).await,
        args::Command::Plot(args::PlotCommand::Reliability(args)) => {
            plot::reliability(args, options).await
        }
        args::Command::Plot(args::PlotCommand::Metric(args)) => plot::metric(args, options).await,
        args::Command::Report(args) => report::run(args, options).await,
        args::Command::Scheduler(args) => cluster::scheduler(args).await,
        args::Command::Executor(args) => cluster::executor(args).await,
        #[cfg(feature = "serve")]
        args::Command::Serve(args) => serve::run(args).await,
        #[cfg(feature = "serve")]
        args::Command::HashPassword => serve::hash_password(),
        #[cfg(not(feature = "serve"))]
        args::Command::Serve(_) | args::Command::HashPassword => Err(options::UsageError(
            "this calibsql was built without the Postgres server; build it with `cargo \
             install --path . --features serve` (docs/serving.md)"
                .to_string(),
        )
        .into()),
    }
}

async fn run_batch(options: &Options, sources: &[Source]) -> anyhow::Result<()> {
    let mut session = Session::new(options).await?;
    for source in sources {
        let sql = match source {
            Source::Command(sql) => sql.clone(),
            Source::File(path) => std::fs::read_to_string(path)
                .with_context(|| format!("cannot read {}", path.display()))?,
            Source::Stdin => {
                let mut sql = String::new();
                io::stdin()
                    .read_to_string(&mut sql)
                    .context("cannot read standard input")?;
                sql
            }
        };
        let result = session.run_sql(&sql).await;
        session.flush()?;
        result?;
    }
    Ok(())
}

/// A panic is a bug; still, the user gets one `Error:` line and exit code 1, not a trace.
fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let payload = info.payload();
        let message = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".to_string());
        let location = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        let _ = writeln!(
            io::stderr(),
            "Error: internal error: {}{location}",
            calibsql::errors::one_line(&message)
        );
        std::process::exit(EXIT_FAILURE.into());
    }));
}
