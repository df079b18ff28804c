//! What the trainer's benchmarks share: MiniLM-L6 loaded for a two-label task, one fixed batch
//! of `batch` sequences of `seq` tokens with no padding, and its cross-entropy loss.

use std::path::Path;

use burn::backend::{Autodiff, NdArray};
use burn::nn::loss::{CrossEntropyLoss, CrossEntropyLossConfig};
use burn::tensor::{Int, Tensor, TensorData};
use shared::io::checkpoint::load_for_task;
use shared::{BertClassifier, BertInput, ForwardOptions};

#[path = "../../../shared/benches/minilm/mod.rs"]
mod minilm;
pub use minilm::model_dir;
use minilm::synthetic_input;

pub type B = Autodiff<NdArray<f32>>;

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
        let input = synthetic_input(batch, seq, &device);
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
