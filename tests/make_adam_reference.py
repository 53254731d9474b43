"""Writes tests/adam_reference.h, the numbers tests/test_optim.c holds the
project's Adam to (run with Debian's python3-torch:
/usr/bin/python3 tests/make_adam_reference.py).

torch.optim.Adam (lr 0.01, betas (0.9, 0.999), eps 1e-8, float32, the
single-tensor path) runs STEPS steps on N parameters. The gradients are
chosen so that each hyperparameter shows in the result: their sizes span
1e-9 to 1e2 (below about 1e-7, eps is most of the denominator), some
change sign from step to step (beta1 sets how much of the old direction
is kept) and their sizes swing by up to 40x between steps (beta2 sets how
fast the denominator follows). The header holds the start, the gradients
and, after every step, the parameters and both moments, as hex floats
(exact). A float64 run of the same steps must agree, or the reference is
unsound."""
import os
import random

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
N, STEPS, LR = 36, 6, 0.01


def inputs():
    """The start (float32 [N]) and the gradients (float32 [STEPS, N])."""
    rnd = random.Random(5)
    p0 = [rnd.choice((-1, 1)) * rnd.uniform(0.05, 0.5) for _ in range(N)]
    swings = ((1, 1, 1, 1, 1, 1),          # steady: the plain case
              (1, -1, 1, -1, 1, -1),       # sign flips every step: beta1
              (1, 0.05, 2, -0.1, 0.5, -3))  # sizes swing, signs change: beta2
    grads = [[0.0] * N for _ in range(STEPS)]
    for i in range(N):
        size = 10.0 ** (-9 + i % 12)       # 1e-9 .. 1e2
        for s in range(STEPS):
            grads[s][i] = size * swings[i // 12][s] * rnd.uniform(0.7, 1.3)
    return torch.tensor(p0, dtype=torch.float32), torch.tensor(grads, dtype=torch.float32)


def run(p0, grads, dtype):
    """Adam's parameters and moments after each step: three [STEPS, N]."""
    p = torch.nn.Parameter(p0.to(dtype).clone())
    opt = torch.optim.Adam([p], lr=LR, betas=(0.9, 0.999), eps=1e-8, foreach=False)
    ps, ms, vs = [], [], []
    for s in range(STEPS):
        p.grad = grads[s].to(dtype).clone()
        opt.step()
        state = opt.state[p]
        ps.append(p.detach().clone())
        ms.append(state["exp_avg"].clone())
        vs.append(state["exp_avg_sq"].clone())
    return torch.stack(ps), torch.stack(ms), torch.stack(vs)


def hexf(x):
    """A float32 value as a C hex float literal (exact)."""
    h = float(x).hex()
    if h in ("0x0.0p+0", "-0x0.0p+0"):
        return h[:-3] + "f"
    mant, exp = h.split("p")
    return mant.rstrip("0").rstrip(".") + "p" + exp + "f"


def array(name, t):
    """A C array of t's values: [ADAM_N], or one row of [ADAM_N] a step."""
    def rows(r, indent):
        vals = [hexf(v) for v in r.tolist()]
        return "\n".join(indent + ", ".join(vals[k:k + 4]) + "," for k in range(0, N, 4))
    if t.dim() == 1:
        return f"static const float {name}[ADAM_N] = {{\n{rows(t, '    ')}\n}};"
    body = "\n".join("    {\n" + rows(r, "        ") + "\n    }," for r in t)
    return f"static const float {name}[ADAM_STEPS][ADAM_N] = {{\n{body}\n}};"


def main():
    torch.set_num_threads(1)
    p0, grads = inputs()
    ps, ms, vs = run(p0, grads, torch.float32)
    # the float32 run must agree with a float64 twin, or the reference is unsound
    p64, m64, v64 = run(p0, grads, torch.float64)
    moved = (p64 - p0.double()).abs().max(dim=0).values
    assert ((ps.double() - p64).abs() <= 1e-5 * moved + 1e-7).all()
    size = grads.double().abs().max(dim=0).values
    assert ((ms.double() - m64).abs() <= 1e-6 * size).all()
    assert ((vs.double() - v64).abs() <= 1e-6 * size * size).all()
    text = [f"/* tests/adam_reference.h: written by tests/make_adam_reference.py with torch "
            f"{torch.__version__};",
            " * do not edit. torch.optim.Adam (lr 0.01, betas (0.9, 0.999), eps 1e-8,",
            " * float32) from adam_p0 with the gradients adam_grad: the parameters and",
            " * moments after each step. */",
            f"#define ADAM_N {N}", f"#define ADAM_STEPS {STEPS}", f"#define ADAM_LR {LR}f",
            array("adam_p0", p0), array("adam_grad", grads), array("adam_want_p", ps),
            array("adam_want_m", ms), array("adam_want_v", vs)]
    with open(os.path.join(HERE, "adam_reference.h"), "w") as f:
        f.write("\n".join(text) + "\n")


if __name__ == "__main__":
    main()
