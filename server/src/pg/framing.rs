//! Bounds-checked framing of frontend messages, in front of pgwire's decoder.
//!
//! pgwire decodes message bodies with unchecked reads (`get_i32`, `split_to`) from its
//! whole read buffer, so a message whose length or inner counts lie panics ("advance
//! out of bounds") or reads into the next message. [`ValidatedStream`] wraps the
//! connection's byte stream and hands the decoder only whole messages whose structure
//! it has checked field by field (every cstring terminated, every count and length
//! covered by the message, nothing left over). The first malformed message stops the
//! stream with a [`ProtocolViolation`]; the connection loop answers it with an
//! `ErrorResponse` (SQLSTATE 08P01, FATAL) and closes the connection, as Postgres does.
//!
//! A message whose declared length is longer than what has arrived is not an error:
//! like Postgres, the server waits for the rest (memory grows only with bytes that
//! actually arrive; the length limits below bound it).

use bytes::BytesMut;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Postgres's `MAX_STARTUP_PACKET_LENGTH`.
const MAX_STARTUP_LENGTH: usize = 10_000;
/// pgwire's (and Postgres's) limit for Query, Parse, Bind and CopyData.
const MAX_LARGE_LENGTH: usize = 0x3fff_fffe;
/// pgwire's (and Postgres's) limit for the other messages.
const MAX_SMALL_LENGTH: usize = 10_000;

pub const SSL_REQUEST_CODE: i32 = 80_877_103;
pub const GSSENC_REQUEST_CODE: i32 = 80_877_104;
const CANCEL_REQUEST_CODE: i32 = 80_877_102;

/// A frontend message that breaks the protocol; its text is the error message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtocolViolation(pub String);

impl std::fmt::Display for ProtocolViolation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ProtocolViolation {}

fn violation<T>(message: impl Into<String>) -> Result<T, ProtocolViolation> {
    Err(ProtocolViolation(message.into()))
}

/// Where the connection is in the protocol: which message form comes next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Untyped: a StartupMessage or CancelRequest (SSL/GSS negotiation is done).
    Startup,
    /// Typed messages; `sasl_initial` while the next 'p' must be a SASLInitialResponse.
    Typed { sasl_initial: bool },
}

/// What the start of a buffer holds.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame {
    /// A whole message of this many bytes (type byte and length included).
    Complete(usize),
    /// Not enough bytes yet.
    Incomplete,
}

/// The next frame's extent, checking the type byte and declared length.
pub fn next_frame(buf: &[u8], phase: Phase) -> Result<Frame, ProtocolViolation> {
    match phase {
        Phase::Startup => {
            let Some(len) = read_i32(buf, 0) else {
                return Ok(Frame::Incomplete);
            };
            if !(8..=MAX_STARTUP_LENGTH as i32).contains(&len) {
                return violation(format!("invalid length of startup packet: {len}"));
            }
            Ok(complete_if(buf, len as usize))
        }
        Phase::Typed { .. } => {
            let Some(&kind) = buf.first() else {
                return Ok(Frame::Incomplete);
            };
            let max = max_length(kind)?;
            let Some(len) = read_i32(buf, 1) else {
                return Ok(Frame::Incomplete);
            };
            if len < 4 || len as usize > max {
                return violation(format!(
                    "invalid message length {len} for message type \"{}\"",
                    kind as char
                ));
            }
            Ok(complete_if(buf, 1 + len as usize))
        }
    }
}

fn complete_if(buf: &[u8], total: usize) -> Frame {
    if buf.len() >= total {
        Frame::Complete(total)
    } else {
        Frame::Incomplete
    }
}

fn read_i32(buf: &[u8], at: usize) -> Option<i32> {
    let bytes = buf.get(at..at + 4)?;
    Some(i32::from_be_bytes(bytes.try_into().ok()?))
}

/// The length limit of a frontend message type; unknown types are violations.
fn max_length(kind: u8) -> Result<usize, ProtocolViolation> {
    match kind {
        b'Q' | b'P' | b'B' | b'd' => Ok(MAX_LARGE_LENGTH),
        b'E' | b'D' | b'C' | b'H' | b'S' | b'X' | b'c' | b'f' | b'p' => Ok(MAX_SMALL_LENGTH),
        other => violation(format!("invalid frontend message type {other}")),
    }
}

/// Checks one whole message (as framed by [`next_frame`]) and returns the phase after it.
pub fn validate(message: &[u8], phase: Phase) -> Result<Phase, ProtocolViolation> {
    match phase {
        Phase::Startup => validate_startup(&message[4..]),
        Phase::Typed { sasl_initial } => {
            let mut body = Reader::new(&message[5..]);
            let kind = message[0];
            let sasl_initial = match kind {
                b'p' if sasl_initial => {
                    body.cstring("SASL mechanism")?;
                    let len = body.i32("SASL data length")?;
                    if len != -1 {
                        body.bytes(len, "SASL data")?;
                    }
                    false
                }
                b'p' | b'd' => {
                    body.rest();
                    sasl_initial
                }
                _ => {
                    validate_typed_body(kind, &mut body)?;
                    sasl_initial
                }
            };
            body.end(kind)?;
            Ok(Phase::Typed { sasl_initial })
        }
    }
}

fn validate_startup(body: &[u8]) -> Result<Phase, ProtocolViolation> {
    let mut r = Reader::new(body);
    let code = r.i32("protocol version")?;
    if code == CANCEL_REQUEST_CODE {
        r.i32("process id")?;
        let key = r.rest();
        if !(4..=256).contains(&key) {
            return violation("invalid length of cancel request");
        }
        return Ok(Phase::Startup);
    }
    if code == SSL_REQUEST_CODE || code == GSSENC_REQUEST_CODE {
        return violation("SSL or GSS negotiation after the connection was negotiated");
    }
    let major = (code >> 16) as u16;
    if major != 3 {
        return violation(format!(
            "unsupported frontend protocol {}.{}: server supports 3.0 to 3.2",
            major,
            code & 0xffff
        ));
    }
    // name/value pairs, then one empty name.
    loop {
        if r.cstring("startup parameter name")?.is_empty() {
            break;
        }
        r.cstring("startup parameter value")?;
    }
    if r.remaining() != 0 {
        return violation("invalid startup packet layout: expected terminator as last byte");
    }
    Ok(Phase::Typed {
        sasl_initial: false,
    })
}

fn validate_typed_body(kind: u8, r: &mut Reader<'_>) -> Result<(), ProtocolViolation> {
    match kind {
        b'Q' | b'f' => {
            r.cstring("query string")?;
        }
        b'P' => {
            r.cstring("statement name")?;
            r.cstring("query string")?;
            let n = r.u16("parameter type count")?;
            for _ in 0..n {
                r.i32("parameter type")?;
            }
        }
        b'B' => validate_bind(r)?,
        b'E' => {
            r.cstring("portal name")?;
            r.i32("row limit")?;
        }
        b'D' | b'C' => {
            let target = r.u8("target type")?;
            if target != b'S' && target != b'P' {
                return violation(format!(
                    "invalid {} message subtype {target}",
                    if kind == b'D' { "DESCRIBE" } else { "CLOSE" }
                ));
            }
            r.cstring("name")?;
        }
        // Flush, Sync, Terminate and CopyDone have no body.
        _ => {}
    }
    Ok(())
}

fn validate_bind(r: &mut Reader<'_>) -> Result<(), ProtocolViolation> {
    r.cstring("portal name")?;
    r.cstring("statement name")?;
    let formats = r.u16("parameter format count")?;
    for _ in 0..formats {
        format_code(r)?;
    }
    let params = r.u16("parameter count")?;
    if formats > 1 && formats != params {
        return violation(format!(
            "bind message has {formats} parameter formats but {params} parameters"
        ));
    }
    for _ in 0..params {
        let len = r.i32("parameter length")?;
        if len != -1 {
            r.bytes(len, "parameter value")?;
        }
    }
    let results = r.u16("result format count")?;
    for _ in 0..results {
        format_code(r)?;
    }
    Ok(())
}

fn format_code(r: &mut Reader<'_>) -> Result<(), ProtocolViolation> {
    let code = r.i16("format code")?;
    if code != 0 && code != 1 {
        return violation(format!("unsupported format code: {code}"));
    }
    Ok(())
}

/// Bounds-checked reads from one message body.
struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Self { buf }
    }

    fn remaining(&self) -> usize {
        self.buf.len()
    }

    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], ProtocolViolation> {
        if self.buf.len() < n {
            return violation(format!(
                "insufficient data left in message (reading {what})"
            ));
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    fn u8(&mut self, what: &str) -> Result<u8, ProtocolViolation> {
        Ok(self.take(1, what)?[0])
    }

    fn i16(&mut self, what: &str) -> Result<i16, ProtocolViolation> {
        Ok(i16::from_be_bytes([self.u8(what)?, self.u8(what)?]))
    }

    fn u16(&mut self, what: &str) -> Result<u16, ProtocolViolation> {
        Ok(u16::from_be_bytes([self.u8(what)?, self.u8(what)?]))
    }

    fn i32(&mut self, what: &str) -> Result<i32, ProtocolViolation> {
        let b = self.take(4, what)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn bytes(&mut self, len: i32, what: &str) -> Result<&'a [u8], ProtocolViolation> {
        if len < 0 {
            return violation(format!("invalid length {len} of {what}"));
        }
        self.take(len as usize, what)
    }

    fn cstring(&mut self, what: &str) -> Result<&'a [u8], ProtocolViolation> {
        match self.buf.iter().position(|&b| b == 0) {
            Some(end) => {
                let s = &self.buf[..end];
                self.buf = &self.buf[end + 1..];
                Ok(s)
            }
            None => violation(format!("invalid string in message (reading {what})")),
        }
    }

    fn rest(&mut self) -> usize {
        let n = self.buf.len();
        self.buf = &[];
        n
    }

    fn end(&self, kind: u8) -> Result<(), ProtocolViolation> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            violation(format!(
                "invalid message format: {} bytes left over in message type \"{}\"",
                self.buf.len(),
                kind as char
            ))
        }
    }
}

/// The connection's byte stream, passing on only validated whole messages.
pub struct ValidatedStream<S> {
    inner: S,
    /// Bytes read but not yet a whole message.
    raw: BytesMut,
    /// Validated messages not yet read by the decoder.
    ready: BytesMut,
    phase: Phase,
    violation: Option<ProtocolViolation>,
    eof: bool,
    /// Password authentication: the first 'p' after startup is a SASLInitialResponse.
    sasl: bool,
}

impl<S> ValidatedStream<S> {
    /// `raw` holds bytes already read from `inner` (after SSL negotiation);
    /// `password_auth`: the first 'p' message after startup is a SASLInitialResponse.
    pub fn new(inner: S, raw: BytesMut, password_auth: bool) -> Self {
        Self {
            inner,
            raw,
            ready: BytesMut::new(),
            phase: Phase::Startup,
            violation: None,
            eof: false,
            sasl: password_auth,
        }
    }

    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Moves whole messages from `raw` to `ready`, stopping at the first violation.
    fn frame_ready_messages(&mut self) {
        while self.violation.is_none() {
            match next_frame(&self.raw, self.phase) {
                Ok(Frame::Incomplete) => return,
                Ok(Frame::Complete(n)) => {
                    let message = self.raw.split_to(n);
                    match validate(&message, self.phase) {
                        Ok(next) => {
                            self.phase = match (self.phase, next) {
                                (Phase::Startup, Phase::Typed { .. }) => Phase::Typed {
                                    sasl_initial: self.sasl,
                                },
                                _ => next,
                            };
                            self.ready.extend_from_slice(&message);
                        }
                        Err(v) => self.violation = Some(v),
                    }
                }
                Err(v) => self.violation = Some(v),
            }
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for ValidatedStream<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            this.frame_ready_messages();
            if !this.ready.is_empty() {
                let n = this.ready.len().min(out.remaining());
                out.put_slice(&this.ready.split_to(n));
                return Poll::Ready(Ok(()));
            }
            if let Some(v) = this.violation.clone() {
                return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, v)));
            }
            if this.eof {
                // A partial message at the end of the stream is dropped, as Postgres
                // does on an unexpected EOF.
                return Poll::Ready(Ok(()));
            }
            let mut chunk = [0u8; 8192];
            let mut chunk_buf = ReadBuf::new(&mut chunk);
            match Pin::new(&mut this.inner).poll_read(cx, &mut chunk_buf) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Ready(Ok(())) if chunk_buf.filled().is_empty() => this.eof = true,
                Poll::Ready(Ok(())) => this.raw.extend_from_slice(chunk_buf.filled()),
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for ValidatedStream<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// The violation behind a stream error, if the validator raised it.
pub fn as_violation(e: &io::Error) -> Option<&ProtocolViolation> {
    e.get_ref()
        .and_then(|inner| inner.downcast_ref::<ProtocolViolation>())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn typed(kind: u8, body: &[u8]) -> Vec<u8> {
        let mut m = vec![kind];
        m.extend_from_slice(&((body.len() + 4) as i32).to_be_bytes());
        m.extend_from_slice(body);
        m
    }

    fn check(message: &[u8]) -> Result<Phase, ProtocolViolation> {
        let phase = Phase::Typed {
            sasl_initial: false,
        };
        match next_frame(message, phase)? {
            Frame::Complete(n) if n == message.len() => validate(message, phase),
            other => panic!("unexpected frame {other:?}"),
        }
    }

    #[test]
    fn well_formed_bind_passes() {
        let mut body = b"p\0s\0".to_vec();
        body.extend_from_slice(&1u16.to_be_bytes());
        body.extend_from_slice(&1i16.to_be_bytes());
        body.extend_from_slice(&2u16.to_be_bytes());
        body.extend_from_slice(&4i32.to_be_bytes());
        body.extend_from_slice(&7i32.to_be_bytes());
        body.extend_from_slice(&(-1i32).to_be_bytes());
        body.extend_from_slice(&0u16.to_be_bytes());
        assert!(check(&typed(b'B', &body)).is_ok());
    }

    #[test]
    fn truncated_and_overlong_bodies_are_violations() {
        // Bind claiming one parameter of 100 bytes, sending 2.
        let mut body = b"\0\0".to_vec();
        body.extend_from_slice(&0u16.to_be_bytes());
        body.extend_from_slice(&1u16.to_be_bytes());
        body.extend_from_slice(&100i32.to_be_bytes());
        body.extend_from_slice(b"ab");
        assert!(check(&typed(b'B', &body)).is_err());
        // Execute without its row limit.
        assert!(check(&typed(b'E', b"\0")).is_err());
        // Sync with a body.
        assert!(check(&typed(b'S', b"x")).is_err());
        // Query without its terminator.
        assert!(check(&typed(b'Q', b"select 1")).is_err());
    }

    #[test]
    fn bad_lengths_and_types_are_violations() {
        let phase = Phase::Typed {
            sasl_initial: false,
        };
        assert!(next_frame(&[b'S', 0, 0, 0, 3], phase).is_err());
        assert!(next_frame(&[b'E', 0x7f, 0, 0, 0], phase).is_err());
        assert!(next_frame(b"z", phase).is_err());
        // Declared longer than sent: wait for more.
        assert_eq!(
            next_frame(&[b'Q', 0, 0, 1, 0, b's'], phase),
            Ok(Frame::Incomplete)
        );
        assert!(next_frame(&[0, 0, 0, 4], Phase::Startup).is_err());
    }

    #[test]
    fn startup_message_layout() {
        let mut m = Vec::new();
        let body = b"\0\x03\0\0user\0weir\0\0";
        m.extend_from_slice(&((body.len() + 4) as i32).to_be_bytes());
        m.extend_from_slice(body);
        assert!(matches!(
            validate(&m, Phase::Startup),
            Ok(Phase::Typed { .. })
        ));
        // Without the final terminator.
        let mut bad = Vec::new();
        let body = b"\0\x03\0\0user\0weir\0";
        bad.extend_from_slice(&((body.len() + 4) as i32).to_be_bytes());
        bad.extend_from_slice(body);
        assert!(validate(&bad, Phase::Startup).is_err());
    }
}
