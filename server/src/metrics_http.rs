//! The Prometheus endpoint: `GET /metrics` on `metrics.reporter.prom.port` (Flink's
//! PrometheusReporter key; default 9249). A minimal HTTP/1.1 responder: Prometheus
//! scrapes need nothing more, and it keeps a web framework out of the server.

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// Starts the endpoint. A port that cannot be bound is logged, not fatal: the
/// database keeps serving without metrics.
pub async fn start(host: &str, port: u16) {
    if port == 0 {
        return;
    }
    let listener = match TcpListener::bind((host, port)).await {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(port, error = %e, "cannot start the metrics endpoint");
            return;
        }
    };
    tracing::info!(port, "metrics endpoint on /metrics");
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                continue;
            };
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let n = match socket.read(&mut buf).await {
                    Ok(n) => n,
                    Err(_) => return,
                };
                let request = String::from_utf8_lossy(&buf[..n]);
                let path = request.split_whitespace().nth(1).unwrap_or("");
                let (status, body) = if path == "/metrics" || path.starts_with("/metrics?") {
                    ("200 OK", weir_executor::metrics::render())
                } else {
                    ("404 Not Found", "not found; try /metrics\n".to_string())
                };
                let head = format!(
                    "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = socket.write_all(head.as_bytes()).await;
                let _ = socket.write_all(body.as_bytes()).await;
                let _ = socket.shutdown().await;
            });
        }
    });
}
