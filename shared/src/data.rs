//! The data path for GLUE and AdvGLUE: tasks and their label sets, readers for every file format
//! the benchmark data comes in, and seeded splits for the low-resource setting.
//!
//! Formats (one reader per format, each `read_*` from a file and `parse_*` from bytes, so the
//! wasm demo can use the same code on fetched files):
//! - [`read_glue_tsv`]: GLUE TSVs as published (QUOTE_NONE, header row, columns picked by name).
//! - [`read_jsonl`] / [`read_advglue_jsonl`]: HF-style `{"idx","label","text_a","text_b"}` lines.
//! - [`read_train_subset_json`]: `{"<i>": {"text_a","text_b","label"}}` GLUE-train subsets.
//! - [`read_advglue_json`]: AdvGLUE `dev.json` and the annotated `dev_ann.json`.
//! - [`read_label_text`]: `label<space>text` lines (TextFooler's IMDB inputs).
//! - [`load`] / [`load_advglue`] pick one of them by extension and shape.
//!
//! Labels are always integers in HF `glue` order ([`Task::label_names`]). Errors name
//! `file:line`; with [`ReadOptions::skip_bad_rows`] bad rows are collected instead of failing.
//! Arrow files (HF `save_to_disk`) are not parsed: the normalised jsonl covers MNLI dev.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::de::{Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Training examples per task in the paper's low-resource setting.
pub const LOW_RESOURCE_TRAIN: usize = 1000;
/// Validation examples per task in the paper's low-resource setting.
pub const LOW_RESOURCE_VALIDATION: usize = 500;
/// Share of examples that [`split_train_validation`] puts in train (the paper's 8:2 split).
pub const DEFAULT_TRAIN_FRACTION: f64 = 0.8;

// ---------------------------------------------------------------------------------------------
// Tasks, examples, errors
// ---------------------------------------------------------------------------------------------

/// A GLUE task as AdvGLUE evaluates it; MNLI's mismatched dev set is its own task there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Task {
    Sst2,
    Qqp,
    Qnli,
    Mnli,
    /// AdvGLUE's `mnli-mm`: MNLI evaluated on the mismatched genres.
    MnliMismatched,
    Rte,
}

impl Task {
    /// Every task, in AdvGLUE's order.
    pub const ALL: [Task; 6] =
        [Task::Sst2, Task::Qqp, Task::Mnli, Task::MnliMismatched, Task::Qnli, Task::Rte];

    /// The AdvGLUE key: `sst2`, `qqp`, `qnli`, `mnli`, `mnli-mm`, `rte`.
    pub fn name(self) -> &'static str {
        match self {
            Task::Sst2 => "sst2",
            Task::Qqp => "qqp",
            Task::Qnli => "qnli",
            Task::Mnli => "mnli",
            Task::MnliMismatched => "mnli-mm",
            Task::Rte => "rte",
        }
    }

    /// Label names in HF `glue` order: label `i` is `label_names()[i]`.
    pub fn label_names(self) -> &'static [&'static str] {
        match self {
            Task::Sst2 => &["negative", "positive"],
            Task::Qqp => &["not_duplicate", "duplicate"],
            Task::Qnli | Task::Rte => &["entailment", "not_entailment"],
            Task::Mnli | Task::MnliMismatched => &["entailment", "neutral", "contradiction"],
        }
    }

    /// Number of classes.
    pub fn num_labels(self) -> usize {
        self.label_names().len()
    }

    /// Whether examples are sentence pairs (everything but SST-2).
    pub fn is_pair(self) -> bool {
        self != Task::Sst2
    }

    /// A label as files write it: a name (`entailment`, case-insensitive) or an integer in
    /// `0..num_labels` (`"1"`, as in SST-2 and QQP TSVs).
    pub fn parse_label(self, text: &str) -> Option<usize> {
        let text = text.trim();
        if let Some(i) = self.label_names().iter().position(|n| n.eq_ignore_ascii_case(text)) {
            return Some(i);
        }
        text.parse::<usize>().ok().filter(|&i| i < self.num_labels())
    }

    /// The text fields of an AdvGLUE item (`dev.json`), first and second sentence.
    pub fn advglue_fields(self) -> (&'static str, Option<&'static str>) {
        match self {
            Task::Sst2 => ("sentence", None),
            Task::Qqp => ("question1", Some("question2")),
            Task::Qnli => ("question", Some("sentence")),
            Task::Mnli | Task::MnliMismatched => ("premise", Some("hypothesis")),
            Task::Rte => ("sentence1", Some("sentence2")),
        }
    }

    /// GLUE TSV header names that may hold (text_a, text_b, label), first match wins. MNLI's
    /// TSV also has `label1`..`label5`; `gold_label` is the one GLUE uses.
    fn tsv_columns(self) -> (Columns, Columns, Columns) {
        match self {
            Task::Sst2 => (&["sentence"], &[], &["label"]),
            Task::Qqp => (&["question1"], &["question2"], &["is_duplicate", "label"]),
            Task::Qnli => (&["question"], &["sentence"], &["label"]),
            Task::Mnli | Task::MnliMismatched => {
                (&["sentence1", "premise"], &["sentence2", "hypothesis"], &["gold_label", "label"])
            }
            Task::Rte => (&["sentence1"], &["sentence2"], &["label"]),
        }
    }
}

/// Header names a TSV column may have.
type Columns = &'static [&'static str];

impl fmt::Display for Task {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Task {
    type Err = DataError;

    /// Accepts the AdvGLUE keys and the usual spellings: `sst2`, `SST-2`, `mnli_mm`,
    /// `mnli-mismatched`, `mnli-m`, ...
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let key: String = s
            .trim()
            .chars()
            .filter(|c| !matches!(c, '-' | '_' | ' '))
            .collect::<String>()
            .to_ascii_lowercase();
        match key.as_str() {
            "sst2" | "sst" => Ok(Task::Sst2),
            "qqp" => Ok(Task::Qqp),
            "qnli" => Ok(Task::Qnli),
            "mnli" | "mnlim" | "mnlimatched" => Ok(Task::Mnli),
            "mnlimm" | "mnlimismatched" => Ok(Task::MnliMismatched),
            "rte" => Ok(Task::Rte),
            _ => Err(DataError::UnknownTask(s.to_string())),
        }
    }
}

/// How an AdvGLUE item was made (`data_construction` in `dev_ann.json`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AttackLevel {
    /// Word-level perturbation (TextBugger, TextFooler, BERT-ATTACK, SememePSO, SemAttack).
    Word,
    /// Sentence-level (T3, SCPN, StressTest, CheckList distractions, AdvFever).
    Sentence,
    /// Human-crafted (ANLI, CheckList, StressTest, AdvSQuAD).
    Human,
}

impl AttackLevel {
    pub const ALL: [AttackLevel; 3] = [AttackLevel::Word, AttackLevel::Sentence, AttackLevel::Human];

    /// The name `dev_ann.json` uses: `word`, `sentence`, `human`.
    pub fn name(self) -> &'static str {
        match self {
            AttackLevel::Word => "word",
            AttackLevel::Sentence => "sentence",
            AttackLevel::Human => "human",
        }
    }
}

impl fmt::Display for AttackLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for AttackLevel {
    type Err = DataError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "word" => Ok(AttackLevel::Word),
            "sentence" => Ok(AttackLevel::Sentence),
            "human" => Ok(AttackLevel::Human),
            _ => Err(DataError::UnknownAttackLevel(s.to_string())),
        }
    }
}

/// One labelled example. `text_b` is `Some` exactly for pair tasks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Example {
    /// The file's own index (`index`/`idx` column, JSON key), else the 0-based data row.
    pub idx: i64,
    pub text_a: String,
    pub text_b: Option<String>,
    /// Class in HF `glue` order, `< task.num_labels()`.
    pub label: usize,
}

/// An AdvGLUE item: the adversarial example and, from `dev_ann.json`, how it was made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdvExample {
    pub example: Example,
    pub task: Task,
    /// Attack name as the file spells it (`TextBugger`, `SemAttack`, `CheckList`, ...).
    pub method: Option<String>,
    pub level: Option<AttackLevel>,
    /// The unperturbed first text, where the attack changed it.
    pub original_a: Option<String>,
    /// The unperturbed second text, where the attack changed it.
    pub original_b: Option<String>,
}

/// What went wrong reading data; row errors name `file:line` (1-based).
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path}:{line}: invalid UTF-8")]
    InvalidUtf8 { path: PathBuf, line: usize },
    #[error("{path}:{line}: bad JSON: {message}")]
    Json { path: PathBuf, line: usize, message: String },
    #[error("{path}:{line}: missing column {column} for {task}; header has: {header}")]
    MissingColumn { path: PathBuf, line: usize, column: String, task: Task, header: String },
    #[error("{path}:{line}: missing field {field:?}")]
    MissingField { path: PathBuf, line: usize, field: String },
    #[error("{path}:{line}: unknown label {label:?} for {task} (expected one of {}, or an integer below {})",
        .task.label_names().join(", "), .task.num_labels())]
    UnknownLabel { path: PathBuf, line: usize, label: String, task: Task },
    #[error("{path}:{line}: {message}")]
    BadRow { path: PathBuf, line: usize, message: String },
    #[error("{path}: {message}")]
    Unsupported { path: PathBuf, message: String },
    #[error("unknown task {0:?} (expected sst2, qqp, qnli, mnli, mnli-mm or rte)")]
    UnknownTask(String),
    #[error("unknown attack level {0:?} (expected word, sentence or human)")]
    UnknownAttackLevel(String),
}

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
    fn new() -> Self {
        Self { rows: Vec::new(), skipped: Vec::new() }
    }

    /// Number of rows skipped.
    pub fn skipped_count(&self) -> usize {
        self.skipped.len()
    }

    fn map<U>(self, f: impl FnMut(T) -> U) -> Loaded<U> {
        Loaded { rows: self.rows.into_iter().map(f).collect(), skipped: self.skipped }
    }

    /// Keeps a row, or handles a bad row as `opts` says.
    fn push(&mut self, row: Result<T, DataError>, opts: &ReadOptions) -> Result<(), DataError> {
        match row {
            Ok(row) => self.rows.push(row),
            Err(e) if opts.skip_bad_rows => self.skipped.push(e),
            Err(e) => return Err(e),
        }
        Ok(())
    }
}

/// Class counts: `label_counts(xs, n)[i]` is how many examples have label `i` (labels `>= n`
/// are not counted).
pub fn label_counts(examples: &[Example], num_labels: usize) -> Vec<usize> {
    let mut counts = vec![0; num_labels];
    for e in examples {
        if let Some(c) = counts.get_mut(e.label) {
            *c += 1;
        }
    }
    counts
}

/// A file's bytes, with the path in the error.
pub fn read_bytes(path: impl AsRef<Path>) -> Result<Vec<u8>, DataError> {
    let path = path.as_ref();
    std::fs::read(path).map_err(|source| DataError::Io { path: path.to_path_buf(), source })
}

// ---------------------------------------------------------------------------------------------
// Line-based formats: GLUE TSV, jsonl, label-text
// ---------------------------------------------------------------------------------------------

/// Non-blank lines as `(1-based line number, text)`, each checked for UTF-8 on its own so one
/// bad byte costs one row, not the file. Strips `\n` and a trailing `\r` only: SST-2 sentences
/// end with a space that must be kept.
fn lines<'a>(
    path: &'a Path,
    bytes: &'a [u8],
) -> impl Iterator<Item = (usize, Result<&'a str, DataError>)> + 'a {
    bytes.split(|&b| b == b'\n').enumerate().filter_map(move |(i, raw)| {
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        if raw.iter().all(u8::is_ascii_whitespace) {
            return None;
        }
        let line = i + 1;
        let text =
            std::str::from_utf8(raw).map_err(|_| DataError::InvalidUtf8 { path: path.to_path_buf(), line });
        Some((line, text))
    })
}

fn bad_row(path: &Path, line: usize, message: impl Into<String>) -> DataError {
    DataError::BadRow { path: path.to_path_buf(), line, message: message.into() }
}

fn unknown_label(path: &Path, line: usize, label: &str, task: Task) -> DataError {
    DataError::UnknownLabel { path: path.to_path_buf(), line, label: label.to_string(), task }
}

/// Reads a GLUE TSV (`train.tsv`/`dev.tsv` as GLUE publishes them) for `task`.
pub fn read_glue_tsv(path: impl AsRef<Path>, task: Task) -> Result<Vec<Example>, DataError> {
    let path = path.as_ref();
    parse_glue_tsv(path, &read_bytes(path)?, task, &ReadOptions::strict()).map(|l| l.rows)
}

/// Parses a GLUE TSV. Columns are found by header name (SST-2 `sentence,label`; RTE
/// `sentence1,sentence2,label`; QNLI `question,sentence,label`; MNLI `sentence1,sentence2,
/// gold_label`; QQP `question1,question2,is_duplicate`). `idx` is the `index`/`idx`/`id`
/// column, else the 0-based data row. GLUE TSVs are QUOTE_NONE: fields are split on tabs
/// only and quotes are text.
pub fn parse_glue_tsv(
    path: &Path,
    bytes: &[u8],
    task: Task,
    opts: &ReadOptions,
) -> Result<Loaded<Example>, DataError> {
    let mut rows = lines(path, bytes);
    let (header_line, header) = match rows.next() {
        Some((line, header)) => (line, header?),
        None => return Err(bad_row(path, 1, "empty file: no header row")),
    };
    let header: Vec<&str> = header.trim_start_matches('\u{feff}').split('\t').map(str::trim).collect();
    let find = |names: &[&str]| names.iter().find_map(|n| header.iter().position(|h| h == n));
    let require = |names: &[&str]| {
        find(names).ok_or_else(|| DataError::MissingColumn {
            path: path.to_path_buf(),
            line: header_line,
            column: names.iter().map(|n| format!("{n:?}")).collect::<Vec<_>>().join(" or "),
            task,
            header: header.join(", "),
        })
    };
    let (a_names, b_names, label_names) = task.tsv_columns();
    let col_a = require(a_names)?;
    let col_b = if task.is_pair() { Some(require(b_names)?) } else { None };
    let col_label = require(label_names)?;
    let col_idx = find(&["index", "idx", "id"]);

    let mut out = Loaded::new();
    for (data_row, (line, text)) in rows.enumerate() {
        let row = text.and_then(|text| {
            let fields: Vec<&str> = text.split('\t').collect();
            if fields.len() != header.len() {
                return Err(bad_row(
                    path,
                    line,
                    format!("{} tab-separated fields, header has {}", fields.len(), header.len()),
                ));
            }
            let label = task
                .parse_label(fields[col_label])
                .ok_or_else(|| unknown_label(path, line, fields[col_label], task))?;
            let idx = match col_idx {
                Some(c) => fields[c]
                    .trim()
                    .parse::<i64>()
                    .map_err(|_| bad_row(path, line, format!("index {:?} is not an integer", fields[c])))?,
                None => data_row as i64,
            };
            Ok(Example {
                idx,
                text_a: fields[col_a].to_string(),
                text_b: col_b.map(|c| fields[c].to_string()),
                label,
            })
        });
        out.push(row, opts)?;
    }
    Ok(out)
}

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
pub fn read_advglue_jsonl(path: impl AsRef<Path>, task: Task) -> Result<Vec<AdvExample>, DataError> {
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
            let fields = task.advglue_fields();
            let original = |name: &str| optional_string(path, line, obj, &format!("original_{name}"));
            let original_a = original(fields.0)?;
            let original_b = match fields.1 {
                Some(b) => original(b)?,
                None => None,
            };
            Ok(AdvExample {
                example: example_from_object(path, line, obj, ("text_a", "text_b"), task, row as i64)?,
                task,
                method: optional_string(path, line, obj, "method")?,
                level: attack_level(path, line, obj)?,
                original_a,
                original_b,
            })
        });
        out.push(item, opts)?;
    }
    Ok(out)
}

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
            let label = task.parse_label(label).ok_or_else(|| unknown_label(path, line, label, task))?;
            Ok(Example { idx: row as i64, text_a: text.to_string(), text_b: None, label })
        });
        out.push(example, opts)?;
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// Whole-document JSON: train subsets, AdvGLUE dev.json / dev_ann.json
// ---------------------------------------------------------------------------------------------

/// A JSON object's members in file order. serde_json's `Map` sorts its keys (no
/// `preserve_order` feature here), which would lose the order `"0","1",...,"10"` and with it
/// the link to line numbers.
struct OrderedObject(Vec<(String, Value)>);

impl<'de> Deserialize<'de> for OrderedObject {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MembersVisitor;
        impl<'de> Visitor<'de> for MembersVisitor {
            type Value = OrderedObject;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<OrderedObject, A::Error> {
                let mut members = Vec::new();
                while let Some(member) = map.next_entry::<String, Value>()? {
                    members.push(member);
                }
                Ok(OrderedObject(members))
            }
        }
        deserializer.deserialize_map(MembersVisitor)
    }
}

/// Parses a whole JSON document whose top level is an object, members in file order.
fn parse_document(path: &Path, bytes: &[u8]) -> Result<Vec<(String, Value)>, DataError> {
    serde_json::from_slice::<OrderedObject>(bytes).map(|o| o.0).map_err(|e| DataError::Json {
        path: path.to_path_buf(),
        line: e.line().max(1),
        message: e.to_string(),
    })
}

/// 1-based line where each value nested `depth` containers deep starts, in document order
/// (depth 1: the top-level object's member values). serde_json reports no positions for
/// values, so this small scan of an already-validated document gives row errors a line.
fn value_lines(bytes: &[u8], depth: usize) -> Vec<usize> {
    let mut out = Vec::new();
    let mut line = 1;
    let mut stack: Vec<u8> = Vec::new();
    let (mut in_string, mut escaped, mut expect_value) = (false, false, true);
    for &b in bytes {
        if b == b'\n' {
            line += 1;
        }
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        if b.is_ascii_whitespace() {
            continue;
        }
        if expect_value && b != b']' && b != b'}' {
            if stack.len() == depth {
                out.push(line);
            }
            expect_value = false;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => {
                stack.push(b);
                // An array holds values next; an object holds a key first.
                expect_value = b == b'[';
            }
            b'}' | b']' => {
                stack.pop();
                expect_value = false;
            }
            b',' => expect_value = stack.last() == Some(&b'['),
            b':' => expect_value = true,
            _ => {}
        }
    }
    out
}

/// Reads a GLUE-train subset (`glue_train_subsets/*/{train,dev}.json`) for `task`.
pub fn read_train_subset_json(path: impl AsRef<Path>, task: Task) -> Result<Vec<Example>, DataError> {
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
        let task: Task =
            key.parse().map_err(|_| bad_row(path, task_line, format!("unknown AdvGLUE task {key:?}")))?;
        let items =
            items.as_array().ok_or_else(|| bad_row(path, task_line, format!("{key:?} is not an array")))?;
        let (field_a, field_b) = task.advglue_fields();
        for (row, item) in items.iter().enumerate() {
            let line = item_lines.next().unwrap_or(task_line);
            let adv = as_object(path, line, item).and_then(|obj| {
                let original = |name: &str| optional_string(path, line, obj, &format!("original_{name}"));
                let original_a = original(field_a)?;
                let original_b = match field_b {
                    Some(b) => original(b)?,
                    None => None,
                };
                Ok(AdvExample {
                    example: example_from_object(
                        path,
                        line,
                        obj,
                        (field_a, field_b.unwrap_or("")),
                        task,
                        row as i64,
                    )?,
                    task,
                    method: optional_string(path, line, obj, "method")?,
                    level: attack_level(path, line, obj)?,
                    original_a,
                    original_b,
                })
            });
            out.push(adv, opts)?;
        }
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// JSON field helpers
// ---------------------------------------------------------------------------------------------

fn as_object<'v>(path: &Path, line: usize, value: &'v Value) -> Result<&'v Map<String, Value>, DataError> {
    value.as_object().ok_or_else(|| bad_row(path, line, "expected a JSON object"))
}

/// `obj[name]` as a string; absent or `null` is `None`.
fn optional_string(
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

fn required_string(
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
fn example_from_object(
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
        return Err(bad_row(path, line, format!("{task} takes one text, but {:?} is set", fields.1)));
    } else {
        None
    };
    let label = match obj.get("label") {
        None | Some(Value::Null) => {
            return Err(DataError::MissingField { path: path.to_path_buf(), line, field: "label".into() })
        }
        Some(Value::String(s)) => task.parse_label(s).ok_or_else(|| unknown_label(path, line, s, task))?,
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
        Some(Value::String(s)) => {
            s.trim().parse().map_err(|_| bad_row(path, line, format!("idx {s:?} is not an integer")))?
        }
        Some(other) => return Err(bad_row(path, line, format!("idx {other} is not an integer"))),
    };
    Ok(Example { idx, text_a, text_b, label })
}

// ---------------------------------------------------------------------------------------------
// Dispatch by file
// ---------------------------------------------------------------------------------------------

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
    let message = if extension(path) == "arrow" {
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

// ---------------------------------------------------------------------------------------------
// Seeded splits
// ---------------------------------------------------------------------------------------------

pub use crate::rng::SplitMix64;

/// Fisher-Yates shuffle driven by [`SplitMix64`] seeded with `seed`.
pub fn shuffle<T>(items: &mut [T], seed: u64) {
    let mut rng = SplitMix64::new(seed);
    for i in (1..items.len()).rev() {
        items.swap(i, rng.below(i + 1));
    }
}

/// Shuffles with `seed`, then puts `round(len * train_fraction)` examples in train and the
/// rest in validation (use [`DEFAULT_TRAIN_FRACTION`] for the paper's 8:2). A fraction outside
/// `[0, 1]` is clamped.
pub fn split_train_validation<T>(mut examples: Vec<T>, train_fraction: f64, seed: u64) -> (Vec<T>, Vec<T>) {
    shuffle(&mut examples, seed);
    let fraction = if train_fraction.is_nan() { 0.0 } else { train_fraction.clamp(0.0, 1.0) };
    let n_train = ((examples.len() as f64 * fraction).round() as usize).min(examples.len());
    let validation = examples.split_off(n_train);
    (examples, validation)
}

/// `n` examples drawn without replacement with `seed` (all of them, shuffled, if there are
/// fewer than `n`).
pub fn subsample<T>(mut examples: Vec<T>, n: usize, seed: u64) -> Vec<T> {
    shuffle(&mut examples, seed);
    examples.truncate(n);
    examples
}

/// Disjoint train and validation samples of `n_train` and `n_validation` examples from one
/// seeded shuffle: the low-resource setting is
/// `low_resource_split(train, LOW_RESOURCE_TRAIN, LOW_RESOURCE_VALIDATION, seed)`.
/// With too few examples, train is filled first.
pub fn low_resource_split<T>(
    examples: Vec<T>,
    n_train: usize,
    n_validation: usize,
    seed: u64,
) -> (Vec<T>, Vec<T>) {
    let mut train = subsample(examples, n_train.saturating_add(n_validation), seed);
    let validation = train.split_off(n_train.min(train.len()));
    (train, validation)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeMap, HashSet};

    const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/data");

    fn data(rel: &str) -> PathBuf {
        Path::new(DATA).join(rel)
    }

    /// A file under the temp dir, unique to this process and test.
    struct TempFile(PathBuf);

    impl TempFile {
        fn new(name: &str, contents: &[u8]) -> Self {
            let path = std::env::temp_dir().join(format!("imbert-data-{}-{name}", std::process::id()));
            std::fs::write(&path, contents).unwrap();
            TempFile(path)
        }
        fn name(&self) -> String {
            self.0.display().to_string()
        }
    }

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    fn assert_unique_idx(name: &str, xs: &[Example]) {
        let set: HashSet<i64> = xs.iter().map(|e| e.idx).collect();
        assert_eq!(set.len(), xs.len(), "{name}: idx not unique");
    }

    #[test]
    fn task_names_labels_and_parsing() {
        for task in Task::ALL {
            assert_eq!(task.name().parse::<Task>().unwrap(), task);
            assert_eq!(task.to_string(), task.name());
            assert_eq!(task.num_labels(), task.label_names().len());
            for (i, name) in task.label_names().iter().enumerate() {
                assert_eq!(task.parse_label(name), Some(i));
                assert_eq!(task.parse_label(&i.to_string()), Some(i));
            }
            assert_eq!(task.parse_label(&task.num_labels().to_string()), None);
            assert_eq!(task.parse_label("xyz"), None);
        }
        for (s, t) in [
            ("sst2", Task::Sst2),
            ("SST-2", Task::Sst2),
            ("qqp", Task::Qqp),
            ("QNLI", Task::Qnli),
            ("mnli", Task::Mnli),
            ("mnli-m", Task::Mnli),
            ("mnli_matched", Task::Mnli),
            ("mnli-mm", Task::MnliMismatched),
            ("MNLI_MM", Task::MnliMismatched),
            ("mnli-mismatched", Task::MnliMismatched),
            ("rte", Task::Rte),
        ] {
            assert_eq!(s.parse::<Task>().unwrap(), t, "{s}");
        }
        assert!("cola".parse::<Task>().unwrap_err().to_string().contains("cola"));
        assert_eq!(Task::Sst2.label_names(), ["negative", "positive"]);
        assert_eq!(Task::Mnli.label_names(), ["entailment", "neutral", "contradiction"]);
        assert_eq!(Task::MnliMismatched.label_names(), Task::Mnli.label_names());
        assert_eq!(Task::Qnli.label_names(), ["entailment", "not_entailment"]);
        assert_eq!(Task::Rte.label_names(), ["entailment", "not_entailment"]);
        assert_eq!(Task::Qqp.label_names(), ["not_duplicate", "duplicate"]);
        assert!(!Task::Sst2.is_pair() && Task::ALL[1..].iter().all(|t| t.is_pair()));
        for level in AttackLevel::ALL {
            assert_eq!(level.name().parse::<AttackLevel>().unwrap(), level);
        }
        assert!("phrase".parse::<AttackLevel>().is_err());
    }

    #[test]
    fn glue_tsvs_have_the_published_counts_and_match_normalized() {
        let cases = [
            ("glue/SST-2/train.tsv", "normalized/sst2_train.jsonl", Task::Sst2, vec![29_780, 37_569]),
            ("glue/SST-2/dev.tsv", "normalized/sst2_dev.jsonl", Task::Sst2, vec![428, 444]),
            ("glue/RTE/train.tsv", "normalized/rte_train.jsonl", Task::Rte, vec![1_249, 1_241]),
            ("glue/RTE/dev.tsv", "normalized/rte_dev.jsonl", Task::Rte, vec![146, 131]),
            ("glue/QNLI/dev.tsv", "normalized/qnli_dev.jsonl", Task::Qnli, vec![2_702, 2_761]),
        ];
        for (tsv, jsonl, task, counts) in cases {
            let from_tsv = read_glue_tsv(data(tsv), task).unwrap();
            assert_eq!(label_counts(&from_tsv, task.num_labels()), counts, "{tsv}");
            assert_eq!(from_tsv.len(), counts.iter().sum::<usize>(), "{tsv}");
            assert_unique_idx(tsv, &from_tsv);
            // The normalised files are a field mapping of these TSVs: identical examples.
            assert_eq!(from_tsv, read_jsonl(data(jsonl), task).unwrap(), "{tsv} vs {jsonl}");
        }
        let sst2 = read_glue_tsv(data("glue/SST-2/dev.tsv"), Task::Sst2).unwrap();
        assert_eq!(sst2[0].idx, 0);
        assert!(sst2[0].text_a.ends_with(' '), "GLUE's trailing space is kept");
        let rte = read_glue_tsv(data("glue/RTE/train.tsv"), Task::Rte).unwrap();
        assert_eq!(rte[0].text_a, "No Weapons of Mass Destruction Found in Iraq Yet.");
        assert_eq!(rte[0].text_b.as_deref(), Some("Weapons of Mass Destruction Found in Iraq."));
        assert_eq!(rte[0].label, 1, "not_entailment");
    }

    #[test]
    fn normalized_jsonl_files_have_the_listed_counts() {
        let cases: [(&str, Task, &[usize]); 19] = [
            ("sst2_train", Task::Sst2, &[29_780, 37_569]),
            ("sst2_dev", Task::Sst2, &[428, 444]),
            ("rte_train", Task::Rte, &[1_249, 1_241]),
            ("rte_dev", Task::Rte, &[146, 131]),
            ("qnli_dev", Task::Qnli, &[2_702, 2_761]),
            ("mnli_dev_matched", Task::Mnli, &[3_479, 3_123, 3_213]),
            ("mnli_dev_mismatched", Task::MnliMismatched, &[3_463, 3_129, 3_240]),
            ("mnli_train_subset_a", Task::Mnli, &[3_061, 2_980, 2_958]),
            ("mnli_train_subset_b", Task::Mnli, &[347, 333, 320]),
            ("qnli_train_subset_a", Task::Qnli, &[4_523, 4_476]),
            ("qnli_train_subset_b", Task::Qnli, &[504, 496]),
            ("qqp_train_subset_a", Task::Qqp, &[5_747, 3_252]),
            ("qqp_train_subset_b", Task::Qqp, &[623, 377]),
            ("advglue_sst2_dev", Task::Sst2, &[72, 76]),
            ("advglue_qqp_dev", Task::Qqp, &[46, 32]),
            ("advglue_mnli_dev", Task::Mnli, &[32, 39, 50]),
            ("advglue_mnli_mm_dev", Task::MnliMismatched, &[60, 45, 57]),
            ("advglue_qnli_dev", Task::Qnli, &[74, 74]),
            ("advglue_rte_dev", Task::Rte, &[35, 46]),
        ];
        for (name, task, counts) in cases {
            let path = data(&format!("normalized/{name}.jsonl"));
            let xs = load(&path, task).unwrap();
            assert_eq!(label_counts(&xs, task.num_labels()), counts, "{name}");
            assert_eq!(xs.len(), counts.iter().sum::<usize>(), "{name}");
            assert_unique_idx(name, &xs);
            assert!(xs.iter().all(|e| !e.text_a.is_empty()), "{name}: empty text_a");
        }
    }

    #[test]
    fn train_subsets_have_the_listed_counts_and_match_normalized() {
        let cases: [(&str, &str, Task, &[usize]); 6] = [
            ("MNLI/train.json", "mnli_train_subset_a", Task::Mnli, &[3_061, 2_980, 2_958]),
            ("MNLI/dev.json", "mnli_train_subset_b", Task::Mnli, &[347, 333, 320]),
            ("QNLI/train.json", "qnli_train_subset_a", Task::Qnli, &[4_523, 4_476]),
            ("QNLI/dev.json", "qnli_train_subset_b", Task::Qnli, &[504, 496]),
            ("QQP/train.json", "qqp_train_subset_a", Task::Qqp, &[5_747, 3_252]),
            ("QQP/dev.json", "qqp_train_subset_b", Task::Qqp, &[623, 377]),
        ];
        for (json, jsonl, task, counts) in cases {
            let xs = read_train_subset_json(data(&format!("glue_train_subsets/{json}")), task).unwrap();
            assert_eq!(label_counts(&xs, task.num_labels()), counts, "{json}");
            assert_eq!(xs.len(), counts.iter().sum::<usize>(), "{json}");
            assert_unique_idx(json, &xs);
            let normalized = read_jsonl(data(&format!("normalized/{jsonl}.jsonl")), task).unwrap();
            assert_eq!(xs, normalized, "{json} vs {jsonl}");
            // `load` tells a train subset from AdvGLUE by shape.
            assert_eq!(load(data(&format!("glue_train_subsets/{json}")), task).unwrap().len(), xs.len());
        }
    }

    /// Per-task label counts (SOURCES.md section 1) and (level, method) counts (section 3).
    const ADVGLUE_LABELS: [(Task, &[usize]); 6] = [
        (Task::Sst2, &[72, 76]),
        (Task::Qqp, &[46, 32]),
        (Task::Mnli, &[32, 39, 50]),
        (Task::MnliMismatched, &[60, 45, 57]),
        (Task::Qnli, &[74, 74]),
        (Task::Rte, &[35, 46]),
    ];

    const ADVGLUE_METHODS: &[(&str, &str, &str, usize)] = &[
        ("sst2", "word", "SememePSO", 28),
        ("sst2", "word", "TextBugger", 19),
        ("sst2", "word", "TextFooler", 16),
        ("sst2", "word", "SemAttack", 9),
        ("sst2", "word", "BERT-ATTACK", 8),
        ("sst2", "sentence", "StressTest", 19),
        ("sst2", "sentence", "T3", 17),
        ("sst2", "sentence", "CheckList", 11),
        ("sst2", "sentence", "SCPN", 4),
        ("sst2", "human", "CheckList", 17),
        ("qqp", "word", "TextBugger", 24),
        ("qqp", "word", "SemAttack", 19),
        ("qqp", "word", "SememePSO", 9),
        ("qqp", "word", "TextFooler", 8),
        ("qqp", "word", "BERT-ATTACK", 6),
        ("qqp", "sentence", "T3", 5),
        ("qqp", "human", "CheckList", 7),
        ("mnli", "word", "TextBugger", 38),
        ("mnli", "word", "SemAttack", 15),
        ("mnli", "word", "BERT-ATTACK", 13),
        ("mnli", "word", "SememePSO", 11),
        ("mnli", "word", "TextFooler", 8),
        ("mnli", "sentence", "SCPN", 10),
        ("mnli", "sentence", "T3", 10),
        ("mnli", "sentence", "StressTest", 8),
        ("mnli", "sentence", "CheckList", 8),
        ("mnli-mm", "word", "TextBugger", 38),
        ("mnli-mm", "word", "BERT-ATTACK", 11),
        ("mnli-mm", "word", "SememePSO", 9),
        ("mnli-mm", "word", "TextFooler", 7),
        ("mnli-mm", "word", "SemAttack", 6),
        ("mnli-mm", "sentence", "CheckList", 19),
        ("mnli-mm", "sentence", "T3", 10),
        ("mnli-mm", "sentence", "SCPN", 9),
        ("mnli-mm", "sentence", "StressTest", 9),
        ("mnli-mm", "sentence", "AdvFever", 1),
        ("mnli-mm", "human", "ANLI", 22),
        ("mnli-mm", "human", "StressTest", 21),
        ("qnli", "word", "TextBugger", 35),
        ("qnli", "word", "SememePSO", 19),
        ("qnli", "word", "SemAttack", 18),
        ("qnli", "word", "TextFooler", 11),
        ("qnli", "word", "BERT-ATTACK", 8),
        ("qnli", "sentence", "T3", 15),
        ("qnli", "sentence", "CheckList", 12),
        ("qnli", "sentence", "StressTest", 11),
        ("qnli", "sentence", "SCPN", 4),
        ("qnli", "human", "AdvSQuAD", 8),
        ("qnli", "human", "CheckList", 7),
        ("rte", "word", "TextBugger", 24),
        ("rte", "word", "SememePSO", 12),
        ("rte", "word", "TextFooler", 12),
        ("rte", "word", "SemAttack", 7),
        ("rte", "word", "BERT-ATTACK", 7),
        ("rte", "sentence", "T3", 7),
        ("rte", "sentence", "StressTest", 7),
        ("rte", "sentence", "CheckList", 3),
        ("rte", "sentence", "AdvFever", 1),
        ("rte", "sentence", "SCPN", 1),
    ];

    #[test]
    fn advglue_dev_and_dev_ann_have_the_listed_counts() {
        let plain = read_advglue_json(data("advglue/dev.json")).unwrap();
        let ann = read_advglue_json(data("advglue/dev_ann.json")).unwrap();
        assert_eq!(plain.len(), 738);
        assert_eq!(ann.len(), 738);
        for (task, counts) in ADVGLUE_LABELS {
            for (name, items) in [("dev.json", &plain), ("dev_ann.json", &ann)] {
                let xs: Vec<Example> =
                    items.iter().filter(|a| a.task == task).map(|a| a.example.clone()).collect();
                assert_eq!(label_counts(&xs, task.num_labels()), counts, "{name} {task}");
                assert_eq!(xs.len(), counts.iter().sum::<usize>(), "{name} {task}");
                assert_unique_idx(name, &xs);
            }
        }
        // The plain file has no annotations; on shared fields the two files agree.
        assert!(plain.iter().all(|a| a.method.is_none() && a.level.is_none() && a.original_a.is_none()));
        for (p, a) in plain.iter().zip(&ann) {
            assert_eq!((p.task, &p.example), (a.task, &a.example));
        }

        let mut methods: BTreeMap<(String, String, String), usize> = BTreeMap::new();
        let mut levels: BTreeMap<(Task, AttackLevel), usize> = BTreeMap::new();
        for a in &ann {
            let level = a.level.unwrap();
            let key = (a.task.to_string(), level.to_string(), a.method.clone().unwrap());
            *methods.entry(key).or_default() += 1;
            *levels.entry((a.task, level)).or_default() += 1;
        }
        let expected: BTreeMap<(String, String, String), usize> = ADVGLUE_METHODS
            .iter()
            .map(|&(t, l, m, n)| ((t.to_string(), l.to_string(), m.to_string()), n))
            .collect();
        assert_eq!(methods, expected);
        use AttackLevel::{Human, Sentence, Word};
        let expected_levels = [
            ((Task::Sst2, Word), 80),
            ((Task::Sst2, Sentence), 51),
            ((Task::Sst2, Human), 17),
            ((Task::Qqp, Word), 66),
            ((Task::Qqp, Sentence), 5),
            ((Task::Qqp, Human), 7),
            ((Task::Mnli, Word), 85),
            ((Task::Mnli, Sentence), 36),
            ((Task::MnliMismatched, Word), 71),
            ((Task::MnliMismatched, Sentence), 48),
            ((Task::MnliMismatched, Human), 43),
            ((Task::Qnli, Word), 91),
            ((Task::Qnli, Sentence), 42),
            ((Task::Qnli, Human), 15),
            ((Task::Rte, Word), 62),
            ((Task::Rte, Sentence), 19),
        ];
        assert_eq!(levels, expected_levels.into_iter().collect::<BTreeMap<_, _>>());

        // Originals are present for every attacked item; SST-2's 17 human items have none.
        let sst2_originals = ann.iter().filter(|a| a.task == Task::Sst2 && a.original_a.is_some()).count();
        assert_eq!(sst2_originals, 131);
        let rte_first = &ann.iter().find(|a| a.task == Task::Rte).unwrap();
        assert!(rte_first.original_a.as_deref().unwrap().starts_with("The international humanitarian"));
        assert_eq!(rte_first.original_b, None);
    }

    #[test]
    fn advglue_normalized_jsonl_matches_dev_ann() {
        let ann = read_advglue_json(data("advglue/dev_ann.json")).unwrap();
        for (task, file) in [
            (Task::Sst2, "advglue_sst2_dev"),
            (Task::Qqp, "advglue_qqp_dev"),
            (Task::Mnli, "advglue_mnli_dev"),
            (Task::MnliMismatched, "advglue_mnli_mm_dev"),
            (Task::Qnli, "advglue_qnli_dev"),
            (Task::Rte, "advglue_rte_dev"),
        ] {
            let from_ann: Vec<&AdvExample> = ann.iter().filter(|a| a.task == task).collect();
            let jsonl = load_advglue(data(&format!("normalized/{file}.jsonl")), task).unwrap();
            assert_eq!(jsonl.iter().collect::<Vec<_>>(), from_ann, "{file}");
            assert_eq!(load_advglue(data("advglue/dev_ann.json"), task).unwrap().len(), jsonl.len());
            assert_eq!(load(data("advglue/dev.json"), task).unwrap().len(), jsonl.len());
        }
    }

    #[test]
    fn imdb_label_text_and_every_data_file_is_covered() {
        let imdb = read_label_text(data("imdb/textfooler_imdb_1000.txt"), Task::Sst2).unwrap();
        assert_eq!(imdb.len(), 1000);
        assert_eq!(label_counts(&imdb, 2), [497, 503]);
        assert!(imdb[0].text_a.starts_with("seriously , i do n't"));

        let arrow = data("glue/MNLI/validation_matched.arrow");
        let err = load(&arrow, Task::Mnli).unwrap_err();
        assert!(matches!(err, DataError::Unsupported { .. }), "{err}");
        assert!(err.to_string().contains("normalized/mnli_dev_"), "{err}");

        // Every file is read by one of the tests above, or is documentation/metadata/Arrow;
        // a file added later must be added here too.
        let mut tested: HashSet<String> = [
            "SOURCES.md",
            "glue/MNLI/dataset_info.json",
            "glue/MNLI/validation_matched.arrow",
            "glue/MNLI/validation_mismatched.arrow",
            "advglue/dev.json",
            "advglue/dev_ann.json",
            "imdb/textfooler_imdb_1000.txt",
            "glue/SST-2/train.tsv",
            "glue/SST-2/dev.tsv",
            "glue/RTE/train.tsv",
            "glue/RTE/dev.tsv",
            "glue/QNLI/dev.tsv",
        ]
        .into_iter()
        .map(String::from)
        .collect();
        for task in ["MNLI", "QNLI", "QQP"] {
            for split in ["train", "dev"] {
                tested.insert(format!("glue_train_subsets/{task}/{split}.json"));
            }
        }
        for name in [
            "sst2_train",
            "sst2_dev",
            "rte_train",
            "rte_dev",
            "qnli_dev",
            "mnli_dev_matched",
            "mnli_dev_mismatched",
            "mnli_train_subset_a",
            "mnli_train_subset_b",
            "qnli_train_subset_a",
            "qnli_train_subset_b",
            "qqp_train_subset_a",
            "qqp_train_subset_b",
            "advglue_sst2_dev",
            "advglue_qqp_dev",
            "advglue_mnli_dev",
            "advglue_mnli_mm_dev",
            "advglue_qnli_dev",
            "advglue_rte_dev",
        ] {
            tested.insert(format!("normalized/{name}.jsonl"));
        }
        let mut found = HashSet::new();
        let mut dirs = vec![PathBuf::from(DATA)];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    dirs.push(path);
                } else {
                    let rel = path.strip_prefix(DATA).unwrap().to_string_lossy().replace('\\', "/");
                    found.insert(rel);
                }
            }
        }
        assert_eq!(found, tested);
    }

    #[test]
    fn tsv_missing_column_names_file_and_header_line() {
        let f = TempFile::new("missing.tsv", b"index\tsentence1\tlabel\n0\ta\tentailment\n");
        let err = read_glue_tsv(&f.0, Task::Rte).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains(&format!("{}:1:", f.name())), "{msg}");
        assert!(msg.contains("\"sentence2\"") && msg.contains("missing column"), "{msg}");
        // A missing column spoils every row, so skipping does not hide it.
        assert!(
            parse_glue_tsv(&f.0, &read_bytes(&f.0).unwrap(), Task::Rte, &ReadOptions::skipping()).is_err()
        );
        // Columns are found by name, in any order; QQP and MNLI layouts work too.
        let qqp = TempFile::new(
            "qqp.tsv",
            b"id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n7\t1\t2\t\"Why?\"\tHow?\t1\n",
        );
        let xs = read_glue_tsv(&qqp.0, Task::Qqp).unwrap();
        let expected = Example { idx: 7, text_a: "\"Why?\"".into(), text_b: Some("How?".into()), label: 1 };
        assert_eq!(xs, [expected]);
        let mnli = TempFile::new(
            "mnli.tsv",
            b"index\tpromptID\tpairID\tgenre\tsentence1\tsentence2\tlabel1\tgold_label\n\
              3\t1\t1e\tfiction\tP\tH\tneutral\tcontradiction\n",
        );
        let xs = load(&mnli.0, Task::MnliMismatched).unwrap();
        assert_eq!(xs[0].label, 2, "gold_label, not label1");
        assert_eq!((xs[0].idx, xs[0].text_a.as_str(), xs[0].text_b.as_deref()), (3, "P", Some("H")));
    }

    #[test]
    fn bad_tsv_rows_name_line_and_can_be_skipped() {
        let mut bytes = b"index\tsentence1\tsentence2\tlabel\n0\ta\tb\tentailment\n1\tc\td\txyz\n".to_vec();
        bytes.extend_from_slice(b"2\te\t\xff\xfe\tentailment\n3\tonly three\tfields\n4\tg\th\t1\n");
        let f = TempFile::new("bad.tsv", &bytes);

        let err = read_glue_tsv(&f.0, Task::Rte).unwrap_err().to_string();
        assert!(err.contains(&format!("{}:3:", f.name())), "{err}");
        assert!(err.contains("unknown label \"xyz\""), "{err}");

        let loaded = parse_glue_tsv(&f.0, &bytes, Task::Rte, &ReadOptions::skipping()).unwrap();
        assert_eq!(loaded.rows.iter().map(|e| e.idx).collect::<Vec<_>>(), [0, 4]);
        assert_eq!(loaded.skipped_count(), 3);
        let msgs: Vec<String> = loaded.skipped.iter().map(|e| e.to_string()).collect();
        assert!(msgs[0].contains(":3: unknown label \"xyz\""), "{}", msgs[0]);
        assert!(msgs[1].contains(&format!("{}:4: invalid UTF-8", f.name())), "{}", msgs[1]);
        assert!(msgs[2].contains(":5: 3 tab-separated fields, header has 4"), "{}", msgs[2]);
    }

    #[test]
    fn bad_jsonl_lines_name_line_and_can_be_skipped() {
        let mut bytes = br#"{"idx": 0, "label": 1, "text_a": "a", "text_b": "b"}
{"idx": 1, "label": 1, "text_a": "a", "text_b": "b"
{"idx": 2, "label": "maybe", "text_a": "a", "text_b": "b"}

{"idx": 3, "label": 0, "text_b": "b"}
"#
        .to_vec();
        bytes.extend_from_slice(b"{\"idx\": 4, \"label\": 0, \"text_a\": \"\xc3\", \"text_b\": \"b\"}\n");
        bytes.extend_from_slice(br#"{"idx": 5, "label": 7, "text_a": "a", "text_b": "b"}"#);
        bytes.extend_from_slice(
            b"\n{\"idx\": 6, \"label\": \"entailment\", \"text_a\": \"a\", \"text_b\": \"b\"}",
        );
        let f = TempFile::new("bad.jsonl", &bytes);

        let err = read_jsonl(&f.0, Task::Qnli).unwrap_err().to_string();
        assert!(err.contains(&format!("{}:2: bad JSON", f.name())), "{err}");

        let loaded = load_with(&f.0, Task::Qnli, &ReadOptions::skipping()).unwrap();
        assert_eq!(loaded.rows.iter().map(|e| (e.idx, e.label)).collect::<Vec<_>>(), [(0, 1), (6, 0)]);
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
        assert_eq!(loaded.rows.iter().map(|e| (e.idx, e.label)).collect::<Vec<_>>(), [(0, 0), (2, 1)]);
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

        let err = read_glue_tsv(Path::new("/no/such/file.tsv"), Task::Sst2).unwrap_err().to_string();
        assert!(err.contains("/no/such/file.tsv"), "{err}");
    }

    #[test]
    fn value_lines_follow_nesting_and_skip_string_contents() {
        let doc = b"{\"a\": [1,\n {\"x\": \"}],{\"}, \n[]], \"b\": \n\n[ ]}";
        assert_eq!(value_lines(doc, 0), [1]);
        assert_eq!(value_lines(doc, 1), [1, 5]);
        assert_eq!(value_lines(doc, 2), [1, 2, 3]);
    }

    #[test]
    fn splitmix64_matches_the_reference_sequence() {
        // First outputs of the reference C implementation for seed 0.
        let mut rng = SplitMix64::new(0);
        assert_eq!(rng.next_u64(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(rng.next_u64(), 0x6e78_9e6a_a1b9_65f4);
        assert_eq!(rng.next_u64(), 0x06c4_5d18_8009_454f);
        let mut rng = SplitMix64::new(42);
        assert!((0..1000).all(|_| rng.below(7) < 7));
        assert_eq!(rng.below(0), 0);
        // Pins the shuffle itself, so a change of algorithm shows up as a failing test.
        let mut xs: Vec<u32> = (0..10).collect();
        shuffle(&mut xs, 0);
        let mut again: Vec<u32> = (0..10).collect();
        shuffle(&mut again, 0);
        assert_eq!(xs, again);
        let mut sorted = xs.clone();
        sorted.sort();
        assert_eq!(sorted, (0..10).collect::<Vec<_>>());
        assert_ne!(xs, sorted);
    }

    #[test]
    fn splits_are_deterministic_disjoint_and_complete() {
        let xs: Vec<u32> = (0..1000).collect();
        let (train, val) = split_train_validation(xs.clone(), DEFAULT_TRAIN_FRACTION, 7);
        assert_eq!((train.len(), val.len()), (800, 200));
        assert_eq!(
            split_train_validation(xs.clone(), DEFAULT_TRAIN_FRACTION, 7),
            (train.clone(), val.clone())
        );
        assert_ne!(split_train_validation(xs.clone(), DEFAULT_TRAIN_FRACTION, 8).0, train);
        let mut all: Vec<u32> = train.iter().chain(&val).copied().collect();
        all.sort();
        assert_eq!(all, xs, "every example exactly once");
        assert_eq!(split_train_validation(vec![1, 2, 3], 0.8, 0).0.len(), 2);
        assert_eq!(split_train_validation(vec![1, 2, 3], 2.0, 0).1.len(), 0);
        assert_eq!(split_train_validation(vec![1, 2, 3], f64::NAN, 0).0.len(), 0);
        assert_eq!(split_train_validation(Vec::<u8>::new(), 0.8, 0), (vec![], vec![]));

        let sub = subsample(xs.clone(), 10, 3);
        assert_eq!(sub, subsample(xs.clone(), 10, 3));
        assert_eq!(sub.iter().collect::<HashSet<_>>().len(), 10);
        assert_eq!(subsample(vec![1, 2], 10, 3).len(), 2);

        // Low-resource setting on a real training set: 1000 + 500, disjoint, reproducible.
        let mnli = read_jsonl(data("normalized/mnli_train_subset_a.jsonl"), Task::Mnli).unwrap();
        let (train, val) = low_resource_split(mnli.clone(), LOW_RESOURCE_TRAIN, LOW_RESOURCE_VALIDATION, 1);
        assert_eq!((train.len(), val.len()), (1000, 500));
        let train_idx: HashSet<i64> = train.iter().map(|e| e.idx).collect();
        assert!(val.iter().all(|e| !train_idx.contains(&e.idx)));
        assert_eq!(low_resource_split(mnli.clone(), 1000, 500, 1), (train.clone(), val));
        assert!(train.iter().any(|e| e.idx > 8000), "drawn from the whole file, not its first rows");
        let (t, v) = low_resource_split(vec![1, 2, 3], 2, 5, 0);
        assert_eq!((t.len(), v.len()), (2, 1));
    }
}
