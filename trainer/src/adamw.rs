//! AdamW: burn's optimizer, with each parameter's update fused into one multi-threaded pass on
//! the CPU backend ([`adamw_update`]). The state is burn's own `AdamWState`, so checkpoints are
//! the same files either way.

use burn::module::AutodiffModule;
use burn::optim::adaptor::OptimizerAdaptor;
use burn::optim::{AdamWConfig, AdamWState, AdaptiveMomentumState, LearningRate, SimpleOptimizer};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::Tensor;
use shared::cpu::kernels::elementwise_in_place;

/// AdamW with PyTorch's arithmetic (decoupled weight decay, bias-corrected moments), computing
/// exactly what burn's `AdamW` computes.
#[derive(Clone)]
pub struct AdamW {
    beta_1: f32,
    beta_2: f32,
    epsilon: f32,
    weight_decay: f32,
    /// burn's optimizer, for backends the fused update does not cover.
    fallback: burn::optim::AdamW,
}

impl AdamW {
    pub fn new(beta_1: f32, beta_2: f32, epsilon: f32, weight_decay: f32) -> Self {
        let fallback = AdamWConfig::new()
            .with_beta_1(beta_1)
            .with_beta_2(beta_2)
            .with_epsilon(epsilon)
            .with_weight_decay(weight_decay)
            .build();
        Self { beta_1, beta_2, epsilon, weight_decay, fallback }
    }

    /// The optimizer for a module, as burn's `AdamWConfig::init` makes it.
    pub fn init<B: AutodiffBackend, M: AutodiffModule<B>>(self) -> OptimizerAdaptor<Self, M, B> {
        OptimizerAdaptor::from(self)
    }
}

impl<B: Backend> SimpleOptimizer<B> for AdamW {
    type State<const D: usize> = AdamWState<B, D>;

    fn step<const D: usize>(
        &self,
        lr: LearningRate,
        tensor: Tensor<B, D>,
        grad: Tensor<B, D>,
        state: Option<Self::State<D>>,
    ) -> (Tensor<B, D>, Option<Self::State<D>>) {
        let time = state.as_ref().map_or(1, |s| s.momentum.time + 1);
        let step = AdamWStep {
            lr,
            beta_1: self.beta_1,
            beta_2: self.beta_2,
            epsilon: self.epsilon,
            weight_decay: self.weight_decay,
            time,
        };
        let moments = state.map(|s| (s.momentum.moment_1, s.momentum.moment_2));
        match adamw_update(&step, AdamWTensors { param: tensor, grad, moments }) {
            Ok([param, moment_1, moment_2]) => {
                (param, Some(AdamWState::new(AdaptiveMomentumState::new(time, moment_1, moment_2))))
            }
            Err(AdamWTensors { param, grad, moments }) => {
                let state = moments
                    .map(|(m, v)| AdamWState::new(AdaptiveMomentumState::new(time - 1, m, v)));
                self.fallback.step(lr, param, grad, state)
            }
        }
    }

    fn to_device<const D: usize>(state: Self::State<D>, device: &B::Device) -> Self::State<D> {
        <burn::optim::AdamW as SimpleOptimizer<B>>::to_device(state, device)
    }
}

/// AdamW's settings at one optimizer step, for [`adamw_update`].
#[derive(Clone, Copy, Debug)]
pub struct AdamWStep {
    pub lr: f64,
    pub beta_1: f32,
    pub beta_2: f32,
    pub epsilon: f32,
    /// Decoupled weight decay.
    pub weight_decay: f32,
    /// Steps taken including this one (1 at the first), for the bias corrections.
    pub time: usize,
}

/// The tensors of one parameter's AdamW update: the parameter, its gradient and the moments
/// (`None` before the first step, i.e. zero).
pub struct AdamWTensors<B: Backend, const D: usize> {
    pub param: Tensor<B, D>,
    pub grad: Tensor<B, D>,
    pub moments: Option<(Tensor<B, D>, Tensor<B, D>)>,
}

/// One AdamW update as burn's `AdamW` computes it, returning `[param, moment_1, moment_2]`
/// after the step: `m = b1 m + (1 - b1) g`, `v = b2 v + (1 - b2) g^2`,
/// `param = param (1 - lr wd) - lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)`.
///
/// On burn-ndarray with f32 data this is one pass over the four arrays, split over threads and
/// written in place, with burn's arithmetic element by element (so the results are equal bit for
/// bit). burn's optimizer makes about fifteen passes, one per op. Elsewhere the tensors come back
/// untouched as the error, for burn's own optimizer.
pub fn adamw_update<B: Backend, const D: usize>(
    step: &AdamWStep,
    tensors: AdamWTensors<B, D>,
) -> Result<[Tensor<B, D>; 3], AdamWTensors<B, D>> {
    let AdamWTensors { param, grad, moments } = tensors;
    let started = moments.is_some();
    let (m, v) = moments.unwrap_or_else(|| (param.zeros_like(), param.zeros_like()));
    let AdamWStep { lr, beta_1, beta_2, epsilon, weight_decay, time } = *step;
    let (factor_1, factor_2) = (1.0 - beta_1, 1.0 - beta_2);
    let time = time.min(i32::MAX as usize) as i32;
    let (correction_1, correction_2) = (1.0 - beta_1.powi(time), 1.0 - beta_2.powi(time));
    let decay_rate = lr * weight_decay as f64;
    let (keep, lr) = ((1.0 - decay_rate) as f32, lr as f32);
    // The same operations in the same order as burn's optimizer, element by element.
    let update = |(p, m, v, g): (&mut [f32], &mut [f32], &mut [f32], &[f32])| {
        for i in 0..p.len() {
            m[i] = m[i] * beta_1 + g[i] * factor_1;
            v[i] = v[i] * beta_2 + (g[i] * g[i]) * factor_2;
            let delta = (m[i] / correction_1) / ((v[i] / correction_2).sqrt() + epsilon);
            let decayed = if decay_rate == 0.0 { p[i] } else { p[i] * keep };
            p[i] = decayed - delta * lr;
        }
    };
    const BLOCK: usize = 1 << 15;
    let fused =
        elementwise_in_place([param, m, v], [&grad], BLOCK, |[p, m, v], [g]| update((p, m, v, g)));
    fused.map_err(|[param, m, v]| AdamWTensors { param, grad, moments: started.then_some((m, v)) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::NdArray;
    use burn::tensor::{DType, TensorData};

    /// The fused update against burn's optimizer over three steps (the first starts the moments
    /// from zero), with and without weight decay, on the CPU backend where the fused path runs:
    /// equal bit for bit, so a run gives the same weights with either.
    #[test]
    fn fused_update_matches_burns_adamw() {
        type Cpu = NdArray<f32>;
        let device = Default::default();
        let f32_tensor = |seed: u64, scale: f32| {
            let mut rng = shared::rng::SplitMix64::new(seed);
            let values: Vec<f32> = (0..4 * 300)
                .map(|_| scale * (2.0 * (rng.next_u64() >> 40) as f32 / (1u64 << 24) as f32 - 1.0))
                .collect();
            Tensor::<Cpu, 2>::from_data(TensorData::new(values, [4, 300]), (&device, DType::F32))
        };
        for weight_decay in [0.0, 0.01] {
            let ours = AdamW::new(0.9, 0.999, 1e-8, weight_decay);
            let burns =
                AdamWConfig::new().with_epsilon(1e-8).with_weight_decay(weight_decay).build();
            let (mut p_ours, mut p_burn) = (f32_tensor(1, 1.0), f32_tensor(1, 1.0));
            let (mut s_ours, mut s_burn) = (None, None);
            for step in 0..3u64 {
                let grad = f32_tensor(10 + step, 0.1);
                let lr = 2e-3 * (step + 1) as f64;
                // The fused path must be the one under test here.
                assert!(adamw_update(
                    &AdamWStep {
                        lr,
                        beta_1: 0.9,
                        beta_2: 0.999,
                        epsilon: 1e-8,
                        weight_decay,
                        time: 1
                    },
                    AdamWTensors { param: p_ours.clone(), grad: grad.clone(), moments: None },
                )
                .is_ok());
                let (before_ours, before_burn) = (p_ours.clone(), p_burn.clone());
                (p_ours, s_ours) =
                    SimpleOptimizer::<Cpu>::step(&ours, lr, p_ours, grad.clone(), s_ours);
                (p_burn, s_burn) = burns.step(lr, p_burn, grad, s_burn);
                let (a, b) = (s_ours.as_ref().unwrap(), s_burn.as_ref().unwrap());
                assert_eq!(a.momentum.time, b.momentum.time);
                // The change of the parameters, not the parameters: the step is small beside them.
                let (change_ours, change_burn) =
                    (p_ours.clone() - before_ours, p_burn.clone() - before_burn);
                for (what, x, y) in [
                    ("parameter change", &change_ours, &change_burn),
                    ("moment_1", &a.momentum.moment_1, &b.momentum.moment_1),
                    ("moment_2", &a.momentum.moment_2, &b.momentum.moment_2),
                ] {
                    let scale: f32 = y.clone().abs().max().into_scalar();
                    let diff: f32 = (x.clone() - y.clone()).abs().max().into_scalar();
                    // Bit for bit: the same f32 operations in the same order.
                    assert!(
                        scale > 0.0 && diff == 0.0,
                        "step {step}, wd {weight_decay}: {what} differs by {diff:e} \
                         (scale {scale:e})"
                    );
                }
            }
            let moved: f32 = (p_ours - f32_tensor(1, 1.0)).abs().max().into_scalar();
            assert!(moved > 1e-3, "the parameters moved ({moved})");
        }
    }

    /// Where the fused update does not run (here f64 data), burn's optimizer does the step.
    #[test]
    fn other_backends_fall_back_to_burns_adamw() {
        type Cpu64 = NdArray<f64>;
        let device = Default::default();
        let param = Tensor::<Cpu64, 1>::from_data(
            TensorData::new(vec![1.0f64, -2.0, 3.0], [3]),
            (&device, DType::F64),
        );
        let grad = Tensor::<Cpu64, 1>::from_data(
            TensorData::new(vec![0.5f64, 0.5, -0.5], [3]),
            (&device, DType::F64),
        );
        let ours = AdamW::new(0.9, 0.999, 1e-8, 0.0);
        let (p, state) = SimpleOptimizer::<Cpu64>::step(&ours, 0.1, param, grad, None);
        // The first AdamW step moves every weight by lr against the gradient's sign.
        let got = p.into_data().to_vec::<f64>().unwrap();
        for (g, want) in got.iter().zip([0.9, -2.1, 3.1]) {
            assert!((g - want).abs() < 1e-6, "{got:?}");
        }
        assert_eq!(state.unwrap().momentum.time, 1);
    }
}
