//! A classifier over a list of examples, in batches: in the given order (validation, whose losses
//! pick the kept model and so must not move between versions) or grouped by length (evaluation).

use std::time::Instant;

use anyhow::{Context, Result};
use burn::nn::loss::CrossEntropyLossConfig;
use burn::tensor::backend::Backend;
use burn::tensor::{ElementConversion, Int, Tensor, TensorData};
use shared::data::Example;
use shared::{BertClassifier, BertTokenizer, ForwardOptions};

/// Model predictions over a list of examples.
#[derive(Debug, Clone)]
pub struct Predictions {
    pub predicted: Vec<usize>,
    /// Mean cross-entropy against the examples' labels.
    pub loss: f64,
    pub seconds: f64,
    pub mean_tokens: f64,
}

/// Runs the model over `examples` in batches (no dropout: call on an inference model).
pub fn predict<B: Backend>(
    model: &BertClassifier<B>,
    tokenizer: &BertTokenizer,
    examples: &[&Example],
    batch_size: usize,
    max_len: usize,
    device: &B::Device,
) -> Result<Predictions> {
    let start = Instant::now();
    let mut predicted = Vec::with_capacity(examples.len());
    let (mut loss_sum, mut tokens) = (0.0, 0usize);
    let ce = CrossEntropyLossConfig::new().init(device);
    for chunk in examples.chunks(batch_size.max(1)) {
        let items: Vec<(&str, Option<&str>)> =
            chunk.iter().map(|e| (e.text_a.as_str(), e.text_b.as_deref())).collect();
        let batch = tokenizer.encode(&items, max_len)?;
        tokens += (0..batch.batch).map(|i| batch.length(i)).sum::<usize>();
        let logits = model
            .forward(&batch.to_input::<B>(device), ForwardOptions::default())
            .logits
            .context("the model has no classifier")?;
        let labels: Vec<i64> = chunk.iter().map(|e| e.label as i64).collect();
        let labels = Tensor::<B, 1, Int>::from_data(TensorData::new(labels, [chunk.len()]), device);
        let loss: f64 = ce.forward(logits.clone(), labels).into_scalar().elem();
        if !loss.is_finite() {
            anyhow::bail!("non-finite loss during evaluation");
        }
        loss_sum += loss * chunk.len() as f64;
        let argmax =
            logits.argmax(1).into_data().convert::<i64>().into_vec::<i64>().unwrap_or_default();
        predicted.extend(argmax.into_iter().map(|p| p as usize));
    }
    let n = examples.len().max(1) as f64;
    Ok(Predictions {
        predicted,
        loss: loss_sum / n,
        seconds: start.elapsed().as_secs_f64(),
        mean_tokens: tokens as f64 / n,
    })
}

/// `predict` over `examples` sorted by token count, so that each batch pads to little more than
/// its own length: a batch of 32 GLUE dev pairs in file order pads to about twice its real
/// tokens, the IM solve's iterations included. The predictions come back in `examples`' order.
/// Padding is masked everywhere (attention and IM's residual), so an example's prediction does
/// not depend on its batch; only float rounding can.
pub fn predict_by_length<B: Backend>(
    model: &BertClassifier<B>,
    tokenizer: &BertTokenizer,
    examples: &[&Example],
    batch_size: usize,
    max_len: usize,
    device: &B::Device,
) -> Result<Predictions> {
    if examples.is_empty() {
        return predict(model, tokenizer, examples, batch_size, max_len, device);
    }
    let start = Instant::now();
    let items: Vec<(&str, Option<&str>)> =
        examples.iter().map(|e| (e.text_a.as_str(), e.text_b.as_deref())).collect();
    let encoded = tokenizer.encode(&items, max_len)?;
    let mut order: Vec<usize> = (0..examples.len()).collect();
    order.sort_by_key(|&i| encoded.length(i)); // stable: equal lengths keep their order
    let sorted: Vec<&Example> = order.iter().map(|&i| examples[i]).collect();
    let p = predict(model, tokenizer, &sorted, batch_size, max_len, device)?;
    let mut predicted = vec![0; examples.len()];
    for (&i, &label) in order.iter().zip(&p.predicted) {
        predicted[i] = label;
    }
    Ok(Predictions { predicted, seconds: start.elapsed().as_secs_f64(), ..p })
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use burn::backend::NdArray;
    use shared::io::bundle::load_model_dir;
    use shared::ConnectionSpec;

    use super::*;

    type B = NdArray<f64>;

    fn tiny_model(connection: &str) -> (BertTokenizer, BertClassifier<B>) {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/tiny-bert");
        let tokenizer = BertTokenizer::from_dir(&dir).unwrap();
        let (model, _) = load_model_dir::<B>(&dir, Some(3), &Default::default()).unwrap();
        let mut model =
            model.with_connections(&ConnectionSpec::parse(connection).unwrap()).unwrap();
        // The fresh head gives every example the same label. Scaled up and centred on these
        // examples' mean logits, it gives them different labels, so that an order mix-up shows.
        let mut head = model.classifier.take().unwrap();
        head.weight = head.weight.map(|w| w * 1e3);
        model.classifier = Some(head);
        let examples = examples();
        let items: Vec<(&str, Option<&str>)> =
            examples.iter().map(|e| (e.text_a.as_str(), e.text_b.as_deref())).collect();
        let batch = tokenizer.encode(&items, model.max_len(64)).unwrap();
        let logits = model
            .forward(&batch.to_input::<B>(&Default::default()), ForwardOptions::default())
            .logits
            .unwrap();
        let mut head = model.classifier.take().unwrap();
        head.bias = head.bias.map(|b| b.map(|b| b - logits.mean_dim(0).reshape([3])));
        model.classifier = Some(head);
        (tokenizer, model)
    }

    /// Pairs of 4 to 32 tokens (the tiny model's longest) in no length order.
    fn examples() -> Vec<Example> {
        let words = ["the", "film", "is", "a", "very", "good", "bad", "one", "story", "plot"];
        (0..24)
            .map(|i| {
                let n = (i * 7) % 19 + 1;
                let text = |k: usize| {
                    (0..n).map(|j| words[(i * k + j * 3) % words.len()]).collect::<Vec<_>>()
                };
                Example {
                    idx: i as i64,
                    text_a: text(1).join(" "),
                    text_b: Some(text(2)[..n / 2 + 1].join(" ")),
                    label: i % 3,
                }
            })
            .collect()
    }

    #[test]
    fn sorting_by_length_changes_no_prediction_and_keeps_the_order() {
        for connection in ["bert", "im:T=5,gamma=0.1,grad=detached,step=backtrack"] {
            let (tokenizer, model) = tiny_model(connection);
            let examples = examples();
            let refs: Vec<&Example> = examples.iter().collect();
            let (device, max_len) = (Default::default(), model.max_len(64));
            // One at a time: no padding at all, the reference.
            let alone = predict(&model, &tokenizer, &refs, 1, max_len, &device).unwrap();
            let sorted = predict_by_length(&model, &tokenizer, &refs, 8, max_len, &device).unwrap();
            let in_order = predict(&model, &tokenizer, &refs, 8, max_len, &device).unwrap();
            assert_eq!(sorted.predicted, alone.predicted, "{connection}");
            assert_eq!(in_order.predicted, alone.predicted, "{connection}");
            assert!((sorted.loss - alone.loss).abs() < 1e-9, "{connection}");
            let labels: std::collections::BTreeSet<_> = alone.predicted.iter().collect();
            assert!(labels.len() > 1, "{connection}: with one label, order is not tested");
            assert_eq!(sorted.mean_tokens, alone.mean_tokens);
        }
    }
}
