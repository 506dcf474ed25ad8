#!/usr/bin/python3
"""Writes the PyTorch golden files for nabla's op parity test (tests/test_parity.c).

Run it with Debian's PyTorch (apt-get install python3-torch), from anywhere, after building:

    /usr/bin/python3 tests/gen_goldens.py [--registry BUILD/tests/op_registry_json]

The cases are not kept here: each registered op declares its golden spec beside its forward
and backward (autograd/op_def.h: the PyTorch expression it must match and its cases, as
input and parameter strings), and this script reads the registry from the op_registry_json
program the build makes (default build/tests/op_registry_json). It rewrites
tests/goldens/ops_<file>.json, one per autograd/<file>.c, which are committed: the C tests
read them with jansson and need no Python. Rerun it when an op's golden spec changes, then
commit the JSON. Each case draws its random numbers from its own generator seeded by a hash
of its name, so editing one case leaves every other case's numbers unchanged. The script
refuses to write anything if a registered op has no golden case or a function declared in
include/nabla/ops.h has none.

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

nabla conventions that differ from PyTorch are computed here by hand, in the helpers the
ops' torch expressions call (look for "nabla:"):
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
    result on the same float32 inputs, rounded to float32 (the case option _f32_via_f64).
"""
import argparse
import glob
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
    for kinks at 0), distinct (a shuffled ramp with gaps of 0.1, for max: no ties) or ties
    (from {-1, -0.5, 0, 0.5, 1}, for topk: many equal values)."""

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
        elif self.domain == "ties":
            x = 0.5 * torch.randint(-2, 3, shape, generator=g).double()
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
            if (t.is_floating_point() and not torch.isfinite(t).all()
                    and all(math.isfinite(v) for v in params.values()
                            if isinstance(v, float))):
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



# ---- nabla's conventions, for the ops' torch expressions --------------------------------------


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


def attention_ref(q, k, v, mask, num_heads, causal, scale):
    """nabla's nb_f_attention: heads split from [B, T, D], masked_softmax_ref(q k^T) v per
    head (fully blocked rows give 0), heads merged back."""
    b, tq, d = q.shape
    tk, hd = k.shape[1], d // num_heads

    def heads(t, n):
        return t.reshape(b, n, num_heads, hd).transpose(1, 2)
    p = masked_softmax_ref(heads(q, tq) @ heads(k, tk).transpose(-1, -2), mask, causal, scale)
    return (p @ heads(v, tk)).transpose(1, 2).reshape(b, tq, d)


def sdpa_ref(q, k, v, mask, causal, scale):
    """nabla's nb_sdpa on heads [B, H, T, hd]: query head h reads key/value head
    h // (H_q / H_kv); masks as in masked_softmax_ref (fully blocked rows give 0)."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    return masked_softmax_ref(q @ k.transpose(-1, -2), mask, causal, scale) @ v


def cross_entropy_ref(logits, target, ignore_index, reduction):
    """nabla: class dim last; PyTorch wants [N, C], so flatten and reshape back."""
    c = logits.shape[-1]
    out = F.cross_entropy(logits.reshape(-1, c), target.reshape(-1), ignore_index=ignore_index,
                          reduction=reduction)
    return out.reshape(target.shape) if reduction == "none" else out


def mse_ref(a, b, reduction):
    d = (a - b) ** 2  # nabla: b broadcast to a (F.mse_loss warns on broadcasting)
    return {"mean": d.mean, "sum": d.sum, "none": lambda: d}[reduction]()



# ---- golden specs from the registry -----------------------------------------------------------


def tokens(text):
    """Splits "positive [[0,1],[1,0]] scale 4" into words and balanced [...] groups."""
    out, i = [], 0
    while i < len(text):
        if text[i].isspace():
            i += 1
        elif text[i] == "[":
            depth, j = 0, i
            while True:
                depth += {"[": 1, "]": -1}.get(text[j], 0)
                j += 1
                if depth == 0:
                    break
            out.append(text[i:j])
            i = j
        else:
            j = i
            while j < len(text) and not text[j].isspace():
                j += 1
            out.append(text[i:j])
            i = j
    return out


def parse_inputs(text):
    """Input specs from "a: positive [3,4]; mask: bool [0,1]" (see nba_golden_case)."""
    specs = []
    for part in text.split(";"):
        name, rest = (s.strip() for s in part.split(":", 1))
        kind, domain, grad, scale, value = "float", "normal", True, 1.0, None
        words = iter(tokens(rest))
        for w in words:
            if w in ("normal", "positive", "away", "distinct", "ties"):
                domain = w
            elif w == "const":
                grad = False
            elif w == "scale":
                scale = float(next(words))
            elif w in ("i64", "bool"):
                kind = w
            else:
                value = json.loads(w)
        if kind == "float":
            specs.append(Float(name, value, domain, grad, scale))
        elif kind == "i64":
            specs.append(Index(name, value))
        else:
            specs.append(Mask(name, value))
    return specs


class Names(dict):
    """The torch expression's namespace: a name it uses that the case lacks (an optional input
    left out) is None."""

    def __missing__(self, key):
        return None


HELPERS = {"torch": torch, "F": F, "math": math, "masked_softmax_ref": masked_softmax_ref,
           "attention_ref": attention_ref, "sdpa_ref": sdpa_ref,
           "cross_entropy_ref": cross_entropy_ref,
           "mse_ref": mse_ref, "tuple": tuple}


def add_golden(family, golden):
    """Adds every case of one golden runner's spec."""
    for c in golden["cases"]:
        params = eval(f"dict({c['params']})", {"__builtins__": {}},
                      {"dict": dict, "inf": math.inf})
        options = {k[1:]: params.pop(k) for k in list(params) if k.startswith("_")}
        specs = parse_inputs(c["inputs"])
        label = " ".join(x for x in (c["inputs"], c["params"]) if x)

        def fn(xs, p, specs=specs, expr=golden["torch"]):
            names = Names(HELPERS)
            names.update(p)
            names.update({spec.name: x for spec, x in zip(specs, xs)})
            names["inputs"] = list(xs)
            return eval(expr, {"__builtins__": {}}, names)
        case(family, golden["op"], label, specs, fn, params, **options)


def declared_ops():
    """Every function declared in include/nabla/ops.h, without the nb_ prefix."""
    with open(OPS_H) as f:
        text = f.read()
    return set(re.findall(r"^(?:nb_tensor \*|int )nb_(\w+)\(", text, re.M))


def load_registry(program):
    """The op registry, as the build's op_registry_json prints it."""
    if not os.path.exists(program):
        sys.exit(f"gen_goldens: {program} not found: build first (meson compile -C build) or "
                 "pass --registry")
    return json.loads(subprocess.run([program], check=True, capture_output=True).stdout)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--registry", default=DEFAULT_REGISTRY,
                        help="the op_registry_json program of a build")
    args = parser.parse_args()
    registry = load_registry(args.registry)
    for op in registry["ops"]:
        for golden in op["goldens"]:
            add_golden(op["file"], golden)
    without = [f"{op['name']}/{g['op']}" for op in registry["ops"]
               for g in op["goldens"] or [{"op": "(none)", "cases": []}] if not g["cases"]]
    if without:
        sys.exit(f"gen_goldens: registered ops without golden cases: {without}")
    missing = declared_ops() - COVERED
    if missing:
        sys.exit(f"gen_goldens: no case for {sorted(missing)} declared in include/nabla/ops.h")
    unknown = COVERED - declared_ops()
    if unknown:
        sys.exit(f"gen_goldens: cases for {sorted(unknown)}, which ops.h does not declare")
    os.makedirs(GOLDEN_DIR, exist_ok=True)
    for stale in glob.glob(os.path.join(GOLDEN_DIR, "ops_*.json")):
        if os.path.basename(stale)[4:-5] not in FAMILIES:
            os.remove(stale)
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
