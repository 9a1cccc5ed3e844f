//! High availability (`high-availability.*`): the settings of a cluster of Weir
//! processes that share one storage directory and elect a leader through
//! `weir_storage::leader_lease`.
//!
//! Keys (Flink's names where they fit):
//! - `high-availability.type = none` (default: one process, today's embedded
//!   behaviour) `| object-store`;
//! - `high-availability.storageDir`: `s3://bucket/prefix` (conditional replaces need an
//!   S3-compatible store: a local folder cannot hold the lease);
//! - `high-availability.cluster-id` (default `default`): members with the same id and
//!   storage directory elect one leader;
//! - `high-availability.leader-election.lease-duration` (15 s), `renew-deadline`
//!   (15 s, at most the lease duration), `retry-period` (5 s, less than the deadline).
//!
//! The member's life (election, standby, takeover) is in [`crate::member`].

use crate::config::Config;
use weir_storage::leader_lease::LeaseTimings;

/// `high-availability.*` resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HaConfig {
    pub storage_dir: String,
    pub cluster_id: String,
    pub timings: LeaseTimings,
}

const TYPE: &str = "high-availability.type";
const STORAGE_DIR: &str = "high-availability.storageDir";
const CLUSTER_ID: &str = "high-availability.cluster-id";
const LEASE_DURATION: &str = "high-availability.leader-election.lease-duration";
const RENEW_DEADLINE: &str = "high-availability.leader-election.renew-deadline";
const RETRY_PERIOD: &str = "high-availability.leader-election.retry-period";

/// Checks one key's value on its own (the checks between keys are in [`ha_config`]).
pub fn validate(key: &str, value: &str) -> Result<(), String> {
    match key {
        TYPE => match value.trim().to_ascii_lowercase().as_str() {
            "none" | "object-store" => Ok(()),
            _ => Err(format!(
                "invalid value for {TYPE}: {value} (none or object-store)"
            )),
        },
        STORAGE_DIR if !value.is_empty() && !value.starts_with("s3://") => Err(format!(
            "{STORAGE_DIR} must be s3://bucket/prefix: the lease needs conditional writes, which a local folder does not have"
        )),
        CLUSTER_ID if value.is_empty() || value.contains('/') => Err(format!(
            "{CLUSTER_ID} must be a non-empty name without '/'"
        )),
        LEASE_DURATION | RENEW_DEADLINE | RETRY_PERIOD => {
            match crate::config::parse_duration(value) {
                Ok(d) if !d.is_zero() => Ok(()),
                _ => Err(format!("invalid duration for {key}: {value}")),
            }
        }
        _ => Ok(()),
    }
}

/// The cluster settings; `None` with `high-availability.type = none`.
pub fn ha_config(cfg: &Config) -> Result<Option<HaConfig>, String> {
    let get = |k: &str| {
        cfg.file_value(k)
            .map(str::to_string)
            .or_else(|| crate::settings::default_of(k).map(str::to_string))
            .unwrap_or_default()
    };
    if !get(TYPE).eq_ignore_ascii_case("object-store") {
        return Ok(None);
    }
    let storage_dir = get(STORAGE_DIR);
    if storage_dir.is_empty() {
        return Err(format!(
            "{TYPE} = object-store needs {STORAGE_DIR} = 's3://bucket/prefix'"
        ));
    }
    let duration = |k: &str| crate::config::parse_duration(&get(k));
    let timings = LeaseTimings {
        lease_duration: duration(LEASE_DURATION)?,
        renew_deadline: duration(RENEW_DEADLINE)?,
        retry_period: duration(RETRY_PERIOD)?,
    };
    // A leader must stop acknowledging before a standby may take over, and renew
    // (retry) more than once before its deadline.
    if timings.renew_deadline > timings.lease_duration {
        return Err(format!("{RENEW_DEADLINE} cannot exceed {LEASE_DURATION}"));
    }
    if timings.retry_period >= timings.renew_deadline {
        return Err(format!("{RETRY_PERIOD} must be less than {RENEW_DEADLINE}"));
    }
    Ok(Some(HaConfig {
        storage_dir,
        cluster_id: get(CLUSTER_ID),
        timings,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn config(lines: &str) -> Result<Config, String> {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("weir.toml");
        std::fs::write(&p, lines).unwrap();
        Config::load(Some(&p))
    }

    #[test]
    fn off_by_default_and_checked_when_on() {
        assert_eq!(ha_config(&config("").unwrap()).unwrap(), None);
        let on = config(
            "[high-availability]\ntype = \"object-store\"\nstorageDir = \"s3://b/ha\"\n\
             cluster-id = \"c1\"\n[high-availability.leader-election]\nlease-duration = \"6s\"\n\
             renew-deadline = \"4s\"\nretry-period = \"1s\"\n",
        )
        .unwrap();
        assert_eq!(
            ha_config(&on).unwrap(),
            Some(HaConfig {
                storage_dir: "s3://b/ha".into(),
                cluster_id: "c1".into(),
                timings: LeaseTimings {
                    lease_duration: Duration::from_secs(6),
                    renew_deadline: Duration::from_secs(4),
                    retry_period: Duration::from_secs(1),
                },
            })
        );
        let local =
            config("[high-availability]\ntype = \"object-store\"\nstorageDir = \"/tmp/ha\"\n");
        assert!(local.unwrap_err().contains("conditional writes"));
        let bad_type = config("[high-availability]\ntype = \"zookeeper\"\n");
        assert!(bad_type.unwrap_err().contains("none or object-store"));
        let no_dir = config("[high-availability]\ntype = \"object-store\"\n").unwrap();
        assert!(ha_config(&no_dir).unwrap_err().contains("storageDir"));
        let late = config(
            "[high-availability]\ntype = \"object-store\"\nstorageDir = \"s3://b\"\n\
             [high-availability.leader-election]\nrenew-deadline = \"20s\"\n",
        )
        .unwrap();
        assert!(ha_config(&late).unwrap_err().contains("cannot exceed"));
    }
}
