//! BERT (or RoBERTa) for sequence classification, with a per-layer connection (BERT / EX / IM).
//!
//! Module paths mirror HF weight names (`bert.embeddings.word_embeddings`,
//! `bert.encoder.layer.{i}.attention.self.query`, `classifier`), so loading needs almost no
//! remap table (see `checkpoint.rs`). The classification head is HF's
//! `BertForSequenceClassification`: pooler (dense + tanh on [CLS]) -> dropout -> classifier.
//! RoBERTa ([`Architecture::Roberta`]) shares every layer; its embeddings number positions past
//! the padding index, and its head (`classifier.dense`, `classifier.out_proj`) is the same two
//! Linears with one more dropout, so it lives in the same structs under other HF names.

use burn::module::{Module, Param, ParamId};
use burn::nn::{Embedding, LayerNorm, LayerNormConfig, Linear, LinearConfig};
use burn::tensor::backend::Backend;
use burn::tensor::{Distribution, Int, Tensor};

use crate::cpu::kernels::add_residual;
use crate::model::config::{Architecture, BertConfig};
use crate::model::implicit_euler::{Connection, ConnectionSpec, SolveOptions};
use crate::model::layer::{layer_norm_forward, BertLayer, LayerContext, MASKED_SCORE};
use crate::Error;

/// A tokenised batch: `[batch, seq]` each.
#[derive(Debug, Clone)]
pub struct BertInput<B: Backend> {
    pub input_ids: Tensor<B, 2, Int>,
    pub token_type_ids: Tensor<B, 2, Int>,
    /// 1 for real tokens, 0 for padding.
    pub attention_mask: Tensor<B, 2, Int>,
}

/// What a forward pass can return besides the logits.
#[derive(Debug, Clone, Copy, Default)]
pub struct ForwardOptions {
    /// Keep the embeddings and every layer's output.
    pub hidden_states: bool,
    /// Record each IM layer's squared residual norm per iteration.
    pub im_residuals: bool,
    /// Return the encoder output without running the pooler and classifier.
    pub skip_head: bool,
    /// Make the safeguarded IM solve's decisions (accept a step, stop an example) on the device,
    /// never reading back mid-forward. Needed on WebGPU in the browser, which cannot read back
    /// without yielding; elsewhere slower (every halving is tried), with the same result.
    pub decide_on_device: bool,
}

/// The result of a forward pass.
#[derive(Debug, Clone)]
pub struct ClassifierOutput<B: Backend> {
    /// `[batch, seq, hidden]`.
    pub last_hidden_state: Tensor<B, 3>,
    /// `[batch, num_labels]`, when the model has a classifier and the head was run.
    pub logits: Option<Tensor<B, 2>>,
    /// `hidden_states[0]` is the embedding output, `hidden_states[i]` layer `i`'s output.
    pub hidden_states: Vec<Tensor<B, 3>>,
    /// `(layer, residuals)`: for each IM layer, `T + 1` tensors of `[batch]`.
    pub im_residuals: Vec<(usize, Vec<Tensor<B, 1>>)>,
    /// For each IM layer (with `im_residuals`): the iterations run and the step sizes taken.
    pub im_solves: Vec<SolveTrace<B>>,
}

/// How one IM layer's solve went.
#[derive(Debug, Clone)]
pub struct SolveTrace<B: Backend> {
    pub layer: usize,
    /// Iterations run (fewer than T when a tolerance stopped every example first).
    pub iterations: usize,
    /// Per iteration run, `[batch]`: the step size each example took (0 where it stayed).
    pub step_sizes: Vec<Tensor<B, 1>>,
}

/// HF `BertEmbeddings`.
#[derive(Module, Debug)]
pub struct BertEmbeddings<B: Backend> {
    pub word_embeddings: Embedding<B>,
    pub position_embeddings: Embedding<B>,
    pub token_type_embeddings: Embedding<B>,
    pub layer_norm: LayerNorm<B>,
    #[module(skip)]
    pub eps: f64,
    /// RoBERTa's padding index: real tokens take positions `padding_idx + 1, ..` and padding
    /// takes `padding_idx` (HF's `create_position_ids_from_input_ids`). `None`: BERT's `0..seq`.
    #[module(skip)]
    pub padding_idx: Option<usize>,
}

impl<B: Backend> BertEmbeddings<B> {
    /// `delta`, when given, is added to the word embeddings (adversarial training perturbs there).
    fn forward(
        &self,
        input: &BertInput<B>,
        delta: Option<Tensor<B, 3>>,
        dropout: f64,
    ) -> Tensor<B, 3> {
        let [batch, seq] = input.input_ids.dims();
        let device = input.input_ids.device();
        let positions = match self.padding_idx {
            None => Tensor::<B, 1, Int>::arange(0..seq as i64, &device)
                .reshape([1, seq])
                .expand([batch, seq]),
            Some(pad) => {
                let real = input.input_ids.clone().not_equal_elem(pad as i64).int(); // [b, s]
                (real.clone().cumsum(1) * real).add_scalar(pad as i64)
            }
        };
        let mut words = self.word_embeddings.forward(input.input_ids.clone()); // [b, s, h]
        if let Some(delta) = delta {
            words = words + delta;
        }
        let x = words
            + self.position_embeddings.forward(positions)
            + self.token_type_embeddings.forward(input.token_type_ids.clone()); // [b, s, h]
        let (x, _) = layer_norm_forward(x, &self.layer_norm, self.eps, false);
        dropout_forward(x, dropout)
    }
}

/// HF `BertEncoder` with a connection per layer. A plain `for` loop, easy to modify.
#[derive(Module, Debug)]
pub struct BertEncoder<B: Backend> {
    pub layer: Vec<BertLayer<B>>,
    #[module(skip)]
    pub connections: Vec<Connection>,
}

/// HF `BertPooler`: dense + tanh on the [CLS] token.
#[derive(Module, Debug)]
pub struct BertPooler<B: Backend> {
    pub dense: Linear<B>,
}

/// HF `BertModel`.
#[derive(Module, Debug)]
pub struct BertModel<B: Backend> {
    pub embeddings: BertEmbeddings<B>,
    pub encoder: BertEncoder<B>,
    pub pooler: BertPooler<B>,
}

/// HF `BertForSequenceClassification`, with the encoder's connections chosen per layer.
#[derive(Module, Debug)]
pub struct BertClassifier<B: Backend> {
    pub bert: BertModel<B>,
    /// `None` for an encoder-only checkpoint (no task head yet).
    pub classifier: Option<Linear<B>>,
    #[module(skip)]
    pub config: BertConfig,
}

impl<B: Backend> BertClassifier<B> {
    /// A freshly initialised model (HF's init: N(0, initializer_range) weights, zero biases,
    /// LayerNorm 1/0), `num_labels` classes (0 = no head), all layers monotone.
    pub fn new(config: &BertConfig, num_labels: usize, device: &B::Device) -> Self {
        // Eager, not burn's lazy initialisers: a clone of a fresh model must be the same model.
        Self::build(config, num_labels, device, Init::Eager)
    }

    /// The same model with every initial value drawn only on first use: for a loader that
    /// replaces every parameter (`checkpoint::load_complete_from_tensors`), so that no time goes
    /// into values it throws away (in the browser, ~22M normal draws took most of a model's
    /// set-up). A parameter left in place still gets HF's init when first read.
    pub(crate) fn unloaded(config: &BertConfig, num_labels: usize, device: &B::Device) -> Self {
        Self::build(config, num_labels, device, Init::Lazy)
    }

    fn build(config: &BertConfig, num_labels: usize, device: &B::Device, init: Init) -> Self {
        let h = config.hidden_size;
        let std = config.initializer_range;
        let emb = |n| Embedding { weight: hf_normal([n, h], std, device, init) };
        let ln = || LayerNormConfig::new(h).with_epsilon(config.layer_norm_eps).init(device);
        let model = Self {
            bert: BertModel {
                embeddings: BertEmbeddings {
                    word_embeddings: emb(config.vocab_size),
                    position_embeddings: emb(config.max_position_embeddings),
                    token_type_embeddings: emb(config.type_vocab_size),
                    layer_norm: ln(),
                    eps: config.layer_norm_eps,
                    padding_idx: (config.architecture() == Architecture::Roberta)
                        .then_some(config.pad_token_id),
                },
                encoder: BertEncoder {
                    layer: (0..config.num_hidden_layers)
                        .map(|_| BertLayer::new(config, device))
                        .collect(),
                    connections: vec![Connection::Monotone; config.num_hidden_layers],
                },
                pooler: BertPooler { dense: LinearConfig::new(h, h).init(device) },
            },
            classifier: (num_labels > 0).then(|| LinearConfig::new(h, num_labels).init(device)),
            config: config.clone(),
        };
        match init {
            Init::Eager => model.map_linears(|lin| hf_init_linear(lin, std)),
            Init::Lazy => model.map_linears(|lin| hf_lazy_linear(lin, std)),
        }
    }

    /// Sets the connection of every layer from a spec.
    pub fn with_connections(mut self, spec: &ConnectionSpec) -> Result<Self, Error> {
        self.bert.encoder.connections = spec.per_layer(self.bert.encoder.layer.len())?;
        Ok(self)
    }

    /// The longest input the position embeddings allow, capped at `requested`.
    pub fn max_len(&self, requested: usize) -> usize {
        let offset = self.config.architecture().position_offset(self.config.pad_token_id);
        requested.min(self.config.max_position_embeddings - offset)
    }

    /// Number of classes of the head (0 without one).
    pub fn num_labels(&self) -> usize {
        self.classifier.as_ref().map_or(0, |c| c.weight.dims()[1])
    }

    /// The full forward pass. Dropout is active on autodiff backends (training), as in burn's
    /// `Dropout`; run `model.valid()` for evaluation.
    pub fn forward(&self, input: &BertInput<B>, options: ForwardOptions) -> ClassifierOutput<B> {
        self.forward_perturbed(input, None, options)
    }

    /// The forward pass with `delta` (`[batch, seq, hidden]`) added to the word embeddings.
    pub fn forward_perturbed(
        &self,
        input: &BertInput<B>,
        delta: Option<Tensor<B, 3>>,
        options: ForwardOptions,
    ) -> ClassifierOutput<B> {
        let device = input.input_ids.device();
        let training = B::ad_enabled(&device);
        let hidden_dropout = if training { self.config.hidden_dropout_prob } else { 0.0 };
        let attention_dropout =
            if training { self.config.attention_probs_dropout_prob } else { 0.0 };
        let [batch, seq] = input.attention_mask.dims();

        let mask = input.attention_mask.clone().float(); // [b, s]
        let attention_bias =
            (mask.clone().neg().add_scalar(1.0) * MASKED_SCORE).reshape([batch, 1, 1, seq]);
        let token_mask = mask.reshape([batch, seq, 1]);
        let ctx = LayerContext { attention_bias, hidden_dropout, attention_dropout };

        let mut h = self.bert.embeddings.forward(input, delta, hidden_dropout); // [b, s, h]
        let mut hidden_states = Vec::new();
        let mut im_residuals = Vec::new();
        let mut im_solves = Vec::new();
        if options.hidden_states {
            hidden_states.push(h.clone());
        }
        let encoder = &self.bert.encoder;
        for (t, (phi, connection)) in encoder.layer.iter().zip(&encoder.connections).enumerate() {
            h = match connection {
                Connection::Monotone => phi.forward(h, &ctx),
                Connection::Explicit => add_residual(phi.forward(h.clone(), &ctx), None, h),
                Connection::Implicit(im) => {
                    let solve = SolveOptions {
                        record: options.im_residuals,
                        decide_on_device: options.decide_on_device,
                    };
                    let step = im.step(phi, h, &ctx, &token_mask, solve);
                    if options.im_residuals {
                        im_residuals.push((t, step.residuals));
                        im_solves.push(SolveTrace {
                            layer: t,
                            iterations: step.iterations,
                            step_sizes: step.step_sizes,
                        });
                    }
                    step.hidden_states
                }
            };
            if options.hidden_states {
                hidden_states.push(h.clone());
            }
        }

        let logits = match (&self.classifier, options.skip_head) {
            (Some(classifier), false) => {
                let hidden = h.dims()[2];
                let mut cls = h.clone().slice([0..batch, 0..1]).reshape([batch, hidden]);
                let dropout = if training { self.config.classifier_dropout_prob() } else { 0.0 };
                if self.config.architecture() == Architecture::Roberta {
                    cls = dropout_forward(cls, dropout); // RobertaClassificationHead's first
                }
                let pooled = self.bert.pooler.dense.forward(cls).tanh();
                Some(classifier.forward(dropout_forward(pooled, dropout)))
            }
            _ => None,
        };
        ClassifierOutput { last_hidden_state: h, logits, hidden_states, im_residuals, im_solves }
    }

    fn map_linears(mut self, f: impl Fn(Linear<B>) -> Linear<B>) -> Self {
        for layer in self.bert.encoder.layer.iter_mut() {
            let sa = &mut layer.attention.self_attention;
            for lin in [
                &mut sa.query,
                &mut sa.key,
                &mut sa.value,
                &mut layer.attention.output.dense,
                &mut layer.intermediate.dense,
                &mut layer.output.dense,
            ] {
                *lin = f(lin.clone());
            }
        }
        self.bert.pooler.dense = f(self.bert.pooler.dense.clone());
        self.classifier = self.classifier.map(&f);
        self
    }
}

/// HF's `_init_weights` for Linear: N(0, std) weight, zero bias.
pub(crate) fn hf_init_linear<B: Backend>(lin: Linear<B>, std: f64) -> Linear<B> {
    let device = lin.weight.device();
    Linear {
        weight: Param::from_tensor(Tensor::random(
            lin.weight.shape(),
            Distribution::Normal(0.0, std),
            &device,
        )),
        bias: lin.bias.map(|b| Param::from_tensor(Tensor::zeros(b.shape(), &device))),
    }
}

/// When a model's initial values are drawn.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Init {
    Eager,
    Lazy,
}

/// A parameter of HF's N(0, std) init, drawn now or on first use.
fn hf_normal<B: Backend, const D: usize>(
    shape: [usize; D],
    std: f64,
    device: &B::Device,
    init: Init,
) -> Param<Tensor<B, D>> {
    let draw =
        move |device: &B::Device| Tensor::random(shape, Distribution::Normal(0.0, std), device);
    match init {
        Init::Eager => Param::from_tensor(draw(device)),
        Init::Lazy => lazy_param(shape, device, draw),
    }
}

/// [`hf_init_linear`], drawn on first use; reads only the lazy shapes, so burn's own (lazy)
/// initialiser never runs either.
fn hf_lazy_linear<B: Backend>(lin: Linear<B>, std: f64) -> Linear<B> {
    let device = lin.weight.lazy_device();
    let zeros = |b: Param<Tensor<B, 1>>| {
        let shape = b.lazy_shape().dims();
        lazy_param(shape, &device, move |device: &B::Device| Tensor::zeros(shape, device))
    };
    Linear {
        weight: hf_normal(lin.weight.lazy_shape().dims(), std, &device, Init::Lazy),
        bias: lin.bias.map(zeros),
    }
}

/// A trainable parameter of `shape` whose value `make` computes on first use.
fn lazy_param<B: Backend, const D: usize>(
    shape: [usize; D],
    device: &B::Device,
    make: impl Fn(&B::Device) -> Tensor<B, D> + Send + Sync + 'static,
) -> Param<Tensor<B, D>> {
    let init = move |device: &B::Device, require_grad: bool| {
        let t = make(device);
        if require_grad {
            t.require_grad()
        } else {
            t
        }
    };
    Param::uninitialized(ParamId::new(), init, device.clone(), true, shape.into())
}

fn dropout_forward<B: Backend, const D: usize>(x: Tensor<B, D>, p: f64) -> Tensor<B, D> {
    if p <= 0.0 {
        return x;
    }
    x.clone() * crate::cpu::kernels::dropout_keep(&x, p)
}
