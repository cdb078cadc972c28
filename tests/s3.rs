//! calibsql against a real S3 protocol server: s3s + s3s-fs run in this process on a random
//! 127.0.0.1 port, with SigV4 authentication (one test key and secret). Nothing is mocked on
//! the client side: the binary and the library talk HTTP to it through object_store.
//!
//! One server and one fixture set (uploaded once with object_store `put`) serve every test:
//! - `calib/data/part-{0,1,2}.parquet`: (score, y, field), 3 × 1000 rows, written by
//!   DataFusion; the same files are kept locally to compare against
//! - `calib/logs/2026-11-01/part-0.parquet`, `…/2026-11-02/…`, `…/2026-12-01/…`: 1000 rows each
//! - `calib/bad/notes.parquet`: text, not Parquet

#[path = "support/child.rs"]
mod child;
#[path = "support/s3_server.rs"]
mod s3_server;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use calibsql::S3Options;
use datafusion::arrow::util::pretty::pretty_format_batches;
use datafusion::prelude::SessionContext;
use object_store::aws::AmazonS3Builder;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

const BUCKET: &str = "calib";
const KEY: &str = "calibsql-test-key";
/// Checked to appear in no output, on success and on every error path.
const SECRET: &str = "s3cr3t-Do-Not-Print-8f2b";
const WRONG_SECRET: &str = "wrong-s3cr3t-Do-Not-Print-1a9c";

/// The query compared between S3 and local disk: a binned metric, a field-level metric and
/// a fit. Comparisons run it on one partition: with several, partial sums merge in the order
/// threads finish, which moves the last bit of a float from run to run even on local files.
const QUERY: &str =
    "SELECT count(*) AS n, ece(score, y) AS ece, field_rce(score, y, field) AS rce, \
                     fit_platt(score, y)['loss'] AS platt_loss FROM t";

struct Server {
    endpoint: String,
    /// Local copies of the uploaded files (`data/…`, `logs/…`).
    local: PathBuf,
    /// Keeps the server's threads alive for the whole test binary.
    runtime: tokio::runtime::Runtime,
}

/// The shared server, started (and the fixtures uploaded) by the first test that needs it.
fn server() -> &'static Server {
    static SERVER: OnceLock<Server> = OnceLock::new();
    SERVER.get_or_init(start_server)
}

fn start_server() -> Server {
    let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    // Earlier runs' directories, once they are an hour old (a concurrent run keeps its own).
    for entry in std::fs::read_dir(&tmp).into_iter().flatten().flatten() {
        let old = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > Duration::from_secs(3600));
        if old && entry.file_name().to_string_lossy().starts_with("s3-") {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
    let base = tmp.join(format!("s3-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let root = base.join("server");
    let local = base.join("local");
    std::fs::create_dir_all(root.join(BUCKET)).unwrap();
    std::fs::create_dir_all(&local).unwrap();

    let s3_server::S3Server { endpoint, runtime } = s3_server::start(&root, KEY, SECRET);
    runtime.block_on(write_fixtures(&local, &endpoint));
    Server {
        endpoint,
        local,
        runtime,
    }
}

/// Writes the fixtures with DataFusion under `local` and uploads them with object_store.
async fn write_fixtures(local: &Path, endpoint: &str) {
    let ctx = SessionContext::new();
    // Deterministic rows: scores spread over (0, 1), labels drawn against a distorted score
    // so the model is miscalibrated, 37 field values.
    let rows = |from: usize| {
        format!(
            "SELECT CAST(((value * 7919) % 1000) AS DOUBLE) / 1000.0 + 0.0005 AS score, \
                    CAST(((value * 104729) % 997) AS DOUBLE) / 997.0 \
                      < power(CAST(((value * 7919) % 1000) AS DOUBLE) / 1000.0 + 0.0005, 1.5) AS y, \
                    value % 37 AS field \
             FROM range({from}, {})",
            from + 1000
        )
    };
    let files = [
        "data/part-0.parquet",
        "data/part-1.parquet",
        "data/part-2.parquet",
        "logs/2026-11-01/part-0.parquet",
        "logs/2026-11-02/part-0.parquet",
        "logs/2026-12-01/part-0.parquet",
    ];
    let store = AmazonS3Builder::new()
        .with_endpoint(endpoint)
        .with_allow_http(true)
        .with_region("us-east-1")
        .with_bucket_name(BUCKET)
        .with_access_key_id(KEY)
        .with_secret_access_key(SECRET)
        .build()
        .unwrap();
    for (i, file) in files.iter().enumerate() {
        let path = local.join(file);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let sql = format!("COPY ({}) TO '{}'", rows(i * 1000), path.display());
        ctx.sql(&sql).await.unwrap().collect().await.unwrap();
        let bytes = std::fs::read(&path).unwrap();
        store
            .put(&ObjectPath::from(*file), PutPayload::from(bytes))
            .await
            .unwrap();
    }
    store
        .put(
            &ObjectPath::from("bad/notes.parquet"),
            PutPayload::from_static(b"these are notes, not a Parquet file\n"),
        )
        .await
        .unwrap();
}

/// The binary with the test server's endpoint and credentials in the standard AWS variables,
/// and no other AWS setting from the environment.
fn calibsql() -> Command {
    let server = server();
    let mut command = bare_calibsql();
    command
        .env("AWS_ENDPOINT_URL", &server.endpoint)
        .env("AWS_ALLOW_HTTP", "true")
        .env("AWS_ACCESS_KEY_ID", KEY)
        .env("AWS_SECRET_ACCESS_KEY", SECRET)
        .env("AWS_REGION", "us-east-1");
    command
}

/// The binary with no AWS variables at all (a `support/child.rs` command: it dies with the
/// test, and [`run`] gives it a deadline).
fn bare_calibsql() -> Command {
    let mut command = child::command(env!("CARGO_BIN_EXE_calibsql"));
    for (name, _) in std::env::vars() {
        if name.starts_with("AWS_") {
            command.env_remove(name);
        }
    }
    // Whatever logging a dependency might honour, the secret must still not show.
    command.env("RUST_LOG", "trace").env("RUST_BACKTRACE", "1");
    command.current_dir(&server().local);
    command
}

/// Runs `command`, checks that no secret is in its output, and returns (exit code, stdout,
/// stderr).
fn run(command: &mut Command) -> (i32, String, String) {
    let output = child::output("calibsql", command, child::TIMEOUT);
    let stdout = String::from_utf8(output.stdout).unwrap();
    let stderr = String::from_utf8(output.stderr).unwrap();
    for secret in [SECRET, WRONG_SECRET] {
        assert!(
            !stdout.contains(secret) && !stderr.contains(secret),
            "a secret was printed:\nstdout: {stdout}\nstderr: {stderr}"
        );
    }
    (output.status.code().unwrap_or(-1), stdout, stderr)
}

fn success(command: &mut Command) -> String {
    let (code, stdout, stderr) = run(command);
    assert_eq!(code, 0, "stderr: {stderr}");
    stdout
}

/// Asserts exit code 1 and one `Error:` line containing every needle; returns the line.
fn failure(command: &mut Command, needles: &[&str]) -> String {
    let (code, _, stderr) = run(command);
    assert_eq!(code, 1, "stderr: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "stderr: {stderr}");
    assert!(stderr.starts_with("Error: "), "stderr: {stderr}");
    for needle in needles {
        assert!(stderr.contains(needle), "expected {needle:?} in: {stderr}");
    }
    stderr
}

/// [`calibsql`] on one partition, for results that are equal to the last bit.
fn one_partition() -> Command {
    let mut command = calibsql();
    command.args(["--target-partitions", "1"]);
    command
}

fn local(path: &str) -> String {
    server().local.join(path).display().to_string()
}

// ---------------------------------------------------------------- reading

#[test]
fn binary_reads_a_prefix_exactly_like_local_files() {
    let from_s3 = success(one_partition().args(["-t", "t=s3://calib/data/", "-c", QUERY]));
    let from_disk =
        success(one_partition().args(["-t", &format!("t={}", local("data")), "-c", QUERY]));
    assert_eq!(from_s3, from_disk);
    assert!(
        from_s3.starts_with("n,ece,rce,platt_loss\n3000,"),
        "{from_s3}"
    );

    // A prefix without its trailing '/', one object, and a URL table.
    let no_slash = success(one_partition().args(["-t", "t=s3://calib/data", "-c", QUERY]));
    assert_eq!(no_slash, from_disk);
    let one = success(calibsql().args([
        "-t",
        "t=s3://calib/data/part-1.parquet",
        "-c",
        "SELECT count(*) AS n FROM t",
    ]));
    assert_eq!(one, "n\n1000\n");
    let url_table = success(calibsql().args([
        "-c",
        "SELECT count(*) AS n FROM 's3://calib/data/part-2.parquet'",
    ]));
    assert_eq!(url_table, "n\n1000\n");
}

#[test]
fn glob_tables_match_keys_like_local_globs() {
    let query = "SELECT count(*) AS n, ece(score, y) AS ece FROM t";
    let from_s3 =
        success(one_partition().args(["-t", "t=s3://calib/logs/2026-11-*/*.parquet", "-c", query]));
    let from_disk = success(one_partition().args([
        "-t",
        &format!("t={}", local("logs/2026-11-*/*.parquet")),
        "-c",
        query,
    ]));
    assert_eq!(from_s3, from_disk);
    assert!(from_s3.starts_with("n,ece\n2000,"), "{from_s3}");
    failure(
        calibsql().args(["-t", "t=s3://calib/logs/2027-*/*.parquet", "-c", "SELECT 1"]),
        &["no objects match s3://calib/logs/2027-*/*.parquet"],
    );
}

#[test]
fn library_reads_s3_like_local_files() {
    let server = server();
    server.runtime.block_on(async {
        let query = |ctx: SessionContext| async move {
            let batches = ctx.sql(QUERY).await.unwrap().collect().await.unwrap();
            pretty_format_batches(&batches).unwrap().to_string()
        };

        let config = calibsql::default_config().with_target_partitions(1);
        let s3 = calibsql::new_context_with_config(config.clone());
        calibsql::register_object_stores(
            &s3,
            S3Options {
                endpoint: Some(server.endpoint.clone()),
                allow_http: Some(true),
                region: Some("us-east-1".into()),
                access_key_id: Some(KEY.into()),
                secret_access_key: Some(SECRET.into()),
                ..S3Options::default()
            },
        )
        .unwrap();
        calibsql::tables::register_table(&s3, "t", "s3://calib/data/", None)
            .await
            .unwrap();

        let disk = calibsql::new_context_with_config(config);
        calibsql::tables::register_table(&disk, "t", &local("data"), None)
            .await
            .unwrap();

        let (from_s3, from_disk) = (query(s3).await, query(disk).await);
        assert_eq!(from_s3, from_disk);
        assert!(from_s3.contains("| 3000 |"), "{from_s3}");
    });
}

#[test]
fn create_external_table_options_override_the_environment() {
    let server = server();
    // The environment points at a dead endpoint with a wrong secret; the table's options win.
    let sql = format!(
        "CREATE EXTERNAL TABLE t STORED AS PARQUET LOCATION 's3://calib/data/' OPTIONS (\
           'aws.endpoint' '{}', 'aws.allow_http' 'true', 'aws.region' 'us-east-1', \
           'aws.access_key_id' '{KEY}', 'aws.secret_access_key' '{SECRET}', 'aws.retries' '1'); \
         {QUERY}; \
         SELECT * FROM information_schema.views WHERE table_name = 't';",
        server.endpoint
    );
    let stdout = success(
        bare_calibsql()
            .args(["--target-partitions", "1"])
            .env("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
            .env("AWS_ACCESS_KEY_ID", KEY)
            .env("AWS_SECRET_ACCESS_KEY", WRONG_SECRET)
            .args(["-c", &sql]),
    );
    let expected = success(one_partition().args(["-t", "t=s3://calib/data/", "-c", QUERY]));
    assert!(stdout.starts_with(&expected), "{stdout}\n---\n{expected}");
    // The table's definition is shown (and `run` checked that no secret is in it).
    assert!(stdout.contains("LOCATION 's3://calib/data/'"), "{stdout}");

    let unknown = "CREATE EXTERNAL TABLE t STORED AS PARQUET LOCATION 's3://calib/data/' \
                   OPTIONS ('aws.endpiont' 'http://127.0.0.1:9')";
    failure(
        calibsql().args(["-c", unknown]),
        &["unknown S3 option 'aws.endpiont'"],
    );
}

#[test]
fn copy_writes_a_model_back_and_reads_it_again() {
    let key = format!("models/platt-{}.parquet", std::process::id());
    let copy = format!("COPY (SELECT fit_platt(score, y) AS m FROM t) TO 's3://calib/{key}'");
    success(calibsql().args(["-t", "t=s3://calib/data/", "-c", &copy]));

    let read_back = success(calibsql().args([
        "-t",
        &format!("m=s3://calib/{key}"),
        "-t",
        "t=s3://calib/data/",
        "-c",
        "SELECT m['loss'] AS loss, round(ece(calibrate(t.score, m.m), t.y), 12) AS ece \
         FROM t CROSS JOIN m GROUP BY m['loss']",
    ]));
    let direct = success(calibsql().args([
        "-t",
        &format!("t={}", local("data")),
        "-c",
        "SELECT fit_platt(score, y)['loss'] AS loss FROM t",
    ]));
    let loss = direct.lines().nth(1).unwrap();
    assert!(
        read_back.starts_with(&format!("loss,ece\n{loss},")),
        "{read_back}\n---\n{direct}"
    );
}

// ---------------------------------------------------------------- faults

/// A Delta table on S3, written and read by calibsql through the same S3 settings as Parquet:
/// two appends (one version each), the table followed by `--table`, an older version by
/// `delta_scan`, and the same numbers as the same rows read from local Parquet files.
/// (The Python tests read tables written by delta-rs's own package; this is the S3 path.)
#[test]
fn a_delta_table_on_s3_is_written_and_read_by_version() {
    let table = "s3://calib/delta/daily";
    let create = format!(
        "CREATE EXTERNAL TABLE d (score DOUBLE, y BOOLEAN, field BIGINT) STORED AS DELTA \
         LOCATION '{table}'"
    );
    for part in ["data/part-0.parquet", "data/part-1.parquet"] {
        success(calibsql().args([
            "-t",
            &format!("t={}", local(part)),
            "-c",
            &create,
            "-c",
            "INSERT INTO d SELECT score, y, field FROM t",
        ]));
    }
    let query = "SELECT count(*) AS n, ece(score, y) AS ece FROM t";
    let from_delta = success(one_partition().args(["-t", &format!("t={table}"), "-c", query]));
    let from_disk = success(one_partition().args([
        "-t",
        &format!("t={}", local("data/part-[01].parquet")),
        "-c",
        query,
    ]));
    assert_eq!(from_delta, from_disk);
    assert!(from_delta.starts_with("n,ece\n2000,"), "{from_delta}");
    let versions = success(calibsql().args([
        "-c",
        &format!(
            "SELECT (SELECT count(*) FROM delta_scan('{table}', version => 1)) AS v1, \
                    (SELECT count(*) FROM delta_scan('{table}')) AS latest"
        ),
    ]));
    assert_eq!(versions, "v1,latest\n1000,2000\n");
    failure(
        calibsql().args(["-t", "t=s3://calib/delta/nothing", "-c", "SELECT 1"]),
        &["s3://calib/delta/nothing"],
    );
    // Without conditional puts two writers could commit one version: refused before writing.
    failure(
        calibsql().env("AWS_CONDITIONAL_PUT", "disabled").args([
            "-c",
            &create,
            "-c",
            "INSERT INTO d VALUES (0.5, true, 1)",
        ]),
        &[
            "writing needs S3 conditional puts",
            "AWS_CONDITIONAL_PUT=disabled",
        ],
    );
    failure(
        calibsql().args([
            "-c",
            &format!("SELECT count(*) FROM delta_scan('{table}', version => 7)"),
        ]),
        &["has no version 7 (its latest is 2)"],
    );
}

#[test]
fn unreachable_endpoint_is_one_clear_error() {
    // Held, never listening: connections are refused, and nothing else can listen there.
    let closed = child::closed_port();
    let endpoint = format!("http://127.0.0.1:{}", closed.port);

    // The flag wins over the environment, and retries are configurable. Without retries,
    // this run is also the baseline of this machine for the one below.
    let started = Instant::now();
    failure(
        calibsql().args([
            "--s3-endpoint",
            &endpoint,
            "--s3-retries",
            "0",
            "-t",
            "t=s3://calib/data/",
            "-c",
            "SELECT 1",
        ]),
        &[&endpoint, "unreachable", "0 retries"],
    );
    let without_retries = started.elapsed();

    // Bounded retries: the default 3.
    let started = Instant::now();
    failure(
        calibsql().env("AWS_ENDPOINT_URL", &endpoint).args([
            "-t",
            "t=s3://calib/data/",
            "-c",
            "SELECT 1",
        ]),
        &[&endpoint, "unreachable", "connection refused", "3 retries"],
    );
    let with_retries = started.elapsed();
    // A refused connection is retried after back-offs (0.1 s doubling, at most 2 s), not
    // after the 30 s request timeout: the run costs at most 4 attempts' worth of the run
    // without retries (this machine's speed) plus the back-offs' seconds (any machine's).
    let bound = 4 * without_retries + Duration::from_secs(10);
    assert!(
        with_retries < bound,
        "{with_retries:?} with 3 retries, {without_retries:?} without: more than {bound:?}"
    );
}

#[test]
fn plain_http_endpoint_needs_allow_http() {
    let server = server();
    failure(
        bare_calibsql()
            .env("AWS_ACCESS_KEY_ID", KEY)
            .env("AWS_SECRET_ACCESS_KEY", SECRET)
            .args(["--s3-endpoint", &server.endpoint])
            .args(["-t", "t=s3://calib/data/", "-c", "SELECT 1"]),
        &["plain HTTP", "--s3-allow-http"],
    );
    let stdout = success(
        bare_calibsql()
            .env("AWS_ACCESS_KEY_ID", KEY)
            .env("AWS_SECRET_ACCESS_KEY", SECRET)
            .args(["--s3-endpoint", &server.endpoint, "--s3-allow-http"])
            .args([
                "-t",
                "t=s3://calib/data/",
                "-c",
                "SELECT count(*) AS n FROM t",
            ]),
    );
    assert_eq!(stdout, "n\n3000\n");
}

#[test]
fn wrong_secret_says_the_credentials_are_wrong() {
    failure(
        calibsql().env("AWS_SECRET_ACCESS_KEY", WRONG_SECRET).args([
            "-t",
            "t=s3://calib/data/",
            "-c",
            "SELECT 1",
        ]),
        &["403", "credentials", "wrong", "AWS_SECRET_ACCESS_KEY"],
    );
    // The same for one object (a HEAD request, whose 403 has no body) and in SQL.
    failure(
        calibsql().env("AWS_SECRET_ACCESS_KEY", WRONG_SECRET).args([
            "-t",
            "t=s3://calib/data/part-0.parquet",
            "-c",
            "SELECT 1",
        ]),
        &["403", "credentials", "wrong"],
    );
    failure(
        calibsql().env("AWS_SECRET_ACCESS_KEY", WRONG_SECRET).args([
            "-c",
            "CREATE EXTERNAL TABLE t STORED AS PARQUET LOCATION 's3://calib/data/'",
        ]),
        &["403", "credentials", "wrong"],
    );
}

#[test]
fn missing_bucket_and_missing_key_are_named() {
    failure(
        calibsql().args(["-t", "t=s3://no-such-bucket/data/", "-c", "SELECT 1"]),
        &["bucket 'no-such-bucket' does not exist"],
    );
    failure(
        calibsql().args(["-t", "t=s3://no-such-bucket/x.parquet", "-c", "SELECT 1"]),
        &["bucket 'no-such-bucket' does not exist"],
    );
    failure(
        calibsql().args(["-t", "t=s3://calib/data/missing.parquet", "-c", "SELECT 1"]),
        &["no such S3 object or prefix: s3://calib/data/missing.parquet"],
    );
    failure(
        calibsql().args(["-c", "SELECT * FROM 's3://calib/data/missing.parquet'"]),
        &["s3://calib/data/missing.parquet"],
    );
}

#[test]
fn an_object_that_is_not_parquet_is_named() {
    failure(
        calibsql().args(["-t", "t=s3://calib/bad/notes.parquet", "-c", "SELECT 1"]),
        &["s3://calib/bad/notes.parquet is not a Parquet file"],
    );
    failure(
        calibsql().args(["-t", "t=s3://calib/bad/", "-c", "SELECT 1"]),
        &["s3://calib/bad/notes.parquet is not a Parquet file"],
    );
}

#[test]
fn help_shows_the_s3_flags_and_no_secret() {
    let help = success(calibsql().arg("--help"));
    for flag in [
        "--s3-endpoint",
        "--s3-allow-http",
        "--s3-timeout",
        "--s3-retries",
        "AWS_ENDPOINT_URL",
    ] {
        assert!(help.contains(flag), "{flag} not in --help");
    }
    let usage = run(calibsql().args(["--s3-timeout", "0", "-c", "SELECT 1"]));
    assert_eq!(usage.0, 2, "{}", usage.2);
    assert!(usage.2.contains("--s3-timeout"), "{}", usage.2);
}

#[test]
fn options_debug_hides_the_secret() {
    let options = S3Options {
        secret_access_key: Some(SECRET.into()),
        session_token: Some(WRONG_SECRET.into()),
        ..S3Options::default()
    };
    let debug = format!("{options:?} {options:#?}");
    assert!(
        !debug.contains(SECRET) && !debug.contains(WRONG_SECRET),
        "{debug}"
    );
    let store = calibsql::stores::build_store(
        BUCKET,
        &S3Options {
            access_key_id: Some(KEY.into()),
            ..options
        },
    )
    .unwrap();
    let shown = format!("{store:?} {store}");
    assert!(!shown.contains(SECRET), "{shown}");
    let _: Arc<dyn ObjectStore> = store;
}
