//! AdvGLUE `dev.json` and the annotated `dev_ann.json`: every task's items in one document.

use std::path::Path;

use super::error::bad_row;
use super::json_document::{parse_document, value_lines};
use super::json_fields::{adv_example_from_object, as_object};
use super::{read_bytes, AdvExample, DataError, Loaded, ReadOptions, Task};

/// Reads AdvGLUE `dev.json` or `dev_ann.json`: every task, in file order.
pub fn read_advglue_json(path: impl AsRef<Path>) -> Result<Vec<AdvExample>, DataError> {
    let path = path.as_ref();
    parse_advglue_json(path, &read_bytes(path)?, &ReadOptions::strict()).map(|l| l.rows)
}

/// Parses `{"sst2": [{"idx","sentence","label", ...}], "qqp": [...], ...}`. The annotated
/// file adds `method`, `data_construction` and `original_<field>`; the plain one gives `None`s.
pub fn parse_advglue_json(
    path: &Path,
    bytes: &[u8],
    opts: &ReadOptions,
) -> Result<Loaded<AdvExample>, DataError> {
    let members = parse_document(path, bytes)?;
    let task_lines = value_lines(bytes, 1);
    let item_lines = value_lines(bytes, 2);
    let mut item_lines = item_lines.iter().copied();
    let mut out = Loaded::new();
    for (i, (key, items)) in members.iter().enumerate() {
        let task_line = task_lines.get(i).copied().unwrap_or(1);
        // A wrong key or shape spoils a whole task, not one row, so it fails even when skipping.
        let task: Task = key
            .parse()
            .map_err(|_| bad_row(path, task_line, format!("unknown AdvGLUE task {key:?}")))?;
        let items = items
            .as_array()
            .ok_or_else(|| bad_row(path, task_line, format!("{key:?} is not an array")))?;
        let (field_a, field_b) = task.advglue_fields();
        for (row, item) in items.iter().enumerate() {
            let line = item_lines.next().unwrap_or(task_line);
            let adv = as_object(path, line, item).and_then(|obj| {
                let text_fields = (field_a, field_b.unwrap_or(""));
                adv_example_from_object(path, line, obj, text_fields, task, row as i64)
            });
            out.push(adv, opts)?;
        }
    }
    Ok(out)
}
