//! Class probabilities of texts, in batches: what the attack and the flip search query.

use burn::tensor::backend::Backend;

use crate::io::tokenizer::BertTokenizer;
use crate::model::{BertClassifier, ForwardOptions};
use crate::Error;

/// The softmax of each input's logits (`(text, second text of a pair)`), `batch_size` inputs
/// per forward pass, each cut to `max_len` tokens. The model must be in inference mode.
pub fn probabilities<B: Backend>(
    model: &BertClassifier<B>,
    tokenizer: &BertTokenizer,
    items: &[(String, Option<String>)],
    max_len: usize,
    batch_size: usize,
) -> Result<Vec<Vec<f32>>, Error> {
    let device = model.bert.embeddings.word_embeddings.weight.device();
    let mut out = Vec::with_capacity(items.len());
    for chunk in items.chunks(batch_size.max(1)) {
        let refs: Vec<(&str, Option<&str>)> =
            chunk.iter().map(|(a, b)| (a.as_str(), b.as_deref())).collect();
        let batch = tokenizer.encode(&refs, max_len)?;
        let logits = model
            .forward(&batch.to_input::<B>(&device), ForwardOptions::default())
            .logits
            .ok_or_else(|| Error::Input("the model has no classifier".into()))?;
        let n = logits.dims()[1];
        let values = logits
            .into_data()
            .convert::<f32>()
            .into_vec::<f32>()
            .map_err(|e| Error::Input(format!("reading logits: {e:?}")))?;
        out.extend(values.chunks_exact(n).map(softmax));
    }
    Ok(out)
}

pub fn softmax(logits: &[f32]) -> Vec<f32> {
    let mut p = logits.to_vec();
    crate::cpu::kernels::softmax_row(&mut p);
    p
}

/// Index of the largest value (the first of equals).
pub fn argmax(p: &[f32]) -> usize {
    p.iter().enumerate().fold(0, |best, (i, x)| if *x > p[best] { i } else { best })
}
