//! The readers on real files: the samples committed under `tests/fixtures/data` always, and the
//! full benchmark data, with its published counts (its SOURCES.md), where it is present.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;

use super::test_data::{fixtures_dir, full_data_or_skip};
use super::*;

fn assert_unique_idx(name: &str, xs: &[Example]) {
    let set: HashSet<i64> = xs.iter().map(|e| e.idx).collect();
    assert_eq!(set.len(), xs.len(), "{name}: idx not unique");
}

/// GLUE TSVs and the normalised jsonl made from each.
const TSV_AND_NORMALIZED: [(&str, &str, Task); 5] = [
    ("glue/SST-2/train.tsv", "normalized/sst2_train.jsonl", Task::Sst2),
    ("glue/SST-2/dev.tsv", "normalized/sst2_dev.jsonl", Task::Sst2),
    ("glue/RTE/train.tsv", "normalized/rte_train.jsonl", Task::Rte),
    ("glue/RTE/dev.tsv", "normalized/rte_dev.jsonl", Task::Rte),
    ("glue/QNLI/dev.tsv", "normalized/qnli_dev.jsonl", Task::Qnli),
];

/// Train subsets (under `glue_train_subsets/`) and the normalised jsonl made from each.
const SUBSET_AND_NORMALIZED: [(&str, &str, Task); 6] = [
    ("MNLI/train.json", "mnli_train_subset_a", Task::Mnli),
    ("MNLI/dev.json", "mnli_train_subset_b", Task::Mnli),
    ("QNLI/train.json", "qnli_train_subset_a", Task::Qnli),
    ("QNLI/dev.json", "qnli_train_subset_b", Task::Qnli),
    ("QQP/train.json", "qqp_train_subset_a", Task::Qqp),
    ("QQP/dev.json", "qqp_train_subset_b", Task::Qqp),
];

/// The normalised AdvGLUE file of each task.
const ADVGLUE_NORMALIZED: [(Task, &str); 6] = [
    (Task::Sst2, "advglue_sst2_dev"),
    (Task::Qqp, "advglue_qqp_dev"),
    (Task::Mnli, "advglue_mnli_dev"),
    (Task::MnliMismatched, "advglue_mnli_mm_dev"),
    (Task::Qnli, "advglue_qnli_dev"),
    (Task::Rte, "advglue_rte_dev"),
];

/// Reads every GLUE TSV under `dir`, checks it against its normalised jsonl (a field mapping of
/// it: identical examples) and returns it.
fn tsvs_matching_normalized(dir: &Path) -> Vec<(&'static str, Task, Vec<Example>)> {
    let mut out = Vec::new();
    for (tsv, jsonl, task) in TSV_AND_NORMALIZED {
        let from_tsv = read_glue_tsv(dir.join(tsv), task).unwrap();
        assert_unique_idx(tsv, &from_tsv);
        assert_eq!(from_tsv, read_jsonl(dir.join(jsonl), task).unwrap(), "{tsv} vs {jsonl}");
        out.push((tsv, task, from_tsv));
    }
    let sst2 = read_glue_tsv(dir.join("glue/SST-2/dev.tsv"), Task::Sst2).unwrap();
    assert_eq!(sst2[0].idx, 0);
    assert!(sst2[0].text_a.ends_with(' '), "GLUE's trailing space is kept");
    let rte = read_glue_tsv(dir.join("glue/RTE/train.tsv"), Task::Rte).unwrap();
    assert_eq!(rte[0].text_a, "No Weapons of Mass Destruction Found in Iraq Yet.");
    assert_eq!(rte[0].text_b.as_deref(), Some("Weapons of Mass Destruction Found in Iraq."));
    assert_eq!(rte[0].label, 1, "not_entailment");
    out
}

/// Reads every train subset under `dir`, checks it against its normalised jsonl and returns it.
fn subsets_matching_normalized(dir: &Path) -> Vec<(&'static str, Task, Vec<Example>)> {
    let mut out = Vec::new();
    for (json, jsonl, task) in SUBSET_AND_NORMALIZED {
        let path = dir.join("glue_train_subsets").join(json);
        let xs = read_train_subset_json(&path, task).unwrap();
        assert_unique_idx(json, &xs);
        let normalized = read_jsonl(dir.join(format!("normalized/{jsonl}.jsonl")), task).unwrap();
        assert_eq!(xs, normalized, "{json} vs {jsonl}");
        // `load` tells a train subset from AdvGLUE by shape.
        assert_eq!(load(&path, task).unwrap().len(), xs.len());
        out.push((json, task, xs));
    }
    out
}

/// Reads AdvGLUE `dev.json` and `dev_ann.json` under `dir`, checks that they agree with each
/// other and with the normalised jsonl, and returns the annotated items.
fn advglue_agreeing(dir: &Path) -> Vec<AdvExample> {
    let plain = read_advglue_json(dir.join("advglue/dev.json")).unwrap();
    let ann = read_advglue_json(dir.join("advglue/dev_ann.json")).unwrap();
    assert_eq!(plain.len(), ann.len());
    // The plain file has no annotations; on shared fields the two files agree.
    assert!(plain
        .iter()
        .all(|a| a.method.is_none() && a.level.is_none() && a.original_a.is_none()));
    for (p, a) in plain.iter().zip(&ann) {
        assert_eq!((p.task, &p.example), (a.task, &a.example));
    }
    assert!(ann.iter().all(|a| a.level.is_some() && a.method.is_some()));
    for (task, file) in ADVGLUE_NORMALIZED {
        let from_ann: Vec<&AdvExample> = ann.iter().filter(|a| a.task == task).collect();
        let xs: Vec<Example> = from_ann.iter().map(|a| a.example.clone()).collect();
        assert_unique_idx(file, &xs);
        let jsonl = load_advglue(dir.join(format!("normalized/{file}.jsonl")), task).unwrap();
        assert_eq!(jsonl.iter().collect::<Vec<_>>(), from_ann, "{file}");
        assert_eq!(
            load_advglue(dir.join("advglue/dev_ann.json"), task).unwrap().len(),
            jsonl.len()
        );
        assert_eq!(load(dir.join("advglue/dev.json"), task).unwrap().len(), jsonl.len());
    }
    let rte_first = ann.iter().find(|a| a.task == Task::Rte).unwrap();
    assert!(rte_first.original_a.as_deref().unwrap().starts_with("The international humanitarian"));
    assert_eq!(rte_first.original_b, None);
    ann
}

/// Every normalised jsonl file's name (under `normalized/`, without `.jsonl`).
const NORMALIZED: [&str; 19] = [
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
];

/// The files that the tests here read, plus `extra` (documentation, metadata, Arrow), against
/// every file under `dir`: a file added later must be added here too.
fn assert_every_file_is_covered(dir: &Path, extra: &[&str]) {
    let mut tested: HashSet<String> = extra.iter().map(|s| s.to_string()).collect();
    tested.extend(
        ["advglue/dev.json", "advglue/dev_ann.json", "imdb/textfooler_imdb_1000.txt"]
            .map(String::from),
    );
    tested.extend(TSV_AND_NORMALIZED.map(|(tsv, _, _)| tsv.to_string()));
    tested.extend(SUBSET_AND_NORMALIZED.map(|(json, _, _)| format!("glue_train_subsets/{json}")));
    tested.extend(NORMALIZED.map(|name| format!("normalized/{name}.jsonl")));
    let mut found = HashSet::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                let rel = path.strip_prefix(dir).unwrap().to_string_lossy().replace('\\', "/");
                found.insert(rel);
            }
        }
    }
    assert_eq!(found, tested, "files under {}", dir.display());
}

// ---------------------------------------------------------------------------------------------
// The committed samples: every format, the same checks of agreement between files.
// ---------------------------------------------------------------------------------------------

/// Rows per line-based sample (`ROWS` in `tests/fixtures/data/cut.py`).
const SAMPLE_ROWS: usize = 48;

fn assert_every_label_occurs(name: &str, xs: &[Example], task: Task) {
    let counts = label_counts(xs, task.num_labels());
    assert!(counts.iter().all(|&c| c > 0), "{name}: a label is missing: {counts:?}");
}

#[test]
fn sample_tsvs_and_train_subsets_match_their_normalized_jsonl() {
    let dir = fixtures_dir();
    let read = tsvs_matching_normalized(&dir).into_iter().chain(subsets_matching_normalized(&dir));
    for (name, task, xs) in read {
        assert_eq!(xs.len(), SAMPLE_ROWS, "{name}");
        assert_every_label_occurs(name, &xs, task);
    }
    for name in NORMALIZED.iter().filter(|n| !n.starts_with("advglue_")) {
        let task = if name.starts_with("mnli_dev_mis") {
            Task::MnliMismatched
        } else {
            name.split('_').next().unwrap().parse().unwrap()
        };
        let xs = load(dir.join(format!("normalized/{name}.jsonl")), task).unwrap();
        assert_eq!(xs.len(), SAMPLE_ROWS, "{name}");
        assert_every_label_occurs(name, &xs, task);
    }
}

#[test]
fn sample_advglue_files_agree_and_hold_every_attack_level() {
    let ann = advglue_agreeing(&fixtures_dir());
    let levels: HashSet<(Task, AttackLevel)> =
        ann.iter().map(|a| (a.task, a.level.unwrap())).collect();
    for task in Task::ALL {
        let xs: Vec<Example> =
            ann.iter().filter(|a| a.task == task).map(|a| a.example.clone()).collect();
        assert!(xs.len() >= 24, "{task}: {} items", xs.len());
        assert_every_label_occurs(task.name(), &xs, task);
        assert!(
            levels.contains(&(task, AttackLevel::Word))
                && levels.contains(&(task, AttackLevel::Sentence))
        );
    }
    assert!(levels.contains(&(Task::Sst2, AttackLevel::Human)));
}

#[test]
fn sample_imdb_reads_and_every_sample_file_is_covered() {
    let dir = fixtures_dir();
    let imdb = read_label_text(dir.join("imdb/textfooler_imdb_1000.txt"), Task::Sst2).unwrap();
    assert_eq!(imdb.len(), SAMPLE_ROWS / 2);
    assert_every_label_occurs("imdb", &imdb, Task::Sst2);
    assert!(imdb[0].text_a.starts_with("seriously , i do n't"));
    assert_every_file_is_covered(&dir, &["SOURCES.md", "cut.py"]);
}

// ---------------------------------------------------------------------------------------------
// The full data, where present: the published counts.
// ---------------------------------------------------------------------------------------------

#[test]
fn glue_tsvs_have_the_published_counts_and_match_normalized() {
    let Some(dir) = full_data_or_skip("glue_tsvs_have_the_published_counts_and_match_normalized")
    else {
        return;
    };
    let counts: [&[usize]; 5] =
        [&[29_780, 37_569], &[428, 444], &[1_249, 1_241], &[146, 131], &[2_702, 2_761]];
    for ((tsv, task, xs), counts) in tsvs_matching_normalized(&dir).into_iter().zip(counts) {
        assert_eq!(label_counts(&xs, task.num_labels()), counts, "{tsv}");
        assert_eq!(xs.len(), counts.iter().sum::<usize>(), "{tsv}");
    }
}

#[test]
fn normalized_jsonl_files_have_the_listed_counts() {
    let Some(dir) = full_data_or_skip("normalized_jsonl_files_have_the_listed_counts") else {
        return;
    };
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
        let path = dir.join(format!("normalized/{name}.jsonl"));
        let xs = load(&path, task).unwrap();
        assert_eq!(label_counts(&xs, task.num_labels()), counts, "{name}");
        assert_eq!(xs.len(), counts.iter().sum::<usize>(), "{name}");
        assert_unique_idx(name, &xs);
        assert!(xs.iter().all(|e| !e.text_a.is_empty()), "{name}: empty text_a");
    }
}

#[test]
fn train_subsets_have_the_listed_counts_and_match_normalized() {
    let Some(dir) = full_data_or_skip("train_subsets_have_the_listed_counts_and_match_normalized")
    else {
        return;
    };
    let counts: [&[usize]; 6] = [
        &[3_061, 2_980, 2_958],
        &[347, 333, 320],
        &[4_523, 4_476],
        &[504, 496],
        &[5_747, 3_252],
        &[623, 377],
    ];
    for ((json, task, xs), counts) in subsets_matching_normalized(&dir).into_iter().zip(counts) {
        assert_eq!(label_counts(&xs, task.num_labels()), counts, "{json}");
        assert_eq!(xs.len(), counts.iter().sum::<usize>(), "{json}");
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
    let Some(dir) = full_data_or_skip("advglue_dev_and_dev_ann_have_the_listed_counts") else {
        return;
    };
    let ann = advglue_agreeing(&dir);
    assert_eq!(ann.len(), 738);
    for (task, counts) in ADVGLUE_LABELS {
        let xs: Vec<Example> =
            ann.iter().filter(|a| a.task == task).map(|a| a.example.clone()).collect();
        assert_eq!(label_counts(&xs, task.num_labels()), counts, "{task}");
        assert_eq!(xs.len(), counts.iter().sum::<usize>(), "{task}");
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
    let sst2_originals =
        ann.iter().filter(|a| a.task == Task::Sst2 && a.original_a.is_some()).count();
    assert_eq!(sst2_originals, 131);
    let rte_first = &ann.iter().find(|a| a.task == Task::Rte).unwrap();
    assert!(rte_first.original_a.as_deref().unwrap().starts_with("The international humanitarian"));
    assert_eq!(rte_first.original_b, None);
}

#[test]
fn imdb_label_text_and_every_data_file_is_covered() {
    let Some(dir) = full_data_or_skip("imdb_label_text_and_every_data_file_is_covered") else {
        return;
    };
    let imdb = read_label_text(dir.join("imdb/textfooler_imdb_1000.txt"), Task::Sst2).unwrap();
    assert_eq!(imdb.len(), 1000);
    assert_eq!(label_counts(&imdb, 2), [497, 503]);
    assert!(imdb[0].text_a.starts_with("seriously , i do n't"));
    let arrow = dir.join("glue/MNLI/validation_matched.arrow");
    assert!(matches!(load(&arrow, Task::Mnli), Err(DataError::Unsupported { .. })));
    assert_every_file_is_covered(
        &dir,
        &[
            "SOURCES.md",
            "glue/MNLI/dataset_info.json",
            "glue/MNLI/validation_matched.arrow",
            "glue/MNLI/validation_mismatched.arrow",
        ],
    );
}

#[test]
fn low_resource_split_of_a_real_training_set() {
    let Some(dir) = full_data_or_skip("low_resource_split_of_a_real_training_set") else {
        return;
    };
    // 1000 + 500, disjoint, reproducible.
    let mnli = read_jsonl(dir.join("normalized/mnli_train_subset_a.jsonl"), Task::Mnli).unwrap();
    let (train, val) =
        low_resource_split(mnli.clone(), LOW_RESOURCE_TRAIN, LOW_RESOURCE_VALIDATION, 1);
    assert_eq!((train.len(), val.len()), (1000, 500));
    let train_idx: HashSet<i64> = train.iter().map(|e| e.idx).collect();
    assert!(val.iter().all(|e| !train_idx.contains(&e.idx)));
    assert_eq!(low_resource_split(mnli.clone(), 1000, 500, 1), (train.clone(), val));
    assert!(train.iter().any(|e| e.idx > 8000), "drawn from the whole file, not its first rows");
}
