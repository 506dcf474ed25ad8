"""JSON output shared by the golden generators (tests/gen_goldens.py, tests/gen_module_goldens.py,
tests/gen_blocks_goldens.py), and the forward and backward pass their module cases share.

Floats are written with Python's repr, which round-trips a double exactly; float32 tensors
are written as their exact values widened to double, so parsing to double and narrowing to
float gives back the very same float32. JSON has no infinities, so +-inf and nan are written
as the strings "inf", "-inf" and "nan". Lists of scalars (the data arrays) go on one line.
"""
import json
import math
import sys

import torch

TORCH_DTYPE = {"f32": torch.float32, "f64": torch.float64, "i64": torch.int64,
               "bool": torch.bool}
DTYPE_NAME = {v: k for k, v in TORCH_DTYPE.items()}


def _scalar(x):
    if isinstance(x, bool):
        return "true" if x else "false"
    if isinstance(x, int):
        return str(x)
    if isinstance(x, float):
        if math.isnan(x):
            return '"nan"'
        if math.isinf(x):
            return '"inf"' if x > 0 else '"-inf"'
        return repr(x)
    if x is None:
        return "null"
    return json.dumps(x)


def _encode(obj, indent):
    """JSON with objects indented and lists of scalars on one line (data arrays are long)."""
    pad = " " * indent
    if isinstance(obj, dict):
        if not obj:
            return "{}"
        items = [f'{pad}  {json.dumps(k)}: {_encode(v, indent + 2)}' for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(obj, (list, tuple)):
        if all(not isinstance(v, (dict, list, tuple)) for v in obj):
            return "[" + ", ".join(_scalar(v) for v in obj) + "]"
        items = [pad + "  " + _encode(v, indent + 2) for v in obj]
        return "[\n" + ",\n".join(items) + "\n" + pad + "]"
    return _scalar(obj)


def write_json(path, obj, reads_back=None):
    """Writes obj to path, after checking the text parses back to exactly the same values.
    reads_back(written, parsed), if given, judges a value first (True or False; None leaves it
    to the exact check): for a writer whose values print in a form of their own."""
    text = _encode(obj, 0) + "\n"
    special = {"inf": math.inf, "-inf": -math.inf}
    back = json.loads(text)

    def same(a, b):
        verdict = reads_back(a, b) if reads_back else None
        if verdict is not None:
            return verdict
        if isinstance(a, dict):
            return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
        if isinstance(a, (list, tuple)):
            return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
        if isinstance(a, float) and isinstance(b, str):
            return (math.isnan(a) and b == "nan") or special.get(b) == a
        return type(a) is type(b) and (a == b or (a != a and b != b))

    if not same(obj, back):
        sys.exit(f"{path} does not parse back to the values written")
    with open(path, "w") as f:
        f.write(text)


def tensor_json(t):
    """{"dtype", "shape", "data"} of a tensor, data in row-major order."""
    t = t.detach()
    data = t.contiguous().view(-1).tolist()  # f32 -> the exact float32 values as doubles
    return {"dtype": DTYPE_NAME[t.dtype], "shape": list(t.shape), "data": data}


def module_case_entry(name, module, dtype, seed, config, forward, m, inputs, out, grad_out):
    """One module case of the module golden files (see tests/gen_module_goldens.py for the
    format): module m after backward of sum(out * grad_out), its inputs a name -> tensor
    dict."""
    return {
        "name": name,
        "module": module,
        "dtype": dtype,
        "seed": seed,
        "config": config,
        "forward": forward,
        "parameters": [dict(name=n, requires_grad=True, **tensor_json(p))
                       for n, p in m.state_dict(keep_vars=True).items()],
        "inputs": [dict(name=n, requires_grad=x.requires_grad, **tensor_json(x))
                   for n, x in inputs.items()],
        "output": tensor_json(out),
        "grad_output": tensor_json(grad_out),
        "parameter_grads": [dict(name=n, **tensor_json(p.grad)) for n, p in m.named_parameters()],
        "input_grads": [dict(name=n, **tensor_json(x.grad))
                        for n, x in inputs.items() if x.requires_grad],
    }


def module_backward(m, args, kwargs, g, grad_out_draw, dtype, what):
    """Runs m(*args, **kwargs) and backward with a random output gradient, drawn in float64 from
    g the first time (grad_out_draw None) and reused for the other dtypes of the case; checks
    that the output and the parameters' gradients are finite. Returns (out, grad_out,
    grad_out_draw)."""
    out = m(*args, **kwargs)
    if grad_out_draw is None:
        grad_out_draw = torch.randn(out.shape, generator=g, dtype=torch.float64)
    grad_out = grad_out_draw.to(dtype)
    (out * grad_out).sum().backward()
    for t in [out] + [p.grad for p in m.parameters()]:
        assert torch.isfinite(t).all(), f"{what}: non-finite values"
    return out, grad_out, grad_out_draw
