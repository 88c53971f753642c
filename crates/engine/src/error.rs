//! The engine's error type: every failure names what went wrong and, for files, which file.

use crate::config::ConfigError;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("{path}: {message}")]
    BadFile { path: PathBuf, message: String },
    #[error("unsupported model: {0}")]
    Unsupported(String),
    /// An environment variable the engine reads holds a value it cannot use.
    #[error("{0}")]
    BadEnvironment(String),
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    #[error("invalid engine configuration: {0}")]
    InvalidConfig(#[from] ConfigError),
    /// A configuration refused as the operator gave it: named by its command-line flag.
    #[error("{} {}: {}", .0.flag(), .0.value, .0.reason)]
    InvalidFlag(ConfigError),
    #[error("the waiting queue is full ({0} requests); retry later")]
    Overloaded(usize),
    #[error("the engine has stopped")]
    EngineStopped,
    #[error("tensor operation failed: {0}")]
    Tensor(#[from] candle_core::Error),
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
}

impl EngineError {
    pub fn bad_file(path: impl Into<PathBuf>, message: impl std::fmt::Display) -> Self {
        Self::BadFile {
            path: path.into(),
            message: message.to_string(),
        }
    }
}

pub type Result<T> = std::result::Result<T, EngineError>;
