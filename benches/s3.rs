//! One `ece` query over a ~200 MB Parquet dataset, from an S3 server on loopback and from
//! local disk, in the same run: prints both times and their ratio.
//!
//! `cargo bench --bench s3` (release). The server is s3s + s3s-fs in this process on
//! 127.0.0.1 with SigV4 auth, as in `tests/s3.rs`; it shares the machine's cores with the
//! query, so the ratio includes serving the bytes, not only fetching them. Without `--bench`
//! (e.g. under `cargo test --benches`) it does nothing.

#[path = "../tests/support/s3_server.rs"]
mod s3_server;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use calibsql::S3Options;
use datafusion::prelude::SessionContext;
use object_store::aws::AmazonS3Builder;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStoreExt, PutPayload};

const BUCKET: &str = "bench";
const KEY: &str = "bench-key";
const SECRET: &str = "bench-secret";
/// 8 files × 3.2M rows of (score DOUBLE, y BOOLEAN, field BIGINT): about 200 MB of Parquet.
const FILES: usize = 8;
const ROWS_PER_FILE: usize = 3_200_000;
const RUNS: usize = 3;
const QUERY: &str = "SELECT ece(score, y) AS ece FROM t";

fn main() {
    if !std::env::args().any(|arg| arg == "--bench") {
        println!("s3 bench: skipped (run with cargo bench --bench s3)");
        return;
    }
    let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("s3-bench");
    let _ = std::fs::remove_dir_all(&base);
    let (root, local) = (base.join("server"), base.join("local"));
    std::fs::create_dir_all(root.join(BUCKET)).unwrap();
    std::fs::create_dir_all(&local).unwrap();

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    // The server runs on its own runtime, kept until the end.
    let server = s3_server::start(&root, KEY, SECRET);
    let endpoint = server.endpoint.clone();
    let bytes = runtime.block_on(write_dataset(&local, &endpoint));
    println!(
        "dataset: {FILES} files, {} rows, {:.0} MB",
        FILES * ROWS_PER_FILE,
        bytes as f64 / 1e6
    );

    let (s3, disk) = runtime.block_on(async {
        let s3 = calibsql::new_context();
        calibsql::register_object_stores(
            &s3,
            S3Options {
                endpoint: Some(endpoint.clone()),
                allow_http: Some(true),
                region: Some("us-east-1".into()),
                access_key_id: Some(KEY.into()),
                secret_access_key: Some(SECRET.into()),
                ..S3Options::default()
            },
        )
        .unwrap();
        calibsql::tables::register_table(&s3, "t", &format!("s3://{BUCKET}/data/"), None)
            .await
            .unwrap();
        let disk = calibsql::new_context();
        calibsql::tables::register_table(
            &disk,
            "t",
            &local.join("data").display().to_string(),
            None,
        )
        .await
        .unwrap();
        (s3, disk)
    });

    // Alternate the two so that caches and clocks treat them alike; keep the best of each.
    let (mut best_s3, mut best_disk) = (Duration::MAX, Duration::MAX);
    let (mut result_s3, mut result_disk) = (String::new(), String::new());
    for _ in 0..RUNS {
        let (time, result) = runtime.block_on(timed(&disk));
        best_disk = best_disk.min(time);
        result_disk = result;
        let (time, result) = runtime.block_on(timed(&s3));
        best_s3 = best_s3.min(time);
        result_s3 = result;
    }
    println!("ece: {result_s3} (S3), {result_disk} (local)");
    println!(
        "best of {RUNS}: S3 {:.3} s, local {:.3} s, ratio S3/local {:.2}",
        best_s3.as_secs_f64(),
        best_disk.as_secs_f64(),
        best_s3.as_secs_f64() / best_disk.as_secs_f64()
    );
    drop(runtime);
    let _ = std::fs::remove_dir_all(&base);
}

async fn timed(ctx: &SessionContext) -> (Duration, String) {
    let started = Instant::now();
    let batches = ctx.sql(QUERY).await.unwrap().collect().await.unwrap();
    let elapsed = started.elapsed();
    let value =
        datafusion::arrow::util::display::array_value_to_string(batches[0].column(0), 0).unwrap();
    (elapsed, value)
}

/// Writes the files locally with DataFusion and uploads them; returns their total size.
async fn write_dataset(local: &Path, endpoint: &str) -> u64 {
    let ctx = SessionContext::new();
    let store = AmazonS3Builder::new()
        .with_endpoint(endpoint)
        .with_allow_http(true)
        .with_region("us-east-1")
        .with_bucket_name(BUCKET)
        .with_access_key_id(KEY)
        .with_secret_access_key(SECRET)
        .build()
        .unwrap();
    std::fs::create_dir_all(local.join("data")).unwrap();
    let mut total = 0;
    for i in 0..FILES {
        let name = format!("data/part-{i}.parquet");
        let path = local.join(&name);
        let sql = format!(
            "COPY (SELECT random() AS score, random() < 0.3 AS y, \
                          CAST(random() * 1000 AS BIGINT) AS field \
                   FROM range({ROWS_PER_FILE})) TO '{}'",
            path.display()
        );
        ctx.sql(&sql).await.unwrap().collect().await.unwrap();
        let bytes = std::fs::read(&path).unwrap();
        total += bytes.len() as u64;
        store
            .put(&ObjectPath::from(name.as_str()), PutPayload::from(bytes))
            .await
            .unwrap();
    }
    total
}
