//! `SqlError`: every error a client sees, with its Postgres SQLSTATE.
//!
//! DataFusion and Arrow errors are classified by their kind and message so that a
//! client gets `42P01` for an unknown table, `42703` for an unknown column, `42601` for a
//! syntax error and so on, instead of a generic internal error.

use datafusion::error::DataFusionError;
use weir_executor::ExecError;

pub mod sqlstate {
    pub const SYNTAX_ERROR: &str = "42601";
    pub const UNDEFINED_TABLE: &str = "42P01";
    pub const UNDEFINED_COLUMN: &str = "42703";
    pub const UNDEFINED_FUNCTION: &str = "42883";
    pub const DUPLICATE_TABLE: &str = "42P07";
    pub const DUPLICATE_COLUMN: &str = "42701";
    pub const DATATYPE_MISMATCH: &str = "42804";
    pub const INVALID_TEXT_REPRESENTATION: &str = "22P02";
    pub const DIVISION_BY_ZERO: &str = "22012";
    pub const NUMERIC_OUT_OF_RANGE: &str = "22003";
    pub const DATA_EXCEPTION: &str = "22000";
    pub const FEATURE_NOT_SUPPORTED: &str = "0A000";
    pub const UNIQUE_VIOLATION: &str = "23505";
    pub const NOT_NULL_VIOLATION: &str = "23502";
    pub const DEPENDENT_OBJECTS_STILL_EXIST: &str = "2BP01";
    pub const WRONG_OBJECT_TYPE: &str = "42809";
    pub const INVALID_PARAMETER_VALUE: &str = "22023";
    pub const UNDEFINED_OBJECT: &str = "42704";
    pub const INTERNAL_ERROR: &str = "XX000";
    /// Stored data that cannot be what it claims (a table log missing entries).
    pub const DATA_CORRUPTED: &str = "XX001";
    pub const OBJECT_NOT_IN_PREREQUISITE_STATE: &str = "55000";
    pub const PROTOCOL_VIOLATION: &str = "08P01";
    pub const STATEMENT_TOO_COMPLEX: &str = "54001";
    pub const INSUFFICIENT_PRIVILEGE: &str = "42501";
    pub const CANT_CHANGE_RUNTIME_PARAM: &str = "55P02";
    pub const INVALID_TABLE_DEFINITION: &str = "42P16";
    pub const INVALID_OBJECT_DEFINITION: &str = "42P17";
    pub const INVALID_FUNCTION_DEFINITION: &str = "42P13";
    pub const DUPLICATE_FUNCTION: &str = "42723";
    pub const INVALID_SCHEMA_NAME: &str = "3F000";
    pub const CHARACTER_NOT_IN_REPERTOIRE: &str = "22021";
    pub const BAD_COPY_FILE_FORMAT: &str = "22P04";
    pub const OBJECT_IN_USE: &str = "55006";
    pub const UNDEFINED_SAVEPOINT: &str = "3B001";
    pub const DUPLICATE_OBJECT: &str = "42710";
    pub const READ_ONLY_SQL_TRANSACTION: &str = "25006";
    pub const CANNOT_CONNECT_NOW: &str = "57P03";
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqlError {
    pub code: &'static str,
    pub message: String,
}

/// A parser error: nesting beyond the parser's recursion limit is a statement too
/// complex (54001, as Postgres's "stack depth limit exceeded"), anything else a syntax
/// error.
pub fn parser_error(e: &datafusion::sql::sqlparser::parser::ParserError) -> SqlError {
    use datafusion::sql::sqlparser::parser::ParserError;
    match e {
        ParserError::RecursionLimitExceeded => SqlError::new(
            sqlstate::STATEMENT_TOO_COMPLEX,
            "statement too complex: expressions are nested too deeply",
        ),
        other => SqlError::syntax(format!(
            "syntax error: {}",
            crate::statement::strip_parser_prefix(&other.to_string())
        )),
    }
}

impl SqlError {
    pub fn new(code: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
    pub fn unsupported(message: impl Into<String>) -> Self {
        Self::new(sqlstate::FEATURE_NOT_SUPPORTED, message)
    }
    pub fn syntax(message: impl Into<String>) -> Self {
        Self::new(sqlstate::SYNTAX_ERROR, message)
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(sqlstate::INTERNAL_ERROR, message)
    }
}

impl std::fmt::Display for SqlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.message, self.code)
    }
}

impl std::error::Error for SqlError {}

pub type SqlResult<T> = std::result::Result<T, SqlError>;

fn classify_message(msg: &str) -> &'static str {
    let m = msg.to_ascii_lowercase();
    if m.contains("table")
        && (m.contains("not found") || m.contains("doesn't exist") || m.contains("does not exist"))
    {
        sqlstate::UNDEFINED_TABLE
    } else if m.contains("no field named") || m.contains("column") && m.contains("not found") {
        sqlstate::UNDEFINED_COLUMN
    } else if m.contains("invalid function") || m.contains("function") && m.contains("not found") {
        sqlstate::UNDEFINED_FUNCTION
    } else if m.contains("divide by zero") || m.contains("division by zero") {
        sqlstate::DIVISION_BY_ZERO
    } else if m.contains("overflow") || m.contains("out of range") {
        sqlstate::NUMERIC_OUT_OF_RANGE
    } else if m.contains("cannot cast")
        || m.contains("cast error")
        || m.contains("can't cast")
        || m.contains("error parsing")
        || m.contains("invalid") && m.contains("value")
    {
        sqlstate::INVALID_TEXT_REPRESENTATION
    } else if m.contains("coerc")
        || m.contains("type")
            && (m.contains("mismatch")
                || m.contains("cannot be")
                || m.contains("not supported for")
                || m.contains("unsupported argument"))
        || m.contains("no function matches")
        || m.contains("signature")
    {
        sqlstate::DATATYPE_MISMATCH
    } else if m.contains("not implemented")
        || m.contains("unsupported")
        || m.contains("not supported")
    {
        sqlstate::FEATURE_NOT_SUPPORTED
    } else {
        sqlstate::INTERNAL_ERROR
    }
}

/// Removes DataFusion's wrapping ("Error during planning: ...") so messages read like a
/// database's, keeping the part that names the problem.
fn clean(msg: &str) -> String {
    let mut s = msg.trim().to_string();
    for prefix in [
        "Error during planning: ",
        "This feature is not implemented: ",
        "Schema error: ",
        "Arrow error: ",
        "Execution error: ",
        "Optimizer rule",
        "SQL error: ",
        "External error: ",
        "Invalid argument error: ",
        "Compute error: ",
        "Cast error: ",
        "Divide by zero error",
    ] {
        if let Some(rest) = s.strip_prefix(prefix) {
            if prefix == "Divide by zero error" {
                return "division by zero".into();
            }
            s = rest.trim().to_string();
        }
    }
    s
}

/// Postgres's wording for an unknown relation, from DataFusion's
/// "table 'weir.public.x' not found".
fn undefined_relation(msg: &str) -> Option<SqlError> {
    let start = msg.find("table '")? + 7;
    let rest = &msg[start..];
    let end = rest.find("' not found")?;
    let name = rest[..end].rsplit('.').next().unwrap_or(&rest[..end]);
    Some(SqlError::new(
        sqlstate::UNDEFINED_TABLE,
        format!("relation \"{name}\" does not exist"),
    ))
}

/// A `SqlError` that one of Weir's functions raised (with Postgres's SQLSTATE) somewhere
/// in `e`'s chain of causes (DataFusion and Arrow wrap it as it travels).
fn raised_sql_error(e: &(dyn std::error::Error + 'static)) -> Option<SqlError> {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if let Some(s) = err.downcast_ref::<SqlError>() {
            return Some(s.clone());
        }
        cur = err.source();
    }
    None
}

impl From<DataFusionError> for SqlError {
    fn from(e: DataFusionError) -> Self {
        if let Some(err) = raised_sql_error(&e) {
            return err;
        }
        if let Some(err) = undefined_relation(&e.to_string()) {
            return err;
        }
        let e = e.find_root().clone_shallow();
        match &e {
            DataFusionError::SQL(pe, _) => parser_error(pe),
            DataFusionError::NotImplemented(m) => SqlError::unsupported(m.clone()),
            DataFusionError::SchemaError(se, _) => {
                let msg = se.to_string();
                let code = classify_message(&msg);
                SqlError::new(
                    if code == sqlstate::INTERNAL_ERROR {
                        sqlstate::UNDEFINED_COLUMN
                    } else {
                        code
                    },
                    clean(&msg),
                )
            }
            DataFusionError::ArrowError(ae, _) => match ae.as_ref() {
                arrow::error::ArrowError::DivideByZero => {
                    SqlError::new(sqlstate::DIVISION_BY_ZERO, "division by zero")
                }
                other => {
                    let msg = other.to_string();
                    SqlError::new(classify_message(&msg), clean(&msg))
                }
            },
            other => {
                let msg = other.to_string();
                let code = classify_message(&msg);
                let code = if code == sqlstate::INTERNAL_ERROR
                    && matches!(other, DataFusionError::Plan(_))
                {
                    sqlstate::SYNTAX_ERROR
                } else {
                    code
                };
                SqlError::new(code, clean(&msg))
            }
        }
    }
}

trait CloneShallow {
    fn clone_shallow(&self) -> DataFusionError;
}

impl CloneShallow for DataFusionError {
    fn clone_shallow(&self) -> DataFusionError {
        // DataFusionError is not Clone; re-wrap by message while keeping the variant kinds
        // we classify on.
        match self {
            DataFusionError::NotImplemented(m) => DataFusionError::NotImplemented(m.clone()),
            DataFusionError::Plan(m) => DataFusionError::Plan(m.clone()),
            DataFusionError::Execution(m) => DataFusionError::Execution(m.clone()),
            DataFusionError::SQL(e, _) => DataFusionError::Plan(format!("syntax error: {e}")),
            DataFusionError::ArrowError(e, _) => match e.as_ref() {
                arrow::error::ArrowError::DivideByZero => DataFusionError::ArrowError(
                    Box::new(arrow::error::ArrowError::DivideByZero),
                    None,
                ),
                other => DataFusionError::Execution(other.to_string()),
            },
            other => DataFusionError::Execution(other.to_string()),
        }
    }
}

impl From<ExecError> for SqlError {
    fn from(e: ExecError) -> Self {
        match e {
            ExecError::DataFusion(d) => d.into(),
            ExecError::UniqueViolation(m) => SqlError::new(sqlstate::UNIQUE_VIOLATION, m),
            ExecError::NotNullViolation(m) => SqlError::new(sqlstate::NOT_NULL_VIOLATION, m),
            ExecError::Overflow(m) => SqlError::new(sqlstate::NUMERIC_OUT_OF_RANGE, m),
            ExecError::ObjectInUse(m) => SqlError::new(sqlstate::OBJECT_IN_USE, m),
            ExecError::UndefinedTable(m) => SqlError::new(sqlstate::UNDEFINED_TABLE, m),
            ExecError::UndefinedSavepoint(m) => SqlError::new(sqlstate::UNDEFINED_SAVEPOINT, m),
            ExecError::UndefinedObject(m) => SqlError::new(sqlstate::UNDEFINED_OBJECT, m),
            ExecError::DuplicateObject(m) => SqlError::new(sqlstate::DUPLICATE_OBJECT, m),
            ExecError::NotInPrerequisiteState(m) => {
                SqlError::new(sqlstate::OBJECT_NOT_IN_PREREQUISITE_STATE, m)
            }
            ExecError::InvalidParameter(m) => SqlError::new(sqlstate::INVALID_PARAMETER_VALUE, m),
            ExecError::DatatypeMismatch(m) => SqlError::new(sqlstate::DATATYPE_MISMATCH, m),
            ExecError::Unsupported(m) => SqlError::new(sqlstate::FEATURE_NOT_SUPPORTED, m),
            ExecError::WrongObjectType(m) => SqlError::new(sqlstate::WRONG_OBJECT_TYPE, m),
            ExecError::UndefinedColumn(m) => SqlError::new(sqlstate::UNDEFINED_COLUMN, m),
            ExecError::InvalidTableDefinition(m) => {
                SqlError::new(sqlstate::INVALID_TABLE_DEFINITION, m)
            }
            ExecError::JobFailed(m) => SqlError::new(sqlstate::OBJECT_NOT_IN_PREREQUISITE_STATE, m),
            ExecError::Storage(weir_storage::StorageError::Fenced(m)) => SqlError::new(
                sqlstate::READ_ONLY_SQL_TRANSACTION,
                format!("this member is no longer the leader: {m}"),
            ),
            ExecError::Storage(e @ weir_storage::StorageError::Corrupt(_)) => {
                SqlError::new(sqlstate::DATA_CORRUPTED, e.to_string())
            }
            ExecError::Storage(e @ weir_storage::StorageError::Unavailable(_)) => {
                SqlError::new(sqlstate::CANNOT_CONNECT_NOW, e.to_string())
            }
            ExecError::Arrow(a) => {
                if let Some(err) = raised_sql_error(&a) {
                    return err;
                }
                let msg = a.to_string();
                SqlError::new(classify_message(&msg), clean(&msg))
            }
            other => SqlError::internal(other.to_string()),
        }
    }
}

impl From<arrow::error::ArrowError> for SqlError {
    fn from(e: arrow::error::ArrowError) -> Self {
        ExecError::Arrow(e).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_sqlstate_a_function_raised() {
        let raised = SqlError::new("22007", "invalid value \"x\" for \"YYYY\"");
        let external = DataFusionError::External(Box::new(raised.clone()));
        let wrapped = DataFusionError::ArrowError(
            Box::new(arrow::error::ArrowError::ExternalError(Box::new(external))),
            None,
        );
        assert_eq!(SqlError::from(wrapped), raised);
    }

    #[test]
    fn classifies_common_errors() {
        let e: SqlError = DataFusionError::Plan("table 'x' not found".into()).into();
        assert_eq!(e.code, sqlstate::UNDEFINED_TABLE);
        let e: SqlError = DataFusionError::NotImplemented("x".into()).into();
        assert_eq!(e.code, sqlstate::FEATURE_NOT_SUPPORTED);
        let e: SqlError = ExecError::UniqueViolation("dup".into()).into();
        assert_eq!(e.code, sqlstate::UNIQUE_VIOLATION);
    }
}
