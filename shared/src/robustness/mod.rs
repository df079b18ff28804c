//! Robustness tooling: text perturbations, embedding-space neighbours (synonym candidates) and
//! the TextFooler attack.

pub mod attack;
pub mod neighbours;
pub mod perturb;
