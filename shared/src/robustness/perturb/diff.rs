//! A word diff of a clean and a perturbed text, for highlighting edits made elsewhere.

use serde::{Deserialize, Serialize};

/// What a [`DiffSpan`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DiffOp {
    /// In both texts.
    Equal,
    /// Only in the clean text.
    Delete,
    /// Only in the perturbed text.
    Insert,
}

/// A run of words with the same [`DiffOp`], joined by single spaces.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiffSpan {
    pub op: DiffOp,
    pub text: String,
}

/// Above this many LCS cells the changed middle is reported as one replacement: a diff of two
/// unrelated long texts is not worth 4 bytes a cell (in the browser too).
const MAX_LCS_CELLS: usize = 1 << 20;

/// A word diff of `clean` and `perturbed` (longest common subsequence over whitespace tokens).
/// Within a changed region the deletions come before the insertions.
pub fn diff_words(clean: &str, perturbed: &str) -> Vec<DiffSpan> {
    let a: Vec<&str> = clean.split_whitespace().collect();
    let b: Vec<&str> = perturbed.split_whitespace().collect();
    // Edits are usually local: strip the common prefix and suffix before the quadratic part.
    let prefix = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let suffix =
        a[prefix..].iter().rev().zip(b[prefix..].iter().rev()).take_while(|(x, y)| x == y).count();
    let (ma, mb) = (&a[prefix..a.len() - suffix], &b[prefix..b.len() - suffix]);

    let mut ops: Vec<(DiffOp, &str)> = a[..prefix].iter().map(|w| (DiffOp::Equal, *w)).collect();
    if ma.len().saturating_mul(mb.len()) > MAX_LCS_CELLS {
        ops.extend(ma.iter().map(|w| (DiffOp::Delete, *w)));
        ops.extend(mb.iter().map(|w| (DiffOp::Insert, *w)));
    } else {
        // lcs[i * w + j] = LCS length of ma[i..] and mb[j..].
        let w = mb.len() + 1;
        let mut lcs = vec![0u32; (ma.len() + 1) * w];
        for i in (0..ma.len()).rev() {
            for j in (0..mb.len()).rev() {
                lcs[i * w + j] = if ma[i] == mb[j] {
                    lcs[(i + 1) * w + j + 1] + 1
                } else {
                    lcs[(i + 1) * w + j].max(lcs[i * w + j + 1])
                };
            }
        }
        let (mut i, mut j) = (0, 0);
        while i < ma.len() || j < mb.len() {
            if i < ma.len() && j < mb.len() && ma[i] == mb[j] {
                ops.push((DiffOp::Equal, ma[i]));
                i += 1;
                j += 1;
            } else if j == mb.len() || (i < ma.len() && lcs[(i + 1) * w + j] >= lcs[i * w + j + 1])
            {
                ops.push((DiffOp::Delete, ma[i]));
                i += 1;
            } else {
                ops.push((DiffOp::Insert, mb[j]));
                j += 1;
            }
        }
    }
    ops.extend(a[a.len() - suffix..].iter().map(|w| (DiffOp::Equal, *w)));

    // Group: each run between equal words becomes one Delete then one Insert span.
    let mut spans: Vec<DiffSpan> = Vec::new();
    let mut pending: [Vec<&str>; 2] = [Vec::new(), Vec::new()];
    let push = |spans: &mut Vec<DiffSpan>, op: DiffOp, words: &[&str]| {
        if words.is_empty() {
            return;
        }
        match spans.last_mut() {
            Some(last) if last.op == op => {
                last.text.push(' ');
                last.text.push_str(&words.join(" "));
            }
            _ => spans.push(DiffSpan { op, text: words.join(" ") }),
        }
    };
    for (op, word) in ops {
        match op {
            DiffOp::Delete => pending[0].push(word),
            DiffOp::Insert => pending[1].push(word),
            DiffOp::Equal => {
                push(&mut spans, DiffOp::Delete, &std::mem::take(&mut pending[0]));
                push(&mut spans, DiffOp::Insert, &std::mem::take(&mut pending[1]));
                push(&mut spans, DiffOp::Equal, &[word]);
            }
        }
    }
    push(&mut spans, DiffOp::Delete, &pending[0]);
    push(&mut spans, DiffOp::Insert, &pending[1]);
    spans
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diff_finds_the_changed_words() {
        let d = diff_words("the film is great fun", "the movie is great fun indeed");
        let ops: Vec<(DiffOp, &str)> = d.iter().map(|s| (s.op, s.text.as_str())).collect();
        assert_eq!(
            ops,
            [
                (DiffOp::Equal, "the"),
                (DiffOp::Delete, "film"),
                (DiffOp::Insert, "movie"),
                (DiffOp::Equal, "is great fun"),
                (DiffOp::Insert, "indeed"),
            ]
        );
        let d = diff_words("a b c d", "a c b d");
        let clean: Vec<&str> =
            d.iter().filter(|s| s.op != DiffOp::Insert).map(|s| s.text.as_str()).collect();
        let pert: Vec<&str> =
            d.iter().filter(|s| s.op != DiffOp::Delete).map(|s| s.text.as_str()).collect();
        assert_eq!(clean.join(" "), "a b c d");
        assert_eq!(pert.join(" "), "a c b d");
        assert_eq!(diff_words("", ""), []);
        assert_eq!(
            diff_words("same", "same"),
            [DiffSpan { op: DiffOp::Equal, text: "same".into() }]
        );
        // Past the cell limit the middle is one replacement, still exact.
        let long_a = (0..1500).map(|i| format!("a{i}")).collect::<Vec<_>>().join(" ");
        let long_b = (0..1500).map(|i| format!("b{i}")).collect::<Vec<_>>().join(" ");
        let d = diff_words(&long_a, &long_b);
        assert_eq!(d.len(), 2);
        assert_eq!(d[0].text, long_a);
    }
}
