//! One client socket: SSL negotiation, then pgwire's message loop over a
//! [`ValidatedStream`].
//!
//! This replaces `pgwire::tokio::process_socket` (whose decoder would see raw,
//! unchecked bytes) with the same steps built from pgwire's public pieces
//! (`process_message`, `process_error`, `PgWireMessageServerCodec`):
//!
//! 1. `SSLRequest` is answered `S` and the connection continues inside TLS when a
//!    certificate is configured, `N` otherwise; `GSSENCRequest` is answered `N`.
//!    A TLS ClientHello as the first bytes (`sslnegotiation=direct`) is accepted with
//!    TLS configured, requiring the `postgresql` ALPN protocol as Postgres does.
//! 2. Every later byte passes the framing validator; a malformed message ends the
//!    session with `FATAL 08P01`, never a panic.
//! 3. Startup must finish within a minute, as in pgwire.

use super::framing::{as_violation, ValidatedStream, GSSENC_REQUEST_CODE, SSL_REQUEST_CODE};
use bytes::{Buf, BytesMut};
use futures::{SinkExt, StreamExt};
use pgwire::api::{ClientInfo, DefaultClient, PgWireConnectionState, PgWireServerHandlers};
use pgwire::error::{ErrorInfo, PgWireError};
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};
use pgwire::tokio::server::{process_error, process_message, MaybeTls, PgWireMessageServerCodec};
use pgwire::tokio::TlsAcceptor;
use std::io;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_util::codec::Framed;

/// How long a client may take to finish startup and authentication.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);

type ClientSocket<S> = Framed<ValidatedStream<MaybeTls>, PgWireMessageServerCodec<S>>;

/// Serves one client until it disconnects or breaks the protocol.
pub async fn process_socket<H: PgWireServerHandlers>(
    tcp: TcpStream,
    tls: Option<TlsAcceptor>,
    handlers: H,
    password_auth: bool,
) -> io::Result<()> {
    let addr = tcp.peer_addr()?;
    let startup_deadline = tokio::time::sleep(STARTUP_TIMEOUT);
    tokio::pin!(startup_deadline);
    let negotiated = tokio::select! {
        _ = &mut startup_deadline => return Ok(()),
        n = negotiate(tcp, tls.as_ref()) => n?,
    };
    let Some(Negotiated {
        stream,
        leftover,
        secure,
    }) = negotiated
    else {
        return Ok(());
    };
    let client = DefaultClient::new(addr, secure);
    let mut socket: ClientSocket<_> = Framed::new(
        ValidatedStream::new(stream, leftover, password_auth),
        PgWireMessageServerCodec::new(client),
    );
    socket.set_state(PgWireConnectionState::AwaitingStartup);

    let startup = handlers.startup_handler();
    let simple = handlers.simple_query_handler();
    let extended = handlers.extended_query_handler();
    let copy = handlers.copy_handler();
    let cancel = handlers.cancel_handler();
    loop {
        let in_startup = matches!(
            socket.state(),
            PgWireConnectionState::AwaitingStartup
                | PgWireConnectionState::AuthenticationInProgress
        );
        let next = if in_startup {
            tokio::select! {
                _ = &mut startup_deadline => None,
                m = socket.next() => m,
            }
        } else {
            socket.next().await
        };
        let message = match next {
            None => break,
            Some(Ok(m)) => m,
            Some(Err(e)) => {
                report_protocol_error(&mut socket, e).await;
                break;
            }
        };
        if matches!(message, PgWireFrontendMessage::Terminate(_)) {
            break;
        }
        let is_extended = match socket.state() {
            PgWireConnectionState::CopyInProgress(extended) => extended,
            _ => message.is_extended_query(),
        };
        let is_cancel = matches!(message, PgWireFrontendMessage::CancelRequest(_));
        let result = process_message(
            message,
            &mut socket,
            startup.clone(),
            simple.clone(),
            extended.clone(),
            copy.clone(),
            cancel.clone(),
        )
        .await;
        if let Err(e) = result {
            let fatal = e.is_fatal();
            process_error(&mut socket, e, is_extended).await?;
            if fatal {
                break;
            }
        }
        if is_cancel {
            break;
        }
    }
    Ok(())
}

/// Answers a message the decoder could not accept with `FATAL 08P01` (an I/O error
/// of the socket itself gets no answer: the client is gone).
async fn report_protocol_error<S>(socket: &mut ClientSocket<S>, e: PgWireError) {
    let message = match &e {
        PgWireError::IoError(io) => match as_violation(io) {
            Some(v) => v.0.clone(),
            None => return,
        },
        other => other.to_string(),
    };
    tracing::debug!(addr = %socket.socket_addr(), %message, "protocol violation");
    let info = ErrorInfo::new("FATAL".to_owned(), "08P01".to_owned(), message);
    let _ = socket
        .send(PgWireBackendMessage::ErrorResponse(info.into()))
        .await;
    let _ = socket.close().await;
    linger(socket.get_mut().get_mut()).await;
}

/// Reads and drops what the client still sends (for at most a second and 1 MiB)
/// before the socket is closed: closing with unread input makes the kernel reset the
/// connection, and a reset can destroy the ErrorResponse before the client reads it.
async fn linger(stream: &mut MaybeTls) {
    let drain = async {
        let mut buf = [0u8; 8192];
        let mut total = 0;
        while total < (1 << 20) {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => total += n,
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(1), drain).await;
}

struct Negotiated {
    stream: MaybeTls,
    /// Bytes of the first message already read while looking for an SSLRequest.
    leftover: BytesMut,
    secure: bool,
}

/// The TLS ClientHello's first byte (a TLS handshake record).
const TLS_HANDSHAKE_RECORD: u8 = 0x16;

/// Handles SSLRequest/GSSENCRequest (each at most once) and direct TLS; `None` when
/// the client left or asked for TLS that is not configured in a way it cannot fall
/// back from.
async fn negotiate(
    mut tcp: TcpStream,
    tls: Option<&TlsAcceptor>,
) -> io::Result<Option<Negotiated>> {
    let mut first = [0u8; 1];
    if tcp.peek(&mut first).await? == 0 {
        return Ok(None);
    }
    if first[0] == TLS_HANDSHAKE_RECORD {
        let Some(acceptor) = tls else {
            return Ok(None);
        };
        let stream = acceptor.accept(tcp).await?;
        if stream.get_ref().1.alpn_protocol() != Some(b"postgresql".as_slice()) {
            return Ok(None);
        }
        return Ok(Some(Negotiated {
            stream: MaybeTls::Tls(Box::new(stream)),
            leftover: BytesMut::new(),
            secure: true,
        }));
    }
    let mut buf = BytesMut::with_capacity(1024);
    let (mut ssl_answered, mut gss_answered) = (false, false);
    loop {
        if !fill(&mut tcp, &mut buf, 4).await? {
            return Ok(None);
        }
        let len = i32::from_be_bytes(buf[..4].try_into().expect("4 bytes"));
        if len != 8 {
            break;
        }
        if !fill(&mut tcp, &mut buf, 8).await? {
            return Ok(None);
        }
        let code = i32::from_be_bytes(buf[4..8].try_into().expect("4 bytes"));
        if code == SSL_REQUEST_CODE && !ssl_answered {
            buf.advance(8);
            if let Some(acceptor) = tls {
                if !buf.is_empty() {
                    // Unencrypted bytes after the SSLRequest must not be read as if
                    // they came through TLS (CVE-2021-23214): end the connection.
                    return Ok(None);
                }
                tcp.write_all(b"S").await?;
                let stream = acceptor.accept(tcp).await?;
                return Ok(Some(Negotiated {
                    stream: MaybeTls::Tls(Box::new(stream)),
                    leftover: BytesMut::new(),
                    secure: true,
                }));
            }
            tcp.write_all(b"N").await?;
            ssl_answered = true;
        } else if code == GSSENC_REQUEST_CODE && !gss_answered {
            buf.advance(8);
            tcp.write_all(b"N").await?;
            gss_answered = true;
        } else {
            break;
        }
    }
    Ok(Some(Negotiated {
        stream: MaybeTls::Plain(tcp),
        leftover: buf,
        secure: false,
    }))
}

/// Reads until `buf` holds `n` bytes; false at end of stream.
async fn fill(tcp: &mut TcpStream, buf: &mut BytesMut, n: usize) -> io::Result<bool> {
    while buf.len() < n {
        if tcp.read_buf(buf).await? == 0 {
            return Ok(false);
        }
    }
    Ok(true)
}
