//! `calibsql serve` as a separate process on 127.0.0.1 (it binds port 0 and says which port
//! it got), driven by clients nobody here wrote: `psql` (Debian's postgresql-client), pgjdbc
//! (Debian's libpostgresql-jdbc-java, in a small Java program compiled by the test). The
//! psycopg tests are Python (python/tests/test_serve.py, run by python/run-tests.sh).
//!
//! Every process is a `support/child.rs` guard: killed and reaped when the test ends, also
//! when it fails. Readiness is polled (the server's "listening on" line); no test asserts on
//! time.
//!
//! - `flight`: Flight SQL (`--flight-bind`) with arrow-flight's `FlightSqlServiceClient`
//! - `jdbc`: pgjdbc's catalog calls, statements and a prepared statement
//! - `limits`: `--max-connections`, `--query-timeout`, a client killed mid-query
//! - `login`: the users file, SCRAM-SHA-256, refused logins, the database name
//! - `psql`: calibsql's functions through psql, with the CLI's numbers; `\d`; sessions
//! - `policy`: the statements a read-only server refuses
//! - `paths`: `--allow-path` (a file outside it unreadable) and `--allow-writes`
//! - `remote`: `--remote`, on a scheduler and an executor started as processes
//! - `tls`: a self-signed certificate verified by psql, `--require-tls`, a bad certificate

#[path = "../support/child.rs"]
mod child;

mod flight;
mod jdbc;
mod limits;
mod login;
mod paths;
mod policy;
mod psql;
#[cfg(feature = "distributed")]
mod remote;
mod tls;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use child::Child;

/// The password of the test user `analyst`.
pub const PASSWORD: &str = "correct horse battery staple";
/// Hang guard of a server's start (a second here).
const STARTUP: Duration = Duration::from_secs(120);
/// Hang guard of one client run (a second here).
pub const CLIENT: Duration = child::TIMEOUT;

pub fn binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_calibsql"))
}

/// Runs the calibsql binary to completion in `dir`.
pub fn calibsql(dir: &Path, args: &[&str]) -> Output {
    let mut command = child::calibsql(dir);
    command.args(args);
    child::output("calibsql", &mut command, CLIENT)
}

/// A directory with `users` (analyst, and bob with another password, mode 600) and
/// `data/test` (calibsql generate's 20,000-row test split).
pub struct Fixture {
    pub dir: tempfile::TempDir,
}

impl Fixture {
    #[allow(clippy::new_without_default)] // makes files and runs processes: not a default
    pub fn new() -> Fixture {
        let dir = child::scratch_dir("serve-");
        let out = calibsql(
            dir.path(),
            &["generate", "--rows", "20K", "--out", "data", "-q"],
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut users = String::from("# the test users\n");
        for (name, password) in [("analyst", PASSWORD), ("bob", "bobs password")] {
            users.push_str(&format!("{name}:{}\n", hash_password(dir.path(), password)));
        }
        let path = dir.path().join("users");
        std::fs::write(&path, users).unwrap();
        set_mode(&path, 0o600);
        Fixture { dir }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn users(&self) -> String {
        self.path().join("users").display().to_string()
    }

    pub fn table(&self) -> String {
        format!("t={}", self.path().join("data/test").display())
    }

    /// `calibsql serve --users users --table t=data/test` with `extra` arguments.
    pub fn serve(&self, extra: &[&str]) -> Server {
        let users = self.users();
        let table = self.table();
        let mut args = vec!["serve", "--users", &users, "--bind", "127.0.0.1:0"];
        args.extend(["--table", &table]);
        args.extend(extra);
        Server::start(self.path(), &args)
    }

    /// The CSV the CLI prints for `sql` over the same table.
    pub fn cli_csv(&self, sql: &str) -> String {
        let table = self.table();
        let out = calibsql(
            self.path(),
            &["--table", &table, "--format", "csv", "-c", sql],
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }
}

pub fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// `calibsql hash-password` of `password`.
pub fn hash_password(dir: &Path, password: &str) -> String {
    use std::io::Write;
    let mut child = child::calibsql(dir)
        .arg("hash-password")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(format!("{password}\n").as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// A running server.
pub struct Server {
    pub process: Child,
    pub port: u16,
}

impl Server {
    /// Starts the binary with `args` in `dir`; returns once it listens.
    pub fn start(dir: &Path, args: &[&str]) -> Server {
        let mut command = child::calibsql(dir);
        command.args(args);
        let mut process = Child::spawn("calibsql serve", &mut command, None);
        let started = Instant::now();
        loop {
            if let Some(port) = listening_port(&process.stderr()) {
                return Server { process, port };
            }
            if let Some(status) = process.try_wait() {
                panic!(
                    "calibsql serve exited ({status}) before listening:\n{}",
                    process.stderr_tail()
                );
            }
            assert!(
                started.elapsed() < STARTUP,
                "calibsql serve did not listen within {STARTUP:?}:\n{}",
                process.stderr_tail()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// What the server logged so far.
    pub fn log(&self) -> String {
        self.process.stderr()
    }

    /// A libpq connection string for `user` (password from PGPASSWORD), plaintext.
    pub fn conninfo(&self, user: &str) -> String {
        format!(
            "host=127.0.0.1 port={} dbname=calibsql user={user} sslmode=disable connect_timeout=30",
            self.port
        )
    }

    /// Runs `psql` with `args` (e.g. `-c SQL`) as `user` with `password`, unaligned output,
    /// no psqlrc; returns its output.
    pub fn psql_as(&self, conninfo: &str, password: Option<&str>, args: &[&str]) -> Output {
        let mut command = child::command("psql");
        command
            .args([
                "-X",
                "-A",
                "-F",
                ",",
                "-P",
                "footer=off",
                "-v",
                "ON_ERROR_STOP=1",
            ])
            .arg(conninfo)
            .args(args)
            .env_remove("PGPASSWORD")
            .env("PGCONNECT_TIMEOUT", "30");
        if let Some(password) = password {
            command.env("PGPASSWORD", password);
        }
        child::output("psql", &mut command, CLIENT)
    }

    /// `psql -c sql` as analyst; panics with psql's error if it fails.
    pub fn psql(&self, sql: &str) -> String {
        let out = self.psql_as(&self.conninfo("analyst"), Some(PASSWORD), &["-c", sql]);
        assert!(
            out.status.success(),
            "psql -c {sql:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// psql's error for `sql` (which must fail).
    pub fn psql_error(&self, sql: &str) -> String {
        let out = self.psql_as(&self.conninfo("analyst"), Some(PASSWORD), &["-c", sql]);
        assert!(
            !out.status.success(),
            "psql -c {sql:?} succeeded: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8(out.stderr).unwrap()
    }
}

/// The port of the server's "listening on 127.0.0.1:PORT" line.
fn listening_port(log: &str) -> Option<u16> {
    let rest = log.split("listening on 127.0.0.1:").nth(1)?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// Whether a program is on PATH.
pub fn have(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Two CSV texts with the same cells, numbers equal to 1e-12 relative.
pub fn assert_same_csv(actual: &str, expected: &str) {
    let rows = |text: &str| -> Vec<Vec<String>> {
        text.lines()
            .filter(|l| !l.is_empty())
            .map(|l| l.split(',').map(str::to_string).collect())
            .collect()
    };
    let (a, e) = (rows(actual), rows(expected));
    assert_eq!(a.len(), e.len(), "rows differ:\n{actual}\nvs\n{expected}");
    for (ra, re) in a.iter().zip(&e) {
        assert_eq!(ra.len(), re.len(), "{ra:?} vs {re:?}");
        for (ca, ce) in ra.iter().zip(re) {
            match (ca.parse::<f64>(), ce.parse::<f64>()) {
                (Ok(x), Ok(y)) => assert!(
                    (x - y).abs() <= 1e-12 * y.abs().max(1.0),
                    "{ca} vs {ce} in {ra:?} vs {re:?}"
                ),
                _ => assert_eq!(ca, ce, "{ra:?} vs {re:?}"),
            }
        }
    }
}
