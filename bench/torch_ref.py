"""The PyTorch reference's training step on this machine, for comparison
with gpt (run by `make bench`, or alone):

  /usr/bin/python3 bench/torch_ref.py [--steps N] [--threads N] [--data FILE]

Same model, batch (32 random windows of 128 bytes), loss and Adam as
`./gpt train`; prints the median ms/step after a short warm-up."""
import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from reference_model import GPT  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--data", default="data/sherlock-ascii.txt")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    with open(args.data, "rb") as f:
        data = torch.tensor(list(f.read()), dtype=torch.int64)
    train = data[: len(data) * 8 // 10]
    model = GPT()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    times = []
    for _ in range(args.steps):
        starts = torch.randint(0, len(train) - 128, (32,))
        batch = torch.stack([train[s:s + 128] for s in starts])
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = model.loss(batch)
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    ms = statistics.median(times[10:]) * 1e3
    print(f"{ms:.2f} ms/step (PyTorch {torch.__version__}, {args.threads} threads, "
          f"median of {len(times) - 10} steps, last loss {loss.item():.4f})")


if __name__ == "__main__":
    main()
