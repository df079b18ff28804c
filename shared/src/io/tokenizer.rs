//! Tokenisation into model-ready batches, with HF's `tokenizers` crate: BERT's WordPiece and
//! RoBERTa's byte-level BPE.
//!
//! Reads `tokenizer.json`, or builds the pipeline HF would from the older files: BERT's WordPiece
//! from `vocab.txt`, RoBERTa's byte-level BPE from `vocab.json` + `merges.txt`. Encodes single
//! sentences or pairs (`[CLS] A [SEP] B [SEP]`, RoBERTa's `<s> A </s></s> B </s>`) with
//! longest-first truncation, padding to the longest item and token type ids, exactly as HF's
//! `BertTokenizerFast` and `RobertaTokenizerFast` do.

use std::path::Path;

use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor, TensorData};
use tokenizers::decoders::wordpiece::WordPiece as WordPieceDecoder;
use tokenizers::models::bpe::BPE;
use tokenizers::models::wordpiece::WordPiece;
use tokenizers::normalizers::bert::BertNormalizer;
use tokenizers::pre_tokenizers::bert::BertPreTokenizer;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::processors::bert::BertProcessing;
use tokenizers::processors::roberta::RobertaProcessing;
use tokenizers::{
    AddedToken, EncodeInput, PaddingDirection, PaddingParams, PaddingStrategy, Tokenizer,
    TruncationDirection, TruncationParams, TruncationStrategy,
};

use crate::model::BertInput;
use crate::Error;

/// Default maximum sequence length (the paper's fine-tuning setting).
pub const DEFAULT_MAX_LEN: usize = 128;

/// The padding tokens we recognise: BERT's, then RoBERTa's.
const PAD_TOKENS: [&str; 2] = ["[PAD]", "<pad>"];

/// Byte-level BPE's stand-in for the space byte (GPT-2's `bytes_to_unicode`): a vocabulary entry
/// that starts with it is a word that follows a space.
pub const BYTE_LEVEL_SPACE: char = '\u{120}';

/// RoBERTa's special tokens, in the order of its vocabulary's first ids.
const ROBERTA_SPECIAL: [&str; 5] = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"];

/// A BERT (WordPiece) or RoBERTa (byte-level BPE) tokenizer.
#[derive(Clone)]
pub struct BertTokenizer {
    inner: Tokenizer,
    pad_id: u32,
    pad_token: &'static str,
}

/// An encoded batch on the host: row-major `[batch, seq]` arrays.
#[derive(Debug, Clone, PartialEq)]
pub struct EncodedBatch {
    pub batch: usize,
    pub seq: usize,
    pub input_ids: Vec<i64>,
    pub token_type_ids: Vec<i64>,
    pub attention_mask: Vec<i64>,
    /// The tokens of each item, padding included.
    pub tokens: Vec<Vec<String>>,
}

impl EncodedBatch {
    /// Uploads the batch to `device`.
    pub fn to_input<B: Backend>(&self, device: &B::Device) -> BertInput<B> {
        let shape = [self.batch, self.seq];
        let t = |v: &Vec<i64>| {
            Tensor::<B, 2, Int>::from_data(TensorData::new(v.clone(), shape), device)
        };
        BertInput {
            input_ids: t(&self.input_ids),
            token_type_ids: t(&self.token_type_ids),
            attention_mask: t(&self.attention_mask),
        }
    }

    /// Number of real (non-padding) tokens of item `i`.
    pub fn length(&self, i: usize) -> usize {
        self.attention_mask[i * self.seq..(i + 1) * self.seq].iter().filter(|&&m| m != 0).count()
    }
}

impl BertTokenizer {
    /// `tokenizer.json` from `dir`, else a WordPiece tokenizer from `vocab.txt` (lower-casing
    /// unless `tokenizer_config.json` says `do_lower_case: false`), else RoBERTa's byte-level
    /// BPE from `vocab.json` + `merges.txt`.
    pub fn from_dir(dir: &Path) -> Result<Self, Error> {
        crate::io::checkpoint::check_model_dir(dir)?;
        let json = dir.join("tokenizer.json");
        if json.exists() {
            let bytes = std::fs::read(&json).map_err(|e| Error::io(&json, e))?;
            return Self::from_json_bytes(&bytes)
                .map_err(|e| Error::Tokenizer(format!("{}: {e}", json.display())));
        }
        let vocab = dir.join("vocab.txt");
        if vocab.exists() {
            let lowercase = read_do_lower_case(&dir.join("tokenizer_config.json"))?;
            return Self::from_vocab_file(&vocab, lowercase);
        }
        let (vocab, merges) = (dir.join("vocab.json"), dir.join("merges.txt"));
        if vocab.exists() && merges.exists() {
            return Self::from_bpe_files(&vocab, &merges);
        }
        Err(Error::Tokenizer(format!(
            "{}: none of tokenizer.json, vocab.txt, or vocab.json with merges.txt found",
            dir.display()
        )))
    }

    /// A tokenizer from the bytes of a `tokenizer.json` (how the browser hands it over).
    pub fn from_json_bytes(bytes: &[u8]) -> Result<Self, Error> {
        let inner = Tokenizer::from_bytes(bytes).map_err(|e| Error::Tokenizer(e.to_string()))?;
        Self::new(inner)
    }

    /// BERT's WordPiece pipeline built from a `vocab.txt`, as HF's `BertTokenizerFast` builds it.
    pub fn from_vocab_file(vocab: &Path, lowercase: bool) -> Result<Self, Error> {
        let path = vocab
            .to_str()
            .ok_or_else(|| Error::Tokenizer(format!("{}: path is not UTF-8", vocab.display())))?;
        let model = WordPiece::from_file(path)
            .unk_token("[UNK]".into())
            .build()
            .map_err(|e| Error::Tokenizer(format!("{}: {e}", vocab.display())))?;
        let id = |tok: &str| {
            tokenizers::Model::token_to_id(&model, tok)
                .ok_or_else(|| Error::Tokenizer(format!("{}: no {tok} token", vocab.display())))
        };
        let (cls, sep) = (id("[CLS]")?, id("[SEP]")?);
        let mut inner = Tokenizer::new(model);
        inner
            .with_normalizer(Some(BertNormalizer::new(true, true, None, lowercase)))
            .with_pre_tokenizer(Some(BertPreTokenizer))
            .with_post_processor(Some(BertProcessing::new(
                ("[SEP]".into(), sep),
                ("[CLS]".into(), cls),
            )))
            .with_decoder(Some(WordPieceDecoder::default()));
        Self::new(inner)
    }

    /// RoBERTa's byte-level BPE built from `vocab.json` and `merges.txt`, as HF's converter
    /// builds `RobertaTokenizerFast` from them (no prefix space, offsets trimmed).
    pub fn from_bpe_files(vocab: &Path, merges: &Path) -> Result<Self, Error> {
        fn utf8(p: &Path) -> Result<&str, Error> {
            p.to_str()
                .ok_or_else(|| Error::Tokenizer(format!("{}: path is not UTF-8", p.display())))
        }
        let model = BPE::from_file(utf8(vocab)?, utf8(merges)?)
            .build()
            .map_err(|e| Error::Tokenizer(format!("{}: {e}", vocab.display())))?;
        let id = |tok: &str| {
            tokenizers::Model::token_to_id(&model, tok)
                .ok_or_else(|| Error::Tokenizer(format!("{}: no {tok} token", vocab.display())))
        };
        let (cls, sep) = (id("<s>")?, id("</s>")?);
        let mut inner = Tokenizer::new(model);
        let byte_level = ByteLevel::default().add_prefix_space(false).trim_offsets(true);
        inner
            .with_pre_tokenizer(Some(byte_level))
            .with_post_processor(Some(
                RobertaProcessing::new(("</s>".into(), sep), ("<s>".into(), cls))
                    .trim_offsets(true)
                    .add_prefix_space(false),
            ))
            .with_decoder(Some(byte_level));
        // Special tokens are never split, wherever they appear in the text. (No lstrip on
        // `<mask>`: transformers 5 builds it without, so " <mask>" keeps its space token.)
        let special: Vec<AddedToken> = ROBERTA_SPECIAL
            .iter()
            .filter(|t| inner.token_to_id(t).is_some())
            .map(|t| AddedToken::from(*t, true))
            .collect();
        inner.add_special_tokens(&special);
        Self::new(inner)
    }

    fn new(mut inner: Tokenizer) -> Result<Self, Error> {
        let (pad_token, pad_id) = PAD_TOKENS
            .iter()
            .find_map(|&t| inner.token_to_id(t).map(|id| (t, id)))
            .ok_or_else(|| Error::Tokenizer("vocabulary has no [PAD] or <pad> token".into()))?;
        // Our own padding and truncation replace whatever the file set (sentence-transformers
        // files pad every item to 128).
        inner.with_padding(None);
        inner.with_truncation(None).map_err(|e| Error::Tokenizer(e.to_string()))?;
        Ok(Self { inner, pad_id, pad_token })
    }

    /// How the vocabulary marks a whole word: byte-level BPE (RoBERTa) starts a word that follows
    /// a space with [`BYTE_LEVEL_SPACE`]; WordPiece (BERT) marks continuations (`##`) instead.
    pub fn word_marker(&self) -> Option<char> {
        let byte_level = |p: &PreTokenizerWrapper| matches!(p, PreTokenizerWrapper::ByteLevel(_));
        match self.inner.get_pre_tokenizer() {
            Some(PreTokenizerWrapper::Sequence(seq)) => seq.as_ref().iter().any(byte_level),
            Some(p) => byte_level(p),
            None => false,
        }
        .then_some(BYTE_LEVEL_SPACE)
    }

    /// The wrapped HF tokenizer.
    pub fn inner(&self) -> &Tokenizer {
        &self.inner
    }

    /// Fails when the tokenizer can produce ids the model has no embedding for.
    pub fn check_compatible(&self, config: &crate::BertConfig) -> Result<(), Error> {
        let size = self.vocab_size();
        if size > config.vocab_size {
            return Err(Error::Tokenizer(format!(
                "the tokenizer has {size} tokens but the model only {} embeddings: \
                 they do not belong together",
                config.vocab_size
            )));
        }
        Ok(())
    }

    /// Size of the vocabulary, added tokens included.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// Encodes sentences (`text_b = None`) or pairs, truncated longest-first to `max_len` tokens
    /// (special tokens included) and padded to the longest item.
    pub fn encode(
        &self,
        items: &[(&str, Option<&str>)],
        max_len: usize,
    ) -> Result<EncodedBatch, Error> {
        if items.is_empty() {
            return Err(Error::Input("nothing to encode: the batch is empty".into()));
        }
        if max_len < 4 {
            return Err(Error::Input(format!("max_len {max_len} leaves no room for text")));
        }
        let mut tok = self.truncating(max_len)?;
        tok.with_padding(Some(PaddingParams {
            strategy: PaddingStrategy::BatchLongest,
            direction: PaddingDirection::Right,
            pad_to_multiple_of: None,
            pad_id: self.pad_id,
            pad_type_id: 0,
            pad_token: self.pad_token.into(),
        }));
        let inputs: Vec<EncodeInput> = items
            .iter()
            .map(|(a, b)| match b {
                Some(b) => EncodeInput::from((a.to_string(), b.to_string())),
                None => EncodeInput::from(a.to_string()),
            })
            .collect();
        let encodings =
            tok.encode_batch(inputs, true).map_err(|e| Error::Tokenizer(e.to_string()))?;
        let seq = encodings.first().map_or(0, |e| e.len());
        let mut out = EncodedBatch {
            batch: encodings.len(),
            seq,
            input_ids: Vec::with_capacity(encodings.len() * seq),
            token_type_ids: Vec::with_capacity(encodings.len() * seq),
            attention_mask: Vec::with_capacity(encodings.len() * seq),
            tokens: Vec::with_capacity(encodings.len()),
        };
        for e in &encodings {
            out.input_ids.extend(e.get_ids().iter().map(|&x| x as i64));
            out.token_type_ids.extend(e.get_type_ids().iter().map(|&x| x as i64));
            out.attention_mask.extend(e.get_attention_mask().iter().map(|&x| x as i64));
            out.tokens.push(e.get_tokens().to_vec());
        }
        Ok(out)
    }

    /// The tokenizer, truncating longest-first to `max_len` tokens.
    fn truncating(&self, max_len: usize) -> Result<Tokenizer, Error> {
        let mut tok = self.inner.clone();
        tok.with_truncation(Some(TruncationParams {
            direction: TruncationDirection::Right,
            max_length: max_len,
            strategy: TruncationStrategy::LongestFirst,
            stride: 0,
        }))
        .map_err(|e| Error::Tokenizer(e.to_string()))?;
        Ok(tok)
    }

    /// How many bytes of an item's last text (the hypothesis of a pair, else the sentence) the
    /// model reads at `max_len` tokens: the end of its last token that survives truncation, or
    /// its whole length when nothing is cut.
    pub fn visible_len(&self, item: (&str, Option<&str>), max_len: usize) -> Result<usize, Error> {
        let last = item.1.map_or(1, |_| 2);
        let text = item.1.unwrap_or(item.0);
        let full = self.encode(&[item], usize::MAX / 2)?;
        if full.length(0) <= max_len {
            return Ok(text.len());
        }
        let tok = self.truncating(max_len)?;
        let input = match item.1 {
            Some(b) => EncodeInput::from((item.0.to_string(), b.to_string())),
            None => EncodeInput::from(item.0.to_string()),
        };
        let encoding = tok.encode(input, true).map_err(|e| Error::Tokenizer(e.to_string()))?;
        let end = (0..encoding.len())
            .filter(|&i| encoding.get_sequence_ids()[i] == Some(last - 1))
            .map(|i| encoding.get_offsets()[i].1)
            .max()
            .unwrap_or(0);
        Ok(end.min(text.len()))
    }
}

fn read_do_lower_case(path: &Path) -> Result<bool, Error> {
    if !path.exists() {
        return Ok(true);
    }
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    let value: serde_json::Value = serde_json::from_str(&text).map_err(|e| Error::Json {
        path: path.into(),
        line: e.line(),
        message: e.to_string(),
    })?;
    Ok(value.get("do_lower_case").and_then(|v| v.as_bool()).unwrap_or(true))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny_vocab() -> std::path::PathBuf {
        // One directory per call: tests run in parallel and must not read each other's
        // half-written file.
        static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("imbert-vocab-{}-{call}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let vocab = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\ncat\nsat\n##s\non\nmat\n.\n";
        std::fs::write(dir.join("vocab.txt"), vocab).unwrap();
        dir
    }

    #[test]
    fn vocab_only_dir_encodes_pairs_with_padding() {
        let dir = tiny_vocab();
        let tok = BertTokenizer::from_dir(&dir).unwrap();
        let batch =
            tok.encode(&[("The cats sat.", None), ("the cat", Some("on the mat"))], 16).unwrap();
        assert_eq!(batch.tokens[0], ["[CLS]", "the", "cat", "##s", "sat", ".", "[SEP]", "[PAD]"]);
        assert_eq!(batch.tokens[1], ["[CLS]", "the", "cat", "[SEP]", "on", "the", "mat", "[SEP]"]);
        assert_eq!(&batch.token_type_ids[8..], &[0, 0, 0, 0, 1, 1, 1, 1]);
        assert_eq!(batch.length(0), 7);
        assert_eq!(batch.attention_mask[7], 0);
        assert_eq!(tok.word_marker(), None);
    }

    #[test]
    fn bpe_files_encode_pairs_as_roberta_does() {
        let dir = std::env::temp_dir().join(format!("imbert-bpe-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let vocab = r#"{"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3, "<mask>": 4, "t": 5,
            "h": 6, "e": 7, "\u0120": 8, "c": 9, "a": 10, "th": 11, "the": 12, "\u0120c": 13,
            "at": 14, "\u0120cat": 15}"#;
        std::fs::write(dir.join("vocab.json"), vocab).unwrap();
        std::fs::write(
            dir.join("merges.txt"),
            "#version: 0.2\nt h\nth e\n\u{120} c\na t\n\u{120}c at\n",
        )
        .unwrap();
        let tok = BertTokenizer::from_dir(&dir).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        let batch = tok.encode(&[("the cat", None), ("the", Some("cat"))], 16).unwrap();
        // The pair's second text has no leading space, so "cat" is not the word "\u{120}cat".
        let pad = "<pad>";
        assert_eq!(batch.tokens[0], ["<s>", "the", "\u{120}cat", "</s>", pad, pad, pad]);
        assert_eq!(batch.tokens[1], ["<s>", "the", "</s>", "</s>", "c", "at", "</s>"]);
        assert_eq!(&batch.input_ids[..7], &[0, 12, 15, 2, 1, 1, 1]);
        assert!(batch.token_type_ids.iter().all(|&t| t == 0), "RoBERTa has one token type");
        assert_eq!(tok.word_marker(), Some(BYTE_LEVEL_SPACE));
        assert_eq!(batch.length(0), 4);
    }

    #[test]
    fn truncation_is_longest_first() {
        let dir = tiny_vocab();
        let tok = BertTokenizer::from_dir(&dir).unwrap();
        let batch = tok.encode(&[("the cat the cat the cat", Some("mat"))], 7).unwrap();
        assert_eq!(batch.tokens[0], ["[CLS]", "the", "cat", "the", "[SEP]", "mat", "[SEP]"]);
    }

    #[test]
    fn visible_len_is_where_truncation_cuts_the_edited_text() {
        let dir = tiny_vocab();
        let tok = BertTokenizer::from_dir(&dir).unwrap();
        // [CLS] the cat the [SEP]: "the cat the" of "the cat the mat".
        assert_eq!(tok.visible_len(("the cat the mat", None), 5).unwrap(), "the cat the".len());
        assert_eq!(tok.visible_len(("the cat", None), 5).unwrap(), "the cat".len());
        // A pair: the hypothesis is measured, and longest-first cuts the premise first.
        let pair = ("the cat the cat the cat", Some("mat the cat"));
        assert_eq!(tok.visible_len(pair, 9).unwrap(), "mat the cat".len(), "premise cut to 3");
        // Two words left in all: one each.
        assert_eq!(tok.visible_len(pair, 5).unwrap(), "mat".len());
        assert_eq!(tok.visible_len(pair, 64).unwrap(), "mat the cat".len());
    }

    #[test]
    fn missing_files_are_a_clear_error() {
        let err = BertTokenizer::from_dir(Path::new("/nonexistent-dir")).err().unwrap();
        assert!(err.to_string().contains("/nonexistent-dir: model directory not found"), "{err}");
        let empty = std::env::temp_dir().join(format!("imbert-empty-{}", std::process::id()));
        std::fs::create_dir_all(&empty).unwrap();
        let err = BertTokenizer::from_dir(&empty).err().unwrap();
        std::fs::remove_dir(&empty).unwrap();
        assert!(err.to_string().contains("none of tokenizer.json, vocab.txt"), "{err}");
    }
}
