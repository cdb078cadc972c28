//! `calibsql scheduler`, `calibsql executor` and `calibsql --remote` as separate processes on
//! 127.0.0.1 (`--features distributed`): a scheduler and two executors with one task slot
//! each, on random free ports. Every process a test starts is killed when the test ends, also
//! when it fails (`Cluster`'s `Drop`).
//!
//! The CSV a query prints on the cluster is compared with the local run's (numbers to 1e-12
//! relative: both are calibsql, so this is an invariance check; the values are checked
//! against independent computations elsewhere).

#[path = "support/s3_server.rs"]
mod s3_server;

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const KEY: &str = "cluster-test-key";
const SECRET: &str = "cluster-s3cr3t-Do-Not-Print-77e1";

/// The query compared between the cluster and local runs.
const QUERY: &str = "SELECT site_id, count(*) AS n, ece(p_model, click) AS ece,
        ece(p_model, click, 10, 'quantile') AS ece_q, logloss(p_model, click) AS ll,
        auc(p_model, click) AS auc, field_rce(p_model, click, ad_type) AS rce
    FROM t GROUP BY site_id ORDER BY site_id";

fn binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_calibsql"))
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A scheduler and executors; killed (and waited for) when dropped. Their standard error goes
/// to files (a pipe nobody reads would block them once full), shown when a test fails.
struct Cluster {
    scheduler_port: u16,
    processes: Vec<(String, Child)>,
    logs: tempfile::TempDir,
}

impl Cluster {
    fn start(executors: usize, env: &[(&str, &str)]) -> Cluster {
        let scheduler_port = free_port();
        let mut cluster = Cluster {
            scheduler_port,
            processes: Vec::new(),
            logs: tempfile::tempdir().unwrap(),
        };
        let logs = cluster.logs.path().to_path_buf();
        let spawn = |args: Vec<String>, name: &str| {
            let log = std::fs::File::create(logs.join(format!("{name}.log"))).unwrap();
            let mut command = Command::new(binary());
            command
                .args(&args)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log);
            for (name, _) in std::env::vars() {
                if name.starts_with("AWS_") {
                    command.env_remove(name);
                }
            }
            command.envs(env.iter().copied());
            command.spawn().unwrap()
        };
        let scheduler = spawn(
            vec![
                "scheduler".into(),
                "--bind".into(),
                format!("127.0.0.1:{scheduler_port}"),
            ],
            "scheduler",
        );
        cluster.processes.push(("scheduler".into(), scheduler));
        cluster.wait_for_port(scheduler_port, 0);
        for i in 0..executors {
            let port = free_port();
            let executor = spawn(
                vec![
                    "executor".into(),
                    "--scheduler".into(),
                    format!("127.0.0.1:{scheduler_port}"),
                    "--bind".into(),
                    format!("127.0.0.1:{port}"),
                    "--concurrent-tasks".into(),
                    "1".into(),
                ],
                &format!("executor {i}"),
            );
            cluster.processes.push((format!("executor {i}"), executor));
            let last = cluster.processes.len() - 1;
            cluster.wait_for_port(port, last);
        }
        // Executors register with their first request for work.
        std::thread::sleep(Duration::from_millis(500));
        cluster
    }

    fn url(&self) -> String {
        format!("df://127.0.0.1:{}", self.scheduler_port)
    }

    /// Waits until process `index` listens on `port`.
    fn wait_for_port(&mut self, port: u16, index: usize) {
        let started = Instant::now();
        let address = SocketAddr::from(([127, 0, 0, 1], port));
        while TcpStream::connect_timeout(&address, Duration::from_millis(200)).is_err() {
            if let Ok(Some(status)) = self.processes[index].1.try_wait() {
                let name = &self.processes[index].0;
                panic!("{name} exited with {status}: {}", self.log(index));
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "{} did not listen on {port} within 60 s",
                self.processes[index].0
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// What process `index` wrote on standard error.
    fn log(&self, index: usize) -> String {
        let name = &self.processes[index].0;
        std::fs::read_to_string(self.logs.path().join(format!("{name}.log"))).unwrap_or_default()
    }

    fn kill(&mut self, name: &str) {
        if let Some((_, child)) = self.processes.iter_mut().find(|(n, _)| n == name) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for (_, child) in &mut self.processes {
            let _ = child.kill();
            let _ = child.wait();
        }
        if std::thread::panicking() {
            for (index, (name, _)) in self.processes.iter().enumerate() {
                eprintln!("--- {name}:\n{}", self.log(index));
            }
        }
    }
}

fn calibsql(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(binary());
    command.args(args).stdin(Stdio::null());
    for (name, _) in std::env::vars() {
        if name.starts_with("AWS_") {
            command.env_remove(name);
        }
    }
    command.envs(env.iter().copied());
    command.output().unwrap()
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
    let data = tempfile::tempdir().unwrap();
    generate(data.path(), 200_000);
    let table = format!("t={}", data.path().join("test").display());

    // S3: the same files under a bucket of a real S3 server in this process.
    let s3_root = tempfile::tempdir().unwrap();
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
/// `victim` (process index) once it has finished a task (so it holds shuffle output the query
/// needs) and taken the next one, and waits for the client, at most 2 minutes: a client still
/// running then is a hang and fails the test.
fn run_and_kill(cluster: &mut Cluster, victim: usize, table: &str) -> AfterLoss {
    let url = cluster.url();
    let outputs = tempfile::tempdir().unwrap();
    let (stdout_path, stderr_path) = (outputs.path().join("out"), outputs.path().join("err"));
    let mut client = Command::new(binary())
        .args([
            "--remote",
            &url,
            "--format",
            "csv",
            "--target-partitions",
            "8",
        ])
        .args(["-t", table, "-c", LONG_QUERY])
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&stdout_path).unwrap())
        .stderr(std::fs::File::create(&stderr_path).unwrap())
        .spawn()
        .unwrap();
    let waiting = Instant::now();
    while cluster.log(victim).matches("Received task").count() < 2 {
        assert!(
            waiting.elapsed() < Duration::from_secs(60) && client.try_wait().unwrap().is_none(),
            "the executor got no second task: {}",
            cluster.log(victim)
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let started = Instant::now();
    let name = cluster.processes[victim].0.clone();
    cluster.kill(&name);
    let status = loop {
        if let Some(status) = client.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > Duration::from_secs(120) {
            let _ = client.kill();
            let _ = client.wait();
            panic!("the client hung for 2 minutes after {name} was lost");
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let seconds = started.elapsed().as_secs_f64();
    eprintln!("{name} lost: the client finished {seconds:.1} s later with {status}");
    AfterLoss {
        status,
        stdout: std::fs::read_to_string(&stdout_path).unwrap(),
        stderr: std::fs::read_to_string(&stderr_path).unwrap(),
        seconds,
    }
}

/// One of two executors dies mid-query: the scheduler declares it dead after
/// `--executor-timeout` (15 s), runs its tasks and the stages whose shuffle files it held
/// again on the other, and the client prints the right answer (the documented behaviour).
#[test]
fn losing_an_executor_mid_query_still_gives_the_right_answer() {
    let data = tempfile::tempdir().unwrap();
    generate(data.path(), 1_600_000);
    let table = format!("t={}", data.path().join("valid").display());
    let local = stdout_of(&calibsql(
        &["--format", "csv", "-t", &table, "-c", LONG_QUERY],
        &[],
    ));

    let mut cluster = Cluster::start(2, &[("RUST_LOG", "info")]);
    let after = run_and_kill(&mut cluster, 2, &table);
    assert!(after.status.success(), "{}", after.stderr);
    assert_same_csv(&local, &after.stdout);
    let log = cluster.log(0);
    assert!(
        log.contains("Removing executor") && log.contains("on lost Executor"),
        "the scheduler did not lose the executor while the job ran: {log}"
    );

    // The last executor dies: after the timeout and a grace period as long (for an executor
    // to come back), the query fails with one line saying so.
    let mut cluster = Cluster::start(1, &[("RUST_LOG", "info")]);
    let after = run_and_kill(&mut cluster, 1, &table);
    assert_eq!(after.status.code(), Some(1), "{}", after.stderr);
    assert_eq!(after.stderr.lines().count(), 1, "{}", after.stderr);
    assert!(
        after.stderr.starts_with("Error: ") && after.stderr.contains("all executors were lost"),
        "{}",
        after.stderr
    );
    assert!(after.seconds > 15.0, "{}", after.seconds);
}

#[test]
fn unreachable_scheduler_and_bad_urls_are_clear() {
    let port = free_port();
    let output = calibsql(
        &[
            "--remote",
            &format!("df://127.0.0.1:{port}"),
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
    let output = calibsql(&["scheduler", "--bind", &format!("127.0.0.1:{port}")], &[]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("cannot listen on"), "{stderr}");
}
