//! What goes wrong reading data. Row errors name the file and its 1-based line.

use std::path::{Path, PathBuf};

use super::Task;

/// What went wrong reading data; row errors name `file:line` (1-based).
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    // Not a `source`: anyhow would print the OS error twice (see crate::Error::Io).
    #[error("{path}: {cause}")]
    Io { path: PathBuf, cause: std::io::Error },
    #[error("{path}:{line}: invalid UTF-8")]
    InvalidUtf8 { path: PathBuf, line: usize },
    #[error("{path}:{line}: bad JSON: {message}")]
    Json { path: PathBuf, line: usize, message: String },
    #[error("{path}:{line}: missing column {column} for {task}; header has: {header}")]
    MissingColumn { path: PathBuf, line: usize, column: String, task: Task, header: String },
    #[error("{path}:{line}: missing field {field:?}")]
    MissingField { path: PathBuf, line: usize, field: String },
    #[error("{path}:{line}: unknown label {label:?} for {task} \
             (expected one of {}, or an integer below {})",
        .task.label_names().join(", "), .task.num_labels())]
    UnknownLabel { path: PathBuf, line: usize, label: String, task: Task },
    #[error("{path}:{line}: {message}")]
    BadRow { path: PathBuf, line: usize, message: String },
    #[error("{path}: {message}")]
    Unsupported { path: PathBuf, message: String },
    #[error("unknown task {0:?} (expected sst2, qqp, qnli, mnli, mnli-mm or rte)")]
    UnknownTask(String),
    #[error("unknown attack level {0:?} (expected word, sentence or human)")]
    UnknownAttackLevel(String),
}

pub(super) fn bad_row(path: &Path, line: usize, message: impl Into<String>) -> DataError {
    DataError::BadRow { path: path.to_path_buf(), line, message: message.into() }
}

pub(super) fn unknown_label(path: &Path, line: usize, label: &str, task: Task) -> DataError {
    DataError::UnknownLabel { path: path.to_path_buf(), line, label: label.to_string(), task }
}
