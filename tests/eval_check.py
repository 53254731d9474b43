"""The numbers `gpt train` and `gpt sample` print, held to sources of their
own (tests/test_numbers.c runs this with Debian's python3-torch):

  - every window an eval line drew (the run log's `windows`, written under
    --log-eval-windows) lies wholly in the test split, the file's last 20%
    as the reference cuts it, at the offset util/rng.c's generator,
    reimplemented here, draws;
  - each eval line's test loss, as printed (4 decimals) and as the run log
    stores it, is the PyTorch reference's mean cross-entropy in float64 on
    exactly those windows, with the weights of the checkpoint written
    right after that eval's step;
  - every byte of each eval line's continuation, of the final passage and
    of gpt sample's passages is the one a float64 sampler picks: the
    reference's logits in float64 for each position (past the context, of
    its last `context` bytes, positions from 0, as the reference slides its
    window), softmax with the temperature over the top k, and the inverse
    CDF at the uniform draw the program made. The logits are taken of the
    program's own text, so one byte decided by rounding moves no other.

  /usr/bin/python3 tests/eval_check.py --run DIR --data FILE --train-output FILE
      --final-bytes N [--sample OUTPUT "FLAGS"]...

--run is a `gpt train --log-eval-windows --ckpt-every 1` run's --out, the
train output its stdout; each --sample is a `gpt sample FLAGS` stdout (FLAGS
must give --ckpt, --seed, --temperature, --top-k, --bytes and --prompt).

Prints a line a check, "ok: ..." or "FAIL: ...". What rounding decides is
accepted either way: a draw within fp32 rounding of a CDF boundary, a loss
within it of the 4th decimal's rounding boundary; an "accepted: ..." line
says where the program's fp32 went the other way, and a last "note: ..."
line counts such cases. Exits 1 if a check failed."""
import argparse
import json
import math
import os
import re
import shlex
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference_model import GPT, load_safetensors  # noqa: E402

# util/rng.h's streams (fixed: they are in the checkpoints' bits)
RNG_EVAL, RNG_SAMPLE, RNG_FINAL = 2, 3, 4
MASK = (1 << 64) - 1

# How far the program's fp32 logits may stray from float64 ones: the
# float32 reference's differ from the float64 ones by at most 8e-7 on the
# test's run (logits up to 2.2); 1e-5 leaves a margin of 12.
LOGIT_TOL = 1e-5
# How far the program's fp32 loss may stray from the float64 mean: it sums
# its rows' losses in double from fp32 logits; on the test's run it is
# within 2.5e-7.
LOSS_TOL = 2e-6


class Generator:
    """util/rng.c's generator: xoshiro256**, seeded by splitmix64 from
    seed ^ (stream * 0xD1B54A32D192ED03)."""

    def __init__(self, seed, stream):
        x = (seed ^ (stream * 0xD1B54A32D192ED03)) & MASK
        self.s = []
        for _ in range(4):
            x = (x + 0x9E3779B97F4A7C15) & MASK
            z = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
            z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
            self.s.append(z ^ (z >> 31))

    @staticmethod
    def _rotl(x, k):
        return ((x << k) | (x >> (64 - k))) & MASK

    def next(self):
        s = self.s
        out = (self._rotl((s[1] * 5) & MASK, 7) * 9) & MASK
        t = (s[1] << 17) & MASK
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = self._rotl(s[3], 45)
        return out

    def below(self, n):
        """Uniform in [0, n), by multiply-shift."""
        return (self.next() * n) >> 64

    def uniform(self):
        """Uniform in [0, 1) on a grid of 2^-24 (exact in float64)."""
        return (self.next() >> 40) / float(1 << 24)


class Report:
    def __init__(self):
        self.failed = 0
        self.near_draws = 0
        self.draws = 0
        self.near_losses = 0

    def check(self, ok, what, why=""):
        if ok:
            print(f"ok: {what}")
        else:
            self.failed += 1
            print(f"FAIL: {what}: {why}")


def load_model(path):
    """The reference with a checkpoint's weights, in float64."""
    tensors, meta = load_safetensors(path)
    cfg = {k: int(meta[k]) for k in ("context", "embed", "mlp", "heads", "layers", "vocab")}
    model = GPT(**cfg, activation=meta.get("activation", "relu"))
    model.load_state_dict({k: v for k, v in tensors.items() if not k.startswith("_gpt.")},
                          strict=True)
    return model.double().eval()


def escaped(text):
    """Bytes as the eval line prints them (cmd/train.c emit_escaped)."""
    out = []
    for c in text:
        if c == 10:
            out.append("\\n")
        elif c < 32 or c == 127:
            out.append(f"\\x{c:02x}")
        else:
            out.append(chr(c))
    return "".join(out)


# ---- the sampler in float64 ----

def next_logits(model, text, start, end):
    """The float64 logits for text[n], n in [start, end): of text[:n], or
    past the context of its last `context` bytes (positions from 0)."""
    C, rows = model.context, []
    with torch.no_grad():
        if start <= C:  # one causal pass over the head serves every n <= C
            head = min(end - 1, C)
            lg = model(torch.tensor([list(text[:head])]))[0]
            rows += [lg[n - 1] for n in range(start, min(end, C + 1))]
        later = [list(text[n - C:n]) for n in range(max(start, C + 1), end)]
        if later:
            rows += list(model(torch.tensor(later))[:, -1])
    return [r.tolist() for r in rows]


def pick(logits, u01, temperature, top_k):
    """The inverse CDF of softmax(logits / temperature) over the top k at
    u01: (byte, near), near when fp32 rounding of the logits could move the
    pick (u within it of a CDF boundary, or a logit tied with the k-th
    largest within it)."""
    order = sorted(logits, reverse=True)
    keep_k = 0 < top_k < len(logits)
    kth = order[top_k - 1] if keep_k else -math.inf
    near = keep_k and order[top_k - 1] - order[top_k] <= 2 * LOGIT_TOL
    p = [math.exp((l - order[0]) / temperature) if l >= kth else 0.0 for l in logits]
    total = math.fsum(p)
    u, margin = u01 * total, 2 * LOGIT_TOL / temperature * total
    cum, chosen = 0.0, None
    for i, w in enumerate(p):
        cum += w
        if w and abs(u - cum) <= margin and i + 1 < len(p):
            near = True
        if chosen is None and u < cum:
            chosen = i
    return chosen, near


def check_passage(rep, what, model, text, n, gen, temperature, top_k):
    """text[n:] against the float64 sampler at gen's draws."""
    logits = next_logits(model, text, n, len(text))
    wrong = []
    for i, row in enumerate(logits):
        want, near = pick(row, gen.uniform(), temperature, top_k)
        got = text[n + i]
        rep.draws += 1
        rep.near_draws += near
        if got != want and near:
            print(f"accepted: {what}: byte {n + i}, {got:#04x} where the float64 sampler draws "
                  f"{want:#04x}, is within fp32 rounding of a CDF boundary")
        elif got != want:
            wrong.append(f"byte {n + i}: {got:#04x}, the float64 sampler's {want:#04x}")
    rep.check(not wrong, f"{what}: {len(text) - n} bytes drawn as a float64 sampler draws them "
              f"(temperature {temperature:g}, top-k {top_k})",
              f"{len(wrong)} differ: " + "; ".join(wrong[:4]))


# ---- the eval lines ----

def eval_lines(train_output):
    """The printed eval lines: step -> (test loss as printed, continuation
    as printed)."""
    lines = {}
    for line in train_output.split(b"\n"):
        m = re.match(rb"step +(\d+) \| train \S+ \| test (\S+) \| (.*)$", line)
        if m:
            lines[int(m[1])] = (m[2].decode(), m[3].decode("latin-1"))
    return lines


def check_loss(rep, what, printed, logged, ref):
    """A test loss printed to 4 decimals and logged as a float, against the
    float64 reference."""
    allowed = {f"{ref - LOSS_TOL:.4f}", f"{ref + LOSS_TOL:.4f}"}  # one, unless near a boundary
    rep.near_losses += len(allowed) > 1
    if printed in allowed and printed != f"{ref:.4f}":
        print(f"accepted: {what}: test loss {printed}, where PyTorch's {ref:.7f} rounds the "
              "other way, within fp32 rounding of the 4th decimal's rounding boundary")
    rep.check(printed in allowed, f"{what}: printed test loss {printed} is PyTorch's "
              f"{ref:.7f} to 4 decimals", f"want {' or '.join(sorted(allowed))}")
    rep.check(abs(logged - ref) <= LOSS_TOL and f"{logged:.4f}" == printed,
              f"{what}: logged test loss {logged:.9g} is PyTorch's {ref:.9f} within "
              f"{LOSS_TOL:g} and prints as the line's", f"off by {logged - ref:.3g}")


def check_windows(rep, what, starts, want_starts, n_train, n, seq):
    outside = [(o, o + seq) for o in starts if not (n_train <= o and o + seq <= n)]
    rep.check(not outside, f"{what}: all {len(starts)} windows of {seq} bytes lie in the test "
              f"split [{n_train}, {n})", f"{len(outside)} do not, e.g. [%d, %d) (the training "
              f"split is [0, {n_train}))" % (outside or [(0, 0)])[0])
    rep.check(starts == want_starts, f"{what}: the windows are the eval generator's draws",
              f"recorded {starts[:4]}..., the generator draws {want_starts[:4]}...")


def check_evals(rep, run, data, out):
    records = [json.loads(line) for line in open(os.path.join(run, "metrics.jsonl"))]
    cfg = records[0]
    seq, batch, every = int(cfg["seq"]), int(cfg["eval-batch"]), int(cfg["eval-every"])
    prompt, seed = cfg["prompt"].encode(), int(cfg["seed"])
    total = max(len(prompt), int(cfg["eval-bytes"]))
    n, n_train = len(data), len(data) * 8 // 10  # the reference's split
    evals = [r for r in records if r["kind"] == "eval"]
    printed = eval_lines(out)
    steps = [r["step"] for r in evals]
    rep.check(steps and steps == list(range(0, every * len(steps), every)) and
              sorted(printed) == steps, f"{len(steps)} evals logged and printed, every {every} "
              "steps from 0", f"logged {steps}, printed {sorted(printed)}")
    gen = Generator(seed, RNG_EVAL)  # the eval lines' one stream, in step order
    for r in evals:
        what = f"eval at step {r['step']}"
        starts = r.get("windows")
        if starts is None or len(starts) != batch:
            rep.check(False, f"{what}: windows logged", f"want {batch}, got {starts}")
            return
        want_starts = [n_train + gen.below(n - n_train - seq) for _ in range(batch)]
        check_windows(rep, what, starts, want_starts, n_train, n, seq)
        ckpt = os.path.join(run, f"ckpt-{r['step'] + 1:08d}.safetensors")
        if not os.path.exists(ckpt):
            rep.check(False, f"{what}: checkpoint", f"no {ckpt}")
            return
        model = load_model(ckpt)
        with torch.no_grad():
            ref = model.loss(torch.tensor([list(data[o:o + seq]) for o in starts])).item()
        line_loss, line_text = printed.get(r["step"], ("?", ""))
        check_loss(rep, what, line_loss, r["test_loss"], ref)
        text = r["continuation"].encode("latin-1")
        rep.check(len(text) == total and text.startswith(prompt) and
                  line_text == escaped(text), f"{what}: the continuation, {total} bytes, "
                  "printed as logged", f"logged {text!r}, printed {line_text!r}")
        check_passage(rep, f"{what}: continuation", model, text, len(prompt), gen, 1.0, 0)


# ---- the final passage and gpt sample ----

def check_final(rep, run, out, final_bytes):
    cfg = json.loads(open(os.path.join(run, "metrics.jsonl")).readline())
    prompt, seed = cfg["prompt"].encode(), int(cfg["seed"])
    total = max(len(prompt), final_bytes)
    end = out.rfind(b"\n", 0, out.rfind(b" ms/step over ")) - 1  # "\n%s\n\n" before that line
    text = out[end - total:end]
    rep.check(out[end - total - 1:end - total] == b"\n" and out[end:end + 2] == b"\n\n" and
              text.startswith(prompt), f"the final passage, {total} bytes, printed whole",
              f"found {text!r}")
    steps = max(int(f[5:13]) for f in os.listdir(run) if re.match(r"ckpt-\d{8}\.safetensors$", f))
    model = load_model(os.path.join(run, f"ckpt-{steps:08d}.safetensors"))
    check_passage(rep, "the final passage", model, text, len(prompt), Generator(seed, RNG_FINAL),
                  1.0, 0)


def sample_flags(flags):
    ap = argparse.ArgumentParser(prog="gpt sample")
    for name, kind in (("ckpt", str), ("seed", int), ("temperature", float), ("top-k", int),
                       ("bytes", int), ("prompt", str)):
        ap.add_argument("--" + name, type=kind, required=True)
    ap.add_argument("--num-samples", type=int, default=1)
    return ap.parse_args(shlex.split(flags))


def check_sample(rep, output, flags):
    """gpt sample's output: one passage and a newline, or each of several
    after its header line, a blank line between them."""
    f = sample_flags(flags)
    out, model, prompt = open(output, "rb").read(), load_model(f.ckpt), f.prompt.encode()
    total, at = max(len(prompt), f.bytes), 0
    for i in range(f.num_samples):
        what = f"gpt sample --seed {f.seed} --temperature {f.temperature:g} --top-k {f.top_k}"
        if f.num_samples > 1:
            what += f", passage {i + 1}"
            head = (b"\n" if i else b"") + (f"==== passage {i + 1} of {f.num_samples} (seed "
                                            f"{f.seed + i}) ====\n").encode()
            at += len(head) if out.startswith(head, at) else 0
        text, at = out[at:at + total], at + total + 1
        rep.check(text.startswith(prompt) and len(text) == total and out[at - 1:at] == b"\n",
                  f"{what}: {total} bytes printed", f"found {out!r}")
        check_passage(rep, what, model, text, len(prompt), Generator(f.seed + i, RNG_SAMPLE),
                      f.temperature, f.top_k)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--train-output", required=True)
    ap.add_argument("--final-bytes", type=int, required=True)
    ap.add_argument("--sample", nargs=2, action="append", default=[],
                    metavar=("OUTPUT", "FLAGS"))
    a = ap.parse_args()
    torch.set_num_threads(1)
    rep = Report()
    data = open(a.data, "rb").read()
    out = open(a.train_output, "rb").read()
    check_evals(rep, a.run, data, out)
    check_final(rep, a.run, out, a.final_bytes)
    for output, flags in a.sample:
        check_sample(rep, output, flags)
    print(f"note: {rep.near_draws} of {rep.draws} draws within fp32 rounding of a CDF boundary, "
          f"{rep.near_losses} test losses within it of a 4th decimal's rounding boundary (the "
          "accepted: lines say where rounding chose otherwise)")
    return 1 if rep.failed else 0


if __name__ == "__main__":
    sys.exit(main())
