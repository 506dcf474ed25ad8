#!/usr/bin/python3
"""Writes the PyTorch goldens of DeepSeek-V2's multi-head latent attention (nn/blocks/mla*.c):
tests/goldens/mla.json.

Run it with Debian's PyTorch (apt-get install python3-torch), from anywhere:

    /usr/bin/python3 tests/gen_mla_goldens.py

The JSON is committed; tests/test_blocks_goldens.c reads it with jansson (tests/golden.c) and
needs no Python. Rerun it only when a case or the reference below changes, and commit both.

The reference is written here from the formulas of the DeepSeek-V2 paper (section 2.1), with
the parameter names of DeepSeek's reference model.py, all Linear layers without bias:
  * queries: q = wq(x), or with a low-rank path q = wq_b(q_norm(wq_a(x))); per head
    [q_nope (nope_dim), q_pe (rope_dim)], q_pe rotated;
  * latent: [c_kv (kv_rank), k_pe (rope_dim)] = wkv_a(x); k_pe rotated once per token and
    shared by every head;
  * per head [k_nope (nope_dim), v (v_dim)] = wkv_b(kv_norm(c_kv)); key = [k_nope, k_pe];
  * scores q k^T / sqrt(nope_dim + rope_dim), nabla's masks (true = blocked, key padding
    [B, T], causal; a row with every key blocked gets zero weights), softmax, weighted sum of
    v, heads side by side, wo (the masked softmax is gen_blocks_goldens.attend).
RMSNorm and RoPE are tests/gen_blocks_goldens.py's (rotate-half RoPE, tables in float64
rounded to the dtype; DeepSeek's code rotates interleaved pairs, the same model up to a fixed
permutation of the rotary weight rows). Cases are made as there (gen_blocks_goldens.case):
PyTorch's default initialisation in float32 after torch.manual_seed(seed), RMSNorm weights
redrawn as 1 + 0.3 N(0, 1), the f64 case the same parameters widened, and the same format.
"""
import os

import torch
import torch.nn as nn

import gen_blocks_goldens as blocks
from golden_json import write_json

OUT = os.path.join(blocks.HERE, "goldens", "mla.json")


class MLA(nn.Module):
    def __init__(self, dim, n_heads, q_rank, kv_rank, nope_dim, rope_dim, v_dim, eps, rope_base):
        super().__init__()
        self.h, self.kv_rank, self.nope, self.rope, self.v = (n_heads, kv_rank, nope_dim,
                                                              rope_dim, v_dim)
        self.rope_base = rope_base
        qk = nope_dim + rope_dim
        if q_rank == 0:
            self.wq = nn.Linear(dim, n_heads * qk, bias=False)
        else:
            self.wq_a = nn.Linear(dim, q_rank, bias=False)
            self.q_norm = blocks.RMSNorm(q_rank, eps)
            self.wq_b = nn.Linear(q_rank, n_heads * qk, bias=False)
        self.wkv_a = nn.Linear(dim, kv_rank + rope_dim, bias=False)
        self.kv_norm = blocks.RMSNorm(kv_rank, eps)
        self.wkv_b = nn.Linear(kv_rank, n_heads * (nope_dim + v_dim), bias=False)
        self.wo = nn.Linear(n_heads * v_dim, dim, bias=False)

    def forward(self, x, causal=True, key_padding_mask=None, offset=0):
        b, t, _ = x.shape
        h, qk = self.h, self.nope + self.rope
        q = self.wq(x) if hasattr(self, "wq") else self.wq_b(self.q_norm(self.wq_a(x)))
        q = q.view(b, t, h, qk).transpose(1, 2)  # [B, H, T, qk]
        q_nope, q_pe = q[..., :self.nope], q[..., self.nope:]
        q_pe = blocks.apply_rope(q_pe, offset, self.rope_base)
        c_kv, k_pe = self.wkv_a(x).split([self.kv_rank, self.rope], dim=-1)
        k_pe = blocks.apply_rope(k_pe[:, None], offset, self.rope_base)  # [B, 1, T, rope]
        kv = self.wkv_b(self.kv_norm(c_kv)).view(b, t, h, self.nope + self.v).transpose(1, 2)
        k_nope, v = kv[..., :self.nope], kv[..., self.nope:]
        q = torch.cat([q_nope, q_pe], dim=-1)
        k = torch.cat([k_nope, k_pe.expand(b, h, t, self.rope)], dim=-1)
        ctx = blocks.attend(q, k, v, causal, key_padding_mask)  # over sqrt(qk)
        ctx = ctx.transpose(1, 2).reshape(b, t, h * self.v)
        return self.wo(ctx)


def mla_case(label, seed, cfg, inputs, forward):
    make = lambda: MLA(cfg["dim"], cfg["n_heads"], cfg["q_rank"], cfg["kv_rank"],
                       cfg["nope_dim"], cfg["rope_dim"], cfg["v_dim"], cfg["eps"],
                       cfg["rope_base"])
    blocks.case("MLA", label, seed, make, cfg, inputs, forward)


def config(q_rank, kv_rank, nope_dim, rope_dim, v_dim, rope_base=10000.0):
    return {"dim": 16, "n_heads": 4, "q_rank": q_rank, "kv_rank": kv_rank,
            "nope_dim": nope_dim, "rope_dim": rope_dim, "v_dim": v_dim, "eps": 1e-6,
            "rope_base": rope_base}


def main():
    # v_dim 6 != the key head size 8: nabla's op-by-op path
    mla_case("no q low-rank causal v 6", 21, config(0, 8, 4, 4, 6),
             [("x", "float", [2, 5, 16])], {"causal": True})
    # v_dim = key head size 6: nabla's fused nb_sdpa path
    mla_case("q low-rank causal key padding", 22, config(6, 8, 4, 2, 6),
             [("x", "float", [2, 4, 16]),
              ("key_padding_mask", "mask", [[False, False, True, False],
                                            [False, True, True, True]])],
             {"causal": True})
    mla_case("q low-rank offset 3 v 3", 23, config(5, 6, 2, 4, 3, 500.0),
             [("x", "float", [1, 4, 16])], {"causal": False, "offset": 3})
    write_json(OUT, {"generator": "tests/gen_mla_goldens.py",
                     "torch": str(torch.__version__), "cases": blocks.CASES})
    print(f"{os.path.relpath(OUT)}: {len(blocks.CASES)} cases")


if __name__ == "__main__":
    main()
