"""PyTorch eager timings of the same forward passes as benches/forward.rs, for the ratio table.

Prints one JSON object: {"<name>": seconds per forward, ...}. IM layers run Algorithm 1 with
autograd (create_graph=False: inference), as the paper's PyTorch code does.
"""

import json
import pathlib
import sys

import torch
from transformers import BertForSequenceClassification

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "tests" / "python"))
from im_bert import im_forward, median_seconds  # noqa: E402


def main() -> None:
    model_dir, batch, seq, threads, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    torch.set_num_threads(threads)
    model = BertForSequenceClassification.from_pretrained(model_dir, num_labels=2, attn_implementation="eager").eval()
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, 20000, (batch, seq), generator=g)
    ids[:, 0], ids[:, -1] = 101, 102
    tt = torch.zeros_like(ids)
    mask = torch.ones_like(ids)
    n = model.config.num_hidden_layers
    configs = {
        "bert": dict(im_layers=[], ex_layers=[]),
        "ex": dict(im_layers=[], ex_layers=list(range(n))),
        "im_all": dict(im_layers=list(range(n)), ex_layers=[]),
        "im_2_3": dict(im_layers=[2, 3], ex_layers=[]),
    }
    out = {}
    for name, c in configs.items():
        def run():
            if c["im_layers"]:
                # The inner gradient needs autograd even at inference.
                with torch.enable_grad():
                    im_forward(model, ids, tt, mask, c["im_layers"], 5, 0.1)
            else:
                with torch.no_grad():
                    im_forward(model, ids, tt, mask, [], 0, 0.1, ex_layers=c["ex_layers"])
        out[name] = median_seconds(run, reps)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
