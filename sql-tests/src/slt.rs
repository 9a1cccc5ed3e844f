//! sqllogictest over the wire: every statement goes through tokio-postgres's simple
//! query protocol, exactly as psql sends it, and values are compared as the text the
//! server returned. Column types are checked too (the `I`, `R`, `T` letters of a
//! `query` record): tokio-postgres's simple protocol does not expose the types, so a
//! query that returns rows is also described (Parse + Describe, not executed) and its
//! column types mapped to letters.

use sqllogictest::{DBOutput, DefaultColumnType};
use tokio_postgres::{Client, SimpleQueryMessage};

pub struct PgDb {
    pub client: Client,
    /// Whether result columns are described for their types (see the module doc).
    typed: bool,
}

/// A new connection to the server on `port`, as sqllogictest's connection factory:
/// results carry their column types.
pub async fn connect(port: u16) -> Result<PgDb, PgError> {
    let client = crate::process::connect_port(port).await.map_err(PgError)?;
    Ok(PgDb {
        client,
        typed: true,
    })
}

/// The same without column types, for suites written for other engines (the
/// conformance files), whose type letters follow those engines' types and are not
/// compared.
pub async fn connect_untyped(port: u16) -> Result<PgDb, PgError> {
    let client = crate::process::connect_port(port).await.map_err(PgError)?;
    Ok(PgDb {
        client,
        typed: false,
    })
}

#[derive(Debug)]
pub struct PgError(pub tokio_postgres::Error);

impl std::fmt::Display for PgError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0.as_db_error() {
            Some(db) => write!(f, "{} (SQLSTATE {})", db.message(), db.code().code()),
            None => write!(f, "{}", self.0),
        }
    }
}

impl std::error::Error for PgError {}

impl PgDb {
    /// The type letters of `sql`'s `n` result columns, from the extended protocol's
    /// description of the same statement.
    async fn column_types(&self, sql: &str, n: usize) -> Result<Vec<DefaultColumnType>, PgError> {
        if !self.typed {
            return Ok(vec![DefaultColumnType::Any; n]);
        }
        let described = self.client.prepare(sql).await.map_err(PgError)?;
        let types: Vec<DefaultColumnType> = described
            .columns()
            .iter()
            .map(|c| type_letter(c.type_()))
            .collect();
        if types.len() != n {
            // A statement that describes differently from what it returns: report it as
            // untyped columns of the returned count, which no typed record accepts.
            return Ok(vec![DefaultColumnType::Any; n]);
        }
        Ok(types)
    }
}

/// sqllogictest's letters: `I` integers, `R` floating point and numeric, `T` the rest.
fn type_letter(t: &tokio_postgres::types::Type) -> DefaultColumnType {
    use tokio_postgres::types::Type;
    match *t {
        Type::INT2 | Type::INT4 | Type::INT8 | Type::OID => DefaultColumnType::Integer,
        Type::FLOAT4 | Type::FLOAT8 | Type::NUMERIC => DefaultColumnType::FloatingPoint,
        _ => DefaultColumnType::Text,
    }
}

#[async_trait::async_trait]
impl sqllogictest::AsyncDB for PgDb {
    type Error = PgError;
    type ColumnType = DefaultColumnType;

    async fn run(&mut self, sql: &str) -> Result<DBOutput<DefaultColumnType>, PgError> {
        let msgs = self.client.simple_query(sql).await.map_err(PgError)?;
        let mut rows = Vec::new();
        let mut columns = None;
        let mut affected = 0;
        for m in msgs {
            match m {
                SimpleQueryMessage::RowDescription(cols) => columns = Some(cols.len()),
                SimpleQueryMessage::Row(row) => {
                    columns.get_or_insert(row.len());
                    rows.push(
                        (0..row.len())
                            .map(|i| match row.get(i) {
                                None => "NULL".to_string(),
                                Some("") => "(empty)".to_string(),
                                Some(v) => v.to_string(),
                            })
                            .collect(),
                    );
                }
                SimpleQueryMessage::CommandComplete(n) => affected = n,
                _ => {}
            }
        }
        match columns {
            Some(n) => Ok(DBOutput::Rows {
                types: self.column_types(sql, n).await?,
                rows,
            }),
            None => Ok(DBOutput::StatementComplete(affected)),
        }
    }

    async fn shutdown(&mut self) {}

    fn engine_name(&self) -> &str {
        "weir"
    }

    async fn sleep(dur: std::time::Duration) {
        tokio::time::sleep(dur).await
    }

    fn error_sql_state(err: &PgError) -> Option<String> {
        err.0.as_db_error().map(|d| d.code().code().to_string())
    }
}
