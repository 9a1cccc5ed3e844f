//! Malformed wire sessions: a seeded generator of raw-socket sessions (a valid
//! startup, some valid simple and extended messages, then one corrupted message)
//! against a real server.
//!
//! Every corrupted session must end with `ErrorResponse` FATAL 08P01 and the server
//! closing the connection, except a message whose declared length is longer than
//! what was sent: there the server must wait for the rest (no error, connection open)
//! until the test closes the socket. The server log must show no panic, and the
//! server must still answer `SELECT 1` afterwards.
//!
//! A second test corrupts the SASLInitialResponse of a password-protected server.
//!
//! `WEIR_MALFORMED_SEED` replays a run (the seed is printed); `WEIR_MALFORMED_SESSIONS`
//! changes the number of sessions (2,000 by default).

mod raw_wire;

use futures::StreamExt;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use raw_wire::*;
use std::collections::BTreeMap;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use weir_sql_tests::WeirProcess;

fn startup(rng: &mut StdRng) -> Vec<u8> {
    let mut params = vec![("user", "weir")];
    if rng.random_bool(0.5) {
        params.push(("database", "weir"));
    }
    if rng.random_bool(0.3) {
        params.push(("application_name", "malformed"));
    }
    startup_with(&params)
}

/// Valid messages a driver would send; the connection stays usable after them.
fn valid_messages(rng: &mut StdRng, n: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for i in 0..n {
        match rng.random_range(0..4) {
            0 => out.extend(query("SELECT 1")),
            1 => {
                let name = format!("s{i}");
                out.extend(typed(b'P', &parse_body(&name, "SELECT $1::int + 1", &[23])));
                let one = 41i32.to_be_bytes();
                out.extend(typed(
                    b'B',
                    &bind_body("", &name, &[1], &[Some(&one)], &[1]),
                ));
                out.extend(typed(b'D', &describe_body(b'P', "")));
                out.extend(typed(b'E', &execute_body("", 0)));
                out.extend(typed(b'S', &[]));
            }
            2 => {
                out.extend(typed(
                    b'P',
                    &parse_body("", "INSERT INTO t VALUES ($1, $2)", &[]),
                ));
                out.extend(typed(
                    b'B',
                    &bind_body("", "", &[], &[Some(b"7"), Some(b"x")], &[]),
                ));
                out.extend(typed(b'E', &execute_body("", 0)));
                out.extend(typed(b'S', &[]));
            }
            _ => out.extend(typed(b'H', &[])),
        }
    }
    out
}

/// The ways a message is corrupted; `Longer` is the one the server must wait on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Corruption {
    /// Declared length shorter than the body (the frame cuts the body short).
    ShorterLength,
    /// Declared length below 4 or negative.
    TinyLength,
    /// Declared length above the message type's limit.
    HugeLength,
    /// Body cut short, length matching the cut body.
    Truncated,
    /// Bytes after the last field.
    Trailing,
    /// Bind with parameter formats neither 0, 1 nor the parameter count.
    FormatCountMismatch,
    /// Bind whose parameter length runs past the message.
    ParamTooLong,
    /// Bind with a parameter length below -1.
    NegativeParamLength,
    /// Bind with a format code other than 0 or 1.
    BadFormatCode,
    /// Parse declaring more parameter types than it carries.
    TypeCountTooHigh,
    /// Describe or Close of something that is neither 'S' nor 'P'.
    BadTarget,
    /// A type byte no frontend message has.
    UnknownType,
    /// A startup packet with a bad length, protocol or layout.
    BadStartup,
    /// Declared length longer than what is sent: the server waits.
    Longer,
}

const CORRUPTIONS: [Corruption; 14] = [
    Corruption::ShorterLength,
    Corruption::TinyLength,
    Corruption::HugeLength,
    Corruption::Truncated,
    Corruption::Trailing,
    Corruption::FormatCountMismatch,
    Corruption::ParamTooLong,
    Corruption::NegativeParamLength,
    Corruption::BadFormatCode,
    Corruption::TypeCountTooHigh,
    Corruption::BadTarget,
    Corruption::UnknownType,
    Corruption::BadStartup,
    Corruption::Longer,
];

/// A well-formed message of a structured type, to be corrupted.
fn victim(rng: &mut StdRng) -> (u8, Vec<u8>) {
    match rng.random_range(0..6) {
        0 => (
            b'B',
            bind_body("", "", &[0], &[Some(b"12"), None, Some(b"abc")], &[1, 0, 1]),
        ),
        1 => (b'E', execute_body("", rng.random_range(0..100))),
        2 => (b'P', parse_body("q", "SELECT $1::text", &[25])),
        3 => (b'D', describe_body(b'S', "q")),
        4 => (b'C', describe_body(b'P', "")),
        _ => {
            let mut b = Vec::new();
            cstr(&mut b, "SELECT 2");
            (b'Q', b)
        }
    }
}

fn with_length(kind: u8, len: i32, body: &[u8]) -> Vec<u8> {
    let mut m = vec![kind];
    m.extend_from_slice(&len.to_be_bytes());
    m.extend_from_slice(body);
    m
}

/// The corrupted bytes (sent after the valid prefix).
fn corrupt(rng: &mut StdRng, c: Corruption) -> Vec<u8> {
    let (kind, body) = victim(rng);
    match c {
        Corruption::ShorterLength => {
            let cut = rng.random_range(1..=body.len());
            with_length(kind, (4 + body.len() - cut) as i32, &body)
        }
        Corruption::TinyLength => {
            let len = [-1, 0, 3, i32::MIN, -5][rng.random_range(0..5)];
            with_length(kind, len, &body)
        }
        Corruption::HugeLength => {
            let len = if matches!(kind, b'B' | b'P' | b'Q') {
                0x4000_0000
            } else {
                rng.random_range(10_001..1_000_000)
            };
            with_length(kind, len, &body)
        }
        Corruption::Truncated => {
            let keep = rng.random_range(0..body.len());
            typed(kind, &body[..keep])
        }
        Corruption::Trailing => {
            let mut b = body;
            b.extend((0..rng.random_range(1..8)).map(|_| rng.random::<u8>()));
            typed(kind, &b)
        }
        Corruption::FormatCountMismatch => typed(
            b'B',
            &bind_body("", "", &[0, 1], &[Some(b"1"), Some(b"2"), Some(b"3")], &[]),
        ),
        Corruption::ParamTooLong => {
            let mut b = Vec::new();
            cstr(&mut b, "");
            cstr(&mut b, "");
            b.extend_from_slice(&0u16.to_be_bytes());
            b.extend_from_slice(&1u16.to_be_bytes());
            let claimed: i32 = [100, 0x7fff_ffff, 9][rng.random_range(0..3)];
            b.extend_from_slice(&claimed.to_be_bytes());
            b.extend_from_slice(b"abcd");
            typed(b'B', &b)
        }
        Corruption::NegativeParamLength => {
            let mut b = Vec::new();
            cstr(&mut b, "");
            cstr(&mut b, "");
            b.extend_from_slice(&0u16.to_be_bytes());
            b.extend_from_slice(&1u16.to_be_bytes());
            b.extend_from_slice(&(-rng.random_range(2..1000i32)).to_be_bytes());
            b.extend_from_slice(&0u16.to_be_bytes());
            typed(b'B', &b)
        }
        Corruption::BadFormatCode => typed(
            b'B',
            &bind_body("", "", &[rng.random_range(2..100)], &[Some(b"1")], &[]),
        ),
        Corruption::TypeCountTooHigh => {
            let mut b = parse_body("", "SELECT $1, $2", &[23]);
            let at = b.len() - 4 - 2;
            b[at..at + 2].copy_from_slice(&rng.random_range(2..500u16).to_be_bytes());
            typed(b'P', &b)
        }
        Corruption::BadTarget => {
            let target = loop {
                let t = rng.random::<u8>();
                if t != b'S' && t != b'P' {
                    break t;
                }
            };
            typed(
                [b'D', b'C'][rng.random_range(0..2)],
                &describe_body(target, "x"),
            )
        }
        Corruption::UnknownType => {
            let kind = loop {
                let t = rng.random::<u8>();
                if !b"QPBEDCHSXcdfp".contains(&t) {
                    break t;
                }
            };
            typed(kind, &body)
        }
        Corruption::BadStartup => unreachable!("sent in place of the startup packet"),
        Corruption::Longer => {
            let missing = rng.random_range(1..1000);
            let sent = rng.random_range(0..=body.len());
            with_length(kind, (4 + body.len() + missing) as i32, &body[..sent])
        }
    }
}

fn bad_startup(rng: &mut StdRng) -> Vec<u8> {
    let good = startup(rng);
    match rng.random_range(0..4) {
        0 => [0, 0, 0, rng.random_range(0..8u8)].to_vec(),
        1 => {
            let mut m = 20_000i32.to_be_bytes().to_vec();
            m.extend_from_slice(&good[4..]);
            m
        }
        2 => {
            // Protocol 2.0 (or garbage) instead of 3.x.
            let mut m = good.clone();
            m[4..8].copy_from_slice(&[0, rng.random_range(4..200), 0, 0]);
            m
        }
        _ => {
            // No terminator after the last pair.
            let mut body = good[4..good.len() - 1].to_vec();
            body.push(b'x');
            let mut m = ((body.len() + 4) as i32).to_be_bytes().to_vec();
            m.extend_from_slice(&body);
            m
        }
    }
}

/// Runs one session; `Err` describes how it broke the expectation.
async fn run_session(port: u16, seed: u64, id: u64) -> Result<Corruption, String> {
    let mut rng = StdRng::seed_from_u64(seed ^ id.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let corruption = CORRUPTIONS[rng.random_range(0..CORRUPTIONS.len())];
    let mut s = TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let mut bytes = Vec::new();
    if corruption == Corruption::BadStartup {
        bytes = bad_startup(&mut rng);
    } else {
        s.write_all(&startup(&mut rng))
            .await
            .map_err(|e| e.to_string())?;
        let (msgs, _) = read_messages(&mut s, 1).await;
        if msgs.last().map(|m| m.0) != Some(b'Z') {
            return Err(format!("startup not answered with ReadyForQuery: {msgs:?}"));
        }
        let n = rng.random_range(0..4);
        bytes.extend(valid_messages(&mut rng, n));
        bytes.extend(corrupt(&mut rng, corruption));
        if corruption != Corruption::Longer && rng.random_bool(0.3) {
            // Whatever follows a bad message must not be read.
            bytes.extend(query("SELECT 3"));
        }
    }
    // The server may close early, while bytes are still being written.
    let _ = s.write_all(&bytes).await;
    let (msgs, end) = read_messages(&mut s, 0).await;
    let errors: Vec<_> = msgs
        .iter()
        .filter(|m| m.0 == b'E')
        .map(|m| error_fields(&m.1))
        .collect();
    let protocol_error = errors
        .iter()
        .any(|f| f.get(&b'C').map(String::as_str) == Some("08P01"));
    let outcome = match corruption {
        Corruption::Longer if !protocol_error && end == End::Waiting => Ok(corruption),
        Corruption::Longer => Err("server did not wait for the rest of the message".into()),
        _ if protocol_error && end == End::Closed => {
            let last = errors.last().unwrap();
            if last.get(&b'S').map(String::as_str) != Some("FATAL") {
                Err(format!("08P01 not FATAL: {last:?}"))
            } else {
                Ok(corruption)
            }
        }
        _ => Err(format!(
            "expected FATAL 08P01 and a closed connection, got {end:?} with errors {errors:?}"
        )),
    };
    outcome.map_err(|e| format!("session {id} ({corruption:?}): {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn malformed_sessions_are_protocol_errors() {
    let seed: u64 = std::env::var("WEIR_MALFORMED_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    let sessions: u64 = std::env::var("WEIR_MALFORMED_SESSIONS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2_000);
    println!("malformed wire sessions: seed {seed} (WEIR_MALFORMED_SEED={seed} replays), {sessions} sessions");
    let dir = tempfile::tempdir().unwrap();
    let server = WeirProcess::start(&dir.path().join("data"), 1).await;
    server
        .connect()
        .await
        .batch_execute("CREATE TABLE t (a int, b text)")
        .await
        .unwrap();

    let port = server.port;
    let results: Vec<_> = futures::stream::iter(0..sessions)
        .map(|id| run_session(port, seed, id))
        .buffer_unordered(32)
        .collect()
        .await;
    let mut by_kind: BTreeMap<Corruption, usize> = BTreeMap::new();
    let mut failures = Vec::new();
    for r in results {
        match r {
            Ok(c) => *by_kind.entry(c).or_default() += 1,
            Err(e) => failures.push(e),
        }
    }
    let log = server.log();
    let panics = log.matches("panicked at").count();
    println!("sessions by corruption: {by_kind:?}; failed expectations: {}; panics in server log: {panics}", failures.len());
    assert_eq!(panics, 0, "the server panicked (seed {seed}):\n{log}");
    assert!(
        failures.is_empty(),
        "seed {seed}: {} of {sessions} sessions broke expectations, e.g.:\n{}",
        failures.len(),
        failures
            .iter()
            .take(10)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    // Every kind was exercised.
    assert_eq!(by_kind.len(), CORRUPTIONS.len(), "{by_kind:?}");
    let client = server.connect().await;
    let one: i64 = client.query_one("SELECT 1", &[]).await.unwrap().get(0);
    assert_eq!(one, 1);
}

/// With a password configured, the SASLInitialResponse is checked too: a data length
/// running past the message is a protocol error, and correct clients still log in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_sasl_response_is_a_protocol_error() {
    let dir = tempfile::tempdir().unwrap();
    let server =
        WeirProcess::start_with_config(&dir.path().join("data"), 1, "[auth]\npassword = \"pw\"\n")
            .await;
    let mut s = TcpStream::connect(("127.0.0.1", server.port))
        .await
        .unwrap();
    s.write_all(&startup_with(&[("user", "weir")]))
        .await
        .unwrap();
    let (msgs, end) = read_messages(&mut s, 0).await;
    assert_eq!(end, End::Waiting, "{msgs:?}");
    assert_eq!(msgs.first().map(|m| m.0), Some(b'R'), "{msgs:?}");
    let mut body = Vec::new();
    cstr(&mut body, "SCRAM-SHA-256");
    body.extend_from_slice(&500i32.to_be_bytes());
    body.extend_from_slice(b"n,,n=,r=abc");
    s.write_all(&typed(b'p', &body)).await.unwrap();
    let (msgs, end) = read_messages(&mut s, 0).await;
    assert_eq!(end, End::Closed, "{msgs:?}");
    let error = error_fields(&msgs.last().expect("an error").1);
    assert_eq!(error[&b'C'], "08P01", "{error:?}");
    assert_eq!(error[&b'S'], "FATAL", "{error:?}");

    let (client, conn) = tokio_postgres::connect(
        &format!(
            "host=127.0.0.1 port={} user=weir dbname=weir password=pw",
            server.port
        ),
        tokio_postgres::NoTls,
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    let one: i64 = client.query_one("SELECT 1", &[]).await.unwrap().get(0);
    assert_eq!(one, 1);
    assert!(!server.log().contains("panicked at"), "{}", server.log());
}
