//! A real S3 protocol server for tests (`#[path]`-included): s3s + s3s-fs in this process on
//! a random 127.0.0.1 port, SigV4 authentication with one key and secret, objects stored as
//! files under a root directory (bucket = subdirectory).
#![allow(dead_code)] // each including target uses part of it

use std::path::Path;

use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder as ConnBuilder;
use s3s::auth::SimpleAuth;
use s3s::service::S3ServiceBuilder;

pub struct S3Server {
    /// `http://127.0.0.1:PORT`.
    pub endpoint: String,
    /// Runs the server for as long as it is kept.
    pub runtime: tokio::runtime::Runtime,
}

/// Serves the buckets under `root` (created if missing) with `key` and `secret`.
pub fn start(root: &Path, key: &str, secret: &str) -> S3Server {
    std::fs::create_dir_all(root).unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let service = {
        let mut builder = S3ServiceBuilder::new(s3s_fs::FileSystem::new(root).unwrap());
        builder.set_auth(SimpleAuth::from_single(key, secret));
        builder.build()
    };
    runtime.spawn(async move {
        loop {
            let Ok((socket, _)) = listener.accept().await else {
                continue;
            };
            let service = service.clone();
            tokio::spawn(async move {
                let _ = ConnBuilder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(socket), service)
                    .await;
            });
        }
    });
    S3Server { endpoint, runtime }
}
