//! IM-BERT: BERT whose layers are joined by an implicit Euler step, after "IM-BERT: Enhancing
//! Robustness of BERT through the Implicit Euler Method" (EMNLP 2024).
//!
//! - [`model`]: the model. [`model::implicit_euler`] holds the connections (BERT, EX-BERT,
//!   IM-BERT) and Algorithm 1; [`model::layer`], one BERT layer `phi_t` and its hand-written
//!   vector-Jacobian product; [`model::bert`], embeddings, encoder, pooler and classification
//!   head; [`model::config`], HF's `config.json`; [`model::flops`], analytic FLOP counts.
//! - [`cpu`]: the CPU backend made fast. [`cpu::kernels`] holds fused kernels (GEMMs on views,
//!   GELU, softmax, LayerNorm, dropout mask), also as autodiff nodes for CPU training;
//!   [`cpu::blas`], the GEMM (OpenBLAS with feature `openblas`); `cpu::allocator`, the native
//!   binaries' mimalloc settings.
//! - [`io`]: models in and out. [`io::checkpoint`] reads and writes HF directories;
//!   [`io::tokenizer`] makes WordPiece batches; [`io::quantize`] and [`io::bundle`] handle int8
//!   weights, model cards and the browser's model bundles.
//! - [`robustness`]: [`robustness::perturb`], [`robustness::neighbours`] and
//!   [`robustness::attack`] are text perturbations, synonym candidates and the TextFooler attack.
//! - [`data`]: GLUE and AdvGLUE readers, tasks and seeded splits; [`rng`]: the one SplitMix64.
//!
//! Everything is generic over burn's `Backend` and compiles for wasm32, so the trainer and the
//! browser demo share one definition.

pub mod cpu;
pub mod data;
pub mod error;
pub mod io;
pub mod model;
pub mod rng;
pub mod robustness;

pub use error::Error;
pub use io::tokenizer::{BertTokenizer, EncodedBatch};
pub use model::config::BertConfig;
pub use model::implicit_euler::{
    residual_rises, Connection, ConnectionSpec, ImplicitEuler, InnerGradient, SolveOptions,
    StepRule, RECOMMENDED_IM,
};
pub use model::{BertClassifier, BertInput, ClassifierOutput, ForwardOptions};
