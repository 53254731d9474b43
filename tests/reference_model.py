"""The reference model, bitesizedGPT, in PyTorch, as the C program's tests
and benchmarks see it: the same module layout and state_dict names, so a
state_dict loads either way. Also a minimal safetensors reader and writer,
so that nothing beyond Debian's python3-torch is needed."""
import json
import math
import struct

import torch
from torch import nn

VOCAB = 128


class Attention(nn.Module):
    def __init__(self, embed, heads, context):
        super().__init__()
        self.heads = heads
        self.attention = nn.Linear(embed, 3 * embed, bias=False)
        mask = torch.triu(torch.full((context, context), float("-inf")), diagonal=1)
        self.register_buffer("causal_mask", mask)

    def forward(self, x):
        B, T, C = x.shape
        hs = C // self.heads
        # per head [q | k | v], interleaved head by head
        qkv = self.attention(x).view(B, T, self.heads, 3 * hs).transpose(1, 2)
        q, k, v = qkv.split(hs, dim=-1)
        scores = q @ k.transpose(-2, -1) / math.sqrt(hs) + self.causal_mask[:T, :T]
        out = torch.softmax(scores, dim=-1) @ v
        return out.transpose(1, 2).reshape(B, T, C)


def activation_module(name):
    """The MLP's activation: the reference's ReLU, or GPT-2's GELU in its
    tanh approximation (gpt train --activation gelu). Neither has weights,
    so the state_dict is the same either way."""
    return {"relu": nn.ReLU(), "gelu": nn.GELU(approximate="tanh")}[name]


class Block(nn.Module):
    def __init__(self, embed, mlp, heads, context, activation="relu"):
        super().__init__()
        self.attention = Attention(embed, heads, context)
        self.layer_norms = nn.ModuleList([nn.LayerNorm(embed), nn.LayerNorm(embed)])
        self.compute = nn.Sequential(nn.Linear(embed, mlp), activation_module(activation),
                                     nn.Linear(mlp, embed))

    def forward(self, x):
        h = x + self.attention(self.layer_norms[0](x))
        return h + self.compute(self.layer_norms[1](h))


class DecodeTransformer(nn.Module):
    def __init__(self, context, embed, mlp, heads, layers, vocab=VOCAB, activation="relu"):
        super().__init__()
        self.token_embedding = nn.Linear(vocab, embed, bias=False)
        self.postn_embedding = nn.Linear(context, embed, bias=False)
        self.blocks = nn.Sequential(*[Block(embed, mlp, heads, context, activation)
                                      for _ in range(layers)])
        self.unembedding = nn.Sequential(nn.LayerNorm(embed), nn.Linear(embed, vocab))

    def forward(self, onehot_tokens, onehot_positions):
        x = self.token_embedding(onehot_tokens) + self.postn_embedding(onehot_positions)
        for block in self.blocks:
            x = x + block(x)  # the reference adds the residual twice
        return self.unembedding(x)


class GPT(nn.Module):
    def __init__(self, context=128, embed=32, mlp=64, heads=4, layers=4, vocab=VOCAB,
                 activation="relu"):
        super().__init__()
        self.context = context
        self.vocab = vocab  # 128: ASCII, the reference; 256: any bytes (gpt --vocab 256)
        self.register_buffer("onehot", torch.eye(vocab))
        self.decode_transformer = DecodeTransformer(context, embed, mlp, heads, layers, vocab,
                                                    activation)

    def forward(self, tokens):
        T = tokens.shape[1]
        positions = torch.eye(self.context, dtype=self.onehot.dtype)[:T]
        return self.decode_transformer(self.onehot[tokens], positions)

    def loss(self, tokens):
        logits = self(tokens)
        return nn.functional.cross_entropy(
            logits[:, :-1].reshape(-1, self.vocab), tokens[:, 1:].reshape(-1))


DTYPES = {"F32": (torch.float32, 4), "I32": (torch.int32, 4), "F64": (torch.float64, 8)}
NAMES = {v[0]: k for k, v in DTYPES.items()}


def save_safetensors(path, tensors, metadata=None):
    """Writes tensors (name -> tensor) in the order given."""
    header, blobs, at = {}, [], 0
    if metadata:
        header["__metadata__"] = {k: str(v) for k, v in metadata.items()}
    for name, t in tensors.items():
        raw = t.detach().contiguous().cpu().numpy().tobytes()
        header[name] = {"dtype": NAMES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [at, at + len(raw)]}
        blobs.append(raw)
        at += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # keeps the data 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def load_safetensors(path):
    """Returns (name -> tensor, metadata)."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", {})
    data = raw[8 + n:]
    out = {}
    for name, d in header.items():
        dtype, _ = DTYPES[d["dtype"]]
        b, e = d["data_offsets"]
        out[name] = torch.frombuffer(bytearray(data[b:e]), dtype=dtype).reshape(d["shape"])
    return out, meta
