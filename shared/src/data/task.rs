//! The GLUE tasks AdvGLUE evaluates, their label sets and names, and how AdvGLUE items were
//! made ([`AttackLevel`]).

use std::fmt;
use std::str::FromStr;

use super::DataError;

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
}

impl fmt::Display for Task {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Written as its AdvGLUE key (`"sst2"`, `"mnli-mm"`); read with the spellings `FromStr` takes.
impl serde::Serialize for Task {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

impl<'de> serde::Deserialize<'de> for Task {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
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
    pub const ALL: [AttackLevel; 3] =
        [AttackLevel::Word, AttackLevel::Sentence, AttackLevel::Human];

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

#[cfg(test)]
mod tests {
    use super::*;

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
    fn tasks_serialise_as_their_advglue_keys() {
        for task in Task::ALL {
            let json = serde_json::to_string(&task).unwrap();
            assert_eq!(json, format!("\"{}\"", task.name()));
            assert_eq!(serde_json::from_str::<Task>(&json).unwrap(), task);
        }
        assert_eq!(serde_json::from_str::<Task>("\"SST-2\"").unwrap(), Task::Sst2);
        let err = serde_json::from_str::<Task>("\"cola\"").unwrap_err().to_string();
        assert!(err.contains("cola"), "{err}");
    }
}
