//! Models in and out: tensor files, HF checkpoint directories, tokenisation, int8 quantisation,
//! and the model cards and bundles the browser demo loads.

pub mod atomic;
pub mod bundle;
pub mod checkpoint;
pub mod quantize;
pub mod tensor_file;
pub mod tokenizer;
