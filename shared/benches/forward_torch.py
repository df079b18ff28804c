"""PyTorch eager timings of the same forward passes as benches/forward.rs, taken in turn with ours.

The bench starts this script once and then asks for one timed forward at a time, alternating
with its own, so that both sides of each ratio run under the same load on a noisy machine.
Protocol: after loading, the script prints `ready`; for each line `<name>` it reads on stdin it
runs that config's forward once and prints the seconds it took.

Inference as a PyTorch user would write it: parameters frozen, autograd on only for IM's inner
gradient, whose graph is not kept (create_graph=False), and no diagnostic residual after the
last iteration (our forward computes none either).
"""

import pathlib
import sys
import time

import torch
from transformers import BertForSequenceClassification

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "tests" / "python"))
from im_bert import im_forward  # noqa: E402


def main() -> None:
    model_dir, batch, seq, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    torch.set_num_threads(threads)
    model = BertForSequenceClassification.from_pretrained(model_dir, num_labels=2, attn_implementation="eager").eval()
    model.requires_grad_(False)
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

    def run(c):
        if c["im_layers"]:
            # The inner gradient needs autograd even at inference.
            with torch.enable_grad():
                im_forward(model, ids, tt, mask, c["im_layers"], 5, 0.1, create_graph=False, residuals=False)
        else:
            with torch.no_grad():
                im_forward(model, ids, tt, mask, [], 0, 0.1, ex_layers=c["ex_layers"], residuals=False)

    print("ready", flush=True)
    for line in sys.stdin:
        name = line.strip()
        if name not in configs:
            print(f"unknown config {name!r}", file=sys.stderr, flush=True)
            sys.exit(2)
        t0 = time.perf_counter()
        run(configs[name])
        print(time.perf_counter() - t0, flush=True)


if __name__ == "__main__":
    main()
