//! Source positions in table-log entries: a table fed by a connector (Kafka) logs, in
//! the same fsynced entry as the rows, where the connector stands after them (per
//! partition, the next offset to read). Rows and positions are therefore durable
//! together: after a crash the table resumes exactly after its last logged entry, with
//! no duplicate and no gap, without relying on the broker's consumer-group commits.
//!
//! Payload of such an entry: `WSP1 | json length: u32 LE | json | change batch`. Entries
//! written by SQL statements have no prefix (they start with an Arrow IPC stream).

use crate::{Result, StorageError};
use std::collections::BTreeMap;

const MAGIC: &[u8; 4] = b"WSP1";

/// Connector positions: key (e.g. `kafka:orders:3` for partition 3) -> next offset.
pub type SourcePositions = BTreeMap<String, u64>;

/// Prefixes a change batch's bytes with the connector's positions after it.
pub fn encode(positions: &SourcePositions, changes: &[u8]) -> Result<Vec<u8>> {
    let json = serde_json::to_vec(positions)?;
    let mut out = Vec::with_capacity(8 + json.len() + changes.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(json.len() as u32).to_le_bytes());
    out.extend_from_slice(&json);
    out.extend_from_slice(changes);
    Ok(out)
}

/// Splits a log payload into its positions (if any) and the change batch bytes.
pub fn split(payload: &[u8]) -> Result<(Option<SourcePositions>, &[u8])> {
    if payload.len() < 8 || &payload[..4] != MAGIC {
        return Ok((None, payload));
    }
    let len = u32::from_le_bytes(payload[4..8].try_into().expect("4 bytes")) as usize;
    let end = 8 + len;
    if payload.len() < end {
        return Err(StorageError::Corrupt(
            "table-log entry: source positions cut short".into(),
        ));
    }
    let positions = serde_json::from_slice(&payload[8..end])?;
    Ok((Some(positions), &payload[end..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_plain_entries_pass_through() {
        let p = SourcePositions::from([("kafka:t:0".to_string(), 42), ("kafka:t:1".into(), 7)]);
        let bytes = encode(&p, b"\xff\xff\xff\xffrest").unwrap();
        let (got, rest) = split(&bytes).unwrap();
        assert_eq!(got, Some(p));
        assert_eq!(rest, b"\xff\xff\xff\xffrest");
        let (none, same) = split(b"\xff\xff\xff\xffipc").unwrap();
        assert!(none.is_none());
        assert_eq!(same, b"\xff\xff\xff\xffipc");
        assert!(split(b"WSP1\x10\x00\x00\x00{}").is_err());
    }
}
