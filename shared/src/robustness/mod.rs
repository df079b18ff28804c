//! Robustness tooling: text perturbations, embedding-space neighbours (synonym candidates), the
//! TextFooler attack and the search for the fewest edits that flip a verdict.

pub mod attack;
pub mod classify;
pub mod flip_search;
pub mod neighbours;
pub mod perturb;
