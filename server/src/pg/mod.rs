//! The Postgres wire front end (pgwire): authentication, the simple and extended query
//! protocols, and encoding of results.
//!
//! - [`auth`]: trust, or SCRAM-SHA-256 when a password is configured.
//! - [`handler`]: one `Connection` per client: statement execution and responses.
//! - [`copy`]: the COPY sub-protocol (CopyIn data collected, CopyOut sent).
//! - [`params`]: extended-protocol parameter types and binding.
//! - [`encode`]: Arrow values to Postgres types and wire formats.

pub mod auth;
pub mod copy;
pub mod encode;
pub mod handler;
pub mod params;
