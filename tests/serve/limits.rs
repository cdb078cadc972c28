//! Limits and faults: `--max-connections` + 1 refused cleanly (and the slot comes back),
//! `--query-timeout` and the client's `statement_timeout`, a client killed mid-query. (Cancel
//! requests and `--memory-limit` are in python/tests/test_serve.py, where psycopg sends them.)

use std::ffi::CString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::{child, Fixture, Server, PASSWORD};

/// A query that runs for minutes (10^10 rows), to be stopped.
pub const ENDLESS: &str = "SELECT count(*) AS n FROM generate_series(1, 10000000000)";
/// Hang guard of waiting for the server to notice something (milliseconds here).
const NOTICE: Duration = Duration::from_secs(120);

fn mkfifo(path: &Path) {
    let c = CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

/// A psql logged in and waiting: it reads its statements from a FIFO nobody has opened
/// yet. Writing the FIFO lets it run them and exit.
struct Waiting {
    process: child::Child,
    fifo: PathBuf,
}

impl Waiting {
    fn start(server: &Server, dir: &Path, name: &str) -> Waiting {
        let fifo = dir.join(name);
        mkfifo(&fifo);
        let mut command = child::command("psql");
        command
            .args(["-X", "-A", "-v", "ON_ERROR_STOP=1"])
            .arg(server.conninfo("analyst"))
            .arg("-f")
            .arg(&fifo)
            .env("PGPASSWORD", PASSWORD);
        let process = child::Child::spawn(name, &mut command, Some(crate::CLIENT));
        Waiting { process, fifo }
    }

    fn finish(mut self, sql: &str) -> String {
        let mut fifo = std::fs::OpenOptions::new()
            .write(true)
            .open(&self.fifo)
            .unwrap();
        writeln!(fifo, "{sql}").unwrap();
        drop(fifo);
        assert!(
            self.process.wait().success(),
            "{}",
            self.process.stderr_tail()
        );
        self.process.stdout()
    }
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool, server: &Server) {
    let started = Instant::now();
    while !done() {
        assert!(
            started.elapsed() < NOTICE,
            "{what}: not seen; the server's log:\n{}",
            server.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn one_connection_over_the_limit_is_refused_cleanly() {
    let fixture = Fixture::new();
    let server = fixture.serve(&["--max-connections", "2"]);
    let logins = || server.log().matches("analyst logged in").count();
    let first = Waiting::start(&server, fixture.path(), "first");
    let second = Waiting::start(&server, fixture.path(), "second");
    wait_for("two logins", || logins() == 2, &server);

    let out = server.psql_as(
        &server.conninfo("analyst"),
        Some(PASSWORD),
        &["-c", "SELECT 1"],
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("sorry, too many clients already"),
        "{stderr}"
    );
    assert!(
        server.log().contains("too many connections"),
        "{}",
        server.log()
    );

    // The held connections still work, and once one is gone its slot is free again.
    assert!(first.finish("SELECT 40 + 2 AS x;").contains("42"));
    wait_for(
        "a free slot",
        || {
            server
                .psql_as(
                    &server.conninfo("analyst"),
                    Some(PASSWORD),
                    &["-c", "SELECT 1"],
                )
                .status
                .success()
        },
        &server,
    );
    assert!(second.finish("SELECT 1 AS y;").contains("y\n1"));
}

#[test]
fn statements_past_the_timeout_are_cancelled_and_the_session_goes_on() {
    let fixture = Fixture::new();
    let server = fixture.serve(&["--query-timeout", "1"]);
    let out = server.psql_as(
        &server.conninfo("analyst"),
        Some(PASSWORD),
        &[
            "-v",
            "ON_ERROR_STOP=0",
            "-c",
            ENDLESS,
            "-c",
            "SELECT 7 AS after",
        ],
    );
    let (stdout, stderr) = (
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    );
    assert!(
        stderr.contains("canceling statement due to statement timeout"),
        "{stderr}"
    );
    assert!(stdout.contains("after\n7"), "{stdout}");

    // The client's own statement_timeout, shorter than the server's (none here).
    let server = fixture.serve(&[]);
    let out = server.psql_as(
        &server.conninfo("analyst"),
        Some(PASSWORD),
        &["-c", "SET statement_timeout = '300ms'", "-c", ENDLESS],
    );
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("canceling statement due to statement timeout"),
        "{stderr}"
    );
}

#[test]
fn a_client_killed_mid_query_leaves_the_server_serving() {
    let fixture = Fixture::new();
    let server = fixture.serve(&[]);
    for i in 0..3 {
        let mut command = child::command("psql");
        command
            .args(["-X", "-c", ENDLESS])
            .arg(server.conninfo("analyst"))
            .env("PGPASSWORD", PASSWORD);
        let mut psql = child::Child::spawn(&format!("psql {i}"), &mut command, None);
        let logins = server.log().matches("analyst logged in").count();
        wait_for(
            "the login",
            || {
                server.log().matches("analyst logged in").count() > logins
                    || psql.try_wait().is_some()
            },
            &server,
        );
        psql.kill();
    }
    assert_eq!(server.psql("SELECT 5 AS x"), "x\n5\n");
}
