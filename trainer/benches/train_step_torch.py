"""PyTorch eager timing of one training step (forward, backward, AdamW), matching
trainer/benches/train_step.rs. Prints {"<name>": seconds per step}. IM layers differentiate
through the inner loop (create_graph=True), as our exact gradient does."""

import json
import pathlib
import sys

import torch
from transformers import BertForSequenceClassification

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "tests" / "python"))
from im_bert import im_forward, median_seconds  # noqa: E402


def main() -> None:
    model_dir, batch, seq, threads, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    only = sys.argv[6] if len(sys.argv) > 6 else ""  # run only the configs whose name contains this
    torch.set_num_threads(threads)
    model = BertForSequenceClassification.from_pretrained(model_dir, num_labels=2, attn_implementation="eager")
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=2e-5, eps=1e-8, weight_decay=0.0)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, 20000, (batch, seq), generator=g)
    ids[:, 0], ids[:, -1] = 101, 102
    tt, mask = torch.zeros_like(ids), torch.ones_like(ids)
    labels = torch.randint(0, 2, (batch,), generator=g)
    n = model.config.num_hidden_layers
    out = {}
    for name, im_layers in {"bert": [], "im_all": list(range(n))}.items():
        if only not in name:
            continue

        def step():
            # No diagnostic residual after the last iteration: our step computes none either.
            logits, _ = im_forward(model, ids, tt, mask, im_layers, 5, 0.1, residuals=False)
            loss = torch.nn.functional.cross_entropy(logits, labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
        out[name] = median_seconds(step, reps)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
