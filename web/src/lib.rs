//! The browser demo: BERT, EX-BERT and IM-BERT side by side on clean and perturbed text.
//!
//! - [`engine`]: one forward pass over (clean, perturbed), read back asynchronously, turned into
//!   verdicts, per-layer hidden-state drift and IM residuals;
//! - [`catalog`]: which exported bundle plays BERT, EX-BERT and IM-BERT for a task;
//! - [`charts`]: chart geometry for the SVG the page draws;
//! - [`runtime`]: WebGPU when the browser has it, the CPU otherwise;
//! - in the browser only: [`loader`] (downloads, Cache API), [`session`] (models on the device,
//!   result cache) and [`app`] (the leptos page).

pub mod catalog;
pub mod charts;
pub mod engine;
pub mod runtime;

#[cfg(target_arch = "wasm32")]
pub mod app;
#[cfg(target_arch = "wasm32")]
pub mod loader;
#[cfg(target_arch = "wasm32")]
pub mod session;
