"""The PyTorch twin of examples/digit_addition.c: an encoder-decoder transformer learns to add
two 3-digit numbers written as digits ("123+045" -> "0168"), trained on random problems;
greedy decoding of held-out problems, reported as the fraction whose every digit is right.
Usage: /usr/bin/python3 digit_addition.py [STEPS]"""
import sys

import torch
from torch import nn

SRC_LEN, LINE_LEN, OUT_LEN, DIM = 7, 12, 4, 64  # "123+045", "123+045=0168", "0168"
VOCAB = "+0123456789="  # tokens: characters in byte order; '=' starts the decoder


def problems(gen, n):
    """n random problems as token ids [n, LINE_LEN]."""
    pairs = torch.randint(0, 1000, (n, 2), generator=gen).tolist()
    return torch.tensor([[VOCAB.index(c) for c in f"{a:03}+{b:03}={a + b:04}"] for a, b in pairs])


class Seq2Seq(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok_emb, self.pos_emb = nn.Embedding(len(VOCAB), DIM), nn.Embedding(SRC_LEN, DIM)
        layer = dict(d_model=DIM, nhead=4, dim_feedforward=4 * DIM, dropout=0.0)
        layer.update(activation="gelu", batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoderLayer(**layer)
        self.decoder = nn.TransformerDecoderLayer(**layer)
        self.norm_f, self.head = nn.LayerNorm(DIM), nn.Linear(DIM, len(VOCAB))

    def embed(self, tokens):
        return self.tok_emb(tokens) + self.pos_emb(torch.arange(tokens.shape[1]))

    def encode(self, src):
        return self.encoder(self.embed(src))

    def decode(self, memory, dec_in):
        mask = nn.Transformer.generate_square_subsequent_mask(dec_in.shape[1])
        return self.head(self.norm_f(self.decoder(self.embed(dec_in), memory, tgt_mask=mask)))


torch.manual_seed(1)
model, data = Seq2Seq(), torch.Generator().manual_seed(2)
opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
steps = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
for step in range(steps):
    lines = problems(data, 64)
    logits = model.decode(model.encode(lines[:, :SRC_LEN]), lines[:, SRC_LEN:-1])
    targets = lines[:, SRC_LEN + 1 :].reshape(-1)
    loss = nn.functional.cross_entropy(logits.reshape(-1, len(VOCAB)), targets)
    opt.zero_grad()
    loss.backward()
    opt.step()

model.eval()
with torch.no_grad():  # greedy decoding of 1000 held-out problems
    lines = problems(torch.Generator().manual_seed(12345), 1000)
    memory, tgt = model.encode(lines[:, :SRC_LEN]), lines[:, SRC_LEN:]
    out = tgt[:, :1]  # '='
    for k in range(OUT_LEN):
        out = torch.cat([out, model.decode(memory, out)[:, k].argmax(-1, keepdim=True)], 1)
    acc = (out == tgt).all(1).float().mean().item()
print(f"exact match {acc:.4f} after {steps} steps (loss {loss.item():.4f})")
