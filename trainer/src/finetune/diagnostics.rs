//! Numerical checks that speak before hours are spent: the IM residuals on the warm-start
//! weights, and where a non-finite loss came from.

use std::path::Path;

use anyhow::Result;
use burn::tensor::backend::Backend;
use burn::tensor::{ElementConversion, Tensor};
use shared::data::Example;
use shared::{BertClassifier, BertTokenizer, ForwardOptions};

use super::logging::{log, warn};
use super::train_loop::to_batch;
use crate::run::{self, ImResidualCheck, LayerResidualCheck};

/// What the IM iteration does on the warm-start weights, before any step: each IM layer's
/// `||r||^2` over the iterations, summed over the first validation batch, logged and written to
/// `im_residuals.json`. Where it rises, gamma is too large for that layer (the solve does not
/// converge and amplifies f32 rounding, docs/numerics.md): a warning says so before hours of
/// training rather than after.
pub(super) fn check_im_residuals<B: Backend>(
    model: &BertClassifier<B>,
    tokenizer: &BertTokenizer,
    val: &[Example],
    max_len: usize,
    run_dir: &Path,
    device: &B::Device,
) -> Result<()> {
    let connections = &model.bert.encoder.connections;
    if !connections.iter().any(|c| matches!(c, shared::Connection::Implicit(_))) {
        return Ok(());
    }
    let examples: Vec<&Example> = val.iter().take(16).collect();
    let (input, _) = to_batch::<B>(tokenizer, &examples, max_len, device)?;
    let out = model.forward(&input, ForwardOptions { im_residuals: true, ..Default::default() });
    let mut layers = Vec::new();
    for (layer, residuals) in &out.im_residuals {
        let shared::Connection::Implicit(im) = connections[*layer] else { continue };
        let norms: Vec<f64> =
            residuals.iter().map(|r| r.clone().sum().into_scalar().elem()).collect();
        let rises = shared::residual_rises(&norms);
        let trace: Vec<String> = norms.iter().map(|x| format!("{x:.4e}")).collect();
        log(
            run_dir,
            &format!(
                "IM layer {layer}: ||r||^2 on {} validation examples: {}",
                examples.len(),
                trace.join(" -> ")
            ),
        )?;
        if !rises.is_empty() {
            let after: Vec<String> = rises.iter().map(usize::to_string).collect();
            warn(
                run_dir,
                &format!(
                    "IM layer {layer}: ||r||^2 rose in iteration{} {} of {}: gamma = {} \
                     overshoots on this layer, so the solve does not converge and f32 results \
                     depend on rounding (docs/numerics.md); step=backtrack in the connection spec \
                     (or a smaller gamma) descends",
                    if after.len() > 1 { "s" } else { "" },
                    after.join(", "),
                    norms.len() - 1,
                    im.gamma
                ),
            )?;
        }
        layers.push(LayerResidualCheck {
            layer: *layer,
            gamma: im.gamma,
            squared_norms: norms,
            rises_after_iteration: rises,
        });
    }
    run::write_json(
        &run_dir.join(run::IM_RESIDUALS_FILE),
        &ImResidualCheck { examples: examples.len(), layers },
    )
}

/// Finds where a non-finite loss came from: the first layer whose output or IM residual is not
/// finite.
pub(super) fn diagnose_non_finite<B: Backend>(
    model: &BertClassifier<B>,
    input: &shared::BertInput<B>,
    step: usize,
) -> String {
    let out = model.forward(
        input,
        ForwardOptions { hidden_states: true, im_residuals: true, ..Default::default() },
    );
    let finite = |v: Vec<f32>| v.iter().all(|x| x.is_finite());
    let host =
        |t: Tensor<B, 1>| t.into_data().convert::<f32>().into_vec::<f32>().unwrap_or_default();
    for (layer, residuals) in &out.im_residuals {
        for (i, r) in residuals.iter().enumerate() {
            if !finite(host(r.clone())) {
                return format!(
                    "non-finite IM residual at step {step}: layer {layer}, iteration {i}"
                );
            }
        }
    }
    for (i, h) in out.hidden_states.iter().enumerate() {
        if !finite(host(h.clone().flatten(0, 2))) {
            let what =
                if i == 0 { "the embeddings".to_string() } else { format!("layer {}", i - 1) };
            return format!(
                "non-finite loss at step {step}: first non-finite hidden state in {what}"
            );
        }
    }
    format!(
        "non-finite loss at step {step} (all hidden states finite: the head or the loss \
         overflowed)"
    )
}
