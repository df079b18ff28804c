//! What the readers produce: labelled examples and AdvGLUE items.

use serde::{Deserialize, Serialize};

use super::{AttackLevel, Task};

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
