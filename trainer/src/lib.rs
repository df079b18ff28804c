//! The trainer's library: every subcommand is a module with its `Args` and a `run` function;
//! `main.rs` only parses the command line and reports errors.

pub mod adamw;
pub mod attack;
pub mod backend;
pub mod datasets;
pub mod evaluate;
pub mod export;
pub mod fetch;
pub mod finetune;
pub mod flip;
pub mod grad_norms;
pub mod inspect;
pub mod lr_search;
pub mod predict;
pub mod probe;
pub mod report;
pub mod reproduce;
pub mod run;
pub mod speed;
