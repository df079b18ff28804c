//! What the perturbation tests share: sample texts, an exactness check, a tiny embedding index.

use super::Perturbation;
use crate::robustness::neighbours::WordNeighbours;

pub(super) const SST: &str = "it 's a charming and often affecting journey . ";
pub(super) const NASTY: &[&str] = &[
    "",
    "   ",
    "😀 🎬😀 👍",
    "هذا الفيلم رائع جدا",
    "<b>great</b> movie, <i>really</i> <br/> wonderful",
    "Ünïcödé wörds everywhere, naïve café",
    ". , ! ?",
    "a",
];

/// Rebuilds the clean text from the perturbed one and the edits: edits are exact.
fn undo(p: &Perturbation) -> String {
    let mut chars: Vec<char> = p.text.chars().collect();
    for e in p.edits.iter().rev() {
        chars.splice(e.span.clone(), e.before.chars());
    }
    chars.into_iter().collect()
}

pub(crate) fn check_edits(clean: &str, p: &Perturbation) {
    let out: Vec<char> = p.text.chars().collect();
    let inp: Vec<char> = clean.chars().collect();
    for e in &p.edits {
        assert_eq!(out[e.span.clone()].iter().collect::<String>(), e.after, "{e:?}");
        assert_eq!(inp[e.clean_span.clone()].iter().collect::<String>(), e.before, "{e:?}");
    }
    assert_eq!(undo(p), clean);
}

pub(crate) fn neighbours() -> WordNeighbours {
    // Two tight clusters: {good, great, fine} and {bad, awful}, plus an unrelated word.
    let words = ["[PAD]", "good", "great", "fine", "bad", "awful", "table", "##s"];
    let rows: [[f32; 3]; 8] = [
        [0.0, 0.0, 1.0],
        [1.0, 0.1, 0.0],
        [0.9, 0.2, 0.0],
        [0.8, 0.0, 0.3],
        [-1.0, 0.1, 0.0],
        [-0.9, 0.0, 0.1],
        [0.0, 1.0, 0.0],
        [0.9, 0.1, 0.0],
    ];
    let vocab = words.iter().enumerate().map(|(i, w)| (w.to_string(), i as u32)).collect();
    WordNeighbours::new(&rows.concat(), 3, &vocab).unwrap()
}
