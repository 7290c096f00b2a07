#!/usr/bin/env python3
"""Recompute the golden optimizer tables of tests/test_optim.cpp with torch.optim.

Each table holds the weights (a0, a1, a2, b0, b1) after each of 5 optimizer steps on
the variables and gradients of test_optim.cpp, for one optimizer configuration of the
`golden` test suite. The optimizers are torch.optim's (float32 tensors, single-tensor
code path); learning-rate schedules are computed in double and gradient clipping with
float32 torch ops, both with Keras 3's formulas, as the comment in test_optim.cpp says.

Run from the repository root:
    python tests/golden/optimizers.py                             # print C++ initializers
    python tests/golden/optimizers.py --check tests/test_optim.cpp

The first form prints `const Expected name = {{ ... }};` blocks ready to paste into
test_optim.cpp; the second compares the tables committed there with recomputed ones,
prints the largest relative difference per table and exits 1 if any exceeds 1e-6
(the tolerance of the C++ test).

Needs Python 3.9+ and PyTorch from PyPI (verified with torch 2.15.0; the committed
tables were first made with torch 1.13.1). numpy is optional (torch only warns
without it).
"""

import argparse
import math
import re
import struct
import sys

import torch

TOLERANCE = 1e-6  # relative, as BOOST_TEST(..., tt::tolerance(1e-6f)) in test_optim.cpp

INITIAL_A = [0.5, -1.25, 2.0]
INITIAL_B = [0.75, -0.3]

# Gradients of (a, b) for steps 1..5, as in test_optim.cpp.
GRADIENTS = [
    ([0.3, -0.6, 1.2], [0.9, 0.05]),
    ([-0.2, 0.4, 0.8], [-1.5, 0.25]),
    ([0.05, -0.1, 0.6], [0.7, -0.45]),
    ([0.6, 0.3, -0.2], [0.02, 0.35]),
    ([0.01, -0.02, 0.05], [-0.4, 0.1]),
]


# Learning-rate schedules: Keras 3 formulas in double; `step` counts applied steps from 0.

def constant(lr):
    return lambda step: lr


def exponential_decay(initial, decay_steps, decay_rate, staircase=False):
    def lr(step):
        p = step / decay_steps
        if staircase:
            p = math.floor(p)
        return initial * decay_rate ** p
    return lr


def cosine_decay(initial, decay_steps, alpha, warmup_steps, warmup_target):
    def lr(step):
        step = min(step, decay_steps + warmup_steps)
        if step < warmup_steps:
            return (warmup_target - initial) * (step / warmup_steps) + initial
        cosine = 0.5 * (1.0 + math.cos(math.pi * (step - warmup_steps) / decay_steps))
        return warmup_target * ((1.0 - alpha) * cosine + alpha)
    return lr


# Gradient clipping: Keras 3 formulas with float32 torch ops.

def clip_norm(c):
    def clip(grads):
        return [g * c / torch.clamp(torch.linalg.vector_norm(g), min=c) for g in grads]
    return clip


def clip_global_norm(c):
    def clip(grads):
        norm = torch.sqrt(sum(torch.sum(g * g) for g in grads))
        scale = c * torch.minimum(1.0 / norm, torch.tensor(1.0 / c))
        return [g * scale for g in grads]
    return clip


def clip_value(c):
    return lambda grads: [torch.clamp(g, -c, c) for g in grads]


def no_clip(grads):
    return grads


# name -> (torch optimizer class, its options, lr schedule, clipping), one per
# BOOST_AUTO_TEST_CASE of the `golden` suite. Every Adam/AdamW uses Keras's eps 1e-7.
CASES = {
    "sgd_plain": (
        torch.optim.SGD, {}, constant(0.1), clip_value(0.5)),
    "sgd_momentum": (
        torch.optim.SGD, {"momentum": 0.9}, constant(0.05), clip_norm(1.0)),
    "sgd_nesterov": (
        torch.optim.SGD, {"momentum": 0.8, "nesterov": True}, constant(0.05),
        clip_global_norm(1.5)),
    "sgd_weight_decay_exponential": (
        torch.optim.SGD, {"momentum": 0.5, "weight_decay": 0.1}, exponential_decay(0.1, 2, 0.5),
        no_clip),
    "adam_plain": (
        torch.optim.Adam, {"eps": 1e-7}, constant(0.01), clip_global_norm(1.0)),
    "adam_amsgrad_cosine_warmup": (
        torch.optim.Adam, {"eps": 1e-7, "amsgrad": True}, cosine_decay(0.0, 3, 0.1, 2, 0.02),
        clip_value(0.8)),
    "adamw_clipnorm": (
        torch.optim.AdamW, {"eps": 1e-7, "weight_decay": 0.1}, constant(0.01), clip_norm(1.0)),
    "adamw_defaults_exponential_staircase": (
        torch.optim.AdamW, {"eps": 1e-7, "weight_decay": 0.004},
        exponential_decay(0.01, 2, 0.5, staircase=True), no_clip),
}


def float32(values):
    return torch.tensor(values, dtype=torch.float32)


def run(optimizer_class, options, schedule, clip):
    """Returns the 5 rows of weights (a0, a1, a2, b0, b1) after each step, as Python floats."""
    params = [float32(INITIAL_A), float32(INITIAL_B)]
    opt = optimizer_class(params, lr=schedule(0), foreach=False, **options)
    rows = []
    for step, (ga, gb) in enumerate(GRADIENTS):
        opt.param_groups[0]["lr"] = schedule(step)
        grads = clip([float32(ga), float32(gb)])
        for p, g in zip(params, grads):
            p.grad = g
        opt.step()
        rows.append([float(x) for p in params for x in p.tolist()])
    return rows


def cpp_float(x):
    """%.9g with an f suffix, and a '.0' where %.9g gives an integer (2 -> 2.0f)."""
    text = "%.9g" % x
    if not any(c in text for c in ".en"):
        text += ".0"
    return text + "f"


def cpp_table(name, rows):
    lines = ["const Expected %s = {{" % name]
    lines += ["    {%s}," % ", ".join(cpp_float(x) for x in row) for row in rows]
    lines.append("}};")
    return "\n".join(lines)


def to_float32(x):
    """x rounded to float32, as the C++ compiler reads a literal with an f suffix."""
    return struct.unpack("f", struct.pack("f", x))[0]


def parse_tables(text):
    """The `const Expected name = {{ {...}, ... }};` tables of a C++ file, as name -> rows."""
    tables = {}
    for match in re.finditer(r"const Expected (\w+) = \{\{(.*?)\}\};", text, re.DOTALL):
        rows = re.findall(r"\{([^{}]*)\}", match.group(2))
        tables[match.group(1)] = [[to_float32(float(v.strip().rstrip("fF")))
                                   for v in row.split(",") if v.strip()] for row in rows]
    return tables


def relative_difference(a, b):
    """|a - b| relative to the smaller magnitude: Boost's strong check (both sides)."""
    if a == b:
        return 0.0
    smaller = min(abs(a), abs(b))
    return math.inf if smaller == 0 else abs(a - b) / smaller


def check(path, computed):
    with open(path, encoding="utf-8") as f:
        committed = parse_tables(f.read())
    ok = True
    for name in list(computed) + [n for n in committed if n not in computed]:
        if name not in committed or name not in computed:
            where = "the C++ file" if name not in committed else "this script"
            print("%-38s missing from %s" % (name, where))
            ok = False
            continue
        want, got = committed[name], computed[name]
        if [len(r) for r in want] != [len(r) for r in got]:
            print("%-38s shape differs: %s vs %s"
                  % (name, [len(r) for r in want], [len(r) for r in got]))
            ok = False
            continue
        pairs = [(w, g) for wr, gr in zip(want, got) for w, g in zip(wr, gr)]
        worst = max(relative_difference(w, g) for w, g in pairs)
        differ = sum(w != g for w, g in pairs)
        verdict = "ok" if worst <= TOLERANCE else "EXCEEDS %g" % TOLERANCE
        print("%-38s max relative difference %-9.3g (%d of %d values not bit-identical)  %s"
              % (name, worst, differ, len(pairs), verdict))
        ok = ok and worst <= TOLERANCE
    return ok


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", metavar="CPP_FILE",
                        help="compare with the tables in CPP_FILE (e.g. tests/test_optim.cpp)")
    args = parser.parse_args()
    computed = {name: run(*case) for name, case in CASES.items()}
    if args.check:
        print("torch %s" % torch.__version__)
        return 0 if check(args.check, computed) else 1
    print("\n".join(cpp_table(name, rows) for name, rows in computed.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
