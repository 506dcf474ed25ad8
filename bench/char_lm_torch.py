"""PyTorch's side of bench/time_to_loss: the twin of bench/char_lm_nabla.c.

    /usr/bin/python3 bench/char_lm_torch.py FILE [--threads N] [--own-init] [--quiet]

FILE is what `char_lm_nabla --export FILE` wrote: the run's settings (metadata "ttl.*"), the
model's initial parameters under nabla's names, the token ids of the training and validation
text, the start of every training window in nabla's order and the validation windows' starts.
So both sides train the same model (nabla's TransformerLM: token + position embeddings,
pre-LayerNorm blocks of causal multi-head attention without q/k/v biases and an exact-GELU
feed-forward of 4 * dim, a final LayerNorm and a linear head) from the same weights on the same
windows in the same order, with the same optimizer (AdamW, PyTorch's defaults, weight decay
0.01), gradient clipping (norm 1) and learning rate (nabla's nb_lr_warmup_cosine), and evaluate
on the same validation windows. --own-init initialises the model here instead, with PyTorch's
default initialisation (nabla's scheme: linear layers uniform in +-1/sqrt(in), embeddings
N(0, 1), norms ones and zeros), seeded with the run's seed.

Prints one line per evaluation and a result line in char_lm_nabla's format (side=torch). Debian's
torch 1.13 has no safetensors package: the file is read by hand (8-byte little-endian header
length, JSON header, then the data at the header's offsets)."""
import argparse
import json
import math
import resource
import struct
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

DTYPES = {"F32": torch.float32, "F64": torch.float64, "I64": torch.int64}


def read_safetensors(path):
    """The tensors of a safetensors file by name, and its metadata."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    meta = header.pop("__metadata__", {})
    data = memoryview(blob)[8 + n:]
    tensors = {}
    for name, t in header.items():
        b, e = t["data_offsets"]
        flat = torch.frombuffer(bytearray(data[b:e]), dtype=DTYPES[t["dtype"]])
        tensors[name] = flat.reshape(t["shape"])
    return tensors, meta


class Attention(nn.Module):
    """nabla's nb_mha: W_query, W_key, W_value without biases, out_proj with one; causal."""

    def __init__(s, dim, heads):
        super().__init__()
        s.heads, s.head_dim = heads, dim // heads
        s.W_query = nn.Linear(dim, dim, bias=False)
        s.W_key = nn.Linear(dim, dim, bias=False)
        s.W_value = nn.Linear(dim, dim, bias=False)
        s.out_proj = nn.Linear(dim, dim)

    def forward(s, x):
        B, T, D = x.shape
        split = lambda t: t.view(B, T, s.heads, s.head_dim).transpose(1, 2)
        q, k, v = split(s.W_query(x)), split(s.W_key(x)), split(s.W_value(x))
        scores = q @ k.transpose(-2, -1) / math.sqrt(s.head_dim)
        blocked = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
        weights = torch.softmax(scores.masked_fill(blocked, float("-inf")), -1)
        return s.out_proj((weights @ v).transpose(1, 2).contiguous().view(B, T, D))


class FeedForward(nn.Module):
    def __init__(s, dim):
        super().__init__()
        s.fc1, s.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(s, x):
        return s.fc2(F.gelu(s.fc1(x)))


class Block(nn.Module):
    def __init__(s, dim, heads):
        super().__init__()
        s.norm1, s.attn = nn.LayerNorm(dim), Attention(dim, heads)
        s.norm2, s.ff = nn.LayerNorm(dim), FeedForward(dim)

    def forward(s, x):
        x = x + s.attn(s.norm1(x))
        return x + s.ff(s.norm2(x))


class TransformerLM(nn.Module):
    """nabla's nb_transformer_lm, parameter names included."""

    def __init__(s, vocab, context, dim, heads, layers):
        super().__init__()
        s.tok_emb, s.pos_emb = nn.Embedding(vocab, dim), nn.Embedding(context, dim)
        s.blocks = nn.ModuleList([Block(dim, heads) for _ in range(layers)])
        s.norm_f, s.head = nn.LayerNorm(dim), nn.Linear(dim, vocab)

    def forward(s, idx):
        x = s.tok_emb(idx) + s.pos_emb(torch.arange(idx.shape[1]))
        for b in s.blocks:
            x = b(x)
        return s.head(s.norm_f(x))


def warmup_cosine(step, warmup, total, base, low):
    """nabla's nb_lr_warmup_cosine."""
    if step < warmup:
        return base * step / warmup
    if step < total:
        return low + (base - low) * (1 + math.cos(math.pi * (step - warmup) / (total - warmup))) / 2
    return low


def windows(tokens, starts, T):
    """Inputs and targets of the windows of T + 1 tokens at starts (as nb_corpus_batch)."""
    w = tokens[starts[:, None] + torch.arange(T + 1)]
    return w[:, :-1], w[:, 1:]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("file")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--own-init", action="store_true")
    p.add_argument("--quiet", action="store_true")
    a = p.parse_args()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    tensors, meta = read_safetensors(a.file)
    num = lambda k: float(meta["ttl." + k])
    V, T, D, H, L, B = (int(num(k)) for k in ("vocab", "context", "dim", "heads", "layers", "batch"))
    lr, clip, target = num("lr"), num("clip"), num("target")
    max_steps, eval_every, seed = int(num("max_steps")), int(num("eval_every")), int(num("seed"))
    train, val = tensors.pop("data.train"), tensors.pop("data.val")
    order, val_starts = tensors.pop("data.order"), tensors.pop("data.val_starts")
    torch.manual_seed(seed)
    model = TransformerLM(V, T, D, H, L)
    if not a.own_init:
        model.load_state_dict(tensors, strict=True)  # every name and shape must match
    del tensors
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    params = list(model.parameters())

    def validation_loss():
        model.eval()
        nats = 0.0
        with torch.no_grad():
            for w0 in range(0, len(val_starts), B):
                x, y = windows(val, val_starts[w0:w0 + B], T)
                nats += F.cross_entropy(model(x).view(-1, V), y.reshape(-1), reduction="sum").item()
        model.train()
        return nats / (len(val_starts) * T)

    initial = loss = validation_loss()
    if not a.quiet:
        print(f"step 0 val_loss {initial:.6f}", flush=True)
    t0 = time.perf_counter()
    step = 0
    while step < max_steps and not loss <= target:
        x, y = windows(train, order[step], T)
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x).view(-1, V), y.reshape(-1)).backward()
        torch.nn.utils.clip_grad_norm_(params, clip)
        for g in opt.param_groups:
            g["lr"] = warmup_cosine(step, max_steps // 20, max_steps, lr, lr / 10)
        opt.step()
        step += 1
        if step % eval_every == 0 or step == max_steps:
            loss = validation_loss()
            if not math.isfinite(loss):
                sys.exit(f"char_lm_torch: step {step}: the validation loss is {loss}")
            if not a.quiet:
                print(f"step {step} val_loss {loss:.6f} time {time.perf_counter() - t0:.3f}",
                      flush=True)
    wall = time.perf_counter() - t0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    reached = loss <= target
    print(f"result side=torch threads={torch.get_num_threads()} reached={'yes' if reached else 'no'} "
          f"steps={step} wall_s={wall:.3f} val_loss={loss:.4f} initial_val_loss={initial:.6f} "
          f"peak_rss_mb={rss:.1f} target={target:.4f}")
    sys.exit(0 if reached else 1)


if __name__ == "__main__":
    main()
