//! `calibsql serve`: calibsql over the Postgres wire protocol and Arrow Flight SQL, and
//! `calibsql hash-password`.
//!
//! The Postgres listener accepts connections on `--bind` (127.0.0.1 unless told otherwise;
//! none with `--no-postgres`), each served by pgwire with the handlers of [`connection`]:
//! login with SCRAM-SHA-256 against `--users`, TLS when `--tls-cert`/`--tls-key` are given (a
//! certificate that cannot be loaded stops the start), then a session of its own
//! ([`sessions`]) whose statements the [`policy`] checks. Connections past
//! `--max-connections` are answered "too many clients". With `--flight-bind`, the [`flight`]
//! listener serves Arrow Flight SQL from the same [`connection::Server`]: the same users,
//! certificate, sessions, policy, limits and query runtime, and the same connection permits.

mod catalog;
mod connection;
mod flight;
mod policy;
mod scram;
mod sessions;
mod statements;
mod users;

use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use datafusion_postgres::pgwire;
use pgwire::tokio::tokio_rustls::rustls;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use super::args::ServeArgs;
use connection::{Connection, Server};

/// Connections over `--max-connections` being answered at once; more are closed unanswered.
const REFUSALS_AT_ONCE: usize = 16;

/// A line on standard error, the server's log.
pub(crate) fn log(line: &str) {
    let _ = writeln!(std::io::stderr(), "calibsql serve: {line}");
}

/// `calibsql hash-password`: the verifier of the password on standard input's first line.
pub fn hash_password() -> anyhow::Result<()> {
    let mut input = String::new();
    std::io::stdin()
        .read_to_string(&mut input)
        .context("cannot read the password on standard input")?;
    let password = input.lines().next().unwrap_or("");
    if password.is_empty() {
        anyhow::bail!(
            "no password on standard input (e.g. printf '%s' \"$PASSWORD\" | calibsql \
             hash-password)"
        );
    }
    let verifier = scram::Verifier::generate(password).map_err(anyhow::Error::msg)?;
    writeln!(std::io::stdout(), "{verifier}")?;
    Ok(())
}

/// The TLS configuration of `--tls-cert`/`--tls-key`; any failure is an error (never a
/// plaintext server instead).
fn tls_config(
    cert: &std::path::Path,
    key: &std::path::Path,
) -> anyhow::Result<rustls::ServerConfig> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs: Vec<CertificateDer> = CertificateDer::pem_file_iter(cert)
        .with_context(|| format!("--tls-cert {}: cannot read it", cert.display()))?
        .collect::<Result<_, _>>()
        .with_context(|| format!("--tls-cert {}: not a PEM certificate", cert.display()))?;
    if certs.is_empty() {
        anyhow::bail!("--tls-cert {}: no certificate in the file", cert.display());
    }
    let key = PrivateKeyDer::from_pem_file(key)
        .with_context(|| format!("--tls-key {}: no PEM private key in it", key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS setup")?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .context("--tls-cert/--tls-key: the certificate and key do not make a TLS identity")?;
    Ok(config)
}

/// The client of the cluster at `--remote`, if any.
async fn remote(
    args: &ServeArgs,
    options: &calibsql::ContextOptions,
) -> anyhow::Result<Option<datafusion::prelude::SessionContext>> {
    match &args.remote {
        #[cfg(feature = "distributed")]
        Some(address) => Ok(Some(
            calibsql::distributed::remote_context(&format!("df://{address}"), options).await?,
        )),
        #[cfg(not(feature = "distributed"))]
        Some(_) => Err(super::options::UsageError(
            "--remote: this calibsql was built without the cluster client (--features \
             distributed)"
                .to_string(),
        )
        .into()),
        None => Ok(None),
    }
}

/// The template of the connections' sessions: calibsql's local session. With `--remote`,
/// string columns are read as the cluster reads them (Utf8, not Utf8View), so that a plan
/// made here runs there.
fn template(
    options: &calibsql::ContextOptions,
    remote: Option<&datafusion::prelude::SessionContext>,
) -> anyhow::Result<datafusion::prelude::SessionContext> {
    let ctx = calibsql::build_context(options)?;
    if let Some(remote) = remote {
        let remote_options = remote.state().config().options().clone();
        let state_ref = ctx.state_ref();
        let mut state = state_ref.write();
        let local = state.config_mut().options_mut();
        local.execution.parquet.schema_force_view_types =
            remote_options.execution.parquet.schema_force_view_types;
        local.sql_parser.map_string_types_to_utf8view =
            remote_options.sql_parser.map_string_types_to_utf8view;
    }
    Ok(ctx)
}

/// A panic in one connection is a bug to report, not a reason to stop serving the others
/// (the CLI's hook exits): it is logged, and that connection's task ends.
fn log_panics() {
    std::panic::set_hook(Box::new(|info| {
        let location = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        let payload = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".to_string());
        log(&format!(
            "internal error (a bug; its connection is closed): {payload}{location}"
        ));
    }));
}

pub async fn run(args: &ServeArgs) -> anyhow::Result<()> {
    if args.remote.is_some() && args.memory_limit.is_some() {
        return Err(super::options::UsageError(
            "--memory-limit limits local queries; with --remote each executor has its own \
             (calibsql executor --memory-limit SIZE)"
                .to_string(),
        )
        .into());
    }
    let users = users::Users::load(&args.users)?;
    let tls_config = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(tls_config(cert, key)?),
        _ => None,
    };
    let tls = tls_config
        .clone()
        .map(|config| pgwire::tokio::TlsAcceptor::from(Arc::new(config)));
    // gRPC clients over TLS ask for HTTP/2 by ALPN (Go's refuse a server that does not say it).
    let flight_tls = tls_config.map(|mut config| {
        config.alpn_protocols = vec![b"h2".to_vec()];
        pgwire::tokio::TlsAcceptor::from(Arc::new(config))
    });
    let policy = policy::Policy::new(args.allow_writes, &args.allow_path)?;
    let options = calibsql::ContextOptions {
        memory_limit: args.memory_limit,
        s3: args.s3.options(),
        ..Default::default()
    };
    let remote = remote(args, &options).await?;
    let ctx = template(&options, remote.as_ref())?;
    let mut names = Vec::new();
    for table in &args.tables {
        calibsql::tables::register_table(&ctx, &table.name, &table.location, args.table_format)
            .await
            .map_err(|e| {
                anyhow::anyhow!("--table {}={}: {}", table.name, table.location, e.message())
            })?;
        names.push(table.name.clone());
    }
    let sessions = sessions::Sessions::new(&ctx, &names, policy)?;
    let query_timeout = (args.query_timeout > 0).then(|| Duration::from_secs(args.query_timeout));
    let server = Arc::new(Server::new(
        sessions,
        users,
        args.require_tls,
        !args.allow_writes,
        query_timeout,
        remote.map(Arc::new),
    )?);
    log_panics();
    let connections = Arc::new(Semaphore::new(args.max_connections));
    let listener = if args.no_postgres {
        None
    } else {
        Some(
            TcpListener::bind(args.bind)
                .await
                .with_context(|| format!("--bind {}: cannot listen", args.bind))?,
        )
    };
    let tls_state = match (&tls, args.require_tls) {
        (None, _) => "off",
        (Some(_), false) => "on",
        (Some(_), true) => "required",
    };
    let access = if args.allow_writes {
        "writes allowed"
    } else {
        "read-only"
    };
    if let Some(listener) = &listener {
        let address = listener.local_addr()?;
        let cluster = match &args.remote {
            Some(address) => format!(", queries on the cluster at df://{address}"),
            None => String::new(),
        };
        log(&format!(
            "listening on {address} (database {}, {} user(s), TLS {tls_state}, {access}, at \
             most {} connections{cluster})",
            sessions::DATABASE,
            server.users.len(),
            args.max_connections,
        ));
    }
    let mut flight = match args.flight_bind {
        Some(bind) => {
            let listener = TcpListener::bind(bind)
                .await
                .with_context(|| format!("--flight-bind {bind}: cannot listen"))?;
            log(&format!(
                "Flight SQL listening on {} (TLS {tls_state}, {access}, tokens valid for {} s)",
                listener.local_addr()?,
                args.flight_token_lifetime,
            ));
            Some(tokio::spawn(flight::serve(
                Arc::clone(&server),
                flight::Listener {
                    listener,
                    tls: flight_tls,
                    require_tls: args.require_tls,
                    connections: Arc::clone(&connections),
                    token_lifetime: Duration::from_secs(args.flight_token_lifetime),
                },
            )))
        }
        None => None,
    };
    // The Flight SQL server ends only on an error, which stops the process.
    let flight_stopped = async {
        match flight.as_mut() {
            Some(task) => match task.await {
                Ok(result) => result,
                Err(e) => Err(anyhow::anyhow!("the Flight SQL server stopped: {e}")),
            },
            None => std::future::pending().await,
        }
    };
    tokio::pin!(flight_stopped);
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let Some(listener) = listener else {
        tokio::select! {
            result = &mut flight_stopped => return result,
            _ = terminate.recv() => {
                log("stopping (SIGTERM)");
                return Ok(());
            }
        }
    };
    let refusals = Arc::new(Semaphore::new(REFUSALS_AT_ONCE));
    loop {
        let (socket, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors and the like: wait a little, go on.
                    log(&format!("cannot accept a connection: {e}"));
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            result = &mut flight_stopped => return result,
            _ = terminate.recv() => {
                log("stopping (SIGTERM)");
                return Ok(());
            }
        };
        // As Postgres does: a statement's last message (ReadyForQuery) goes out at once
        // instead of waiting for the client's delayed acknowledgement.
        let _ = socket.set_nodelay(true);
        let connection = match Arc::clone(&connections).try_acquire_owned() {
            Ok(permit) => Some(Connection::new(
                Arc::clone(&server),
                permit,
                socket.as_raw_fd(),
                peer.to_string(),
            )),
            Err(_) => None,
        };
        let tls = tls.clone();
        let server = Arc::clone(&server);
        let refusal = if connection.is_none() {
            match Arc::clone(&refusals).try_acquire_owned() {
                Ok(permit) => Some(permit),
                Err(_) => {
                    log(&format!(
                        "connection from {peer} closed: too many connections (--max-connections)"
                    ));
                    continue;
                }
            }
        } else {
            None
        };
        tokio::spawn(async move {
            let handlers =
                connection.unwrap_or_else(|| Connection::refused(server, peer.to_string()));
            if let Err(e) = pgwire::tokio::process_socket(socket, tls, handlers).await {
                log(&format!("connection from {peer}: {e}"));
            }
            drop(refusal);
        });
    }
}
