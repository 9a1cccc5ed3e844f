//! Sessions on a standby member of a high-availability cluster: it accepts
//! connections, reports `default_transaction_read_only = on` and `in_hot_standby = on`
//! at startup (so libpq's `target_session_attrs=read-write` moves on to the leader),
//! answers `SHOW CLUSTER`, the read-only settings, SET and transaction control, and
//! refuses the rest: writes with 25006 (as a Postgres hot standby does), anything
//! else with 57P03 (a standby holds no data it may serve until it leads).
//!
//! A session keeps being a standby session when its member takes over: clients
//! reconnect, as they do after every failover.

use super::handler::{to_pg_error, to_response};
use crate::member::Member;
use crate::output::Output;
use async_trait::async_trait;
use futures::Sink;
use pgwire::api::portal::{Format, Portal};
use pgwire::api::query::{ExtendedQueryHandler, SimpleQueryHandler};
use pgwire::api::results::{DescribePortalResponse, DescribeStatementResponse, Response};
use pgwire::api::stmt::{NoopQueryParser, StoredStatement};
use pgwire::api::ClientInfo;
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::PgWireBackendMessage;
use std::fmt::Debug;
use std::sync::Arc;
use weir_planner::{sqlstate, SqlError, SqlResult};

/// Settings a client asks to tell a standby from the leader.
const READ_ONLY_SETTINGS: [&str; 3] = [
    "transaction_read_only",
    "default_transaction_read_only",
    "in_hot_standby",
];

/// First words of statements that change data or the catalog.
const WRITES: [&str; 16] = [
    "insert",
    "update",
    "delete",
    "merge",
    "create",
    "drop",
    "alter",
    "truncate",
    "copy",
    "grant",
    "revoke",
    "comment",
    "savepoint",
    "restore",
    "checkpoint",
    "flush",
];

pub struct StandbyConnection {
    member: Arc<Member>,
}

impl StandbyConnection {
    pub fn new(member: Arc<Member>) -> Self {
        StandbyConnection { member }
    }

    fn whereabouts(&self) -> String {
        let s = self.member.status();
        match s.leader {
            Some(l) => format!("the leader is {l} (lease epoch {})", s.epoch),
            None => "no leader is known yet".to_string(),
        }
    }

    /// One statement's answer.
    async fn answer(&self, sql: &str) -> SqlResult<Output> {
        let words: Vec<String> = sql
            .split(|c: char| c.is_whitespace() || c == ';')
            .filter(|w| !w.is_empty())
            .take(2)
            .map(str::to_ascii_lowercase)
            .collect();
        let words: Vec<&str> = words.iter().map(String::as_str).collect();
        match words.as_slice() {
            [] => Ok(Output::Empty),
            ["show", "cluster"] => crate::member::show_cluster(Some(&self.member)).await,
            ["show", var] if READ_ONLY_SETTINGS.contains(var) => {
                crate::show::text_rows(var, vec!["on".into()])
            }
            ["set" | "reset", ..] => Ok(Output::command(&words[0].to_ascii_uppercase())),
            ["discard", ..] => Ok(Output::command("DISCARD ALL")),
            ["begin" | "start", ..] => Ok(Output::TransactionStart("BEGIN".into())),
            ["commit" | "end", ..] => Ok(Output::TransactionEnd("COMMIT".into())),
            ["rollback" | "abort", ..] => Ok(Output::TransactionEnd("ROLLBACK".into())),
            [first, ..] if WRITES.contains(first) => Err(SqlError::new(
                sqlstate::READ_ONLY_SQL_TRANSACTION,
                format!(
                    "cannot execute {} in a read-only transaction: this member is a standby; {}",
                    first.to_ascii_uppercase(),
                    self.whereabouts()
                ),
            )),
            _ => Err(SqlError::new(
                sqlstate::CANNOT_CONNECT_NOW,
                format!(
                    "this member is a standby and serves no queries until it leads; {} \
                     (libpq: target_session_attrs=read-write finds it)",
                    self.whereabouts()
                ),
            )),
        }
    }

    async fn respond(&self, sql: &str, format: &Format) -> PgWireResult<Response> {
        match self.answer(sql).await {
            Ok(out) => to_response(out, format),
            Err(e) => Err(to_pg_error(e)),
        }
    }
}

#[async_trait]
impl SimpleQueryHandler for StandbyConnection {
    async fn do_query<C>(&self, _client: &mut C, query: &str) -> PgWireResult<Vec<Response>>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let mut responses = vec![];
        for stmt in weir_planner::split_statements(query) {
            match self.respond(&stmt, &Format::UnifiedText).await {
                Ok(r) => responses.push(r),
                Err(PgWireError::UserError(e)) => {
                    responses.push(Response::Error(e));
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(responses)
    }
}

#[async_trait]
impl ExtendedQueryHandler for StandbyConnection {
    type Statement = String;
    type QueryParser = NoopQueryParser;

    fn query_parser(&self) -> Arc<Self::QueryParser> {
        Arc::new(NoopQueryParser)
    }

    async fn do_query<C>(
        &self,
        _client: &mut C,
        portal: &Portal<Self::Statement>,
        _max_rows: usize,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        self.respond(&portal.statement.statement, &portal.result_column_format)
            .await
    }

    async fn do_describe_statement<C>(
        &self,
        _client: &mut C,
        statement: &StoredStatement<Self::Statement>,
    ) -> PgWireResult<DescribeStatementResponse>
    where
        C: ClientInfo + Unpin + Send + Sync,
    {
        let fields = self
            .fields(&statement.statement, &Format::UnifiedText)
            .await;
        Ok(DescribeStatementResponse::new(vec![], fields))
    }

    async fn do_describe_portal<C>(
        &self,
        _client: &mut C,
        portal: &Portal<Self::Statement>,
    ) -> PgWireResult<DescribePortalResponse>
    where
        C: ClientInfo + Unpin + Send + Sync,
    {
        let fields = self
            .fields(&portal.statement.statement, &portal.result_column_format)
            .await;
        Ok(DescribePortalResponse::new(fields))
    }
}

impl StandbyConnection {
    /// The result columns of what `sql` answers (none for a command or an error).
    async fn fields(&self, sql: &str, format: &Format) -> Vec<pgwire::api::results::FieldInfo> {
        match self.answer(sql).await {
            Ok(Output::Rows { schema, .. }) => {
                super::encode::field_infos(&schema, |i| format.format_for(i))
            }
            _ => vec![],
        }
    }
}
