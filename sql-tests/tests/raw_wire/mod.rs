//! Raw Postgres wire messages for tests that need exact control of the bytes a
//! client sends and exact sight of what the server answers (shared by
//! malformed_wire.rs and wire_protocol.rs).

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long the server may stay silent before a read counts as "waiting".
pub const WAIT: Duration = Duration::from_millis(300);

pub fn typed(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut m = vec![kind];
    m.extend_from_slice(&((body.len() + 4) as i32).to_be_bytes());
    m.extend_from_slice(body);
    m
}

pub fn cstr(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(s.as_bytes());
    out.push(0);
}

/// A protocol 3.0 StartupMessage with these parameters.
pub fn startup_with(params: &[(&str, &str)]) -> Vec<u8> {
    let mut body = 196608i32.to_be_bytes().to_vec();
    for (k, v) in params {
        cstr(&mut body, k);
        cstr(&mut body, v);
    }
    body.push(0);
    let mut m = ((body.len() + 4) as i32).to_be_bytes().to_vec();
    m.extend_from_slice(&body);
    m
}

pub fn query(sql: &str) -> Vec<u8> {
    let mut b = Vec::new();
    cstr(&mut b, sql);
    typed(b'Q', &b)
}

pub fn parse_body(name: &str, sql: &str, types: &[i32]) -> Vec<u8> {
    let mut b = Vec::new();
    cstr(&mut b, name);
    cstr(&mut b, sql);
    b.extend_from_slice(&(types.len() as u16).to_be_bytes());
    for t in types {
        b.extend_from_slice(&t.to_be_bytes());
    }
    b
}

pub fn parse(name: &str, sql: &str, types: &[i32]) -> Vec<u8> {
    typed(b'P', &parse_body(name, sql, types))
}

/// A Bind body with explicit counts (they may disagree with the lists on purpose).
pub fn bind_body(
    portal: &str,
    stmt: &str,
    formats: &[i16],
    params: &[Option<&[u8]>],
    results: &[i16],
) -> Vec<u8> {
    let mut b = Vec::new();
    cstr(&mut b, portal);
    cstr(&mut b, stmt);
    b.extend_from_slice(&(formats.len() as u16).to_be_bytes());
    for f in formats {
        b.extend_from_slice(&f.to_be_bytes());
    }
    b.extend_from_slice(&(params.len() as u16).to_be_bytes());
    for p in params {
        match p {
            None => b.extend_from_slice(&(-1i32).to_be_bytes()),
            Some(v) => {
                b.extend_from_slice(&(v.len() as i32).to_be_bytes());
                b.extend_from_slice(v);
            }
        }
    }
    b.extend_from_slice(&(results.len() as u16).to_be_bytes());
    for r in results {
        b.extend_from_slice(&r.to_be_bytes());
    }
    b
}

pub fn bind(portal: &str, stmt: &str, params: &[Option<&[u8]>], results: &[i16]) -> Vec<u8> {
    typed(b'B', &bind_body(portal, stmt, &[], params, results))
}

pub fn execute_body(portal: &str, max_rows: i32) -> Vec<u8> {
    let mut b = Vec::new();
    cstr(&mut b, portal);
    b.extend_from_slice(&max_rows.to_be_bytes());
    b
}

pub fn execute(portal: &str, max_rows: i32) -> Vec<u8> {
    typed(b'E', &execute_body(portal, max_rows))
}

pub fn describe_body(target: u8, name: &str) -> Vec<u8> {
    let mut b = vec![target];
    cstr(&mut b, name);
    b
}

pub fn describe(target: u8, name: &str) -> Vec<u8> {
    typed(b'D', &describe_body(target, name))
}

pub fn sync() -> Vec<u8> {
    typed(b'S', &[])
}

/// A backend message: type byte and body.
pub type Message = (u8, Vec<u8>);

/// How reading ended.
#[derive(Debug, PartialEq, Eq)]
pub enum End {
    Closed,
    Waiting,
    Ready,
}

/// Reads backend messages until the server closes the connection, stays silent for
/// [`WAIT`], or (with `until_ready`) sends the `until_ready`-th ReadyForQuery.
pub async fn read_messages(s: &mut TcpStream, until_ready: usize) -> (Vec<Message>, End) {
    let mut buf = Vec::new();
    let mut messages = Vec::new();
    let mut ready = 0;
    loop {
        while buf.len() >= 5 {
            let len = i32::from_be_bytes(buf[1..5].try_into().unwrap()) as usize;
            if buf.len() < 1 + len {
                break;
            }
            let body = buf[5..1 + len].to_vec();
            let kind = buf[0];
            buf.drain(..1 + len);
            messages.push((kind, body));
            if kind == b'Z' {
                ready += 1;
                if ready == until_ready {
                    return (messages, End::Ready);
                }
            }
        }
        let mut chunk = [0u8; 4096];
        match tokio::time::timeout(WAIT, s.read(&mut chunk)).await {
            Err(_) => return (messages, End::Waiting),
            Ok(Ok(0)) | Ok(Err(_)) => return (messages, End::Closed),
            Ok(Ok(n)) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// Fields of an ErrorResponse body by their code ('S' severity, 'C' SQLSTATE, 'M').
pub fn error_fields(body: &[u8]) -> BTreeMap<u8, String> {
    let mut fields = BTreeMap::new();
    let mut rest = body;
    while let Some((&code, tail)) = rest.split_first() {
        if code == 0 {
            break;
        }
        let end = tail.iter().position(|&b| b == 0).unwrap_or(tail.len());
        fields.insert(code, String::from_utf8_lossy(&tail[..end]).into_owned());
        rest = &tail[(end + 1).min(tail.len())..];
    }
    fields
}

/// A CommandComplete body as text ("INSERT 0 1").
pub fn tag(body: &[u8]) -> String {
    String::from_utf8_lossy(body.strip_suffix(&[0]).unwrap_or(body)).into_owned()
}

/// A session past startup (trust authentication), ready for queries.
pub async fn connect(port: u16) -> TcpStream {
    let mut s = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    s.write_all(&startup_with(&[("user", "weir"), ("database", "weir")]))
        .await
        .unwrap();
    let (msgs, end) = read_messages(&mut s, 1).await;
    assert_eq!(end, End::Ready, "startup: {msgs:?}");
    s
}

/// Sends `bytes` and reads until `readies` ReadyForQuery messages arrived.
pub async fn exchange(s: &mut TcpStream, bytes: &[u8], readies: usize) -> Vec<Message> {
    s.write_all(bytes).await.unwrap();
    let (msgs, end) = read_messages(s, readies).await;
    assert_eq!(end, End::Ready, "no ReadyForQuery; got {msgs:?}");
    msgs
}

/// The message type bytes of `msgs` as a string ("1tnZ").
pub fn kinds(msgs: &[Message]) -> String {
    msgs.iter().map(|m| m.0 as char).collect()
}
