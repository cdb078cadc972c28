//! TLS: a self-signed certificate (made by `openssl`) that psql verifies with
//! `sslmode=verify-full`; `--require-tls` refusing plaintext; a certificate that cannot be
//! loaded stops the start instead of serving plaintext.

use std::path::{Path, PathBuf};

use crate::{calibsql, child, Fixture, PASSWORD};

/// A self-signed certificate for 127.0.0.1 and localhost: (certificate, key).
fn self_signed(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let cert = dir.join(format!("{name}.crt"));
    let key = dir.join(format!("{name}.key"));
    let mut command = child::command("openssl");
    command
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        ])
        .args(["-subj", "/CN=localhost"])
        .args(["-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert);
    let out = child::output("openssl", &mut command, crate::CLIENT);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (cert, key)
}

fn tls_conninfo(server: &crate::Server, root: &Path) -> String {
    server
        .conninfo("analyst")
        .replace("sslmode=disable", "sslmode=verify-full")
        + &format!(" sslrootcert={}", root.display())
}

#[test]
fn psql_verifies_the_certificate_and_require_tls_refuses_plaintext() {
    let fixture = Fixture::new();
    let (cert, key) = self_signed(fixture.path(), "server");
    let (other, _) = self_signed(fixture.path(), "other");
    let (cert_arg, key_arg) = (cert.display().to_string(), key.display().to_string());
    let server = fixture.serve(&[
        "--tls-cert",
        &cert_arg,
        "--tls-key",
        &key_arg,
        "--require-tls",
    ]);
    assert!(server.log().contains("TLS required"), "{}", server.log());

    let out = server.psql_as(
        &tls_conninfo(&server, &cert),
        Some(PASSWORD),
        &[
            "-c",
            "\\conninfo",
            "-c",
            "SELECT ece(p_model, click) > 0 AS ok FROM t",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.contains("SSL connection"), "{stdout}");
    assert!(stdout.contains("ok\nt\n"), "{stdout}");

    // Another certificate as the root: verify-full fails, nothing is sent.
    let out = server.psql_as(
        &tls_conninfo(&server, &other),
        Some(PASSWORD),
        &["-c", "SELECT 1"],
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("certificate verify failed"), "{stderr}");

    // Plaintext: refused before the password is asked for.
    let out = server.psql_as(
        &server.conninfo("analyst"),
        Some(PASSWORD),
        &["-c", "SELECT 1"],
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("accepts TLS connections only"), "{stderr}");
    assert!(
        server.log().contains("no TLS (--require-tls)"),
        "{}",
        server.log()
    );
}

#[test]
fn without_require_tls_both_work() {
    let fixture = Fixture::new();
    let (cert, key) = self_signed(fixture.path(), "server");
    let (cert_arg, key_arg) = (cert.display().to_string(), key.display().to_string());
    let server = fixture.serve(&["--tls-cert", &cert_arg, "--tls-key", &key_arg]);
    let out = server.psql_as(
        &tls_conninfo(&server, &cert),
        Some(PASSWORD),
        &["-c", "\\conninfo"],
    );
    assert!(String::from_utf8(out.stdout)
        .unwrap()
        .contains("SSL connection"));
    assert_eq!(server.psql("SELECT 1 AS x"), "x\n1\n");
}

#[test]
fn a_certificate_that_cannot_be_loaded_stops_the_start() {
    let fixture = Fixture::new();
    let (cert, key) = self_signed(fixture.path(), "server");
    let garbage = fixture.path().join("garbage.pem");
    std::fs::write(&garbage, "not a certificate\n").unwrap();
    let users = fixture.users();
    let start = |cert: &Path, key: &Path| {
        let (cert, key) = (cert.display().to_string(), key.display().to_string());
        calibsql(
            fixture.path(),
            &[
                "serve",
                "--users",
                &users,
                "--bind",
                "127.0.0.1:0",
                "--tls-cert",
                &cert,
                "--tls-key",
                &key,
            ],
        )
    };
    for (c, k, flag) in [
        (garbage.as_path(), key.as_path(), "--tls-cert"),
        (cert.as_path(), garbage.as_path(), "--tls-key"),
        (
            cert.as_path(),
            fixture.path().join("missing.key").as_path(),
            "--tls-key",
        ),
        (key.as_path(), cert.as_path(), "--tls-"),
    ] {
        let out = start(c, k);
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(
            stderr.contains(flag) && !stderr.contains("listening"),
            "{stderr}"
        );
    }
    // --require-tls needs a certificate.
    let out = calibsql(
        fixture.path(),
        &[
            "serve",
            "--users",
            &users,
            "--bind",
            "127.0.0.1:0",
            "--require-tls",
        ],
    );
    assert_eq!(out.status.code(), Some(2));
}
