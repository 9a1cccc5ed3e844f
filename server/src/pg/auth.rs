//! Authentication: any user and database without a configured password (the embedded
//! default); SCRAM-SHA-256 against the configured password otherwise.

use async_trait::async_trait;
use futures::Sink;
use pgwire::api::auth::mechanism::AuthMechanismFactory;
use pgwire::api::auth::sasl::scram::{gen_salted_password, ScramAuth, SCRAM_ITERATIONS};
use pgwire::api::auth::{
    protocol_negotiation, save_startup_parameters_to_metadata, AuthDriver, AuthOutcome, AuthSource,
    DefaultServerParameterProvider, LoginInfo, Password, StartupHandler,
};
use pgwire::api::ClientInfo;
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};
use std::fmt::Debug;
use std::sync::Arc;

#[derive(Debug)]
struct ConfiguredPassword {
    salt: Vec<u8>,
    salted: Vec<u8>,
}

#[async_trait]
impl AuthSource for ConfiguredPassword {
    async fn get_password(&self, _login: &LoginInfo) -> PgWireResult<Password> {
        Ok(Password::new(Some(self.salt.clone()), self.salted.clone()))
    }
}

pub struct Authenticator {
    driver: AuthDriver<DefaultServerParameterProvider>,
    scram: Option<Arc<dyn AuthMechanismFactory>>,
}

impl Authenticator {
    /// `read_only`: a high-availability standby, reported at startup as Postgres' hot
    /// standby is (`default_transaction_read_only` and `in_hot_standby` on).
    pub fn new(password: Option<&str>, read_only: bool) -> Self {
        let mut params = DefaultServerParameterProvider::default();
        // psql picks its catalog queries by server version; 15 matches what we serve.
        params.server_version = "15.0 (Weir)".to_owned();
        params.default_transaction_read_only = read_only;
        params.in_hot_standby = read_only;
        let scram = password.map(|pw| {
            let salt = rand::random::<[u8; 16]>().to_vec();
            // Salted once at startup: PBKDF2 per login would be wasted work.
            let salted = gen_salted_password(pw, &salt, SCRAM_ITERATIONS);
            let mut s = ScramAuth::new(Arc::new(ConfiguredPassword { salt, salted }));
            s.set_iterations(SCRAM_ITERATIONS);
            Arc::new(s) as Arc<dyn AuthMechanismFactory>
        });
        Self {
            driver: AuthDriver::new(params),
            scram,
        }
    }
}

#[async_trait]
impl StartupHandler for Authenticator {
    async fn on_startup<C>(
        &self,
        client: &mut C,
        message: PgWireFrontendMessage,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        match message {
            PgWireFrontendMessage::Startup(ref startup) => {
                protocol_negotiation(client, startup).await?;
                save_startup_parameters_to_metadata(client, startup);
                match &self.scram {
                    None => self.driver.complete_authentication(client, None).await,
                    Some(f) => {
                        self.driver.begin_authentication(client, f.create()).await?;
                        Ok(())
                    }
                }
            }
            PgWireFrontendMessage::PasswordMessageFamily(msg) => {
                if let AuthOutcome::Authenticated { final_message, .. } =
                    self.driver.advance_authentication(client, msg).await?
                {
                    self.driver
                        .complete_authentication(client, final_message)
                        .await?;
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
}
