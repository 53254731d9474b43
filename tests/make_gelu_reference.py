"""Writes tests/gelu_reference.h, the numbers tests/test_kernels.c holds
the GELU kernels to (run with Debian's python3-torch:
/usr/bin/python3 tests/make_gelu_reference.py).

PyTorch's GELU in its tanh approximation, nn.GELU(approximate="tanh"),
0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), and its gradient by
autograd, both in float64 at float32 inputs: -20..20 by 1/8, the
neighbourhood of zero (+-0, tiny, subnormal), where the curve turns
(-1..0 finely) and large magnitudes up to the float range's end. float64
so that the reference carries no float32 rounding of its own: the C test
measures the kernels' error, not PyTorch's."""
import os

import torch

HERE = os.path.dirname(os.path.abspath(__file__))


def inputs():
    xs = [i / 8 for i in range(-160, 161)]  # -20..20
    xs += [-1 + i / 64 for i in range(64)]  # where the curve has its minimum
    xs += [0.0, -0.0, 1e-30, -1e-30, 1e-38, -1e-38, 1e-40, -1e-40, 3e-8, -3e-8]
    xs += [1e-3, -1e-3, 0.1, -0.1, 0.7071, -0.7523, 2.5, -2.5, 5.25, -5.25, 9.5, -9.5,
           10.125, -10.125, 11, -11, 25, -25, 87.5, -87.5, 100, -100, 1e4, -1e4, 1e10,
           -1e10, 1e20, -1e20, 3e38, -3e38]
    # as float32, as the kernels see them
    return torch.tensor(xs, dtype=torch.float32)


def hexf(v, suffix):
    """C's hex float: every bit of the value, no decimal rounding."""
    return float(v).hex() + suffix if v == v else "NAN"


def main():
    x32 = inputs()
    x = x32.double().requires_grad_(True)
    y = torch.nn.GELU(approximate="tanh")(x)
    (dydx,) = torch.autograd.grad(y.sum(), x)
    n = len(x32)
    out = [f"/* tests/gelu_reference.h: written by tests/make_gelu_reference.py with torch "
           f"{torch.__version__};",
           " * do not edit. PyTorch's nn.GELU(approximate=\"tanh\") in float64 at the float32",
           " * inputs gelu_x: its values gelu_y and its derivative gelu_dydx (autograd). */",
           f"#define GELU_N {n}",
           "static const float gelu_x[GELU_N] = {"]
    out += [f"    {hexf(v, 'f')}," for v in x32.tolist()]
    out += ["};", "static const double gelu_y[GELU_N] = {"]
    out += [f"    {hexf(v, '')}," for v in y.detach().tolist()]
    out += ["};", "static const double gelu_dydx[GELU_N] = {"]
    out += [f"    {hexf(v, '')}," for v in dydx.tolist()]
    out += ["};", ""]
    with open(os.path.join(HERE, "gelu_reference.h"), "w") as f:
        f.write("\n".join(out))
    print(f"gelu_reference.h: {n} points")


if __name__ == "__main__":
    main()
