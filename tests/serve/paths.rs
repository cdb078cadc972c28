//! `--allow-path` and `--allow-writes`: a client reads files under the prefixes and nothing
//! else (not through `..`, not through a symbolic link, not by its absolute path); writes
//! need `--allow-writes` and a prefix.

use crate::Fixture;

const SECRET: &str = "hunter2-do-not-leak";

struct Files {
    allowed: std::path::PathBuf,
    secret: std::path::PathBuf,
}

fn files(fixture: &Fixture) -> Files {
    let allowed = fixture.path().join("allowed");
    std::fs::create_dir_all(&allowed).unwrap();
    std::fs::write(allowed.join("a.csv"), "p,y\n0.25,1\n0.75,0\n").unwrap();
    let secret = fixture.path().join("secret.csv");
    std::fs::write(&secret, format!("user,password\nroot,{SECRET}\n")).unwrap();
    std::os::unix::fs::symlink(&secret, allowed.join("link.csv")).unwrap();
    Files { allowed, secret }
}

#[test]
fn a_client_cannot_read_a_file_outside_the_allowed_paths() {
    let fixture = Fixture::new();
    let files = files(&fixture);
    let prefix = files.allowed.display().to_string();
    let server = fixture.serve(&["--allow-path", &prefix]);
    let a = files.allowed.join("a.csv").display().to_string();
    assert_eq!(
        server.psql(&format!(
            "SELECT count(*) AS n, ece(p, y) AS ece FROM '{a}'"
        )),
        "n,ece\n2,0.75\n"
    );
    let secret = files.secret.display().to_string();
    for path in [
        secret.clone(),
        format!("{prefix}/../secret.csv"),
        format!("{prefix}/link.csv"),
        format!("file://{secret}"),
        "/etc/passwd".to_string(),
        "secret.csv".to_string(),
    ] {
        for sql in [
            format!("SELECT * FROM '{path}'"),
            format!("CREATE EXTERNAL TABLE s STORED AS CSV LOCATION '{path}'"),
        ] {
            let error = server.psql_error(&sql);
            assert!(error.contains("permission denied"), "{sql}: {error}");
            assert!(
                error.contains("not under an --allow-path prefix"),
                "{sql}: {error}"
            );
            assert!(!error.contains(SECRET), "{sql}: {error}");
        }
    }
    // An external table under the prefix is read; writing is still refused.
    let out = server.psql_as(
        &server.conninfo("analyst"),
        Some(crate::PASSWORD),
        &[
            "-c",
            &format!("CREATE EXTERNAL TABLE a STORED AS CSV LOCATION '{a}'"),
            "-c",
            "SELECT sum(y) AS s FROM a",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8(out.stdout).unwrap().ends_with("s\n1\n"));
    let error = server.psql_error(&format!("COPY (SELECT 1 AS x) TO '{prefix}/out.csv'"));
    assert!(error.contains("--allow-writes"), "{error}");
}

#[test]
fn writes_go_under_the_allowed_paths_only() {
    let fixture = Fixture::new();
    let files = files(&fixture);
    let prefix = files.allowed.display().to_string();
    let server = fixture.serve(&["--allow-path", &prefix, "--allow-writes"]);
    let inside = files.allowed.join("out.csv");
    assert_eq!(
        server.psql(&format!(
            "COPY (SELECT 1 AS x) TO '{}' STORED AS CSV",
            inside.display()
        )),
        "COPY 1\n"
    );
    assert!(inside.exists());
    let outside = fixture.path().join("out.csv");
    let error = server.psql_error(&format!("COPY t TO '{}'", outside.display()));
    assert!(
        error.contains("not under an --allow-path prefix"),
        "{error}"
    );
    assert!(!outside.exists());
    // Tables in memory, private to the session.
    let out = server.psql_as(
        &server.conninfo("analyst"),
        Some(crate::PASSWORD),
        &[
            "-c",
            "CREATE TABLE m AS SELECT 1 AS x",
            "-c",
            "INSERT INTO m VALUES (2)",
            "-c",
            "SELECT sum(x) AS s FROM m",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        stdout.contains("INSERT 0 1") && stdout.ends_with("s\n3\n"),
        "{stdout}"
    );
}
