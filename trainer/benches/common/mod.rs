//! What the trainer's benchmarks share: MiniLM-L6 loaded for a two-label task, one fixed batch
//! of `batch` sequences of `seq` tokens with no padding, and its cross-entropy loss.

use std::path::{Path, PathBuf};

use burn::backend::{Autodiff, NdArray};
use burn::nn::loss::{CrossEntropyLoss, CrossEntropyLossConfig};
use burn::tensor::{Int, Tensor, TensorData};
use shared::io::checkpoint::load_for_task;
use shared::{BertClassifier, BertInput, ForwardOptions};

pub type B = Autodiff<NdArray<f32>>;

/// The model directory: `IMBERT_MINILM`, else `make model`'s.
pub fn model_dir() -> PathBuf {
    std::env::var_os("IMBERT_MINILM").map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../models/all-minilm-l6-v2")
    })
}

/// The model, one fixed batch and the loss every measurement shares.
pub struct Setup {
    pub base: BertClassifier<B>,
    pub input: BertInput<B>,
    pub labels: Tensor<B, 1, Int>,
    pub ce: CrossEntropyLoss<B>,
}

impl Setup {
    pub fn new(dir: &Path, batch: usize, seq: usize) -> Self {
        let device = Default::default();
        let (base, _) = load_for_task::<B>(dir, 2, &device)
            .unwrap_or_else(|e| panic!("{e}: run `make model` first"));
        // [CLS] w ... w [SEP], word ids spread over the vocabulary.
        let ids: Vec<i64> = (0..batch * seq)
            .map(|i| match i % seq {
                0 => 101,
                j if j == seq - 1 => 102,
                j => 1000 + (j as i64 * 7919 + i as i64) % 19000,
            })
            .collect();
        let t =
            |v: Vec<i64>| Tensor::<B, 2, Int>::from_data(TensorData::new(v, [batch, seq]), &device);
        let input = BertInput {
            input_ids: t(ids),
            token_type_ids: t(vec![0; batch * seq]),
            attention_mask: t(vec![1; batch * seq]),
        };
        let labels = Tensor::<B, 1, Int>::from_data(
            TensorData::new((0..batch as i64).map(|i| i % 2).collect::<Vec<_>>(), [batch]),
            &device,
        );
        Self { base, input, labels, ce: CrossEntropyLossConfig::new().init(&device) }
    }

    /// The training forward: `[batch]` logits' mean cross-entropy, graph attached.
    pub fn loss(&self, model: &BertClassifier<B>) -> Tensor<B, 1> {
        self.ce.forward(
            model.forward(&self.input, ForwardOptions::default()).logits.unwrap(),
            self.labels.clone(),
        )
    }
}
