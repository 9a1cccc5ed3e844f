//! Configuration: built-in defaults < `weir.toml` < command-line flags.
//!
//! Keys use Flink's names where Flink has one (`parallelism.default`,
//! `pipeline.max-parallelism`); Weir's own keys are `listen`, `data-dir`,
//! `auth.password` and `barrier.interval` (milliseconds, or a string like "500ms"/"1s").

use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct Config {
    pub listen: String,
    pub data_dir: PathBuf,
    /// When set, clients must authenticate with SCRAM-SHA-256 using this password.
    pub password: Option<String>,
    pub parallelism: u32,
    pub max_parallelism: u32,
    pub barrier_interval: Duration,
}

impl Default for Config {
    fn default() -> Self {
        let rt = weir_executor::RuntimeConfig::default();
        Self {
            listen: "127.0.0.1:6543".into(),
            data_dir: PathBuf::from("./weir-data"),
            password: None,
            parallelism: rt.parallelism,
            max_parallelism: rt.max_parallelism,
            barrier_interval: rt.barrier_interval,
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
        "min" | "m" | "minute" | "minutes" => n * 60_000.0,
        other => return Err(format!("invalid duration unit: {other}")),
    };
    Ok(Duration::from_micros((ms * 1000.0) as u64))
}

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
        if let Some(x) = lookup(&v, "listen").and_then(|x| x.as_str()) {
            cfg.listen = x.to_string();
        }
        if let Some(x) = lookup(&v, "data-dir").and_then(|x| x.as_str()) {
            cfg.data_dir = PathBuf::from(x);
        }
        if let Some(x) = lookup(&v, "auth.password").and_then(|x| x.as_str()) {
            cfg.password = Some(x.to_string());
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
    fn bad_values_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("weir.toml");
        std::fs::write(&p, "[parallelism]\ndefault = 0\n").unwrap();
        assert!(Config::load(Some(&p)).is_err());
        assert!(parse_duration("5 parsecs").is_err());
    }
}
