"""Writes the numbers the C tests compare against (run with Debian's
python3-torch: /usr/bin/python3 tests/make_reference.py):

  tests/ref_default.safetensors  default config (context 128, embed 32, mlp 64, 4 heads, 4 layers)
  tests/ref_odd.safetensors      an odd one (context 64, embed 48, mlp 80, 3 heads, 2 layers)
  tests/ref_gelu.safetensors     GPT-2's GELU (tanh approximation) as the MLP's activation
                                 (context 32, embed 32, mlp 64, 4 heads, 2 layers)
  tests/torch_init.safetensors   a plain state_dict of a tiny model, for --init

Each ref file holds the state_dict, a batch (ref.tokens), its logits,
loss and every gradient (ref.grad.NAME), and ten batches with the losses of
ten Adam steps on them (ref.adam_tokens, ref.adam_losses) and the weights
after those steps (ref.adam.NAME)."""
import copy
import os
import random
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference_model import GPT, save_safetensors  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
WORDS = ("the a of and to in that it his was he I you with Holmes Watson said "
         "upon which my there is had as for at be not this but by have from "
         "Baker Street, door. letter, man? night; \"Elementary,\" dear\n").split(" ")


def text_batches(count, batch, length, seed):
    """count x batch windows of pseudo-English ASCII bytes."""
    rnd = random.Random(seed)
    text = " ".join(rnd.choice(WORDS) for _ in range(count * batch * length))
    raw = torch.tensor(list(text.encode("ascii")), dtype=torch.int64)
    return raw[:count * batch * length].reshape(count, batch, length)


def reference(path, context, embed, mlp, heads, layers, seed, activation="relu"):
    torch.manual_seed(seed)
    model = GPT(context, embed, mlp, heads, layers, activation=activation)
    init = copy.deepcopy(model.state_dict())
    tokens = text_batches(1, 2, context, seed)[0]
    logits = model(tokens)
    loss = model.loss(tokens)
    loss.backward()
    # parameters only: the buffers (onehot, causal masks) are constants
    out = {k: v.clone() for k, v in init.items() if k in dict(model.named_parameters())}
    out["ref.tokens"] = tokens.to(torch.int32)
    out["ref.logits"] = logits.detach()
    out["ref.loss"] = loss.detach().reshape(1)
    for name, p in model.named_parameters():
        out["ref.grad." + name] = p.grad.clone()

    # the float32 loss must agree with a float64 twin, or the reference is unsound
    twin = copy.deepcopy(model).double()
    loss64 = twin.loss(tokens).item()
    print(f"{os.path.basename(path)}: loss float32 {loss.item():.8f} float64 {loss64:.8f}")
    assert abs(loss.item() - loss64) <= 1e-5 * abs(loss64)

    model.load_state_dict(init)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=False)
    batches = text_batches(10, 2, context, seed + 1)
    losses = []
    for s in range(10):
        opt.zero_grad()
        step_loss = model.loss(batches[s])
        losses.append(step_loss.item())
        step_loss.backward()
        opt.step()
    out["ref.adam_tokens"] = batches.to(torch.int32)
    out["ref.adam_losses"] = torch.tensor(losses, dtype=torch.float32)
    for name, p in model.named_parameters():
        out["ref.adam." + name] = p.detach().clone()
    meta = dict(vocab=128, context=context, embed=embed, mlp=mlp, heads=heads,
                layers=layers, batch=2, lr=0.001, torch=torch.__version__)
    if activation != "relu":  # absent means relu, as in gpt's checkpoints
        meta["activation"] = activation
    save_safetensors(path, out, meta)


def main():
    torch.set_num_threads(1)  # the same sums in the same order, every run
    reference(os.path.join(HERE, "ref_default.safetensors"), 128, 32, 64, 4, 4, seed=1)
    reference(os.path.join(HERE, "ref_odd.safetensors"), 64, 48, 80, 3, 2, seed=2)
    reference(os.path.join(HERE, "ref_gelu.safetensors"), 32, 32, 64, 4, 2, seed=4,
              activation="gelu")
    torch.manual_seed(3)
    tiny = GPT(32, 16, 64, 2, 1)
    save_safetensors(os.path.join(HERE, "torch_init.safetensors"), tiny.state_dict(),
                     dict(written_by="torch " + torch.__version__))


if __name__ == "__main__":
    main()
