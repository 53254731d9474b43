"""gpt train's steps held to a float64 PyTorch reference (tests/test_accum.c
runs it with Debian's python3-torch):

  /usr/bin/python3 tests/accum_check.py init DIR --context C --embed E --mlp M --heads H --layers L
      writes DIR/init-128.safetensors and DIR/init-256.safetensors, PyTorch's
      initial weights of that shape for either vocabulary, for gpt train --init
  /usr/bin/python3 tests/accum_check.py check DIR RUN...
      for each RUN: DIR/RUN/ (the run's --out: its last checkpoint and
      metrics.jsonl), DIR/RUN.log (what it printed) and DIR/RUN.windows (the
      windows each step drew, uint8 [steps][batch x grad-accum][seq]); the
      run started from DIR/init-VOCAB.safetensors. Prints one line a run,
      "RUN: ok ..." with the worst errors, or "RUN: FAIL ..." naming the
      first number off; exits 1 if any failed.

The reference takes, every step, the mean loss over all of the step's
windows (all N micro-batches of --batch), its gradient, and one step of
torch.optim.Adam (betas 0.9/0.999, eps 1e-8, the run's --lr), all in
float64: what one step of N x --batch windows means, with nothing of how
gpt splits it over micro-batches, cores, ranks or shards."""
import argparse
import json
import os
import re
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference_model import GPT, load_safetensors, save_safetensors  # noqa: E402

SHAPE = ("context", "embed", "mlp", "heads", "layers")
# Adam's betas as gpt holds them, float32 0.9f and 0.999f: 1 - 0.999f is
# 1.3e-5 below 0.001, which would otherwise be all of v's error.
BETAS = tuple(torch.tensor(b, dtype=torch.float32).item() for b in (0.9, 0.999))

# ---- tolerances: what float32 rounding allows, and why ----
# The loss: gpt sums float32 per-row losses over a few hundred rows;
# measured within 1.5e-7 of float64. 1e-5 is 60x that; a mean divided by
# a wrong count (2 for 3 micro-batches: 1.5x) or over one micro-batch
# alone is off by far more.
LOSS_REL = 1e-5
# The printed loss has 4 decimals: half a unit of the last, plus LOSS_REL.
PRINTED_ABS = 0.5e-4
# Adam's moments after 3 steps, each tensor's worst error over its largest
# element: m is 0.1 x the gradient at step 1, v 0.001 x its square, and a
# float32 gradient summed over every window and position is measured
# within 6e-7 (m) and 1.1e-6 (v, squared) of float64. 2e-5 is 18x that;
# a gradient scaled by 3/2 or 3/4 is off by 1e-1 or more.
MOMENT_REL = 2e-5
# A weight moves about lr a step (Adam divides m by sqrt(v): about +-1 an
# element), so its error is counted in units of lr. m/sqrt(v) moves by
# the gradient's relative error, most where a gradient is small next to
# its tensor's rounding: measured 1.6e-4 lr after 3 steps; 1e-2 is 60x.
WEIGHT_LR = 1e-2


def init(args):
    """PyTorch's initial weights of the shape, for vocab 128 and 256."""
    torch.manual_seed(59)
    cfg = {k: getattr(args, k) for k in SHAPE}
    for vocab in (128, 256):
        model = GPT(vocab=vocab, **cfg)
        params = dict(model.named_parameters())
        state = {k: v for k, v in model.state_dict().items() if k in params}
        save_safetensors(os.path.join(args.dir, f"init-{vocab}.safetensors"), state,
                         dict(written_by="torch " + torch.__version__))


def last_checkpoint(run_dir):
    names = sorted(n for n in os.listdir(run_dir) if re.fullmatch(r"ckpt-\d{8}\.safetensors", n))
    if not names:
        raise ValueError(f"{run_dir}: no checkpoint")
    return os.path.join(run_dir, names[-1])


def logged_losses(run_dir):
    """The loss of every step, from metrics.jsonl (9 digits)."""
    losses = {}
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            rec = json.loads(line)
            if rec.get("kind") == "step":
                losses[rec["step"]] = rec["loss"]
    return losses


def printed_losses(log):
    """The train loss of each eval line, "step      0 | train 5.0175 | ..."."""
    with open(log, errors="replace") as f:
        return {int(m.group(1)): float(m.group(2))
                for m in re.finditer(r"^step +(\d+) \| train ([0-9.]+) \|", f.read(), re.M)}


class Mismatch(Exception):
    pass


def reference(cfg, init_path, windows, lr):
    """float64: the loss of each step before its update, then the model and
    its optimizer after the last."""
    model = GPT(vocab=cfg["vocab"], **{k: cfg[k] for k in SHAPE}).double()
    tensors, _ = load_safetensors(init_path)
    missing, unexpected = model.load_state_dict({k: v.double() for k, v in tensors.items()},
                                                strict=False)
    buffers = dict(model.named_buffers())
    if unexpected or any(k not in buffers for k in missing):
        raise Mismatch(f"{init_path}: not this model's weights ({unexpected or missing})")
    opt = torch.optim.Adam(model.parameters(), lr=lr, betas=BETAS, eps=1e-8, foreach=False)
    losses = []
    for batch in windows:
        opt.zero_grad()
        loss = model.loss(batch)
        losses.append(loss.item())
        loss.backward()
        opt.step()
    return losses, model, opt


def compare_losses(ref, logged, printed):
    worst = [0.0, 0.0]
    for step, want in enumerate(ref):
        if step not in logged or step not in printed:
            raise Mismatch(f"step {step}: no loss logged or printed")
        rel = abs(logged[step] - want) / want
        off = abs(printed[step] - want)
        if rel > LOSS_REL:
            raise Mismatch(f"step {step}: logged loss {logged[step]:.7f}, the float64 reference "
                           f"over all the step's windows {want:.7f} (relative error {rel:.1e})")
        if off > PRINTED_ABS + LOSS_REL * want:
            raise Mismatch(f"step {step}: printed loss {printed[step]:.4f}, the float64 "
                           f"reference {want:.7f}")
        worst = [max(worst[0], rel), max(worst[1], off)]
    return worst


def compare_state(tensors, model, opt, lr):
    """The worst errors of m and v (of each tensor's largest) and of the
    weights (in lr units)."""
    worst = {"m": 0.0, "v": 0.0, "w": 0.0}
    for name, p in model.named_parameters():
        st = opt.state[p]
        m, v = st["exp_avg"], st["exp_avg_sq"]
        for key, want in (("m", m), ("v", v)):
            got = tensors[f"_gpt.adam_{key}.{name}"].double()
            scale = want.abs().max().item() or 1.0
            err = (got - want).abs().max().item() / scale
            if err > MOMENT_REL:
                raise Mismatch(f"Adam's {key} of {name}: {err:.1e} of its largest element "
                               f"from the float64 reference (largest: {scale:.3e} want, "
                               f"{got.abs().max().item():.3e} got)")
            worst[key] = max(worst[key], err)
        err = (tensors[name].double() - p.detach()).abs().max().item() / lr
        if err > WEIGHT_LR:
            raise Mismatch(f"{name}: weights {err:.1e} lr from the float64 reference")
        worst["w"] = max(worst["w"], err)
    return worst


def check_run(top, run):
    run_dir = os.path.join(top, run)
    tensors, meta = load_safetensors(last_checkpoint(run_dir))
    cfg = {k: int(meta[k]) for k in SHAPE + ("vocab",)}
    steps, seq = int(meta["step"]), int(meta["seq"])
    windows = int(meta["batch"]) * int(meta.get("grad-accum", 1))
    lr = float(meta["lr"])
    with open(os.path.join(top, run + ".windows"), "rb") as f:
        raw = f.read()
    if len(raw) != steps * windows * seq:
        raise Mismatch(f"{run}.windows has {len(raw)} bytes, want {steps} x {windows} x {seq}")
    batches = torch.tensor(list(raw), dtype=torch.int64).reshape(steps, windows, seq)
    init_path = os.path.join(top, f"init-{cfg['vocab']}.safetensors")
    losses, model, opt = reference(cfg, init_path, batches, lr)
    loss_err, printed_err = compare_losses(losses, logged_losses(run_dir),
                                           printed_losses(os.path.join(top, run + ".log")))
    w = compare_state(tensors, model, opt, lr)
    return (f"ok after {steps} steps of {windows} windows: loss {loss_err:.1e} relative, printed "
            f"{printed_err:.1e}; m {w['m']:.1e}, v {w['v']:.1e} of each tensor's largest; "
            f"weights {w['w']:.1e} lr")


def check(args):
    failed = 0
    for run in args.runs:
        try:
            print(f"{run}: {check_run(args.dir, run)}")
        except (Mismatch, ValueError, OSError, KeyError) as e:
            failed = 1
            print(f"{run}: FAIL {e}")
    return failed


def main():
    torch.set_num_threads(1)
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("init")
    a.add_argument("dir")
    for k in SHAPE:
        a.add_argument("--" + k, type=int, required=True)
    c = sub.add_parser("check")
    c.add_argument("dir")
    c.add_argument("runs", nargs="+")
    args = ap.parse_args()
    if args.cmd == "init":
        init(args)
        return 0
    return check(args)


if __name__ == "__main__":
    sys.exit(main())
