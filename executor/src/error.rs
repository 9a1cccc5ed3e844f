//! Executor errors.

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
    /// A statement refused with a specific SQLSTATE (savepoints' errors, say).
    #[error("{1}")]
    Rejected(&'static str, String),
    #[error("channel closed")]
    ChannelClosed,
    #[error("{0}")]
    Internal(String),
}

pub type Result<T> = std::result::Result<T, ExecError>;
