"""The cases of the optimizer goldens (tests/golden/loss_scale_optimizer/<anchor>.jsonl): the same scaled
gradients through a library's loss-scale optimizer and through mixprec's LossScaleOptimizer.

A golden file is JSON lines: a header line ({"golden": "loss_scale_optimizer", "library", "version",
"object"}), then for each case a line {"case", "optimizer": {...}, "loss_scale": {LossScaleOptions
fields}, "preset", "initial": [[w, ...] per variable]} followed by one line per step:
    {"step": i, "micro_batches": [[[g, ...] per variable] per micro-batch],
     "applied": bool, "iterations": n, "scale": s, "growth_counter": c,
     "weights": [[w, ...] per variable], "slots": {name: [[...] per variable]}}
Every float32 is a C99 hex float string ("inf", "-inf" and "nan" included). Gradients are the scaled
ones a backward pass of the scaled loss gives; a step with several micro-batches sums them (gradient
accumulation). Slots use mixprec's names and are absent until the library creates them. An optimizer with
"clip_global_norm" clips the unscaled gradients to that global norm before it steps.
"""

import random
import struct


def f32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


def hex32(v):
    """A float32 as the shortest C99 hex float: -0x1.766938p-1, 0x1p+10, inf, nan."""
    text = float(v).hex()
    if "p" not in text:
        return text
    mantissa, exponent = text.split("p")
    return mantissa.rstrip("0").rstrip(".") + "p" + exponent


def hexes(values):
    return [hex32(v) for v in values]


SHAPES = [3, 2]  # two variables: 3 and 2 elements


class OptimizerCase:
    def __init__(self, name, optimizer, loss_scale, steps, micro_batches=1, bad=(), seed=0):
        """bad: {step: (micro_batch, variable, element, value)} gradients replaced by inf or NaN."""
        self.name, self.optimizer, self.loss_scale = name, optimizer, loss_scale
        rng = random.Random(seed)
        self.initial = [[f32(rng.uniform(-1, 1)) for _ in range(n)] for n in SHAPES]
        # Unscaled gradients; the anchor scales them by its scale at the time (as a backward pass would).
        self.unscaled = [[[[f32(rng.gauss(0, 0.5)) for _ in range(n)] for n in SHAPES] for _ in range(micro_batches)]
                         for _ in range(steps)]
        self.bad = dict(bad)


def cases():
    inf, nan = float("inf"), float("nan")
    ls = dict(initial_scale=1024.0, growth_interval=3)
    odd = dict(initial_scale=1000.0, growth_interval=2, growth_factor=1.5, backoff_factor=0.3)
    bad = {4: (0, 0, 1, inf), 5: (0, 1, 0, -inf), 11: (0, 0, 2, nan), 23: (0, 1, 1, inf)}
    return [
        OptimizerCase("sgd", dict(kind="sgd", learning_rate=0.1), ls, 30, bad=bad, seed=1),
        OptimizerCase("sgd_momentum", dict(kind="sgd", learning_rate=0.05, momentum=0.9), ls, 30, bad=bad, seed=2),
        OptimizerCase("sgd_nesterov_weight_decay",
                      dict(kind="sgd", learning_rate=0.05, momentum=0.8, nesterov=True, weight_decay=0.01), ls, 30,
                      bad=bad, seed=3),
        OptimizerCase("adam", dict(kind="adam", learning_rate=0.01, beta1=0.9, beta2=0.999, epsilon=1e-8), ls, 30,
                      bad=bad, seed=4),
        OptimizerCase("adamw", dict(kind="adamw", learning_rate=0.01, beta1=0.8, beta2=0.99, epsilon=1e-8,
                                    weight_decay=0.05), ls, 30, bad=bad, seed=5),
        OptimizerCase("adam_factors_1.5_0.3", dict(kind="adam", learning_rate=0.01, beta1=0.9, beta2=0.999,
                                                   epsilon=1e-8), odd, 30, bad=bad, seed=6),
        OptimizerCase("sgd_momentum_accumulate_3", dict(kind="sgd", learning_rate=0.05, momentum=0.9), ls, 20,
                      micro_batches=3, bad={3: (1, 0, 0, inf), 9: (2, 1, 1, nan), 10: (0, 0, 2, -inf)}, seed=7),
        OptimizerCase("sgd_momentum_clip_global_norm_0.5",
                      dict(kind="sgd", learning_rate=0.05, momentum=0.9, clip_global_norm=0.5), ls, 30, bad=bad,
                      seed=9),
        OptimizerCase("adam_clip_global_norm_0.5", dict(kind="adam", learning_rate=0.01, beta1=0.9, beta2=0.999,
                                                        epsilon=1e-8, clip_global_norm=0.5), odd, 30, bad=bad, seed=10),
        OptimizerCase("adamw_accumulate_2", dict(kind="adamw", learning_rate=0.01, beta1=0.9, beta2=0.999,
                                                 epsilon=1e-8, weight_decay=0.01), odd, 20, micro_batches=2,
                      bad={2: (1, 1, 0, inf), 7: (0, 0, 1, nan)}, seed=8),
    ]


def scaled_gradients(case, step, scale):
    """The step's micro-batch gradients scaled by `scale` in float32, with the case's inf or NaN put in."""
    out = [[[f32(g * scale) for g in var] for var in mb] for mb in case.unscaled[step]]
    if step in case.bad:
        mb, var, element, value = case.bad[step]
        out[mb][var][element] = value
    return out
