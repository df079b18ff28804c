"""Directories saved by the Rust code load in transformers and give the same logits.

The Rust tests `checkpoint::save_then_load_gives_identical_logits` and
`checkpoint::roberta_save_then_load_gives_identical_logits` write target/test-artifacts/
roundtrip-minilm/ and roundtrip-roberta/ with a .json beside each (texts and plain logits).
"""

import json
import pathlib
import sys

import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer


def check(root: pathlib.Path, name: str, architecture: str) -> float:
    saved = root / name
    expected = json.loads((root / f"{name}.json").read_text())
    tok = AutoTokenizer.from_pretrained(saved)
    model = AutoModelForSequenceClassification.from_pretrained(saved, attn_implementation="eager").eval()
    assert type(model).__name__ == architecture, type(model).__name__
    worst = 0.0
    n = expected["num_labels"]
    rows = [expected["logits"][i:i + n] for i in range(0, len(expected["logits"]), n)]
    for (a, b), want in zip(expected["texts"], rows):
        enc = tok(a, b, return_tensors="pt") if b is not None else tok(a, return_tensors="pt")
        with torch.no_grad():
            got = model(**enc).logits[0]
        worst = max(worst, (got - torch.tensor(want)).abs().max().item())
    print(f"transformers loads {saved} as {architecture}: max |logit difference| = {worst:.2e}")
    return worst


def main() -> int:
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "target/test-artifacts")
    worst = max(check(root, "roundtrip-minilm", "BertForSequenceClassification"),
                check(root, "roundtrip-roberta", "RobertaForSequenceClassification"))
    return 0 if worst < 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main())
