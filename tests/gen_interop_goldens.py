#!/usr/bin/python3
"""Goldens for loading PyTorch and Hugging Face weights into nabla by their names
(tests/test_interop.c). Run with Debian's torch:

    /usr/bin/python3 tests/gen_interop_goldens.py

It writes three state_dicts as safetensors files in tests/goldens/ (by hand, as
tests/gen_module_goldens.py does: Debian's torch has no safetensors package) and
tests/goldens/interop.json with each model's configuration, input and output:

  interop_encoder.safetensors  a GPT-style LM built from nn.TransformerEncoderLayer
      (norm_first, causal mask, q/k/v biases, tanh GELU) between nabla's TransformerLM names
      (tok_emb, pos_emb, blocks.N, norm_f, head): PyTorch's own names inside the blocks
      (self_attn.in_proj_weight, linear1, ...).
  interop_mha.safetensors  a bare nn.MultiheadAttention with biases (in_proj_weight,
      in_proj_bias, out_proj.*), run causally.
  interop_hf_llama.safetensors  a tiny Llama with Hugging Face's LlamaForCausalLM names
      (model.embed_tokens, model.layers.N.self_attn.q_proj, mlp.gate_proj, input_layernorm,
      model.norm, lm_head, and the rotary_emb.inv_freq buffer older versions saved), its forward
      written here after HF's modeling_llama.py (transformers is not installed): RMSNorm,
      rotate_half RoPE on q and k, grouped-query attention with repeat_kv, SwiGLU.

Weights are drawn in float32 and saved as F32; the models run in float64 on those same values,
so the outputs are the float64 results of exactly the saved weights (a nabla model loading the
file into float64 through nb_load_opts.convert_dtype should agree to float64 rounding).

JSON: {"encoder": {"config": {...}, "tokens": [[...]], "logits": tensor},
       "mha": {"config": {...}, "input": tensor, "output": tensor},
       "hf_llama": {"config": {...}, "tokens": [[...]], "logits": tensor}}
with tensors as golden_json.tensor_json writes them.
"""
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

from gen_module_goldens import write_safetensors
from golden_json import tensor_json, write_json

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDENS = os.path.join(HERE, "goldens")
GENERATOR = "tests/gen_interop_goldens.py"


def draw_float32_values(module, g, scale):
    """Every parameter N(0, scale^2) drawn in float32 (norm weights 1 + that), so the float64
    model computes with exactly the values the F32 file holds."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            v = scale * torch.randn(p.shape, generator=g, dtype=torch.float32)
            if name.endswith("norm1.weight") or name.endswith("norm2.weight") or \
                    name.endswith("norm_f.weight") or name.endswith("layernorm.weight") or \
                    name == "model.norm.weight":
                v = 1 + v
            p.copy_(v.double())


def float32_state(module):
    return {k: v.detach().float() for k, v in module.state_dict().items()}


# ---- nn.TransformerEncoderLayer inside nabla's TransformerLM names ----
def gelu_tanh(x):
    return F.gelu(x, approximate="tanh")


class EncoderLM(nn.Module):
    def __init__(self, vocab, context, d, heads, layers):
        super().__init__()
        self.tok_emb = nn.Embedding(vocab, d)
        self.pos_emb = nn.Embedding(context, d)
        self.blocks = nn.ModuleList([
            nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, activation=gelu_tanh,
                                       batch_first=True, norm_first=True)
            for _ in range(layers)])
        self.norm_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)

    def forward(self, tokens):
        T = tokens.shape[1]
        x = self.tok_emb(tokens) + self.pos_emb(torch.arange(T))
        causal = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)  # True = blocked
        for block in self.blocks:
            x = block(x, src_mask=causal)
        return self.head(self.norm_f(x))


def encoder_case(g):
    cfg = {"vocab": 23, "context": 12, "d_model": 16, "heads": 4, "layers": 2}
    model = EncoderLM(cfg["vocab"], cfg["context"], cfg["d_model"], cfg["heads"],
                      cfg["layers"]).double()
    draw_float32_values(model, g, 0.3)
    model.eval()
    tokens = torch.randint(0, cfg["vocab"], (2, 9), generator=g)
    logits = model(tokens)
    write_safetensors(os.path.join(GOLDENS, "interop_encoder.safetensors"), float32_state(model),
                      GENERATOR)
    return {"config": cfg, "tokens": tokens.tolist(), "logits": tensor_json(logits)}


# ---- a bare nn.MultiheadAttention ----
def mha_case(g):
    cfg = {"d_model": 16, "heads": 4}
    mha = nn.MultiheadAttention(cfg["d_model"], cfg["heads"], bias=True,
                                batch_first=True).double()
    draw_float32_values(mha, g, 0.3)
    x = torch.randn(2, 7, cfg["d_model"], generator=g, dtype=torch.float64)
    causal = torch.triu(torch.ones(7, 7, dtype=torch.bool), 1)
    out, _ = mha(x, x, x, attn_mask=causal, need_weights=False)
    write_safetensors(os.path.join(GOLDENS, "interop_mha.safetensors"), float32_state(mha),
                      GENERATOR)
    return {"config": cfg, "input": tensor_json(x), "output": tensor_json(out)}


# ---- Hugging Face's Llama, written after modeling_llama.py ----
class LlamaRMSNorm(nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.variance_epsilon = eps

    def forward(self, x):
        variance = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + self.variance_epsilon))


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


class LlamaRotaryEmbedding(nn.Module):
    def __init__(self, head_dim, base):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
        self.register_buffer("inv_freq", inv_freq)  # persistent, as older HF versions saved it

    def forward(self, T):
        freqs = torch.outer(torch.arange(T, dtype=torch.float64), self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos(), emb.sin()


class LlamaAttention(nn.Module):
    def __init__(self, d, heads, kv_heads, base):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, d // heads
        self.q_proj = nn.Linear(d, heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(d, kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(d, kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(heads * self.head_dim, d, bias=False)
        self.rotary_emb = LlamaRotaryEmbedding(self.head_dim, base)

    def forward(self, x):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.kv_heads, self.head_dim).transpose(1, 2)
        cos, sin = self.rotary_emb(T)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        n_rep = self.heads // self.kv_heads  # repeat_kv: query head h reads kv head h // n_rep
        k = k[:, :, None].expand(B, self.kv_heads, n_rep, T, self.head_dim).reshape(
            B, self.heads, T, self.head_dim)
        v = v[:, :, None].expand(B, self.kv_heads, n_rep, T, self.head_dim).reshape(
            B, self.heads, T, self.head_dim)
        scores = q @ k.transpose(2, 3) / math.sqrt(self.head_dim)
        blocked = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
        scores = scores.masked_fill(blocked, float("-inf"))
        out = torch.softmax(scores, dim=-1) @ v
        return self.o_proj(out.transpose(1, 2).reshape(B, T, -1))


class LlamaMLP(nn.Module):
    def __init__(self, d, hidden):
        super().__init__()
        self.gate_proj = nn.Linear(d, hidden, bias=False)
        self.up_proj = nn.Linear(d, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, d, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d = cfg["dim"]
        self.self_attn = LlamaAttention(d, cfg["n_heads"], cfg["n_kv_heads"], cfg["rope_base"])
        self.mlp = LlamaMLP(d, cfg["hidden"])
        self.input_layernorm = LlamaRMSNorm(d, cfg["norm_eps"])
        self.post_attention_layernorm = LlamaRMSNorm(d, cfg["norm_eps"])

    def forward(self, x):
        x = x + self.self_attn(self.input_layernorm(x))
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg["vocab"], cfg["dim"])
        self.layers = nn.ModuleList([LlamaDecoderLayer(cfg) for _ in range(cfg["n_layers"])])
        self.norm = LlamaRMSNorm(cfg["dim"], cfg["norm_eps"])

    def forward(self, tokens):
        x = self.embed_tokens(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.norm(x)


class LlamaForCausalLM(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.model = LlamaModel(cfg)
        self.lm_head = nn.Linear(cfg["dim"], cfg["vocab"], bias=False)

    def forward(self, tokens):
        return self.lm_head(self.model(tokens))


def hf_llama_case(g):
    cfg = {"vocab": 37, "dim": 32, "n_heads": 4, "n_kv_heads": 2, "hidden": 48, "n_layers": 2,
           "norm_eps": 1e-6, "rope_base": 10000.0}
    model = LlamaForCausalLM(cfg).double()
    draw_float32_values(model, g, 0.3)
    tokens = torch.randint(0, cfg["vocab"], (2, 11), generator=g)
    logits = model(tokens)
    write_safetensors(os.path.join(GOLDENS, "interop_hf_llama.safetensors"),
                      float32_state(model), GENERATOR)
    return {"config": cfg, "tokens": tokens.tolist(), "logits": tensor_json(logits)}


def main():
    g = torch.Generator().manual_seed(2811)
    with torch.no_grad():
        cases = {"encoder": encoder_case(g), "mha": mha_case(g), "hf_llama": hf_llama_case(g)}
    write_json(os.path.join(GOLDENS, "interop.json"), cases)


if __name__ == "__main__":
    main()
