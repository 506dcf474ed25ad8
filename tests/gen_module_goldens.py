#!/usr/bin/python3
"""Writes the PyTorch golden file for nabla's module parity tests: tests/goldens/modules.json.

Run it with Debian's PyTorch (apt-get install python3-torch), from anywhere:

    /usr/bin/python3 tests/gen_module_goldens.py

The JSON is committed; the C tests read it with jansson (tests/golden.c:
golden_find_case, golden_named_tensors, golden_named_spec) and need no Python. Rerun it only
when a case or a reference module below changes, and commit the JSON with the script.

A second file, tests/goldens/modules_masks.json (same format), holds the cases where masks
combine: key padding with an attention mask, in self- and cross-attention, and a
TransformerBlock over a fully padded sequence. They are kept apart because modules.json is
pinned at its 26 cases by tests/test_module_goldens.c; tests/test_module_parity.c reads both.

A third, tests/goldens/modules_mha.json, holds MultiHeadAttention as PyTorch users expect it:
no biases (PyTorch's bias=False), boolean and float additive attention masks of every shape
nn.h accepts, a head mask with its gradient, causal attention with T_q != T_k. Its cases
without a head mask or causal flag are also checked here against PyTorch's own
nn.MultiheadAttention (torch_mha_agrees), so the reference below follows PyTorch's mask rules.

It also writes tests/goldens/torch_block.safetensors: the state_dict of the float32
TransformerBlock of the case "TransformerBlock causal, perturbed layer norms" (the very
parameters of that case), so tests/test_module_parity.c can load a checkpoint written from
PyTorch module weights and reproduce the case's output. Debian's torch 1.13 has no
safetensors package; the file is written by hand as tests/gen_safetensors_golden.py does.

The modules below are written the way the multi-head attention tutorials write them, with
the parameter names nabla's modules must use. Each is built in float32 right after
torch.manual_seed(seed), with PyTorch's own initialisation, so its state_dict is what a
tutorial reader gets; the f64 case uses the same parameters widened to double. Inputs and the
output gradient are drawn from a generator seeded by a hash of the case name, in double, and
rounded for f32.

File format: {"generator", "torch", "cases": [case, ...]} with

    case = {"name": "<module> <label> <dtype>", "module", "dtype", "seed",
            "config": {constructor arguments}, "forward": {forward flags, e.g. causal},
            "parameters":      [tensor + {"name", "requires_grad": true}], state_dict order,
            "inputs":          [tensor + {"name", "requires_grad"}],
            "output": tensor, "grad_output": tensor,
            "parameter_grads": [tensor + {"name"}],
            "input_grads":     [tensor + {"name"}] (inputs that require grad),
            "extra_outputs":   [tensor + {"name"}] (e.g. "attn_weights" [B, H, T_q, T_k])}

Gradients are those of sum(output * grad_output). Tensors are {"dtype", "shape", "data"}
as in tests/gen_goldens.py.

nabla conventions computed here by hand (look for "nabla:"):
  * Boolean masks have true = blocked: key_padding_mask [B, T_k] (true = padding) and
    attn_mask; causal blocks key j > query i (top-left aligned when T_q != T_k).
  * A query row whose keys are all blocked attends to nothing: its attention weights are 0
    (PyTorch's softmax gives NaN). The reference unblocks such rows before the softmax and
    multiplies them by 0 after it, so the output there is out_proj.bias and no NaN reaches
    any gradient.
  * Dropout is off (p = 0 / eval): its random masks cannot match PyTorch's generator.
"""
import copy
import json
import math
import os
import struct
import zlib

import torch
import torch.nn as nn
import torch.nn.functional as F

from gen_safetensors_golden import DTYPES, raw_bytes
from golden_json import module_backward, module_case_entry, tensor_json, write_json

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "goldens", "modules.json")
MASK_OUT = os.path.join(HERE, "goldens", "modules_masks.json")
MHA_OUT = os.path.join(HERE, "goldens", "modules_mha.json")
BLOCK_OUT = os.path.join(HERE, "goldens", "torch_block.safetensors")


class MultiHeadAttention(nn.Module):
    """The tutorials' MultiHeadAttention, with boolean masks and nabla's empty-row rule."""

    def __init__(self, d_in, d_out, num_heads, qkv_bias=False, out_bias=True):
        super().__init__()
        assert d_out % num_heads == 0, "d_out must be divisible by num_heads"
        self.d_out, self.num_heads, self.head_dim = d_out, num_heads, d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out, bias=out_bias)

    def forward(self, x_q, x_kv=None, causal=False, key_padding_mask=None, attn_mask=None,
                head_mask=None, zero_dead_rows=True):
        """zero_dead_rows False: PyTorch's own softmax, NaN in a fully blocked row.
        attn_mask: bool (true = blocked) or float (added to the scaled scores, -inf blocks),
        [T_q, T_k], [B, T_q, T_k], [B * H, T_q, T_k] or [B, H, T_q, T_k] (nabla's shapes,
        nn.h). head_mask [H] multiplies each head's context (Hugging Face's head_mask)."""
        x_kv = x_q if x_kv is None else x_kv
        b, t_q, _ = x_q.shape
        t_k = x_kv.shape[1]
        h, hd = self.num_heads, self.head_dim
        q = self.W_query(x_q).view(b, t_q, h, hd).transpose(1, 2)
        k = self.W_key(x_kv).view(b, t_k, h, hd).transpose(1, 2)
        v = self.W_value(x_kv).view(b, t_k, h, hd).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(hd)

        blocked = torch.zeros(b, 1, t_q, t_k, dtype=torch.bool)
        if causal:
            blocked = blocked | torch.ones(t_q, t_k, dtype=torch.bool).triu(1)
        if key_padding_mask is not None:
            blocked = blocked | key_padding_mask[:, None, None, :]
        if attn_mask is not None:
            am = attn_mask
            if am.dim() == 3:  # nabla: [B or 1, T_q, T_k], else PyTorch's [B * H, T_q, T_k]
                am = am[:, None] if am.shape[0] in (b, 1) else am.view(b, h, t_q, t_k)
            if am.dtype == torch.bool:
                blocked = blocked | am
            else:
                blocked = blocked | (am == -math.inf)
                scores = scores + am.masked_fill(am == -math.inf, 0)
        if zero_dead_rows:  # nabla: fully blocked rows give zero weights, not NaN (docstring)
            dead = blocked.all(dim=-1, keepdim=True)
            scores = scores.masked_fill(blocked & ~dead, -math.inf)
            attn = torch.softmax(scores, dim=-1) * (~dead).to(scores.dtype)
        else:
            attn = torch.softmax(scores.masked_fill(blocked, -math.inf), dim=-1)
        self.last_attn = attn

        heads = attn @ v  # [B, H, T_q, hd]
        if head_mask is not None:
            heads = heads * head_mask[:, None, None]
        context = heads.transpose(1, 2).contiguous().view(b, t_q, self.d_out)
        return self.out_proj(context)


class FeedForward(nn.Module):
    def __init__(self, d_model):
        super().__init__()
        self.fc1 = nn.Linear(d_model, 4 * d_model)
        self.fc2 = nn.Linear(4 * d_model, d_model)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))  # exact erf GELU


class TransformerBlock(nn.Module):
    """Pre-LayerNorm: x + attn(norm1(x)), then x + ff(norm2(x))."""

    def __init__(self, d_model, num_heads, qkv_bias=False, eps=1e-5):
        super().__init__()
        self.norm1 = nn.LayerNorm(d_model, eps=eps)
        self.attn = MultiHeadAttention(d_model, d_model, num_heads, qkv_bias)
        self.norm2 = nn.LayerNorm(d_model, eps=eps)
        self.ff = FeedForward(d_model)

    def forward(self, x, causal=True, key_padding_mask=None, attn_mask=None):
        x = x + self.attn(self.norm1(x), causal=causal, key_padding_mask=key_padding_mask,
                          attn_mask=attn_mask)
        return x + self.ff(self.norm2(x))


# ---- cases ---------------------------------------------------------------------------------


class Float:
    """Float input, passed to forward by position (by name if keyword); random normal unless
    values are given."""

    def __init__(self, name, shape, values=None, grad=True, keyword=False):
        self.name, self.shape, self.values, self.grad = name, shape, values, grad
        self.keyword = keyword


class Fixed:
    """Index or mask input; masks are passed to forward by keyword, indices by position."""

    def __init__(self, name, dtype, values, keyword=True):
        self.name, self.dtype, self.values, self.grad = name, dtype, values, False
        self.keyword = keyword


CASES = []        # -> modules.json
MASK_CASES = []   # -> modules_masks.json
MHA_CASES = []    # -> modules_mha.json


def module_case(module_name, label, seed, make, config, inputs, forward=None, perturb=None,
                into=CASES, check=None):
    """make() builds the module (float32) right after torch.manual_seed(seed); perturb(module,
    generator), if given, then replaces some parameters (documented per case); check(module,
    draws), if given, asserts something about the module on the case's inputs. inputs are
    Float/Fixed specs in the order forward takes them, as keyword arguments by name. The f32
    and f64 cases are appended to into. Returns the float32 module whose parameters the cases
    hold."""
    forward = forward or {}
    torch.manual_seed(seed)
    base = make()
    g = torch.Generator().manual_seed(zlib.crc32(f"{module_name}|{label}".encode()))
    if perturb:
        perturb(base, g)
    draws = {}
    for spec in inputs:
        if isinstance(spec, Float):
            draws[spec.name] = (torch.tensor(spec.values, dtype=torch.float64)
                                if spec.values is not None
                                else torch.randn(spec.shape, generator=g, dtype=torch.float64))
        else:
            draws[spec.name] = torch.tensor(spec.values, dtype=spec.dtype)
    if check:
        check(base, draws)
    grad_out_draw = None
    for dt, dtype in (("f32", torch.float32), ("f64", torch.float64)):
        m = copy.deepcopy(base).to(dtype)  # f64: the f32 parameters widened
        xs, args, kwargs = {}, [], dict(forward)
        for spec in inputs:
            x = draws[spec.name]
            if isinstance(spec, Float) or x.is_floating_point():
                x = x.to(dtype).requires_grad_(isinstance(spec, Float) and spec.grad)
            xs[spec.name] = x
            if spec.keyword:
                kwargs[spec.name] = x
            else:
                args.append(x)
        out, grad_out, grad_out_draw = module_backward(m, args, kwargs, g, grad_out_draw, dtype,
                                                       f"{module_name} {label}")
        entry = module_case_entry(f"{module_name} {label} {dt}", module_name, dt, seed, config,
                                  forward, m, xs, out, grad_out)
        entry["extra_outputs"] = []
        if isinstance(m, MultiHeadAttention):
            entry["extra_outputs"].append(dict(name="attn_weights", **tensor_json(m.last_attn)))
        into.append(entry)
    return base


def torch_mha_agrees(module, draws):
    """Asserts that the reference MultiHeadAttention above computes what PyTorch's own
    nn.MultiheadAttention computes on a case's inputs (its masks in PyTorch's forms: 3-D as
    [B * H, T_q, T_k]), so the goldens hold PyTorch's mask semantics, not only ours. Rows that
    PyTorch gives NaN (every key blocked) are left out; nabla's rule for them is checked by the
    other cases."""
    h, d = module.num_heads, module.d_out
    bias = module.W_query.bias is not None
    assert bias == (module.out_proj.bias is not None), "PyTorch's bias covers all projections"
    ref = nn.MultiheadAttention(d, h, bias=bias, batch_first=True).double()
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([module.W_query.weight, module.W_key.weight,
                                            module.W_value.weight]))
        ref.out_proj.weight.copy_(module.out_proj.weight)
        if bias:
            ref.in_proj_bias.copy_(torch.cat([module.W_query.bias, module.W_key.bias,
                                              module.W_value.bias]))
            ref.out_proj.bias.copy_(module.out_proj.bias)
    x_q = draws.get("x", draws.get("x_q"))
    x_kv = draws.get("x", draws.get("x_kv"))
    b, t_q, t_k = x_q.shape[0], x_q.shape[1], x_kv.shape[1]
    am = draws.get("attn_mask")
    if am is not None and am.dim() == 3 and am.shape[0] in (b, 1):
        am = am.expand(b, t_q, t_k).repeat_interleave(h, dim=0)
    elif am is not None and am.dim() == 4:
        am = am.expand(b, h, t_q, t_k).reshape(b * h, t_q, t_k)
    if am is not None and am.is_floating_point():
        am = am.double()
    with torch.no_grad():
        want, want_w = ref(x_q, x_kv, x_kv, key_padding_mask=draws.get("key_padding_mask"),
                           attn_mask=am, need_weights=True, average_attn_weights=False)
        got = module.double()(x_q, x_kv, key_padding_mask=draws.get("key_padding_mask"),
                              attn_mask=draws.get("attn_mask"))
        got_w = module.last_attn
    module.float()
    del module.last_attn
    live = ~torch.isnan(want)
    assert live.any() and torch.allclose(got[live], want[live], atol=1e-12), "outputs differ"
    live_w = ~torch.isnan(want_w)
    assert torch.allclose(got_w.expand_as(want_w)[live_w], want_w[live_w],
                          atol=1e-12), "attention weights differ"


def perturb_layer_norms(module, g):
    """LayerNorm starts at weight 1, bias 0, which cannot show a forward that ignores them;
    these cases draw weight ~ 1 + 0.3 N(0,1) and bias ~ 0.3 N(0,1) instead."""
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.copy_(1 + 0.3 * torch.randn(m.weight.shape, generator=g))
                m.bias.copy_(0.3 * torch.randn(m.bias.shape, generator=g))


def write_safetensors(path, tensors, generator="tests/gen_module_goldens.py"):
    """tensors (name -> tensor) as a safetensors file, laid out as the reference implementation
    lays it out (see tests/gen_safetensors_golden.py): 8-byte little-endian header length,
    compact JSON header with "__metadata__" first, padded with spaces to a multiple of 8, then
    the row-major little-endian data ordered by decreasing element size, then name."""
    order = sorted(tensors, key=lambda k: (-tensors[k].element_size(), k))
    header = {"__metadata__": {"format": "pt", "generator": generator}}
    data = b""
    for name in order:
        b = raw_bytes(tensors[name].detach())
        header[name] = {"dtype": DTYPES[tensors[name].dtype],
                        "shape": list(tensors[name].shape),
                        "data_offsets": [len(data), len(data) + len(b)]}
        data += b
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


def mha_cases():
    """MultiHeadAttention as PyTorch users expect it (modules_mha.json): no biases, attention
    masks of every accepted shape, float additive masks, a head mask, causal with T_q != T_k.
    Every case without a head mask or a causal flag is also checked against PyTorch's own
    nn.MultiheadAttention (torch_mha_agrees)."""
    def mha(heads, qkv_bias, out_bias):
        return (lambda: MultiHeadAttention(6, 6, heads, qkv_bias, out_bias),
                {"d_in": 6, "d_out": 6, "num_heads": heads, "qkv_bias": qkv_bias,
                 "out_bias": out_bias, "dropout": 0.0})

    inf = math.inf
    make, cfg = mha(2, False, False)  # PyTorch's bias=False
    module_case("MultiHeadAttention", "bias=False", 21, make, cfg, [Float("x", [2, 4, 6])],
                {"causal": False}, into=MHA_CASES, check=torch_mha_agrees)
    make, cfg = mha(2, True, True)
    # Float [T_q, T_k]: -inf blocks, finite values shift the scores; row 2 keeps one key.
    module_case("MultiHeadAttention", "float attn_mask [T_q, T_k]", 22, make, cfg,
                [Float("x", [2, 4, 6]),
                 Fixed("attn_mask", torch.float64,
                       [[0.0, -1.5, 0.0, 2.0], [-inf, 0.0, 0.5, 0.0],
                        [-inf, -inf, -inf, 0.25], [0.0, 0.0, 0.0, 0.0]])],
                {"causal": False}, into=MHA_CASES, check=torch_mha_agrees)
    # Bool [B, T_q, T_k]: each sequence its own mask.
    module_case("MultiHeadAttention", "bool attn_mask [B, T_q, T_k]", 23, make, cfg,
                [Float("x", [2, 3, 6]),
                 Fixed("attn_mask", torch.bool,
                       [[[False, True, False], [False, False, True], [True, False, False]],
                        [[False, False, False], [True, False, True], [False, True, True]]])],
                {"causal": False}, into=MHA_CASES, check=torch_mha_agrees)
    # Float [B * H, T_q, T_k] (PyTorch's 3-D form) with a key padding mask, cross-attention.
    g = torch.Generator().manual_seed(24)
    bh = torch.randn(4, 2, 3, generator=g, dtype=torch.float64).tolist()
    bh[1][0][2] = bh[2][1][0] = -inf
    module_case("MultiHeadAttention", "float attn_mask [B * H, T_q, T_k] and key padding", 24,
                make, cfg,
                [Float("x_q", [2, 2, 6]), Float("x_kv", [2, 3, 6]),
                 Fixed("key_padding_mask", torch.bool, [[False, False, True],
                                                        [False, False, False]]),
                 Fixed("attn_mask", torch.float64, bh)],
                {"causal": False}, into=MHA_CASES, check=torch_mha_agrees)
    make, cfg = mha(2, False, True)
    # Bool [B, H, T_q, T_k]; sequence 1, head 0, query 1 sees no key (zero weights in nabla).
    module_case("MultiHeadAttention", "bool attn_mask [B, H, T_q, T_k], an empty row", 25, make,
                cfg,
                [Float("x", [2, 3, 6]),
                 Fixed("attn_mask", torch.bool,
                       [[[[False, True, True], [False, False, True], [False, False, False]],
                         [[True, False, True], [True, False, False], [False, True, False]]],
                        [[[False, False, True], [True, True, True], [True, False, False]],
                         [[False, False, False], [False, True, False], [True, True, False]]]])],
                {"causal": False}, into=MHA_CASES)
    # Head mask (Hugging Face's head_mask): one multiplier per head, its gradient checked.
    make, cfg = mha(3, False, True)
    module_case("MultiHeadAttention", "head_mask", 26, make, cfg,
                [Float("x", [2, 4, 6]), Float("head_mask", [3], values=[1.0, 0.0, 0.5],
                                              keyword=True)],
                {"causal": True}, into=MHA_CASES)
    # Causal with T_q != T_k: top-left aligned, key j > query i blocked (tril(ones(T_q, T_k))).
    make, cfg = mha(2, False, True)
    module_case("MultiHeadAttention", "causal cross-attention, T_q 3 < T_k 5", 27, make, cfg,
                [Float("x_q", [2, 3, 6]), Float("x_kv", [2, 5, 6])], {"causal": True},
                into=MHA_CASES)
    module_case("MultiHeadAttention", "causal cross-attention, T_q 5 > T_k 3", 28, make, cfg,
                [Float("x_q", [2, 5, 6]), Float("x_kv", [2, 3, 6])], {"causal": True},
                into=MHA_CASES)


def main():
    module_case("Linear", "bias", 1, lambda: nn.Linear(5, 3),
                {"in_features": 5, "out_features": 3, "bias": True}, [Float("x", [2, 3, 5])])
    module_case("Linear", "no bias", 2, lambda: nn.Linear(5, 3, bias=False),
                {"in_features": 5, "out_features": 3, "bias": False}, [Float("x", [4, 5])])

    ln_config = {"normalized_shape": 6, "eps": 1e-5}
    module_case("LayerNorm", "default init", 3, lambda: nn.LayerNorm(6, eps=1e-5), ln_config,
                [Float("x", [2, 3, 6])])
    module_case("LayerNorm", "perturbed affine", 4, lambda: nn.LayerNorm(6, eps=1e-5), ln_config,
                [Float("x", [2, 3, 6])], perturb=perturb_layer_norms)

    module_case("Embedding", "repeated indices", 5, lambda: nn.Embedding(10, 4),
                {"num_embeddings": 10, "embedding_dim": 4},
                [Fixed("indices", torch.int64, [[1, 3, 1], [9, 0, 3]], keyword=False)])

    def mha(d_in, d_out, heads, qkv_bias):
        return (lambda: MultiHeadAttention(d_in, d_out, heads, qkv_bias),
                {"d_in": d_in, "d_out": d_out, "num_heads": heads, "qkv_bias": qkv_bias,
                 "dropout": 0.0})

    make, cfg = mha(6, 6, 2, False)
    module_case("MultiHeadAttention", "causal self-attention", 6, make, cfg,
                [Float("x", [2, 4, 6])], {"causal": True})
    # Sequence 0: last two keys are padding; sequence 1: every key is padding.
    module_case("MultiHeadAttention", "key padding mask, one sequence fully padded", 7, make,
                cfg, [Float("x", [2, 4, 6]),
                      Fixed("key_padding_mask", torch.bool,
                            [[False, False, True, True], [True, True, True, True]])],
                {"causal": False})
    # Causal with left padding: query 0 of sequence 1 sees only a padded key (an empty row).
    module_case("MultiHeadAttention", "causal and key padding", 8, make, cfg,
                [Float("x", [2, 4, 6]),
                 Fixed("key_padding_mask", torch.bool,
                       [[False, False, False, True], [True, False, False, False]])],
                {"causal": True})
    # Attention mask with row 2 fully blocked.
    module_case("MultiHeadAttention", "attention mask", 9, make, cfg,
                [Float("x", [2, 4, 6]),
                 Fixed("attn_mask", torch.bool,
                       [[False, True, False, False], [False, False, True, True],
                        [True, True, True, True], [False, False, False, False]])],
                {"causal": False})
    make, cfg = mha(6, 6, 2, True)
    module_case("MultiHeadAttention", "cross-attention qkv_bias", 10, make, cfg,
                [Float("x_q", [2, 3, 6]), Float("x_kv", [2, 5, 6])], {"causal": False})
    make, cfg = mha(6, 6, 2, False)
    module_case("MultiHeadAttention", "tutorial seed 123", 123, make, cfg,
                [Float("x", [1, 3, 6], values=[[[1, 2, 3, 4, 5, 6], [6, 5, 4, 3, 2, 1],
                                                [1, 1, 1, 1, 1, 1]]])],
                {"causal": True})

    block_cfg = {"d_model": 8, "num_heads": 2, "qkv_bias": False, "ff_hidden": 32, "eps": 1e-5,
                 "dropout": 0.0}
    module_case("TransformerBlock", "causal", 11, lambda: TransformerBlock(8, 2), block_cfg,
                [Float("x", [2, 4, 8])], {"causal": True})
    block = module_case("TransformerBlock", "causal, perturbed layer norms", 12,
                        lambda: TransformerBlock(8, 2), block_cfg, [Float("x", [2, 4, 8])],
                        {"causal": True}, perturb=perturb_layer_norms)

    write_json(OUT, {"generator": "tests/gen_module_goldens.py", "torch": str(torch.__version__),
                     "cases": CASES})
    print(f"{os.path.relpath(OUT)}: {len(CASES)} cases")

    # Masks that combine. Sequence 1 keeps only key 0 and the attention mask blocks key 0 for
    # query 2: that row is empty only through both masks together.
    make, cfg = mha(6, 6, 2, False)
    module_case("MultiHeadAttention", "key padding and attention mask", 13, make, cfg,
                [Float("x", [2, 4, 6]),
                 Fixed("key_padding_mask", torch.bool,
                       [[False, False, False, True], [False, True, True, True]]),
                 Fixed("attn_mask", torch.bool,
                       [[False, True, False, False], [False, False, True, False],
                        [True, False, False, False], [False, False, False, False]])],
                {"causal": False}, into=MASK_CASES)
    # Cross-attention (T_q 3, T_k 5) with both masks; sequence 1 is fully padded.
    make, cfg = mha(6, 6, 2, True)
    module_case("MultiHeadAttention", "cross-attention, both masks, one sequence fully padded",
                14, make, cfg,
                [Float("x_q", [2, 3, 6]), Float("x_kv", [2, 5, 6]),
                 Fixed("key_padding_mask", torch.bool,
                       [[False, False, False, True, True], [True, True, True, True, True]]),
                 Fixed("attn_mask", torch.bool,
                       [[False, True, False, False, False], [False, False, False, False, False],
                        [True, False, True, False, False]])],
                {"causal": False}, into=MASK_CASES)
    module_case("TransformerBlock", "causal, key padding, one sequence fully padded", 15,
                lambda: TransformerBlock(8, 2), block_cfg,
                [Float("x", [2, 4, 8]),
                 Fixed("key_padding_mask", torch.bool,
                       [[False, False, False, True], [True, True, True, True]])],
                {"causal": True}, perturb=perturb_layer_norms, into=MASK_CASES)
    write_json(MASK_OUT, {"generator": "tests/gen_module_goldens.py",
                          "torch": str(torch.__version__), "cases": MASK_CASES})
    print(f"{os.path.relpath(MASK_OUT)}: {len(MASK_CASES)} cases")
    mha_cases()
    write_json(MHA_OUT, {"generator": "tests/gen_module_goldens.py",
                         "torch": str(torch.__version__), "cases": MHA_CASES})
    print(f"{os.path.relpath(MHA_OUT)}: {len(MHA_CASES)} cases")
    state = block.state_dict()  # nabla's parameter names: norm1.weight, attn.W_query.weight, ...
    write_safetensors(BLOCK_OUT, state)
    print(f"{os.path.relpath(BLOCK_OUT)}: {len(state)} tensors")


if __name__ == "__main__":
    main()
