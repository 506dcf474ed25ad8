#!/usr/bin/python3
"""Writes the PyTorch goldens of the DeepSeek-style LM (nn/blocks/deepseek.c):
tests/goldens/deepseek.json.

Run it with Debian's PyTorch (apt-get install python3-torch), from anywhere:

    /usr/bin/python3 tests/gen_deepseek_goldens.py

The JSON is committed; tests/test_blocks_goldens.c reads it with jansson (tests/golden.c) and
needs no Python. Rerun it only when a case or the reference below changes, and commit both.

The reference is DeepSeek-V2's Transformer as in its reference model.py, with the names used
there: embed (nn.Embedding), layers.N (attn_norm, attn, ffn_norm, ffn), norm and head (Linear
without bias). Block N computes h = x + attn(attn_norm(x)), out = h + ffn(ffn_norm(h)); ffn is
a dense SwiGLU (w1, w2, w3) in the first n_dense_layers blocks and the mixture of experts
elsewhere. The attention is tests/gen_mla_goldens.py's MLA (causal), the mixture of experts
tests/gen_moe_goldens.py's MoE, RMSNorm and SwiGLU tests/gen_blocks_goldens.py's. The loss
the gradients are taken of is sum(logits * grad_output) + aux_loss, aux_loss the sum of the
MoE blocks' load-balancing losses.

Cases are made as in gen_blocks_goldens.case: PyTorch's default initialisation in float32
after torch.manual_seed(seed) (nn.Embedding: N(0, 1)), RMSNorm weights redrawn as
1 + 0.3 N(0, 1), the f64 case the same parameters widened. Routing is piecewise constant:
every MoE block's k-th and (k+1)-th probabilities must differ by more than 1e-3 in float64
(gen_moe_goldens.routing_margin), so float32 and nabla pick the same experts.
"""
import copy
import os
import zlib

import torch
import torch.nn as nn

import gen_blocks_goldens as blocks
from gen_mla_goldens import MLA
from gen_moe_goldens import MoE, routing_margin
from golden_json import module_case_entry, tensor_json, write_json

OUT = os.path.join(blocks.HERE, "goldens", "deepseek.json")


class Block(nn.Module):
    def __init__(self, c, dense):
        super().__init__()
        self.attn_norm = blocks.RMSNorm(c["dim"], c["eps"])
        self.attn = MLA(c["dim"], c["n_heads"], c["q_rank"], c["kv_rank"], c["nope_dim"],
                        c["rope_dim"], c["v_dim"], c["eps"], c["rope_base"])
        self.ffn_norm = blocks.RMSNorm(c["dim"], c["eps"])
        self.ffn = (blocks.SwiGLU(c["dim"], c["dense_hidden"]) if dense else
                    MoE(c["dim"], c["hidden"], c["n_experts"], c["top_k"], c["n_shared"],
                        c["aux_alpha"]))
        self.dense = dense

    def forward(self, x):
        """(out, aux or None, router probabilities or None)"""
        h = x + self.attn(self.attn_norm(x), causal=True)
        if self.dense:
            return h + self.ffn(self.ffn_norm(h)), None, None
        y, aux, probs = self.ffn(self.ffn_norm(h))
        return h + y, aux, probs


class DeepSeekLM(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed = nn.Embedding(c["vocab"], c["dim"])
        self.layers = nn.ModuleList(Block(c, i < c["n_dense_layers"])
                                    for i in range(c["n_layers"]))
        self.norm = blocks.RMSNorm(c["dim"], c["eps"])
        self.head = nn.Linear(c["dim"], c["vocab"], bias=False)

    def forward(self, tokens):
        """(logits, summed aux loss, each MoE block's router probabilities)"""
        x = self.embed(tokens)
        aux, probs = 0, []
        for layer in self.layers:
            x, a, p = layer(x)
            if a is not None:
                aux, probs = aux + a, probs + [p]
        return self.head(self.norm(x)), aux, probs


CASES = []


def case(label, seed, config, tokens):
    torch.manual_seed(seed)
    base = DeepSeekLM(config)
    g = torch.Generator().manual_seed(zlib.crc32(f"DeepSeekLM|{label}".encode()))
    blocks.perturb_norms(base, g)
    tokens = torch.tensor(tokens, dtype=torch.int64)
    _, _, probs64 = copy.deepcopy(base).to(torch.float64)(tokens)
    margin = min(routing_margin(p, config["top_k"]) for p in probs64)
    assert margin > 1e-3, f"{label}: routing margin {margin} too small; change the seed"
    grad_draw = None
    for dt, dtype in (("f32", torch.float32), ("f64", torch.float64)):
        m = copy.deepcopy(base).to(dtype)
        logits, aux, _ = m(tokens)
        if grad_draw is None:
            grad_draw = torch.randn(logits.shape, generator=g, dtype=torch.float64)
        grad_out = grad_draw.to(dtype)
        ((logits * grad_out).sum() + aux).backward()
        for t in [logits, aux] + [p.grad for p in m.parameters()]:
            assert torch.isfinite(t).all(), f"{label}: non-finite values"
        entry = module_case_entry(f"DeepSeekLM {label} {dt}", "DeepSeekLM", dt, seed, config,
                                  {"causal": True}, m, {"tokens": tokens}, logits, grad_out)
        entry["aux_loss"] = tensor_json(aux)
        CASES.append(entry)


def config(q_rank, n_dense_layers, n_shared):
    return {"vocab": 9, "n_layers": 2, "n_dense_layers": n_dense_layers, "dense_hidden": 10,
            "dim": 8, "n_heads": 2, "q_rank": q_rank, "kv_rank": 6, "nope_dim": 4,
            "rope_dim": 2, "v_dim": 3, "eps": 1e-6, "rope_base": 100.0, "hidden": 5,
            "n_experts": 4, "top_k": 2, "n_shared": n_shared, "aux_alpha": 0.1,
            "tile_rows": 0}


def main():
    tokens = [[1, 5, 8, 0, 5, 3, 2], [2, 2, 4, 6, 1, 0, 7]]
    case("two MoE layers", 33, config(0, 0, 1), tokens)
    case("dense first layer q low-rank", 32, config(4, 1, 0), tokens)
    write_json(OUT, {"generator": "tests/gen_deepseek_goldens.py",
                     "torch": str(torch.__version__), "cases": CASES})
    print(f"{os.path.relpath(OUT)}: {len(CASES)} cases")


if __name__ == "__main__":
    main()
