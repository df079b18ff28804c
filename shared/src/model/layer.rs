//! One BERT layer, `phi_t`, with its hand-written vector-Jacobian product.
//!
//! IM-BERT needs `J_phi(z)^T r` inside its forward pass and then trains *through* it, which asks
//! for second derivatives. burn has first-order autodiff only, so the VJP is written out here from
//! ordinary tensor ops: the outer `backward()` then differentiates it like any other code and the
//! training gradient is exact. Every sub-block's forward is followed directly by its backward
//! (llm.c order: gradient of the input first, then the incoming gradient, then the forward's
//! cache). The forward mirrors HF `BertLayer` (modeling_bert.py): self-attention, output dense +
//! residual + LayerNorm, intermediate dense + GELU, output dense + residual + LayerNorm.

use burn::module::{Module, ModuleVisitor, Param};
use burn::nn::{LayerNorm, LayerNormConfig, Linear, LinearConfig};
use burn::tensor::backend::Backend;
use burn::tensor::Tensor;

use crate::cpu::kernels::{
    add_residual, attention, attention_backward, attention_probs, concat, gelu, gelu_backward,
    gelu_output, layer_norm, layer_norm_backward, layer_norm_output, linear, linear_residual,
    matmul, matmul_merged, softmax_backward, split_heads, times_keep,
};
use crate::model::config::BertConfig;

/// Additive attention bias of padded keys: large enough that softmax gives them exactly 0.
pub const MASKED_SCORE: f32 = -1.0e9;

/// Context that every layer of one forward pass shares.
#[derive(Debug, Clone)]
pub struct LayerContext<B: Backend> {
    /// `[batch, 1, 1, seq]`: 0 for real tokens, `MASKED_SCORE` for padding.
    pub attention_bias: Tensor<B, 4>,
    /// Dropout probabilities; both 0 when not training.
    pub hidden_dropout: f64,
    pub attention_dropout: f64,
}

/// `BertLayer`: `phi_t` in the paper.
#[derive(Module, Debug)]
pub struct BertLayer<B: Backend> {
    pub attention: BertAttention<B>,
    pub intermediate: BertIntermediate<B>,
    pub output: BertOutput<B>,
}

/// HF `BertAttention`: self-attention plus its output projection and first residual LayerNorm.
#[derive(Module, Debug)]
pub struct BertAttention<B: Backend> {
    /// HF's `attention.self` (`self` is a Rust keyword).
    pub self_attention: BertSelfAttention<B>,
    pub output: BertSelfOutput<B>,
}

#[derive(Module, Debug)]
pub struct BertSelfAttention<B: Backend> {
    pub query: Linear<B>,
    pub key: Linear<B>,
    pub value: Linear<B>,
    #[module(skip)]
    pub num_heads: usize,
}

impl<B: Backend> BertSelfAttention<B> {
    /// `[W_q W_k W_v]`, `[hidden, 3 * hidden]`: the three projections as one matrix.
    fn qkv_weight(&self) -> Tensor<B, 2> {
        concat(vec![self.query.weight.val(), self.key.weight.val(), self.value.weight.val()])
    }

    fn qkv_bias(&self) -> Option<Tensor<B, 1>> {
        let (q, k, v) =
            (self.query.bias.as_ref()?, self.key.bias.as_ref()?, self.value.bias.as_ref()?);
        Some(concat(vec![q.val(), k.val(), v.val()]))
    }
}

#[derive(Module, Debug)]
pub struct BertSelfOutput<B: Backend> {
    pub dense: Linear<B>,
    pub layer_norm: LayerNorm<B>,
    #[module(skip)]
    pub eps: f64,
}

#[derive(Module, Debug)]
pub struct BertIntermediate<B: Backend> {
    pub dense: Linear<B>,
}

#[derive(Module, Debug)]
pub struct BertOutput<B: Backend> {
    pub dense: Linear<B>,
    pub layer_norm: LayerNorm<B>,
    #[module(skip)]
    pub eps: f64,
}

/// What the forward keeps for the VJP: everything `J_phi^T` needs, and the dropout masks, so that
/// phi and its VJP see the same mask.
#[derive(Debug, Clone)]
pub struct LayerCache<B: Backend> {
    qkv_weight: Tensor<B, 2>, // [hidden, 3 * hidden], joined once for the forward and the VJP
    q: Tensor<B, 4>,          // [batch, heads, seq, head_dim]
    k: Tensor<B, 4>,
    v: Tensor<B, 4>,
    attention: AttentionProbs<B>,
    attention_keep: Option<Tensor<B, 3>>,
    ln1: LayerNormCache<B>,
    gelu_in: Tensor<B, 3>,  // [batch, seq, intermediate]
    gelu_cdf: Tensor<B, 3>, // Phi(gelu_in)
    ffn_keep: Option<Tensor<B, 3>>,
    ln2: LayerNormCache<B>,
}

impl<B: Backend> LayerCache<B> {
    /// The same cache cut off from the autodiff graph: the VJP built on it is a constant for the
    /// outer backward (the `InnerGradient::Detached` approximation).
    pub fn detach(self) -> Self {
        let d3 = |t: Tensor<B, 3>| t.detach();
        let d4 = |t: Tensor<B, 4>| t.detach();
        Self {
            qkv_weight: self.qkv_weight.detach(),
            q: d4(self.q),
            k: d4(self.k),
            v: d4(self.v),
            attention: self.attention.detach(),
            attention_keep: self.attention_keep.map(d3),
            ln1: self.ln1.detach(),
            gelu_in: d3(self.gelu_in),
            gelu_cdf: d3(self.gelu_cdf),
            ffn_keep: self.ffn_keep.map(d3),
            ln2: self.ln2.detach(),
        }
    }
}

/// Initialises every lazy parameter in place, so that clones share its values.
struct Materialise;

impl<B: Backend> ModuleVisitor<B> for Materialise {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        let _ = param.val();
    }
}

impl<B: Backend> BertLayer<B> {
    pub fn new(config: &BertConfig, device: &B::Device) -> Self {
        let h = config.hidden_size;
        let lin = |i, o| LinearConfig::new(i, o).init(device);
        let ln = || LayerNormConfig::new(h).with_epsilon(config.layer_norm_eps).init(device);
        Self {
            attention: BertAttention {
                self_attention: BertSelfAttention {
                    query: lin(h, h),
                    key: lin(h, h),
                    value: lin(h, h),
                    num_heads: config.num_attention_heads,
                },
                output: BertSelfOutput {
                    dense: lin(h, h),
                    layer_norm: ln(),
                    eps: config.layer_norm_eps,
                },
            },
            intermediate: BertIntermediate { dense: lin(h, config.intermediate_size) },
            output: BertOutput {
                dense: lin(config.intermediate_size, h),
                layer_norm: ln(),
                eps: config.layer_norm_eps,
            },
        }
    }

    /// The same layer with its weights off the autodiff graph, for what the training gradient
    /// treats as a constant. Detaching a result afterwards is not enough: burn keeps every
    /// tracked op's saved inputs until `backward`, reachable or not, so a VJP run on the live
    /// weights would hold a backward pass's worth of activations per iteration.
    pub fn untracked(&self) -> Self {
        // A clone of a parameter not yet initialised would draw its own random values.
        self.visit(&mut Materialise);
        self.clone().no_grad()
    }

    /// `phi(h)`: `[batch, seq, hidden]` -> `[batch, seq, hidden]`, keeping nothing for a VJP.
    pub fn forward(&self, hidden_states: Tensor<B, 3>, ctx: &LayerContext<B>) -> Tensor<B, 3> {
        self.run(hidden_states, ctx, false).0
    }

    /// `phi(h)` and the cache its VJP needs ("for the backward pass").
    pub fn forward_cached(
        &self,
        hidden_states: Tensor<B, 3>,
        ctx: &LayerContext<B>,
    ) -> (Tensor<B, 3>, LayerCache<B>) {
        let (y, cache) = self.run(hidden_states, ctx, true);
        (y, cache.expect("run keeps the cache when asked to"))
    }

    /// The layer, keeping its intermediates for the VJP when `keep` is set. Without, GELU and the
    /// LayerNorms write in place and skip what only the VJP reads (`Phi`, `x_hat`, `rstd`).
    fn run(
        &self,
        hidden_states: Tensor<B, 3>,
        ctx: &LayerContext<B>,
        keep: bool,
    ) -> (Tensor<B, 3>, Option<LayerCache<B>>) {
        let sa = &self.attention.self_attention;
        let heads = sa.num_heads;
        let head_dim = hidden_states.dims()[2] / heads;

        // Self-attention: softmax(q k^T / sqrt(d) + bias) v. One matmul computes q, k and v.
        let qkv_weight = sa.qkv_weight(); // [h, 3h]
        let qkv = linear(hidden_states.clone(), qkv_weight.clone(), sa.qkv_bias()); // [b, s, 3h]
        let [q, k, v] = [0, 1, 2].map(|p| split_heads(qkv.clone(), 3, p, heads)); // [b, nh, s, dh]
        let scale = (head_dim as f64).powf(-0.5);
        let (context, attention) = attention_core(&q, &k, &v, scale, ctx, keep); // [b, s, h]

        // Attention output: dense -> dropout -> residual -> LayerNorm.
        let (attn, attention_keep) = dense_residual(
            &self.attention.output.dense,
            context,
            hidden_states,
            ctx.hidden_dropout,
        );
        let (x1, ln1) = layer_norm_forward(
            attn,
            &self.attention.output.layer_norm,
            self.attention.output.eps,
            keep,
        );

        // Feed-forward: dense -> exact GELU -> dense -> dropout -> residual -> LayerNorm.
        let gelu_in = dense(&self.intermediate.dense, x1.clone());
        let (gelu_out, gelu_cache) = if keep {
            let (out, cdf) = gelu(gelu_in.clone());
            (out, Some((gelu_in, cdf)))
        } else {
            (gelu_output(gelu_in), None)
        };
        let (ffn, ffn_keep) = dense_residual(&self.output.dense, gelu_out, x1, ctx.hidden_dropout);
        let (y, ln2) = layer_norm_forward(ffn, &self.output.layer_norm, self.output.eps, keep);

        let cache = match (ln1, gelu_cache, ln2, attention) {
            (Some(ln1), Some((gelu_in, gelu_cdf)), Some(ln2), Some(attention)) => {
                Some(LayerCache {
                    qkv_weight,
                    q,
                    k,
                    v,
                    attention,
                    attention_keep,
                    ln1,
                    gelu_in,
                    gelu_cdf,
                    ffn_keep,
                    ln2,
                })
            }
            _ => None,
        };
        (y, cache)
    }

    /// `J_phi(h)^T dout`: the gradient of `sum(phi(h) * dout)` with respect to `h`, at the `h` the
    /// cache was made from. Runs the forward's steps in reverse order.
    pub fn vjp(&self, cache: &LayerCache<B>, dout: Tensor<B, 3>) -> Tensor<B, 3> {
        let sa = &self.attention.self_attention;
        let heads = sa.num_heads;
        let head_dim = dout.dims()[2] / heads;

        // Feed-forward block, reversed.
        // [b, s, h]
        let dffn = layer_norm_backward_cached(dout, &cache.ln2, &self.output.layer_norm);
        let dffn_dense = apply_keep(dffn.clone(), &cache.ffn_keep);
        let dgelu_out = linear_input_backward(&self.output.dense, dffn_dense); // [b, s, i]
        let dgelu_in = gelu_backward(dgelu_out, &cache.gelu_in, &cache.gelu_cdf);
        // term 1: the residual path (the GEMM's initial value); term 2: through the intermediate
        // dense.
        let dx1 =
            linear_residual(dgelu_in, self.intermediate.dense.weight.val().transpose(), None, dffn);

        // Attention block, reversed.
        let dattn = layer_norm_backward_cached(dx1, &cache.ln1, &self.attention.output.layer_norm);
        let dattn_dense = apply_keep(dattn.clone(), &cache.attention_keep);
        let dcontext = split_heads(
            linear_input_backward(&self.attention.output.dense, dattn_dense),
            1,
            0,
            heads,
        );
        // [b, s, 3h]
        let dqkv = attention_core_backward(dcontext, cache, (head_dim as f64).powf(-0.5));

        // term 1: the residual path (the GEMM's initial value); term 2: through query, key and
        // value, [dq dk dv] W_qkv^T.
        linear_residual(dqkv, cache.qkv_weight.clone().transpose(), None, dattn)
    }
}

/// What [`attention_core`] keeps for its VJP.
#[derive(Debug, Clone)]
pub struct AttentionProbs<B: Backend> {
    probs: Tensor<B, 4>,        // [batch, heads, seq, seq], before dropout
    dropped: Tensor<B, 4>,      // after dropout (`probs` itself without)
    keep: Option<Tensor<B, 4>>, // the dropout's keep mask
}

impl<B: Backend> AttentionProbs<B> {
    fn detach(self) -> Self {
        Self {
            probs: self.probs.detach(),
            dropped: self.dropped.detach(),
            keep: self.keep.map(|k| k.detach()),
        }
    }
}

/// Attention's core, `dropout(softmax(q k^T * scale + bias)) v` with the heads merged back:
/// `[batch, heads, seq, head_dim]` each -> `[batch, seq, hidden]`, and the probabilities when
/// `keep` ("for the backward pass"). Without dropout on them, `kernels::attention` runs it in one
/// pass per batch item on the CPU; with dropout, and on other backends, it is composed of a
/// product, the softmax and the merged product.
fn attention_core<B: Backend>(
    q: &Tensor<B, 4>,
    k: &Tensor<B, 4>,
    v: &Tensor<B, 4>,
    scale: f64,
    ctx: &LayerContext<B>,
    keep: bool,
) -> (Tensor<B, 3>, Option<AttentionProbs<B>>) {
    if ctx.attention_dropout == 0.0 {
        if let Some((context, probs)) = attention(q, k, v, &ctx.attention_bias, scale, keep) {
            return (
                context,
                probs.map(|p| AttentionProbs { dropped: p.clone(), probs: p, keep: None }),
            );
        }
    }
    let scores = matmul(q.clone(), k.clone().swap_dims(2, 3)); // [b, nh, s, s]
    let probs = attention_probs(scores, scale, &ctx.attention_bias);
    let probs_keep = dropout_mask(&probs, ctx.attention_dropout);
    let dropped = apply_keep(probs.clone(), &probs_keep);
    let context = matmul_merged(vec![(dropped.clone(), v.clone())]); // [b, s, h]
    (context, Some(AttentionProbs { probs, dropped, keep: probs_keep }))
}

/// Input-gradients of [`attention_core`], `[dq dk dv]` `[batch, seq, 3 * hidden]`, from
/// `dcontext` `[batch, heads, seq, head_dim]`: `dscores = softmax_backward(dropout(dcontext v^T))`
/// (the scale included), `dq = dscores k`, `dk = dscores^T q`, `dv = dropout(probs)^T dcontext`.
/// One pass per batch item on the CPU when there was no dropout (`kernels::attention_backward`).
fn attention_core_backward<B: Backend>(
    dcontext: Tensor<B, 4>,
    cache: &LayerCache<B>,
    scale: f64,
) -> Tensor<B, 3> {
    let a = &cache.attention;
    if a.keep.is_none() {
        if let Some(dqkv) =
            attention_backward(&dcontext, &cache.q, &cache.k, &cache.v, &a.probs, scale)
        {
            return dqkv;
        }
    }
    let dprobs = apply_keep(matmul(dcontext.clone(), cache.v.clone().swap_dims(2, 3)), &a.keep);
    let dscores = softmax_backward(dprobs, &a.probs, scale); // [b, nh, s, s]
    matmul_merged(vec![
        (dscores.clone(), cache.k.clone()),
        (dscores.swap_dims(2, 3), cache.q.clone()),
        (a.dropped.clone().swap_dims(2, 3), dcontext),
    ])
}

fn dense<B: Backend>(lin: &Linear<B>, x: Tensor<B, 3>) -> Tensor<B, 3> {
    linear(x, lin.weight.val(), lin.bias.as_ref().map(|b| b.val()))
}

/// `dropout(x W + b) + residual`, and the dropout's keep mask, which the VJP needs. Without
/// dropout, one op whose GEMM starts from the residual (`linear_residual`).
fn dense_residual<B: Backend>(
    lin: &Linear<B>,
    x: Tensor<B, 3>,
    residual: Tensor<B, 3>,
    p: f64,
) -> (Tensor<B, 3>, Option<Tensor<B, 3>>) {
    if p == 0.0 {
        return (
            linear_residual(x, lin.weight.val(), lin.bias.as_ref().map(|b| b.val()), residual),
            None,
        );
    }
    let y = dense(lin, x);
    let keep = dropout_mask(&y, p);
    (add_residual(y, keep.as_ref(), residual), keep)
}

/// Input-gradient of `x W + b`: `dout W^T`.
fn linear_input_backward<B: Backend>(lin: &Linear<B>, dout: Tensor<B, 3>) -> Tensor<B, 3> {
    linear(dout, lin.weight.val().transpose(), None)
}

/// Normalised input and reciprocal standard deviation of one LayerNorm.
#[derive(Debug, Clone)]
pub struct LayerNormCache<B: Backend> {
    x_hat: Tensor<B, 3>, // [batch, seq, hidden]
    rstd: Tensor<B, 3>,  // [batch, seq, 1]
}

impl<B: Backend> LayerNormCache<B> {
    fn detach(self) -> Self {
        Self { x_hat: self.x_hat.detach(), rstd: self.rstd.detach() }
    }
}

/// `gamma * (x - mean) / sqrt(var + eps) + beta` over the last dimension (biased variance, as
/// PyTorch), with the VJP's cache when `keep` is set.
pub fn layer_norm_forward<B: Backend>(
    x: Tensor<B, 3>,
    ln: &LayerNorm<B>,
    eps: f64,
    keep: bool,
) -> (Tensor<B, 3>, Option<LayerNormCache<B>>) {
    let (gamma, beta) = (ln.gamma.val(), ln.beta.as_ref().map(|b| b.val()));
    if !keep {
        return (layer_norm_output(x, gamma, beta, eps), None);
    }
    let (y, x_hat, rstd) = layer_norm(x, gamma, beta, eps);
    (y, Some(LayerNormCache { x_hat, rstd }))
}

/// Input-gradient of [`layer_norm_forward`].
fn layer_norm_backward_cached<B: Backend>(
    dout: Tensor<B, 3>,
    cache: &LayerNormCache<B>,
    ln: &LayerNorm<B>,
) -> Tensor<B, 3> {
    layer_norm_backward(dout, &cache.x_hat, &cache.rstd, ln.gamma.val())
}

/// Inverted-dropout keep mask (`1/(1-p)` where kept, 0 where dropped), or `None` when `p == 0`.
fn dropout_mask<B: Backend, const D: usize>(like: &Tensor<B, D>, p: f64) -> Option<Tensor<B, D>> {
    (p > 0.0).then(|| crate::cpu::kernels::dropout_keep(like, p))
}

/// Dropout forward and backward are the same product with the keep mask.
fn apply_keep<B: Backend, const D: usize>(
    x: Tensor<B, D>,
    keep: &Option<Tensor<B, D>>,
) -> Tensor<B, D> {
    match keep {
        Some(k) => times_keep(x, k),
        None => x,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::{Autodiff, NdArray};
    use burn::tensor::{Distribution, TensorData};

    type B = Autodiff<NdArray<f64>>;

    /// `[batch, 1, 1, seq]` bias for items of the given lengths.
    fn bias(lengths: &[usize], seq: usize) -> Tensor<B, 4> {
        let v: Vec<f64> = lengths
            .iter()
            .flat_map(|&n| (0..seq).map(move |j| if j < n { 0.0 } else { MASKED_SCORE as f64 }))
            .collect();
        Tensor::from_data(TensorData::new(v, [lengths.len(), 1, 1, seq]), &Default::default())
    }

    /// `vjp(h, r)` against burn autodiff's gradient of `sum(phi(h) * r)`, with padding, with and
    /// without dropout (the cache carries the masks, so both see the same ones).
    fn check(hidden_dropout: f64, attention_dropout: f64) -> f64 {
        let device = Default::default();
        let config = BertConfig {
            hidden_size: 12,
            num_attention_heads: 3,
            intermediate_size: 20,
            ..BertConfig::tiny()
        };
        let phi = BertLayer::<B>::new(&config, &device);
        let ctx =
            LayerContext { attention_bias: bias(&[5, 3], 5), hidden_dropout, attention_dropout };
        let h = Tensor::<B, 3>::random([2, 5, 12], Distribution::Normal(0.0, 1.0), &device)
            .require_grad();
        let r = Tensor::<B, 3>::random([2, 5, 12], Distribution::Normal(0.0, 1.0), &device);
        let (y, cache) = phi.forward_cached(h.clone(), &ctx);
        let ours: Vec<f64> = phi.vjp(&cache, r.clone()).into_data().into_vec().unwrap();
        let grads = (y * r).sum().backward();
        let autodiff: Vec<f64> = h.grad(&grads).unwrap().into_data().into_vec().unwrap();
        let scale = autodiff.iter().fold(0.0f64, |m, x| m.max(x.abs()));
        let diff = ours.iter().zip(&autodiff).fold(0.0f64, |m, (a, b)| m.max((a - b).abs()));
        diff / scale
    }

    #[test]
    fn vjp_matches_autodiff() {
        crate::model::f64_process::run_in_f64_process!(vjp_matches_autodiff);
        let rel = check(0.0, 0.0);
        println!("max relative |vjp - autodiff| = {rel:.2e}");
        assert!(rel < 1e-10, "{rel}");
    }

    #[test]
    fn vjp_matches_autodiff_with_dropout() {
        crate::model::f64_process::run_in_f64_process!(vjp_matches_autodiff_with_dropout);
        let rel = check(0.3, 0.2);
        println!("with dropout: max relative |vjp - autodiff| = {rel:.2e}");
        assert!(rel < 1e-10, "{rel}");
    }

    /// `forward` (no cache: GELU and LayerNorm in place) gives exactly `forward_cached`'s output,
    /// on the CPU kernels at inference and under autodiff's nodes.
    fn forward_without_cache_is_the_cached_output<C: Backend>() {
        let device = Default::default();
        let config = BertConfig {
            hidden_size: 12,
            num_attention_heads: 3,
            intermediate_size: 20,
            ..BertConfig::tiny()
        };
        let phi = BertLayer::<C>::new(&config, &device);
        let lengths = [5usize, 3];
        let v: Vec<f32> = lengths
            .iter()
            .flat_map(|&n| (0..5).map(move |j| if j < n { 0.0 } else { MASKED_SCORE }))
            .collect();
        let attention_bias = Tensor::from_data(TensorData::new(v, [2, 1, 1, 5]), &device);
        let ctx = LayerContext { attention_bias, hidden_dropout: 0.0, attention_dropout: 0.0 };
        let h = Tensor::<C, 3>::random([2, 5, 12], Distribution::Normal(0.0, 1.0), &device);
        let plain: Vec<f32> =
            phi.forward(h.clone(), &ctx).into_data().convert::<f32>().into_vec().unwrap();
        let cached: Vec<f32> =
            phi.forward_cached(h, &ctx).0.into_data().convert::<f32>().into_vec().unwrap();
        assert_eq!(plain, cached);
    }

    #[test]
    fn forward_without_cache_matches_cached_forward() {
        forward_without_cache_is_the_cached_output::<NdArray<f32>>();
        forward_without_cache_is_the_cached_output::<Autodiff<NdArray<f32>>>();
        forward_without_cache_is_the_cached_output::<B>();
    }

    #[test]
    fn gelu_is_exact_erf_form() {
        crate::model::f64_process::run_in_f64_process!(gelu_is_exact_erf_form);
        let x = Tensor::<NdArray<f64>, 1>::from_data(
            TensorData::new(vec![-3.0, -0.5, 0.0, 1.0, 2.5], [5]),
            &Default::default(),
        );
        let (y, _) = gelu(x);
        let y: Vec<f64> = y.into_data().into_vec().unwrap();
        // x * Phi(x) at the same points, from Python's math.erf.
        let expected = [
            -0.00404969409489031,
            -0.15426876936299344,
            0.0,
            0.8413447460685429,
            2.4844758366855597,
        ];
        for (a, b) in y.iter().zip(expected) {
            assert!((a - b).abs() < 1e-9, "{a} vs {b}");
        }
    }
}
