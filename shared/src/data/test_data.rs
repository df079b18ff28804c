//! Where tests find data files: the small samples committed under `tests/fixtures/data`, and the
//! full benchmark data (`../shared/data` beside the repository, or `$IMBERT_DATA`), which a fresh
//! clone does not have. Both keep the layout of `../shared/data`, so the same paths work on
//! either. For tests only; the paths are fixed when this crate is compiled.

use std::path::PathBuf;

/// The committed samples, cut from the full data as `tests/fixtures/data/SOURCES.md` says.
pub fn fixtures_dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/data"))
}

/// The full data: `$IMBERT_DATA` when set, else `../shared/data` beside the repository; `None`
/// when that directory does not exist.
pub fn full_data_dir() -> Option<PathBuf> {
    let dir = match std::env::var_os("IMBERT_DATA") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/data")),
    };
    dir.is_dir().then_some(dir)
}

/// [`full_data_dir`], or `None` after telling the test log that `test` is skipped: tests that
/// need the full data return early on a fresh clone instead of failing.
pub fn full_data_or_skip(test: &str) -> Option<PathBuf> {
    let dir = full_data_dir();
    if dir.is_none() {
        eprintln!("skipping {test}: ../shared/data not found (set IMBERT_DATA)");
    }
    dir
}
