//! What the demo computes, independent of the page: one forward pass of a model over the clean
//! and the perturbed input (a batch of two), read back asynchronously because WebGPU has no
//! synchronous readback. The same code runs on WebGPU and on the CPU fallback, and natively in
//! the unit tests below.

use burn::tensor::backend::Backend;
use burn::tensor::{activation, Tensor};
use serde::{Deserialize, Serialize};
use shared::{BertClassifier, BertTokenizer, ForwardOptions};

/// One model input: a sentence, or a sentence pair.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Input {
    pub text_a: String,
    pub text_b: Option<String>,
}

impl Input {
    pub fn new(text_a: impl Into<String>, text_b: Option<String>) -> Self {
        Self { text_a: text_a.into(), text_b }
    }
}

/// A model's answer on one input.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    #[serde(with = "crate::protocol::floats")]
    pub probs: Vec<f32>,
    /// Tokens the model saw, [CLS] and [SEP] included.
    pub tokens: usize,
    /// Whether the input was cut to the maximum length.
    pub truncated: bool,
}

impl Verdict {
    /// The most probable class.
    pub fn label(&self) -> usize {
        argmax(&self.probs)
    }
}

/// The squared residual `||z - h - phi(z)||^2` of one IM layer before each iteration and after
/// the last (`T + 1` values), for both inputs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResidualTrace {
    pub layer: usize,
    /// Iterations run: T, or fewer when a tolerance (`tol`) stopped both inputs first.
    pub iterations: usize,
    /// Per input (clean, perturbed), the iterations that moved `z`: backtracking keeps `z` where
    /// no step size lowered the residual, and a tolerance stop keeps it from then on.
    pub steps_taken: [usize; 2],
    #[serde(with = "crate::protocol::floats")]
    pub clean: Vec<f32>,
    #[serde(with = "crate::protocol::floats")]
    pub perturbed: Vec<f32>,
}

impl ResidualTrace {
    /// Whether the squared residual ended below where it started, per input; `None` with no
    /// iteration (T = 0) or a non-finite value.
    pub fn fell(&self) -> [Option<bool>; 2] {
        let fell = |r: &[f32]| match (r.first(), r.last()) {
            (Some(a), Some(b)) if r.len() > 1 && a.is_finite() && b.is_finite() => Some(b < a),
            _ => None,
        };
        [fell(&self.clean), fell(&self.perturbed)]
    }

    /// For the page, beside the T slider: e.g. `layer 2: 4 of 5 steps, ||r||² 3.1e-1 → 2.0e-3
    /// (fell)`, for the clean input, then the perturbed one's steps when they differ.
    pub fn summary(&self) -> String {
        let [clean, perturbed] = self.steps_taken;
        let steps = if clean == perturbed {
            format!("{clean} of {} steps", self.iterations)
        } else {
            format!("{clean} of {} steps ({perturbed} perturbed)", self.iterations)
        };
        let trend = match self.fell()[0] {
            Some(true) => "fell",
            Some(false) => "did not fall",
            None => "not measured",
        };
        let ends = match (self.clean.first(), self.clean.last()) {
            (Some(a), Some(b)) if self.clean.len() > 1 => format!(" {a:.1e} → {b:.1e}"),
            _ => String::new(),
        };
        format!("layer {}: {steps}, ||r||²{ends} ({trend})", self.layer)
    }
}

/// Everything the page shows for one model on one (clean, perturbed) pair.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Analysis {
    pub clean: Verdict,
    pub perturbed: Verdict,
    /// Per layer, 0 = embeddings .. L: cosine distance between the clean and perturbed [CLS]
    /// vectors.
    #[serde(with = "crate::protocol::floats")]
    pub cls_drift: Vec<f32>,
    /// Per layer: L2 distance between the mean real-token vectors of the two inputs.
    #[serde(with = "crate::protocol::floats")]
    pub mean_drift: Vec<f32>,
    /// One trace per IM layer (empty for BERT and EX-BERT).
    pub residuals: Vec<ResidualTrace>,
}

impl Analysis {
    /// Whether the perturbation changed the predicted class.
    pub fn flipped(&self) -> bool {
        self.clean.label() != self.perturbed.label()
    }
}

/// Runs `model` (connections already set) on `clean` and `perturbed` in one batch.
/// `on_webgpu`: the IM solve must not read back mid-forward (`ForwardOptions::decide_on_device`).
pub async fn analyse<B: Backend>(
    model: &BertClassifier<B>,
    tokenizer: &BertTokenizer,
    clean: &Input,
    perturbed: &Input,
    max_len: usize,
    device: &B::Device,
    on_webgpu: bool,
) -> Result<Analysis, String> {
    let items = [
        (clean.text_a.as_str(), clean.text_b.as_deref()),
        (perturbed.text_a.as_str(), perturbed.text_b.as_deref()),
    ];
    let max_len = model.max_len(max_len);
    let batch = tokenizer.encode(&items, max_len).map_err(|e| e.to_string())?;
    let input = batch.to_input::<B>(device);
    let options = ForwardOptions {
        hidden_states: true,
        im_residuals: true,
        skip_head: false,
        decide_on_device: on_webgpu,
    };
    let out = model.forward(&input, options);
    let logits = out.logits.ok_or("this model has no classifier head")?;

    // Three readbacks in all, however many layers: each one is a GPU round trip.
    let probs = read(activation::softmax(logits, 1)).await?;
    let hidden = read(Tensor::stack::<4>(out.hidden_states, 0)).await?; // [L+1, 2, seq, h]
    let solves: Vec<Solve> = out
        .im_residuals
        .iter()
        .zip(&out.im_solves)
        .map(|((layer, r), s)| Solve {
            layer: *layer,
            residuals: r.len(),
            iterations: s.iterations,
            step_sizes: s.step_sizes.len(),
        })
        .collect();
    let solve_values = if solves.is_empty() {
        Vec::new()
    } else {
        // Per layer, per iteration: [clean, perturbed]; the residuals, then the step sizes.
        let residuals = out.im_residuals.into_iter().flat_map(|(_, r)| r);
        let step_sizes = out.im_solves.into_iter().flat_map(|s| s.step_sizes);
        read(Tensor::cat(residuals.chain(step_sizes).collect(), 0)).await?
    };

    let labels = probs.len() / 2;
    let verdict = |i: usize| {
        let items_tokens = items_token_count(tokenizer, items[i], max_len);
        Verdict {
            probs: probs[i * labels..(i + 1) * labels].to_vec(),
            tokens: batch.length(i),
            truncated: items_tokens > max_len,
        }
    };
    let lengths = [batch.length(0), batch.length(1)];
    let (cls_drift, mean_drift) =
        layer_drifts(&hidden, batch.seq, model.config.hidden_size, lengths);
    let traces = residual_traces(&solves, &solve_values);
    Ok(Analysis {
        clean: verdict(0),
        perturbed: verdict(1),
        cls_drift,
        mean_drift,
        residuals: traces,
    })
}

/// Class probabilities of each input, in one batch (what the flip search queries): no hidden
/// states, one readback.
pub async fn probabilities<B: Backend>(
    model: &BertClassifier<B>,
    tokenizer: &BertTokenizer,
    items: &[Input],
    max_len: usize,
    device: &B::Device,
    on_webgpu: bool,
) -> Result<Vec<Vec<f32>>, String> {
    if items.is_empty() {
        return Ok(Vec::new());
    }
    let refs: Vec<(&str, Option<&str>)> =
        items.iter().map(|i| (i.text_a.as_str(), i.text_b.as_deref())).collect();
    let batch = tokenizer.encode(&refs, model.max_len(max_len)).map_err(|e| e.to_string())?;
    let options = ForwardOptions { decide_on_device: on_webgpu, ..Default::default() };
    let logits = model
        .forward(&batch.to_input::<B>(device), options)
        .logits
        .ok_or("this model has no classifier head")?;
    let probs = read(activation::softmax(logits, 1)).await?;
    let labels = probs.len() / items.len();
    Ok(probs.chunks_exact(labels.max(1)).map(<[f32]>::to_vec).collect())
}

/// Per layer, the clean-vs-perturbed drift: [CLS] cosine distance and the L2 distance of the
/// mean-pooled states. `hidden` is [layers, 2 (clean, perturbed), seq, hidden_size], flat.
fn layer_drifts(
    hidden: &[f32],
    seq: usize,
    hidden_size: usize,
    lengths: [usize; 2],
) -> (Vec<f32>, Vec<f32>) {
    let layers = hidden.len() / (2 * seq * hidden_size).max(1);
    let (mut cls_drift, mut mean_drift) = (Vec::with_capacity(layers), Vec::with_capacity(layers));
    for l in 0..layers {
        let token = |i: usize, t: usize| {
            let at = ((l * 2 + i) * seq + t) * hidden_size;
            &hidden[at..at + hidden_size]
        };
        cls_drift.push(1.0 - cosine(token(0, 0), token(1, 0)));
        let mean = |i: usize| {
            let mut m = vec![0.0f32; hidden_size];
            for t in 0..lengths[i] {
                m.iter_mut().zip(token(i, t)).for_each(|(a, b)| *a += b);
            }
            m.iter_mut().for_each(|a| *a /= lengths[i].max(1) as f32);
            m
        };
        let (a, b) = (mean(0), mean(1));
        mean_drift.push(a.iter().zip(&b).map(|(x, y)| (x - y) * (x - y)).sum::<f32>().sqrt());
    }
    (cls_drift, mean_drift)
}

/// What one IM layer's solve recorded: how many residuals (T + 1) and step sizes (one per
/// iteration run), each a `[2]` tensor for (clean, perturbed).
struct Solve {
    layer: usize,
    residuals: usize,
    iterations: usize,
    step_sizes: usize,
}

/// Splits the values read back in one piece (every layer's residuals, per iteration
/// `[clean, perturbed]`, then every layer's step sizes, likewise) into one trace per IM layer.
fn residual_traces(solves: &[Solve], values: &[f32]) -> Vec<ResidualTrace> {
    let total_residuals: usize = solves.iter().map(|s| 2 * s.residuals).sum();
    let (mut residuals, mut step_sizes) = values.split_at(total_residuals.min(values.len()));
    let take = |from: &mut &[f32], n: usize| {
        let (head, rest) = from.split_at((2 * n).min(from.len()));
        *from = rest;
        head.to_vec()
    };
    solves
        .iter()
        .map(|solve| {
            let r = take(&mut residuals, solve.residuals);
            let steps = take(&mut step_sizes, solve.step_sizes);
            let moved = |i: usize| steps.iter().skip(i).step_by(2).filter(|&&g| g > 0.0).count();
            ResidualTrace {
                layer: solve.layer,
                iterations: solve.iterations,
                steps_taken: [moved(0), moved(1)],
                clean: r.iter().step_by(2).copied().collect(),
                perturbed: r.iter().skip(1).step_by(2).copied().collect(),
            }
        })
        .collect()
}

fn items_token_count(
    tokenizer: &BertTokenizer,
    item: (&str, Option<&str>),
    max_len: usize,
) -> usize {
    // Encoding once more without the cap tells whether the cap cut anything.
    tokenizer.encode(&[item], usize::MAX / 2).map(|b| b.length(0)).unwrap_or(max_len)
}

async fn read<B: Backend, const D: usize>(t: Tensor<B, D>) -> Result<Vec<f32>, String> {
    let data =
        t.into_data_async().await.map_err(|e| format!("reading a result back failed: {e:?}"))?;
    data.convert::<f32>().into_vec::<f32>().map_err(|e| format!("{e:?}"))
}

pub fn argmax(values: &[f32]) -> usize {
    values.iter().enumerate().fold(0, |best, (i, v)| if *v > values[best] { i } else { best })
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let norm = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
    let denom = norm(a) * norm(b);
    if denom > 0.0 {
        dot / denom
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drifts_compare_cls_and_the_mean_over_each_inputs_own_tokens() {
        // One layer, seq 3, hidden 2. Clean: [1,0] [3,0] [pad]; perturbed: [0,1] [0,1] [0,1].
        let hidden = [1.0, 0.0, 3.0, 0.0, 9.0, 9.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0];
        let (cls, mean) = layer_drifts(&hidden, 3, 2, [2, 3]);
        assert_eq!(cls.len(), 1);
        assert!((cls[0] - 1.0).abs() < 1e-6, "orthogonal [CLS] states: {}", cls[0]);
        // Means: clean [2, 0] (the padding token is not counted), perturbed [0, 1].
        assert!((mean[0] - 5f32.sqrt()).abs() < 1e-6, "{}", mean[0]);
    }

    #[test]
    fn residual_traces_split_the_flat_readback_per_layer() {
        // Layer 1: T = 1 (2 residuals, 1 step); layer 4: T = 2 (3 residuals, 2 steps).
        let solves = [
            Solve { layer: 1, residuals: 2, iterations: 1, step_sizes: 1 },
            Solve { layer: 4, residuals: 3, iterations: 2, step_sizes: 2 },
        ];
        let residuals = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0];
        // Step sizes: layer 1 moved both inputs; layer 4 kept the perturbed one's z once.
        let steps = [0.1, 0.1, 0.05, 0.1, 0.1, 0.0];
        let flat: Vec<f32> = residuals.into_iter().chain(steps).collect();
        let traces = residual_traces(&solves, &flat);
        assert_eq!(traces.len(), 2);
        assert_eq!((traces[0].layer, &traces[0].clean[..]), (1, &[1.0, 3.0][..]));
        assert_eq!(traces[0].perturbed, [2.0, 4.0]);
        assert_eq!((traces[0].iterations, traces[0].steps_taken), (1, [1, 1]));
        assert_eq!((traces[1].layer, &traces[1].clean[..]), (4, &[5.0, 7.0, 9.0][..]));
        assert_eq!(traces[1].perturbed, [6.0, 8.0, 10.0]);
        assert_eq!((traces[1].iterations, traces[1].steps_taken), (2, [2, 1]));
    }

    #[test]
    fn a_solve_summary_says_steps_taken_and_whether_the_residual_fell() {
        let trace = ResidualTrace {
            layer: 2,
            iterations: 5,
            steps_taken: [4, 5],
            clean: vec![0.31, 0.1, 0.05, 0.01, 0.004, 0.002],
            perturbed: vec![0.3, 0.4, 0.5, 0.6, 0.7, 0.8],
        };
        assert_eq!(trace.fell(), [Some(true), Some(false)]);
        assert_eq!(
            trace.summary(),
            "layer 2: 4 of 5 steps (5 perturbed), ||r||² 3.1e-1 → 2.0e-3 (fell)"
        );
        let idle = ResidualTrace { iterations: 0, steps_taken: [0, 0], clean: vec![1.0], ..trace };
        assert_eq!(idle.fell()[0], None);
        assert_eq!(idle.summary(), "layer 2: 0 of 0 steps, ||r||² (not measured)");
    }
}
