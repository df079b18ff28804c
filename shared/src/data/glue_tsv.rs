//! GLUE TSVs as GLUE publishes them (`train.tsv`, `dev.tsv`): QUOTE_NONE, a header row, columns
//! picked by name.

use std::path::Path;

use super::error::{bad_row, unknown_label};
use super::read::lines;
use super::{read_bytes, DataError, Example, Loaded, ReadOptions, Task};

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
    let header: Vec<&str> =
        header.trim_start_matches('\u{feff}').split('\t').map(str::trim).collect();
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
    let (a_names, b_names, label_names) = tsv_columns(task);
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
                Some(c) => fields[c].trim().parse::<i64>().map_err(|_| {
                    bad_row(path, line, format!("index {:?} is not an integer", fields[c]))
                })?,
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

/// GLUE TSV header names that may hold (text_a, text_b, label), first match wins. MNLI's
/// TSV also has `label1`..`label5`; `gold_label` is the one GLUE uses.
fn tsv_columns(task: Task) -> (Columns, Columns, Columns) {
    match task {
        Task::Sst2 => (&["sentence"], &[], &["label"]),
        Task::Qqp => (&["question1"], &["question2"], &["is_duplicate", "label"]),
        Task::Qnli => (&["question"], &["sentence"], &["label"]),
        Task::Mnli | Task::MnliMismatched => {
            (&["sentence1", "premise"], &["sentence2", "hypothesis"], &["gold_label", "label"])
        }
        Task::Rte => (&["sentence1"], &["sentence2"], &["label"]),
    }
}

/// Header names a TSV column may have.
type Columns = &'static [&'static str];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::load;
    use crate::data::temp_file::TempFile;

    #[test]
    fn tsv_missing_column_names_file_and_header_line() {
        let f = TempFile::new("missing.tsv", b"index\tsentence1\tlabel\n0\ta\tentailment\n");
        let err = read_glue_tsv(&f.0, Task::Rte).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains(&format!("{}:1:", f.name())), "{msg}");
        assert!(msg.contains("\"sentence2\"") && msg.contains("missing column"), "{msg}");
        // A missing column spoils every row, so skipping does not hide it.
        assert!(parse_glue_tsv(
            &f.0,
            &read_bytes(&f.0).unwrap(),
            Task::Rte,
            &ReadOptions::skipping()
        )
        .is_err());
        // Columns are found by name, in any order; QQP and MNLI layouts work too.
        let qqp = TempFile::new(
            "qqp.tsv",
            b"id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n7\t1\t2\t\"Why?\"\tHow?\t1\n",
        );
        let xs = read_glue_tsv(&qqp.0, Task::Qqp).unwrap();
        let expected =
            Example { idx: 7, text_a: "\"Why?\"".into(), text_b: Some("How?".into()), label: 1 };
        assert_eq!(xs, [expected]);
        let mnli = TempFile::new(
            "mnli.tsv",
            b"index\tpromptID\tpairID\tgenre\tsentence1\tsentence2\tlabel1\tgold_label\n\
              3\t1\t1e\tfiction\tP\tH\tneutral\tcontradiction\n",
        );
        let xs = load(&mnli.0, Task::MnliMismatched).unwrap();
        assert_eq!(xs[0].label, 2, "gold_label, not label1");
        assert_eq!(
            (xs[0].idx, xs[0].text_a.as_str(), xs[0].text_b.as_deref()),
            (3, "P", Some("H"))
        );
    }

    #[test]
    fn bad_tsv_rows_name_line_and_can_be_skipped() {
        let mut bytes =
            b"index\tsentence1\tsentence2\tlabel\n0\ta\tb\tentailment\n1\tc\td\txyz\n".to_vec();
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
}
