//! Nearest neighbours in a model's own word-embedding matrix: the synonym candidates of
//! [`crate::robustness::perturb::synonym`] and of the TextFooler attack
//! ([`crate::robustness::attack`]).
//!
//! TextFooler ranks candidates in counter-fitted GloVe vectors; we use the rows of
//! `bert.embeddings.word_embeddings.weight` instead, so no extra download is needed and the
//! candidates are words the model itself places close together. Only whole-word vocabulary
//! entries take part (letters only, two or more, no `##` continuation, no `[...]` special; in a
//! byte-level BPE vocabulary such as RoBERTa's, the entries for a word after a space, `Ġword`),
//! so a substitution is always one token for one token. Everything lives on the host
//! (`Vec<f32>`), which keeps it usable from the browser.

use std::collections::HashMap;

use burn::tensor::backend::Backend;

use crate::io::tensor_file::HostTensor;
use crate::io::tokenizer::BertTokenizer;
use crate::model::BertClassifier;
use crate::Error;

/// Unit-normalised embedding rows of the whole-word vocabulary, for cosine queries.
#[derive(Debug, Clone)]
pub struct WordNeighbours {
    /// Whole words, in vocabulary-id order (ties in cosine go to the lower id).
    words: Vec<String>,
    /// Word -> row of `rows`.
    lookup: HashMap<String, usize>,
    /// `[words.len(), hidden]`, row-major, each row of unit length.
    rows: Vec<f32>,
    hidden: usize,
}

impl WordNeighbours {
    /// Whether a vocabulary entry is a whole word: letters only, two or more, no `##` prefix and
    /// no `[...]` special token (both of which contain non-letters anyway).
    pub fn is_whole_word(token: &str) -> bool {
        token.chars().nth(1).is_some() && token.chars().all(char::is_alphabetic)
    }

    /// Builds the index from a row-major `[vocab, hidden]` embedding matrix and a WordPiece
    /// vocabulary (token -> row). Entries whose row is missing or all zero are left out.
    pub fn new(
        embeddings: &[f32],
        hidden: usize,
        vocab: &HashMap<String, u32>,
    ) -> Result<Self, Error> {
        Self::with_word_marker(embeddings, hidden, vocab, None)
    }

    /// As [`Self::new`], for a vocabulary whose whole words start with `marker`
    /// ([`BertTokenizer::word_marker`]): only those entries take part, under the word without it.
    pub fn with_word_marker(
        embeddings: &[f32],
        hidden: usize,
        vocab: &HashMap<String, u32>,
        marker: Option<char>,
    ) -> Result<Self, Error> {
        if hidden == 0 || !embeddings.len().is_multiple_of(hidden) {
            return Err(Error::Input(format!(
                "embedding matrix of {} values is not a multiple of hidden size {hidden}",
                embeddings.len()
            )));
        }
        let n_rows = embeddings.len() / hidden;
        fn word(token: &str, marker: Option<char>) -> Option<&str> {
            match marker {
                Some(m) => token.strip_prefix(m),
                None => Some(token),
            }
            .filter(|w| WordNeighbours::is_whole_word(w))
        }
        let mut entries: Vec<(u32, &str)> = vocab
            .iter()
            .filter(|(_, &id)| (id as usize) < n_rows)
            .filter_map(|(token, &id)| word(token, marker).map(|w| (id, w)))
            .collect();
        // HashMap order is random: sort for a deterministic index.
        entries.sort_unstable();
        let mut words = Vec::with_capacity(entries.len());
        let mut rows = Vec::with_capacity(entries.len() * hidden);
        for (id, word) in entries {
            let row = &embeddings[id as usize * hidden..(id as usize + 1) * hidden];
            let norm = row.iter().map(|x| x * x).sum::<f32>().sqrt();
            if !(norm.is_finite() && norm > 0.0) {
                continue;
            }
            rows.extend(row.iter().map(|x| x / norm));
            words.push(word.to_string());
        }
        let lookup = words.iter().enumerate().map(|(i, w)| (w.clone(), i)).collect();
        Ok(Self { words, lookup, rows, hidden })
    }

    /// The index of a model's word embeddings (`bert.embeddings.word_embeddings.weight`) over
    /// its tokenizer's vocabulary.
    pub fn from_model<B: Backend>(
        model: &BertClassifier<B>,
        tokenizer: &BertTokenizer,
    ) -> Result<Self, Error> {
        let weight = HostTensor::from_tensor(&model.bert.embeddings.word_embeddings.weight.val())?;
        let hidden = weight.shape.get(1).copied().unwrap_or(0);
        let vocab = tokenizer.inner().get_vocab(true);
        Self::with_word_marker(&weight.data, hidden, &vocab, tokenizer.word_marker())
    }

    /// The index as plain data (words, `[words, hidden]` unit rows, hidden size), to rebuild it
    /// elsewhere with [`Self::from_parts`] (the web demo sends it from its worker to the page).
    pub fn parts(&self) -> (&[String], &[f32], usize) {
        (&self.words, &self.rows, self.hidden)
    }

    /// The index from [`Self::parts`].
    pub fn from_parts(words: Vec<String>, rows: Vec<f32>, hidden: usize) -> Result<Self, Error> {
        if hidden == 0 || rows.len() != words.len() * hidden {
            return Err(Error::Input(format!(
                "{} rows of {hidden} values do not hold {} words",
                rows.len() / hidden.max(1),
                words.len()
            )));
        }
        let lookup = words.iter().enumerate().map(|(i, w)| (w.clone(), i)).collect();
        Ok(Self { words, lookup, rows, hidden })
    }

    /// Number of whole words in the index.
    pub fn len(&self) -> usize {
        self.words.len()
    }

    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    /// The row of `word`: as written, else lower-cased (uncased vocabularies are lower case).
    fn row_of(&self, word: &str) -> Option<usize> {
        self.lookup.get(word).or_else(|| self.lookup.get(&word.to_lowercase())).copied()
    }

    /// Whether `word` (or its lower case) is a whole-word vocabulary entry.
    pub fn contains(&self, word: &str) -> bool {
        self.row_of(word).is_some()
    }

    /// The `k` words with the highest cosine similarity to `word`, best first, without `word`
    /// itself (in any case). Empty when `word` is not in the index.
    pub fn neighbours(&self, word: &str, k: usize) -> Vec<(String, f32)> {
        let Some(query) = self.row_of(word) else { return Vec::new() };
        let h = self.hidden;
        let q = &self.rows[query * h..(query + 1) * h];
        let mut scored: Vec<(f32, usize)> = self
            .rows
            .chunks_exact(h)
            .enumerate()
            .filter(|&(i, _)| i != query && !self.words[i].eq_ignore_ascii_case(word))
            .map(|(i, row)| (row.iter().zip(q).map(|(a, b)| a * b).sum::<f32>(), i))
            .collect();
        let better = |a: &(f32, usize), b: &(f32, usize)| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1));
        if k < scored.len() {
            scored.select_nth_unstable_by(k, better);
            scored.truncate(k);
        }
        scored.sort_unstable_by(better);
        scored.into_iter().map(|(cos, i)| (self.words[i].clone(), cos)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vocab(words: &[&str]) -> HashMap<String, u32> {
        words.iter().enumerate().map(|(i, w)| (w.to_string(), i as u32)).collect()
    }

    #[test]
    fn only_whole_words_are_indexed() {
        let words = ["[PAD]", "[unused0]", "##ing", "a", "film", "movie", "42", "naïve", "don't"];
        let rows: Vec<f32> = (0..words.len()).flat_map(|i| [1.0, i as f32]).collect();
        let index = WordNeighbours::new(&rows, 2, &vocab(&words)).unwrap();
        assert_eq!(index.len(), 3, "film, movie, naïve");
        assert!(index.contains("film") && index.contains("Film") && index.contains("naïve"));
        assert!(!index.contains("##ing") && !index.contains("a") && !index.contains("[PAD]"));
    }

    #[test]
    fn neighbours_are_ranked_by_cosine() {
        let words = ["good", "great", "fine", "bad", "zero", "Good"];
        let rows = [1.0, 0.0, 0.9, 0.1, 0.5, 0.5, -1.0, 0.0, 0.0, 0.0, 2.0, 0.0];
        let index = WordNeighbours::new(&rows, 2, &vocab(&words)).unwrap();
        assert_eq!(index.len(), 5, "the zero row is left out");
        let n = index.neighbours("good", 10);
        let names: Vec<&str> = n.iter().map(|(w, _)| w.as_str()).collect();
        // "Good" is the same word in another case: never its own neighbour.
        assert_eq!(names, ["great", "fine", "bad"]);
        let expected = 0.9 / (0.81f32 + 0.01).sqrt();
        assert!((n[0].1 - expected).abs() < 1e-6, "{} vs {expected}", n[0].1);
        assert!((n[2].1 + 1.0).abs() < 1e-6);
        assert_eq!(index.neighbours("good", 1).len(), 1);
        assert_eq!(index.neighbours("GREAT", 1)[0].0, "good");
        assert!(index.neighbours("unknown", 3).is_empty());
        assert!(index.neighbours("good", 0).is_empty());

        // Rebuilt from its parts (the web page gets it that way), it answers the same.
        let (words, rows, hidden) = index.parts();
        let copy = WordNeighbours::from_parts(words.to_vec(), rows.to_vec(), hidden).unwrap();
        assert_eq!(copy.neighbours("good", 10), n);
        assert_eq!(copy.neighbours("GREAT", 1)[0].0, "good");
        assert!(WordNeighbours::from_parts(words.to_vec(), rows[1..].to_vec(), hidden).is_err());
    }

    #[test]
    fn bad_shapes_are_errors() {
        assert!(WordNeighbours::new(&[1.0, 2.0, 3.0], 2, &vocab(&["ab"])).is_err());
        // Byte-level BPE: only the words after a space, under their bare spelling.
        let words = ["<s>", "good", "\u{120}good", "\u{120}great", "\u{120}a", "ing"];
        let rows: Vec<f32> = (0..words.len()).flat_map(|i| [1.0, i as f32]).collect();
        let index = WordNeighbours::with_word_marker(&rows, 2, &vocab(&words), Some('\u{120}'));
        let index = index.unwrap();
        assert_eq!(index.len(), 2);
        let found: Vec<String> = index.neighbours("good", 5).into_iter().map(|(w, _)| w).collect();
        assert_eq!(found, ["great"]);
        assert!(!index.contains("ing") && !index.contains("\u{120}good"));
        assert!(WordNeighbours::new(&[], 0, &vocab(&["ab"])).is_err());
    }
}
