//! What every benchmark of MiniLM-L6 starts from: where the model is and one synthetic batch.
//! Included by the shared and the trainer benchmarks alike (`#[path]`), so they time the same
//! input.

use std::path::PathBuf;

use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor, TensorData};
use shared::BertInput;

/// The model directory: `IMBERT_MINILM`, else `make model`'s.
pub fn model_dir() -> PathBuf {
    std::env::var_os("IMBERT_MINILM").map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../models/all-minilm-l6-v2")
    })
}

/// `batch` sequences of `seq` tokens, `[CLS] w ... w [SEP]`, no padding: `[batch, seq]` each.
/// The word ids are spread over the vocabulary; the cost does not depend on them.
pub fn synthetic_input<B: Backend>(batch: usize, seq: usize, device: &B::Device) -> BertInput<B> {
    let ids: Vec<i64> = (0..batch * seq)
        .map(|i| match i % seq {
            0 => 101,
            j if j == seq - 1 => 102,
            j => 1000 + (j as i64 * 7919 + i as i64) % 19000,
        })
        .collect();
    let t = |v: Vec<i64>| Tensor::<B, 2, Int>::from_data(TensorData::new(v, [batch, seq]), device);
    BertInput {
        input_ids: t(ids),
        token_type_ids: t(vec![0; batch * seq]),
        attention_mask: t(vec![1; batch * seq]),
    }
}
