//! The connection between BERT layers, and IM-BERT's implicit Euler step (Algorithm 1).
//!
//! BERT:     h_t = phi_t(h_{t-1})                      (`Connection::Monotone`)
//! EX-BERT:  h_t = h_{t-1} + phi_t(h_{t-1})            (`Connection::Explicit`)
//! IM-BERT:  h_t = h_{t-1} + phi_t(h_t), solved by T steps of gradient descent on
//!           ||z - h_{t-1} - phi_t(z)||^2              (`Connection::Implicit`)
//!
//! The gradient step needs `J_phi(z)^T r`; it comes from `BertLayer::vjp`, a hand-written
//! vector-Jacobian product made of ordinary tensor ops, so training can back-propagate through the
//! whole inner loop and get the exact second-order gradient (PyTorch's `create_graph=True`).
//!
//! What training differentiates (`InnerGradient`, spec key `grad`), for one update
//! `z' = z - 2 gamma (r - J^T r)` with `r = z - h - phi(z)`:
//! - `exact`: everything, second-order terms included:
//!   `dz'/dz = I - 2 gamma ((I - J) - d(J^T r)/dz)`. On MiniLM at gamma 0.1 this product of
//!   Jacobians explodes (docs/numerics.md).
//! - `detached`: `J^T r` is a constant: `dz'/dz = (1 - 2 gamma) I + 2 gamma J`, and the weights
//!   get `2 gamma dphi/dtheta` from each update through `r`.
//! - `frozen`: the whole update `2 gamma (r - J^T r)` is a constant: `dz'/dz = I`, so the
//!   gradient flows through `z_0 = h + phi(h)` alone, as in EX-BERT. This is what PyTorch's
//!   `g = torch.autograd.grad(loss_i, z)` without `create_graph` gives.
//!
//! How the step is taken (`StepRule`, spec key `step`, and `tol`):
//! - `fixed` (the paper): `z <- z - 2 gamma (r - J^T r)`, T times.
//! - `backtrack`: per example, the step starts at gamma and halves (at most `MAX_HALVINGS` times)
//!   until `||r||^2` does not rise; an example with no such step keeps its `z`. So the residual
//!   never rises, whatever gamma.
//! - `tol=eps` (with either rule): an example stops once `||r||^2 <= eps ||r_0||^2`; the loop ends
//!   when every example has, or after T iterations.

use burn::tensor::backend::Backend;
use burn::tensor::Tensor;
use serde::{Deserialize, Serialize};

use crate::cpu::kernels::{add_residual, descent_step, masked_residual};
use crate::model::layer::{BertLayer, LayerCache, LayerContext};
use crate::Error;

mod safeguarded;

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

/// The most iterations a solve may take (the paper's T sweep ends at 15).
pub const MAX_ITERATIONS: usize = 100;
/// The largest step size accepted. The paper's is 0.1; steps of 4-5 are useful to study an
/// overshoot (and as backtracking's first try), while 1e9 is only a typo.
pub const MAX_GAMMA: f64 = 100.0;

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
    /// How each iteration's step is taken.
    #[serde(default, rename = "step", skip_serializing_if = "StepRule::is_fixed")]
    pub step_rule: StepRule,
    /// Relative tolerance: an example stops iterating once `||r||^2 <= tolerance * ||r_0||^2`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerance: Option<f64>,
}

impl Default for ImplicitEuler {
    /// The paper's defaults: T = 5, gamma = 0.1, exact gradient, fixed steps, no tolerance.
    fn default() -> Self {
        Self {
            iterations: 5,
            gamma: 0.1,
            gradient: InnerGradient::Exact,
            step_rule: StepRule::Fixed,
            tolerance: None,
        }
    }
}

/// How one iteration's step is taken.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StepRule {
    /// `z <- z - 2 gamma (r - J^T r)`: Algorithm 1 as written.
    #[default]
    Fixed,
    /// Per example, halve the step from gamma until `||r||^2` does not rise.
    Backtrack,
}

impl StepRule {
    fn is_fixed(&self) -> bool {
        *self == StepRule::Fixed
    }
}

/// The IM configuration this project recommends for training, chosen on validation data
/// (docs/numerics.md, "The gradient study"): the paper's T and gamma, `J^T r` held constant in
/// the backward pass, and backtracking so that no example's residual rises. Provisional: the
/// best validation loss of the study's runs finished so far (3 of 6).
pub const RECOMMENDED_IM: &str = "im:T=5,gamma=0.1,grad=detached,step=backtrack";

/// Most halvings of the step a backtracking iteration tries (down to gamma / 32) before it
/// leaves an example where it is.
pub const MAX_HALVINGS: usize = 5;

/// What the training gradient sees of the inner loop.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InnerGradient {
    /// Differentiate through every iteration, second-order terms included (the paper).
    #[default]
    Exact,
    /// Treat `J_phi(z)^T r` as a constant in the backward pass: first-order only, cheaper.
    Detached,
    /// Treat the whole inner gradient `2 (r - J_phi(z)^T r)` as a constant: the training gradient
    /// flows through `z_0 = h + phi(h)` and the identity path of each update (PyTorch's
    /// `autograd.grad` without `create_graph`). The cheapest, and it cannot explode.
    Frozen,
}

impl InnerGradient {
    /// The spec's name: `exact`, `detached`, `frozen`.
    pub fn name(&self) -> &'static str {
        match self {
            InnerGradient::Exact => "exact",
            InnerGradient::Detached => "detached",
            InnerGradient::Frozen => "frozen",
        }
    }

    /// `J^T r` at `cache`'s point, cut from the graph as far as this choice asks.
    /// `phi_untracked` is `phi.untracked()`, made once per solve by the caller.
    fn jtr<B: Backend>(
        &self,
        phi: &BertLayer<B>,
        phi_untracked: &BertLayer<B>,
        cache: &LayerCache<B>,
        r: &Tensor<B, 3>,
    ) -> Tensor<B, 3> {
        match self {
            InnerGradient::Exact => phi.vjp(cache, r.clone()),
            // The layer's weights are live inside the VJP too: run it on the untracked copy, so
            // that no second-order term reaches them and the graph keeps nothing of it.
            InnerGradient::Detached | InnerGradient::Frozen => {
                phi_untracked.vjp(&cache.clone().detach(), r.clone().detach())
            }
        }
    }

    /// `r` as the update sees it: live, except under `Frozen`.
    fn update_residual<B: Backend>(&self, r: &Tensor<B, 3>) -> Tensor<B, 3> {
        match self {
            InnerGradient::Frozen => r.clone().detach(),
            _ => r.clone(),
        }
    }
}

/// The output of one implicit Euler step.
pub struct ImplicitStep<B: Backend> {
    /// `h_t`: `[batch, seq, hidden]`.
    pub hidden_states: Tensor<B, 3>,
    /// Per example, `||r||^2` before each iteration and after the last: `T + 1` tensors of
    /// `[batch]` (after a tolerance stop, the last value repeats). Empty unless asked for (under
    /// the fixed rule the last one costs an extra `phi` evaluation).
    pub residuals: Vec<Tensor<B, 1>>,
    /// Per iteration taken and example, the step size used (`gamma` under the fixed rule; less
    /// where backtracking halved it; 0 where the example stayed). Empty unless asked for.
    pub step_sizes: Vec<Tensor<B, 1>>,
    /// Iterations run: `T`, or fewer when every example met the tolerance first.
    pub iterations: usize,
}

/// What a solve records, and where it decides.
#[derive(Debug, Clone, Copy, Default)]
pub struct SolveOptions {
    /// Record `||r||^2` per iteration and the steps taken (`ImplicitStep`).
    pub record: bool,
    /// Decide on the device, never reading back mid-solve (`ForwardOptions::decide_on_device`).
    pub decide_on_device: bool,
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
        options: SolveOptions,
    ) -> ImplicitStep<B> {
        if self.step_rule != StepRule::Fixed || self.tolerance.is_some() {
            return self.safeguarded_step(phi, h_prev, ctx, token_mask, options);
        }
        let record_residuals = options.record;
        // (z - h_{t-1} - phi_z) * mask, one pass on the CPU.
        let residual =
            |z: &Tensor<B, 3>, phi_z: Tensor<B, 3>| masked_residual(z, &h_prev, phi_z, token_mask);
        let mut residuals = Vec::new();

        // z_0 = h_{t-1} + phi_t(h_{t-1}): start from the explicit Euler step.
        let mut z = add_residual(phi.forward(h_prev.clone(), ctx), None, h_prev.clone());
        let phi_untracked = phi.untracked();

        for _ in 0..self.iterations {
            // One forward feeds both r and the VJP.
            let (phi_z, cache) = phi.forward_cached(z.clone(), ctx);
            // r = z - h_{t-1} - phi_t(z)
            let r = residual(&z, phi_z);
            if record_residuals {
                residuals.push(squared_norm(&r));
            }
            // grad_z ||r||^2 = 2 (r - J_phi(z)^T r)
            let jtr = self.gradient.jtr(phi, &phi_untracked, &cache, &r);
            // z <- z - gamma * grad, one pass on the CPU.
            z = descent_step(&z, &self.gradient.update_residual(&r), jtr, 2.0 * self.gamma);
        }

        let mut step_sizes = Vec::new();
        if record_residuals {
            let r = residual(&z, phi.forward(z.clone(), ctx));
            residuals.push(squared_norm(&r));
            let batch = z.dims()[0];
            step_sizes = vec![Tensor::full([batch], self.gamma, &z.device()); self.iterations];
        }
        ImplicitStep { hidden_states: z, residuals, step_sizes, iterations: self.iterations }
    }
}

/// `||r||^2` per example: `[batch, seq, hidden]` -> `[batch]`.
pub(crate) fn squared_norm<B: Backend>(r: &Tensor<B, 3>) -> Tensor<B, 1> {
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
    /// `layers` (`a-b` or `a`), `grad` (`exact`, `detached` or `frozen`), `step` (`fixed` or
    /// `backtrack`) and `tol` (a relative tolerance in (0, 1)).
    pub fn parse(spec: &str) -> Result<Self, Error> {
        let err = |message: String| Error::ConnectionSpec { spec: spec.to_string(), message };
        let (mode, rest) = spec.split_once(':').unwrap_or((spec, ""));
        let mut im = ImplicitEuler::default();
        let mut layers = None;
        let mut saw_im_key = false;
        for item in rest.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (key, value) =
                item.split_once('=').ok_or_else(|| err(format!("`{item}` is not key=value")))?;
            match key.trim() {
                "T" | "t" | "iterations" => {
                    im.iterations = value
                        .trim()
                        .parse()
                        .map_err(|_| err(format!("T = {value:?} is not a count")))?;
                    saw_im_key = true;
                }
                "gamma" => {
                    im.gamma = value
                        .trim()
                        .parse()
                        .map_err(|_| err(format!("gamma = {value:?} is not a number")))?;
                    saw_im_key = true;
                }
                "grad" => {
                    im.gradient = match value.trim() {
                        "exact" => InnerGradient::Exact,
                        "detached" => InnerGradient::Detached,
                        "frozen" => InnerGradient::Frozen,
                        other => {
                            return Err(err(format!(
                                "grad = {other:?}; expected exact, detached or frozen"
                            )))
                        }
                    };
                    saw_im_key = true;
                }
                "step" => {
                    im.step_rule = match value.trim() {
                        "fixed" => StepRule::Fixed,
                        "backtrack" => StepRule::Backtrack,
                        other => {
                            return Err(err(format!(
                                "step = {other:?}; expected fixed or backtrack"
                            )))
                        }
                    };
                    saw_im_key = true;
                }
                "tol" => {
                    let tol: f64 = value
                        .trim()
                        .parse()
                        .map_err(|_| err(format!("tol = {value:?} is not a number")))?;
                    if !(tol > 0.0 && tol < 1.0) {
                        return Err(err(format!(
                            "tol = {tol} must lie in (0, 1): a fraction of the first ||r||^2"
                        )));
                    }
                    im.tolerance = Some(tol);
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
            return Err(err("T, gamma, grad, step and tol apply to `im` only".into()));
        }
        let spec = Self { connection, layers };
        spec.check().map_err(err)?;
        Ok(spec)
    }

    /// The spec with the CLI's separate flags applied (`--T`, `--gamma`: IM only; `--im-layers`),
    /// and checked; the one place every subcommand turns those flags into a connection.
    pub fn with_flags(
        mut self,
        iterations: Option<usize>,
        gamma: Option<f64>,
        layers: Option<&str>,
    ) -> Result<Self, Error> {
        let flag_err =
            |flag: String, message: String| Error::ConnectionSpec { spec: flag, message };
        match &mut self.connection {
            Connection::Implicit(im) => {
                im.iterations = iterations.unwrap_or(im.iterations);
                im.gamma = gamma.unwrap_or(im.gamma);
            }
            _ if iterations.is_some() || gamma.is_some() => {
                let flag = if iterations.is_some() { "--T" } else { "--gamma" };
                return Err(flag_err(flag.into(), "applies to the im connection only".into()));
            }
            _ => {}
        }
        if let Some(raw) = layers {
            let range =
                parse_range(raw.trim()).map_err(|m| flag_err(format!("--im-layers {raw}"), m))?;
            self.layers = Some(range);
        }
        let text = self.to_spec_string();
        self.check().map_err(|message| Error::ConnectionSpec { spec: text, message })?;
        Ok(self)
    }

    /// Refuses settings no solve should run with: `T` above [`MAX_ITERATIONS`] (each one is a
    /// forward and a backward through the layer), and `gamma` outside (0, [`MAX_GAMMA`]].
    pub fn check(&self) -> Result<(), String> {
        if let Connection::Implicit(im) = &self.connection {
            if im.iterations > MAX_ITERATIONS {
                return Err(format!("T = {} is above {MAX_ITERATIONS}", im.iterations));
            }
            if !(im.gamma > 0.0 && im.gamma <= MAX_GAMMA) {
                return Err(format!("gamma = {} must lie in (0, {MAX_GAMMA}]", im.gamma));
            }
        }
        Ok(())
    }

    /// What the user should know about a spec that is valid but easy to misread.
    pub fn notes(&self) -> Vec<String> {
        match &self.connection {
            Connection::Implicit(im) if im.iterations == 0 => vec![format!(
                "{self}: T = 0 runs no iteration, so each IM layer computes z0 = h + phi(h), \
                 EX's step"
            )],
            _ => Vec::new(),
        }
    }

    /// The connection of each of `num_layers` layers.
    pub fn per_layer(&self, num_layers: usize) -> Result<Vec<Connection>, Error> {
        let (first, last) = self.layers.unwrap_or((0, num_layers.saturating_sub(1)));
        if last >= num_layers {
            return Err(Error::ConnectionSpec {
                spec: format!("layers={first}-{last}"),
                message: format!(
                    "the model has {num_layers} layers (0..={})",
                    num_layers.saturating_sub(1)
                ),
            });
        }
        Ok((0..num_layers)
            .map(
                |i| {
                    if (first..=last).contains(&i) {
                        self.connection
                    } else {
                        Connection::Monotone
                    }
                },
            )
            .collect())
    }

    /// The canonical spec string, which `parse` reads back.
    pub fn to_spec_string(&self) -> String {
        let mut parts = Vec::new();
        if let Connection::Implicit(im) = &self.connection {
            parts.push(format!("T={}", im.iterations));
            parts.push(format!("gamma={}", im.gamma));
            if im.gradient != InnerGradient::Exact {
                parts.push(format!("grad={}", im.gradient.name()));
            }
            if im.step_rule == StepRule::Backtrack {
                parts.push("step=backtrack".into());
            }
            if let Some(tol) = im.tolerance {
                parts.push(format!("tol={tol}"));
            }
        }
        if let Some((a, b)) = self.layers {
            parts.push(format!("layers={a}-{b}"));
        }
        let mode = self.connection.short_name();
        if parts.is_empty() {
            mode.to_string()
        } else {
            format!("{mode}:{}", parts.join(","))
        }
    }
}

/// The canonical spec, as [`ConnectionSpec::to_spec_string`] writes it.
impl std::fmt::Display for ConnectionSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.to_spec_string())
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
    let parse =
        |s: &str| s.trim().parse::<usize>().map_err(|_| format!("layers = {value:?} is not `a-b`"));
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
    fn solves_no_one_should_run_are_refused() {
        for bad in ["gamma=NaN", "gamma=inf", "gamma=-1", "gamma=0", "gamma=1e9", "T=1000"] {
            let spec = format!("im:{bad}");
            assert!(ConnectionSpec::parse(&spec).is_err(), "{spec} was accepted");
        }
        assert!(ConnectionSpec::parse("im:T=100,gamma=100").is_ok());
        let t0 = ConnectionSpec::parse("im:T=0").unwrap();
        assert!(t0.notes()[0].contains("EX's step"), "{:?}", t0.notes());
        assert!(ConnectionSpec::parse("im").unwrap().notes().is_empty());
    }

    #[test]
    fn cli_flags_are_applied_checked_and_named() {
        let im = ConnectionSpec::parse("im:grad=detached").unwrap();
        let spec = im.clone().with_flags(Some(3), Some(0.2), Some("1-2")).unwrap();
        assert_eq!(spec.to_spec_string(), "im:T=3,gamma=0.2,grad=detached,layers=1-2");
        let message = |r: Result<ConnectionSpec, Error>| r.unwrap_err().to_string();
        let bert = ConnectionSpec::parse("bert").unwrap();
        assert!(message(bert.clone().with_flags(Some(9), None, None)).contains("--T"));
        assert!(message(bert.with_flags(None, Some(0.5), None)).contains("--gamma"));
        let layers = message(im.clone().with_flags(None, None, Some("3-1")));
        assert!(layers.contains("--im-layers 3-1") && !layers.contains("bert:"), "{layers}");
        assert!(message(im.clone().with_flags(None, Some(f64::NAN), None)).contains("gamma"));
        assert!(message(im.with_flags(Some(1000), None, None)).contains("T = 1000"));
    }

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
        for bad in [
            "xx",
            "im:T=a",
            "im:layers=5-3",
            "ex:T=3",
            "im:foo=1",
            "im:T",
            "im:grad=x",
            "im:step=x",
            "im:tol=0",
            "im:tol=1",
            "ex:tol=0.1",
        ] {
            assert!(ConnectionSpec::parse(bad).is_err(), "{bad} should fail");
        }
        assert!(ConnectionSpec::parse("im:layers=2-6").unwrap().per_layer(6).is_err());
        for spec in [
            "im:T=5,gamma=0.1,grad=frozen,step=backtrack",
            "im:T=3,gamma=0.05,grad=detached,tol=0.01,layers=2-3",
            crate::RECOMMENDED_IM,
        ] {
            let parsed = ConnectionSpec::parse(spec).unwrap();
            assert_eq!(parsed.to_spec_string(), spec);
            // Older cards (without `step` and `tol`) still read.
            let json = serde_json::to_string(&parsed).unwrap();
            assert_eq!(serde_json::from_str::<ConnectionSpec>(&json).unwrap(), parsed);
        }
        let old: ConnectionSpec = serde_json::from_str(concat!(
            r#"{"connection":{"kind":"implicit","iterations":5,"gamma":0.1,"#,
            r#""gradient":"detached"},"layers":null}"#
        ))
        .unwrap();
        assert_eq!(old.to_spec_string(), "im:T=5,gamma=0.1,grad=detached");
    }
}

#[cfg(test)]
mod model_tests;
