"""Exports a fine-tuned BERT classifier (an HF directory, e.g. a run's best/) to ONNX in the layout
transformers.js reads: OUT/config.json, the tokenizer files and OUT/onnx/model.onnx (fp32).

`make web-bench` uses it to run the benchmark's peer, transformers.js, on the same MiniLM as the
demo. The export goes through TorchScript (`dynamo=False`): it needs only the `onnx` package, and
gives the graph with dynamic batch and sequence axes that transformers.js expects. After the
export the ONNX graph is checked, and its logits are compared with transformers' on two inputs
of other lengths than the one traced, padded and not (onnxruntime is not needed: the ONNX
reference evaluator of the `onnx` package runs it).

    python tests/python/export_onnx.py --model target/e2e/run/best --out target/peer/minilm-sst2
"""

import argparse
import os
import shutil
import sys

import numpy as np
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

INPUTS = ["input_ids", "attention_mask", "token_type_ids"]


class Logits(torch.nn.Module):
    """The classifier with positional inputs and one output, as the exporter wants it."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, token_type_ids):
        return self.model(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
        ).logits


def check(path, model, tokenizer):
    """The exported graph is valid and gives transformers' logits on unseen shapes."""
    import onnx
    from onnx.reference import ReferenceEvaluator

    onnx.checker.check_model(path)
    session = ReferenceEvaluator(path)
    texts = [["a gripping film"], ["the plot drags", "an utterly charming and not unfunny comedy"]]
    worst = 0.0
    for batch in texts:
        enc = tokenizer(batch, padding=True, return_tensors="np")
        feed = {name: enc[name].astype(np.int64) for name in INPUTS}
        (got,) = session.run(None, feed)
        with torch.no_grad():
            want = model(**{k: torch.from_numpy(v) for k, v in feed.items()}).logits.numpy()
        worst = max(worst, float(np.abs(got - want).max()))
    if worst > 1e-4:
        sys.exit(f"{path}: ONNX logits differ from transformers' by {worst:.2e}")
    print(f"{path}: checked, logits within {worst:.1e} of transformers'")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="HF classifier directory")
    parser.add_argument("--out", required=True, help="transformers.js model directory to write")
    args = parser.parse_args()

    # Eager attention: its masking traces as tensor ops, where SDPA's takes Python branches.
    model = AutoModelForSequenceClassification.from_pretrained(
        args.model, attn_implementation="eager"
    ).eval()
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    tmp = args.out + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)  # an interrupted earlier export
    os.makedirs(os.path.join(tmp, "onnx"), exist_ok=True)
    model.config.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)

    # Traced on a padded batch: with no padding transformers skips the attention mask, and the
    # trace would keep that shortcut for every input.
    example = tokenizer(
        ["a short example sentence", "and a longer one, so that the first is padded"],
        padding=True,
        return_tensors="pt",
    )
    axes = {0: "batch", 1: "sequence"}
    onnx_path = os.path.join(tmp, "onnx", "model.onnx")
    # eval(): the exporter restores the wrapper's mode afterwards, and a fresh module's is train.
    torch.onnx.export(
        Logits(model).eval(),
        tuple(example[name] for name in INPUTS),
        onnx_path,
        input_names=INPUTS,
        output_names=["logits"],
        dynamic_axes={**{name: axes for name in INPUTS}, "logits": {0: "batch"}},
        opset_version=17,
        dynamo=False,
    )
    check(onnx_path, model, tokenizer)
    shutil.rmtree(args.out, ignore_errors=True)
    os.rename(tmp, args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
