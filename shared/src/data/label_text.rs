//! `label<space>text` lines: TextFooler's IMDB inputs.

use std::path::Path;

use super::error::{bad_row, unknown_label};
use super::read::lines;
use super::{read_bytes, DataError, Example, Loaded, ReadOptions, Task};

/// Reads `label<space>text` lines (TextFooler's `imdb` file: clean IMDB test reviews), with
/// labels as `task` reads them; IMDB is binary sentiment, so pass [`Task::Sst2`].
pub fn read_label_text(path: impl AsRef<Path>, task: Task) -> Result<Vec<Example>, DataError> {
    let path = path.as_ref();
    parse_label_text(path, &read_bytes(path)?, task, &ReadOptions::strict()).map(|l| l.rows)
}

/// Parses `label<space>text` lines; `idx` is the 0-based row.
pub fn parse_label_text(
    path: &Path,
    bytes: &[u8],
    task: Task,
    opts: &ReadOptions,
) -> Result<Loaded<Example>, DataError> {
    let mut out = Loaded::new();
    for (row, (line, text)) in lines(path, bytes).enumerate() {
        let example = text.and_then(|text| {
            let (label, text) =
                text.split_once(' ').ok_or_else(|| bad_row(path, line, "expected `label text`"))?;
            let label =
                task.parse_label(label).ok_or_else(|| unknown_label(path, line, label, task))?;
            Ok(Example { idx: row as i64, text_a: text.to_string(), text_b: None, label })
        });
        out.push(example, opts)?;
    }
    Ok(out)
}
