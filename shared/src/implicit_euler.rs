//! The connection between BERT layers, and IM-BERT's implicit Euler step (Algorithm 1).
//!
//! BERT:     h_t = phi_t(h_{t-1})                      (`Connection::Monotone`)
//! EX-BERT:  h_t = h_{t-1} + phi_t(h_{t-1})            (`Connection::Explicit`)
//! IM-BERT:  h_t = h_{t-1} + phi_t(h_t), solved by T steps of gradient descent on
//!           ||z - h_{t-1} - phi_t(z)||^2              (`Connection::Implicit`)
//!
//! The gradient step needs `J_phi(z)^T r`; it comes from `BertLayer::vjp`, a hand-written
//! vector-Jacobian product made of ordinary tensor ops, so training back-propagates through the
//! whole inner loop and gets the exact second-order gradient (PyTorch's `create_graph=True`).

use burn::tensor::backend::Backend;
use burn::tensor::Tensor;
use serde::{Deserialize, Serialize};

use crate::kernels::{add_residual, descent_step, masked_residual};
use crate::layer::{BertLayer, LayerContext};
use crate::Error;

/// How layer `t`'s output is formed from `phi_t` and its input.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Connection {
    /// Plain BERT: `h_t = phi_t(h_{t-1})`.
    Monotone,
    /// EX-BERT: one explicit Euler step, `h_t = h_{t-1} + phi_t(h_{t-1})`.
    Explicit,
    /// IM-BERT: the implicit Euler step, solved iteratively.
    Implicit(ImplicitEuler),
}

/// Algorithm 1's settings.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ImplicitEuler {
    /// `T`: gradient-descent iterations on the residual.
    pub iterations: usize,
    /// `gamma`: step size of each iteration.
    pub gamma: f64,
    /// How training differentiates through the iterations.
    #[serde(default)]
    pub gradient: InnerGradient,
}

impl Default for ImplicitEuler {
    /// The paper's defaults: T = 5, gamma = 0.1, exact gradient.
    fn default() -> Self {
        Self { iterations: 5, gamma: 0.1, gradient: InnerGradient::Exact }
    }
}

/// What the training gradient sees of the inner loop.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InnerGradient {
    /// Differentiate through every iteration, second-order terms included (the paper).
    #[default]
    Exact,
    /// Treat `J_phi(z)^T r` as a constant in the backward pass: first-order only, cheaper.
    Detached,
}

/// The output of one implicit Euler step.
pub struct ImplicitStep<B: Backend> {
    /// `h_t`: `[batch, seq, hidden]`.
    pub hidden_states: Tensor<B, 3>,
    /// Per example, `||r||^2` before each iteration and after the last: `T + 1` tensors of
    /// `[batch]`. Empty unless asked for (the last one costs an extra `phi` evaluation).
    pub residuals: Vec<Tensor<B, 1>>,
}

impl ImplicitEuler {
    /// Algorithm 1. `token_mask` is `[batch, seq, 1]`, 1 for real tokens and 0 for padding: the
    /// residual is summed over real tokens only, so padding never changes a sentence's result.
    pub fn step<B: Backend>(
        &self,
        phi: &BertLayer<B>,
        h_prev: Tensor<B, 3>,
        ctx: &LayerContext<B>,
        token_mask: &Tensor<B, 3>,
        record_residuals: bool,
    ) -> ImplicitStep<B> {
        // (z - h_{t-1} - phi_z) * mask, one pass on the CPU.
        let residual = |z: &Tensor<B, 3>, phi_z: Tensor<B, 3>| masked_residual(z, &h_prev, phi_z, token_mask);
        let mut residuals = Vec::new();

        // z_0 = h_{t-1} + phi_t(h_{t-1}): start from the explicit Euler step.
        let mut z = add_residual(phi.forward(h_prev.clone(), ctx), None, h_prev.clone());

        for _ in 0..self.iterations {
            // One forward feeds both r and the VJP.
            let (phi_z, cache) = phi.forward_cached(z.clone(), ctx);
            // r = z - h_{t-1} - phi_t(z)
            let r = residual(&z, phi_z);
            if record_residuals {
                residuals.push(squared_norm(&r));
            }
            // grad_z ||r||^2 = 2 (r - J_phi(z)^T r)
            let jtr = match self.gradient {
                InnerGradient::Exact => phi.vjp(&cache, r.clone()),
                // The layer's weights are live inside the VJP too: detach its result, not just
                // its inputs, so that no second-order term reaches them either.
                InnerGradient::Detached => phi.vjp(&cache.detach(), r.clone().detach()).detach(),
            };
            // z <- z - gamma * grad, one pass on the CPU.
            z = descent_step(&z, &r, jtr, 2.0 * self.gamma);
        }

        if record_residuals {
            let r = residual(&z, phi.forward(z.clone(), ctx));
            residuals.push(squared_norm(&r));
        }
        ImplicitStep { hidden_states: z, residuals }
    }
}

/// `||r||^2` per example: `[batch, seq, hidden]` -> `[batch]`.
fn squared_norm<B: Backend>(r: &Tensor<B, 3>) -> Tensor<B, 1> {
    let batch = r.dims()[0];
    (r.clone() * r.clone()).sum_dims(&[1, 2]).reshape([batch])
}

/// The iterations, counted from 1, after which `||r||^2` had grown (by more than 0.1%), given
/// the squared norms before each iteration and after the last (`ImplicitStep::residuals`,
/// summed or per example).
///
/// Gradient descent whose step is small against the curvature never raises its objective, so a
/// rise means gamma is too large for that layer: the solve is not converging, and it amplifies
/// any perturbation, f32 rounding included (docs/numerics.md).
pub fn residual_rises<T: Copy + Into<f64>>(squared_norms: &[T]) -> Vec<usize> {
    squared_norms
        .windows(2)
        .enumerate()
        .filter(|(_, w)| w[1].into() > w[0].into() * 1.001)
        .map(|(i, _)| i + 1)
        .collect()
}

impl Connection {
    /// Short name used in run names and reports: `bert`, `ex`, `im`.
    pub fn short_name(&self) -> &'static str {
        match self {
            Connection::Monotone => "bert",
            Connection::Explicit => "ex",
            Connection::Implicit(_) => "im",
        }
    }
}

/// Which connection every layer uses, parsed from a spec such as `bert`, `ex`,
/// `im:T=5,gamma=0.1,layers=3-5` (layers 0-based and inclusive; layers outside stay monotone).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConnectionSpec {
    /// The connection of the selected layers.
    pub connection: Connection,
    /// First and last selected layer (inclusive); `None` means all layers.
    pub layers: Option<(usize, usize)>,
}

impl Default for ConnectionSpec {
    fn default() -> Self {
        Self { connection: Connection::Monotone, layers: None }
    }
}

impl ConnectionSpec {
    /// Parses `mode[:key=value,...]` with mode `bert`, `ex` or `im` and keys `T`, `gamma`,
    /// `layers` (`a-b` or `a`) and `grad` (`exact` or `detached`).
    pub fn parse(spec: &str) -> Result<Self, Error> {
        let err = |message: String| Error::ConnectionSpec { spec: spec.to_string(), message };
        let (mode, rest) = spec.split_once(':').unwrap_or((spec, ""));
        let mut im = ImplicitEuler::default();
        let mut layers = None;
        let mut saw_im_key = false;
        for item in rest.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (key, value) = item
                .split_once('=')
                .ok_or_else(|| err(format!("`{item}` is not key=value")))?;
            match key.trim() {
                "T" | "t" | "iterations" => {
                    im.iterations = value.trim().parse().map_err(|_| err(format!("T = {value:?} is not a count")))?;
                    saw_im_key = true;
                }
                "gamma" => {
                    im.gamma = value.trim().parse().map_err(|_| err(format!("gamma = {value:?} is not a number")))?;
                    if !im.gamma.is_finite() {
                        return Err(err("gamma must be finite".into()));
                    }
                    saw_im_key = true;
                }
                "grad" => {
                    im.gradient = match value.trim() {
                        "exact" => InnerGradient::Exact,
                        "detached" => InnerGradient::Detached,
                        other => return Err(err(format!("grad = {other:?}; expected exact or detached"))),
                    };
                    saw_im_key = true;
                }
                "layers" => layers = Some(parse_range(value.trim()).map_err(err)?),
                other => return Err(err(format!("unknown key `{other}`"))),
            }
        }
        let connection = match mode.trim() {
            "bert" | "monotone" => Connection::Monotone,
            "ex" | "explicit" => Connection::Explicit,
            "im" | "implicit" => Connection::Implicit(im),
            other => return Err(err(format!("unknown mode `{other}`; expected bert, ex or im"))),
        };
        if saw_im_key && !matches!(connection, Connection::Implicit(_)) {
            return Err(err("T, gamma and grad apply to `im` only".into()));
        }
        Ok(Self { connection, layers })
    }

    /// The connection of each of `num_layers` layers.
    pub fn per_layer(&self, num_layers: usize) -> Result<Vec<Connection>, Error> {
        let (first, last) = self.layers.unwrap_or((0, num_layers.saturating_sub(1)));
        if last >= num_layers {
            return Err(Error::ConnectionSpec {
                spec: format!("layers={first}-{last}"),
                message: format!("the model has {num_layers} layers (0..={})", num_layers.saturating_sub(1)),
            });
        }
        Ok((0..num_layers)
            .map(|i| if (first..=last).contains(&i) { self.connection } else { Connection::Monotone })
            .collect())
    }

    /// The canonical spec string, which `parse` reads back.
    pub fn to_spec_string(&self) -> String {
        let mut parts = Vec::new();
        if let Connection::Implicit(im) = &self.connection {
            parts.push(format!("T={}", im.iterations));
            parts.push(format!("gamma={}", im.gamma));
            if im.gradient == InnerGradient::Detached {
                parts.push("grad=detached".into());
            }
        }
        if let Some((a, b)) = self.layers {
            parts.push(format!("layers={a}-{b}"));
        }
        let mode = self.connection.short_name();
        if parts.is_empty() { mode.to_string() } else { format!("{mode}:{}", parts.join(",")) }
    }
}

impl std::str::FromStr for ConnectionSpec {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        Self::parse(s)
    }
}

fn parse_range(value: &str) -> Result<(usize, usize), String> {
    let (a, b) = value.split_once('-').unwrap_or((value, value));
    let parse = |s: &str| s.trim().parse::<usize>().map_err(|_| format!("layers = {value:?} is not `a-b`"));
    let (a, b) = (parse(a)?, parse(b)?);
    if a > b {
        return Err(format!("layers = {value:?}: first layer after last"));
    }
    Ok((a, b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_issue_example() {
        let spec = ConnectionSpec::parse("im:T=5,gamma=0.1,layers=3-5").unwrap();
        assert_eq!(spec.layers, Some((3, 5)));
        let per = spec.per_layer(6).unwrap();
        assert_eq!(per[2], Connection::Monotone);
        assert!(matches!(per[3], Connection::Implicit(ImplicitEuler { iterations: 5, .. })));
        assert_eq!(ConnectionSpec::parse(&spec.to_spec_string()).unwrap(), spec);
    }

    #[test]
    fn defaults_and_errors() {
        assert_eq!(ConnectionSpec::parse("bert").unwrap(), ConnectionSpec::default());
        let im = ConnectionSpec::parse("im").unwrap();
        assert_eq!(im.connection, Connection::Implicit(ImplicitEuler::default()));
        for bad in ["xx", "im:T=a", "im:layers=5-3", "ex:T=3", "im:foo=1", "im:T"] {
            assert!(ConnectionSpec::parse(bad).is_err(), "{bad} should fail");
        }
        assert!(ConnectionSpec::parse("im:layers=2-6").unwrap().per_layer(6).is_err());
    }
}

#[cfg(test)]
mod model_tests {
    use super::*;
    use crate::model::{BertClassifier, BertInput, ForwardOptions};
    use crate::BertConfig;
    use burn::backend::NdArray;
    use burn::tensor::{Int, TensorData};

    type B = NdArray<f64>;

    fn input(rows: &[Vec<i64>]) -> BertInput<B> {
        let seq = rows.iter().map(Vec::len).max().unwrap();
        let pad = |f: &dyn Fn(&[i64], usize) -> i64| {
            let v: Vec<i64> = rows.iter().flat_map(|r| (0..seq).map(move |j| f(r, j))).collect();
            Tensor::<B, 2, Int>::from_data(TensorData::new(v, [rows.len(), seq]), &Default::default())
        };
        BertInput {
            input_ids: pad(&|r, j| r.get(j).copied().unwrap_or(0)),
            token_type_ids: pad(&|_, _| 0),
            attention_mask: pad(&|r, j| (j < r.len()) as i64),
        }
    }

    /// A sentence gets the same logits alone and padded inside a batch: the residual is masked.
    #[test]
    fn padding_never_changes_a_sentence() {
        let model = BertClassifier::<B>::new(&BertConfig::tiny(), 2, &Default::default())
            .with_connections(&ConnectionSpec::parse("im:T=4,gamma=0.2").unwrap())
            .unwrap();
        let short = vec![2, 7, 9, 3];
        let long = vec![2, 5, 6, 7, 8, 11, 12, 3];
        let opts = ForwardOptions { im_residuals: true, ..Default::default() };
        let alone = model.forward(&input(std::slice::from_ref(&short)), opts);
        let batched = model.forward(&input(&[long, short]), opts);
        let a: Vec<f64> = alone.logits.unwrap().into_data().into_vec().unwrap();
        let b: Vec<f64> = batched.logits.unwrap().slice([1..2, 0..2]).into_data().into_vec().unwrap();
        let diff = a.iter().zip(&b).fold(0.0f64, |m, (x, y)| m.max((x - y).abs()));
        assert!(diff < 1e-12, "padding changed the logits by {diff}");
        // The residuals of the short sentence agree too.
        for ((_, ra), (_, rb)) in alone.im_residuals.iter().zip(&batched.im_residuals) {
            for (x, y) in ra.iter().zip(rb) {
                let x: f64 = x.clone().into_scalar();
                let y: f64 = y.clone().slice(1..2).into_scalar();
                assert!((x - y).abs() < 1e-12 * x.abs().max(1.0), "{x} vs {y}");
            }
        }
    }

    /// T = 0 is the explicit Euler step; EX differs from BERT; IM's residual shrinks with T.
    #[test]
    fn connections_relate_as_the_paper_says() {
        let config = BertConfig::tiny();
        let base = BertClassifier::<B>::new(&config, 2, &Default::default());
        let x = input(&[vec![2, 7, 9, 4, 3]]);
        let run = |spec: &str| {
            let m = base.clone().with_connections(&ConnectionSpec::parse(spec).unwrap()).unwrap();
            let out = m.forward(&x, ForwardOptions { im_residuals: true, ..Default::default() });
            let h: Vec<f64> = out.last_hidden_state.into_data().into_vec().unwrap();
            let res: Vec<f64> = out.im_residuals.first().map_or(vec![], |(_, r)| {
                r.iter().map(|t| t.clone().into_scalar()).collect()
            });
            (h, res)
        };
        let (ex, _) = run("ex");
        let (im0, _) = run("im:T=0");
        let (bert, _) = run("bert");
        assert_eq!(ex, im0);
        assert_ne!(ex, bert);
        let (_, res) = run("im:T=8,gamma=0.1,layers=0-0");
        assert_eq!(res.len(), 9);
        assert!(res.last().unwrap() < res.first().unwrap(), "{res:?}");
    }

    /// A small step descends at every iteration (which a VJP of the wrong sign or scale would
    /// not); a step far too large overshoots, and `residual_rises` says where.
    #[test]
    fn residual_rises_tell_a_small_step_from_an_overshoot() {
        let base = BertClassifier::<B>::new(&BertConfig::tiny(), 2, &Default::default());
        let x = input(&[vec![2, 7, 9, 4, 3], vec![2, 5, 3]]);
        let trace = |spec: &str| -> Vec<Vec<f64>> {
            let m = base.clone().with_connections(&ConnectionSpec::parse(spec).unwrap()).unwrap();
            let out = m.forward(&x, ForwardOptions { im_residuals: true, ..Default::default() });
            out.im_residuals.iter().map(|(_, r)| r.iter().map(|t| t.clone().sum().into_scalar()).collect()).collect()
        };
        for layer in trace("im:T=6,gamma=0.01") {
            assert!(residual_rises(&layer).is_empty(), "{layer:?}");
            assert!(layer[6] < 0.999 * layer[0], "{layer:?}");
        }
        let overshoot = trace("im:T=6,gamma=5");
        assert!(overshoot.iter().any(|layer| !residual_rises(layer).is_empty()), "{overshoot:?}");
        assert_eq!(residual_rises(&[843.0, 679.0, 460.0]), Vec::<usize>::new());
        assert_eq!(residual_rises(&[786.0f32, 1013.0]), vec![1]);
        assert_eq!(residual_rises(&[786.0, 1013.0, 937.0, 1134.0, 989.0]), vec![1, 3]);
        assert_eq!(residual_rises(&[1.0, 1.0005]), Vec::<usize>::new());
    }
}
