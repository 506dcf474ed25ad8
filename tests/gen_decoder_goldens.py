#!/usr/bin/python3
"""Goldens for nb_transformer_decoder_block (tests/test_decoder_block.c) from PyTorch's own
nn.TransformerDecoderLayer(norm_first=True, activation="gelu", dim_feedforward=4 * d_model),
in float64, with perturbed layer norms (weight 1, bias 0 would hide a forward that skips them):
  tests/goldens/decoder_block.safetensors     the layer's parameters under nabla's names
                                              (in_proj split into W_query, W_key, W_value)
  tests/goldens/decoder_block_io.safetensors  x [2, 4, 8], memory [2, 5, 8], g [2, 4, 8];
                                              y = layer(x, memory) with a causal tgt_mask;
                                              grad.x, grad.memory and grad.cross_attn.W_key.weight
                                              of sum(g * y)
Run: /usr/bin/python3 tests/gen_decoder_goldens.py"""
import os

import torch
from torch import nn

from gen_module_goldens import write_safetensors

HERE = os.path.dirname(os.path.abspath(__file__))
GEN = "tests/gen_decoder_goldens.py"


def nabla_names(layer):
    """The layer's parameters under the names of nabla's decoder block."""
    out = {}
    for ours, theirs in (("attn", layer.self_attn), ("cross_attn", layer.multihead_attn)):
        w, b = theirs.in_proj_weight.chunk(3), theirs.in_proj_bias.chunk(3)
        for k, proj in enumerate(("W_query", "W_key", "W_value")):
            out[f"{ours}.{proj}.weight"], out[f"{ours}.{proj}.bias"] = w[k], b[k]
        out[f"{ours}.out_proj.weight"] = theirs.out_proj.weight
        out[f"{ours}.out_proj.bias"] = theirs.out_proj.bias
    for k in (1, 2, 3):
        norm = getattr(layer, f"norm{k}")
        out[f"norm{k}.weight"], out[f"norm{k}.bias"] = norm.weight, norm.bias
    for ours, theirs in (("fc1", layer.linear1), ("fc2", layer.linear2)):
        out[f"ff.{ours}.weight"], out[f"ff.{ours}.bias"] = theirs.weight, theirs.bias
    return {k: v.detach().contiguous() for k, v in out.items()}


def main():
    torch.manual_seed(27)
    layer = nn.TransformerDecoderLayer(8, 2, dim_feedforward=32, dropout=0.0, activation="gelu",
                                       batch_first=True, norm_first=True).double()
    with torch.no_grad():
        for k in (1, 2, 3):
            norm = getattr(layer, f"norm{k}")
            norm.weight.copy_(1 + 0.3 * torch.randn(8, dtype=torch.float64))
            norm.bias.copy_(0.3 * torch.randn(8, dtype=torch.float64))
    x = torch.randn(2, 4, 8, dtype=torch.float64, requires_grad=True)
    memory = torch.randn(2, 5, 8, dtype=torch.float64, requires_grad=True)
    g = torch.randn(2, 4, 8, dtype=torch.float64)
    y = layer(x, memory, tgt_mask=nn.Transformer.generate_square_subsequent_mask(4).double())
    (g * y).sum().backward()
    params = nabla_names(layer)
    write_safetensors(os.path.join(HERE, "goldens", "decoder_block.safetensors"), params, GEN)
    io = {"x": x, "memory": memory, "g": g, "y": y, "grad.x": x.grad,
          "grad.memory": memory.grad,
          "grad.cross_attn.W_key.weight": layer.multihead_attn.in_proj_weight.grad.chunk(3)[1]}
    io = {k: v.detach().contiguous() for k, v in io.items()}
    write_safetensors(os.path.join(HERE, "goldens", "decoder_block_io.safetensors"), io, GEN)
    print("tests/goldens/decoder_block.safetensors, decoder_block_io.safetensors")


if __name__ == "__main__":
    main()
