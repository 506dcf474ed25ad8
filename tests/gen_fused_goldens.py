#!/usr/bin/python3
"""Writes tests/goldens/modules_fused.json: MultiHeadAttention goldens that nabla runs through
its fused attention (nb_f_attention), read by tests/test_mha_fused.c.

Run it with Debian's PyTorch (apt-get install python3-torch), from anywhere:

    /usr/bin/python3 tests/gen_fused_goldens.py

The module goldens of tests/gen_module_goldens.py all ask for the attention weights, which
sends nb_mha_forward down the op-by-op path. These cases ask for none, so nabla takes the fused
op, and they are chosen around its kernel switches (autograd/attention.c): the float32
small-head kernels (at most 16 keys and 64 queries, head_dim up to 64, no mask), the rows
kernel (rows * T_k * head_dim <= 64^3, rows being T_q, or 64 in the memory-efficient path's
blocks) and the full GEMM past it, causal blocks of 32 query rows (causal self-attention
longer than 32), and the softmax's short rows (at most 32 keys). Each switch has a case on
each side. The C test runs every case on both sides of the last switch, the kept
probabilities and the memory-efficient path. Also causal, key padding (with a fully padded sequence),
an attention mask with a fully blocked row, cross-attention with T_q != T_k, head dims from 1
to 64, float32 and float64, and three cases whose inputs are scaled by 1e3.

The reference is the tutorials' MultiHeadAttention of tests/gen_module_goldens.py with the
same parameter names, built in float32 right after torch.manual_seed(seed) (the f64 case uses
the same parameters widened), inputs and grad_output drawn from a generator seeded by a hash
of the case label, in double, rounded for f32.

What PyTorch gives and what nabla gives differ in one place: a query whose keys are all
blocked (a fully padded sequence, or a row the masks block entirely). PyTorch's softmax makes
its row NaN, and the NaN reaches every gradient through the shared weights; nabla gives it
zero weights and zero gradient. So:
  * "output" is PyTorch's own forward: NaN in exactly those query rows. The C test compares
    the other rows and checks that nabla's rows there are out_proj.bias (a zero context).
  * the gradients are PyTorch's gradients of nabla's function: the reference unblocks those
    rows before the softmax and multiplies them by 0 after it (gen_module_goldens.py's rule),
    so no NaN reaches them. Cases without such rows have no NaN anywhere and the two
    references agree.

Scaled cases ("inputs x 1e3"): x is drawn, multiplied by 1e3, then rounded. Their f32 case
holds the float64 results rounded to float32, so nabla's float32 is compared with the exact
answer, the bar PyTorch's own float32 meets: "pytorch_f32_worst" is the worst error of
PyTorch's float32 run over the same tolerance (golden_compare's), which must be at most 1 or
this script stops.

Format: {"generator", "torch", "cases": [case, ...]} with
    case = {"name": "<label> <dtype>", "dtype", "seed", "scale",
            "config": {"d_in", "d_out", "num_heads", "qkv_bias"}, "forward": {"causal"},
            f32 only: "parameters": [tensor + {"name"}] (state_dict order),
                      "inputs": [tensor + {"name", "requires_grad"}]
                      ("x", or "x_q" and "x_kv"; then "key_padding_mask", "attn_mask"),
                      "grad_output": tensor,
            f64 only: "parameters_and_inputs_of": the f32 twin's name (its parameters, inputs
                      and grad_output, widened),
            "output": tensor,
            "parameter_grads", "input_grads": [tensor + {"name"}],
            "pytorch_f32_worst": number (scaled f32 cases only)}
Tensors are {"dtype", "shape", "data"} as in tests/golden_json.py ("nan" for NaN), except that
float32 data is written as the shortest decimal that reads back (strtod, then a cast to float)
to the same float32, and float64 results (outputs and gradients, not inputs) to 13
significant digits (within 5e-14 relative, far below the 1e-10 tolerance): a third of the
size.
"""
import copy
import math
import os
import struct
import zlib

import torch

from gen_module_goldens import MultiHeadAttention
from golden_json import tensor_json, write_json

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "goldens", "modules_fused.json")


def as_float32(x):
    """What a C reader makes of the double x: strtod, then a cast to float."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


class Float32(float):
    """A float32 value that prints as the shortest decimal the C reader turns back into it
    (parsed to double, then cast to float), instead of the 17 digits of its widened double:
    float32 data takes about half the space."""

    def __repr__(self):
        x = float(self)
        for digits in range(6, 10):
            text = f"{x:.{digits}g}"
            if as_float32(float(text)) == x:
                return text
        return float.__repr__(x)


class Float64Result(float):
    """A float64 result (an output or a gradient, never an input) printed to 13 significant
    digits: 5e-14 relative at most, 2000 times below the float64 tolerance (1e-10)."""

    def __repr__(self):
        return f"{float(self):.13g}"


def compact(tensor_spec, result):
    """tensor_json's spec with float32 data printed by Float32, float64 results by
    Float64Result."""
    kind = Float32 if tensor_spec["dtype"] == "f32" else Float64Result if result else None
    if kind and tensor_spec["dtype"] in ("f32", "f64"):
        tensor_spec["data"] = [v if isinstance(v, str) or math.isnan(v) else kind(v)
                               for v in tensor_spec["data"]]
    return tensor_spec


def tensor_spec(t, result=True, **extra):
    return dict(extra, **compact(tensor_json(t), result))


def reads_back(written, parsed):
    """write_json's check for the compact numbers: as the C reader reads them."""
    if isinstance(written, Float32):
        return as_float32(parsed) == float(written)
    if isinstance(written, Float64Result):
        return abs(parsed - written) <= 5e-13 * abs(written)
    return None


def worst_ratio(got, want):
    """golden_compare's worst error over tolerance for float32 (rtol 1e-5, atol 1e-6 x scale)."""
    want = want.double()
    scale = max(1.0, want.abs().max().item())
    tol = 1e-5 * want.abs() + 1e-6 * scale
    return ((got.double() - want).abs() / tol).max().item()


CASES = []


def fused_case(label, seed, heads, head_dim, d_in, batch, t_q, t_k=None, causal=False,
               qkv_bias=False, key_padding=None, attn_mask=None, scale=1.0):
    """One case in f32 and f64. t_k None: self-attention on x; else cross-attention."""
    d_out = heads * head_dim
    torch.manual_seed(seed)
    base = MultiHeadAttention(d_in, d_out, heads, qkv_bias)
    g = torch.Generator().manual_seed(zlib.crc32(label.encode()))
    cross = t_k is not None
    shapes = {"x_q": [batch, t_q, d_in], "x_kv": [batch, t_k, d_in]} if cross else \
        {"x": [batch, t_q, d_in]}
    draws = {n: torch.randn(s, generator=g, dtype=torch.float64) * scale
             for n, s in shapes.items()}
    masks = {}
    if key_padding is not None:
        masks["key_padding_mask"] = torch.tensor(key_padding, dtype=torch.bool)
    if attn_mask is not None:
        masks["attn_mask"] = torch.tensor(attn_mask, dtype=torch.bool)
    grad_out = torch.randn(batch, t_q, d_out, generator=g, dtype=torch.float64).float().double()
    config = {"d_in": d_in, "d_out": d_out, "num_heads": heads, "qkv_bias": qkv_bias}

    def run(dtype, plain):
        """(output, parameter grads, input grads) of the module in dtype."""
        m = copy.deepcopy(base).to(dtype)
        xs = {n: d.to(torch.float32).to(dtype).requires_grad_(True) for n, d in draws.items()}
        x_q = xs["x_q"] if cross else xs["x"]
        x_kv = xs["x_kv"] if cross else x_q
        kw = dict(causal=causal, key_padding_mask=masks.get("key_padding_mask"),
                  attn_mask=masks.get("attn_mask"))
        out = m(x_q, x_kv, zero_dead_rows=not plain, **kw)
        if plain:
            return m, xs, out.detach(), None, None
        (out * grad_out.to(dtype)).sum().backward()
        return m, xs, out.detach(), [p.grad for p in m.parameters()], [x.grad for x in xs.values()]

    for dt, dtype in (("f32", torch.float32), ("f64", torch.float64)):
        m, xs, out_rule, pgrads, xgrads = run(dtype, plain=False)
        _, _, out_plain, _, _ = run(dtype, plain=True)
        dead = torch.isnan(out_plain)
        # The two references agree wherever PyTorch's own forward is defined.
        assert torch.equal(out_plain[~dead], out_rule[~dead]), label
        assert not any(torch.isnan(t).any() for t in pgrads + xgrads), label
        entry_out, entry_pgrads, entry_xgrads = out_plain, pgrads, xgrads
        extra = {}
        if scale != 1.0 and dt == "f32":
            # The exact answer (float64), rounded once; PyTorch's float32 must meet the bar.
            _, _, out64, pgrads64, xgrads64 = run(torch.float64, plain=False)
            worst = max([worst_ratio(out_rule, out64)] +
                        [worst_ratio(a, b) for a, b in zip(pgrads + xgrads, pgrads64 + xgrads64)])
            if worst > 1:
                names = ["output"] + [n for n, _ in m.named_parameters()] + list(xs.keys())
                got, want = [out_rule] + pgrads + xgrads, [out64] + pgrads64 + xgrads64
                for n, a, b in zip(names, got, want):
                    print(f"    {n}: {worst_ratio(a, b):.3g}")
            _, _, out_plain64, _, _ = run(torch.float64, plain=True)
            entry_out = out_plain64.float()
            entry_pgrads = [t.float() for t in pgrads64]
            entry_xgrads = [t.float() for t in xgrads64]
            extra["pytorch_f32_worst"] = worst
            print(f"  {label}: PyTorch float32 at {worst:.3g} x tolerance of float64")
        entry = {"name": f"{label} {dt}", "dtype": dt, "seed": seed, "scale": scale,
                 "config": config, "forward": {"causal": causal}}
        if dt == "f32":
            inputs = [tensor_spec(x, False, name=n, requires_grad=True) for n, x in xs.items()]
            inputs += [tensor_spec(t, False, name=n, requires_grad=False)
                       for n, t in masks.items()]
            entry["parameters"] = [tensor_spec(p, False, name=n)
                                   for n, p in m.state_dict(keep_vars=True).items()]
            entry["inputs"] = inputs
            entry["grad_output"] = tensor_spec(grad_out.to(dtype), False)
        else:  # the same values widened: the reader takes them from the f32 twin
            entry["parameters_and_inputs_of"] = f"{label} f32"
        entry.update({
            "output": tensor_spec(entry_out),
            "parameter_grads": [tensor_spec(gr, name=n) for (n, _), gr in
                                zip(m.named_parameters(), entry_pgrads)],
            "input_grads": [tensor_spec(gr, name=n) for n, gr in zip(xs.keys(), entry_xgrads)],
            **extra,
        })
        CASES.append(entry)


def main():
    # The float32 small-head kernels and their limits (16 keys, 64 queries, head_dim <= 64).
    fused_case("small heads, causal, T 16, head_dim 8", 21, 2, 8, 3, 1, 16, causal=True)
    fused_case("17 keys (past the small heads), causal, head_dim 4", 22, 2, 4, 3, 2, 17,
               causal=True)
    fused_case("head_dim 1, 3 heads, T 5", 23, 3, 1, 3, 2, 5)
    fused_case("head_dim 64, T 2, causal", 24, 1, 64, 1, 1, 2, causal=True)
    fused_case("head_dim 33, cross T_q 3 T_k 5, causal", 25, 1, 33, 1, 1, 3, t_k=5,
               causal=True)
    fused_case("cross T_q 64 T_k 8 (the small heads' last query count)", 26, 2, 2, 2, 1, 64,
               t_k=8, qkv_bias=True)
    fused_case("cross T_q 65 T_k 8 (past it)", 27, 2, 2, 2, 1, 65, t_k=8, qkv_bias=True)
    fused_case("cross T_q 3 T_k 20, qkv_bias", 28, 2, 4, 3, 2, 3, t_k=20, qkv_bias=True)
    # Short softmax rows (<= 32 keys) and causal blocks of 32 query rows (T > 32).
    fused_case("causal T 32 (short rows, one block)", 29, 1, 4, 2, 1, 32, causal=True)
    fused_case("causal T 33 (long rows, blocks of 32)", 30, 1, 4, 2, 1, 33, causal=True)
    fused_case("T 33, key padding", 31, 1, 4, 2, 2, 33,
               key_padding=[[False] * 30 + [True] * 3, [True] * 5 + [False] * 28])
    # The rows kernel up to T_q T_k head_dim = 64^3, the full GEMM past it (with causal blocks).
    fused_case("causal T 513, head_dim 1 (the full GEMM)", 33, 1, 1, 1, 1, 513, causal=True)
    # 64 query rows (the memory-efficient path's block): 64 x 256 x 16 is the rows kernel's
    # last size, 64 x 257 x 16 the GEMM, on both paths.
    fused_case("cross T_q 64 T_k 256, head_dim 16 (the rows kernel's last size)", 42, 1, 16, 1,
               1, 64, t_k=256)
    fused_case("cross T_q 64 T_k 257, head_dim 16, key padding (the GEMM, masked)", 43, 1, 16,
               1, 1, 64, t_k=257, key_padding=[[i % 7 == 3 for i in range(257)]])
    # Masks: a fully padded sequence, a row blocked by causal + padding, a fully blocked row.
    fused_case("key padding, one sequence fully padded", 35, 2, 3, 4, 2, 5,
               key_padding=[[False, False, False, True, True], [True] * 5])
    fused_case("causal and left padding (query 0 sees nothing)", 36, 2, 4, 3, 2, 6, causal=True,
               key_padding=[[False] * 5 + [True], [True] + [False] * 5])
    fused_case("attention mask with a fully blocked row", 37, 2, 4, 3, 1, 4,
               attn_mask=[[False, True, False, False], [True, True, True, True],
                          [False, False, True, True], [False, False, False, False]])
    fused_case("cross T_q 4 T_k 9, key padding, one sequence fully padded", 38, 2, 4, 3, 2, 4,
               t_k=9, key_padding=[[False] * 6 + [True] * 3, [True] * 9], qkv_bias=True)
    # Inputs scaled by 1e3: each kernel family against the exact answer.
    fused_case("inputs x 1e3, small heads, causal T 16", 39, 2, 8, 3, 1, 16, causal=True,
               scale=1e3)
    fused_case("inputs x 1e3, rows kernel, T 40", 40, 2, 4, 2, 1, 40, scale=1e3)
    fused_case("inputs x 1e3, full GEMM, causal T 513, head_dim 1", 41, 1, 1, 1, 1, 513,
               causal=True, scale=1e3)
    write_json(OUT, {"generator": "tests/gen_fused_goldens.py", "torch": str(torch.__version__),
                     "cases": CASES}, reads_back)
    print(f"{os.path.relpath(OUT)}: {len(CASES)} cases, {os.path.getsize(OUT) // 1024} KB")


if __name__ == "__main__":
    main()
