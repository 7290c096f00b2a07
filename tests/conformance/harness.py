"""Shared parts of the conformance harness: the step sequences every anchor is driven through, and the
golden-file format the C++ replay (tests/conformance/replay.cpp) reads.

A golden file is JSON lines. The first line describes the recording:
    {"golden": "loss_scale", "library": ..., "version": ..., "object": ..., "preset": ...,
     "scale_kept_as": "float32" | "float64", "values": {"<mixprec name>": "<the library getter>"},
     "options": {LossScaleOptions field: value}, "half_dtype": "cbfloat16"}
`options` (optional) holds the library's defaults where they are not the preset's; `half_dtype` (optional)
names the dtype whose preset applies (loss_scale_preset(name, dtype)).
Each further line is one case:
    {"case": name, "options": {LossScaleOptions field: value}, "steps": n, "finite": "1101...",
     "<mixprec name>": {"code": "...", "values": ["...", ...]}, ...}
`finite` holds one character per step ('1': every gradient finite, '0': an inf or NaN). Each recorded
quantity is the library's value after each step's update, run-length coded one character per step:
'=' the previous value, '+' the previous plus 1, '-' the previous minus 1, '0' zero, '#' the next entry
of `values` (a decimal integer or a C99 hex float, "inf" and "-inf" included). A case whose last step
made the library raise (DeepSpeed at its minimum scale) has "raised": the exception's text, and its values
stop one step before the end. Options absent from a
case are the header's, else the preset's.
"""

import json
import math
import random

GOLDEN_DIR = "tests/golden/loss_scale"


def encode(values):
    code, exceptions = [], []
    previous = None
    for v in values:
        if previous is not None and v == previous:
            code.append("=")
        elif previous is not None and v == previous + 1:
            code.append("+")
        elif previous is not None and v == previous - 1:
            code.append("-")
        elif v == 0 and not (isinstance(v, float) and math.copysign(1.0, v) < 0):
            code.append("0")
        else:
            code.append("#")
            exceptions.append(str(v) if isinstance(v, int) else float(v).hex())
        previous = v
    return {"code": "".join(code), "values": exceptions}


def decode(entry):
    out, it, previous = [], iter(entry["values"]), None
    for c in entry["code"]:
        if c == "=":
            v = previous
        elif c == "+":
            v = previous + 1
        elif c == "-":
            v = previous - 1
        elif c == "0":
            v = 0
        else:
            text = next(it)
            v = float.fromhex(text) if ("x" in text or "inf" in text) else int(text)
        out.append(v)
        previous = v
    return out


class Case:
    """One run of an anchor: options in mixprec's vocabulary and the finite/overflow pattern."""

    def __init__(self, name, finite, **options):
        self.name, self.finite, self.options = name, list(finite), options
        self.raised = None  # the library's exception, if the last step raised one


def _random(seed, steps, overflow_density):
    rng = random.Random(seed)
    return [rng.random() >= overflow_density for _ in range(steps)]


def _bursts(interval, longest_burst, repeats=3):
    """Bursts of 1..longest_burst consecutive overflows, separated by clean runs of N-1, N and N+1 steps."""
    finite = []
    for _ in range(repeats):
        for burst in range(1, longest_burst + 1):
            for clean in (interval - 1, interval, interval + 1):
                finite += [True] * clean + [False] * burst
    return finite


def cases(can):
    """The cases for an anchor whose constructor takes the options listed in `can` (a set of
    LossScaleOptions field names). Cases that need an option the anchor lacks are left out; the
    sequences themselves are the same for every anchor, so the goldens can be read side by side."""
    out = [
        Case("defaults_random_1_in_1000", _random(1, 6000, 0.001)),
        Case("defaults_random_1_in_50", _random(2, 3000, 0.02)),
        Case("interval_7_random_1_in_10", _random(3, 4000, 0.10), growth_interval=7),
        Case("interval_7_random_1_in_3", _random(4, 3000, 0.33), growth_interval=7),
        Case("interval_5_bursts", _bursts(5, 6), growth_interval=5),
        Case("interval_1_random_1_in_4", _random(5, 2000, 0.25), growth_interval=1, initial_scale=1024.0),
        Case("interval_1_to_the_maximum", [True] * 300, growth_interval=1, initial_scale=1.0),
        Case("to_the_minimum", [False] * 300, initial_scale=1024.0),
        Case("min_then_recover", [False] * 40 + [True] * 200 + _random(6, 400, 0.5), growth_interval=3,
             initial_scale=4.0),
    ]
    if "min_scale" in can:
        out.append(Case("floor_0.25_to_the_minimum", [False] * 60 + [True] * 30, initial_scale=16.0,
                        min_scale=0.25, growth_interval=4))
    if "hysteresis" in can:
        out += [
            Case("hysteresis_3_bursts", _bursts(5, 6), growth_interval=5, hysteresis=3),
            Case("hysteresis_3_random_1_in_3", _random(7, 3000, 0.33), growth_interval=4, hysteresis=3),
            Case("hysteresis_1_random_1_in_10", _random(8, 3000, 0.1), growth_interval=6, hysteresis=1),
        ]
    if "at_min_scale" in can:  # the anchor raises at its floor by default: go on past it instead
        out += [
            Case("keep_going_random_1_in_50", _random(2, 3000, 0.02), at_min_scale="keep_going"),
            Case("keep_going_hysteresis_3_random_1_in_3", _random(7, 3000, 0.33), growth_interval=4, hysteresis=3,
                 at_min_scale="keep_going"),
        ]
    if "consecutive_hysteresis" in can:
        out.append(Case("consecutive_hysteresis_bursts", _bursts(5, 6), growth_interval=5, hysteresis=3,
                        consecutive_hysteresis=True))
    if "growth_factor" in can:
        out += [
            # Factors that are not powers of two: every product is rounded, and the anchors round differently.
            Case("factors_1.1_0.3", _random(9, 3000, 0.2), growth_interval=3, growth_factor=1.1,
                 backoff_factor=0.3, initial_scale=1000.0),
            Case("factors_3_0.7", _random(10, 3000, 0.25), growth_interval=2, growth_factor=3.0,
                 backoff_factor=0.7, initial_scale=12345.678),
            Case("factor_1.5_near_the_maximum", [True] * 60 + _random(11, 200, 0.3), growth_interval=1,
                 growth_factor=1.5, initial_scale=1e37),
            Case("factor_1.0000001_growth_rounds_away", [True] * 50, growth_interval=1, growth_factor=1.0000001,
                 initial_scale=3.0),
            Case("backoff_0.9_near_the_minimum", [False] * 300, backoff_factor=0.9, initial_scale=1e-35,
                 **({"min_scale": 1e-40} if "min_scale" in can else {})),
        ]
    if "overflow_tolerance" in can:
        for tolerance, density, seed in ((0.25, 0.25, 12), (1 / 3, 0.33, 13), (0.1, 0.1, 14), (0.05, 0.5, 15)):
            out.append(Case("tolerance_%g_random_%g" % (tolerance, density), _random(seed, 3000, density),
                            growth_interval=6, overflow_tolerance=tolerance))
        out.append(Case("tolerance_0.5_alternating", [True, False] * 500, growth_interval=4,
                        overflow_tolerance=0.5))
    if "max_scale" in can:
        out.append(Case("cap_1000_interval_1", [True] * 40 + _random(16, 400, 0.2), growth_interval=1,
                        initial_scale=3.0, max_scale=1000.0, min_scale=0.75))
    if "decrease_every" in can:
        out.append(Case("decrease_every_3_random_1_in_4", _random(17, 3000, 0.25), growth_interval=5,
                        decrease_every=3))
    return out


def write_golden(path, header, records):
    """records: (case, {mixprec value name: [value after each step]}) pairs."""
    with open(path, "w") as f:
        f.write(json.dumps(dict(golden="loss_scale", **header)) + "\n")
        for case, values in records:
            line = {"case": case.name, "options": case.options, "steps": len(case.finite),
                    "finite": "".join("1" if x else "0" for x in case.finite)}
            if case.raised is not None:
                line["raised"] = case.raised
            for name, seq in values.items():
                assert len(seq) == len(case.finite) - (case.raised is not None), (case.name, name)
                assert decode(encode(seq)) == seq, (case.name, name)
                line[name] = encode(seq)
            f.write(json.dumps(line) + "\n")
