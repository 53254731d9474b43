"""Writes what tests/test_optim.c holds `gpt eval` to (run with Debian's
python3-torch: /usr/bin/python3 tests/make_eval_reference.py):

  tests/eval_text.txt          1200 bytes of pseudo-English; its last 20%,
                               the test split, is 7 windows of 32 bytes and 16
                               left over
  tests/eval_ckpt.safetensors  a tiny model (context 32, embed 16, mlp 32, 2
                               heads, 1 layer) trained a little on the text's
                               first 80%, so that windows differ in loss
  tests/eval_reference.txt     the test split's mean loss by tests/torch_check.py
                               and its bits per byte, loss / ln 2"""
import math
import os
import random
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_reference import WORDS  # noqa: E402
from reference_model import GPT, save_safetensors  # noqa: E402
from torch_check import split_loss  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SIZE, CFG = 1200, dict(context=32, embed=16, mlp=32, heads=2, layers=1)


def write_text(path):
    rnd = random.Random(7)
    text = " ".join(rnd.choice(WORDS) for _ in range(SIZE))[:SIZE]
    with open(path, "w", encoding="ascii", newline="") as f:
        f.write(text)
    return text.encode("ascii")


def write_ckpt(path, train):
    """Sixty Adam steps on windows of the training split, then the state_dict
    (with its buffers, as the C program writes it)."""
    torch.manual_seed(4)
    model = GPT(**CFG)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2, foreach=False)
    T, rnd = CFG["context"], random.Random(8)
    for _ in range(60):
        starts = [rnd.randrange(len(train) - T) for _ in range(4)]
        batch = torch.tensor([list(train[s:s + T]) for s in starts], dtype=torch.int64)
        opt.zero_grad()
        model.loss(batch).backward()
        opt.step()
    save_safetensors(path, model.state_dict(), dict(CFG, vocab=128, written_by="torch " + torch.__version__))


def main():
    torch.set_num_threads(1)  # the same sums in the same order, every run
    text_path = os.path.join(HERE, "eval_text.txt")
    ckpt_path = os.path.join(HERE, "eval_ckpt.safetensors")
    raw = write_text(text_path)
    write_ckpt(ckpt_path, raw[:len(raw) * 8 // 10])
    loss, windows, T = split_loss(ckpt_path, text_path)
    with open(os.path.join(HERE, "eval_reference.txt"), "w") as f:
        f.write(f"# tests/make_eval_reference.py with torch {torch.__version__}: tests/torch_check.py\n"
                "# on tests/eval_ckpt.safetensors and tests/eval_text.txt's last 20%\n"
                f"loss {loss:.9f} bpb {loss / math.log(2):.9f} windows {windows} context {T}\n")
    print(f"loss {loss:.9f} bpb {loss / math.log(2):.9f} ({windows} windows of {T} bytes)")


if __name__ == "__main__":
    main()
