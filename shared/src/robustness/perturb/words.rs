//! Words as the perturbations see them: whitespace tokens, their cores, stop words, and case.

use std::ops::Range;

/// Common English function words (~150): never perturbed, never attacked. Negations (`not`,
/// `no`, `nor`) are here on purpose: swapping them changes the meaning, not the surface.
// One line per ~12 words, not one per word.
#[rustfmt::skip]
pub const STOP_WORDS: &[&str] = &[
    "a", "about", "above", "after", "again", "against", "all", "am", "an", "and", "any", "are",
    "as", "at", "be", "because", "been", "before", "being", "below", "between", "both", "but",
    "by", "can", "could", "did", "do", "does", "doing", "down", "during", "each", "either", "else",
    "even", "ever", "every", "few", "for", "from", "further", "had", "has", "have", "having", "he",
    "her", "here", "hers", "herself", "him", "himself", "his", "how", "however", "i", "if", "in",
    "into", "is", "it", "its", "itself", "just", "me", "might", "more", "most", "must", "my",
    "myself", "neither", "no", "nor", "not", "now", "of", "off", "on", "once", "only", "or",
    "other", "our", "ours", "ourselves", "out", "over", "own", "same", "shall", "she", "should",
    "so", "some", "such", "than", "that", "the", "their", "theirs", "them", "themselves", "then",
    "there", "these", "they", "this", "those", "though", "through", "to", "too", "under", "until",
    "up", "upon", "us", "very", "was", "we", "were", "what", "when", "where", "whether", "which",
    "while", "who", "whom", "whose", "why", "will", "with", "within", "without", "would", "yet",
    "you", "your", "yours", "yourself", "yourselves", "also", "although", "among", "another",
    "anyone", "anything", "whatever", "whenever", "wherever",
];

/// Whether `word` is in [`STOP_WORDS`] (case-insensitive).
pub fn is_stop_word(word: &str) -> bool {
    STOP_WORDS.iter().any(|s| s.eq_ignore_ascii_case(word))
}

/// A whitespace-separated word, as byte ranges into its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WordSpan {
    /// The whole token, punctuation included.
    pub token: Range<usize>,
    /// The token without leading and trailing non-alphanumeric characters; empty (at
    /// `token.start`) when the token has no letter or digit.
    pub core: Range<usize>,
}

/// The words of `text`, in order.
pub fn word_spans(text: &str) -> Vec<WordSpan> {
    let mut spans = Vec::new();
    let mut start = None;
    for (i, c) in text.char_indices().chain(std::iter::once((text.len(), ' '))) {
        match (c.is_whitespace(), start) {
            (true, Some(s)) => {
                spans.push(WordSpan { token: s..i, core: core_of(text, s..i) });
                start = None;
            }
            (false, None) => start = Some(i),
            _ => {}
        }
    }
    spans
}

pub(super) fn core_of(text: &str, token: Range<usize>) -> Range<usize> {
    let t = &text[token.clone()];
    let first = t.char_indices().find(|(_, c)| c.is_alphanumeric());
    let last = t.char_indices().rev().find(|(_, c)| c.is_alphanumeric());
    match (first, last) {
        (Some((a, _)), Some((b, c))) => token.start + a..token.start + b + c.len_utf8(),
        _ => token.start..token.start,
    }
}

/// Whether a word core may be replaced: at least two letters, letters only, not a stop word.
pub fn is_substitutable(core: &str) -> bool {
    core.chars().nth(1).is_some() && core.chars().all(char::is_alphabetic) && !is_stop_word(core)
}

/// `replacement` in the case pattern of `original`: `GOOD` -> `GREAT`, `Good` -> `Great`.
pub fn match_case(original: &str, replacement: &str) -> String {
    let letters = || original.chars().filter(|c| c.is_alphabetic());
    if letters().count() > 1 && letters().all(char::is_uppercase) {
        return replacement.to_uppercase();
    }
    match original.chars().next() {
        Some(c) if c.is_uppercase() => {
            let mut chars = replacement.chars();
            chars.next().map_or_else(String::new, |f| f.to_uppercase().chain(chars).collect())
        }
        _ => replacement.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_and_cores() {
        let text = " \"Great\" film, (really)  ";
        let spans = word_spans(text);
        let cores: Vec<&str> = spans.iter().map(|s| &text[s.core.clone()]).collect();
        let tokens: Vec<&str> = spans.iter().map(|s| &text[s.token.clone()]).collect();
        assert_eq!(tokens, ["\"Great\"", "film,", "(really)"]);
        assert_eq!(cores, ["Great", "film", "really"]);
        assert!(is_substitutable("film") && !is_substitutable("The") && !is_substitutable("b2b"));
        assert_eq!(match_case("Good", "great"), "Great");
        assert_eq!(match_case("GOOD", "great"), "GREAT");
        assert_eq!(match_case("good", "great"), "great");
    }
}
