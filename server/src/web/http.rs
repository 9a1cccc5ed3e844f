//! Just enough HTTP/1.1 for the dashboard: read one request's head, answer it, close.

use base64::Engine;
use std::future::Future;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Largest request head read; a browser's is a few hundred bytes.
const MAX_HEAD: usize = 16 * 1024;
/// A client that sends nothing is dropped after this.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

pub struct Request {
    pub method: String,
    pub path: String,
    headers: Vec<(String, String)>,
}

impl Request {
    /// Parses a request head (`GET /x HTTP/1.1` and headers), or `None` if malformed.
    fn parse(head: &str) -> Option<Request> {
        let mut lines = head.split("\r\n");
        let mut first = lines.next()?.split_whitespace();
        let (method, path) = (first.next()?.to_string(), first.next()?.to_string());
        let headers = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
            .collect();
        Some(Request {
            method,
            path,
            headers,
        })
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

pub struct Response {
    status: u16,
    content_type: &'static str,
    body: Vec<u8>,
    /// Static assets may be cached briefly; data never.
    cache: &'static str,
    challenge: bool,
}

impl Response {
    pub fn text(status: u16, body: &str) -> Response {
        Response {
            status,
            content_type: "text/plain; charset=utf-8",
            body: body.as_bytes().to_vec(),
            cache: "no-store",
            challenge: false,
        }
    }

    pub fn asset(content_type: &'static str, body: &str) -> Response {
        Response {
            status: 200,
            content_type,
            body: body.as_bytes().to_vec(),
            cache: "no-cache",
            challenge: false,
        }
    }

    /// A generated body that no cache may keep.
    pub fn body(content_type: &'static str, body: String) -> Response {
        Response {
            status: 200,
            content_type,
            body: body.into_bytes(),
            cache: "no-store",
            challenge: false,
        }
    }

    pub fn json(value: &serde_json::Value) -> Response {
        Response::body("application/json", value.to_string())
    }

    /// 401 with a Basic challenge: the browser asks for the password.
    pub fn unauthorized() -> Response {
        Response {
            challenge: true,
            ..Response::text(401, "the dashboard needs the server's password\n")
        }
    }

    fn head(&self) -> String {
        let reason = match self.status {
            200 => "OK",
            400 => "Bad Request",
            401 => "Unauthorized",
            404 => "Not Found",
            405 => "Method Not Allowed",
            503 => "Service Unavailable",
            _ => "Error",
        };
        let challenge = if self.challenge {
            "WWW-Authenticate: Basic realm=\"weir\", charset=\"UTF-8\"\r\n"
        } else {
            ""
        };
        format!(
            "HTTP/1.1 {} {reason}\r\nContent-Type: {}\r\nContent-Length: {}\r\nCache-Control: {}\r\nX-Content-Type-Options: nosniff\r\n{challenge}Connection: close\r\n\r\n",
            self.status,
            self.content_type,
            self.body.len(),
            self.cache
        )
    }
}

/// Whether the request's Basic credentials carry `password` (any user name).
pub fn basic_password_is(req: &Request, password: &str) -> bool {
    let Some(encoded) = req
        .header("authorization")
        .and_then(|v| v.strip_prefix("Basic "))
    else {
        return false;
    };
    let Ok(decoded) = base64::engine::general_purpose::STANDARD.decode(encoded.trim()) else {
        return false;
    };
    let given = match decoded.iter().position(|b| *b == b':') {
        Some(i) => &decoded[i + 1..],
        None => return false,
    };
    constant_time_eq(given, password.as_bytes())
}

/// Compares without stopping at the first difference (no timing hint).
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

/// Serves `what` on `host:port`, one request per connection, each answered by
/// `handle` on its own task. Port 0 serves nothing; a port that cannot be bound is
/// logged, not fatal: the database keeps serving SQL.
pub async fn serve<F, Fut>(host: &str, port: u16, what: &'static str, handle: F)
where
    F: Fn(Request) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Response> + Send + 'static,
{
    if port == 0 {
        return;
    }
    let listener = match tokio::net::TcpListener::bind((host, port)).await {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(port, error = %e, "cannot start the {what}");
            return;
        }
    };
    tracing::info!(port, "{what} on http://{host}:{port}/");
    tokio::spawn(async move {
        loop {
            let Ok((socket, _)) = listener.accept().await else {
                continue;
            };
            tokio::spawn(serve_one(socket, handle.clone()));
        }
    });
}

/// Reads one request from `socket`, answers it with `handle`, and closes.
pub async fn serve_one<F, Fut>(mut socket: TcpStream, handle: F)
where
    F: FnOnce(Request) -> Fut,
    Fut: Future<Output = Response>,
{
    let Ok(head) = tokio::time::timeout(READ_TIMEOUT, read_head(&mut socket)).await else {
        return;
    };
    let (response, with_body) = match head.as_deref().and_then(Request::parse) {
        Some(req) => {
            let with_body = req.method != "HEAD";
            (handle(req).await, with_body)
        }
        None => (Response::text(400, "malformed request\n"), true),
    };
    let _ = socket.write_all(response.head().as_bytes()).await;
    if with_body {
        let _ = socket.write_all(&response.body).await;
    }
    let _ = socket.shutdown().await;
}

/// The request head up to the blank line, or `None` if it is too long or cut short.
async fn read_head(socket: &mut TcpStream) -> Option<String> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 2048];
    loop {
        let n = socket.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            return String::from_utf8(buf[..end].to_vec()).ok();
        }
        if buf.len() > MAX_HEAD {
            return None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_credentials_must_carry_the_password() {
        let req = |auth: &str| {
            Request::parse(&format!(
                "GET / HTTP/1.1\r\nHost: x\r\nAuthorization: {auth}"
            ))
            .unwrap()
        };
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        assert!(basic_password_is(
            &req(&format!("Basic {}", b64("any:s3cret"))),
            "s3cret"
        ));
        assert!(!basic_password_is(
            &req(&format!("Basic {}", b64("any:wrong"))),
            "s3cret"
        ));
        assert!(!basic_password_is(
            &req(&format!("Basic {}", b64("nocolon"))),
            "s3cret"
        ));
        assert!(!basic_password_is(&req("Basic !!!"), "s3cret"));
        assert!(!basic_password_is(&req("Bearer x"), "s3cret"));
    }

    #[test]
    fn a_request_head_parses_to_method_path_and_headers() {
        let r =
            Request::parse("GET /api/catalog/jobs?x=1 HTTP/1.1\r\nHost: a:1\r\nX-Y:  z ").unwrap();
        assert_eq!(
            (r.method.as_str(), r.path.as_str()),
            ("GET", "/api/catalog/jobs?x=1")
        );
        assert_eq!(r.header("x-y"), Some("z"));
        assert!(Request::parse("").is_none());
    }
}
