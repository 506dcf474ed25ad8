#!/usr/bin/python3
"""Writes the PyTorch golden files for nabla's op parity test (tests/test_parity.c).

Run it with Debian's PyTorch (apt-get install python3-torch), from anywhere, after building:

    /usr/bin/python3 tests/gen_goldens.py [--registry BUILD/tests/op_registry_json]

It rewrites tests/goldens/ops_<family>.json, which are committed: the C tests read them
with jansson and need no Python. Rerun it only when cases change (an op is added to
include/nabla/ops.h, or a case below is added or edited), then commit the JSON with the
script. Each case draws its random numbers from its own generator seeded by a hash of its
name, so editing one case leaves every other case's numbers unchanged. The script refuses to
write anything unless its cases' ops are exactly the golden ops of the op registry (each
registered op's golden runners, autograd/op_def.h; the registry is read from the
op_registry_json program the build makes, default build/tests/op_registry_json), and every
function declared in include/nabla/ops.h has a case.

File format (one JSON object per family):

    {"generator": "tests/gen_goldens.py", "torch": "<version>", "cases": [case, ...]}
    case   = {"name", "op", "dtype": "f32"|"f64", "params": {...},
              "inputs": [tensor + {"name", "requires_grad"}],
              "outputs": [tensor], "grad_outputs": [tensor|null],
              "input_grads": [tensor|null]}
    tensor = {"dtype": "f32"|"f64"|"i64"|"bool", "shape": [...], "data": [row-major]}

grad_outputs holds one fixed random gradient per float output (null for integer outputs);
input_grads holds, for every input that requires grad, the gradient of
sum_k sum(outputs[k] * grad_outputs[k]) as PyTorch computes it (null for the others).
Numbers are written exactly (see tests/golden_json.py): f64 values round-trip, f32 values are
the exact float32 numbers, and +-inf and nan are the strings "inf", "-inf", "nan".

nabla conventions that differ from PyTorch are computed here by hand (look for "nabla:"):
  * masked_softmax: a row whose entries are all blocked gives zeros and zero gradient in
    nabla; PyTorch gives NaN there. Those rows are not taken from PyTorch: the script
    unblocks them before the softmax and multiplies them by 0 afterwards, so their output
    and gradient are exactly 0 and no NaN enters the backward pass.
  * cross_entropy takes the class dim last ([..., C]); PyTorch wants it second, so logits
    are flattened to [N, C] for PyTorch and the per-element losses reshaped back.
  * dropout: nabla's generator is not PyTorch's, so only the deterministic cases are
    golden: eval mode and p = 0 (identity). The random masks are tested in C.
  * layer_norm over a single element: the exact x and weight gradients are 0, but PyTorch's
    float32 backward leaves ~4e-6 of rounding residue, so that f32 case is PyTorch's float64
    result on the same float32 inputs, rounded to float32 (case(..., f32_via_f64=True)).
"""
import argparse
import json
import math
import os
import re
import subprocess
import sys
import zlib

import torch
import torch.nn.functional as F

from golden_json import TORCH_DTYPE, tensor_json, write_json

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN_DIR = os.path.join(HERE, "goldens")
OPS_H = os.path.join(HERE, "..", "include", "nabla", "ops.h")
DEFAULT_REGISTRY = os.path.join(HERE, "..", "build", "tests", "op_registry_json")

# ---- input specifications ----------------------------------------------------------------


class Float:
    """A float input drawn at random: normal, positive (uniform [0.5, 2]), away (|x| >= 0.2,
    for kinks at 0) or distinct (a shuffled ramp with gaps of 0.1, for max: no ties)."""

    def __init__(self, name, shape, domain="normal", grad=True, scale=1.0):
        self.name, self.shape, self.domain, self.grad = name, list(shape), domain, grad
        self.scale = scale

    def make(self, g, dtype):
        shape, n = self.shape, math.prod(self.shape)
        if self.domain == "normal":
            x = torch.randn(shape, generator=g, dtype=torch.float64)
        elif self.domain == "positive":
            x = 0.5 + 1.5 * torch.rand(shape, generator=g, dtype=torch.float64)
        elif self.domain == "away":
            x = torch.randn(shape, generator=g, dtype=torch.float64)
            x = x + 0.2 * torch.where(x >= 0, 1.0, -1.0).double()
        elif self.domain == "distinct":
            ramp = 0.1 * torch.arange(n, dtype=torch.float64) - 0.05 * n
            x = ramp[torch.randperm(n, generator=g)].view(shape)
        else:
            raise ValueError(self.domain)
        return (self.scale * x).to(dtype).requires_grad_(self.grad)


class Fixed:
    """An input with given values (index tensors, masks), or random integers in [low, high)."""

    def __init__(self, name, dtype, values=None, shape=None, low=0, high=None):
        self.name, self.dtype, self.values = name, dtype, values
        self.shape, self.low, self.high, self.grad = shape, low, high, False

    def make(self, g, _dtype):
        if self.values is not None:
            return torch.tensor(self.values, dtype=TORCH_DTYPE[self.dtype])
        return torch.randint(self.low, self.high, self.shape, generator=g)


def Index(name, values=None, shape=None, low=0, high=None):
    return Fixed(name, "i64", values, shape, low, high)


def Mask(name, values):
    return Fixed(name, "bool", values)


# ---- cases ---------------------------------------------------------------------------------

FAMILIES = {}  # family -> list of case dicts
COVERED = set()


def case(family, op, label, inputs, fn, params=None, dtypes=("f32", "f64"), f32_via_f64=False):
    """Adds one case per dtype. fn(list of input tensors, params) returns the output tensor
    or a tuple of outputs, computed by PyTorch with nabla's semantics. With f32_via_f64 the
    f32 case is computed by PyTorch in float64 on the same float32 inputs and output gradient,
    then rounded to float32 (for cases where float32 PyTorch leaves rounding residue where
    the exact answer is 0)."""
    params = params or {}
    COVERED.add(op)
    for dt in dtypes:
        dtype = TORCH_DTYPE[dt]
        g = torch.Generator().manual_seed(zlib.crc32(f"{op}|{label}".encode()))
        xs = [spec.make(g, dtype) for spec in inputs]
        via = f32_via_f64 and dt == "f32"
        xs_ref = [x.detach().double().requires_grad_(x.requires_grad)
                  if via and x.is_floating_point() else x for x in xs]
        outs = fn(xs_ref, params)
        outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
        grad_outs = [torch.randn(o.shape, generator=g, dtype=torch.float64).to(dtype).to(o.dtype)
                     if o.is_floating_point() else None for o in outs]
        wrt = [x for x in xs_ref if x.requires_grad]
        loss = sum((o * go).sum() for o, go in zip(outs, grad_outs) if go is not None)
        grads = iter(torch.autograd.grad(loss, wrt)) if wrt else iter(())
        input_grads = [next(grads) if x.requires_grad else None for x in xs_ref]
        if via:
            def narrow(t):
                return t.float() if t is not None and t.is_floating_point() else t
            outs, grad_outs, input_grads = ([narrow(t) for t in ts]
                                            for ts in (outs, grad_outs, input_grads))
        for t in outs + [gr for gr in input_grads if gr is not None]:
            if t.is_floating_point() and not torch.isfinite(t).all() and op != "masked_fill":
                sys.exit(f"gen_goldens: {op} {label} {dt}: non-finite values from PyTorch")
        FAMILIES.setdefault(family, []).append({
            "name": f"{op} {dt} {label}",
            "op": op,
            "dtype": dt,
            "params": params,
            "inputs": [dict(name=s.name, requires_grad=x.requires_grad, **tensor_json(x))
                       for s, x in zip(inputs, xs)],
            "outputs": [tensor_json(o) for o in outs],
            "grad_outputs": [tensor_json(go) if go is not None else None for go in grad_outs],
            "input_grads": [tensor_json(gr) if gr is not None else None for gr in input_grads],
        })


def shape_label(*shapes):
    return " ".join("[" + ",".join(str(s) for s in sh) + "]" for sh in shapes)


# ---- elementwise ---------------------------------------------------------------------------

BINARY_SHAPES = [([3, 4], [3, 4]), ([3, 1], [1, 4]), ([2, 3, 4], [4]), ([2, 1, 4], [3, 1]),
                 ([], [2, 3]), ([5], [])]
BINARY = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div}
for op, f in BINARY.items():
    bdomain = "positive" if op == "div" else "normal"
    for sa, sb in BINARY_SHAPES:
        case("elementwise", op, shape_label(sa, sb),
             [Float("a", sa), Float("b", sb, bdomain)], lambda x, p, f=f: f(x[0], x[1]))
    case("elementwise", op, shape_label([2, 3], [3]) + " b constant",
         [Float("a", [2, 3]), Float("b", [3], bdomain, grad=False)],
         lambda x, p, f=f: f(x[0], x[1]))

UNARY_SHAPES = [[5], [3, 4], [2, 3, 4], []]
UNARY = {
    "neg": (torch.neg, "normal"),
    "exp": (torch.exp, "normal"),
    "log": (torch.log, "positive"),
    "sqrt": (torch.sqrt, "positive"),
    "tanh": (torch.tanh, "normal"),
    "sigmoid": (torch.sigmoid, "normal"),
    "relu": (torch.relu, "away"),
    "gelu": (F.gelu, "normal"),
    "gelu_tanh": (lambda a: F.gelu(a, approximate="tanh"), "normal"),
}
for op, (f, domain) in UNARY.items():
    for sh in UNARY_SHAPES:
        case("elementwise", op, shape_label(sh), [Float("a", sh, domain)],
             lambda x, p, f=f: f(x[0]))
# Wide inputs reach the tails of exp/tanh/sigmoid/gelu and their vectorised loops.
for op in ("exp", "tanh", "sigmoid", "gelu", "gelu_tanh"):
    f = UNARY[op][0]
    case("elementwise", op, "[37] wide range", [Float("a", [37], scale=4.0)],
         lambda x, p, f=f: f(x[0]))

for op, torch_fn in (("add_scalar", lambda a, s: a + s), ("mul_scalar", lambda a, s: a * s)):
    for sh, s in (([3, 4], 2.5), ([2, 3, 4], -0.75), ([], 3.0)):
        case("elementwise", op, f"{shape_label(sh)} scalar {s}", [Float("a", sh)],
             lambda x, p, f=torch_fn: f(x[0], p["scalar"]), {"scalar": s})

for sh, e, domain in (([3, 4], 2.0, "normal"), ([2, 3, 4], 0.5, "positive"),
                      ([5], -1.5, "positive"), ([3, 4], 3.0, "normal"), ([], 1.7, "positive")):
    case("elementwise", "pow_scalar", f"{shape_label(sh)} exponent {e}", [Float("a", sh, domain)],
         lambda x, p: x[0] ** p["exponent"], {"exponent": e})

# dropout: only the deterministic cases (nabla's generator is not PyTorch's).
for p_, train in ((0.5, False), (0.0, True)):
    case("elementwise", "dropout", f"[3,4] p {p_} train {train}", [Float("a", [3, 4])],
         lambda x, p: F.dropout(x[0], p["p"], p["train"]), {"p": p_, "train": train})

# ---- reductions ----------------------------------------------------------------------------

for sh in ([5], [3, 4], [2, 3, 4], []):
    case("reductions", "sum", shape_label(sh), [Float("a", sh)], lambda x, p: x[0].sum())
    case("reductions", "mean", shape_label(sh), [Float("a", sh)], lambda x, p: x[0].mean())

DIMS_CASES = [([3, 4], [0], False), ([3, 4], [1], True), ([2, 3, 4], [0, 2], False),
              ([2, 3, 4], [-1], True), ([2, 3, 4], [1, 0], True), ([2, 3, 4, 5], [1, 3], False),
              ([2, 3, 4], [0, 1, 2], False)]
for sh, dims, keep in DIMS_CASES:
    label = f"{shape_label(sh)} dims {dims} keepdim {keep}"
    prm = {"dims": dims, "keepdim": keep}
    case("reductions", "sum_dims", label, [Float("a", sh)],
         lambda x, p: x[0].sum(dim=p["dims"], keepdim=p["keepdim"]), prm)
    case("reductions", "mean_dims", label, [Float("a", sh)],
         lambda x, p: x[0].mean(dim=p["dims"], keepdim=p["keepdim"]), prm)

for sh, dim, keep in (([5], 0, False), ([3, 4], 1, False), ([3, 4], 0, True),
                      ([2, 3, 4], -1, True), ([2, 3, 4], 1, False), ([2, 5, 3], 1, True)):
    case("reductions", "max_dim", f"{shape_label(sh)} dim {dim} keepdim {keep}",
         [Float("a", sh, "distinct")],
         lambda x, p: tuple(torch.max(x[0], p["dim"], p["keepdim"])),
         {"dim": dim, "keepdim": keep})

# ---- matmul --------------------------------------------------------------------------------

for sa, sb in (([4], [4]), ([3, 4], [4, 5]), ([4], [4, 5]), ([3, 4], [4]), ([1, 1], [1, 1]),
               ([2, 3, 4], [4, 5]), ([3, 4], [2, 4, 5]), ([2, 3, 4], [2, 4, 5]),
               ([2, 1, 3, 4], [3, 4, 2]), ([2, 3, 4], [4]), ([4], [2, 4, 3]),
               ([7, 9], [9, 6])):
    case("matmul", "matmul", shape_label(sa, sb), [Float("a", sa), Float("b", sb)],
         lambda x, p: torch.matmul(x[0], x[1]))
case("matmul", "matmul", "[3,4] [4,5] b constant",
     [Float("a", [3, 4]), Float("b", [4, 5], grad=False)], lambda x, p: torch.matmul(x[0], x[1]))

# F.linear: x [..., in], weight [out, in], bias [out] or none.
for sx, sw, bias in (([3, 4], [5, 4], True), ([2, 3, 4], [2, 4], True), ([4], [3, 4], True),
                     ([2, 3], [4, 3], False)):
    ins = [Float("x", sx), Float("weight", sw)] + ([Float("bias", [sw[0]])] if bias else [])
    case("matmul", "f_linear", shape_label(sx, sw) + (" bias" if bias else " no bias"), ins,
         lambda x, p: F.linear(x[0], x[1], x[2] if len(x) > 2 else None))

# ---- softmax, masks ------------------------------------------------------------------------

for op, f in (("softmax", F.softmax), ("log_softmax", F.log_softmax)):
    for sh, dim in (([5], 0), ([3, 4], -1), ([3, 4], 0), ([2, 3, 4], 1), ([2, 3, 4], -1)):
        case("softmax", op, f"{shape_label(sh)} dim {dim}", [Float("a", sh)],
             lambda x, p, f=f: f(x[0], dim=p["dim"]), {"dim": dim})
    # Large logits: only a max-subtracted softmax stays finite.
    case("softmax", op, "[2,5] dim -1 large logits", [Float("a", [2, 5], scale=100.0)],
         lambda x, p, f=f: f(x[0], dim=p["dim"]), {"dim": -1})

MASK_3x4 = [[False, True, False, False], [True, True, False, True], [False, False, False, False]]
case("softmax", "masked_fill", "[3,4] mask [3,4] value -1.5",
     [Float("a", [3, 4]), Mask("mask", MASK_3x4)],
     lambda x, p: x[0].masked_fill(x[1], p["value"]), {"value": -1.5})
case("softmax", "masked_fill", "[2,3,4] mask [4] value -inf",
     [Float("a", [2, 3, 4]), Mask("mask", [False, True, True, False])],
     lambda x, p: x[0].masked_fill(x[1], p["value"]), {"value": -math.inf})
case("softmax", "masked_fill", "[2,3,4] mask [2,1,4] value 0",
     [Float("a", [2, 3, 4]), Mask("mask", [[[True, False, False, True]],
                                           [[False, False, True, False]]])],
     lambda x, p: x[0].masked_fill(x[1], p["value"]), {"value": 0.0})


def masked_softmax_ref(a, mask, causal, scale):
    """nabla: softmax over the last dim of scale * a with blocked entries excluded; a row whose
    entries are all blocked gives 0 and gradient 0. Those rows are set by hand: unblocked
    before the softmax (so PyTorch computes no NaN) and multiplied by 0 after it."""
    tq, tk = a.shape[-2], a.shape[-1]
    blocked = torch.zeros(a.shape, dtype=torch.bool)
    if mask is not None:
        blocked = blocked | mask
    if causal:
        blocked = blocked | torch.ones(tq, tk, dtype=torch.bool).triu(1)
    dead = blocked.all(dim=-1, keepdim=True)
    s = (scale * a).masked_fill(blocked & ~dead, -math.inf)
    return torch.softmax(s, dim=-1) * (~dead).to(a.dtype)


def masked_softmax_case(label, a_shape, mask, causal, scale):
    inputs = [Float("a", a_shape)] + ([Mask("mask", mask)] if mask is not None else [])
    case("softmax", "masked_softmax", label, inputs,
         lambda x, p: masked_softmax_ref(x[0], x[1] if len(x) > 1 else None,
                                         p["causal"], p["scale"]),
         {"causal": causal, "scale": scale})


masked_softmax_case("[3,5] no mask scale 1", [3, 5], None, False, 1.0)
masked_softmax_case("[2,4,4] causal scale 0.5", [2, 4, 4], None, True, 0.5)
masked_softmax_case("[2,3,5] causal T_q < T_k", [2, 3, 5], None, True, 1.0)
masked_softmax_case("[2,5,3] causal T_q > T_k", [2, 5, 3], None, True, 1.0)
# Key padding as in attention: [B,1,1,T_k]; batch 1 fully padded (all rows blocked).
masked_softmax_case("[2,2,3,4] key padding, one batch fully padded", [2, 2, 3, 4],
                    [[[[False, False, True, True]]], [[[True, True, True, True]]]], False, 0.7)
masked_softmax_case("[2,2,4,4] key padding and causal", [2, 2, 4, 4],
                    [[[[False, False, False, True]]], [[[True, False, False, False]]]], True, 0.7)
# Attention mask [T_q,T_k] with row 1 fully blocked.
masked_softmax_case("[2,3,4] attn mask, one row fully blocked", [2, 3, 4],
                    [[False, True, False, False], [True] * 4, [False] * 4], False, 1.3)
masked_softmax_case("[2,3,4] attn mask, none fully blocked", [2, 3, 4], MASK_3x4, False, 1.0)
masked_softmax_case("[3,4] every row fully blocked", [3, 4], [[True] * 4] * 3, False, 1.0)

# ---- fused attention ------------------------------------------------------------------------


def attention_ref(q, k, v, mask, num_heads, causal, scale):
    """nabla's nb_f_attention: heads split from [B, T, D], masked_softmax_ref(q k^T) v per
    head (fully blocked rows give 0), heads merged back."""
    b, tq, d = q.shape
    tk, hd = k.shape[1], d // num_heads

    def heads(t, n):
        return t.reshape(b, n, num_heads, hd).transpose(1, 2)
    p = masked_softmax_ref(heads(q, tq) @ heads(k, tk).transpose(-1, -2), mask, causal, scale)
    return (p @ heads(v, tk)).transpose(1, 2).reshape(b, tq, d)


def attention_case(label, q_shape, kv_shape, num_heads, causal, scale, mask=None):
    inputs = [Float("q", q_shape), Float("k", kv_shape), Float("v", kv_shape)]
    inputs += [Mask("mask", mask)] if mask is not None else []
    case("attention", "f_attention", label, inputs,
         lambda x, p: attention_ref(x[0], x[1], x[2], x[3] if len(x) > 3 else None,
                                    p["num_heads"], p["causal"], p["scale"]),
         {"num_heads": num_heads, "causal": causal, "scale": scale})


# Sizes on both sides of each kernel switch (autograd/attention.c): in float32 the small-head
# kernels take at most 16 keys, 64 queries and head_dim 64 without a bool mask; otherwise the
# rows kernel runs, in blocks of 32 queries when causal and longer.
attention_case("[2,3,4] 2 heads causal", [2, 3, 4], [2, 3, 4], 2, True, 0.5)
attention_case("q [1,1,64] kv [1,2,64] head_dim 64", [1, 1, 64], [1, 2, 64], 1, False, 0.125)
attention_case("q [1,2,2] kv [1,17,2] 17 keys", [1, 2, 2], [1, 17, 2], 1, False, 0.5)
attention_case("[1,33,1] causal, blocks of 32 queries", [1, 33, 1], [1, 33, 1], 1, True, 0.7)
attention_case("cross q [2,3,4] kv [2,5,4] key padding, batch 1 fully padded", [2, 3, 4],
               [2, 5, 4], 2, False, 0.6,
               mask=[[[[False, False, False, True, True]]], [[[True] * 5]]])
attention_case("[2,3,4] attn mask [3,3] with a fully blocked row, causal", [2, 3, 4], [2, 3, 4],
               2, True, 1.0,
               mask=[[False, False, True], [True, True, True], [False, True, False]])

# ---- losses --------------------------------------------------------------------------------


def cross_entropy_ref(logits, target, ignore_index, reduction):
    """nabla: class dim last; PyTorch wants [N, C], so flatten and reshape back."""
    c = logits.shape[-1]
    out = F.cross_entropy(logits.reshape(-1, c), target.reshape(-1), ignore_index=ignore_index,
                          reduction=reduction)
    return out.reshape(target.shape) if reduction == "none" else out


for label, lshape, target, ii in (
        ("[4,5]", [4, 5], [1, 0, 4, 2], -100),
        ("[4,5] ignore_index -100 hit", [4, 5], [1, -100, 4, -100], -100),
        ("[2,3,4] ignore_index 2", [2, 3, 4], [[0, 2, 3], [2, 1, 1]], 2),
        ("[1,3]", [1, 3], [2], -100)):
    for red in ("mean", "sum", "none"):
        case("losses", "cross_entropy", f"{label} {red}",
             [Float("logits", lshape), Index("target", target)],
             lambda x, p: cross_entropy_ref(x[0], x[1], p["ignore_index"], p["reduction"]),
             {"ignore_index": ii, "reduction": red})


def mse_ref(a, b, reduction):
    d = (a - b) ** 2  # nabla: b broadcast to a (F.mse_loss warns on broadcasting)
    return {"mean": d.mean, "sum": d.sum, "none": lambda: d}[reduction]()


for sa, sb, bgrad in (([3, 4], [3, 4], True), ([2, 3, 4], [4], True), ([5], [5], False),
                      ([2, 3], [2, 1], True)):
    for red in ("mean", "sum", "none"):
        case("losses", "mse_loss", f"{shape_label(sa, sb)} {red}" + ("" if bgrad else " target"),
             [Float("a", sa), Float("b", sb, grad=bgrad)],
             lambda x, p: mse_ref(x[0], x[1], p["reduction"]), {"reduction": red})

# ---- layers as functions -------------------------------------------------------------------


def layer_norm_ref(x, p):
    w = x[1] if p["has_weight"] else None
    b = x[1 + p["has_weight"]] if p["has_bias"] else None
    shape = w.shape if w is not None else x[0].shape[-1:]
    return F.layer_norm(x[0], shape, w, b, p["eps"])


for xs, ws, hw, hb, eps in (([4, 6], [6], True, True, 1e-5), ([2, 3, 6], [6], True, True, 1e-5),
                            ([2, 3, 4], [3, 4], True, True, 1e-3), ([4, 6], [6], False, False, 1e-5),
                            ([3, 5], [5], True, False, 1e-6), ([3, 5], [5], False, True, 1e-5),
                            ([2, 1], [1], True, True, 1e-5)):
    inputs = [Float("x", xs)]
    if hw:
        inputs.append(Float("weight", ws))
    if hb:
        inputs.append(Float("bias", ws))
    what = {(True, True): "weight bias", (True, False): "weight", (False, True): "bias",
            (False, False): "no affine"}[(hw, hb)]
    # Over one element x - mean is exactly 0, and so are the x and weight gradients; PyTorch's
    # float32 backward leaves ~4e-6 of rounding there, so that f32 case comes from float64.
    case("layers", "layer_norm", f"{shape_label(xs)} over {shape_label(ws)} {what} eps {eps}",
         inputs, layer_norm_ref, {"eps": eps, "has_weight": hw, "has_bias": hb},
         f32_via_f64=ws == [1])

for ws, idx in (([10, 4], [[1, 3, 1], [9, 0, 3]]), ([5, 3], [4, 4, 2, 0]), ([6, 2], 5),
                ([7, 3], [[[0, 6]], [[6, 6]]])):
    case("layers", "embedding", f"{shape_label(ws)} indices {idx}",
         [Float("weight", ws), Index("indices", idx)], lambda x, p: F.embedding(x[1], x[0]))

# ---- views and joins -----------------------------------------------------------------------

for sh, new in (([4, 6], [3, -1]), ([2, 3, 4], [6, 4]), ([6], [1, 2, 3]), ([2, 3], [6])):
    case("views", "view", f"{shape_label(sh)} -> {new}", [Float("a", sh)],
         lambda x, p: x[0].view(p["shape"]), {"shape": new})
    case("views", "reshape", f"{shape_label(sh)} -> {new}", [Float("a", sh)],
         lambda x, p: x[0].reshape(p["shape"]), {"shape": new})
for sh, d0, d1 in (([3, 4], 0, 1), ([2, 3, 4], 0, 2), ([2, 3, 4], -1, -2), ([2, 3], 1, 1)):
    case("views", "transpose", f"{shape_label(sh)} {d0} {d1}", [Float("a", sh)],
         lambda x, p: x[0].transpose(p["dim0"], p["dim1"]), {"dim0": d0, "dim1": d1})
for sh, dims in (([2, 3, 4], [2, 0, 1]), ([2, 3, 4, 5], [1, 3, 0, 2]), ([3, 4], [1, 0])):
    case("views", "permute", f"{shape_label(sh)} {dims}", [Float("a", sh)],
         lambda x, p: x[0].permute(p["dims"]), {"dims": dims})
for sh, d in (([3, 4], 0), ([3, 4], -1), ([3, 4], 1)):
    case("views", "unsqueeze", f"{shape_label(sh)} dim {d}", [Float("a", sh)],
         lambda x, p: x[0].unsqueeze(p["dim"]), {"dim": d})
for sh, d in (([3, 1, 4], 1), ([3, 1, 4], 0), ([1, 4], -2)):
    case("views", "squeeze", f"{shape_label(sh)} dim {d}", [Float("a", sh)],
         lambda x, p: x[0].squeeze(p["dim"]), {"dim": d})
for sh in ([3, 1, 4, 1], [1, 1]):
    case("views", "squeeze_all", shape_label(sh), [Float("a", sh)], lambda x, p: x[0].squeeze())
for sh, new in (([3, 1], [3, 4]), ([4], [2, 3, 4]), ([1, 3, 1], [2, -1, 5]), ([], [2, 2])):
    case("views", "expand", f"{shape_label(sh)} -> {new}", [Float("a", sh)],
         lambda x, p: x[0].expand(p["shape"]), {"shape": new})
for sh, d, s, n in (([5, 4], 0, 1, 3), ([3, 6], -1, 2, 4), ([2, 5, 3], 1, 0, 5)):
    case("views", "narrow", f"{shape_label(sh)} dim {d} start {s} length {n}", [Float("a", sh)],
         lambda x, p: x[0].narrow(p["dim"], p["start"], p["length"]),
         {"dim": d, "start": s, "length": n})
for sh, d, i in (([5, 4], 0, 2), ([3, 6], -1, 5), ([2, 5, 3], 1, -1), ([4], 0, 3)):
    case("views", "select", f"{shape_label(sh)} dim {d} index {i}", [Float("a", sh)],
         lambda x, p: x[0].select(p["dim"], p["index"]), {"dim": d, "index": i})
for sh in ([3, 4], [2, 3, 4]):
    case("views", "contiguous", shape_label(sh), [Float("a", sh)],
         lambda x, p: x[0].contiguous())
for shapes, d in (([[2, 3], [4, 3]], 0), ([[2, 3], [2, 1], [2, 2]], -1),
                  ([[2, 3, 4], [2, 2, 4]], 1)):
    case("views", "concat", f"{shape_label(*shapes)} dim {d}",
         [Float(f"t{k}", sh) for k, sh in enumerate(shapes)],
         lambda x, p: torch.cat(x, p["dim"]), {"dim": d})
case("views", "concat", "[2,3] [2,3] dim 0, second constant",
     [Float("t0", [2, 3]), Float("t1", [2, 3], grad=False)],
     lambda x, p: torch.cat(x, p["dim"]), {"dim": 0})
for sh, n, d in (([2, 3], 2, 0), ([2, 3], 3, -1), ([4], 2, 1), ([2, 3, 4], 2, 2)):
    case("views", "stack", f"{n} x {shape_label(sh)} dim {d}",
         [Float(f"t{k}", sh) for k in range(n)], lambda x, p: torch.stack(x, p["dim"]),
         {"dim": d})
for sh, size, d in (([5, 3], 2, 0), ([2, 6], 3, -1), ([2, 3], 5, 1)):
    case("views", "split", f"{shape_label(sh)} size {size} dim {d}", [Float("a", sh)],
         lambda x, p: torch.split(x[0], p["split_size"], p["dim"]),
         {"split_size": size, "dim": d})


# ---- coverage and output -------------------------------------------------------------------


def declared_ops():
    """Every function declared in include/nabla/ops.h, without the nb_ prefix."""
    with open(OPS_H) as f:
        text = f.read()
    return set(re.findall(r"^(?:nb_tensor \*|int )nb_(\w+)\(", text, re.M))


def registered_golden_ops(program):
    """The golden ops of every registered op, from the registry the build dumps."""
    if not os.path.exists(program):
        sys.exit(f"gen_goldens: {program} not found: build first (meson compile -C build) or "
                 "pass --registry")
    registry = json.loads(subprocess.run([program], check=True, capture_output=True).stdout)
    return {g for op in registry["ops"] for g in op["goldens"]}, \
        [op["name"] for op in registry["ops"] if not op["goldens"]]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--registry", default=DEFAULT_REGISTRY,
                        help="the op_registry_json program of a build")
    args = parser.parse_args()
    registered, without = registered_golden_ops(args.registry)
    if without:
        sys.exit(f"gen_goldens: registered ops {without} have no golden runner")
    if registered - COVERED:
        sys.exit(f"gen_goldens: no case for the registered golden ops {sorted(registered - COVERED)}")
    if COVERED - registered:
        sys.exit(f"gen_goldens: cases for {sorted(COVERED - registered)}, which no registered op "
                 "runs (autograd/op_def.h)")
    missing = declared_ops() - COVERED
    if missing:
        sys.exit(f"gen_goldens: no case for {sorted(missing)} declared in include/nabla/ops.h")
    unknown = COVERED - declared_ops()
    if unknown:
        sys.exit(f"gen_goldens: cases for {sorted(unknown)}, which ops.h does not declare")
    os.makedirs(GOLDEN_DIR, exist_ok=True)
    total = 0
    for family, cases in FAMILIES.items():
        path = os.path.join(GOLDEN_DIR, f"ops_{family}.json")
        write_json(path, {"generator": "tests/gen_goldens.py", "torch": str(torch.__version__),
                          "cases": cases})
        total += len(cases)
        print(f"{os.path.relpath(path)}: {len(cases)} cases")
    print(f"{total} op cases covering {len(COVERED)} ops")


if __name__ == "__main__":
    main()
