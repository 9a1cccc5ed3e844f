//! The TCP listener: one pgwire connection task per client (see [`crate::pg::socket`]
//! for SSL negotiation and the validated message loop).

use crate::database::Database;
use crate::member::Member;
use crate::pg::auth::Authenticator;
use crate::pg::handler::Connection;
use crate::pg::standby::StandbyConnection;
use pgwire::api::auth::StartupHandler;
use pgwire::api::copy::CopyHandler;
use pgwire::api::query::{ExtendedQueryHandler, SimpleQueryHandler};
use pgwire::api::PgWireServerHandlers;
use pgwire::tokio::TlsAcceptor;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::{TcpListener, TcpStream};

struct Handlers {
    conn: Arc<Connection>,
    auth: Arc<Authenticator>,
}

impl PgWireServerHandlers for Handlers {
    fn simple_query_handler(&self) -> Arc<impl SimpleQueryHandler> {
        self.conn.clone()
    }
    fn extended_query_handler(&self) -> Arc<impl ExtendedQueryHandler> {
        self.conn.clone()
    }
    fn startup_handler(&self) -> Arc<impl StartupHandler> {
        self.auth.clone()
    }
    fn copy_handler(&self) -> Arc<impl CopyHandler> {
        self.conn.clone()
    }
}

/// Sessions on a high-availability standby.
struct StandbyHandlers {
    conn: Arc<StandbyConnection>,
    auth: Arc<Authenticator>,
}

impl PgWireServerHandlers for StandbyHandlers {
    fn simple_query_handler(&self) -> Arc<impl SimpleQueryHandler> {
        self.conn.clone()
    }
    fn extended_query_handler(&self) -> Arc<impl ExtendedQueryHandler> {
        self.conn.clone()
    }
    fn startup_handler(&self) -> Arc<impl StartupHandler> {
        self.auth.clone()
    }
}

/// Runs one client's connection in its own task; a failing connection never affects
/// the others.
fn spawn_session<H: PgWireServerHandlers + Send + Sync>(
    socket: TcpStream,
    addr: SocketAddr,
    tls: Option<TlsAcceptor>,
    handlers: H,
    password_auth: bool,
) {
    tokio::spawn(async move {
        let served = crate::pg::socket::process_socket(socket, tls, handlers, password_auth).await;
        if let Err(e) = served {
            tracing::debug!(%addr, error = %e, "connection ended with an error");
        }
    });
}

async fn accept(listener: &TcpListener) -> std::io::Result<(TcpStream, SocketAddr)> {
    let (socket, addr) = listener.accept().await?;
    let _ = socket.set_nodelay(true);
    Ok((socket, addr))
}

/// Accepts clients until the process ends, each with its own session. With `tls`,
/// SSLRequest is answered with TLS.
pub async fn serve(
    db: Arc<Database>,
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
) -> std::io::Result<()> {
    let password_auth = db.config.password.is_some();
    let auth = Arc::new(Authenticator::new(db.config.password.as_deref(), false));
    loop {
        let (socket, addr) = accept(&listener).await?;
        let handlers = Handlers {
            conn: Arc::new(Connection::new(db.clone())),
            auth: auth.clone(),
        };
        spawn_session(socket, addr, tls.clone(), handlers, password_auth);
    }
}

/// [`serve`] for a high-availability member: a connection gets a full session once
/// the member leads, a standby session before.
pub async fn serve_member(
    member: Arc<Member>,
    password: Option<String>,
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
) -> std::io::Result<()> {
    let password_auth = password.is_some();
    let leader_auth = Arc::new(Authenticator::new(password.as_deref(), false));
    let standby_auth = Arc::new(Authenticator::new(password.as_deref(), true));
    loop {
        let (socket, addr) = accept(&listener).await?;
        match member.database() {
            Some(db) => {
                let handlers = Handlers {
                    conn: Arc::new(Connection::new(db)),
                    auth: leader_auth.clone(),
                };
                spawn_session(socket, addr, tls.clone(), handlers, password_auth);
            }
            None => {
                let handlers = StandbyHandlers {
                    conn: Arc::new(StandbyConnection::new(member.clone())),
                    auth: standby_auth.clone(),
                };
                spawn_session(socket, addr, tls.clone(), handlers, password_auth);
            }
        }
    }
}
