//! The Prometheus endpoint: `GET /metrics` on `metrics.reporter.prom.port` (Flink's
//! PrometheusReporter key; default 9249), answered by the dashboard's minimal HTTP/1.1
//! responder (`web::http`): scrapes need nothing more.

use crate::web::http::Response;

/// Starts the endpoint. A port that cannot be bound is logged, not fatal: the
/// database keeps serving without metrics.
pub async fn start(host: &str, port: u16) {
    crate::web::http::serve(host, port, "metrics endpoint", |req| async move {
        let path = req.path.as_str();
        if path == "/metrics" || path.starts_with("/metrics?") {
            Response::body(
                "text/plain; version=0.0.4",
                weir_executor::metrics::render(),
            )
        } else {
            Response::text(404, "not found; try /metrics\n")
        }
    })
    .await;
}
