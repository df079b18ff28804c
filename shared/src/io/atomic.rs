//! Files and directories replaced whole: written beside their place, then renamed, so that a
//! reader (or a process killed half-way) never sees half of one.

use std::path::{Path, PathBuf};

use crate::Error;

/// Writes a file through a temporary sibling and a rename, so readers never see half of it.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    let tmp = sibling(path, "tmp");
    std::fs::write(&tmp, bytes).map_err(|e| Error::io(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| Error::io(path, e))
}

/// `.NAME.TAG-PID` beside `path`: where a write in progress (`tmp`) or a replaced directory
/// (`old`) lives until it is renamed or removed.
pub fn sibling(path: &Path, tag: &str) -> PathBuf {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    path.with_file_name(format!(".{name}.{tag}-{}", std::process::id()))
}

/// Moves the finished `tmp` directory to `dir`, replacing an older one (the old one is moved
/// aside first, so `dir` is always either the old or the new directory, never a mix).
pub fn replace_dir(tmp: &Path, dir: &Path) -> Result<(), Error> {
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
    }
    if dir.exists() {
        let old = sibling(dir, "old");
        std::fs::rename(dir, &old).map_err(|e| Error::io(dir, e))?;
        std::fs::rename(tmp, dir).map_err(|e| Error::io(dir, e))?;
        std::fs::remove_dir_all(&old).map_err(|e| Error::io(&old, e))?;
    } else {
        std::fs::rename(tmp, dir).map_err(|e| Error::io(dir, e))?;
    }
    Ok(())
}

/// Undoes what a kill inside [`replace_dir`] or a write through [`sibling`] left behind: when
/// `dir` is missing and the version moved aside (`old`) exists, it is moved back (the new one
/// may be complete, but the old one is known to be); then every `tmp` and `old` sibling of
/// `dir`, from any process, is removed.
pub fn recover_dir(dir: &Path) -> Result<(), Error> {
    let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let parent = dir.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let (tmp, old) = (format!(".{name}.tmp-"), format!(".{name}.old-"));
    let entries = std::fs::read_dir(parent).map_err(|e| Error::io(parent, e))?;
    let mut leftovers: Vec<(bool, PathBuf)> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let file = e.file_name().to_string_lossy().into_owned();
            let is_old = file.starts_with(&old);
            (is_old || file.starts_with(&tmp)).then(|| (is_old, e.path()))
        })
        .collect();
    leftovers.sort();
    if !dir.exists() {
        if let Some((_, aside)) = leftovers.iter().find(|(is_old, _)| *is_old) {
            std::fs::rename(aside, dir).map_err(|e| Error::io(aside, e))?;
        }
    }
    for (_, path) in leftovers.iter().filter(|(_, p)| p.exists()) {
        let removed =
            if path.is_dir() { std::fs::remove_dir_all(path) } else { std::fs::remove_file(path) };
        removed.map_err(|e| Error::io(path, e))?;
    }
    Ok(())
}
