//! TextBugger's character-level bugs: one word ([`typo_word`]) or a few words of a text
//! ([`typo`]).

use serde::{Deserialize, Serialize};

use super::edit::{apply, choose, Replacement};
use super::{is_substitutable, word_spans, EditKind, Perturbation};
use crate::rng::SplitMix64;

/// TextBugger's character-level bugs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TypoKind {
    /// Swap two adjacent inner characters (`film` -> `flim`).
    Swap,
    /// Delete an inner character (`great` -> `grat`).
    Delete,
    /// Insert a keyboard neighbour of a character next to it (`bad` -> `bsad`).
    Insert,
    /// Replace an inner character by a keyboard neighbour (`good` -> `giod`).
    Keyboard,
    /// Replace a character by a visually similar one (`cool` -> `c0ol`, `film` -> `fi1m`).
    Visual,
}

impl TypoKind {
    pub const ALL: [TypoKind; 5] =
        [TypoKind::Swap, TypoKind::Delete, TypoKind::Insert, TypoKind::Keyboard, TypoKind::Visual];
}

/// QWERTY neighbours of each lower-case letter.
const KEYBOARD: [&str; 26] = [
    "qwsz", "ghvn", "dfxv", "erfsxc", "wrsd", "rtdgcv", "tyfhvb", "yugjbn", "uojk", "uihknm",
    "iojlm", "opk", "jkn", "hjbm", "ipkl", "ol", "wa", "etdf", "weadzx", "ryfg", "yihj", "fgcb",
    "qeas", "sdzc", "tugh", "asx",
];

/// Visually similar replacements (TextBugger's "sub-C").
const VISUAL: [(char, char); 10] = [
    ('o', '0'),
    ('l', '1'),
    ('i', '1'),
    ('e', '3'),
    ('a', '@'),
    ('s', '$'),
    ('t', '7'),
    ('b', '8'),
    ('g', '9'),
    ('z', '2'),
];

fn keyboard_neighbours(c: char) -> Option<&'static str> {
    let lower = c.to_ascii_lowercase();
    lower.is_ascii_lowercase().then(|| KEYBOARD[(lower as u8 - b'a') as usize])
}

/// A keyboard neighbour of `c`, in `c`'s case.
fn neighbour_key(rng: &mut SplitMix64, c: char) -> Option<char> {
    let keys = keyboard_neighbours(c)?;
    let k = keys.as_bytes()[rng.below(keys.len())] as char;
    Some(if c.is_uppercase() { k.to_ascii_uppercase() } else { k })
}

/// One typo of kind `kind` in `word`, or `None` when the word does not allow it (too short, no
/// ASCII letter for a keyboard bug, no look-alike character, ...). The first and last
/// characters are kept by the swap, delete and keyboard bugs so the word stays readable.
pub fn typo_word(word: &str, kind: TypoKind, seed: u64) -> Option<String> {
    typo_word_with(word, kind, &mut SplitMix64::new(seed))
}

fn typo_word_with(word: &str, kind: TypoKind, rng: &mut SplitMix64) -> Option<String> {
    let mut chars: Vec<char> = word.chars().collect();
    let n = chars.len();
    let positions: Vec<usize> = match kind {
        TypoKind::Swap if n >= 4 => (1..n - 2).filter(|&i| chars[i] != chars[i + 1]).collect(),
        TypoKind::Delete if n >= 3 => (1..n - 1).collect(),
        TypoKind::Insert => (0..n).filter(|&i| keyboard_neighbours(chars[i]).is_some()).collect(),
        TypoKind::Keyboard if n >= 3 => {
            (1..n - 1).filter(|&i| keyboard_neighbours(chars[i]).is_some()).collect()
        }
        TypoKind::Visual => (0..n).filter(|&i| visual(chars[i]).is_some()).collect(),
        _ => Vec::new(),
    };
    if positions.is_empty() {
        return None;
    }
    let i = positions[rng.below(positions.len())];
    match kind {
        TypoKind::Swap => chars.swap(i, i + 1),
        TypoKind::Delete => {
            chars.remove(i);
        }
        TypoKind::Insert => chars.insert(i + 1, neighbour_key(rng, chars[i])?),
        TypoKind::Keyboard => chars[i] = neighbour_key(rng, chars[i])?,
        TypoKind::Visual => chars[i] = visual(chars[i])?,
    }
    let out: String = chars.into_iter().collect();
    (out != word).then_some(out)
}

fn visual(c: char) -> Option<char> {
    VISUAL.iter().find(|(from, _)| *from == c.to_ascii_lowercase()).map(|&(_, to)| to)
}

/// TextBugger-like typos in up to `n` content words (letters only, three or more, not stop
/// words), one bug each, of a kind drawn from those the word allows.
pub fn typo(text: &str, n: usize, seed: u64) -> Perturbation {
    let mut rng = SplitMix64::new(seed);
    let spans = word_spans(text);
    let eligible: Vec<usize> = (0..spans.len())
        .filter(|&i| {
            let core = &text[spans[i].core.clone()];
            core.chars().nth(2).is_some() && is_substitutable(core)
        })
        .collect();
    let mut replacements = Vec::new();
    for i in choose(&mut rng, &eligible, n) {
        let core = &text[spans[i].core.clone()];
        let mut kinds = TypoKind::ALL;
        crate::data::shuffle(&mut kinds, rng.next_u64());
        // Every eligible word allows at least Delete, so this always finds one.
        if let Some((kind, after)) =
            kinds.iter().find_map(|&k| typo_word_with(core, k, &mut rng).map(|w| (k, w)))
        {
            replacements.push(Replacement {
                range: spans[i].core.clone(),
                after,
                word: i,
                kind: EditKind::Typo(kind),
            });
        }
    }
    apply(text, replacements)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::robustness::perturb::is_stop_word;
    use crate::robustness::perturb::test_support::{check_edits, SST};

    #[test]
    fn typo_changes_content_words_only_and_is_seeded() {
        let p = typo(SST, 2, 7);
        check_edits(SST, &p);
        assert_eq!(p.edits.len(), 2);
        for e in &p.edits {
            assert!(matches!(e.kind, EditKind::Typo(_)));
            assert_ne!(e.before, e.after);
            assert!(!is_stop_word(&e.before), "{e:?}");
        }
        assert_eq!(typo(SST, 2, 7), p);
        let outputs: std::collections::BTreeSet<String> =
            (0..20).map(|s| typo(SST, 1, s).text).collect();
        assert!(outputs.len() > 3, "{outputs:?}");
    }

    #[test]
    fn each_typo_kind_does_what_it_says() {
        for seed in 0..20 {
            let swap = typo_word("charming", TypoKind::Swap, seed).unwrap();
            let mut a: Vec<char> = swap.chars().collect();
            let mut b: Vec<char> = "charming".chars().collect();
            assert_eq!((a[0], a[7]), ('c', 'g'));
            a.sort();
            b.sort();
            assert_eq!(a, b, "a swap keeps the letters");
            assert_eq!(typo_word("charming", TypoKind::Delete, seed).unwrap().len(), 7);
            let ins = typo_word("Bad", TypoKind::Insert, seed).unwrap();
            assert_eq!(ins.chars().count(), 4);
            let sub = typo_word("good", TypoKind::Keyboard, seed).unwrap();
            let diff: Vec<(char, char)> =
                "good".chars().zip(sub.chars()).filter(|(x, y)| x != y).collect();
            assert_eq!(diff.len(), 1);
            assert!(keyboard_neighbours(diff[0].0).unwrap().contains(diff[0].1), "{sub}");
            let vis = typo_word("moon", TypoKind::Visual, seed).unwrap();
            assert!(vis.contains('0'), "{vis}");
        }
        assert_eq!(typo_word("oo", TypoKind::Swap, 0), None);
        assert_eq!(typo_word("xyw", TypoKind::Visual, 0), None);
        assert_eq!(typo_word("ab", TypoKind::Delete, 0), None);
    }
}
