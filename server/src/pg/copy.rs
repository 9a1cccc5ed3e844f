//! The COPY sub-protocol (pgwire's `CopyHandler`): collects a `COPY ... FROM STDIN`'s
//! CopyData in the session and runs it at CopyDone (see `statements::copy`); turns
//! a `COPY ... TO STDOUT` output into CopyOutResponse, CopyData and CopyDone.

use super::handler::{to_pg_error, Connection};
use crate::output::Output;
use async_trait::async_trait;
use futures::{stream, Sink, SinkExt};
use pgwire::api::copy::CopyHandler;
use pgwire::api::results::{CopyResponse, Response, Tag};
use pgwire::api::ClientInfo;
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::copy::{CopyData, CopyDone, CopyFail};
use pgwire::messages::PgWireBackendMessage;
use std::fmt::Debug;
use weir_planner::SqlError;

const PROGRAM_LIMIT_EXCEEDED: &str = "54000";
const QUERY_CANCELED: &str = "57014";

/// The response that starts a COPY (text format: 0; every column text).
pub fn copy_response(out: Output) -> Option<Response> {
    match out {
        Output::CopyIn { columns } => Some(Response::CopyIn(CopyResponse::new(
            0,
            columns,
            stream::empty(),
        ))),
        Output::CopyOut { columns, lines } => {
            // One CopyData per line: pgwire counts them for the `COPY n` tag.
            let messages = lines.into_iter().map(|l| Ok(CopyData::new(l.into())));
            Some(Response::CopyOut(CopyResponse::new(
                0,
                columns,
                stream::iter(messages.collect::<Vec<_>>()),
            )))
        }
        _ => None,
    }
}

#[async_trait]
impl CopyHandler for Connection {
    async fn on_copy_data<C>(&self, _client: &mut C, copy_data: CopyData) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let mut session = self.session.lock().await;
        let Some(copy) = session.copy_in.as_mut() else {
            return Err(protocol_error("CopyData without a COPY FROM STDIN"));
        };
        if copy.data.len() + copy_data.data.len() > crate::statements::copy::MAX_COPY_BYTES {
            session.copy_in = None;
            return Err(to_pg_error(SqlError::new(
                PROGRAM_LIMIT_EXCEEDED,
                "COPY data larger than 1 GiB: split it into several COPY statements",
            )));
        }
        copy.data.extend_from_slice(&copy_data.data);
        Ok(())
    }

    async fn on_copy_done<C>(&self, client: &mut C, _done: CopyDone) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let mut session = self.session.lock().await;
        let Some(copy) = session.copy_in.take() else {
            return Err(protocol_error("CopyDone without a COPY FROM STDIN"));
        };
        let out = crate::statements::copy::finish_copy_in(&self.db, &mut session, copy)
            .await
            .map_err(to_pg_error)?;
        let rows = match out {
            Output::Command { rows, .. } => rows.unwrap_or(0),
            _ => 0,
        };
        let tag = Tag::new("COPY").with_rows(rows);
        client
            .send(PgWireBackendMessage::CommandComplete(tag.into()))
            .await?;
        Ok(())
    }

    async fn on_copy_fail<C>(&self, _client: &mut C, fail: CopyFail) -> PgWireError
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        self.session.lock().await.copy_in = None;
        PgWireError::UserError(Box::new(ErrorInfo::new(
            "ERROR".to_owned(),
            QUERY_CANCELED.to_owned(),
            format!("COPY from stdin failed: {}", fail.message),
        )))
    }
}

fn protocol_error(message: &str) -> PgWireError {
    to_pg_error(SqlError::new(
        weir_planner::sqlstate::PROTOCOL_VIOLATION,
        message,
    ))
}
