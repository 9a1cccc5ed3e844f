//! The TCP listener: one pgwire connection task per client (see [`crate::pg::socket`]
//! for SSL negotiation and the validated message loop).

use crate::database::Database;
use crate::pg::auth::Authenticator;
use crate::pg::handler::Connection;
use pgwire::api::auth::StartupHandler;
use pgwire::api::copy::CopyHandler;
use pgwire::api::query::{ExtendedQueryHandler, SimpleQueryHandler};
use pgwire::api::PgWireServerHandlers;
use pgwire::tokio::TlsAcceptor;
use std::sync::Arc;
use tokio::net::TcpListener;

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

/// Accepts clients until the process ends. Each connection has its own session; a
/// failing connection never affects the others. With `tls`, SSLRequest is answered
/// with TLS.
pub async fn serve(
    db: Arc<Database>,
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
) -> std::io::Result<()> {
    let password_auth = db.config.password.is_some();
    let auth = Arc::new(Authenticator::new(db.config.password.as_deref()));
    loop {
        let (socket, addr) = listener.accept().await?;
        let _ = socket.set_nodelay(true);
        let handlers = Handlers {
            conn: Arc::new(Connection::new(db.clone())),
            auth: auth.clone(),
        };
        let tls = tls.clone();
        tokio::spawn(async move {
            let served =
                crate::pg::socket::process_socket(socket, tls, handlers, password_auth).await;
            if let Err(e) = served {
                tracing::debug!(%addr, error = %e, "connection ended with an error");
            }
        });
    }
}
