//! Configuration: built-in defaults < `weir.toml` < command-line flags.
//!
//! Keys use Flink's names where Flink has one (`parallelism.default`,
//! `pipeline.max-parallelism`); Weir's own keys are `listen`, `data-dir`,
//! `auth.password`, `auth.allow-unauthenticated-remote`, `tls.cert-file`,
//! `tls.key-file` and `barrier.interval` (milliseconds, or a string like "500ms"/"1s").
//!
//! Safe default: without `auth.password`, Weir listens only on loopback addresses;
//! listening elsewhere needs `auth.allow-unauthenticated-remote = true` (see
//! [`Config::check_listen_safety`]).
//! Checkpoint, restart, failover, metrics and S3 keys are listed in [`crate::settings`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;
use weir_storage::object_storage::S3Settings;

#[derive(Debug, Clone)]
pub struct Config {
    pub listen: String,
    pub data_dir: PathBuf,
    /// When set, clients must authenticate with SCRAM-SHA-256 using this password.
    pub password: Option<String>,
    /// Lets a server without a password listen on a non-loopback address.
    pub allow_unauthenticated_remote: bool,
    /// PEM certificate chain and private key: with both, SSLRequest is answered with TLS.
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    pub parallelism: u32,
    pub max_parallelism: u32,
    pub barrier_interval: Duration,
    /// Checkpoint, restart, failover, metrics and S3 keys set in `weir.toml`.
    pub settings: BTreeMap<String, String>,
    /// `metrics.reporter.prom.port` (0 disables the endpoint).
    pub metrics_port: u16,
    /// `serving.read-after-write`: every session's reads see every write acknowledged
    /// before them (sessions override it with `SET read_after_write`).
    pub read_after_write: bool,
    /// `rest.port` (Flink's web UI port): the web dashboard (0 disables it).
    pub web_port: u16,
    /// Where each key set away from its default came from (`config file`,
    /// `command line`, `environment`); keys not listed are defaults.
    pub origins: BTreeMap<String, &'static str>,
}

/// See `docs/serving.md` for the measurements behind this default.
pub const READ_AFTER_WRITE_DEFAULT: bool = false;

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:6543".into(),
            data_dir: PathBuf::from("./weir-data"),
            password: None,
            allow_unauthenticated_remote: false,
            tls_cert: None,
            tls_key: None,
            parallelism: weir_executor::RuntimeConfig::default_parallelism(),
            max_parallelism: weir_storage::key_group::DEFAULT_MAX_PARALLELISM,
            barrier_interval: Duration::from_secs(1),
            settings: BTreeMap::new(),
            metrics_port: 9249,
            read_after_write: READ_AFTER_WRITE_DEFAULT,
            web_port: 8081,
            origins: BTreeMap::new(),
        }
    }
}

impl Config {
    /// Refuses a listen address that is not loopback when no password is set, unless
    /// `auth.allow-unauthenticated-remote` says so: anyone who can reach the port
    /// could otherwise read and change every table.
    pub fn check_listen_safety(&self) -> Result<(), String> {
        if self.password.is_some() || self.allow_unauthenticated_remote {
            return Ok(());
        }
        use std::net::ToSocketAddrs;
        let addrs: Vec<_> = self
            .listen
            .to_socket_addrs()
            .map_err(|e| format!("invalid listen address {}: {e}", self.listen))?
            .collect();
        match addrs.iter().find(|a| !a.ip().is_loopback()) {
            None => Ok(()),
            Some(a) => Err(format!(
                "refusing to listen on non-loopback address {a} ({}) without a password: \
                 set auth.password in weir.toml, or allow it explicitly with \
                 `auth.allow-unauthenticated-remote = true` / --allow-unauthenticated-remote",
                self.listen
            )),
        }
    }

    /// Both TLS files, or neither: one without the other is a configuration error.
    pub fn tls_files(&self) -> Result<Option<(&Path, &Path)>, String> {
        match (&self.tls_cert, &self.tls_key) {
            (Some(c), Some(k)) => Ok(Some((c, k))),
            (None, None) => Ok(None),
            (Some(_), None) => Err("tls.cert-file is set but tls.key-file is not".into()),
            (None, Some(_)) => Err("tls.key-file is set but tls.cert-file is not".into()),
        }
    }

    /// Where `key`'s value came from: `default` unless something set it.
    pub fn origin(&self, key: &str) -> &'static str {
        self.origins.get(key).copied().unwrap_or("default")
    }

    /// Records that `key` was set by `origin` (the later setter wins).
    pub fn set_origin(&mut self, key: &str, origin: &'static str) {
        self.origins.insert(key.to_string(), origin);
    }

    /// A server-wide key's value from the file, if set.
    pub fn file_value(&self, key: &str) -> Option<&str> {
        self.settings
            .get(key)
            .map(|s| s.as_str())
            .filter(|s| !s.is_empty())
    }

    /// `execution.checkpointing.dir`: a path, `file://` URL or `s3://bucket/prefix`.
    pub fn checkpoint_dir(&self) -> String {
        self.file_value("execution.checkpointing.dir")
            .map(str::to_string)
            .unwrap_or_else(|| self.data_dir.display().to_string())
    }

    /// `execution.checkpointing.savepoint-dir`: where savepoints live (any server
    /// pointed at it can restore them); `<checkpoint dir>/savepoints` by default.
    pub fn savepoint_dir(&self) -> String {
        self.file_value("execution.checkpointing.savepoint-dir")
            .map(str::to_string)
            .unwrap_or_else(|| {
                format!("{}/savepoints", self.checkpoint_dir().trim_end_matches('/'))
            })
    }

    /// `state.backend.type`: `hashmap` (in memory, the default) or `rocksdb` (under
    /// `<data-dir>/state/rocksdb`), as in Flink.
    pub fn state_backend(&self) -> Result<std::sync::Arc<dyn weir_storage::StateBackend>, String> {
        let kind = self
            .file_value("state.backend.type")
            .unwrap_or("hashmap")
            .to_ascii_lowercase();
        match kind.as_str() {
            "hashmap" => Ok(weir_storage::MemoryStateBackend::new()),
            "rocksdb" => {
                let dir = self.data_dir.join("state").join("rocksdb");
                Ok(
                    weir_storage::rocksdb_backend::RocksDbStateBackend::open(&dir).map_err(
                        |e| {
                            format!(
                                "cannot open the RocksDB state backend in {}: {e}",
                                dir.display()
                            )
                        },
                    )?,
                )
            }
            other => Err(format!(
                "state.backend.type must be hashmap or rocksdb, not {other}"
            )),
        }
    }

    pub fn s3(&self) -> S3Settings {
        let get = |k: &str| self.file_value(k).map(str::to_string);
        S3Settings {
            endpoint: get("s3.endpoint"),
            region: get("s3.region"),
            access_key_id: get("s3.access-key-id"),
            secret_access_key: get("s3.secret-access-key"),
            allow_http: get("s3.allow-http").is_some_and(|v| v == "true"),
            request_timeout: None,
        }
    }
}

fn lookup<'a>(v: &'a toml::Value, dotted: &str) -> Option<&'a toml::Value> {
    // Accept both nested tables (`[parallelism] default = 2`) and quoted flat keys
    // (`"parallelism.default" = 2`).
    if let Some(x) = v.get(dotted) {
        return Some(x);
    }
    let mut cur = v;
    for part in dotted.split('.') {
        cur = cur.get(part)?;
    }
    Some(cur)
}

/// Parses "250ms", "1s", "2 min" or a bare number of milliseconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim().to_ascii_lowercase();
    let num_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (n, unit) = s.split_at(num_end);
    let n: f64 = n.parse().map_err(|_| format!("invalid duration: {s}"))?;
    let ms = match unit.trim() {
        "" | "ms" => n,
        "s" | "sec" | "second" | "seconds" => n * 1000.0,
        "min" | "m" | "minute" | "minutes" | "mins" => n * 60_000.0,
        "h" | "hour" | "hours" => n * 3_600_000.0,
        "d" | "day" | "days" => n * 86_400_000.0,
        other => return Err(format!("invalid duration unit: {other}")),
    };
    Ok(Duration::from_micros((ms * 1000.0) as u64))
}

/// Keys `weir.toml` sets besides the job and server keys of `crate::settings`.
const FILE_KEYS: &[&str] = &[
    "listen",
    "data-dir",
    "auth.password",
    "auth.allow-unauthenticated-remote",
    "tls.cert-file",
    "tls.key-file",
    "parallelism.default",
    "pipeline.max-parallelism",
    "barrier.interval",
    "serving.read-after-write",
];

impl Config {
    /// Loads `path`, or `./weir.toml` if it exists when no path is given.
    pub fn load(path: Option<&Path>) -> Result<Config, String> {
        let mut cfg = Config::default();
        let path = match path {
            Some(p) => Some(p.to_path_buf()),
            None => {
                let p = PathBuf::from("weir.toml");
                p.exists().then_some(p)
            }
        };
        let Some(path) = path else { return Ok(cfg) };
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let v: toml::Value =
            toml::from_str(&text).map_err(|e| format!("invalid {}: {e}", path.display()))?;
        for key in FILE_KEYS
            .iter()
            .chain(crate::settings::JOB_KEYS.iter().map(|(k, _)| k))
            .chain(crate::settings::SERVER_KEYS.iter().map(|(k, _)| k))
        {
            if lookup(&v, key).is_some() {
                cfg.set_origin(key, "config file");
            }
        }
        if let Some(x) = lookup(&v, "listen").and_then(|x| x.as_str()) {
            cfg.listen = x.to_string();
        }
        if let Some(x) = lookup(&v, "data-dir").and_then(|x| x.as_str()) {
            cfg.data_dir = PathBuf::from(x);
        }
        if let Some(x) = lookup(&v, "auth.password").and_then(|x| x.as_str()) {
            cfg.password = Some(x.to_string());
        }
        if let Some(x) = lookup(&v, "auth.allow-unauthenticated-remote") {
            cfg.allow_unauthenticated_remote = x
                .as_bool()
                .ok_or("auth.allow-unauthenticated-remote must be true or false")?;
        }
        if let Some(x) = lookup(&v, "tls.cert-file") {
            cfg.tls_cert = Some(PathBuf::from(
                x.as_str().ok_or("tls.cert-file must be a path")?,
            ));
        }
        if let Some(x) = lookup(&v, "tls.key-file") {
            cfg.tls_key = Some(PathBuf::from(
                x.as_str().ok_or("tls.key-file must be a path")?,
            ));
        }
        if let Some(x) = lookup(&v, "parallelism.default") {
            cfg.parallelism = x
                .as_integer()
                .filter(|n| *n >= 1)
                .ok_or("parallelism.default must be a positive integer")?
                as u32;
        }
        if let Some(x) = lookup(&v, "pipeline.max-parallelism") {
            cfg.max_parallelism =
                x.as_integer()
                    .filter(|n| *n >= 1 && *n <= 32768)
                    .ok_or("pipeline.max-parallelism must be in 1..=32768")? as u32;
        }
        if let Some(x) = lookup(&v, "barrier.interval") {
            cfg.barrier_interval = match x {
                toml::Value::Integer(n) if *n > 0 => Duration::from_millis(*n as u64),
                toml::Value::String(s) => parse_duration(s)?,
                _ => {
                    return Err("barrier.interval must be milliseconds or a duration string".into())
                }
            };
        }
        if let Some(x) = lookup(&v, "serving.read-after-write") {
            cfg.read_after_write = x
                .as_bool()
                .ok_or("serving.read-after-write must be true or false")?;
        }
        for (key, _) in crate::settings::JOB_KEYS
            .iter()
            .chain(crate::settings::SERVER_KEYS)
        {
            let Some(x) = lookup(&v, key) else { continue };
            let text = match x {
                toml::Value::String(s) => s.clone(),
                toml::Value::Integer(n) => n.to_string(),
                toml::Value::Float(f) => f.to_string(),
                toml::Value::Boolean(b) => b.to_string(),
                _ => return Err(format!("{key} must be a string, number or boolean")),
            };
            crate::settings::validate(key, &text)?;
            cfg.settings.insert(key.to_string(), text);
        }
        if let Some(p) = cfg.file_value("metrics.reporter.prom.port") {
            cfg.metrics_port = p
                .parse()
                .map_err(|_| "invalid metrics.reporter.prom.port")?;
        }
        if let Some(p) = cfg.file_value("rest.port") {
            cfg.web_port = p.parse().map_err(|_| "invalid rest.port")?;
        }
        if cfg.parallelism > cfg.max_parallelism {
            return Err("parallelism.default cannot exceed pipeline.max-parallelism".into());
        }
        Ok(cfg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_overrides_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("weir.toml");
        std::fs::write(
            &p,
            "listen = \"127.0.0.1:7000\"\n[parallelism]\ndefault = 3\n[barrier]\ninterval = \"250ms\"\n",
        )
        .unwrap();
        let c = Config::load(Some(&p)).unwrap();
        assert_eq!(c.listen, "127.0.0.1:7000");
        assert_eq!(c.parallelism, 3);
        assert_eq!(c.barrier_interval, Duration::from_millis(250));
    }

    #[test]
    fn remote_listen_needs_password_or_opt_in() {
        let mut c = Config {
            listen: "0.0.0.0:6543".into(),
            ..Config::default()
        };
        let e = c.check_listen_safety().unwrap_err();
        assert!(e.contains("auth.allow-unauthenticated-remote"), "{e}");
        c.allow_unauthenticated_remote = true;
        assert!(c.check_listen_safety().is_ok());
        c.allow_unauthenticated_remote = false;
        c.password = Some("secret".into());
        assert!(c.check_listen_safety().is_ok());
        c.password = None;
        for local in ["127.0.0.1:6543", "[::1]:6543", "localhost:6543"] {
            c.listen = local.into();
            assert!(c.check_listen_safety().is_ok(), "{local}");
        }
    }

    #[test]
    fn tls_and_auth_keys() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("weir.toml");
        std::fs::write(
            &p,
            "[auth]\nallow-unauthenticated-remote = true\n[tls]\ncert-file = \"c.pem\"\nkey-file = \"k.pem\"\n",
        )
        .unwrap();
        let c = Config::load(Some(&p)).unwrap();
        assert!(c.allow_unauthenticated_remote);
        assert_eq!(
            c.tls_files().unwrap(),
            Some((Path::new("c.pem"), Path::new("k.pem")))
        );
        std::fs::write(&p, "[tls]\ncert-file = \"c.pem\"\n").unwrap();
        assert!(Config::load(Some(&p)).unwrap().tls_files().is_err());
    }

    #[test]
    fn bad_values_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("weir.toml");
        std::fs::write(&p, "[parallelism]\ndefault = 0\n").unwrap();
        assert!(Config::load(Some(&p)).is_err());
        assert!(parse_duration("5 parsecs").is_err());
    }
}
