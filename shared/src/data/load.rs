//! Reading any supported file: the reader is picked by extension and, for `.json`, by shape.

use std::path::Path;

use super::json_document::parse_document;
use super::{
    parse_advglue_json, parse_advglue_jsonl, parse_glue_tsv, parse_jsonl, parse_label_text,
    parse_train_subset_json, read_bytes, AdvExample, DataError, Example, Loaded, ReadOptions, Task,
};

/// Reads any supported file as examples of `task`, failing on the first bad row.
pub fn load(path: impl AsRef<Path>, task: Task) -> Result<Vec<Example>, DataError> {
    load_with(path, task, &ReadOptions::strict()).map(|l| l.rows)
}

/// Reads any supported file as examples of `task`: `.tsv` GLUE, `.jsonl` HF-style, `.txt`
/// label-text, `.json` either AdvGLUE (its `task` items only) or a train subset, told apart by
/// shape (AdvGLUE's members are arrays).
pub fn load_with(
    path: impl AsRef<Path>,
    task: Task,
    opts: &ReadOptions,
) -> Result<Loaded<Example>, DataError> {
    let path = path.as_ref();
    match extension(path).as_str() {
        "tsv" => parse_glue_tsv(path, &read_bytes(path)?, task, opts),
        "jsonl" => parse_jsonl(path, &read_bytes(path)?, task, opts),
        "txt" => parse_label_text(path, &read_bytes(path)?, task, opts),
        "json" => {
            let bytes = read_bytes(path)?;
            if is_advglue_document(path, &bytes)? {
                let mut all = parse_advglue_json(path, &bytes, opts)?;
                all.rows.retain(|adv| adv.task == task);
                Ok(all.map(|adv| adv.example))
            } else {
                parse_train_subset_json(path, &bytes, task, opts)
            }
        }
        _ => Err(unsupported(path)),
    }
}

/// Reads AdvGLUE items of `task` from `dev.json`/`dev_ann.json` or a normalised AdvGLUE jsonl.
pub fn load_advglue(path: impl AsRef<Path>, task: Task) -> Result<Vec<AdvExample>, DataError> {
    load_advglue_with(path, task, &ReadOptions::strict()).map(|l| l.rows)
}

/// [`load_advglue`] with options. From a `.json` holding every task, `skipped` also lists bad
/// rows of the other tasks: the file is checked as a whole.
pub fn load_advglue_with(
    path: impl AsRef<Path>,
    task: Task,
    opts: &ReadOptions,
) -> Result<Loaded<AdvExample>, DataError> {
    let path = path.as_ref();
    match extension(path).as_str() {
        "jsonl" => parse_advglue_jsonl(path, &read_bytes(path)?, task, opts),
        "json" => {
            let mut all = parse_advglue_json(path, &read_bytes(path)?, opts)?;
            all.rows.retain(|adv| adv.task == task);
            Ok(all)
        }
        _ => Err(unsupported(path)),
    }
}

fn extension(path: &Path) -> String {
    path.extension().and_then(|e| e.to_str()).unwrap_or("").to_ascii_lowercase()
}

fn unsupported(path: &Path) -> DataError {
    let message = if path.is_dir() {
        "is a directory, not a data file"
    } else if extension(path) == "arrow" {
        "Arrow files are not read; use the normalised jsonl (normalized/mnli_dev_*.jsonl)"
    } else {
        "unsupported file type (expected .tsv, .jsonl, .json or .txt)"
    };
    DataError::Unsupported { path: path.to_path_buf(), message: message.to_string() }
}

/// Whether a `.json` document is AdvGLUE-shaped: a non-empty object of arrays.
fn is_advglue_document(path: &Path, bytes: &[u8]) -> Result<bool, DataError> {
    let members = parse_document(path, bytes)?;
    Ok(!members.is_empty() && members.iter().all(|(_, v)| v.is_array()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::temp_file::TempFile;
    use crate::data::{read_advglue_json, read_glue_tsv, read_train_subset_json};

    #[test]
    fn bad_json_documents_name_line() {
        let subset = TempFile::new(
            "subset.json",
            br#"{
  "0": {"text_a": "a", "text_b": "b", "label": "0"},
  "1": {"text_a": "a",,}
}
"#,
        );
        let err = read_train_subset_json(&subset.0, Task::Qqp).unwrap_err().to_string();
        assert!(err.contains(&format!("{}:3: bad JSON", subset.name())), "{err}");

        // Row errors in a whole document get the line where the item starts.
        let text = r#"{
  "0": {"text_a": "a", "text_b": "b", "label": "entailment"},
  "1": {
    "text_a": "a {[\"",
    "text_b": "b",
    "label": "xyz"
  },
  "2": {"text_a": "c", "text_b": "d", "label": "neutral"},
  "x": {"text_a": "c", "text_b": "d", "label": "neutral"}
}
"#;
        let f = TempFile::new("labels.json", text.as_bytes());
        let err = read_train_subset_json(&f.0, Task::Mnli).unwrap_err().to_string();
        assert!(err.contains(&format!("{}:3: unknown label \"xyz\"", f.name())), "{err}");
        let loaded = load_with(&f.0, Task::Mnli, &ReadOptions::skipping()).unwrap();
        assert_eq!(
            loaded.rows.iter().map(|e| (e.idx, e.label)).collect::<Vec<_>>(),
            [(0, 0), (2, 1)]
        );
        assert_eq!(loaded.skipped_count(), 2);
        assert!(
            loaded.skipped[1].to_string().contains(":9: key \"x\" is not an integer"),
            "{}",
            loaded.skipped[1]
        );

        let adv = TempFile::new(
            "adv.json",
            br#"{"rte": [
 {"idx": 0, "sentence1": "a", "sentence2": "b", "label": 0},
 {"idx": 1, "sentence1": "a", "label": 1, "data_construction": "word"}
],
"sst2": [{"idx": 0, "sentence": "s", "label": 1, "data_construction": "phrase"}]}"#,
        );
        let err = read_advglue_json(&adv.0).unwrap_err().to_string();
        assert!(err.contains(&format!("{}:3: missing field \"sentence2\"", adv.name())), "{err}");
        let loaded = load_advglue_with(&adv.0, Task::Rte, &ReadOptions::skipping()).unwrap();
        assert_eq!(loaded.rows.len(), 1);
        assert_eq!(loaded.skipped_count(), 2);
        assert!(
            loaded.skipped[1].to_string().contains(":5: unknown attack level \"phrase\""),
            "{}",
            loaded.skipped[1]
        );

        let not_utf8 = TempFile::new("latin1.json", b"{\"0\": {\"text_a\": \"caf\xe9\"}}");
        let err = read_train_subset_json(&not_utf8.0, Task::Sst2).unwrap_err().to_string();
        assert!(err.contains(&format!("{}:1: bad JSON", not_utf8.name())), "{err}");

        let err =
            read_glue_tsv(Path::new("/no/such/file.tsv"), Task::Sst2).unwrap_err().to_string();
        assert!(err.contains("/no/such/file.tsv"), "{err}");
    }

    #[test]
    fn arrow_files_point_to_the_normalised_jsonl() {
        let err = load("glue/MNLI/validation_matched.arrow", Task::Mnli).unwrap_err();
        assert!(matches!(err, DataError::Unsupported { .. }), "{err}");
        assert!(err.to_string().contains("normalized/mnli_dev_"), "{err}");
    }
}
