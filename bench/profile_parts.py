"""Sums one `perf report --no-children --sort sym` of a nabla_bench run into the parts of a step.

Usage (bench/profile calls it): profile_parts.py WORKLOAD THREADS SYMBOLS REPORT [--header]
SYMBOLS has "object-file symbol" lines (nm of the release build); REPORT is perf's text.
A symbol is put in a part by the source file that defines it (the object file's name), a few
by their own name (SLEEF's erf is GELU's, its exp the softmax's; libc's memcpy/memset are
copies), kernel samples ([k]) under OS. What is in no object of nabla (libc, libm, the loader,
the benchmark's setup) is "other".
"""
import os
import re
import sys

PARTS = ["GEMM", "attn", "GELU", "norm", "optim", "elemw", "decode", "book", "thr-wait",
         "copies", "OS", "other"]

# (pattern on the object file's name, part); the first match wins.
BY_SOURCE = [
    (r"gemm|matmul|linear", "GEMM"),
    (r"attention|softmax|gqa", "attn"),
    (r"layer_norm|rms_norm", "norm"),
    (r"optim|clip_grad|update|adam", "optim"),
    (r"generate|kv_cache|decode", "decode"),
    (r"threads|_pool\.c", "thr-wait"),
    (r"elementwise|unary|reduce|column_sums|iter|loss|embedding|vecmath|swiglu|rope|compare|"
     r"logical|finite|dropout", "elemw"),
    (r"engine|function|views|create|memory|shape|error|module|op_registry|grad_util|print|"
     r"rng|isa|layers|transformer_lm|llama|blocks|table", "book"),
]

# Objects whose symbols count: the library, its per-ISA kernels, the blocks, the benchmark.
COUNTED = re.compile(r"libnabla\.so[0-9.]*\.p|libkernels_|libnabla_blocks|nabla_bench\.p")


def part_of_source(obj):
    name = os.path.basename(obj)
    if "nabla_bench.p" in obj:
        return "other"
    for pattern, part in BY_SOURCE:
        if re.search(pattern, name):
            return part
    return "other"


def part_of_symbol(sym, kernel, owners):
    if kernel:
        return "OS"
    if re.search(r"gelu|erf", sym, re.I):
        return "GELU"
    if sym.startswith("Sleef_") and "exp" in sym:
        return "attn"
    if re.match(r"__(memmove|memcpy|memset)|^mem(cpy|set|move)", sym):
        return "copies"
    parts = sorted({part_of_source(o) for o in owners.get(sym, ())})
    return parts[0] if parts else "other"


def main():
    workload, threads, symbols, report = sys.argv[1:5]
    owners = {}
    with open(symbols) as f:
        for line in f:
            obj, _, sym = line.strip().partition(" ")
            if COUNTED.search(obj):
                owners.setdefault(sym, set()).add(obj)
    share = dict.fromkeys(PARTS, 0.0)
    with open(report) as f:
        for line in f:
            m = re.match(r"\s*([0-9.]+)%\s+\[(.)\]\s+(\S+)", line)
            if m:
                pct, kind, sym = float(m.group(1)), m.group(2), m.group(3)
                share[part_of_symbol(sym, kind == "k", owners)] += pct
    if "--header" in sys.argv:
        print("%-8s %3s " % ("work", "thr") + " ".join("%8s" % p for p in PARTS) + "   (% of samples)")
    print("%-8s %3s " % (workload, threads) + " ".join("%8.1f" % share[p] for p in PARTS))


main()
