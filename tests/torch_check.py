"""Loads a checkpoint written by the C program into the PyTorch reference
(strictly: every name and shape must match) and prints the same test-split
loss that `gpt eval` prints.

  /usr/bin/python3 tests/torch_check.py CKPT DATAFILE"""
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference_model import GPT, load_safetensors  # noqa: E402


def split_loss(ckpt, data_path):
    """The mean next-byte loss over the test split's whole windows, as
    gpt eval computes it: (loss, windows, context)."""
    tensors, meta = load_safetensors(ckpt)
    cfg = {k: int(meta[k]) for k in ("context", "embed", "mlp", "heads", "layers", "vocab")}
    model = GPT(**cfg)
    state = {k: v for k, v in tensors.items() if not k.startswith("_gpt.")}
    model.load_state_dict(state, strict=True)
    with open(data_path, "rb") as f:
        data = f.read()
    test = data[len(data) * 8 // 10:]
    T = cfg["context"]
    if len(test) < T:
        sys.exit(f"torch_check: {data_path}: test split has {len(test)} bytes, fewer than context {T}")
    windows = torch.tensor(list(test[:len(test) // T * T]), dtype=torch.int64).reshape(-1, T)
    total, count = 0.0, 0
    with torch.no_grad():
        for i in range(0, len(windows), 64):
            w = windows[i:i + 64]
            logits = model(w)[:, :-1].reshape(-1, model.vocab)
            total += torch.nn.functional.cross_entropy(
                logits, w[:, 1:].reshape(-1), reduction="sum").item()
            count += w.shape[0] * (T - 1)
    return total / count, len(windows), T


def main(ckpt, data_path):
    loss, windows, T = split_loss(ckpt, data_path)
    print(f"loss {loss:.6f} bpb {loss / math.log(2):.4f} ({windows} windows of {T} bytes)")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: torch_check.py CKPT DATAFILE")
    main(sys.argv[1], sys.argv[2])
