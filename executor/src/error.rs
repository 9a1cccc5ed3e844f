//! Executor errors, typed by what went wrong. The SQL layer (`weir_planner::error`)
//! is the one place that maps them to SQLSTATE codes: the executor never names one.

#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error("{0}")]
    DataFusion(#[from] datafusion::error::DataFusionError),
    #[error("{0}")]
    Arrow(#[from] arrow::error::ArrowError),
    #[error("{0}")]
    Storage(#[from] weir_storage::StorageError),
    #[error("{0}")]
    Overflow(String),
    #[error("{0}")]
    UniqueViolation(String),
    #[error("{0}")]
    NotNullViolation(String),
    #[error("{0}")]
    JobFailed(String),
    /// Another savepoint or restore is running.
    #[error("{0}")]
    ObjectInUse(String),
    /// A view the statement names does not exist (any more).
    #[error("{0}")]
    UndefinedTable(String),
    #[error("{0}")]
    UndefinedSavepoint(String),
    /// A retained checkpoint (or other named object) the statement names is not there.
    #[error("{0}")]
    UndefinedObject(String),
    #[error("{0}")]
    DuplicateObject(String),
    /// The object exists but cannot do this now (no checkpoints, being restored, ...).
    #[error("{0}")]
    NotInPrerequisiteState(String),
    /// A value the statement gave is not usable (a savepoint that does not fit, ...).
    #[error("{0}")]
    InvalidParameter(String),
    /// Saved state whose types do not match the operator's.
    #[error("{0}")]
    DatatypeMismatch(String),
    #[error("{0}")]
    Unsupported(String),
    /// An option or statement names a column the relation lacks.
    #[error("{0}")]
    UndefinedColumn(String),
    /// A table's definition contradicts itself (FORMAT UPSERT without a key).
    #[error("{0}")]
    InvalidTableDefinition(String),
    /// The statement's kind does not fit the object (writing an unstored source).
    #[error("{0}")]
    WrongObjectType(String),
    #[error("channel closed")]
    ChannelClosed,
    #[error("{0}")]
    Internal(String),
}

pub type Result<T> = std::result::Result<T, ExecError>;
