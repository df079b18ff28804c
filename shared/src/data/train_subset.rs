//! GLUE-train subsets (`glue_train_subsets/*/{train,dev}.json`): `{"<i>": {"text_a","text_b",
//! "label"}}`.

use std::path::Path;

use super::error::bad_row;
use super::json_document::{parse_document, value_lines};
use super::json_fields::{as_object, example_from_object};
use super::{read_bytes, DataError, Example, Loaded, ReadOptions, Task};

/// Reads a GLUE-train subset (`glue_train_subsets/*/{train,dev}.json`) for `task`.
pub fn read_train_subset_json(
    path: impl AsRef<Path>,
    task: Task,
) -> Result<Vec<Example>, DataError> {
    let path = path.as_ref();
    parse_train_subset_json(path, &read_bytes(path)?, task, &ReadOptions::strict()).map(|l| l.rows)
}

/// Parses `{"<i>": {"text_a","text_b","label"}}`; the key becomes `idx`, labels are names or
/// integers (QQP's are `"0"`/`"1"`).
pub fn parse_train_subset_json(
    path: &Path,
    bytes: &[u8],
    task: Task,
    opts: &ReadOptions,
) -> Result<Loaded<Example>, DataError> {
    let members = parse_document(path, bytes)?;
    let lines = value_lines(bytes, 1);
    let mut out = Loaded::new();
    for (i, (key, value)) in members.iter().enumerate() {
        let line = lines.get(i).copied().unwrap_or(1);
        let example = key
            .trim()
            .parse::<i64>()
            .map_err(|_| bad_row(path, line, format!("key {key:?} is not an integer index")))
            .and_then(|idx| {
                let obj = as_object(path, line, value)?;
                example_from_object(path, line, obj, ("text_a", "text_b"), task, idx)
            });
        out.push(example, opts)?;
    }
    Ok(out)
}
