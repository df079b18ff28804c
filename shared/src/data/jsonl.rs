//! HF-style jsonl, one `{"idx","label","text_a","text_b"}` object per line (the `normalized/`
//! files), with the AdvGLUE annotations where a line has them.

use std::path::Path;

use serde_json::Value;

use super::json_fields::{adv_example_from_object, as_object};
use super::read::lines;
use super::{read_bytes, AdvExample, DataError, Example, Loaded, ReadOptions, Task};

/// Reads HF-style jsonl (`{"idx","label","text_a","text_b"}` per line) for `task`.
pub fn read_jsonl(path: impl AsRef<Path>, task: Task) -> Result<Vec<Example>, DataError> {
    let path = path.as_ref();
    parse_jsonl(path, &read_bytes(path)?, task, &ReadOptions::strict()).map(|l| l.rows)
}

/// Parses HF-style jsonl. Labels may be integers or names; `idx` defaults to the 0-based row.
pub fn parse_jsonl(
    path: &Path,
    bytes: &[u8],
    task: Task,
    opts: &ReadOptions,
) -> Result<Loaded<Example>, DataError> {
    parse_advglue_jsonl(path, bytes, task, opts).map(|l| l.map(|adv| adv.example))
}

/// Reads an AdvGLUE jsonl from `normalized/` (jsonl rows plus `method`, `data_construction`,
/// `original_<field>`).
pub fn read_advglue_jsonl(
    path: impl AsRef<Path>,
    task: Task,
) -> Result<Vec<AdvExample>, DataError> {
    let path = path.as_ref();
    parse_advglue_jsonl(path, &read_bytes(path)?, task, &ReadOptions::strict()).map(|l| l.rows)
}

/// Parses jsonl rows, keeping the AdvGLUE annotations where present (plain jsonl gives `None`s).
pub fn parse_advglue_jsonl(
    path: &Path,
    bytes: &[u8],
    task: Task,
    opts: &ReadOptions,
) -> Result<Loaded<AdvExample>, DataError> {
    let mut out = Loaded::new();
    for (row, (line, text)) in lines(path, bytes).enumerate() {
        let item = text.and_then(|text| {
            let value: Value = serde_json::from_str(text).map_err(|e| DataError::Json {
                path: path.to_path_buf(),
                line,
                message: e.to_string(),
            })?;
            let obj = as_object(path, line, &value)?;
            adv_example_from_object(path, line, obj, ("text_a", "text_b"), task, row as i64)
        });
        out.push(item, opts)?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::load_with;
    use crate::data::temp_file::TempFile;

    #[test]
    fn bad_jsonl_lines_name_line_and_can_be_skipped() {
        let mut bytes = br#"{"idx": 0, "label": 1, "text_a": "a", "text_b": "b"}
{"idx": 1, "label": 1, "text_a": "a", "text_b": "b"
{"idx": 2, "label": "maybe", "text_a": "a", "text_b": "b"}

{"idx": 3, "label": 0, "text_b": "b"}
"#
        .to_vec();
        bytes.extend_from_slice(
            b"{\"idx\": 4, \"label\": 0, \"text_a\": \"\xc3\", \"text_b\": \"b\"}\n",
        );
        bytes.extend_from_slice(br#"{"idx": 5, "label": 7, "text_a": "a", "text_b": "b"}"#);
        bytes.extend_from_slice(
            b"\n{\"idx\": 6, \"label\": \"entailment\", \"text_a\": \"a\", \"text_b\": \"b\"}",
        );
        let f = TempFile::new("bad.jsonl", &bytes);

        let err = read_jsonl(&f.0, Task::Qnli).unwrap_err().to_string();
        assert!(err.contains(&format!("{}:2: bad JSON", f.name())), "{err}");

        let loaded = load_with(&f.0, Task::Qnli, &ReadOptions::skipping()).unwrap();
        assert_eq!(
            loaded.rows.iter().map(|e| (e.idx, e.label)).collect::<Vec<_>>(),
            [(0, 1), (6, 0)]
        );
        assert_eq!(loaded.skipped_count(), 5);
        let msgs: Vec<String> = loaded.skipped.iter().map(|e| e.to_string()).collect();
        assert!(msgs[0].contains(":2: bad JSON"), "{}", msgs[0]);
        assert!(msgs[1].contains(":3: unknown label \"maybe\" for qnli"), "{}", msgs[1]);
        assert!(msgs[2].contains(":5: missing field \"text_a\""), "{}", msgs[2]);
        assert!(msgs[3].contains(":6: invalid UTF-8"), "{}", msgs[3]);
        assert!(msgs[4].contains(":7: unknown label \"7\""), "{}", msgs[4]);

        // A pair file read as SST-2 fails loudly instead of dropping text_b.
        let err = read_jsonl(&f.0, Task::Sst2).unwrap_err().to_string();
        assert!(err.contains(":1: sst2 takes one text"), "{err}");
    }
}
