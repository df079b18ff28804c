//! The safeguarded solve: Algorithm 1 with a per-example step size (`step=backtrack`) and a
//! per-example stop (`tol=eps`). The paper's fixed-step loop stays in `ImplicitEuler::step`,
//! untouched; this one runs only when a spec asks for it.
//!
//! Every decision here (accept a step, stop an example) is made on values and enters the graph
//! as a constant 0/1 mask, so the training gradient is that of the path actually taken.

use burn::tensor::backend::Backend;
use burn::tensor::{ElementConversion, Tensor};

use super::{squared_norm, ImplicitEuler, ImplicitStep, StepRule, MAX_HALVINGS};
use crate::kernels::{add_residual, masked_residual};
use crate::layer::{BertLayer, LayerCache, LayerContext};

/// One point of the solve: `z`, the layer's cache there, `r = (z - h - phi(z)) * mask` and
/// `||r||^2` per example.
struct Iterate<B: Backend> {
    z: Tensor<B, 3>,        // [batch, seq, hidden]
    cache: LayerCache<B>,
    r: Tensor<B, 3>,        // [batch, seq, hidden]
    norm: Tensor<B, 1>,     // [batch]
}

/// What one solve shares: the layer, its input and the padding mask.
struct Problem<'a, B: Backend> {
    phi: &'a BertLayer<B>,
    h_prev: &'a Tensor<B, 3>,
    ctx: &'a LayerContext<B>,
    token_mask: &'a Tensor<B, 3>,
}

impl<B: Backend> Problem<'_, B> {
    fn at(&self, z: Tensor<B, 3>) -> Iterate<B> {
        let (phi_z, cache) = self.phi.forward_cached(z.clone(), self.ctx);
        let r = masked_residual(&z, self.h_prev, phi_z, self.token_mask);
        let norm = squared_norm(&r);
        Iterate { z, cache, r, norm }
    }
}

/// `[batch]` -> `[batch, 1, 1]`, to scale each example's `[seq, hidden]` block.
fn per_example<B: Backend>(v: Tensor<B, 1>) -> Tensor<B, 3> {
    let batch = v.dims()[0];
    v.reshape([batch, 1, 1])
}

/// `mask ? a : b` per example, `mask` a `[batch]` tensor of 0 and 1.
fn choose<B: Backend>(mask: &Tensor<B, 1>, a: Tensor<B, 3>, b: Tensor<B, 3>) -> Tensor<B, 3> {
    let m = per_example(mask.clone());
    a * m.clone() + b * m.neg().add_scalar(1.0)
}

fn count<B: Backend>(mask: &Tensor<B, 1>) -> f64 {
    mask.clone().sum().into_scalar().elem()
}

impl ImplicitEuler {
    pub(super) fn safeguarded_step<B: Backend>(
        &self,
        phi: &BertLayer<B>,
        h_prev: Tensor<B, 3>,
        ctx: &LayerContext<B>,
        token_mask: &Tensor<B, 3>,
        record: bool,
    ) -> ImplicitStep<B> {
        let problem = Problem { phi, h_prev: &h_prev, ctx, token_mask };
        let batch = h_prev.dims()[0];
        let device = h_prev.device();
        // z_0 = h_{t-1} + phi_t(h_{t-1}): the explicit Euler step, as in the fixed loop.
        let mut state = problem.at(add_residual(phi.forward(h_prev.clone(), ctx), None, h_prev.clone()));
        let first_norm = state.norm.clone().detach();
        let mut residuals = Vec::new();
        let mut step_sizes = Vec::new();
        if record {
            residuals.push(state.norm.clone());
        }
        let mut iterations = 0;
        for _ in 0..self.iterations {
            // 1 where the example still iterates.
            let active = match self.tolerance {
                Some(tol) => state.norm.clone().detach().greater(first_norm.clone().mul_scalar(tol)).float(),
                None => Tensor::ones([batch], &device),
            };
            if self.tolerance.is_some() && count(&active) == 0.0 {
                break;
            }
            iterations += 1;
            // grad_z ||r||^2 / 2 = r - J^T r, cut from the graph as the gradient choice says.
            let jtr = self.gradient.jtr(phi, &state.cache, &state.r);
            let direction = self.gradient.update_residual(&state.r) - jtr;
            let gamma = active.clone().mul_scalar(self.gamma);
            let (next, taken) = match self.step_rule {
                StepRule::Fixed => {
                    let z = state.z.clone() - direction * per_example(gamma.clone().mul_scalar(2.0));
                    (problem.at(z), gamma)
                }
                StepRule::Backtrack => backtrack(&problem, &state, direction, gamma, &active),
            };
            state = next;
            if record {
                residuals.push(state.norm.clone());
                step_sizes.push(taken);
            }
        }
        if record {
            // Stopped early: the state no longer changes, so the last norm holds to T.
            while residuals.len() < self.iterations + 1 {
                residuals.push(state.norm.clone());
            }
        }
        ImplicitStep { hidden_states: state.z, residuals, step_sizes, iterations }
    }
}

/// One backtracking iteration from `state` along `-direction`: per example, the step starts at
/// `gamma` and halves until `||r||^2` does not rise; an example with no such step within
/// `MAX_HALVINGS` halvings stays where it is. Returns the new point and the steps taken.
fn backtrack<B: Backend>(
    problem: &Problem<'_, B>,
    state: &Iterate<B>,
    direction: Tensor<B, 3>,
    gamma: Tensor<B, 1>,
    active: &Tensor<B, 1>,
) -> (Iterate<B>, Tensor<B, 1>) {
    let old_norm = state.norm.clone().detach();
    let mut pending = active.clone();
    let mut step = gamma;
    let mut z_new = state.z.clone();
    let mut taken = step.zeros_like();
    for halving in 0..=MAX_HALVINGS {
        let trial = problem.at(state.z.clone() - direction.clone() * per_example(step.clone().mul_scalar(2.0)));
        let accepted = trial.norm.clone().detach().lower_equal(old_norm.clone()).float() * pending.clone();
        if halving == 0 && count(&accepted) == count(&pending) {
            // Every example took the full step: the trial is the next point, cache included.
            return (trial, step);
        }
        z_new = choose(&accepted, trial.z, z_new);
        taken = taken + accepted.clone() * step.clone();
        pending = pending - accepted;
        if count(&pending) == 0.0 {
            break;
        }
        step = step.mul_scalar(0.5);
    }
    // The accepted steps differ per example: evaluate the layer once more where they landed.
    (problem.at(z_new), taken)
}
