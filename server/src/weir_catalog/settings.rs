//! `weir_catalog.settings`: every server and job key, its effective value on this
//! server and where it came from (`default`, `config file`, `command line`,
//! `environment`). Per-job keys can still be overridden by a session's `SET` or a
//! view's `WITH (...)`; SHOW <key> tells the value a session would use.

use super::{Facts, Table};
use crate::config::Config;
use crate::pg_catalog::rows::{Col::*, Spec, V};

pub const SETTINGS: Table = Table {
    spec: Spec {
        name: "settings",
        columns: &[
            ("name", Text),
            ("value", Text),
            ("source", Text),
            // `server` (weir.toml / command line) or `job` (also per session and view).
            ("scope", Text),
        ],
    },
    rows,
};

#[derive(Debug, Clone)]
pub struct SettingRow {
    pub name: String,
    pub value: String,
    pub source: &'static str,
    pub scope: &'static str,
}

fn rows(f: &Facts) -> Vec<Vec<V>> {
    f.settings
        .iter()
        .map(|s| {
            vec![
                s.name.clone().into(),
                s.value.clone().into(),
                s.source.into(),
                s.scope.into(),
            ]
        })
        .collect()
}

/// Every key with its effective server-wide value and origin.
pub fn effective_settings(cfg: &Config) -> Vec<SettingRow> {
    let row = |name: &str, value: String, scope| SettingRow {
        source: cfg.origin(name),
        name: name.to_string(),
        value,
        scope,
    };
    let path = |p: &Option<std::path::PathBuf>| {
        p.as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_default()
    };
    let mut out = vec![
        row("listen", cfg.listen.clone(), "server"),
        row("data-dir", cfg.data_dir.display().to_string(), "server"),
        row("parallelism.default", cfg.parallelism.to_string(), "server"),
        row(
            "pipeline.max-parallelism",
            cfg.max_parallelism.to_string(),
            "server",
        ),
        row(
            "barrier.interval",
            format!("{}ms", cfg.barrier_interval.as_millis()),
            "server",
        ),
        row(
            "serving.read-after-write",
            cfg.read_after_write.to_string(),
            "server",
        ),
        // Never the password itself.
        row(
            "auth.password",
            if cfg.password.is_some() { "(set)" } else { "" }.to_string(),
            "server",
        ),
        row(
            "auth.allow-unauthenticated-remote",
            cfg.allow_unauthenticated_remote.to_string(),
            "server",
        ),
        row("tls.cert-file", path(&cfg.tls_cert), "server"),
        row("tls.key-file", path(&cfg.tls_key), "server"),
        row("rest.port", cfg.web_port.to_string(), "server"),
        row(
            "metrics.reporter.prom.port",
            cfg.metrics_port.to_string(),
            "server",
        ),
    ];
    for &(key, default) in crate::settings::SERVER_KEYS {
        if out.iter().any(|r| r.name == key) {
            continue;
        }
        let value = match (cfg.file_value(key), key) {
            (Some(v), _) if key.ends_with("secret-access-key") => {
                if v.is_empty() { "" } else { "(set)" }.to_string()
            }
            (Some(v), _) => v.to_string(),
            (None, "execution.checkpointing.dir") => cfg.checkpoint_dir(),
            (None, "execution.checkpointing.savepoint-dir") => cfg.savepoint_dir(),
            (None, _) => default.to_string(),
        };
        out.push(row(key, value, "server"));
    }
    for &(key, default) in crate::settings::JOB_KEYS {
        let value = cfg.file_value(key).unwrap_or(default).to_string();
        out.push(row(key, value, "job"));
    }
    out
}
