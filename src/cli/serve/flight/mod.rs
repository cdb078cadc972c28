//! `calibsql serve --flight-bind`: Arrow Flight SQL beside the Postgres wire, in the same
//! process and over the same [`Server`]: its users, sessions (tables, memory pool, policy),
//! query runtime, `--query-timeout` and `--remote`.
//!
//! The listener here accepts TCP connections itself, so that they count against the same
//! `--max-connections` permits as the Postgres ones (one past the limit is closed at once),
//! and so that one port serves TLS and plaintext as the Postgres one does: a connection whose
//! first byte opens a TLS handshake gets TLS with the `--tls-cert` (ALPN `h2`, as gRPC
//! clients ask), any other is plaintext HTTP/2, refused under `--require-tls`. tonic serves
//! gRPC on the connections; [`auth::Guarded`] lets no call but the handshake through without
//! a valid bearer token; [`service::FlightSql`] answers the calls.

mod auth;
mod metadata;
mod queries;
mod service;
mod status;

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use arrow_flight::flight_service_server::FlightServiceServer;
use datafusion_postgres::pgwire::tokio::tokio_rustls::{server::TlsStream, TlsAcceptor};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::connection::Server;
use super::log;

/// How long a new connection may take to send its first byte and finish its TLS handshake.
const HANDSHAKE_TIME: Duration = Duration::from_secs(10);
/// The first byte of a TLS record carrying a handshake (a ClientHello).
const TLS_HANDSHAKE: u8 = 0x16;

/// What the Flight SQL listener needs besides the shared [`Server`].
pub struct Listener {
    pub listener: TcpListener,
    /// `--tls-cert`/`--tls-key` with ALPN `h2`.
    pub tls: Option<TlsAcceptor>,
    pub require_tls: bool,
    /// The `--max-connections` permits, shared with the Postgres listener.
    pub connections: Arc<Semaphore>,
    /// How long a login's bearer token is valid (`--flight-token-lifetime`).
    pub token_lifetime: Duration,
}

/// Serves Flight SQL on `listener` until the process ends.
pub async fn serve(server: Arc<Server>, listener: Listener) -> anyhow::Result<()> {
    let Listener {
        listener,
        tls,
        require_tls,
        connections,
        token_lifetime,
    } = listener;
    let tokens = Arc::new(auth::Tokens::new(token_lifetime));
    let service = service::FlightSql::new(Arc::clone(&server), Arc::clone(&tokens))?;
    let guarded = auth::Guarded::new(FlightServiceServer::new(service), tokens);
    // Connections ready for gRPC (TLS done), handed from the accepting task to tonic.
    let (ready, incoming) = tokio::sync::mpsc::channel::<FlightIo>(16);
    tokio::spawn(accept(listener, tls, require_tls, connections, ready));
    let incoming = futures::stream::unfold(incoming, |mut incoming| async move {
        let io = incoming.recv().await?;
        Some((Ok::<_, io::Error>(io), incoming))
    });
    tonic::transport::Server::builder()
        .add_service(guarded)
        .serve_with_incoming(incoming)
        .await
        .map_err(|e| anyhow::anyhow!("the Flight SQL server stopped: {e}"))
}

/// Accepts connections, each within a `--max-connections` permit, and hands them on once
/// their TLS (if any) is set up.
async fn accept(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    require_tls: bool,
    connections: Arc<Semaphore>,
    ready: tokio::sync::mpsc::Sender<FlightIo>,
) {
    loop {
        let (socket, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of file descriptors and the like: wait a little, go on.
                log(&format!("Flight SQL: cannot accept a connection: {e}"));
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(permit) = Arc::clone(&connections).try_acquire_owned() else {
            log(&format!(
                "Flight SQL connection from {peer} closed: too many connections \
                 (--max-connections)"
            ));
            continue;
        };
        // Answers are written as they are made: without this, a small one (a FlightInfo, the
        // last frame of a stream) waits for the client's delayed acknowledgement (~40 ms).
        let _ = socket.set_nodelay(true);
        let tls = tls.clone();
        let ready = ready.clone();
        tokio::spawn(async move {
            let opened = tokio::time::timeout(HANDSHAKE_TIME, open(socket, tls, require_tls));
            let stream = match opened.await {
                Ok(Ok(stream)) => stream,
                Ok(Err(reason)) => {
                    log(&format!(
                        "Flight SQL connection from {peer} refused: {reason}"
                    ));
                    return;
                }
                Err(_) => {
                    log(&format!(
                        "Flight SQL connection from {peer} closed: no TLS handshake or request \
                         within {} s",
                        HANDSHAKE_TIME.as_secs()
                    ));
                    return;
                }
            };
            let _ = ready
                .send(FlightIo {
                    stream,
                    peer: Peer(peer),
                    _permit: permit,
                })
                .await;
        });
    }
}

/// `socket` with TLS when its first byte opens a TLS handshake and the server has a
/// certificate; plaintext otherwise, unless `require_tls`.
async fn open(
    socket: TcpStream,
    tls: Option<TlsAcceptor>,
    require_tls: bool,
) -> Result<Stream, String> {
    let mut first = [0u8; 1];
    let n = socket
        .peek(&mut first)
        .await
        .map_err(|e| format!("cannot read it: {e}"))?;
    if n == 0 {
        return Err("closed before its first byte".to_string());
    }
    match (first[0] == TLS_HANDSHAKE, tls) {
        (true, Some(tls)) => tls
            .accept(socket)
            .await
            .map(|stream| Stream::Tls(Box::new(stream)))
            .map_err(|e| format!("TLS handshake failed: {e}")),
        (true, None) => Err("TLS asked for, but the server has no --tls-cert".to_string()),
        (false, _) if require_tls => {
            Err("no TLS (--require-tls; connect with grpc+tls://)".to_string())
        }
        (false, _) => Ok(Stream::Plain(socket)),
    }
}

/// A Flight SQL connection's transport.
enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

/// The client's address, in each call's extensions (tonic puts a connection's
/// [`tonic::transport::server::Connected::connect_info`] there).
#[derive(Clone, Copy, Debug)]
pub struct Peer(pub SocketAddr);

/// One accepted connection, holding its `--max-connections` permit until it closes.
struct FlightIo {
    stream: Stream,
    peer: Peer,
    _permit: OwnedSemaphorePermit,
}

impl tonic::transport::server::Connected for FlightIo {
    type ConnectInfo = Peer;

    fn connect_info(&self) -> Peer {
        self.peer
    }
}

impl AsyncRead for FlightIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match &mut self.stream {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for FlightIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match &mut self.stream {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match &mut self.stream {
            Stream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match &self.stream {
            Stream::Plain(s) => s.is_write_vectored(),
            Stream::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.stream {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.stream {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}
