//! The S3 endpoint the suite runs against (moto_server, started by `scripts/test.sh`,
//! which exports `WEIR_TEST_S3_ENDPOINT`).

use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub fn endpoint() -> String {
    std::env::var("WEIR_TEST_S3_ENDPOINT").expect(
        "WEIR_TEST_S3_ENDPOINT is not set: run the suite with ./scripts/test.sh, which starts moto_server",
    )
}

/// A plain HTTP request to the endpoint (moto accepts unsigned requests).
pub async fn http(endpoint: &str, method: &str, path: &str) -> String {
    let host = endpoint.trim_start_matches("http://").trim_end_matches('/');
    let mut s = tokio::net::TcpStream::connect(host)
        .await
        .expect("S3 endpoint");
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out
}

/// Creates a bucket and returns the `weir.toml` lines that put checkpoints in it.
pub async fn checkpoint_config(bucket: &str, prefix: &str, interval: &str) -> String {
    let endpoint = endpoint();
    let created = http(&endpoint, "PUT", &format!("/{bucket}")).await;
    assert!(
        created.starts_with("HTTP/1.1 200"),
        "create bucket: {created}"
    );
    format!(
        "[execution.checkpointing]\ndir = \"s3://{bucket}/{prefix}\"\ninterval = \"{interval}\"\n\
         [s3]\nendpoint = \"{endpoint}\"\nregion = \"us-east-1\"\n\
         access-key-id = \"testing\"\nsecret-access-key = \"testing\"\nallow-http = true\n"
    )
}
