//! The safeguarded solve: Algorithm 1 with a per-example step size (`step=backtrack`) and a
//! per-example stop (`tol=eps`). The paper's fixed-step loop stays in `ImplicitEuler::step`,
//! untouched; this one runs only when a spec asks for it.
//!
//! Every decision here (accept a step, stop an example) is made on values and enters the graph
//! as a constant, so the training gradient is that of the path actually taken.
//!
//! The decisions are read back to the host, which lets the search skip work. WebGPU in the
//! browser cannot read back without yielding, so there (`SolveOptions::decide_on_device`) the
//! same decisions are made on the device as 0/1 masks, trying every halving.

use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor, TensorData};

use super::{squared_norm, ImplicitEuler, ImplicitStep, SolveOptions, StepRule, MAX_HALVINGS};
use crate::cpu::kernels::{add_residual, masked_residual};
use crate::model::layer::{BertLayer, LayerCache, LayerContext};

/// One point of the solve: `z`, the layer's cache there, `r = (z - h - phi(z)) * mask` and
/// `||r||^2` per example.
struct Iterate<B: Backend> {
    z: Tensor<B, 3>, // [batch, seq, hidden]
    cache: LayerCache<B>,
    r: Tensor<B, 3>,    // [batch, seq, hidden]
    norm: Tensor<B, 1>, // [batch]
}

/// What one solve shares: the layer (and an untracked copy for `J^T r` and the step search), its
/// input and the padding mask.
struct Problem<'a, B: Backend> {
    phi: &'a BertLayer<B>,
    phi_untracked: BertLayer<B>,
    h_prev: &'a Tensor<B, 3>,
    ctx: &'a LayerContext<B>,
    token_mask: &'a Tensor<B, 3>,
}

impl<'a, B: Backend> Problem<'a, B> {
    fn new(
        phi: &'a BertLayer<B>,
        h_prev: &'a Tensor<B, 3>,
        ctx: &'a LayerContext<B>,
        token_mask: &'a Tensor<B, 3>,
    ) -> Self {
        Problem { phi, phi_untracked: phi.untracked(), h_prev, ctx, token_mask }
    }

    fn at(&self, z: Tensor<B, 3>) -> Iterate<B> {
        let (phi_z, cache) = self.phi.forward_cached(z.clone(), self.ctx);
        let r = masked_residual(&z, self.h_prev, phi_z, self.token_mask);
        let norm = squared_norm(&r);
        Iterate { z, cache, r, norm }
    }
}

/// A few examples of a `Problem`, off the graph: where backtracking searches for a step.
struct Rows<'a, B: Backend> {
    phi: &'a BertLayer<B>,
    h_prev: Tensor<B, 3>, // [rows, seq, hidden]
    ctx: LayerContext<B>,
    token_mask: Tensor<B, 3>, // [rows, seq, 1]
}

impl<'a, B: Backend> Rows<'a, B> {
    fn of(problem: &'a Problem<'_, B>, rows: &[usize]) -> Self {
        let ctx = LayerContext {
            attention_bias: select_rows(problem.ctx.attention_bias.clone(), rows),
            ..problem.ctx.clone()
        };
        Rows {
            phi: &problem.phi_untracked,
            h_prev: select_rows(problem.h_prev.clone().detach(), rows),
            ctx,
            token_mask: select_rows(problem.token_mask.clone(), rows),
        }
    }

    /// `||z - h - phi(z)||^2` per row: `[rows, seq, hidden]` -> `[rows]`.
    fn squared_norms(&self, z: Tensor<B, 3>) -> Tensor<B, 1> {
        let phi_z = self.phi.forward(z.clone(), &self.ctx);
        squared_norm(&masked_residual(&z, &self.h_prev, phi_z, &self.token_mask))
    }
}

/// `[batch, ...]` -> `[rows.len(), ...]`.
fn select_rows<B: Backend, const D: usize>(t: Tensor<B, D>, rows: &[usize]) -> Tensor<B, D> {
    let device = t.device();
    let indices: Vec<i64> = rows.iter().map(|&i| i as i64).collect();
    let indices = TensorData::new(indices, [rows.len()]).convert::<B::IntElem>();
    t.select(0, Tensor::<B, 1, Int>::from_data(indices, &device))
}

fn host<B: Backend>(v: &Tensor<B, 1>) -> Vec<f64> {
    v.clone().into_data().convert::<f64>().into_vec().expect("a float tensor converts to f64")
}

fn from_host<B: Backend>(v: Vec<f64>, device: &B::Device) -> Tensor<B, 1> {
    let n = v.len();
    Tensor::from_data(TensorData::new(v, [n]).convert::<B::FloatElem>(), device)
}

/// `[batch]` -> `[batch, 1, 1]`, to scale each example's `[seq, hidden]` block.
fn per_example<B: Backend>(v: Tensor<B, 1>) -> Tensor<B, 3> {
    let batch = v.dims()[0];
    v.reshape([batch, 1, 1])
}

/// Whether no example of `mask` is still active. Never asked on the device: there the loop runs
/// all T iterations, stopped examples standing still.
fn none_active<B: Backend>(mask: &Tensor<B, 1>) -> bool {
    host(mask).iter().all(|&x| x == 0.0)
}

impl ImplicitEuler {
    pub(super) fn safeguarded_step<B: Backend>(
        &self,
        phi: &BertLayer<B>,
        h_prev: Tensor<B, 3>,
        ctx: &LayerContext<B>,
        token_mask: &Tensor<B, 3>,
        options: SolveOptions,
    ) -> ImplicitStep<B> {
        let record = options.record;
        let problem = Problem::new(phi, &h_prev, ctx, token_mask);
        let batch = h_prev.dims()[0];
        let device = h_prev.device();
        // z_0 = h_{t-1} + phi_t(h_{t-1}): the explicit Euler step, as in the fixed loop.
        let mut state =
            problem.at(add_residual(phi.forward(h_prev.clone(), ctx), None, h_prev.clone()));
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
                Some(tol) => {
                    state.norm.clone().detach().greater(first_norm.clone().mul_scalar(tol)).float()
                }
                None => Tensor::ones([batch], &device),
            };
            if self.tolerance.is_some() && !options.decide_on_device && none_active(&active) {
                break;
            }
            iterations += 1;
            // grad_z ||r||^2 / 2 = r - J^T r, cut from the graph as the gradient choice says.
            let jtr = self.gradient.jtr(phi, &problem.phi_untracked, &state.cache, &state.r);
            let direction = self.gradient.update_residual(&state.r) - jtr;
            let gamma = active.clone().mul_scalar(self.gamma);
            let (next, taken) = match self.step_rule {
                StepRule::Fixed => {
                    let z =
                        state.z.clone() - direction * per_example(gamma.clone().mul_scalar(2.0));
                    (problem.at(z), gamma)
                }
                StepRule::Backtrack if options.decide_on_device => {
                    backtrack_on_device(&problem, &state, direction, gamma, &active)
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
///
/// Only the path taken enters the training graph. The full step is tried in the graph (usually
/// every example takes it, and then that trial is the next point); the halvings are searched
/// off the graph, on the overshooting examples' rows alone; the steps found enter as constants.
fn backtrack<B: Backend>(
    problem: &Problem<'_, B>,
    state: &Iterate<B>,
    direction: Tensor<B, 3>,
    gamma: Tensor<B, 1>,
    active: &Tensor<B, 1>,
) -> (Iterate<B>, Tensor<B, 1>) {
    let old_norm = host(&state.norm);
    let device = state.z.device();
    let active = host(active);
    let full = problem
        .at(state.z.clone() - direction.clone() * per_example(gamma.clone().mul_scalar(2.0)));
    let full_norm = host(&full.norm);
    let overshoots = |i: usize| active[i] != 0.0 && full_norm[i] > old_norm[i];
    let mut pending: Vec<usize> = (0..old_norm.len()).filter(|&i| overshoots(i)).collect();
    if pending.is_empty() {
        return (full, gamma);
    }
    let gamma = host(&gamma);
    let mut taken: Vec<f64> =
        (0..gamma.len()).map(|i| if overshoots(i) { 0.0 } else { gamma[i] }).collect();
    let (z, direction_value) = (state.z.clone().detach(), direction.clone().detach());
    let mut fraction = 1.0;
    for _ in 0..MAX_HALVINGS {
        fraction *= 0.5;
        let rows = Rows::of(problem, &pending);
        let steps: Vec<f64> = pending.iter().map(|&i| 2.0 * fraction * gamma[i]).collect();
        let trial = select_rows(z.clone(), &pending)
            - select_rows(direction_value.clone(), &pending)
                * per_example(from_host(steps, &device));
        let norms = host(&rows.squared_norms(trial));
        for (&i, norm) in pending.iter().zip(&norms) {
            if *norm <= old_norm[i] {
                taken[i] = fraction * gamma[i];
            }
        }
        pending.retain(|&i| taken[i] == 0.0);
        if pending.is_empty() {
            break;
        }
    }
    // The path taken, steps held constant; the layer is evaluated once more where it landed.
    let taken = from_host::<B>(taken, &device);
    let z = state.z.clone() - direction * per_example(taken.clone().mul_scalar(2.0));
    (problem.at(z), taken)
}

/// `backtrack` for a backend that cannot read back mid-forward: the same steps, found by
/// trying the full step and every halving on the whole batch and keeping, per example, the
/// largest that does not raise `||r||^2`.
fn backtrack_on_device<B: Backend>(
    problem: &Problem<'_, B>,
    state: &Iterate<B>,
    direction: Tensor<B, 3>,
    gamma: Tensor<B, 1>,
    active: &Tensor<B, 1>,
) -> (Iterate<B>, Tensor<B, 1>) {
    let rows: Vec<usize> = (0..gamma.dims()[0]).collect();
    let all = Rows::of(problem, &rows);
    let old_norm = state.norm.clone().detach();
    let (z, direction_value) = (state.z.clone().detach(), direction.clone().detach());
    let mut pending = active.clone();
    let mut taken = gamma.zeros_like();
    let mut step = gamma;
    for _ in 0..=MAX_HALVINGS {
        let trial = z.clone() - direction_value.clone() * per_example(step.clone().mul_scalar(2.0));
        // 0/1 per example
        let accepted =
            all.squared_norms(trial).lower_equal(old_norm.clone()).float() * pending.clone();
        taken = taken + accepted.clone() * step.clone();
        pending = pending - accepted;
        step = step.mul_scalar(0.5);
    }
    let z = state.z.clone() - direction * per_example(taken.clone().mul_scalar(2.0));
    (problem.at(z), taken)
}

#[cfg(test)]
mod tests {
    use burn::backend::{Autodiff, NdArray};
    use burn::tensor::{Distribution, Tensor, TensorData};

    use super::{backtrack, backtrack_on_device, host, Problem};
    use crate::model::implicit_euler::{Connection, ConnectionSpec, InnerGradient, SolveOptions};
    use crate::model::layer::{BertLayer, LayerContext, MASKED_SCORE};
    use crate::BertConfig;

    type B = Autodiff<NdArray<f64>>;

    /// A small layer and three sentences of 5, 3 and 4 tokens: `(phi, ctx, token_mask, h)`.
    fn fixture<C: burn::tensor::backend::Backend>(
    ) -> (BertLayer<C>, LayerContext<C>, Tensor<C, 3>, Tensor<C, 3>) {
        let device = Default::default();
        let config = BertConfig {
            hidden_size: 12,
            num_attention_heads: 3,
            intermediate_size: 20,
            ..BertConfig::tiny()
        };
        let lengths = [5usize, 3, 4];
        let bias: Vec<f64> = lengths
            .iter()
            .flat_map(|&n| (0..5).map(move |j| if j < n { 0.0 } else { MASKED_SCORE as f64 }))
            .collect();
        let mask: Vec<f64> = lengths
            .iter()
            .flat_map(|&n| (0..5).map(move |j| if j < n { 1.0 } else { 0.0 }))
            .collect();
        let ctx = LayerContext {
            attention_bias: Tensor::from_data(
                TensorData::new(bias, [3, 1, 1, 5]).convert::<C::FloatElem>(),
                &device,
            ),
            hidden_dropout: 0.0,
            attention_dropout: 0.0,
        };
        let token_mask = Tensor::<C, 3>::from_data(
            TensorData::new(mask, [3, 5, 1]).convert::<C::FloatElem>(),
            &device,
        );
        let h = Tensor::<C, 3>::random([3, 5, 12], Distribution::Normal(0.0, 1.0), &device);
        (BertLayer::new(&config, &device), ctx, token_mask, h)
    }

    /// Where the backend cannot read back (WebGPU in the browser), the search on the device
    /// takes the same steps to the same point as the host's.
    #[test]
    fn the_device_search_takes_the_host_search_steps() {
        let (phi, ctx, token_mask, h) = fixture::<NdArray<f64>>();
        let problem = Problem::new(&phi, &h, &ctx, &token_mask);
        let state = problem.at(h.clone() + phi.forward(h.clone(), &ctx));
        let gradient = InnerGradient::Detached;
        let direction = gradient.update_residual(&state.r)
            - gradient.jtr(&phi, &problem.phi_untracked, &state.cache, &state.r);
        let device = Default::default();
        let active = Tensor::<NdArray<f64>, 1>::from_floats([1.0, 1.0, 0.0], &device);
        let mut halvings = 0;
        for gamma in [0.01, 1.0, 4.0, 64.0] {
            let full = gamma;
            let gamma = active.clone().mul_scalar(gamma);
            let (on_host, host_steps) =
                backtrack(&problem, &state, direction.clone(), gamma.clone(), &active);
            let (on_device, device_steps) =
                backtrack_on_device(&problem, &state, direction.clone(), gamma, &active);
            let (host_steps, device_steps) = (host(&host_steps), host(&device_steps));
            assert_eq!(host_steps, device_steps);
            assert_eq!(host_steps[2], 0.0, "an inactive example stays");
            assert_eq!(host(&on_host.norm), host(&on_device.norm), "steps {host_steps:?}");
            halvings += host_steps.iter().filter(|&&s| s > 0.0 && s < full).count();
        }
        assert!(halvings > 0, "some step should have been halved");
    }

    /// The training gradient of a backtracked solve is the derivative of the path it took: with
    /// `grad=exact` it matches central differences of the solve's output, halvings included.
    #[test]
    fn backtracked_gradient_is_the_derivative_of_the_path_taken() {
        crate::model::f64_process::run_in_f64_process!(
            backtracked_gradient_is_the_derivative_of_the_path_taken
        );
        let device = Default::default();
        let (phi, ctx, token_mask, h) = fixture::<B>();
        let Connection::Implicit(im) =
            ConnectionSpec::parse("im:T=3,gamma=4,grad=exact,step=backtrack").unwrap().connection
        else {
            unreachable!()
        };
        let weights = Tensor::<B, 3>::random([3, 5, 12], Distribution::Normal(0.0, 1.0), &device)
            * token_mask.clone();
        let direction = Tensor::<B, 3>::random([3, 5, 12], Distribution::Normal(0.0, 1.0), &device)
            * token_mask.clone();
        let loss = |h: Tensor<B, 3>| {
            (im.step(&phi, h, &ctx, &token_mask, SolveOptions::default()).hidden_states
                * weights.clone())
            .sum()
        };

        let solve = im.step(
            &phi,
            h.clone(),
            &ctx,
            &token_mask,
            SolveOptions { record: true, ..Default::default() },
        );
        let steps: Vec<f64> = solve
            .step_sizes
            .iter()
            .flat_map(|s| s.clone().into_data().into_vec::<f64>().unwrap())
            .collect();
        assert!(
            steps.iter().any(|&s| s < 4.0),
            "gamma 4 should need a halving somewhere: {steps:?}"
        );

        let h_tracked = h.clone().require_grad();
        let grads = loss(h_tracked.clone()).backward();
        let analytic: f64 =
            (h_tracked.grad(&grads).unwrap() * direction.clone().inner()).sum().into_scalar();
        let eps = 1e-6;
        let at = |sign: f64| -> f64 {
            loss(h.clone() + direction.clone().mul_scalar(sign * eps)).into_scalar()
        };
        let numeric = (at(1.0) - at(-1.0)) / (2.0 * eps);
        let rel = (analytic - numeric).abs() / numeric.abs().max(1e-12);
        assert!(
            rel < 1e-5,
            "autodiff {analytic} vs central differences {numeric} (relative {rel:.1e})"
        );
    }
}
