#!/usr/bin/python3
"""Writes the PyTorch goldens of the mixture of experts (nn/blocks/moe*.c):
tests/goldens/moe.json.

Run it with Debian's PyTorch (apt-get install python3-torch), from anywhere:

    /usr/bin/python3 tests/gen_moe_goldens.py

The JSON is committed; tests/test_moe.c reads it with jansson (tests/golden.c) and needs no
Python. Rerun it only when a case or the reference below changes, and commit both.

The reference is written here from the formulas (include/nabla/blocks.h), in the shape of
DeepSeek's reference MoE (a loop over the experts, each run on the tokens routed to it):
  * router: p = softmax(x gate.weight^T); the top_k largest of p (torch.topk) and their
    experts; weights w = top / top.sum(-1) (renormalised over the k).
  * y = shared_experts(x) + sum over the chosen experts of w * experts.e(x), every expert a
    SwiGLU w2(silu(w1 x) * w3 x) without biases; the shared experts one SwiGLU of hidden
    n_shared * hidden (none when n_shared is 0).
  * aux = aux_alpha * E * sum_i f_i P_i, f_i = (token-slots routed to expert i) / (N k),
    P_i = mean over the N tokens of p[:, i] (f is a count: no gradient).
Parameter names are DeepSeek's: gate.weight, experts.N.w1.weight, ..., shared_experts.w1.weight.

Each case is built in float32 right after torch.manual_seed(seed) with PyTorch's default
Linear initialisation (the gate as an nn.Linear's weight); the f64 case uses the same
parameters widened to double. The input and the output gradient are drawn from a generator
seeded by a hash of the case name. Routing is piecewise constant: each case checks that every
token's k-th and (k+1)-th probabilities differ by more than 1e-3 in float64, so float32
picks the same experts and nabla's rounding cannot tip a choice.

Format: as tests/gen_blocks_goldens.py (module cases, tests/golden_json.py), plus "aux_loss";
the gradients are those of sum(output * grad_output) + aux_loss. tests/test_blocks_goldens.c
reads both files. tile_rows in the config is
nabla's tiling only (it changes no value).
"""
import copy
import os
import zlib

import torch
import torch.nn as nn

from gen_blocks_goldens import SwiGLU as Expert  # w2(silu(w1 x) * w3 x), no biases
from golden_json import module_case_entry, tensor_json, write_json

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "goldens", "moe.json")


class Gate(nn.Module):
    def __init__(self, dim, n_experts, top_k):
        super().__init__()
        self.top_k = top_k
        self.weight = nn.Parameter(nn.Linear(dim, n_experts, bias=False).weight.detach())

    def forward(self, x):
        probs = torch.softmax(x @ self.weight.t(), dim=-1)
        top, experts = torch.topk(probs, self.top_k, dim=-1)
        return top / top.sum(dim=-1, keepdim=True), experts, probs


class MoE(nn.Module):
    def __init__(self, dim, hidden, n_experts, top_k, n_shared, aux_alpha):
        super().__init__()
        self.dim, self.n_experts, self.top_k, self.aux_alpha = dim, n_experts, top_k, aux_alpha
        self.gate = Gate(dim, n_experts, top_k)
        self.experts = nn.ModuleList(Expert(dim, hidden) for _ in range(n_experts))
        self.shared_experts = Expert(dim, n_shared * hidden) if n_shared else None

    def forward(self, x):
        shape = x.shape
        x = x.reshape(-1, self.dim)
        weights, experts, probs = self.gate(x)
        y = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            token, rank = torch.where(experts == e)
            if len(token):
                y = y.index_add(0, token, expert(x[token]) * weights[token, rank, None])
        if self.shared_experts is not None:
            y = y + self.shared_experts(x)
        load = torch.bincount(experts.flatten(), minlength=self.n_experts).to(x.dtype)
        fraction = load / experts.numel()
        aux = self.aux_alpha * self.n_experts * (fraction * probs.mean(dim=0)).sum()
        return y.view(shape), aux, probs


def routing_margin(probs, k):
    if k == probs.shape[-1]:
        return 1.0
    top = torch.topk(probs, k + 1, dim=-1).values
    return (top[:, k - 1] - top[:, k]).min().item()


CASES = []


def case(label, seed, config, x_shape):
    torch.manual_seed(seed)
    base = MoE(config["dim"], config["hidden"], config["n_experts"], config["top_k"],
               config["n_shared"], config["aux_alpha"])
    g = torch.Generator().manual_seed(zlib.crc32(f"MoE|{label}".encode()))
    x_draw = torch.randn(x_shape, generator=g, dtype=torch.float64)
    grad_draw = torch.randn(x_shape, generator=g, dtype=torch.float64)
    for dt, dtype in (("f32", torch.float32), ("f64", torch.float64)):
        m = copy.deepcopy(base).to(dtype)
        x = x_draw.to(dtype).requires_grad_(True)
        out, aux, probs = m(x)
        if dt == "f32":  # the routing must not be near a tie, judged in float64
            _, _, probs64 = copy.deepcopy(base).to(torch.float64)(x.detach().double())
            margin = routing_margin(probs64, config["top_k"])
            assert margin > 1e-3, f"{label}: routing margin {margin} too small; change the seed"
        grad_out = grad_draw.to(dtype)
        ((out * grad_out).sum() + aux).backward()
        for t in [out, aux] + [p.grad for p in m.parameters()]:
            assert torch.isfinite(t).all(), f"{label}: non-finite values"
        entry = module_case_entry(f"MoE {label} {dt}", "MoE", dt, seed, config, {}, m,
                                  {"x": x}, out, grad_out)
        entry["aux_loss"] = tensor_json(aux)
        CASES.append(entry)


def main():
    case("E4 top2 shared1", 1,
         {"dim": 8, "hidden": 6, "n_experts": 4, "top_k": 2, "n_shared": 1,
          "aux_alpha": 0.01, "tile_rows": 0}, [2, 5, 8])
    case("E3 top1", 2,
         {"dim": 6, "hidden": 4, "n_experts": 3, "top_k": 1, "n_shared": 0,
          "aux_alpha": 0.1, "tile_rows": 0}, [7, 6])
    case("E8 top3 shared2 tiles of 2", 14,
         {"dim": 8, "hidden": 4, "n_experts": 8, "top_k": 3, "n_shared": 2,
          "aux_alpha": 0.05, "tile_rows": 2}, [3, 4, 8])
    write_json(OUT, {"generator": "tests/gen_moe_goldens.py",
                     "torch": str(torch.__version__), "cases": CASES})
    print(f"{os.path.relpath(OUT)}: {len(CASES)} cases")


if __name__ == "__main__":
    main()
