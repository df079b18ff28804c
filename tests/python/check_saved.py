"""A directory saved by the Rust code loads in transformers and gives the same logits.

The Rust test `checkpoint::save_then_load_gives_identical_logits` writes
target/test-artifacts/roundtrip-minilm/ and roundtrip-minilm.json (texts and plain-BERT logits).
"""

import json
import pathlib
import sys

import torch
from transformers import AutoTokenizer, BertForSequenceClassification


def main() -> int:
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "target/test-artifacts")
    saved = root / "roundtrip-minilm"
    expected = json.loads((root / "roundtrip-minilm.json").read_text())
    tok = AutoTokenizer.from_pretrained(saved)
    model = BertForSequenceClassification.from_pretrained(saved, attn_implementation="eager").eval()
    worst = 0.0
    n = expected["num_labels"]
    rows = [expected["logits"][i:i + n] for i in range(0, len(expected["logits"]), n)]
    for (a, b), want in zip(expected["texts"], rows):
        enc = tok(a, b, return_tensors="pt") if b is not None else tok(a, return_tensors="pt")
        with torch.no_grad():
            got = model(**enc).logits[0]
        worst = max(worst, (got - torch.tensor(want)).abs().max().item())
    print(f"transformers loads {saved}: max |logit difference| = {worst:.2e}")
    return 0 if worst < 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main())
