//! The Postgres wire front end (pgwire): authentication, the simple and extended query
//! protocols, and encoding of results.
//!
//! - [`auth`]: trust, or SCRAM-SHA-256 when a password is configured.
//! - [`handler`]: one `Connection` per client: statement execution and responses.
//! - [`copy`]: the COPY sub-protocol (CopyIn data collected, CopyOut sent).
//! - [`params`]: extended-protocol parameter types and binding.
//! - [`portal`]: Describe/Execute responses as drivers expect them (NoData, row limits).
//! - [`encode`]: Arrow values to Postgres types and wire formats.
//! - [`framing`]: bounds-checked validation of every frontend message (08P01 on
//!   malformed input, never a panic in pgwire's decoder).
//! - [`standby`]: sessions on a high-availability standby (read-only, SHOW CLUSTER).
//! - [`socket`]: one client socket: SSL negotiation and the message loop.
//! - [`tls`]: the rustls acceptor from PEM files.

pub mod auth;
pub mod copy;
pub mod encode;
pub mod framing;
pub mod handler;
pub mod params;
pub mod portal;
pub mod socket;
pub mod standby;
pub mod tls;
