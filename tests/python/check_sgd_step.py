"""One exact training step, replayed in PyTorch: the weights after `trainer finetune --optimizer sgd
--max-steps 1 --no-shuffle --dropout 0 --warmup-ratio 0 --save-final` on tiny-bert (MNLI, IM
layer) equal p - lr * grad from
transformers + the reference IM-BERT (tests/python/im_bert.py), differentiated through the inner
loop with create_graph=True.

Usage: check_sgd_step.py RUN_DIR (the Rust test `trainer/tests/finetune_cli.rs` makes it).
"""

import json
import pathlib
import sys

import torch
from safetensors.torch import load_file
from tokenizers import BertWordPieceTokenizer
from transformers import BertForSequenceClassification

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from im_bert import im_forward  # noqa: E402


def parse_connection(spec: str, n_layers: int):
    mode, _, rest = spec.partition(":")
    opts = dict(kv.split("=") for kv in rest.split(",") if kv)
    first, last = (int(x) for x in opts.get("layers", f"0-{n_layers - 1}").split("-"))
    layers = list(range(first, last + 1))
    if mode == "im":
        return layers, [], int(opts.get("T", 5)), float(opts.get("gamma", 0.1))
    if mode == "ex":
        return [], layers, 0, 0.0
    return [], [], 0, 0.0


def main() -> int:
    run = pathlib.Path(sys.argv[1])
    config = json.loads((run / "config.json").read_text())
    split = json.loads((run / "split.json").read_text())
    assert config["optimizer"] == "sgd" and config["max_steps"] == 1 and config["dropout"] == 0.0
    rows = {}
    with open(config["train_file"]) as f:
        for line in f:
            r = json.loads(line)
            rows[r["idx"]] = r
    batch = [rows[i] for i in split["train_idx"][: config["batch_size"]]]

    torch.set_default_dtype(torch.float64)
    # The model must already have its task head (tiny-bert has 3 classes: MNLI), so that the
    # starting point is known exactly.
    model = BertForSequenceClassification.from_pretrained(config["model"], attn_implementation="eager").double()
    model.eval()  # dropout 0 in the run; eval() also disables it here
    # HF tokenizers' own BERT WordPiece pipeline from the vocab file.
    tok = BertWordPieceTokenizer(str(pathlib.Path(config["model"]) / "vocab.txt"), lowercase=True)
    tok.enable_truncation(max_length=config["max_len"], strategy="longest_first")
    tok.enable_padding(pad_id=0, pad_token="[PAD]")
    encs = tok.encode_batch([(r["text_a"], r["text_b"]) if r["text_b"] is not None else r["text_a"] for r in batch])
    enc = {k: torch.tensor([getattr(e, f) for e in encs])
           for k, f in [("input_ids", "ids"), ("token_type_ids", "type_ids"), ("attention_mask", "attention_mask")]}
    labels = torch.tensor([r["label"] for r in batch])

    final = load_file(run / "final" / "model.safetensors")
    im_layers, ex_layers, T, gamma = parse_connection(config["connection"], model.config.num_hidden_layers)
    logits, _ = im_forward(model, enc["input_ids"], enc["token_type_ids"], enc["attention_mask"], im_layers, T, gamma,
                           ex_layers=ex_layers)
    loss = torch.nn.functional.cross_entropy(logits, labels)
    print(f"loss of the step: {loss.item():.6f}")
    params = dict(model.named_parameters())
    grads = torch.autograd.grad(loss, list(params.values()))
    # Compare the update itself (final - start) with -lr * grad, relative to its size.
    worst, worst_name = 0.0, ""
    for (name, p), g in zip(params.items(), grads):
        expected = -config["lr"] * g.detach()
        got = final[name].double() - p.detach()
        scale = max(expected.abs().max().item(), 1e-6)
        err = (got - expected).abs().max().item() / scale
        if err > worst:
            worst, worst_name = err, name
    print(f"SGD step replayed in PyTorch: worst relative update difference {worst:.2e} ({worst_name})")
    return 0 if worst < 1e-3 else 1


if __name__ == "__main__":
    sys.exit(main())
