#!/usr/bin/python3
"""Writes the fuzz harness's seed corpus (fuzz/corpus/): small safetensors files shaped like
nabla's and PyTorch's, for the destinations fuzz_safetensors.c loads into (a: F32 [2],
b: I64 [1], mask: BOOL [2, 2]). Run: /usr/bin/python3 fuzz/make_corpus.py"""
import json
import os
import shutil
import struct
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus")


def write(name, tensors, metadata=None, crc=True):
    """tensors: list of (name, dtype, shape, bytes), stored in this order."""
    header, data = {}, b""
    for tname, dtype, shape, raw in tensors:
        header[tname] = {"dtype": dtype, "shape": shape,
                         "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    meta = dict(metadata or {})
    if crc:
        meta["nabla.data_crc32"] = "%08x" % zlib.crc32(data)
    if meta:
        header = {"__metadata__": meta, **header}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


def main():
    os.makedirs(OUT, exist_ok=True)
    a = ("a", "F32", [2], struct.pack("<2f", 1.5, -2.0))
    b = ("b", "I64", [1], struct.pack("<q", 123))
    mask = ("mask", "BOOL", [2, 2], bytes([1, 0, 0, 1]))
    write("nabla_checked.safetensors", [b, a, mask], {"d_model": "2", "format": "nabla"})
    write("no_checksum.safetensors", [a, b, mask], {"format": "pt"}, crc=False)
    write("two_tensors.safetensors", [a, b])
    write("empty.safetensors", [], crc=False)
    write("odd_shapes.safetensors",
          [("scalar", "F64", [], struct.pack("<d", 3.25)), ("none", "F32", [0, 3], b""),
           ("wide", "I64", [1, 1, 1, 2], struct.pack("<2q", -1, 1 << 40))])
    shutil.copy(os.path.join(HERE, "..", "tests", "goldens", "torch_checkpoint.safetensors"),
                os.path.join(OUT, "torch.safetensors"))


if __name__ == "__main__":
    main()
