#!/usr/bin/python3
"""A safetensors checkpoint written from PyTorch tensors, for tests/test_safetensors.c.

Debian's torch 1.13 has no safetensors package, so the format is written by hand here the way
the reference implementation writes it: 8-byte little-endian header length, compact JSON
header with "__metadata__" first, padded with spaces to a multiple of 8 bytes, then the data
of each tensor row-major and little-endian, ordered by decreasing element size then name.
The values are simple on purpose: the C test states them by hand.

Regenerate (from the repository root) with:
    /usr/bin/python3 tests/gen_safetensors_golden.py tests/goldens/torch_checkpoint.safetensors
"""
import json
import struct
import sys

import torch

DTYPES = {torch.float32: "F32", torch.float64: "F64", torch.int64: "I64", torch.bool: "BOOL"}


def tensors():
    return {
        # [[-1, -0.5, 0], [0.5, 1, 1.5]]
        "layer.weight": (torch.arange(6, dtype=torch.float32).reshape(2, 3) * 0.5 - 1.0),
        "layer.bias": torch.tensor([0.1, -2.5, 1e300], dtype=torch.float64),
        "token_ids": torch.tensor([0, -1, 2**40, 7], dtype=torch.int64),
        "mask": torch.tensor([[True, False], [False, True]]),
        "scale": torch.tensor(3.25, dtype=torch.float32),  # 0-d
        "empty": torch.zeros(0, 3, dtype=torch.float32),
        # A non-contiguous torch tensor: [[0, 3], [1, 4], [2, 5]], stored row-major.
        "transposed": torch.arange(6, dtype=torch.float64).reshape(2, 3).t(),
    }


def raw_bytes(t):
    t = t.contiguous()
    if t.dtype == torch.bool:
        return bytes(int(v) for v in t.flatten().tolist())
    fmt = {torch.float32: "f", torch.float64: "d", torch.int64: "q"}[t.dtype]
    return struct.pack("<%d%s" % (t.numel(), fmt), *t.flatten().tolist())


def main(path):
    ts = tensors()
    order = sorted(ts, key=lambda k: (-ts[k].element_size(), k))
    header = {"__metadata__": {"format": "pt", "generator": "tests/gen_safetensors_golden.py"}}
    data = b""
    for name in order:
        t = ts[name]
        b = raw_bytes(t)
        header[name] = {"dtype": DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [len(data), len(data) + len(b)]}
        data += b
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/goldens/torch_checkpoint.safetensors")
