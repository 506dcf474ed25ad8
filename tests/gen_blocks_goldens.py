#!/usr/bin/python3
"""Writes the PyTorch goldens of the Llama-style blocks (nn/blocks/):
tests/goldens/blocks.json.

Run it with Debian's PyTorch (apt-get install python3-torch), from anywhere:

    /usr/bin/python3 tests/gen_blocks_goldens.py

The JSON is committed; tests/test_blocks.c reads it with jansson (tests/golden.c) and needs
no Python. Rerun it only when a case or a reference below changes, and commit both.

The references are written here from the formulas, not taken from a library:
  * RMSNorm: x * rsqrt(mean(x^2, -1) + eps) * weight (Llama's formula).
  * RoPE, rotate-half convention (as Hugging Face's Llama): for head dim hd and pair
    i < hd/2, inv_freq_i = base^(-2i/hd); position p rotates the pair (x_i, x_{i+hd/2}) by
    angle p * inv_freq_i: out = x * cos + rotate_half(x) * sin with rotate_half(x) =
    cat(-x[hd/2:], x[:hd/2]) and cos, sin tables repeated over both halves. Positions start at
    a given offset (a KV-cache user rotates position t > 0). The tables are computed in
    float64 and rounded to the case's dtype, as nn/blocks/rope.c does.
  * SwiGLU: w2(silu(w1(x)) * w3(x)), no biases.
  * Grouped-query attention: wq, wk, wv, wo without biases, n_kv_heads dividing n_heads,
    RoPE on q and k, k and v heads repeated with repeat_interleave (query head h reads kv
    head h // (n_heads / n_kv_heads)), scaled dot-product with nabla's masks (true = blocked,
    key padding [B, T_k], causal; a row with every key blocked gets zero weights), wo.
  * The Llama-style block: h = x + attention(attention_norm(x)); out = h +
    feed_forward(ffn_norm(h)). The LM: tok_embeddings, layers.N blocks, norm, output (no
    bias), no position embedding.
Parameter names are Meta's Llama names, which the nabla modules use.

Each case is built in float32 right after torch.manual_seed(seed) with PyTorch's default
initialisation; RMSNorm weights, which start at 1, are redrawn as 1 + 0.3 N(0, 1) so a forward
that ignored them would fail. The f64 case uses the same parameters widened to double. Inputs
and the output gradient are drawn from a generator seeded by a hash of the case name.

Format: as tests/gen_module_goldens.py (case = {"name", "module", "dtype", "seed", "config",
"forward", "parameters", "inputs", "output", "grad_output", "parameter_grads",
"input_grads"}); gradients are those of sum(output * grad_output).
"""
import copy
import math
import os
import zlib

import torch
import torch.nn as nn
import torch.nn.functional as F

from golden_json import module_backward, module_case_entry, write_json

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "goldens", "blocks.json")


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(T, hd, offset, base, dtype):
    """cos, sin [T, hd] for positions offset .. offset + T - 1, in float64 then rounded."""
    inv_freq = base ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)
    angles = torch.outer(torch.arange(offset, offset + T, dtype=torch.float64), inv_freq)
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def apply_rope(x, offset, base):
    """x [..., T, hd]: positions along dim -2."""
    cos, sin = rope_tables(x.shape[-2], x.shape[-1], offset, base, x.dtype)
    return x * cos + rotate_half(x) * sin


class Rope(nn.Module):
    """RoPE as a parameterless module on [B, H, T, hd]."""

    def __init__(self, offset, base):
        super().__init__()
        self.offset, self.base = offset, base

    def forward(self, x):
        return apply_rope(x, self.offset, self.base)


class SwiGLU(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


def attend(q, k, v, causal, key_padding_mask):
    """Heads q [B, H, T, hd], k [B, H, T, hd], v [B, H, T, vd] -> [B, H, T, vd]: softmax of the
    scores over sqrt(hd) with nabla's masks (true = blocked)."""
    b, t = q.shape[0], q.shape[2]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    blocked = torch.zeros(b, 1, t, t, dtype=torch.bool)
    if causal:
        blocked = blocked | torch.ones(t, t, dtype=torch.bool).triu(1)
    if key_padding_mask is not None:
        blocked = blocked | key_padding_mask[:, None, None, :]
    # nabla: a row with every key blocked attends to nothing (PyTorch would give NaN).
    dead = blocked.all(dim=-1, keepdim=True)
    scores = scores.masked_fill(blocked & ~dead, -math.inf)
    attn = torch.softmax(scores, dim=-1) * (~dead).to(scores.dtype)
    return attn @ v


class Attention(nn.Module):
    def __init__(self, dim, n_heads, n_kv_heads, rope_base):
        super().__init__()
        assert n_heads % n_kv_heads == 0
        self.h, self.kv, self.hd = n_heads, n_kv_heads, dim // n_heads
        self.rope_base = rope_base
        self.wq = nn.Linear(dim, n_heads * self.hd, bias=False)
        self.wk = nn.Linear(dim, n_kv_heads * self.hd, bias=False)
        self.wv = nn.Linear(dim, n_kv_heads * self.hd, bias=False)
        self.wo = nn.Linear(n_heads * self.hd, dim, bias=False)

    def forward(self, x, causal=True, key_padding_mask=None, offset=0):
        b, t, _ = x.shape
        q = self.wq(x).view(b, t, self.h, self.hd).transpose(1, 2)
        k = self.wk(x).view(b, t, self.kv, self.hd).transpose(1, 2)
        v = self.wv(x).view(b, t, self.kv, self.hd).transpose(1, 2)
        q = apply_rope(q, offset, self.rope_base)
        k = apply_rope(k, offset, self.rope_base)
        group = self.h // self.kv
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
        ctx = attend(q, k, v, causal, key_padding_mask)
        ctx = ctx.transpose(1, 2).contiguous().view(b, t, self.h * self.hd)
        return self.wo(ctx)


class Block(nn.Module):
    def __init__(self, dim, n_heads, n_kv_heads, hidden, eps, rope_base):
        super().__init__()
        self.attention_norm = RMSNorm(dim, eps)
        self.attention = Attention(dim, n_heads, n_kv_heads, rope_base)
        self.ffn_norm = RMSNorm(dim, eps)
        self.feed_forward = SwiGLU(dim, hidden)

    def forward(self, x, causal=True, key_padding_mask=None):
        h = x + self.attention(self.attention_norm(x), causal, key_padding_mask)
        return h + self.feed_forward(self.ffn_norm(h))


class LlamaLM(nn.Module):
    def __init__(self, vocab, dim, n_layers, n_heads, n_kv_heads, hidden, eps, rope_base):
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(
            Block(dim, n_heads, n_kv_heads, hidden, eps, rope_base) for _ in range(n_layers))
        self.norm = RMSNorm(dim, eps)
        self.output = nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens, causal=True, key_padding_mask=None):
        x = self.tok_embeddings(tokens)
        for layer in self.layers:
            x = layer(x, causal, key_padding_mask)
        return self.output(self.norm(x))


def perturb_norms(module, g):
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, RMSNorm):
                m.weight.copy_(1 + 0.3 * torch.randn(m.weight.shape, generator=g))


CASES = []


def case(module_name, label, seed, make, config, inputs, forward=None):
    """inputs: list of (name, kind, value) with kind "float" (shape -> random normal, needs
    grad), "index" (int64 values, positional) or "mask" (bool values, keyword)."""
    forward = forward or {}
    torch.manual_seed(seed)
    base = make()
    g = torch.Generator().manual_seed(zlib.crc32(f"{module_name}|{label}".encode()))
    perturb_norms(base, g)
    draws = {}
    for name, kind, value in inputs:
        if kind == "float":
            draws[name] = torch.randn(value, generator=g, dtype=torch.float64)
        else:
            draws[name] = torch.tensor(value, dtype=torch.int64 if kind == "index" else torch.bool)
    grad_out_draw = None
    for dt, dtype in (("f32", torch.float32), ("f64", torch.float64)):
        m = copy.deepcopy(base).to(dtype)
        xs, args, kwargs = {}, [], dict(forward)
        for name, kind, _ in inputs:
            x = draws[name]
            if kind == "float":
                x = x.to(dtype).requires_grad_(True)
            xs[name] = x
            if kind == "mask":
                kwargs[name] = x
            else:
                args.append(x)
        out, grad_out, grad_out_draw = module_backward(m, args, kwargs, g, grad_out_draw, dtype,
                                                       f"{module_name} {label}")
        CASES.append(module_case_entry(f"{module_name} {label} {dt}", module_name, dt, seed,
                                       config, forward, m, xs, out, grad_out))


def main():
    case("RMSNorm", "eps 1e-5", 1, lambda: RMSNorm(8, 1e-5), {"dim": 8, "eps": 1e-5},
         [("x", "float", [2, 3, 8])])
    case("RMSNorm", "eps 0.1", 2, lambda: RMSNorm(5, 0.1), {"dim": 5, "eps": 0.1},
         [("x", "float", [4, 5])])
    case("RoPE", "base 10000", 3, lambda: Rope(0, 10000.0), {"offset": 0, "base": 10000.0},
         [("x", "float", [2, 2, 5, 8])])
    case("RoPE", "offset 7 base 100", 4, lambda: Rope(7, 100.0), {"offset": 7, "base": 100.0},
         [("x", "float", [1, 3, 4, 6])])
    case("SwiGLU", "dim 6 hidden 10", 5, lambda: SwiGLU(6, 10), {"dim": 6, "hidden": 10},
         [("x", "float", [2, 3, 6])])
    for kv, seed in ((4, 6), (2, 7), (1, 8)):
        cfg = {"dim": 16, "n_heads": 4, "n_kv_heads": kv, "rope_base": 10000.0}
        make = (lambda kv: lambda: Attention(16, 4, kv, 10000.0))(kv)
        case("Attention", f"kv {kv} causal", seed, make, cfg, [("x", "float", [2, 5, 16])],
             {"causal": True})
    cfg = {"dim": 16, "n_heads": 4, "n_kv_heads": 2, "rope_base": 500.0}
    case("Attention", "kv 2 key padding", 9, lambda: Attention(16, 4, 2, 500.0), cfg,
         [("x", "float", [2, 4, 16]),
          ("key_padding_mask", "mask", [[False, False, True, False], [False, True, True, True]])],
         {"causal": False})
    case("Attention", "kv 1 causal offset 3", 10, lambda: Attention(16, 4, 1, 10000.0),
         {"dim": 16, "n_heads": 4, "n_kv_heads": 1, "rope_base": 10000.0},
         [("x", "float", [1, 4, 16])], {"causal": True, "offset": 3})
    bcfg = {"dim": 16, "n_heads": 4, "n_kv_heads": 2, "hidden": 12, "eps": 1e-5,
            "rope_base": 10000.0}
    case("Block", "causal key padding", 11, lambda: Block(16, 4, 2, 12, 1e-5, 10000.0), bcfg,
         [("x", "float", [2, 5, 16]),
          ("key_padding_mask", "mask",
           [[False, False, False, False, False], [False, False, False, True, True]])],
         {"causal": True})
    lcfg = {"vocab": 7, "dim": 8, "n_layers": 2, "n_heads": 2, "n_kv_heads": 1, "hidden": 12,
            "eps": 1e-5, "rope_base": 10000.0}
    case("LlamaLM", "two layers causal", 12,
         lambda: LlamaLM(7, 8, 2, 2, 1, 12, 1e-5, 10000.0), lcfg,
         [("tokens", "index", [[1, 5, 6, 0, 5, 3], [2, 2, 4, 6, 1, 0]])], {"causal": True})
    write_json(OUT, {"generator": "tests/gen_blocks_goldens.py",
                     "torch": str(torch.__version__), "cases": CASES})
    print(f"{os.path.relpath(OUT)}: {len(CASES)} cases")


if __name__ == "__main__":
    main()
