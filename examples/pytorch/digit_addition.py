"""The PyTorch twin of examples/digit_addition.c: an encoder-decoder transformer learns to add
two DIGITS-digit numbers written as digits ("123+045" -> "0168"), trained on random problems;
greedy decoding of held-out problems, reported as the fraction whose every digit is right.
Usage: /usr/bin/python3 digit_addition.py [STEPS]"""
import sys

import torch
from torch import nn

DIGITS, PLUS, BOS, VOCAB, DIM = 3, 10, 11, 12, 64
SRC_LEN, OUT_LEN = 2 * DIGITS + 1, DIGITS + 1


def write_digits(v, n):
    return v[:, None] // 10 ** torch.arange(n - 1, -1, -1) % 10


def problems(gen, n):
    """n random problems: src [n, SRC_LEN] and tgt [n, 1 + OUT_LEN] (BOS, then the sum)."""
    a, b = torch.randint(0, 10**DIGITS, (2, n), generator=gen)
    src = torch.cat([write_digits(a, DIGITS), torch.full((n, 1), PLUS), write_digits(b, DIGITS)], 1)
    return src, torch.cat([torch.full((n, 1), BOS), write_digits(a + b, OUT_LEN)], 1)


class Seq2Seq(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok_emb, self.pos_emb = nn.Embedding(VOCAB, DIM), nn.Embedding(SRC_LEN, DIM)
        layer = dict(d_model=DIM, nhead=4, dim_feedforward=4 * DIM, dropout=0.0, activation="gelu", batch_first=True, norm_first=True)
        self.encoder, self.decoder = nn.TransformerEncoderLayer(**layer), nn.TransformerDecoderLayer(**layer)
        self.norm_f, self.head = nn.LayerNorm(DIM), nn.Linear(DIM, VOCAB)

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
    src, tgt = problems(data, 64)
    logits = model.decode(model.encode(src), tgt[:, :OUT_LEN])
    loss = nn.functional.cross_entropy(logits.reshape(-1, VOCAB), tgt[:, 1:].reshape(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()

model.eval()
with torch.no_grad():  # greedy decoding of 1000 held-out problems
    src, tgt = problems(torch.Generator().manual_seed(12345), 1000)
    memory, out = model.encode(src), tgt[:, :1]
    for k in range(OUT_LEN):
        out = torch.cat([out, model.decode(memory, out)[:, k].argmax(-1, keepdim=True)], 1)
    acc = (out == tgt).all(1).float().mean().item()
print(f"exact match {acc:.4f} after {steps} steps (loss {loss.item():.4f})")
