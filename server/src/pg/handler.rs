//! One `Connection` per client: runs statements through the [`Database`] and turns
//! outputs and errors into protocol responses.
//!
//! The extended protocol's Describe and Execute are overridden (see [`super::portal`])
//! so drivers get `NoData`, per-Execute counts and row-limited portals as Postgres
//! sends them.

use super::encode::{encode_rows, field_infos};
use super::params;
use super::portal;
use crate::database::Database;
use crate::output::Output;
use crate::query;
use crate::session::{Released, Session};
use arrow::datatypes::Schema;
use async_trait::async_trait;
use futures::{stream, Sink, SinkExt};
use pgwire::api::portal::{Format, Portal, PortalExecutionState};
use pgwire::api::query::{send_describe_response, ExtendedQueryHandler, SimpleQueryHandler};
use pgwire::api::results::{
    DescribePortalResponse, DescribeResponse, DescribeStatementResponse, FieldInfo, QueryResponse,
    Response, Tag,
};
use pgwire::api::stmt::{QueryParser, StoredStatement};
use pgwire::api::store::{Entry, PortalStore};
use pgwire::api::{ClientInfo, ClientPortalStore, PgWireConnectionState, Type, DEFAULT_NAME};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::extendedquery::{Describe, Execute, Parse, ParseComplete};
use pgwire::messages::extendedquery::{TARGET_TYPE_BYTE_PORTAL, TARGET_TYPE_BYTE_STATEMENT};
use pgwire::messages::response::{EmptyQueryResponse, NoticeResponse};
use pgwire::messages::PgWireBackendMessage;
use std::fmt::Debug;
use std::sync::Arc;
use weir_planner::{parse_statement, SqlError, WeirStatement};

/// Sends the notices statements raised (Postgres sends them before the result).
async fn send_notices<C>(client: &mut C, session: &mut Session) -> PgWireResult<()>
where
    C: Sink<PgWireBackendMessage> + Unpin + Send,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    for n in std::mem::take(&mut session.notices) {
        client.feed(notice(n)).await?;
    }
    Ok(())
}

fn notice(text: String) -> PgWireBackendMessage {
    PgWireBackendMessage::NoticeResponse(NoticeResponse::from(ErrorInfo::new(
        "NOTICE".to_owned(),
        "00000".to_owned(),
        text,
    )))
}

/// Runs a statement while forwarding the progress its long work reports
/// (`weir_executor::progress`: backfill, SAVEPOINT, RESTORE) as NOTICEs, each flushed
/// at once so that psql prints it while the statement still runs.
async fn with_progress_notices<C, T>(
    client: &mut C,
    work: impl std::future::Future<Output = T>,
) -> PgWireResult<T>
where
    C: Sink<PgWireBackendMessage> + Unpin + Send,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let work = weir_executor::progress::NOTICES.scope(tx, work);
    tokio::pin!(work);
    loop {
        tokio::select! {
            out = &mut work => {
                while let Ok(text) = rx.try_recv() {
                    client.feed(notice(text)).await?;
                }
                return Ok(out);
            }
            Some(text) = rx.recv() => client.send(notice(text)).await?,
        }
    }
}

/// Applies the `-c name=value` settings of the startup packet's `options` (libpq's
/// `PGOPTIONS`), as Postgres does, before the session's first statement.
fn apply_startup_options(
    metadata: &std::collections::HashMap<String, String>,
    session: &mut Session,
) -> PgWireResult<()> {
    if std::mem::replace(&mut session.started, true) {
        return Ok(());
    }
    let Some(options) = metadata.get("options") else {
        return Ok(());
    };
    for (key, value) in startup_settings(options) {
        crate::show::set_key(session, key, value).map_err(to_pg_error)?;
    }
    Ok(())
}

/// `-c a=b --c=d -cx=y` as `(a, b), (c, d), (x, y)`.
fn startup_settings(options: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut words = options.split_whitespace();
    while let Some(w) = words.next() {
        let setting = match w {
            "-c" => words.next(),
            w => w.strip_prefix("--").or_else(|| w.strip_prefix("-c")),
        };
        if let Some((k, v)) = setting.and_then(|s| s.split_once('=')) {
            out.push((k.to_ascii_lowercase(), v.to_string()));
        }
    }
    out
}

/// Removes the prepared statements DEALLOCATE / DISCARD ALL released (see
/// `statements::session_reset`) from the client's statement store.
fn release_statements<C>(client: &mut C, session: &mut Session)
where
    C: ClientPortalStore,
    C::PortalStore: PortalStore,
{
    for r in std::mem::take(&mut session.released) {
        let store = client.portal_store();
        match r {
            Released::Named(name) => store.rm_statement(&name),
            Released::All => {
                for name in std::mem::take(&mut session.prepared) {
                    store.rm_statement(&name);
                }
            }
        }
    }
}

pub fn to_pg_error(e: SqlError) -> PgWireError {
    PgWireError::UserError(Box::new(ErrorInfo::new(
        "ERROR".to_owned(),
        e.code.to_owned(),
        e.message,
    )))
}

fn error_response(e: SqlError) -> Response {
    Response::Error(Box::new(ErrorInfo::new(
        "ERROR".to_owned(),
        e.code.to_owned(),
        e.message,
    )))
}

fn protocol_error(message: String) -> PgWireError {
    PgWireError::UserError(Box::new(ErrorInfo::new(
        "ERROR".to_owned(),
        "08P01".to_owned(),
        message,
    )))
}

/// Bind may give one format for all result columns or one per column; any other
/// count is a protocol error (Postgres: "bind message has N result formats but query
/// has M columns").
fn check_result_formats(format: &Format, columns: usize) -> PgWireResult<()> {
    match format {
        Format::Individual(codes) if codes.len() != columns => Err(protocol_error(format!(
            "bind message has {} result formats but query has {columns} columns",
            codes.len()
        ))),
        _ => Ok(()),
    }
}

pub(super) fn to_response(out: Output, format: &Format) -> PgWireResult<Response> {
    Ok(match out {
        Output::Rows { schema, batches } => {
            check_result_formats(format, schema.fields().len())?;
            let fields = Arc::new(field_infos(&schema, |i| format.format_for(i)));
            let rows = encode_rows(&batches, fields.clone())?;
            Response::Query(QueryResponse::new(
                fields,
                stream::iter(rows.into_iter().map(Ok)),
            ))
        }
        Output::Command { tag, rows } => {
            let mut t = Tag::new(&tag);
            if tag == "INSERT" {
                t = t.with_oid(0);
            }
            if let Some(n) = rows {
                t = t.with_rows(n);
            }
            Response::Execution(t)
        }
        Output::TransactionStart(tag) => Response::TransactionStart(Tag::new(&tag)),
        Output::TransactionEnd(tag) => Response::TransactionEnd(Tag::new(&tag)),
        Output::Empty => Response::EmptyQuery,
        copy @ (Output::CopyIn { .. } | Output::CopyOut { .. }) => {
            super::copy::copy_response(copy).expect("a COPY output")
        }
    })
}

/// A prepared statement: its SQL, parameter types and result columns.
#[derive(Clone, Debug)]
pub struct Prepared {
    sql: String,
    param_types: Vec<Type>,
    schema: Option<Arc<Schema>>,
}

pub struct StatementParser {
    db: Arc<Database>,
}

impl StatementParser {
    async fn describe(&self, sql: &str, declared: &[Option<Type>]) -> Result<Prepared, SqlError> {
        // Parse may declare more parameters than the text uses (Postgres allows it).
        let n = params::count_placeholders(sql).max(declared.len());
        let mut inferred: Vec<Option<Type>> = vec![None; n];
        let mut schema = None;
        match parse_statement(sql)? {
            WeirStatement::Sql(mut stmt) => {
                crate::statements::expand(&self.db, &mut stmt)?;
                use datafusion::sql::sqlparser::ast::Statement as S;
                let plannable = matches!(
                    stmt.as_ref(),
                    S::Query(_) | S::Insert(_) | S::Update(_) | S::Delete(_)
                );
                if plannable {
                    let ctx = query::planning_context(&self.db, &stmt)?;
                    let plan = query::plan_statement(&ctx.state(), &stmt).await?;
                    if let Ok(types) = plan.get_parameter_types() {
                        for (k, t) in types {
                            let idx = k.trim_start_matches('$').parse::<usize>().unwrap_or(0);
                            if (1..=n).contains(&idx) {
                                inferred[idx - 1] = t.map(|t| super::encode::pg_type(&t));
                            }
                        }
                    }
                    for (idx, t) in params::cast_types(sql) {
                        if (1..=n).contains(&idx) && inferred[idx - 1].is_none() {
                            inferred[idx - 1] = Some(t);
                        }
                    }
                    if matches!(stmt.as_ref(), S::Query(_)) {
                        schema = Some(query::pg_schema_with_aliases(
                            plan.schema().as_arrow(),
                            &query::select_aliases(&stmt),
                        ));
                    }
                } else if n == 0 && returns_rows(&stmt) {
                    schema = self.dry_run_schema(sql).await?;
                }
            }
            WeirStatement::Empty | WeirStatement::Flush => {}
            _ if n == 0 => schema = self.dry_run_schema(sql).await?,
            _ => {}
        }
        let param_types = (0..n)
            .map(|i| {
                declared
                    .get(i)
                    .cloned()
                    .flatten()
                    .or_else(|| inferred[i].clone())
                    .unwrap_or(Type::TEXT)
            })
            .collect();
        Ok(Prepared {
            sql: sql.to_string(),
            param_types,
            schema,
        })
    }

    /// SHOW and EXPLAIN have no side effects: run them to learn their columns.
    async fn dry_run_schema(&self, sql: &str) -> Result<Option<Arc<Schema>>, SqlError> {
        let mut s = Session::default();
        Ok(match self.db.execute_one(&mut s, sql).await? {
            Output::Rows { schema, .. } => Some(schema),
            _ => None,
        })
    }
}

fn returns_rows(stmt: &datafusion::sql::sqlparser::ast::Statement) -> bool {
    use datafusion::sql::sqlparser::ast::Statement as S;
    match stmt {
        S::ShowVariable { .. } => true,
        S::Explain { statement, .. } => !matches!(
            statement.as_ref(),
            S::Insert(_) | S::Update(_) | S::Delete(_)
        ),
        _ => false,
    }
}

#[async_trait]
impl QueryParser for StatementParser {
    type Statement = Prepared;

    async fn parse_sql<C>(
        &self,
        _client: &C,
        sql: &str,
        types: &[Option<Type>],
    ) -> PgWireResult<Option<Prepared>>
    where
        C: ClientInfo + Unpin + Send + Sync,
    {
        self.describe(sql, types)
            .await
            .map(Some)
            .map_err(to_pg_error)
    }

    fn get_parameter_types(&self, stmt: &Prepared) -> PgWireResult<Vec<Type>> {
        Ok(stmt.param_types.clone())
    }

    fn get_result_schema(
        &self,
        stmt: &Prepared,
        format: Option<&Format>,
    ) -> PgWireResult<Vec<FieldInfo>> {
        let Some(schema) = &stmt.schema else {
            return Ok(vec![]);
        };
        let format = format.cloned().unwrap_or_default();
        check_result_formats(&format, schema.fields().len())?;
        Ok(field_infos(schema, |i| format.format_for(i)))
    }
}

pub struct Connection {
    pub(super) db: Arc<Database>,
    pub(super) session: tokio::sync::Mutex<Session>,
    parser: Arc<StatementParser>,
}

impl Connection {
    pub fn new(db: Arc<Database>) -> Self {
        Self {
            parser: Arc::new(StatementParser { db: db.clone() }),
            db,
            session: tokio::sync::Mutex::new(Session::default()),
        }
    }
}

#[async_trait]
impl SimpleQueryHandler for Connection {
    async fn do_query<C>(&self, client: &mut C, query: &str) -> PgWireResult<Vec<Response>>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let mut session = self.session.lock().await;
        apply_startup_options(client.metadata(), &mut session)?;
        let results = with_progress_notices(client, self.db.execute(&mut session, query)).await?;
        send_notices(client, &mut session).await?;
        release_statements(client, &mut session);
        let mut responses = Vec::with_capacity(results.len());
        for r in results {
            match r {
                Ok(out) => responses.push(to_response(out, &Format::UnifiedText)?),
                Err(e) => responses.push(error_response(e)),
            }
        }
        Ok(responses)
    }
}

#[async_trait]
impl ExtendedQueryHandler for Connection {
    type Statement = Prepared;
    type QueryParser = StatementParser;

    fn query_parser(&self) -> Arc<StatementParser> {
        self.parser.clone()
    }

    /// pgwire's own Parse handling, plus the statement's name in the session, which
    /// DEALLOCATE checks and DEALLOCATE ALL releases.
    async fn on_parse<C>(&self, client: &mut C, message: Parse) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let name = message.name.clone().unwrap_or_default();
        match StoredStatement::parse(client, &message, self.query_parser()).await? {
            Some(stmt) => client.portal_store().put_statement(Arc::new(stmt)),
            None => client.portal_store().put_empty_statement(&name),
        }
        if !name.is_empty() {
            self.session.lock().await.prepared.insert(name);
        }
        client
            .send(PgWireBackendMessage::ParseComplete(ParseComplete::new()))
            .await?;
        Ok(())
    }

    async fn do_query<C>(
        &self,
        client: &mut C,
        portal: &Portal<Prepared>,
        _max_rows: usize,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let stmt = &portal.statement.statement;
        if portal.parameter_len() != stmt.param_types.len() {
            return Err(protocol_error(format!(
                "bind message supplies {} parameters, but prepared statement \"{}\" requires {}",
                portal.parameter_len(),
                statement_name(&portal.statement.id),
                stmt.param_types.len()
            )));
        }
        let sql = params::bind(&stmt.sql, portal, &stmt.param_types)?;
        let mut session = self.session.lock().await;
        apply_startup_options(client.metadata(), &mut session)?;
        let out = with_progress_notices(client, self.db.execute_one(&mut session, &sql)).await?;
        send_notices(client, &mut session).await?;
        release_statements(client, &mut session);
        let out = out.map_err(to_pg_error)?;
        to_response(out, &portal.result_column_format)
    }

    async fn on_describe<C>(&self, client: &mut C, message: Describe) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let name = message.name.as_deref().unwrap_or(DEFAULT_NAME);
        match message.target_type {
            TARGET_TYPE_BYTE_STATEMENT => match client.portal_store().get_statement(name) {
                Some(Entry::Value(stmt)) => {
                    let d = self.do_describe_statement(client, &stmt).await?;
                    portal::send_statement_description(client, &d.parameters, d.fields).await
                }
                Some(Entry::Empty) => portal::send_statement_description(client, &[], vec![]).await,
                None => Err(PgWireError::StatementNotFound(name.to_owned())),
            },
            TARGET_TYPE_BYTE_PORTAL => match client.portal_store().get_portal(name) {
                Some(Entry::Value(p)) => {
                    let d = self.do_describe_portal(client, &p).await?;
                    send_describe_response(client, &d).await
                }
                Some(Entry::Empty) => {
                    send_describe_response(client, &DescribePortalResponse::no_data()).await
                }
                None => Err(PgWireError::PortalNotFound(name.to_owned())),
            },
            other => Err(PgWireError::InvalidTargetType(other)),
        }
    }

    async fn on_execute<C>(&self, client: &mut C, message: Execute) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if !matches!(client.state(), PgWireConnectionState::ReadyForQuery) {
            return Err(PgWireError::NotReadyForQuery);
        }
        let name = message.name.as_deref().unwrap_or(DEFAULT_NAME);
        let max_rows = portal::row_limit(message.max_rows);
        let target = match client.portal_store().get_portal(name) {
            Some(Entry::Value(p)) => p,
            Some(Entry::Empty) => {
                let empty = PgWireBackendMessage::EmptyQueryResponse(EmptyQueryResponse::new());
                return Ok(client.feed(empty).await?);
            }
            None => return Err(PgWireError::PortalNotFound(name.to_owned())),
        };
        let state = target.state();
        let mut state = state.lock().await;
        if matches!(*state, PortalExecutionState::Initial) {
            match ExtendedQueryHandler::do_query(self, client, &target, max_rows).await? {
                Response::Query(rows) => *state = PortalExecutionState::Suspended(rows),
                other => return portal::send_command_response(client, other).await,
            }
        }
        portal::send_portal_rows(client, &mut state, max_rows).await
    }

    async fn do_describe_statement<C>(
        &self,
        _client: &mut C,
        target: &StoredStatement<Prepared>,
    ) -> PgWireResult<DescribeStatementResponse>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let p = &target.statement;
        let types: Vec<Type> = (0..p.param_types.len())
            .map(|i| {
                target
                    .parameter_types
                    .get(i)
                    .cloned()
                    .flatten()
                    .unwrap_or_else(|| p.param_types[i].clone())
            })
            .collect();
        let fields = self.parser.get_result_schema(p, None)?;
        Ok(DescribeStatementResponse::new(types, fields))
    }

    async fn do_describe_portal<C>(
        &self,
        _client: &mut C,
        target: &Portal<Prepared>,
    ) -> PgWireResult<DescribePortalResponse>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let fields = self.parser.get_result_schema(
            &target.statement.statement,
            Some(&target.result_column_format),
        )?;
        Ok(DescribePortalResponse::new(fields))
    }
}

/// A statement's name as clients know it (pgwire names the unnamed one internally).
fn statement_name(id: &str) -> &str {
    if id == DEFAULT_NAME {
        ""
    } else {
        id
    }
}

#[cfg(test)]
mod startup_tests {
    #[test]
    fn startup_options_are_read_like_postgres() {
        assert_eq!(
            super::startup_settings("-c read_after_write=on --search_path=public -cA=b junk"),
            vec![
                ("read_after_write".to_string(), "on".to_string()),
                ("search_path".to_string(), "public".to_string()),
                ("a".to_string(), "b".to_string()),
            ]
        );
    }
}
