#!/usr/bin/python3
"""Expected optimizer trajectories from torch.optim, for tests/test_optim.c.

Two parameters, p0 [2, 3] and p1 [4], take 5 steps with fixed gradients (written to the
header too, so the C test feeds exactly the same numbers). p1 has no gradient at step 0, so
it is skipped there and its step count lags p0's (torch keeps per-parameter step counts).
The learning rate is changed between steps (factors LR_FACTORS), as a schedule would.
Each configuration runs in float64 and float32.

A second set (optf_*) covers what torch users rely on beyond that: parameters that do not
require grad (one frozen at creation and unfrozen later, one frozen for two steps in the
middle; torch then has grad None for them) and parameter groups with their own lr and
weight_decay, the lr of every group scaled by the same factor each step (LambdaLR).

A third (optl_*) is torch.optim.lr_scheduler's learning rates, divided by the initial one,
for the decays nb_lr_schedule makes without warm-up: LinearLR, CosineAnnealingLR, StepLR.

Regenerate (from the repository root) with:
    /usr/bin/python3 tests/gen_optim_golden.py > tests/goldens/optim_golden.h
"""
import sys

import torch

STEPS = 5
LR_FACTORS = [1.0, 1.0, 0.5, 0.5, 0.25]

# name, torch.optim class, hyperparameters (torch keyword arguments)
CASES = [
    ("sgd", "SGD", {"lr": 0.1}),
    ("sgd_momentum_decay", "SGD", {"lr": 0.1, "momentum": 0.9, "weight_decay": 0.01}),
    ("sgd_dampening", "SGD", {"lr": 0.05, "momentum": 0.8, "dampening": 0.3}),
    ("sgd_nesterov", "SGD", {"lr": 0.1, "momentum": 0.9, "weight_decay": 0.05, "nesterov": True}),
    ("adam", "Adam", {"lr": 0.01}),
    ("adam_l2", "Adam", {"lr": 0.02, "betas": (0.8, 0.99), "eps": 1e-6, "weight_decay": 0.1}),
    ("adamw", "AdamW", {"lr": 0.01, "weight_decay": 0.1}),
    ("adamw_betas", "AdamW", {"lr": 0.03, "betas": (0.5, 0.9), "eps": 1e-4, "weight_decay": 0.3}),
]

STATE_KINDS = {"SGD": ["momentum_buffer"], "Adam": ["exp_avg", "exp_avg_sq"],
               "AdamW": ["exp_avg", "exp_avg_sq"]}


def inputs():
    g = torch.Generator().manual_seed(20240601)
    p0 = torch.randn(2, 3, generator=g, dtype=torch.float64)
    p1 = torch.randn(4, generator=g, dtype=torch.float64)
    # Gradients of varied scale so Adam's normalisation matters.
    g0 = [torch.randn(2, 3, generator=g, dtype=torch.float64) * (0.5 + k) for k in range(STEPS)]
    g1 = [torch.randn(4, generator=g, dtype=torch.float64) * 2.0 for k in range(STEPS)]
    # Round through float32 so the float32 run starts from exactly the same numbers.
    def f32(t):
        return t.float().double()
    return f32(p0), f32(p1), [f32(x) for x in g0], [f32(x) for x in g1]


def run(cls, kwargs, dtype, p0_init, p1_init, g0, g1):
    p0 = p0_init.clone().to(dtype).requires_grad_()
    p1 = p1_init.clone().to(dtype).requires_grad_()
    opt = getattr(torch.optim, cls)([p0, p1], **kwargs)
    for k in range(STEPS):
        for group in opt.param_groups:
            group["lr"] = kwargs["lr"] * LR_FACTORS[k]
        p0.grad = g0[k].to(dtype).clone()
        p1.grad = None if k == 0 else g1[k].to(dtype).clone()
        opt.step()
    return p0.detach(), p1.detach(), opt.state


# ---- frozen parameters and parameter groups ----
F_STEPS = 6
F_LR_FACTORS = [1.0, 0.5, 0.75, 1.0, 0.25, 0.5]
F_SHAPES = [(2, 3), (4,), (3, 2)]
# Which parameters require grad at each step (and get a gradient then): q1 is frozen when the
# optimizer is made and unfrozen at step 3; q2 is frozen at steps 2 and 3.
F_TRAINABLE = [[True, False, True], [True, False, True], [True, False, False],
               [True, True, False], [True, True, True], [True, True, True]]
ALL_TRAINABLE = [[True] * 3] * F_STEPS

# name, class, shared hyperparameters, groups [(param indices, lr, weight_decay)], schedule
F_CASES = [
    ("adamw_frozen", "AdamW", {}, [([0, 1, 2], 0.01, 0.1)], F_TRAINABLE),
    ("adam_frozen", "Adam", {"betas": (0.8, 0.99), "eps": 1e-6}, [([0, 1, 2], 0.02, 0.05)],
     F_TRAINABLE),
    ("sgd_frozen", "SGD", {"momentum": 0.9}, [([0, 1, 2], 0.1, 0.01)], F_TRAINABLE),
    ("adamw_groups", "AdamW", {}, [([0, 2], 0.01, 0.1), ([1], 0.03, 0.0)], ALL_TRAINABLE),
    ("adam_groups", "Adam", {}, [([0, 2], 0.02, 0.05), ([1], 0.005, 0.0)], ALL_TRAINABLE),
    ("sgd_groups", "SGD", {"momentum": 0.9}, [([0, 2], 0.1, 0.01), ([1], 0.05, 0.2)],
     ALL_TRAINABLE),
    # nb_adamw_new_decay_split's groups (rank >= 2 decayed, rank < 2 not), with the freezing
    ("adamw_decay_split_frozen", "AdamW", {}, [([0, 2], 0.01, 0.1), ([1], 0.01, 0.0)],
     F_TRAINABLE),
]


def f_inputs():
    g = torch.Generator().manual_seed(20261127)
    init = [torch.randn(*s, generator=g, dtype=torch.float64).float().double() for s in F_SHAPES]
    grads = [[(torch.randn(*s, generator=g, dtype=torch.float64) * (0.5 + k)).float().double()
              for s in F_SHAPES] for k in range(F_STEPS)]
    return init, grads


def f_run(cls, shared, groups, trainable, dtype, init, grads):
    q = [t.clone().to(dtype).requires_grad_(trainable[0][j]) for j, t in enumerate(init)]
    opt = getattr(torch.optim, cls)(
        [{"params": [q[j] for j in idx], "lr": lr, "weight_decay": wd} for idx, lr, wd in groups],
        **shared)
    for k in range(F_STEPS):
        for group, (_, lr, _) in zip(opt.param_groups, groups):
            group["lr"] = lr * F_LR_FACTORS[k]
        for j in range(3):
            q[j].requires_grad_(trainable[k][j])
            q[j].grad = grads[k][j].to(dtype).clone() if trainable[k][j] else None
        opt.step()
    return [t.detach() for t in q], opt.state, q


def c_array(values):
    return "{" + ", ".join(repr(float(v)) for v in values) + "}"


def main():
    p0, p1, g0, g1 = inputs()
    out = sys.stdout
    out.write("/* Generated by tests/gen_optim_golden.py with torch %s: do not edit.\n"
              " * Regenerate: /usr/bin/python3 tests/gen_optim_golden.py > "
              "tests/goldens/optim_golden.h */\n" % torch.__version__)
    out.write("#define OPTG_STEPS %d\n" % STEPS)
    out.write("static const double optg_lr_factors[OPTG_STEPS] = %s;\n" % c_array(LR_FACTORS))
    out.write("static const double optg_p0_init[6] = %s; /* shape [2, 3] */\n"
              % c_array(p0.flatten()))
    out.write("static const double optg_p1_init[4] = %s;\n" % c_array(p1.flatten()))
    out.write("static const double optg_p0_grads[OPTG_STEPS][6] = {\n")
    for x in g0:
        out.write("    %s,\n" % c_array(x.flatten()))
    out.write("};\n/* p1 has no gradient at step 0 (row 0 is unused). */\n")
    out.write("static const double optg_p1_grads[OPTG_STEPS][4] = {\n")
    for x in g1:
        out.write("    %s,\n" % c_array(x.flatten()))
    out.write("};\n\n")
    out.write("typedef enum { OPTG_SGD, OPTG_ADAM, OPTG_ADAMW } optg_kind;\n")
    out.write("typedef struct {\n"
              "    const char *name;\n"
              "    optg_kind kind;\n"
              "    double lr, momentum, dampening, weight_decay, beta1, beta2, eps;\n"
              "    bool nesterov;\n"
              "    double p0_f64[6], p1_f64[4], p0_f32[6], p1_f32[4];\n"
              "    /* float64 state after the steps: momentum_buffer or exp_avg, then exp_avg_sq\n"
              "     * (Adam only); torch's per-parameter step counts (-1: SGD keeps none). */\n"
              "    double p0_state[2][6], p1_state[2][4];\n"
              "    long long p0_steps, p1_steps;\n"
              "} optg_case;\n\n")
    out.write("static const optg_case optg_cases[] = {\n")
    for name, cls, kw in CASES:
        q0, q1, state = run(cls, kw, torch.float64, p0, p1, g0, g1)
        r0, r1, _ = run(cls, kw, torch.float32, p0, p1, g0, g1)
        betas = kw.get("betas", (0.9, 0.999))
        eps = kw.get("eps", 1e-8)
        wd = kw.get("weight_decay", 0.01 if cls == "AdamW" else 0.0)
        kind = {"SGD": "OPTG_SGD", "Adam": "OPTG_ADAM", "AdamW": "OPTG_ADAMW"}[cls]
        params = list(state.keys())
        s0, s1 = state[params[0]], state[params[1]]
        kinds = STATE_KINDS[cls]

        def state_rows(s, n):
            rows = [s[k].flatten() if k in s and s[k] is not None else [0.0] * n for k in kinds]
            rows += [[0.0] * n] * (2 - len(rows))
            return "{" + ", ".join(c_array(r) for r in rows) + "}"

        def steps(s):  # torch's SGD keeps no step count: -1
            return int(s["step"].item()) if "step" in s else -1

        out.write("    {%s, %s, %r, %r, %r, %r, %r, %r, %r, %s,\n"
                  % ('"' + name + '"', kind, kw["lr"], kw.get("momentum", 0.0),
                     kw.get("dampening", 0.0), wd, betas[0], betas[1], eps,
                     "true" if kw.get("nesterov", False) else "false"))
        out.write("     %s,\n     %s,\n" % (c_array(q0.flatten()), c_array(q1.flatten())))
        out.write("     %s,\n     %s,\n" % (c_array(r0.flatten()), c_array(r1.flatten())))
        out.write("     %s,\n     %s,\n" % (state_rows(s0, 6), state_rows(s1, 4)))
        out.write("     %d, %d},\n" % (steps(s0), steps(s1)))
    out.write("};\n")
    out.write("#define OPTG_NCASES ((int)(sizeof optg_cases / sizeof optg_cases[0]))\n")
    write_f_cases(out)
    write_schedules(out)


L_STEPS = 14
L_LR = 0.5
# name, scheduler, its arguments; nabla's schedule (see test_optim.c) as a comment
L_CASES = [
    ("linear", "LinearLR", {"start_factor": 1.0, "end_factor": 0.2, "total_iters": 10}),
    ("cosine", "CosineAnnealingLR", {"T_max": 10, "eta_min": 0.1 * L_LR}),
    ("cosine_to_zero", "CosineAnnealingLR", {"T_max": 7, "eta_min": 0.0}),
    ("step", "StepLR", {"step_size": 3, "gamma": 0.5}),
]


def write_schedules(out):
    out.write("\n/* ---- torch.optim.lr_scheduler: lr / initial lr at steps 0..%d ---- */\n"
              % (L_STEPS - 1))
    out.write("#define OPTL_STEPS %d\n" % L_STEPS)
    for name, cls, kw in L_CASES:
        p = torch.zeros(1, requires_grad=True)
        opt = torch.optim.SGD([p], lr=L_LR)
        sched = getattr(torch.optim.lr_scheduler, cls)(opt, **kw)
        factors = []
        for _ in range(L_STEPS):
            factors.append(opt.param_groups[0]["lr"] / L_LR)
            opt.step()
            sched.step()
        out.write("static const double optl_%s[OPTL_STEPS] = %s; /* %s(%s) */\n"
                  % (name, c_array(factors), cls,
                     ", ".join("%s=%r" % kv for kv in kw.items())))


def padded(t):
    v = [float(x) for x in t.flatten()]
    return v + [0.0] * (6 - len(v))


def write_f_cases(out):
    init, grads = f_inputs()
    out.write("\n/* ---- frozen parameters and groups: q0 [2, 3], q1 [4], q2 [3, 2] (q1 uses 4 of "
              "6) ---- */\n")
    out.write("#define OPTF_STEPS %d\n" % F_STEPS)
    out.write("static const double optf_lr_factors[OPTF_STEPS] = %s;\n" % c_array(F_LR_FACTORS))
    out.write("static const double optf_init[3][6] = {%s};\n"
              % ", ".join(c_array(padded(t)) for t in init))
    out.write("static const double optf_grads[OPTF_STEPS][3][6] = {\n")
    for k in range(F_STEPS):
        out.write("    {%s},\n" % ", ".join(c_array(padded(t)) for t in grads[k]))
    out.write("};\n")
    out.write("typedef struct {\n"
              "    const char *name;\n"
              "    optg_kind kind;\n"
              "    double momentum, beta1, beta2, eps;\n"
              "    int ngroups, group_of[3];\n"
              "    double group_lr[2], group_wd[2];\n"
              "    bool trainable[OPTF_STEPS][3]; /* requires grad and gets a gradient */\n"
              "    double q_f64[3][6], q_f32[3][6];\n"
              "    /* float64 state after the steps (momentum_buffer or exp_avg, exp_avg_sq) and\n"
              "     * step counts: torch's for Adam, the number of steps taken for SGD; -1 for a\n"
              "     * parameter without state (never stepped). */\n"
              "    double state[3][2][6];\n"
              "    long long steps[3];\n"
              "} optf_case;\n\n")
    out.write("static const optf_case optf_cases[] = {\n")
    for name, cls, shared, groups, trainable in F_CASES:
        q64, state, params = f_run(cls, shared, groups, trainable, torch.float64, init, grads)
        q32, _, _ = f_run(cls, shared, groups, trainable, torch.float32, init, grads)
        betas = shared.get("betas", (0.9, 0.999))
        kind = {"SGD": "OPTG_SGD", "Adam": "OPTG_ADAM", "AdamW": "OPTG_ADAMW"}[cls]
        group_of = [0] * 3
        for g, (idx, _, _) in enumerate(groups):
            for j in idx:
                group_of[j] = g
        lrs = [lr for _, lr, _ in groups] + [0.0] * (2 - len(groups))
        wds = [wd for _, _, wd in groups] + [0.0] * (2 - len(groups))
        kinds = STATE_KINDS[cls]
        rows, steps = [], []
        for j in range(3):
            s = state.get(params[j], {})
            rows.append("{" + ", ".join(
                c_array(padded(s[k]) if k in s and s[k] is not None else [0.0] * 6)
                for k in (kinds + [None])[:2]) + "}")
            taken = sum(1 for k in range(F_STEPS) if trainable[k][j])
            steps.append(int(s["step"].item()) if "step" in s else (taken if s else -1))
        out.write("    {\"%s\", %s, %r, %r, %r, %r, %d, {%s}, %s, %s,\n"
                  % (name, kind, shared.get("momentum", 0.0), betas[0], betas[1],
                     shared.get("eps", 1e-8), len(groups), ", ".join(map(str, group_of)),
                     c_array(lrs), c_array(wds)))
        out.write("     {%s},\n" % ", ".join(
            "{" + ", ".join("true" if b else "false" for b in row) + "}" for row in trainable))
        out.write("     {%s},\n" % ", ".join(c_array(padded(t)) for t in q64))
        out.write("     {%s},\n" % ", ".join(c_array(padded(t)) for t in q32))
        out.write("     {%s},\n" % ", ".join(rows))
        out.write("     {%s}},\n" % ", ".join(map(str, steps)))
    out.write("};\n")
    out.write("#define OPTF_NCASES ((int)(sizeof optf_cases / sizeof optf_cases[0]))\n")


if __name__ == "__main__":
    main()
