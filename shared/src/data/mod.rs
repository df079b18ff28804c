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
//!
//! One module per job: [`Task`] and its labels in `task`; the records and errors the readers
//! return; one module per file format; `load` to pick a reader; `splits` for seeded splits.

mod advglue_json;
mod error;
mod example;
mod glue_tsv;
mod json_document;
mod json_fields;
mod jsonl;
mod label_text;
mod load;
mod read;
mod splits;
mod task;
#[doc(hidden)]
pub mod test_data;
mod train_subset;

#[cfg(test)]
mod corpus_tests;
#[cfg(test)]
mod temp_file;

pub use advglue_json::{parse_advglue_json, read_advglue_json};
pub use error::DataError;
pub use example::{label_counts, AdvExample, Example};
pub use glue_tsv::{parse_glue_tsv, read_glue_tsv};
pub use jsonl::{parse_advglue_jsonl, parse_jsonl, read_advglue_jsonl, read_jsonl};
pub use label_text::{parse_label_text, read_label_text};
pub use load::{load, load_advglue, load_advglue_with, load_with};
pub use read::{read_bytes, Loaded, ReadOptions};
pub use splits::{
    low_resource_split, shuffle, split_train_validation, subsample, DEFAULT_TRAIN_FRACTION,
    LOW_RESOURCE_TRAIN, LOW_RESOURCE_VALIDATION,
};
pub use task::{AttackLevel, Task};
pub use train_subset::{parse_train_subset_json, read_train_subset_json};
