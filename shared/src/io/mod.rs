//! Models in and out: HF checkpoint directories, WordPiece tokenisation, int8 quantisation,
//! and the model cards and bundles the browser demo loads.

pub mod atomic;
pub mod bundle;
pub mod checkpoint;
pub mod quantize;
pub mod tokenizer;
