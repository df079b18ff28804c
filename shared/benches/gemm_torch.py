"""PyTorch timings of the matrix products in one MiniLM layer, for benches/gemm.rs.

Prints one JSON object: {"<name>": seconds per product, ...}. The shapes arrive as JSON on the
command line so that both sides time exactly the same products.
"""

import json
import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "tests" / "python"))
from im_bert import median_seconds  # noqa: E402


def main() -> None:
    shapes, threads, reps = json.loads(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(0)
    out = {}
    with torch.no_grad():
        for name, (lhs, rhs) in shapes.items():
            a, b = torch.randn(lhs, generator=g), torch.randn(rhs, generator=g)
            if lhs[0] * lhs[1] == 1:  # a Linear layer: one 2-D product, as in benches/gemm.rs
                a, b = a[0, 0], b[0, 0]
            out[name] = median_seconds(lambda: torch.matmul(a, b), reps)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
