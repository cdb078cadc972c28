//! `calibsql scheduler`, `calibsql executor` and `calibsql --remote` as separate processes on
//! 127.0.0.1 (`--features distributed`): a scheduler and two executors with one task slot
//! each. Every process is a `support/child.rs` guard: killed and reaped when the test ends,
//! also when it fails, and (Linux) when the test binary itself is killed; clients have a
//! deadline. The scheduler binds port 0 and says which port it got; an executor, which has
//! to register a port it listens on, gets a free port and another one if that was taken
//! before it could bind it. A cluster is used once it has answered a query.
//!
//! The CSV a query prints on the cluster is compared with the local run's (numbers to 1e-12
//! relative: both are calibsql, so this is an invariance check; the values are checked
//! against independent computations elsewhere).

#[path = "support/child.rs"]
mod child;
#[path = "support/s3_server.rs"]
mod s3_server;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use child::Child;

const KEY: &str = "cluster-test-key";
const SECRET: &str = "cluster-s3cr3t-Do-Not-Print-77e1";

/// The query compared between the cluster and local runs.
const QUERY: &str = "SELECT site_id, count(*) AS n, ece(p_model, click) AS ece,
        ece(p_model, click, 10, 'quantile') AS ece_q, logloss(p_model, click) AS ll,
        auc(p_model, click) AS auc, field_rce(p_model, click, ad_type) AS rce
    FROM t GROUP BY site_id ORDER BY site_id";

/// Hang guard of a cluster's start: a role listening, the first query answered (about a
/// second each here).
const STARTUP: Duration = Duration::from_secs(120);
/// Hang guard of one client run (seconds here).
const CLIENT: Duration = child::TIMEOUT;
/// Free ports tried for one executor before the test gives up.
const PORT_ATTEMPTS: usize = 5;
/// What an executor logs (at error level, so whatever `RUST_LOG` says) when its port was
/// taken.
const FLIGHT_NOT_STARTED: &str = "Could not start built-in arrow flight server";
/// `calibsql scheduler --executor-timeout`'s default, in seconds.
const EXECUTOR_TIMEOUT: u64 = 15;

fn binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_calibsql"))
}

/// The binary with `args`, `env` and no other AWS setting from the environment.
fn calibsql_command(args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut command = child::command(binary());
    command.args(args);
    for (name, _) in std::env::vars() {
        if name.starts_with("AWS_") {
            command.env_remove(name);
        }
    }
    command.envs(env.iter().copied());
    command
}

/// A scheduler and executors, each a [`Child`] (killed and reaped when dropped, its log
/// shown when a test fails).
struct Cluster {
    scheduler: SocketAddr,
    processes: Vec<Child>,
    /// More arguments of every `calibsql executor`.
    executor_args: Vec<String>,
    /// The executors' work directories (shuffle files); removed after the processes.
    work: tempfile::TempDir,
}

impl Cluster {
    /// Starts the roles with `env` and returns once the cluster has answered a query.
    fn start(executors: usize, env: &[(&str, &str)]) -> Cluster {
        Cluster::start_with(executors, env, &[])
    }

    /// [`Cluster::start`], each executor also given `executor_args`.
    fn start_with(executors: usize, env: &[(&str, &str)], executor_args: &[&str]) -> Cluster {
        let work = child::scratch_dir("cluster-");
        let mut scheduler = Child::spawn(
            "scheduler",
            &mut calibsql_command(&["scheduler", "--bind", "127.0.0.1:0"], env),
            None,
        );
        let address = scheduler_address(&mut scheduler);
        let mut cluster = Cluster {
            scheduler: address,
            processes: vec![scheduler],
            executor_args: executor_args.iter().map(|a| a.to_string()).collect(),
            work,
        };
        for i in 0..executors {
            cluster.start_executor(i, env);
        }
        cluster.wait_until_it_answers(env);
        cluster
    }

    fn url(&self) -> String {
        format!("df://{}", self.scheduler)
    }

    /// Starts `executor {i}` on a free port; on another one when that was taken before the
    /// executor bound it.
    fn start_executor(&mut self, i: usize, env: &[(&str, &str)]) {
        let name = format!("executor {i}");
        let work_dir = self.work.path().join(format!("executor-{i}"));
        std::fs::create_dir_all(&work_dir).unwrap();
        let scheduler = self.scheduler.to_string();
        for attempt in 1..=PORT_ATTEMPTS {
            let port = child::free_port();
            let bind = format!("127.0.0.1:{port}");
            let mut args = vec![
                "executor",
                "--scheduler",
                &scheduler,
                "--bind",
                &bind,
                "--concurrent-tasks",
                "1",
                "--work-dir",
                work_dir.to_str().unwrap(),
            ];
            args.extend(self.executor_args.iter().map(String::as_str));
            let mut executor = Child::spawn(&name, &mut calibsql_command(&args, env), None);
            match listening(&mut executor, port) {
                Ok(()) => {
                    self.processes.push(executor);
                    return;
                }
                Err(why) => {
                    assert!(
                        attempt < PORT_ATTEMPTS,
                        "{name} found no free port in {PORT_ATTEMPTS} attempts; the last one                          {why}"
                    );
                    eprintln!("{name}: port {port} {why}; trying another port");
                    // It tells the scheduler it stops; the guard kills it if it takes long.
                    let stopping = Instant::now();
                    while executor.try_wait().is_none()
                        && stopping.elapsed() < Duration::from_secs(5)
                    {
                        std::thread::sleep(Duration::from_millis(50));
                    }
                }
            }
        }
    }

    /// Runs `SELECT 1` on the cluster until it succeeds (it waits for an executor to
    /// register), at most [`STARTUP`].
    fn wait_until_it_answers(&mut self, env: &[(&str, &str)]) {
        let started = Instant::now();
        let url = self.url();
        loop {
            let left = STARTUP.saturating_sub(started.elapsed());
            let mut client = calibsql_command(&["--remote", &url, "-c", "SELECT 1"], env);
            let output = child::output("the first query on the cluster", &mut client, left);
            if output.status.success() {
                return;
            }
            for process in &mut self.processes {
                if let Some(status) = process.try_wait() {
                    panic!(
                        "{} exited with {status}: {}",
                        process.name(),
                        process.stderr_tail()
                    );
                }
            }
            assert!(
                started.elapsed() < STARTUP,
                "the cluster did not answer within {STARTUP:?}: {}",
                String::from_utf8_lossy(&output.stderr)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// What process `index` wrote on standard error.
    fn log(&self, index: usize) -> String {
        self.processes[index].stderr()
    }

    /// Kills process `index` (and reaps it).
    fn kill(&mut self, index: usize) {
        self.processes[index].kill();
    }
}

/// The address the scheduler reports once it listens (it was told port 0).
fn scheduler_address(scheduler: &mut Child) -> SocketAddr {
    const LISTENING: &str = "calibsql scheduler listening on ";
    loop {
        let log = scheduler.stderr();
        if let Some(line) = log.lines().find_map(|l| l.strip_prefix(LISTENING)) {
            let address = line.split_once(' ').map_or(line, |(a, _)| a);
            return address
                .parse()
                .unwrap_or_else(|e| panic!("the scheduler's address {address:?}: {e}"));
        }
        if let Some(status) = scheduler.try_wait() {
            panic!(
                "the scheduler exited with {status}: {}",
                scheduler.stderr_tail()
            );
        }
        assert!(
            scheduler.elapsed() < STARTUP,
            "the scheduler did not say where it listens within {STARTUP:?}: {}",
            scheduler.stderr_tail()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until `executor` itself listens on `port`; an error when it stopped (its port was
/// taken), a failed test when it neither listens nor stops within [`STARTUP`].
fn listening(executor: &mut Child, port: u16) -> Result<(), String> {
    loop {
        if let Some(status) = executor.try_wait() {
            return Err(format!("exited with {status}: {}", executor.stderr_tail()));
        }
        if executor.stderr().contains(FLIGHT_NOT_STARTED) {
            return Err(format!(
                "could not be listened on: {}",
                executor.stderr_tail()
            ));
        }
        if child::listens_on(executor.id(), port) {
            return Ok(());
        }
        assert!(
            executor.elapsed() < STARTUP,
            "{} did not listen on {port} within {STARTUP:?}: {}",
            executor.name(),
            executor.stderr_tail()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs the binary as a client, at most [`CLIENT`].
fn calibsql(args: &[&str], env: &[(&str, &str)]) -> Output {
    child::output("calibsql", &mut calibsql_command(args, env), CLIENT)
}

fn stdout_of(output: &Output) -> String {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "stderr: {stderr}");
    String::from_utf8(output.stdout.clone()).unwrap()
}

/// Same header, same rows; numbers equal to 1e-12 relative.
fn assert_same_csv(local: &str, remote: &str) {
    let (a, b): (Vec<&str>, Vec<&str>) = (local.lines().collect(), remote.lines().collect());
    assert_eq!(a.len(), b.len(), "local:\n{local}\nremote:\n{remote}");
    assert!(a.len() > 2, "{local}");
    assert_eq!(a[0], b[0]);
    for (x, y) in a.iter().zip(&b).skip(1) {
        for (u, v) in x.split(',').zip(y.split(',')) {
            match (u.parse::<f64>(), v.parse::<f64>()) {
                (Ok(u), Ok(v)) => assert!(
                    u == v || (u - v).abs() <= 1e-12 * u.abs().max(v.abs()),
                    "{x} vs {y}"
                ),
                _ => assert_eq!(u, v, "{x} vs {y}"),
            }
        }
    }
}

/// Writes the generator's logs with small files: `dir/valid`, `dir/test`, several
/// `part-*.parquet` each.
fn generate(dir: &Path, rows: u64) {
    let mut config = calibsql::generate::Config::new(rows);
    config.rows_per_file = rows / 8;
    config.batch_rows = 8192;
    calibsql::generate::generate(dir, &config, &mut |_| {}).unwrap();
}

#[test]
fn a_cluster_of_processes_answers_like_a_local_run() {
    let data = child::scratch_dir("cluster-data-");
    generate(data.path(), 200_000);
    let table = format!("t={}", data.path().join("test").display());

    // S3: the same files under a bucket of a real S3 server in this process.
    let s3_root = child::scratch_dir("cluster-s3-");
    let bucket = s3_root.path().join("logs");
    std::fs::create_dir_all(bucket.join("test")).unwrap();
    for entry in std::fs::read_dir(data.path().join("test")).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), bucket.join("test").join(entry.file_name())).unwrap();
    }
    let server = s3_server::start(s3_root.path(), KEY, SECRET);
    let env = [
        ("AWS_ACCESS_KEY_ID", KEY),
        ("AWS_SECRET_ACCESS_KEY", SECRET),
        ("AWS_REGION", "us-east-1"),
    ];
    let s3_flags = ["--s3-endpoint", server.endpoint.as_str(), "--s3-allow-http"];

    let cluster = Cluster::start(2, &env);
    let url = cluster.url();

    let local = stdout_of(&calibsql(
        &["--format", "csv", "-t", &table, "-c", QUERY],
        &env,
    ));
    let remote = calibsql(
        &[
            "--remote",
            &url,
            "--format",
            "csv",
            "--target-partitions",
            "4",
            "-t",
            &table,
            "-c",
            QUERY,
        ],
        &env,
    );
    assert_same_csv(&local, &stdout_of(&remote));

    // Deep expressions: the executors decode and evaluate a 999-term sum and a CASE nested
    // 25 deep (on their large stacks) as locally; 15 calls of abs around that pass protobuf's
    // decoding limit and 5,000 terms calibsql's, each refused in one line, and the cluster answers on.
    let deep_sum = format!(
        "SELECT {} AS s FROM t ORDER BY s LIMIT 3",
        vec!["p_model"; 999].join(" + ")
    );
    let deep_case = format!(
        "SELECT site_id, sum({}p_model{}) AS s FROM t GROUP BY site_id ORDER BY site_id",
        "CASE WHEN p_model > 0.01 THEN ".repeat(25),
        " ELSE 0 END".repeat(25)
    );
    for sql in [&deep_sum, &deep_case] {
        let local = stdout_of(&calibsql(
            &["--format", "csv", "-t", &table, "-c", sql],
            &env,
        ));
        let remote = calibsql(
            &["--remote", &url, "--format", "csv", "-t", &table, "-c", sql],
            &env,
        );
        assert_same_csv(&local, &stdout_of(&remote));
    }
    let too_deep = deep_sum.replace(
        &vec!["p_model"; 999].join(" + "),
        &vec!["p_model"; 5_000].join(" + "),
    );
    let deeper_case = deep_case
        .replace("sum(CASE", &format!("sum({}CASE", "abs(".repeat(15)))
        .replace(" END) AS s", &format!(" END{}) AS s", ")".repeat(15)));
    for (sql, message) in [
        (too_deep, "nested deeper than 1000 levels"),
        (
            deeper_case,
            "the cluster cannot decode this statement's plan: it nests deeper than protobuf",
        ),
    ] {
        let refused = calibsql(&["--remote", &url, "-t", &table, "-c", &sql], &env);
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(
            !refused.status.success() && stderr.contains(message) && stderr.lines().count() == 1,
            "{stderr}"
        );
    }

    // Other formats and -o work as locally.
    let ndjson = data.path().join("by_site.ndjson");
    stdout_of(&calibsql(
        &[
            "--remote",
            &url,
            "-t",
            &table,
            "-c",
            QUERY,
            "-o",
            ndjson.to_str().unwrap(),
        ],
        &env,
    ));
    let lines = std::fs::read_to_string(&ndjson).unwrap();
    assert_eq!(lines.lines().count(), local.lines().count() - 1);
    assert!(lines.starts_with("{\"site_id\":"), "{lines}");

    // The calibration report runs its queries on the cluster and finds the local numbers.
    // Two models with an event id: the paired comparison's join runs on the cluster too.
    let report_sql = "SELECT p_model AS p, click AS y, day, site_id, row_id AS key, 'ctr' AS model \
                      FROM t UNION ALL SELECT sigmoid(score), click, day, site_id, row_id, 'ranker' \
                      FROM t";
    let report = |remote: bool, name: &str| -> serde_json::Value {
        let json = data.path().join(format!("{name}.json"));
        let html = data.path().join(format!("{name}.html"));
        let mut args = vec![
            "report", "-q", "-t", &table, "-c", report_sql, "--field", "site_id",
        ];
        if remote {
            args.extend(["--remote", &url]);
        }
        let (json_arg, html_arg) = (json.display().to_string(), html.display().to_string());
        args.extend(["--json", &json_arg, "-o", &html_arg]);
        stdout_of(&calibsql(&args, &env));
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap()
    };
    let (local_report, remote_report) = (report(false, "local"), report(true, "remote"));
    let (l, r) = (&local_report["models"][0], &remote_report["models"][0]);
    assert_eq!(l["rows"], r["rows"]);
    assert_eq!(l["reliability"].as_array().unwrap().len(), 15);
    for key in [
        "ece",
        "ece_quantile",
        "mce",
        "logloss",
        "auc",
        "brier",
        "ratio",
        "ece_lower",
        "ece_upper",
        "auc_lower",
        "spiegelhalter_z",
        "slope",
        "citl_se",
        "miscalibration",
    ] {
        let (a, b) = (l[key].as_f64().unwrap(), r[key].as_f64().unwrap());
        assert!(
            (a - b).abs() <= 1e-9 * a.abs().max(1.0),
            "{key}: {a} vs {b}"
        );
    }
    let (l, r) = (
        &local_report["comparisons"][0],
        &remote_report["comparisons"][0],
    );
    assert_eq!(l["rows"], r["rows"]);
    for key in [
        "ece_diff",
        "ece_diff_lower",
        "ece_diff_upper",
        "auc_diff",
        "auc_p_value",
    ] {
        let (a, b) = (l[key].as_f64().unwrap(), r[key].as_f64().unwrap());
        assert!(
            (a - b).abs() <= 1e-9 * a.abs().max(1.0),
            "comparison {key}: {a} vs {b}"
        );
    }
    let (l, r) = (&local_report["models"][0], &remote_report["models"][0]);
    assert_eq!(
        l["daily"].as_array().unwrap().len(),
        r["daily"].as_array().unwrap().len()
    );
    assert_eq!(
        l["segments"][0]["segments"][0]["value"],
        r["segments"][0]["segments"][0]["value"]
    );

    // Over S3: the scheduler and the executors read the bucket with the AWS environment
    // (they were started with it, no endpoint), the client with its flags. Executors were
    // given no endpoint: the environment's AWS_ENDPOINT_URL is set for the whole cluster.
    drop(cluster);
    let s3_env = [
        env[0],
        env[1],
        env[2],
        ("AWS_ENDPOINT_URL", server.endpoint.as_str()),
        ("AWS_ALLOW_HTTP", "true"),
        // Whatever the roles log, the secret must not show.
        ("RUST_LOG", "debug"),
    ];
    let cluster = Cluster::start(2, &s3_env);
    let url = cluster.url();
    let mut args = vec![
        "--remote",
        &url,
        "--format",
        "csv",
        "-t",
        "t=s3://logs/test/",
        "-c",
        QUERY,
    ];
    args.extend(s3_flags);
    let remote = calibsql(&args, &env);
    let stderr = String::from_utf8_lossy(&remote.stderr).to_string();
    assert!(!stderr.contains(SECRET), "{stderr}");
    assert_same_csv(&local, &stdout_of(&remote));
    for index in 0..cluster.processes.len() {
        let log = cluster.log(index);
        assert!(log.contains("DEBUG"), "{log}");
        assert!(
            !log.contains(SECRET),
            "a secret in the log of process {index}"
        );
    }

    // COPY … TO writes on the executors; the client reads the file back.
    let out = data.path().join("by_site.parquet");
    let copy = format!("COPY ({QUERY}) TO '{}' STORED AS PARQUET", out.display());
    let mut args = vec![
        "--remote", &url, "--format", "csv", "-t", &table, "-c", &copy,
    ];
    args.extend(s3_flags);
    stdout_of(&calibsql(&args, &env));
    let back = stdout_of(&calibsql(
        &[
            "--format",
            "csv",
            "-c",
            &format!("SELECT * FROM '{}' ORDER BY site_id", out.display()),
        ],
        &env,
    ));
    assert_same_csv(&local, &back);

    // A Delta table is read by this process only: refused with one line, not shipped.
    let delta = data.path().join("delta");
    stdout_of(&calibsql(
        &[
            "-c",
            &format!(
                "CREATE EXTERNAL TABLE d (x BIGINT) STORED AS DELTA LOCATION '{}'",
                delta.display()
            ),
            "-c",
            "INSERT INTO d VALUES (1), (2)",
        ],
        &env,
    ));
    let refused = calibsql(
        &[
            "--remote",
            &url,
            "-t",
            &format!("d={}", delta.display()),
            "-c",
            "SELECT count(*) FROM d",
        ],
        &env,
    );
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{stderr}");
    assert!(
        stderr.contains("is a Delta table") && stderr.contains("without --remote"),
        "{stderr}"
    );
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
}

/// The longer query of the executor-loss tests and the directory it reads.
const LONG_QUERY: &str = "SELECT site_id, fit_isotonic(p_model, click)['loss'] AS iso,
        auc(p_model, click) AS auc, ece(p_model, click, 15, 'quantile') AS ece_q
    FROM t GROUP BY site_id ORDER BY site_id";

/// What the client did when an executor was killed under it.
struct AfterLoss {
    status: std::process::ExitStatus,
    stdout: String,
    stderr: String,
    seconds: f64,
}

/// Runs [`LONG_QUERY`] over `table` on `cluster` (8 partitions), kills the executor
/// `victim` (process index) once it has finished a task of it (so it holds shuffle output the
/// query needs) and taken the next one, and waits for the client. `budget` is the hang guard
/// of each wait (for the task, for the client after the kill); a client still running then
/// is a hang and fails the test.
fn run_and_kill(cluster: &mut Cluster, victim: usize, table: &str, budget: Duration) -> AfterLoss {
    let url = cluster.url();
    let name = cluster.processes[victim].name().to_string();
    // Tasks it ran before (the cluster's first query).
    let earlier = cluster.log(victim).matches("Received task").count();
    let args = [
        "--remote",
        &url,
        "--format",
        "csv",
        "--target-partitions",
        "8",
        "-t",
        table,
        "-c",
        LONG_QUERY,
    ];
    let mut client = Child::spawn(
        &format!("the client losing {name}"),
        &mut calibsql_command(&args, &[]),
        Some(budget),
    );
    while cluster.log(victim).matches("Received task").count() < earlier + 2 {
        assert!(
            client.try_wait().is_none(),
            "the client finished before {name} got a second task: {}",
            client.stderr_tail()
        );
        assert!(
            client.elapsed() < budget,
            "{name} got no second task within {budget:?}: {}",
            cluster.processes[victim].stderr_tail()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let started = Instant::now();
    cluster.kill(victim);
    client.deadline_in(budget);
    let output = client.output();
    let seconds = started.elapsed().as_secs_f64();
    eprintln!(
        "{name} lost: the client finished {seconds:.1} s later with {}",
        output.status
    );
    AfterLoss {
        status: output.status,
        stdout: String::from_utf8(output.stdout).unwrap(),
        stderr: String::from_utf8(output.stderr).unwrap(),
        seconds,
    }
}

/// One of two executors dies mid-query: the scheduler declares it dead after
/// `--executor-timeout` (15 s), runs its tasks and the stages whose shuffle files it held
/// again on the other, and the client prints the right answer (the documented behaviour).
#[test]
fn losing_an_executor_mid_query_still_gives_the_right_answer() {
    let data = child::scratch_dir("cluster-data-");
    generate(data.path(), 1_600_000);
    let table = format!("t={}", data.path().join("valid").display());
    let started = Instant::now();
    let local = stdout_of(&calibsql(
        &["--format", "csv", "-t", &table, "-c", LONG_QUERY],
        &[],
    ));
    // The hang guard scales with this machine: the query's local time (seconds here) many
    // times over, plus the executor timeout and the grace period after the last executor.
    let budget = Duration::from_secs(2 * EXECUTOR_TIMEOUT + 60) + 20 * started.elapsed();

    let mut cluster = Cluster::start(2, &[("RUST_LOG", "info")]);
    let after = run_and_kill(&mut cluster, 2, &table, budget);
    assert!(after.status.success(), "{}", after.stderr);
    assert_same_csv(&local, &after.stdout);
    let log = cluster.log(0);
    assert!(
        log.contains("Removing executor") && log.contains("on lost Executor"),
        "the scheduler did not lose the executor while the job ran: {log}"
    );
    drop(cluster);

    // The last executor dies: after the timeout and a grace period as long (for an executor
    // to come back), the query fails with one line saying so.
    let mut cluster = Cluster::start(1, &[("RUST_LOG", "info")]);
    let after = run_and_kill(&mut cluster, 1, &table, budget);
    assert_eq!(after.status.code(), Some(1), "{}", after.stderr);
    assert_eq!(after.stderr.lines().count(), 1, "{}", after.stderr);
    assert!(
        after.stderr.starts_with("Error: ") && after.stderr.contains("all executors were lost"),
        "{}",
        after.stderr
    );
    // Not before the executor timeout: a lower bound, whatever the machine.
    assert!(after.seconds > EXECUTOR_TIMEOUT as f64, "{}", after.seconds);
}

/// Executors under `--memory-limit 8M` run the aggregates that keep rows over 2M distinct
/// scores (16 MB of rows, 32 MB weighted or paired) by spilling them to their work
/// directories, with the local unlimited run's result; `fit_isotonic`, whose blocks stay in
/// memory, fails with the pool's error instead of growing past the limit, in one line with
/// the executors' hint.
#[test]
fn executors_spill_kept_rows_under_their_memory_limit() {
    let data = child::scratch_dir("cluster-data-");
    let file = data.path().join("scores.parquet");
    let copy = format!(
        "COPY (SELECT (((value * 2654435761) % 4294967311) + 0.5) / 4294967312.0 AS p, \
         CAST(value % 3 = 0 AS INT) AS y, value % 100 AS site \
         FROM generate_series(1, 2000000)) TO '{}'",
        file.display()
    );
    let output = calibsql(&["-c", &copy], &[]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let table = format!("t={}", file.display());
    let cluster = Cluster::start_with(2, &[], &["--memory-limit", "8M"]);
    let url = cluster.url();
    // Two groups, no ORDER BY: a sort would need DataFusion's sort reservation (10 MB by
    // default), more than a task's pool; the lines are sorted here.
    for sql in [
        "SELECT site % 2 AS g, auc(p, y) AS auc, ece(p, y, 15, 'quantile') AS ece_q \
         FROM t GROUP BY site % 2",
        "SELECT site % 2 AS g, auc(p, y, 1.0 + site % 3) AS auc_w FROM t GROUP BY site % 2",
        "SELECT g, r['se'] AS se, r['z'] AS z FROM (SELECT site % 2 AS g, \
         auc_test(p, (p + site % 10) / 10.0, y) AS r FROM t GROUP BY site % 2)",
    ] {
        let local = stdout_of(&calibsql(
            &["--format", "csv", "-t", &table, "-c", sql],
            &[],
        ));
        let remote = calibsql(
            &["--remote", &url, "--format", "csv", "-t", &table, "-c", sql],
            &[],
        );
        if !remote.status.success() {
            panic!(
                "{sql} on the cluster: {}\nexecutor 0: {}\nexecutor 1: {}",
                String::from_utf8_lossy(&remote.stderr),
                cluster.log(1),
                cluster.log(2)
            );
        }
        let sorted = |csv: &str| {
            let mut lines: Vec<&str> = csv.lines().collect();
            lines[1..].sort_unstable();
            lines.join("\n")
        };
        assert_same_csv(&sorted(&local), &sorted(&stdout_of(&remote)));
    }
    let sql = "SELECT fit_isotonic(p, y) FROM t";
    let remote = calibsql(&["--remote", &url, "-t", &table, "-c", sql], &[]);
    let stderr = String::from_utf8_lossy(&remote.stderr);
    assert!(
        !remote.status.success()
            && stderr.contains("Resources exhausted: Failed to allocate")
            && stderr.contains("hint: on a cluster the limit is each executor's")
            && !stderr.contains("DataFusionError("),
        "{sql} on the cluster: {stderr}"
    );
    // A function whose result grows with an argument's value is bounded by the executor's
    // limit where it runs (a column argument: the executors evaluate it), with its words.
    let sql = "SELECT max(length(repeat(CAST(site AS VARCHAR), 10000000))) AS n FROM t";
    let remote = calibsql(&["--remote", &url, "-t", &table, "-c", sql], &[]);
    let stderr = String::from_utf8_lossy(&remote.stderr);
    assert!(
        !remote.status.success()
            && stderr.contains("repeat: the result would take up to")
            && stderr.contains("a function's result may take under --memory-limit 8.0 MB"),
        "{sql} on the cluster: {stderr}"
    );
}

#[test]
fn unreachable_scheduler_and_bad_urls_are_clear() {
    // Held, never listening: refused, and nothing else can listen there meanwhile.
    let closed = child::closed_port();
    let output = calibsql(
        &[
            "--remote",
            &format!("df://127.0.0.1:{}", closed.port),
            "-c",
            "SELECT 1",
        ],
        &[],
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("Error: cannot reach the Ballista scheduler at df://127.0.0.1:"),
        "{stderr}"
    );

    for bad in [
        "127.0.0.1:50050",
        "df://nohost",
        "df://h:99999",
        "http://h:1",
    ] {
        let output = calibsql(&["--remote", bad, "-c", "SELECT 1"], &[]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{bad}: {stderr}");
        assert!(
            stderr.contains("--remote") && stderr.contains(bad),
            "{stderr}"
        );
    }

    // Flags that make no sense on a cluster.
    let output = calibsql(
        &[
            "--remote",
            "df://127.0.0.1:1",
            "--memory-limit",
            "1G",
            "-c",
            "SELECT 1",
        ],
        &[],
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("calibsql executor --memory-limit"),
        "{stderr}"
    );

    // A scheduler port already taken.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let bind = format!("127.0.0.1:{port}");
    let output = child::output(
        "a scheduler on a taken port",
        &mut calibsql_command(&["scheduler", "--bind", &bind], &[]),
        STARTUP,
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("cannot listen on"), "{stderr}");
}
