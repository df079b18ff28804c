//! The perturbation buttons: which edit of `shared::robustness::perturb` each one makes, at which
//! level.

use shared::robustness::neighbours::WordNeighbours;
use shared::robustness::perturb::{self, Perturbation};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Typo,
    Synonym,
    Delete,
    Distractor,
    Negation,
    Checklist,
}

/// AdvGLUE's attack levels, as the page groups its buttons.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Word,
    Sentence,
}

impl Level {
    pub fn name(self) -> &'static str {
        match self {
            Level::Word => "word",
            Level::Sentence => "sentence",
        }
    }
}

impl Op {
    pub const ALL: [Op; 6] =
        [Op::Typo, Op::Synonym, Op::Delete, Op::Distractor, Op::Negation, Op::Checklist];

    /// The button's `data-perturb` key.
    pub fn key(self) -> &'static str {
        match self {
            Op::Typo => "typo",
            Op::Synonym => "synonym",
            Op::Delete => "delete",
            Op::Distractor => "distractor",
            Op::Negation => "negation",
            Op::Checklist => "checklist",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Op::Typo => "typo",
            Op::Synonym => "synonym",
            Op::Delete => "delete word",
            Op::Distractor => "distractor",
            Op::Negation => "contrast clause",
            Op::Checklist => "CheckList",
        }
    }

    pub fn level(self) -> &'static str {
        self.attack_level().name()
    }

    pub fn attack_level(self) -> Level {
        match self {
            Op::Typo | Op::Synonym | Op::Delete => Level::Word,
            Op::Distractor | Op::Negation | Op::Checklist => Level::Sentence,
        }
    }

    /// The edit of `text` with `seed`: about one word in eight at the word level. `None` for a
    /// synonym swap before the model's embedding neighbours have arrived.
    pub fn apply(
        self,
        text: &str,
        seed: u64,
        neighbours: Option<&WordNeighbours>,
    ) -> Option<Perturbation> {
        let words = (text.split_whitespace().count() / 8).max(1);
        Some(match self {
            Op::Typo => perturb::typo(text, words, seed),
            Op::Synonym => perturb::synonym(text, neighbours?, words, 8, 0.4, seed),
            Op::Delete => perturb::delete_word(text, words, seed),
            Op::Distractor => perturb::distractor(text, seed),
            Op::Negation => perturb::negation_contrast(text, seed),
            Op::Checklist => perturb::checklist_template(text, seed),
        })
    }
}
