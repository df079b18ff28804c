//! What every reader shares: strictness ([`ReadOptions`]), what it kept and skipped
//! ([`Loaded`]), a file's bytes, and its lines.

use std::path::Path;

use super::DataError;

/// How strict a reader is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadOptions {
    /// Collect bad rows (bad label, bad JSON line, invalid UTF-8, ...) in [`Loaded::skipped`]
    /// and keep going, instead of failing on the first. Problems that spoil the whole file
    /// (unreadable file, missing header column, a JSON document that does not parse) still fail.
    pub skip_bad_rows: bool,
}

impl ReadOptions {
    /// Fail on the first bad row (the default).
    pub fn strict() -> Self {
        Self { skip_bad_rows: false }
    }

    /// Keep the good rows and report the bad ones.
    pub fn skipping() -> Self {
        Self { skip_bad_rows: true }
    }
}

/// The rows a reader kept, and the errors of the rows it skipped.
#[derive(Debug)]
pub struct Loaded<T> {
    pub rows: Vec<T>,
    pub skipped: Vec<DataError>,
}

impl<T> Loaded<T> {
    pub(super) fn new() -> Self {
        Self { rows: Vec::new(), skipped: Vec::new() }
    }

    /// Number of rows skipped.
    pub fn skipped_count(&self) -> usize {
        self.skipped.len()
    }

    pub(super) fn map<U>(self, f: impl FnMut(T) -> U) -> Loaded<U> {
        Loaded { rows: self.rows.into_iter().map(f).collect(), skipped: self.skipped }
    }

    /// Keeps a row, or handles a bad row as `opts` says.
    pub(super) fn push(
        &mut self,
        row: Result<T, DataError>,
        opts: &ReadOptions,
    ) -> Result<(), DataError> {
        match row {
            Ok(row) => self.rows.push(row),
            Err(e) if opts.skip_bad_rows => self.skipped.push(e),
            Err(e) => return Err(e),
        }
        Ok(())
    }
}

/// A file's bytes, with the path in the error.
pub fn read_bytes(path: impl AsRef<Path>) -> Result<Vec<u8>, DataError> {
    let path = path.as_ref();
    std::fs::read(path).map_err(|source| DataError::Io { path: path.to_path_buf(), cause: source })
}

/// Non-blank lines as `(1-based line number, text)`, each checked for UTF-8 on its own so one
/// bad byte costs one row, not the file. Strips `\n` and a trailing `\r` only: SST-2 sentences
/// end with a space that must be kept.
pub(super) fn lines<'a>(
    path: &'a Path,
    bytes: &'a [u8],
) -> impl Iterator<Item = (usize, Result<&'a str, DataError>)> + 'a {
    bytes.split(|&b| b == b'\n').enumerate().filter_map(move |(i, raw)| {
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        if raw.iter().all(u8::is_ascii_whitespace) {
            return None;
        }
        let line = i + 1;
        let text = std::str::from_utf8(raw)
            .map_err(|_| DataError::InvalidUtf8 { path: path.to_path_buf(), line });
        Some((line, text))
    })
}
