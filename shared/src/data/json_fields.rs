//! Fields of a JSON object as the JSON readers need them: strings, the attack level, and a
//! whole [`Example`]. Errors name the file and the line where the object starts.

use std::path::Path;

use serde_json::{Map, Value};

use super::error::{bad_row, unknown_label};
use super::{AdvExample, AttackLevel, DataError, Example, Task};

pub(super) fn as_object<'v>(
    path: &Path,
    line: usize,
    value: &'v Value,
) -> Result<&'v Map<String, Value>, DataError> {
    value.as_object().ok_or_else(|| bad_row(path, line, "expected a JSON object"))
}

/// `obj[name]` as a string; absent or `null` is `None`.
pub(super) fn optional_string(
    path: &Path,
    line: usize,
    obj: &Map<String, Value>,
    name: &str,
) -> Result<Option<String>, DataError> {
    match obj.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(bad_row(path, line, format!("field {name:?} is not a string: {other}"))),
    }
}

pub(super) fn required_string(
    path: &Path,
    line: usize,
    obj: &Map<String, Value>,
    name: &str,
) -> Result<String, DataError> {
    optional_string(path, line, obj, name)?.ok_or_else(|| DataError::MissingField {
        path: path.to_path_buf(),
        line,
        field: name.to_string(),
    })
}

fn attack_level(
    path: &Path,
    line: usize,
    obj: &Map<String, Value>,
) -> Result<Option<AttackLevel>, DataError> {
    optional_string(path, line, obj, "data_construction")?
        .map(|s| s.parse().map_err(|e: DataError| bad_row(path, line, e.to_string())))
        .transpose()
}

/// An [`Example`] from a JSON object with text fields `fields.0` (and `fields.1` for pair
/// tasks), `label` and optionally `idx` (else `default_idx`).
pub(super) fn example_from_object(
    path: &Path,
    line: usize,
    obj: &Map<String, Value>,
    fields: (&str, &str),
    task: Task,
    default_idx: i64,
) -> Result<Example, DataError> {
    let text_a = required_string(path, line, obj, fields.0)?;
    let text_b = if task.is_pair() {
        Some(required_string(path, line, obj, fields.1)?)
    } else if optional_string(path, line, obj, fields.1)?.is_some() {
        // A second text in a single-sentence file means the wrong task was passed.
        return Err(bad_row(
            path,
            line,
            format!("{task} takes one text, but {:?} is set", fields.1),
        ));
    } else {
        None
    };
    let label = match obj.get("label") {
        None | Some(Value::Null) => {
            return Err(DataError::MissingField {
                path: path.to_path_buf(),
                line,
                field: "label".into(),
            })
        }
        Some(Value::String(s)) => {
            task.parse_label(s).ok_or_else(|| unknown_label(path, line, s, task))?
        }
        Some(Value::Number(n)) => n
            .as_u64()
            .and_then(|n| usize::try_from(n).ok())
            .filter(|&n| n < task.num_labels())
            .ok_or_else(|| unknown_label(path, line, &n.to_string(), task))?,
        Some(other) => return Err(unknown_label(path, line, &other.to_string(), task)),
    };
    let idx = match obj.get("idx") {
        None | Some(Value::Null) => default_idx,
        Some(Value::Number(n)) => {
            n.as_i64().ok_or_else(|| bad_row(path, line, format!("idx {n} is not an integer")))?
        }
        Some(Value::String(s)) => s
            .trim()
            .parse()
            .map_err(|_| bad_row(path, line, format!("idx {s:?} is not an integer")))?,
        Some(other) => return Err(bad_row(path, line, format!("idx {other} is not an integer"))),
    };
    Ok(Example { idx, text_a, text_b, label })
}

/// An [`AdvExample`]: the [`Example`] read from `text_fields` as [`example_from_object`] does,
/// plus the annotations an AdvGLUE item may carry (`method`, `data_construction`, and
/// `original_<field>` named after the task's AdvGLUE fields); absent annotations are `None`.
pub(super) fn adv_example_from_object(
    path: &Path,
    line: usize,
    obj: &Map<String, Value>,
    text_fields: (&str, &str),
    task: Task,
    default_idx: i64,
) -> Result<AdvExample, DataError> {
    let original = |name: &str| optional_string(path, line, obj, &format!("original_{name}"));
    let (field_a, field_b) = task.advglue_fields();
    let original_a = original(field_a)?;
    let original_b = match field_b {
        Some(b) => original(b)?,
        None => None,
    };
    Ok(AdvExample {
        example: example_from_object(path, line, obj, text_fields, task, default_idx)?,
        task,
        method: optional_string(path, line, obj, "method")?,
        level: attack_level(path, line, obj)?,
        original_a,
        original_b,
    })
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::data::{parse_advglue_json, parse_advglue_jsonl, AttackLevel, ReadOptions, Task};

    /// Both AdvGLUE readers keep a pair item's annotations: both originals (named after the
    /// task's fields), the method and the level.
    #[test]
    fn both_advglue_readers_keep_a_pair_items_annotations() {
        let annotations = r#""method": "TextFooler", "data_construction": "word",
            "original_question": "Who wrote it?", "original_sentence": "She wrote it.""#;
        let document = format!(
            r#"{{"qnli": [{{"idx": 7, "label": 1, "question": "Who wrot it?",
            "sentence": "She wrote it.", {annotations}}}]}}"#
        );
        let line = format!(
            r#"{{"idx": 7, "label": 1, "text_a": "Who wrot it?", "text_b": "She wrote it.", {}}}"#,
            annotations.replace('\n', " ")
        );
        let opts = ReadOptions::strict();
        let from_json = parse_advglue_json(Path::new("dev_ann.json"), document.as_bytes(), &opts);
        let from_jsonl =
            parse_advglue_jsonl(Path::new("qnli.jsonl"), line.as_bytes(), Task::Qnli, &opts);
        for items in [from_json.unwrap().rows, from_jsonl.unwrap().rows] {
            let item = &items[0];
            assert_eq!((item.task, item.example.idx, item.example.label), (Task::Qnli, 7, 1));
            assert_eq!(item.example.text_a, "Who wrot it?");
            assert_eq!(item.original_a.as_deref(), Some("Who wrote it?"));
            assert_eq!(item.original_b.as_deref(), Some("She wrote it."));
            assert_eq!(item.method.as_deref(), Some("TextFooler"));
            assert_eq!(item.level, Some(AttackLevel::Word));
        }
    }
}
