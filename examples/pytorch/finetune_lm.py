"""The PyTorch twin of examples/finetune_lm.c: fine-tunes a char_lm checkpoint on another text
with its embeddings and every block but the last frozen; reports the validation loss before
and after, and saves the model. The checkpoint is nabla's safetensors file, read here by hand.
Usage: /usr/bin/python3 finetune_lm.py CHECKPOINT [TEXT [STEPS [OUT_FILE]]]"""
import json
import struct
import sys

import torch
from torch import nn

CONTEXT, BATCH, VAL_WINDOWS = 64, 16, 32


def read_safetensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8 : 8 + n])
    meta = header.pop("__metadata__")
    data = {
        k: torch.frombuffer(
            bytearray(raw[8 + n + v["data_offsets"][0] : 8 + n + v["data_offsets"][1]]),
            dtype=torch.float32,
        ).reshape(v["shape"])
        for k, v in header.items()
    }
    return data, meta


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads, self.norm1, self.norm2 = heads, nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = nn.Module()
        for name in ["W_query", "W_key", "W_value"]:
            setattr(self.attn, name, nn.Linear(dim, dim, bias=False))
        self.attn.out_proj = nn.Linear(dim, dim)
        self.ff = nn.Sequential()
        self.ff.fc1, self.ff.gelu, self.ff.fc2 = (
            nn.Linear(dim, 4 * dim),
            nn.GELU(),
            nn.Linear(4 * dim, dim),
        )

    def forward(self, x):
        B, T, D = x.shape
        h = self.norm1(x)
        q, k, v = (
            getattr(self.attn, n)(h).view(B, T, self.heads, -1).transpose(1, 2)
            for n in ["W_query", "W_key", "W_value"]
        )
        scores = (q @ k.transpose(2, 3) / k.shape[-1] ** 0.5).masked_fill(
            torch.ones(T, T).triu(1).bool(), float("-inf")
        )
        a = scores.softmax(-1) @ v
        x = x + self.attn.out_proj(a.transpose(1, 2).reshape(B, T, D))
        return x + self.ff(self.norm2(x))


class TransformerLM(nn.Module):
    def __init__(self, vocab, context, dim, heads, layers):
        super().__init__()
        self.tok_emb, self.pos_emb = nn.Embedding(vocab, dim), nn.Embedding(context, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.norm_f, self.head = nn.LayerNorm(dim), nn.Linear(dim, vocab)

    def forward(self, tokens):
        x = self.tok_emb(tokens) + self.pos_emb(torch.arange(tokens.shape[1]))
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm_f(x))


weights, meta = read_safetensors(sys.argv[1])
model = TransformerLM(
    *(int(meta["nabla." + k]) for k in ["vocab", "context", "d_model", "heads", "layers"])
)
model.load_state_dict(weights)
chars = bytes.fromhex(meta["nabla.tokenizer.chars"])  # the characters tokenizer: ids in byte order
text = open(sys.argv[2] if len(sys.argv) > 2 else "/usr/share/common-licenses/GPL-3", "rb").read()
blocks = [text[i : i + 256] for i in range(0, len(text), 256)]  # every 10th block for validation


def encode(some_blocks):  # bytes outside the vocabulary are left out
    return torch.tensor([chars.index(c) for c in b"".join(some_blocks) if c in chars])


train, val = encode(b for i, b in enumerate(blocks) if i % 10 != 9), encode(blocks[9::10])
for module in [model.tok_emb, model.pos_emb, *model.blocks[:-1]]:
    module.requires_grad_(False)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)


def loss_of(x, y):
    return nn.functional.cross_entropy(model(x).reshape(-1, model.head.out_features), y.reshape(-1))


def val_loss():  # VAL_WINDOWS evenly spaced windows of the validation text
    starts = torch.arange(VAL_WINDOWS) * ((len(val) - CONTEXT - 1) // VAL_WINDOWS)
    with torch.no_grad():
        return loss_of(
            val[starts[:, None] + torch.arange(CONTEXT)],
            val[starts[:, None] + torch.arange(1, CONTEXT + 1)],
        ).item()


before, steps = val_loss(), int(sys.argv[3]) if len(sys.argv) > 3 else 300
torch.manual_seed(2)
for step in range(steps):
    starts = torch.randint(0, len(train) - CONTEXT, (BATCH, 1))
    loss = loss_of(
        train[starts + torch.arange(CONTEXT)], train[starts + torch.arange(1, CONTEXT + 1)]
    )
    opt.zero_grad()
    loss.backward()
    opt.step()
torch.save(model.state_dict(), sys.argv[4] if len(sys.argv) > 4 else "finetune_lm.pt")
print(f"validation loss {before:.4f} before, {val_loss():.4f} after {steps} steps")
