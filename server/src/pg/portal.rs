//! Extended-protocol responses the way drivers rely on them.
//!
//! - `Describe` of a statement without result columns answers `ParameterDescription`
//!   then `NoData` (pgwire sends an empty `RowDescription` when the statement has
//!   parameters, which pgjdbc reads as "this INSERT returns rows" once it switches
//!   to named statements after `prepareThreshold` executions).
//! - `Execute` with a row limit sends at most that many rows, then `PortalSuspended`;
//!   the next `Execute` of the portal continues where it stopped (pgjdbc's
//!   `setFetchSize`). Zero or a negative limit means all rows, as in Postgres. Rows
//!   are streamed from the portal, never pre-allocated by the client's limit.
//! - Every `Execute` ends with exactly one `CommandComplete` (or `PortalSuspended`,
//!   `EmptyQueryResponse`, or an error), carrying the statement's own row count.

use futures::{Sink, SinkExt};
use pgwire::api::copy::{send_copy_both_response, send_copy_in_response, send_copy_out_response};
use pgwire::api::portal::PortalExecutionState;
use pgwire::api::query::{send_describe_response, send_partial_query_response};
use pgwire::api::results::{DescribePortalResponse, FieldInfo, Response, Tag};
use pgwire::api::store::PortalStore;
use pgwire::api::{ClientInfo, ClientPortalStore, PgWireConnectionState, Type, DEFAULT_NAME};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::data::ParameterDescription;
use pgwire::messages::response::EmptyQueryResponse;
use pgwire::messages::PgWireBackendMessage;
use std::fmt::Debug;

/// `ParameterDescription`, then the row description or `NoData`.
pub async fn send_statement_description<C>(
    client: &mut C,
    parameters: &[Type],
    fields: Vec<FieldInfo>,
) -> PgWireResult<()>
where
    C: Sink<PgWireBackendMessage> + Unpin,
    C::Error: Debug,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    let oids = parameters.iter().map(|t| t.oid()).collect();
    client
        .feed(PgWireBackendMessage::ParameterDescription(
            ParameterDescription::new(oids),
        ))
        .await?;
    send_describe_response(client, &DescribePortalResponse::new(fields)).await
}

/// The client's row limit: Postgres reads zero or a negative value as "all rows".
pub fn row_limit(max_rows: i32) -> usize {
    usize::try_from(max_rows).unwrap_or(0)
}

/// Sends up to `max_rows` rows of a started portal; marks it finished when its rows
/// are exhausted. A finished portal executed again completes with 0 rows.
pub async fn send_portal_rows<C>(
    client: &mut C,
    state: &mut PortalExecutionState,
    max_rows: usize,
) -> PgWireResult<()>
where
    C: Sink<PgWireBackendMessage> + Unpin,
    C::Error: Debug,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    match state {
        PortalExecutionState::Suspended(rows) => {
            if !send_partial_query_response(client, rows, max_rows).await? {
                *state = PortalExecutionState::Finished;
            }
        }
        PortalExecutionState::Finished => {
            let done = Tag::new("SELECT").with_rows(0);
            client
                .feed(PgWireBackendMessage::CommandComplete(done.into()))
                .await?;
        }
        PortalExecutionState::Initial => return Err(PgWireError::PortalNotStarted),
    }
    Ok(())
}

/// Sends the response of a statement without rows, keeping the transaction status
/// the client sees in ReadyForQuery in step.
pub async fn send_command_response<C>(client: &mut C, response: Response) -> PgWireResult<()>
where
    C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin,
    C::PortalStore: PortalStore,
    C::Error: Debug,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    let complete = |tag: Tag| PgWireBackendMessage::CommandComplete(tag.into());
    match response {
        Response::Query(_) => unreachable!("rows are sent by send_portal_rows"),
        Response::EmptyQuery => {
            client
                .feed(PgWireBackendMessage::EmptyQueryResponse(
                    EmptyQueryResponse::new(),
                ))
                .await?
        }
        Response::Execution(tag) => client.feed(complete(tag)).await?,
        Response::TransactionStart(tag) => {
            client.feed(complete(tag)).await?;
            let status = client.transaction_status().to_in_transaction_state();
            client.set_transaction_status(status);
        }
        Response::TransactionEnd(tag) => {
            client.feed(complete(tag)).await?;
            let status = client.transaction_status().to_idle_state();
            client.set_transaction_status(status);
            client.portal_store().rm_portal(DEFAULT_NAME);
        }
        // An error goes through pgwire's error path: ErrorResponse, then skip to Sync.
        Response::Error(e) => return Err(PgWireError::UserError(e)),
        Response::CopyIn(copy) => {
            client.set_state(PgWireConnectionState::CopyInProgress(true));
            send_copy_in_response(client, copy).await?;
        }
        Response::CopyOut(copy) => send_copy_out_response(client, copy).await?,
        Response::CopyBoth(copy) => {
            client.set_state(PgWireConnectionState::CopyInProgress(true));
            send_copy_both_response(client, copy).await?;
        }
    }
    Ok(())
}
