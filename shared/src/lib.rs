//! IM-BERT: BERT whose layers are joined by an implicit Euler step, after "IM-BERT: Enhancing
//! Robustness of BERT through the Implicit Euler Method" (EMNLP 2024).
//!
//! - [`implicit_euler`]: the connections (BERT, EX-BERT, IM-BERT) and Algorithm 1.
//! - [`layer`]: one BERT layer `phi_t` and its hand-written vector-Jacobian product.
//! - [`kernels`]: fused CPU kernels (GEMMs on views, GELU, softmax, LayerNorm, dropout mask),
//!   also as autodiff nodes for CPU training.
//! - [`model`]: embeddings, encoder, pooler and classification head.
//! - [`checkpoint`]: HF directories in and out; [`tokenizer`]: WordPiece batches.
//! - [`quantize`], [`bundle`]: int8 weights, model cards and the browser's model bundles.
//! - [`blas`]: the CPU backend's GEMM (OpenBLAS with feature `openblas`); [`allocator`]: the
//!   native binaries' mimalloc settings.
//! - [`flops`]: analytic FLOP counts per example (BERT, EX, IM with its VJPs).
//! - [`perturb`], [`neighbours`], [`attack`]: text perturbations and the TextFooler attack.
//!
//! Everything is generic over burn's `Backend` and compiles for wasm32, so the trainer and the
//! browser demo share one definition.

#[cfg(not(target_arch = "wasm32"))]
pub mod allocator;
pub mod attack;
pub mod blas;
pub mod bundle;
pub mod checkpoint;
pub mod config;
pub mod data;
pub mod error;
pub mod flops;
pub mod implicit_euler;
pub mod kernels;
pub mod layer;
pub mod model;
pub mod neighbours;
pub mod perturb;
pub mod quantize;
pub mod rng;
pub mod tokenizer;

pub use config::BertConfig;
pub use error::Error;
pub use implicit_euler::{residual_rises, Connection, ConnectionSpec, ImplicitEuler, InnerGradient, SolveOptions, StepRule, RECOMMENDED_IM};
pub use model::{BertClassifier, BertInput, ClassifierOutput, ForwardOptions};
pub use tokenizer::{BertTokenizer, EncodedBatch};
