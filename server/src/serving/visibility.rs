//! What a read waits for before it reads the committed epoch.
//!
//! - **Read-your-writes** (always): a session's read sees its own acknowledged writes;
//!   it waits for the barrier covering its last write, injecting one if none is on
//!   its way.
//! - **Read-after-write** (`SET read_after_write = on`, or `[serving]
//!   read-after-write` in `weir.toml` for every session): a read sees every write
//!   acknowledged anywhere before it started. Readers waiting at once share one
//!   barrier (`Runtime::ensure_committed` injects only when none covers the epoch).

use crate::database::Database;
use crate::session::Session;
use weir_planner::{SqlError, SqlResult};

/// The session variable.
pub const READ_AFTER_WRITE: &str = "read_after_write";

/// `on`/`off` as Postgres spells booleans in SET.
pub fn parse_bool(v: &str) -> Option<bool> {
    match v.trim_matches('\'').to_ascii_lowercase().as_str() {
        "on" | "true" | "yes" | "1" | "t" => Some(true),
        "off" | "false" | "no" | "0" | "f" => Some(false),
        _ => None,
    }
}

pub fn read_after_write(db: &Database, session: &Session) -> bool {
    session
        .settings
        .get(READ_AFTER_WRITE)
        .and_then(|v| parse_bool(v))
        .unwrap_or(db.config.read_after_write)
}

/// Waits until what this session must see is committed.
pub async fn wait_visible(db: &Database, session: &mut Session) -> SqlResult<()> {
    let rt = db.runtime();
    session.reads_own_writes = std::mem::take(&mut session.wrote_since_read);
    rt.ensure_committed(session.last_write_epoch)
        .await
        .map_err(SqlError::from)?;
    if read_after_write(db, session) {
        rt.ensure_acknowledged_visible()
            .await
            .map_err(SqlError::from)?;
    }
    Ok(())
}
