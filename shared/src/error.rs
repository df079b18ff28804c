//! The one error type of the library: every variant names the file or tensor it is about.

use std::path::PathBuf;

/// Errors from loading, saving and running models.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    // The OS error is part of the message and not a `source`: a chain printed by anyhow would
    // repeat it ("No such file or directory" twice).
    #[error("{path}: {cause}")]
    Io { path: PathBuf, cause: std::io::Error },
    #[error("{path}:{line}: invalid JSON: {message}")]
    Json { path: PathBuf, line: usize, message: String },
    #[error("{path}: invalid config: {message}")]
    Config { path: PathBuf, message: String },
    #[error("{path}: {message}")]
    Checkpoint { path: PathBuf, message: String },
    #[error("tensor `{key}` has shape {found:?}, expected {expected:?}")]
    Shape { key: String, expected: Vec<usize>, found: Vec<usize> },
    #[error("tensor `{key}` is missing from {path}")]
    MissingTensor { key: String, path: PathBuf },
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    #[error("invalid connection spec {spec:?}: {message}")]
    ConnectionSpec { spec: String, message: String },
    #[error("{0}")]
    Input(String),
}

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io { path: path.into(), cause: source }
    }
}
