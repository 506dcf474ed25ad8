#!/usr/bin/python3
"""Counts a program's lines of code: lines that hold something besides blanks and comments
(C: /* */ and // comments; Python: # comments and docstrings). The same rule for both
languages, for the README's table of nabla's examples beside their PyTorch twins.
Usage: count_lines.py FILE..."""
import io
import re
import sys
import tokenize


def c_lines(src):
    src = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group().count("\n"), src, flags=re.S)
    return sum(1 for line in src.splitlines() if re.sub(r"//.*", "", line).strip())


def python_lines(src):
    code, prev, depth = set(), tokenize.INDENT, 0
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        depth += tok.type == tokenize.OP and tok.string in "([{"
        depth -= tok.type == tokenize.OP and tok.string in ")]}"
        docstring = (
            tok.type == tokenize.STRING
            and depth == 0
            and prev
            in (
                tokenize.INDENT,
                tokenize.NEWLINE,
                tokenize.DEDENT,
                tokenize.NL,
            )
        )
        if (
            tok.type
            not in (
                tokenize.COMMENT,
                tokenize.NL,
                tokenize.NEWLINE,
                tokenize.INDENT,
                tokenize.DEDENT,
                tokenize.ENDMARKER,
            )
            and not docstring
        ):
            code.update(range(tok.start[0], tok.end[0] + 1))
        if tok.type not in (tokenize.COMMENT, tokenize.NL):
            prev = tok.type
    return len(code)


for path in sys.argv[1:]:
    src = open(path, encoding="utf-8").read()
    print(path, python_lines(src) if path.endswith(".py") else c_lines(src))
