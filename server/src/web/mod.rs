//! The web dashboard: `weir` serves it itself on `rest.port` (Flink's web UI key,
//! default 8081; `--web-port`, `0` disables it). The page and its script are in
//! `assets/` and compiled into the binary (no Node toolchain, no CDN); the script
//! reads `/api/catalog/<table>`, the rows of `weir_catalog.<table>` as JSON, built by
//! the same code as the SQL tables, and refreshes every two seconds.
//!
//! A minimal HTTP/1.1 responder, like the metrics endpoint's: one GET per connection.
//! With `auth.password` set, every request needs HTTP Basic credentials carrying that
//! password (any user name), so the browser asks for it.

pub(crate) mod http;

use crate::database::Database;
use crate::pg_catalog::rows::V;
use crate::weir_catalog::{self, Facts};
use http::{Request, Response};
use std::sync::Arc;

const INDEX_HTML: &str = include_str!("assets/index.html");
const APP_JS: &str = include_str!("assets/app.js");
const APP_CSS: &str = include_str!("assets/app.css");

/// The database requests read: fixed for a single server, the leader's (or none on a
/// standby) in a high-availability cluster.
pub type DatabaseSource = Arc<dyn Fn() -> Option<Arc<Database>> + Send + Sync>;

/// Starts the dashboard. A port that cannot be bound is logged, not fatal: the
/// database keeps serving SQL.
pub async fn start(host: &str, port: u16, password: Option<String>, db: DatabaseSource) {
    let password = Arc::new(password);
    http::serve(host, port, "web dashboard", move |req| {
        let (db, password) = (db.clone(), password.clone());
        async move { respond(req, password.as_deref(), &db).await }
    })
    .await;
}

async fn respond(req: Request, password: Option<&str>, db: &DatabaseSource) -> Response {
    if req.method != "GET" && req.method != "HEAD" {
        return Response::text(405, "only GET is served here\n");
    }
    if let Some(pw) = password {
        if !http::basic_password_is(&req, pw) {
            return Response::unauthorized();
        }
    }
    let path = req.path.split('?').next().unwrap_or("");
    match path {
        "/" | "/index.html" => Response::asset("text/html; charset=utf-8", INDEX_HTML),
        "/assets/app.js" => Response::asset("text/javascript; charset=utf-8", APP_JS),
        "/assets/app.css" => Response::asset("text/css; charset=utf-8", APP_CSS),
        _ => match path.strip_prefix("/api/catalog/") {
            Some(table) => catalog_table(table, db).await,
            None => Response::text(404, "not found\n"),
        },
    }
}

/// `weir_catalog.<name>` as `{"columns": [...], "rows": [[...], ...]}`.
async fn catalog_table(name: &str, db: &DatabaseSource) -> Response {
    let Some(table) = weir_catalog::table(name) else {
        return Response::text(404, &format!("no table weir_catalog.{name}\n"));
    };
    let Some(db) = db() else {
        return Response::text(
            503,
            "this member is a standby: the leader serves the dashboard\n",
        );
    };
    let facts = Facts::gather(&db, name == "savepoints").await;
    let rows: Vec<serde_json::Value> = (table.rows)(&facts)
        .iter()
        .map(|r| r.iter().map(json).collect())
        .collect();
    let columns: Vec<&str> = table.spec.columns.iter().map(|(n, _)| *n).collect();
    Response::json(&serde_json::json!({ "columns": columns, "rows": rows }))
}

/// A cell as JSON: numbers as numbers, timestamps as `YYYY-MM-DD HH:MM:SS.mmm` UTC
/// (what psql shows for them, without the zone).
fn json(v: &V) -> serde_json::Value {
    use serde_json::Value as J;
    match v {
        V::Null => J::Null,
        V::Oid(n) => J::from(*n),
        V::I16(n) => J::from(*n),
        V::I32(n) => J::from(*n),
        V::I64(n) => J::from(*n),
        V::F32(x) => serde_json::Number::from_f64(f64::from(*x)).map_or(J::Null, J::Number),
        V::F64(x) => serde_json::Number::from_f64(*x).map_or(J::Null, J::Number),
        V::Ts(micros) => weir_catalog::ts_text(*micros).map_or(J::Null, J::from),
        V::Bool(b) => J::from(*b),
        V::Text(s) => J::from(s.as_str()),
        V::Oids(xs) => J::from(xs.clone()),
        V::I16s(xs) => J::from(xs.clone()),
        V::Texts(xs) => J::from(xs.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `docs/grafana/weir.json` loads as it is: valid JSON with a Prometheus data
    /// source variable, panels with queries, and every metric a query names is one
    /// Weir exports.
    #[test]
    fn the_grafana_dashboard_names_only_metrics_weir_exports() {
        let text = include_str!("../../../docs/grafana/weir.json");
        let dash: serde_json::Value = serde_json::from_str(text).expect("valid JSON");
        let exported = weir_executor::metrics::exported_names();
        let mut exprs = Vec::new();
        for panel in dash["panels"].as_array().expect("panels") {
            assert!(panel["title"].as_str().is_some_and(|t| !t.is_empty()));
            assert_eq!(panel["datasource"]["type"], "prometheus");
            for t in panel["targets"].as_array().expect("targets") {
                exprs.push(t["expr"].as_str().expect("expr").to_string());
            }
        }
        let variables = dash["templating"]["list"].as_array().expect("variables");
        exprs.push(variables[1]["definition"].as_str().unwrap().to_string());
        assert!(exprs.len() >= 10, "{exprs:?}");
        let mut named = 0;
        for e in &exprs {
            for word in e.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
                if word.starts_with("weir_") {
                    named += 1;
                    assert!(
                        exported.iter().any(|n| n == word),
                        "{word} (in `{e}`) is not a metric Weir exports: {exported:?}"
                    );
                }
            }
            assert!(
                !e.contains("job=") && !e.contains("job)"),
                "`job` is Prometheus's target label; Weir's is `job_name`: {e}"
            );
        }
        assert!(named >= exprs.len(), "every query names a Weir metric");
        assert_eq!(variables[0]["type"], "datasource");
    }

    #[test]
    fn cells_become_json_values() {
        assert_eq!(json(&V::I64(5)), serde_json::json!(5));
        assert_eq!(json(&V::F64(f64::NAN)), serde_json::Value::Null);
        assert_eq!(
            json(&V::Ts(1_700_000_000_123_000)),
            serde_json::json!("2023-11-14 22:13:20.123")
        );
        assert_eq!(json(&V::Text("a\"b".into())), serde_json::json!("a\"b"));
    }
}
