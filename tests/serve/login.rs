//! Login: SCRAM-SHA-256 against the users file; refused logins logged without the password;
//! the users file must be private; verifiers made by PostgreSQL work.

use crate::{calibsql, set_mode, Fixture, PASSWORD};

#[test]
fn a_user_logs_in_and_others_are_refused() {
    let fixture = Fixture::new();
    let server = fixture.serve(&[]);
    assert_eq!(server.psql("SELECT 1 + 1 AS two"), "two\n2\n");

    let refused = |user: &str, password: Option<&str>| {
        let out = server.psql_as(&server.conninfo(user), password, &["-w", "-c", "SELECT 1"]);
        assert!(!out.status.success(), "{user} logged in");
        String::from_utf8(out.stderr).unwrap()
    };
    let wrong = "Tr0ub4dor&3";
    let stderr = refused("analyst", Some(wrong));
    assert!(
        stderr.contains("password authentication failed for user \"analyst\""),
        "{stderr}"
    );
    // Another user's password is wrong too.
    assert!(refused("bob", Some(PASSWORD)).contains("password authentication failed"));
    // An unknown user gets the same answer as a wrong password.
    let stderr = refused("mallory", Some(PASSWORD));
    assert!(
        stderr.contains("password authentication failed for user \"mallory\""),
        "{stderr}"
    );
    // No password: the client cannot answer the challenge, no query runs.
    let stderr = refused("analyst", None);
    assert!(stderr.contains("no password supplied"), "{stderr}");
    // Another database.
    let conninfo = server
        .conninfo("analyst")
        .replace("dbname=calibsql", "dbname=postgres");
    let out = server.psql_as(&conninfo, Some(PASSWORD), &["-c", "SELECT 1"]);
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("database \"postgres\" does not exist"),
        "{stderr}"
    );

    let log = server.log();
    assert!(log.contains("login refused for user \"analyst\""), "{log}");
    assert!(log.contains("wrong password"), "{log}");
    assert!(log.contains("login refused for user \"mallory\""), "{log}");
    assert!(!log.contains(wrong) && !log.contains(PASSWORD), "{log}");
    // The server still serves.
    assert_eq!(server.psql("SELECT 2 AS x"), "x\n2\n");
}

#[test]
fn a_postgresql_verifier_logs_in() {
    // Made by PostgreSQL 15 (password_encryption = scram-sha-256) for 'correct horse'.
    const VERIFIER: &str = "SCRAM-SHA-256$4096:aUsrvADzzkJNicSxZBmm5A==$/dVPHkF+9VTwu1YNE9Fj4tOdrSgHF32gkXwQNAm+QAA=:IbCAxMWEDP8WfpxRasl4ElBNg0C7IzDlA3ztTl8UPWk=";
    let fixture = Fixture::new();
    let users = fixture.path().join("users");
    let mut text = std::fs::read_to_string(&users).unwrap();
    text.push_str(&format!("pg:{VERIFIER}\n"));
    std::fs::write(&users, text).unwrap();
    let server = fixture.serve(&[]);
    let out = server.psql_as(
        &server.conninfo("pg"),
        Some("correct horse"),
        &["-c", "SELECT 3 AS x"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8(out.stdout).unwrap(), "x\n3\n");
}

#[test]
fn the_users_file_must_be_private_and_well_formed() {
    let fixture = Fixture::new();
    let users = fixture.users();
    set_mode(std::path::Path::new(&users), 0o644);
    let out = calibsql(
        fixture.path(),
        &["serve", "--users", &users, "--bind", "127.0.0.1:0"],
    );
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("chmod 600"), "{stderr}");

    std::fs::write(&users, "analyst:md5abcdef\n").unwrap();
    set_mode(std::path::Path::new(&users), 0o600);
    let out = calibsql(
        fixture.path(),
        &["serve", "--users", &users, "--bind", "127.0.0.1:0"],
    );
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("line 1") && stderr.contains("SCRAM-SHA-256$"),
        "{stderr}"
    );

    // No --users: no anonymous server.
    let out = calibsql(fixture.path(), &["serve", "--bind", "127.0.0.1:0"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn hash_password_prints_a_postgresql_verifier() {
    let fixture = Fixture::new();
    let a = crate::hash_password(fixture.path(), "pw");
    let b = crate::hash_password(fixture.path(), "pw");
    // SCRAM-SHA-256$4096:<salt>$<StoredKey>:<ServerKey>, a new salt each time.
    assert!(a.starts_with("SCRAM-SHA-256$4096:"), "{a}");
    assert_eq!(a.split('$').count(), 3);
    assert_ne!(a, b);
    // Nothing on standard input: an error, no verifier of the empty password.
    let out = calibsql(fixture.path(), &["hash-password"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
}
