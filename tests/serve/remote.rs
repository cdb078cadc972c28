//! `calibsql serve --remote`: a scheduler and an executor as processes; psql's queries over
//! the table run on the cluster (the scheduler logs the jobs) with the CLI's local numbers,
//! and catalog queries (`\dt`, held in the server) and session views still work.

use std::time::{Duration, Instant};

use crate::{assert_same_csv, child, Fixture, Server, PASSWORD};

const QUERY: &str = "SELECT ad_type, count(*) AS n, ece(p_model, click) AS ece, \
    field_rce(p_model, click, site_id) AS rce FROM t GROUP BY ad_type ORDER BY ad_type";
/// Hang guard of the cluster's start (seconds here).
const STARTUP: Duration = Duration::from_secs(120);
/// Free ports tried for the executor.
const PORT_ATTEMPTS: usize = 5;

fn jobs_finished(scheduler: &child::Child) -> usize {
    scheduler
        .stderr()
        .matches("Job finished successfully")
        .count()
}

#[test]
fn queries_run_on_the_cluster_with_the_local_numbers() {
    let fixture = Fixture::new();
    let mut command = child::calibsql(fixture.path());
    command
        .args(["scheduler", "--bind", "127.0.0.1:0"])
        .env("RUST_LOG", "ballista_scheduler=info");
    let mut scheduler = child::Child::spawn("scheduler", &mut command, None);
    let started = Instant::now();
    let address = loop {
        let log = scheduler.stderr();
        if let Some(rest) = log.split("calibsql scheduler listening on ").nth(1) {
            break rest.split_whitespace().next().unwrap().to_string();
        }
        assert!(
            scheduler.try_wait().is_none(),
            "{}",
            scheduler.stderr_tail()
        );
        assert!(started.elapsed() < STARTUP, "{}", scheduler.stderr_tail());
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut _executor = None;
    for attempt in 1..=PORT_ATTEMPTS {
        let port = child::free_port();
        let bind = format!("127.0.0.1:{port}");
        let mut command = child::calibsql(fixture.path());
        command.args(["executor", "--scheduler", &address, "--bind", &bind]);
        command.args(["--concurrent-tasks", "2"]);
        let mut executor = child::Child::spawn("executor", &mut command, None);
        let started = Instant::now();
        while !child::listens_on(executor.id(), port) && executor.try_wait().is_none() {
            assert!(started.elapsed() < STARTUP, "{}", executor.stderr_tail());
            std::thread::sleep(Duration::from_millis(20));
        }
        if executor.try_wait().is_none() {
            _executor = Some(executor);
            break;
        }
        assert!(attempt < PORT_ATTEMPTS, "{}", executor.stderr_tail());
    }
    let remote = format!("df://{address}");
    let server: Server = fixture.serve(&["--remote", &remote]);
    assert!(
        server.log().contains("queries on the cluster"),
        "{}",
        server.log()
    );

    // The first query waits for the executor to register.
    let started = Instant::now();
    let served = loop {
        let out = server.psql_as(&server.conninfo("analyst"), Some(PASSWORD), &["-c", QUERY]);
        if out.status.success() {
            break String::from_utf8(out.stdout).unwrap();
        }
        assert!(
            started.elapsed() < STARTUP,
            "{}\n{}",
            String::from_utf8_lossy(&out.stderr),
            server.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_same_csv(&served, &fixture.cli_csv(QUERY));
    let jobs = jobs_finished(&scheduler);
    assert!(jobs >= 1, "{}", scheduler.stderr_tail());

    // Catalog queries are answered by the server; a view of the session runs on the cluster.
    assert!(server.psql("\\dt").contains("public,t,table"));
    let out = server.psql_as(
        &server.conninfo("analyst"),
        Some(PASSWORD),
        &[
            "-c",
            "CREATE VIEW clicked AS SELECT * FROM t WHERE click = 1",
            "-c",
            "SELECT count(*) AS n FROM clicked",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let local = fixture.cli_csv("SELECT count(*) AS n FROM t WHERE click = 1");
    assert!(
        String::from_utf8(out.stdout).unwrap().ends_with(&local),
        "{local}"
    );
    assert!(
        jobs_finished(&scheduler) > jobs,
        "{}",
        scheduler.stderr_tail()
    );
}
