//! Per-connection state.

use std::collections::BTreeMap;
use weir_executor::Epoch;

#[derive(Debug, Default)]
pub struct Session {
    /// Epoch of this session's latest acknowledged write: its reads wait for it
    /// (read-your-writes).
    pub last_write_epoch: Epoch,
    /// This session's last read followed a write of its own (it reads what it
    /// wrote, as an application updating then showing a row does): its writes then
    /// start their barrier at once (`Runtime::hasten_visibility`). A session that
    /// only writes (a loader) leaves barriers to the interval.
    pub reads_own_writes: bool,
    /// A write since this session's last read.
    pub wrote_since_read: bool,
    /// `SET` variables of this session.
    pub settings: BTreeMap<String, String>,
    /// NOTICE messages the last statements raised, sent ahead of their results.
    pub notices: Vec<String>,
    /// Inside `BEGIN` ... `COMMIT`: the transaction savepoints, each with the session's
    /// write count when it was set (see `statements::transaction`).
    pub transaction: Option<Vec<(String, u64)>>,
    /// Write statements (INSERT / UPDATE / DELETE) this session has run.
    pub writes: u64,
    /// Prepared statements that `DEALLOCATE` / `DISCARD ALL` released: the wire
    /// layer, which keeps the prepared statements, removes them after the statement.
    pub released: Vec<Released>,
    /// Names of the prepared statements the client created (Parse with a name).
    pub prepared: std::collections::BTreeSet<String>,
    /// The startup packet's `options` were applied (see `pg::handler`).
    pub started: bool,
    /// A `COPY ... FROM STDIN` waiting for its data (see `statements::copy`).
    pub copy_in: Option<crate::statements::copy::CopyIn>,
}

/// What `DEALLOCATE` released (see [`Session::released`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Released {
    All,
    Named(String),
}

impl Session {
    /// Parallelism for views this session creates: `SET parallelism.default = n`
    /// (or RisingWave's `streaming_parallelism`) overrides the server's default.
    pub fn parallelism(&self) -> Option<u32> {
        self.settings
            .get("parallelism.default")
            .or_else(|| self.settings.get("streaming_parallelism"))
            .and_then(|v| v.trim_matches('\'').parse().ok())
            .filter(|p| *p >= 1)
    }
}
