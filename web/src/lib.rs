//! The browser demo: BERT, EX-BERT and IM-BERT side by side on clean and perturbed text.
//!
//! - [`engine`]: one forward pass over (clean, perturbed), read back asynchronously, turned into
//!   verdicts, per-layer hidden-state drift and IM residuals;
//! - [`catalog`]: which exported bundle plays BERT, EX-BERT and IM-BERT for a task;
//! - [`charts`]: chart geometry for the SVG the page draws;
//! - [`runtime`]: WebGPU when the browser has it, the CPU otherwise;
//! - [`protocol`]: the messages between the page and the inference worker;
//! - in the browser only: the worker ([`worker`]: the models on the device in [`session`],
//!   downloads through [`loader`]) and the page ([`app`], the leptos page, which reaches the
//!   worker through [`client`]); [`js`]: the globals both scopes share.

pub mod catalog;
pub mod charts;
pub mod engine;
pub mod protocol;
pub mod runtime;

#[cfg(target_arch = "wasm32")]
pub mod app;
#[cfg(target_arch = "wasm32")]
pub mod client;
#[cfg(target_arch = "wasm32")]
pub mod js;
#[cfg(target_arch = "wasm32")]
pub mod loader;
#[cfg(target_arch = "wasm32")]
pub mod session;
#[cfg(target_arch = "wasm32")]
pub mod worker;
