//! `trainer inspect`: one forward pass, everything visible.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use burn::tensor::backend::Backend;
use burn::tensor::{activation::softmax, Tensor};
use clap::{Args, ValueEnum};
use serde::Serialize;
use shared::io::checkpoint::load_classifier;
use shared::io::tensor_file::{write_safetensors, HostTensor};
use shared::{
    BertClassifier, BertInput, BertTokenizer, ClassifierOutput, Connection, ConnectionSpec,
    EncodedBatch, ForwardOptions, ImplicitEuler,
};

use crate::backend::BackendKind;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    /// Plain BERT: h_t = phi_t(h_{t-1}).
    Bert,
    /// EX-BERT: h_t = h_{t-1} + phi_t(h_{t-1}).
    Ex,
    /// IM-BERT: h_t = h_{t-1} + phi_t(h_t), by T gradient steps (Algorithm 1).
    Im,
}

#[derive(Args, Debug)]
pub struct InspectArgs {
    /// HF model directory (config.json, model.safetensors or pytorch_model.bin, tokenizer).
    #[arg(long)]
    pub model: PathBuf,
    /// Connection between layers.
    #[arg(long, value_enum, default_value = "bert")]
    pub mode: Mode,
    /// Layers (0-based, inclusive, e.g. `3-5`) that use the connection; the rest stay BERT.
    #[arg(long = "im-layers", alias = "layers")]
    pub im_layers: Option<String>,
    /// IM iterations T (default 5; --mode im only).
    #[arg(long = "T", alias = "iterations")]
    pub iterations: Option<usize>,
    /// IM step size gamma (default 0.1; --mode im only).
    #[arg(long)]
    pub gamma: Option<f64>,
    /// A full connection spec (`im:T=5,gamma=0.1,grad=frozen,step=backtrack,layers=2-3`); replaces
    /// --mode, --T, --gamma and --im-layers.
    #[arg(long, conflicts_with_all = ["mode", "im_layers", "iterations", "gamma"])]
    pub connection: Option<String>,
    /// Also print the gradient norm of each part (embeddings, layers, head) of the
    /// cross-entropy against --label on this batch, dropout off: an exploding training gradient
    /// shows here in one step.
    #[arg(long)]
    pub grad_norms: bool,
    /// Class of each --text for --grad-norms (repeat once per --text; default 0).
    #[arg(long, requires = "grad_norms")]
    pub label: Vec<usize>,
    /// Input text; repeat for a batch.
    #[arg(long, required = true)]
    pub text: Vec<String>,
    /// Second text of a pair; repeat once per --text.
    #[arg(long = "text-b")]
    pub text_b: Vec<String>,
    /// Maximum tokens per item, special tokens included.
    #[arg(long, default_value_t = shared::io::tokenizer::DEFAULT_MAX_LEN)]
    pub max_len: usize,
    /// Add a freshly initialised classifier with this many classes when the model has none.
    #[arg(long)]
    pub num_labels: Option<usize>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// Write hidden states, mask, logits and IM residuals to this .safetensors file.
    #[arg(long)]
    pub dump: Option<PathBuf>,
    #[arg(long, value_enum, default_value = "ndarray")]
    pub backend: BackendKind,
}

impl InspectArgs {
    /// Each `--text` with its `--text-b`, if one was given at the same position.
    fn items(&self) -> Vec<(&str, Option<&str>)> {
        let second = |i: usize| self.text_b.get(i).map(String::as_str);
        self.text.iter().enumerate().map(|(i, a)| (a.as_str(), second(i))).collect()
    }

    fn connection(&self) -> Result<ConnectionSpec> {
        if let Some(spec) = &self.connection {
            return Ok(ConnectionSpec::parse(spec)?);
        }
        let connection = match self.mode {
            Mode::Bert => Connection::Monotone,
            Mode::Ex => Connection::Explicit,
            Mode::Im => Connection::Implicit(ImplicitEuler::default()),
        };
        let spec = ConnectionSpec { connection, layers: None };
        Ok(spec.with_flags(self.iterations, self.gamma, self.im_layers.as_deref())?)
    }
}

/// Everything `inspect` prints, per item of the batch.
#[derive(Debug, Serialize)]
pub struct Report {
    pub model: PathBuf,
    pub connection: String,
    pub labels: Vec<String>,
    pub items: Vec<ItemReport>,
    /// The paper's fixed step, every iteration: the steps taken are gamma and not worth printing.
    #[serde(skip)]
    pub fixed_steps: bool,
}

#[derive(Debug, Serialize)]
pub struct ItemReport {
    pub text: String,
    pub text_b: Option<String>,
    pub tokens: Vec<String>,
    pub logits: Option<Vec<f32>>,
    pub probabilities: Option<Vec<f32>>,
    pub prediction: Option<String>,
    /// Mean L2 norm over real tokens of the embeddings (0) and each layer's output (1..=L).
    pub hidden_norms: Vec<f32>,
    /// First values of the last hidden state's [CLS] vector.
    pub cls_head: Vec<f32>,
    /// Per IM layer, ||r||^2 before each iteration and after the last.
    pub im_residuals: Vec<LayerResiduals>,
}

#[derive(Debug, Serialize)]
pub struct LayerResiduals {
    pub layer: usize,
    pub squared_norms: Vec<f32>,
    /// 1-based iterations after which `||r||^2` rose: gamma overshoots on this layer.
    pub rises_after_iteration: Vec<usize>,
    /// The step taken at each iteration run (`step=backtrack` halves gamma, 0: the example
    /// stayed where it was; with `tol`, 0 once the example has stopped).
    pub step_sizes: Vec<f32>,
}

pub fn run(args: InspectArgs) -> Result<()> {
    if args.text.iter().any(|t| t.trim().is_empty()) {
        bail!("--text must not be empty");
    }
    if !args.text_b.is_empty() && args.text_b.len() != args.text.len() {
        bail!(
            "give one --text-b per --text ({} --text, {} --text-b)",
            args.text.len(),
            args.text_b.len()
        );
    }
    if !args.label.is_empty() && args.label.len() != args.text.len() {
        bail!(
            "give one --label per --text ({} --text, {} --label)",
            args.text.len(),
            args.label.len()
        );
    }
    let spec = args.connection()?;
    if let Some(dump) = &args.dump {
        crate::run::check_output_path("--dump", dump)?;
    }
    crate::run::check_num_labels(args.num_labels)?;
    for note in spec.notes() {
        eprintln!("note: {note}");
    }
    crate::with_backend!(args.backend, |B, device| {
        inspect::<B>(&args, &spec, &device)?;
        if args.grad_norms {
            print_grad_norms::<burn::backend::Autodiff<B>>(&args, &spec, &device)?;
        }
        Ok(())
    })
}

/// `--grad-norms`: one backward pass of the cross-entropy, dropout off, a fresh head seeded
/// with 0 when the model has none; the norm of each part's gradient.
fn print_grad_norms<B: burn::tensor::backend::AutodiffBackend>(
    args: &InspectArgs,
    spec: &ConnectionSpec,
    device: &B::Device,
) -> Result<()> {
    use burn::nn::loss::CrossEntropyLossConfig;
    use burn::optim::GradientsParams;
    B::seed(device, 0);
    let tokenizer = BertTokenizer::from_dir(&args.model).context("loading the tokenizer")?;
    let load = |n| load_classifier::<B>(&args.model, n, device).context("loading the model");
    // The checkpoint's own head, else a fresh one (two classes unless --num-labels says).
    let (mut model, _) = load(args.num_labels)?;
    if model.num_labels() == 0 {
        model = load(Some(2))?.0;
    }
    model.config.hidden_dropout_prob = 0.0;
    model.config.attention_probs_dropout_prob = 0.0;
    model.config.classifier_dropout = Some(0.0);
    let model = model.with_connections(spec)?;
    let num_labels = model.num_labels();
    let labels: Vec<i64> =
        (0..args.text.len()).map(|i| args.label.get(i).copied().unwrap_or(0) as i64).collect();
    if let Some(bad) = labels.iter().find(|&&l| l as usize >= num_labels) {
        bail!("--label {bad} is out of range: the head has {num_labels} classes");
    }
    let items = args.items();
    let input = tokenizer.encode(&items, model.max_len(args.max_len))?.to_input::<B>(device);
    let logits =
        model.forward(&input, ForwardOptions::default()).logits.context("no classifier")?;
    let targets = Tensor::<B, 1, burn::tensor::Int>::from_data(
        burn::tensor::TensorData::new(labels.clone(), [labels.len()]),
        device,
    );
    let loss = CrossEntropyLossConfig::new().init(device).forward(logits, targets);
    let grads = GradientsParams::from_grads(loss.backward(), &model);
    let norms = crate::grad_norms::grad_norms(&model, &grads);
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "connection": spec.to_spec_string(), "labels": labels, "grad_norms": norms
            }))?
        );
        return Ok(());
    }
    println!(
        "\ngradient norms of the cross-entropy (labels {labels:?}), connection {}:",
        spec.to_spec_string()
    );
    println!("  {:<11} {:.3e}", "head", norms.head);
    for (i, n) in norms.layers.iter().enumerate().rev() {
        println!("  {:<11} {n:.3e}", format!("layer {i}"));
    }
    println!("  {:<11} {:.3e}", "embeddings", norms.embeddings);
    let exploding = norms.exploding();
    if !exploding.is_empty() {
        println!(
            "  exploding: {} over {}x the head's norm; in f32 such a gradient is rounding noise \
             (docs/numerics.md)",
            exploding.join(", "),
            crate::grad_norms::EXPLODING_RATIO
        );
    }
    Ok(())
}

fn inspect<B: Backend>(
    args: &InspectArgs,
    spec: &ConnectionSpec,
    device: &B::Device,
) -> Result<()> {
    let (tokenizer, model) = load::<B>(args, spec, device)?;
    let items = args.items();
    let batch = tokenizer.encode(&items, model.max_len(args.max_len))?;
    let input = batch.to_input::<B>(device);
    let options = ForwardOptions { hidden_states: true, im_residuals: true, ..Default::default() };
    let out = model.forward(&input, options);

    // Per IM layer, per iteration run: ||r||^2 of each example, `[iteration][example]`.
    let residuals: Vec<(usize, Vec<Vec<f32>>)> = out
        .im_residuals
        .iter()
        .map(|(layer, rs)| (*layer, rs.iter().cloned().map(to_vec).collect()))
        .collect();
    let labels = model.config.label_names(model.num_labels());
    let fixed_steps = match spec.connection {
        shared::Connection::Implicit(im) => {
            im.step_rule == shared::StepRule::Fixed && im.tolerance.is_none()
        }
        _ => true,
    };
    let report = Report {
        model: args.model.clone(),
        connection: spec.to_spec_string(),
        items: item_reports(args, &model, &batch, &input, &out, &residuals, &labels),
        labels,
        fixed_steps,
    };

    if let Some(path) = &args.dump {
        dump(path, &out, &batch, &residuals)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_text(&report);
    }
    Ok(())
}

/// The tokenizer and the classifier with `spec`'s connections; weights the checkpoint lacks are
/// announced, since their outputs mean nothing.
fn load<B: Backend>(
    args: &InspectArgs,
    spec: &ConnectionSpec,
    device: &B::Device,
) -> Result<(BertTokenizer, BertClassifier<B>)> {
    let tokenizer = BertTokenizer::from_dir(&args.model).context("loading the tokenizer")?;
    let (model, report) =
        load_classifier::<B>(&args.model, args.num_labels, device).context("loading the model")?;
    for name in &report.initialized_fresh {
        tracing::warn!(
            "{name} is not in {}: initialised fresh (random)",
            report.weights_file.display()
        );
    }
    if !report.unused.is_empty() {
        tracing::info!(
            "{} checkpoint tensors unused (e.g. {})",
            report.unused.len(),
            report.unused[0]
        );
    }
    let model = model.with_connections(spec)?;
    tokenizer.check_compatible(&model.config)?;
    Ok((tokenizer, model))
}

/// One report per input: its tokens, outputs, mean hidden-state norms per layer and IM solves.
fn item_reports<B: Backend>(
    args: &InspectArgs,
    model: &BertClassifier<B>,
    batch: &EncodedBatch,
    input: &BertInput<B>,
    out: &ClassifierOutput<B>,
    residuals: &[(usize, Vec<Vec<f32>>)],
    labels: &[String],
) -> Vec<ItemReport> {
    let mask = input.attention_mask.clone().float().unsqueeze_dim::<3>(2); // [b, s, 1]
    let lengths = mask.clone().sum_dim(1).reshape([batch.batch]); // [b]
    let norms: Vec<Vec<f32>> = out
        .hidden_states
        .iter()
        .map(|h| {
            let per_token = h.clone().powi_scalar(2).sum_dim(2).sqrt() * mask.clone(); // [b, s, 1]
            to_vec(per_token.sum_dim(1).reshape([batch.batch]) / lengths.clone())
        })
        .collect();
    let hidden = model.config.hidden_size;
    let cls = to_vec(
        out.last_hidden_state.clone().slice([0..batch.batch, 0..1]).reshape([batch.batch, hidden]),
    );
    let logits = out.logits.clone().map(to_vec);
    let probs = out.logits.clone().map(|l| to_vec(softmax(l, 1)));
    // Per IM layer, per iteration run: the step each example took, `[iteration][example]`.
    let steps: Vec<Vec<Vec<f32>>> =
        out.im_solves.iter().map(|s| s.step_sizes.iter().cloned().map(to_vec).collect()).collect();

    let n = model.num_labels();
    (0..batch.batch)
        .map(|i| {
            let row = |v: &Vec<f32>| v[i * n..(i + 1) * n].to_vec();
            let probabilities = probs.as_ref().map(row);
            let prediction = probabilities.as_ref().map(|p| {
                let best =
                    p.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).map_or(0, |(k, _)| k);
                labels[best].clone()
            });
            ItemReport {
                text: args.text[i].clone(),
                text_b: args.text_b.get(i).cloned(),
                tokens: batch.tokens[i][..batch.length(i)].to_vec(),
                logits: logits.as_ref().map(row),
                probabilities,
                prediction,
                hidden_norms: norms.iter().map(|layer| layer[i]).collect(),
                cls_head: cls[i * hidden..i * hidden + hidden.min(8)].to_vec(),
                im_residuals: residuals
                    .iter()
                    .zip(&steps)
                    .map(|((layer, rs), steps)| {
                        let squared_norms: Vec<f32> = rs.iter().map(|r| r[i]).collect();
                        let rises_after_iteration = shared::residual_rises(&squared_norms);
                        let step_sizes = steps.iter().map(|s| s[i]).collect();
                        LayerResiduals {
                            layer: *layer,
                            squared_norms,
                            rises_after_iteration,
                            step_sizes,
                        }
                    })
                    .collect(),
            }
        })
        .collect()
}

fn to_vec<B: Backend, const D: usize>(t: Tensor<B, D>) -> Vec<f32> {
    t.into_data().convert::<f32>().into_vec::<f32>().unwrap_or_default()
}

fn dump<B: Backend>(
    path: &std::path::Path,
    out: &shared::ClassifierOutput<B>,
    batch: &shared::EncodedBatch,
    residuals: &[(usize, Vec<Vec<f32>>)],
) -> Result<()> {
    let host = |t: &Tensor<B, 3>| HostTensor { shape: t.dims().to_vec(), data: to_vec(t.clone()) };
    let mut named: Vec<(String, HostTensor)> = out
        .hidden_states
        .iter()
        .enumerate()
        .map(|(i, h)| (format!("hidden.{i}"), host(h)))
        .collect();
    named.push((
        "attention_mask".into(),
        HostTensor {
            shape: vec![batch.batch, batch.seq],
            data: batch.attention_mask.iter().map(|&m| m as f32).collect(),
        },
    ));
    if let Some(l) = &out.logits {
        named.push((
            "logits".into(),
            HostTensor { shape: l.dims().to_vec(), data: to_vec(l.clone()) },
        ));
    }
    for (layer, rs) in residuals {
        let total: Vec<f32> = rs.iter().map(|r| r.iter().sum()).collect();
        named.push((
            format!("im_residual.{layer}"),
            HostTensor { shape: vec![total.len()], data: total },
        ));
        let per_example: Vec<f32> =
            (0..batch.batch).flat_map(|i| rs.iter().map(move |r| r[i])).collect();
        named.push((
            format!("im_residual_per_example.{layer}"),
            HostTensor { shape: vec![batch.batch, rs.len()], data: per_example },
        ));
    }
    write_safetensors(path, &named)?;
    Ok(())
}

fn print_text(report: &Report) {
    println!("model: {}   connection: {}", report.model.display(), report.connection);
    for (i, item) in report.items.iter().enumerate() {
        println!("\n[{i}] {}", item.text);
        if let Some(b) = &item.text_b {
            println!("    + {b}");
        }
        println!("  tokens ({}): {}", item.tokens.len(), item.tokens.join(" "));
        if let (Some(p), Some(pred)) = (&item.probabilities, &item.prediction) {
            let probs: Vec<String> =
                report.labels.iter().zip(p).map(|(l, p)| format!("{l} {p:.3}")).collect();
            println!("  prediction: {pred}   ({})", probs.join(", "));
        }
        let norms: Vec<String> = item.hidden_norms.iter().map(|n| format!("{n:.2}")).collect();
        println!("  hidden-state norms (emb, layer 1..): {}", norms.join(" "));
        let cls: Vec<String> = item.cls_head.iter().map(|x| format!("{x:+.4}")).collect();
        println!("  last [CLS][..{}]: {}", item.cls_head.len(), cls.join(" "));
        for r in &item.im_residuals {
            let v: Vec<String> = r.squared_norms.iter().map(|x| format!("{x:.4e}")).collect();
            println!("  IM layer {} ||r||^2 per iteration: {}", r.layer, v.join(" -> "));
            if !report.fixed_steps {
                let steps: Vec<String> = r.step_sizes.iter().map(|x| format!("{x}")).collect();
                println!("    steps taken: {}", steps.join(", "));
            }
            if !r.rises_after_iteration.is_empty() {
                let at: Vec<String> =
                    r.rises_after_iteration.iter().map(usize::to_string).collect();
                let s = if at.len() > 1 { "s" } else { "" };
                println!(
                    "    rose in iteration{s} {}: gamma overshoots on this layer \
                     (docs/numerics.md)",
                    at.join(", ")
                );
            }
        }
    }
}
