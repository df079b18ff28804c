//! Small files for the readers' error tests.

use std::path::PathBuf;

/// A file under the temp dir, unique to this process and test, removed when dropped.
pub(super) struct TempFile(pub(super) PathBuf);

impl TempFile {
    pub(super) fn new(name: &str, contents: &[u8]) -> Self {
        let path = std::env::temp_dir().join(format!("imbert-data-{}-{name}", std::process::id()));
        std::fs::write(&path, contents).unwrap();
        TempFile(path)
    }

    pub(super) fn name(&self) -> String {
        self.0.display().to_string()
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
