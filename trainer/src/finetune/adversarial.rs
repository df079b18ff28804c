//! The training loss of a batch: cross-entropy, or CreAT and PGD adversarial training on the
//! word embeddings.

use anyhow::{Context, Result};
use burn::nn::loss::CrossEntropyLossConfig;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Distribution, Int, Tensor};
use shared::{BertClassifier, ForwardOptions};

use crate::run::{AdvKind, RunConfig};

/// The loss one training step minimises on a batch: cross-entropy without adversarial
/// training, else `adversarial_loss`. Shared by the training loop and `trainer speed`, so that
/// what speed times is what training runs.
pub(crate) fn training_loss<B: AutodiffBackend>(
    model: &BertClassifier<B>,
    input: &shared::BertInput<B>,
    labels: Tensor<B, 1, Int>,
    config: &RunConfig,
) -> Result<Tensor<B, 1>> {
    if config.adv == AdvKind::None {
        let logits =
            model.forward(input, ForwardOptions::default()).logits.context("no classifier")?;
        Ok(CrossEntropyLossConfig::new().init(&labels.device()).forward(logits, labels))
    } else {
        adversarial_loss(model, input, labels, config)
    }
}

/// CreAT / PGD: one or more ascent steps on a word-embedding perturbation `delta`, maximising the
/// task loss minus `tau` times the cosine similarity of the final encoder states to the clean
/// ones, each step normalised per example and projected onto `||delta||_F <= epsilon`; then
/// `lambda L(x) + (1 - lambda) L(x + delta)`.
fn adversarial_loss<B: AutodiffBackend>(
    model: &BertClassifier<B>,
    input: &shared::BertInput<B>,
    labels: Tensor<B, 1, Int>,
    config: &RunConfig,
) -> Result<Tensor<B, 1>> {
    let device = labels.device();
    let ce = CrossEntropyLossConfig::new().init(&device);
    let clean = model.forward(input, ForwardOptions::default());
    let loss_clean = ce.forward(clean.logits.context("no classifier")?, labels.clone());
    let [batch, seq, hidden] = clean.last_hidden_state.dims();
    let mask = input.attention_mask.clone().float().reshape([batch, seq, 1]); // [b, s, 1]
    let states_clean = clean.last_hidden_state.detach();

    // delta lives outside the graph between steps; CreAT starts from small Gaussian noise.
    let inner_mask = mask.clone().inner();
    let mut delta = Tensor::<B::InnerBackend, 3>::random(
        [batch, seq, hidden],
        Distribution::Normal(0.0, 1e-5),
        &device,
    ) * inner_mask.clone();
    for _ in 0..config.adv_steps {
        let d = Tensor::<B, 3>::from_inner(delta.clone()).require_grad();
        let out = model.forward_perturbed(input, Some(d.clone()), ForwardOptions::default());
        let task_loss = ce.forward(out.logits.context("no classifier")?, labels.clone());
        let cos = token_cosine(out.last_hidden_state, states_clean.clone(), mask.clone());
        let objective = task_loss - cos.mul_scalar(config.adv_tau);
        let grads = objective.backward();
        let g = d.grad(&grads).context("no gradient reached the perturbation")?;
        let g_norm = g.clone().powi_scalar(2).sum_dims(&[1, 2]).sqrt().clamp_min(1e-8); // [b, 1, 1]
        delta = delta + (g / g_norm).mul_scalar(config.adv_alpha);
        let d_norm = delta.clone().powi_scalar(2).sum_dims(&[1, 2]).sqrt().clamp_min(1e-12);
        delta = delta
            * (d_norm.recip().mul_scalar(config.adv_epsilon)).clamp_max(1.0)
            * inner_mask.clone();
    }
    let adv =
        model.forward_perturbed(input, Some(Tensor::from_inner(delta)), ForwardOptions::default());
    let loss_adv = ce.forward(adv.logits.context("no classifier")?, labels);
    Ok(loss_clean.mul_scalar(config.adv_lambda) + loss_adv.mul_scalar(1.0 - config.adv_lambda))
}

/// Mean over real tokens of the cosine similarity of two `[batch, seq, hidden]` states.
fn token_cosine<B: Backend>(a: Tensor<B, 3>, b: Tensor<B, 3>, mask: Tensor<B, 3>) -> Tensor<B, 1> {
    let dot = (a.clone() * b.clone()).sum_dim(2);
    let norms = a.powi_scalar(2).sum_dim(2).sqrt() * b.powi_scalar(2).sum_dim(2).sqrt();
    let cos = dot / norms.clamp_min(1e-8) * mask.clone(); // [b, s, 1]
    cos.sum() / mask.sum()
}
