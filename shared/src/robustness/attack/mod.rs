//! TextFooler (Jin et al., "Is BERT Really Robust?", AAAI 2020): a greedy, black-box
//! word-substitution attack, with TextAttack's bookkeeping (query counts, skipped examples,
//! summary metrics) so the numbers compare with the papers' tables.
//!
//! For each example the model classifies correctly:
//! 1. Word importance by deletion: `I(w_i) = P_y(x) - P_y(x without w_i)` (one query per
//!    candidate word). Stop words and words with no neighbours are not scored (they could
//!    never be replaced, so scoring them would only spend queries).
//! 2. In decreasing importance, the candidates of `w_i` are its `k` nearest neighbours in the
//!    model's own word embeddings with cosine >= `min_cosine` ([`WordNeighbours`]; TextFooler
//!    uses counter-fitted GloVe, a POS check and a USE similarity check, which we do not have).
//!    All candidates of a word are scored in one batch.
//! 3. If some candidates flip the prediction, keep the one closest to `w_i` (highest cosine:
//!    our stand-in for TextFooler's USE similarity) and stop. Else keep the candidate that
//!    lowers `P_y` most, if it lowers it at all, and go on.
//! 4. Stop at the query budget (every text the model scores counts, the clean one included,
//!    as in TextAttack) or when `ceil(max_perturb_ratio * words)` words are replaced.
//!
//! Pairs: only one text is attacked, by default the second (`text_b`: the NLI hypothesis, QQP's
//! question2, QNLI's sentence), as TextAttack's recipes do for NLI; [`PairField::TextA`] attacks
//! the first instead.
//!
//! The model must be in inference mode: run on a non-autodiff backend, or pass `model.valid()`,
//! or dropout makes the predictions random.

mod config;
mod report;
mod textfooler;

pub use config::{AttackConfig, PairField};
pub use report::{AttackResult, AttackStatus, AttackSummary, Substitution};
pub use textfooler::TextFooler;

#[cfg(test)]
mod tests;
