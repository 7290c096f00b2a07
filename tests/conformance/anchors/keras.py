"""Keras 3 (JAX backend): keras.optimizers.LossScaleOptimizer wrapping keras.optimizers.SGD(learning_rate=0)
on one keras.Variable. On JAX, LossScaleOptimizer.apply (the stateful path) cannot run eagerly: its
ops.cond becomes jax.lax.cond, which traces both branches, and their variable assignments leak tracers
(UnexpectedTracerError). So each step calls the optimizer's own stateless_apply, as Keras's JAX trainer
does, under jax.jit, with a gradient that is finite or holds an inf, and writes the returned optimizer
variables back into the optimizer's keras.Variables (as the trainer does when it syncs its state). The
values are then read through the optimizer's getters: dynamic_scale (a float32 variable), step_counter
and iterations (the property returns the inner SGD's iterations, which only a finite step advances)."""

import os

os.environ.setdefault("KERAS_BACKEND", "jax")

import jax  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402

PRESET = "keras"
CAN = {"initial_scale", "growth_interval"}
DEFAULTS = dict(initial_scale=2.0**15, growth_interval=2000)
GRADS = {True: np.array([1.0, 2.0], np.float32), False: np.array([1.0, np.inf], np.float32)}


def header():
    assert keras.backend.backend() == "jax", "run with KERAS_BACKEND=jax"
    return dict(library="keras", version=keras.__version__, preset=PRESET,
                object="keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD) via stateless_apply "
                       "(JAX backend, jitted)",
                scale_kept_as="float32",
                values={"scale": "dynamic_scale", "growth_counter": "step_counter",
                        "optimizer_iterations": "iterations (the inner optimizer's)"})


class Driver:
    def __init__(self, options):
        o = dict(DEFAULTS, **options)
        self.var = keras.Variable(np.zeros(2, np.float32))
        self.opt = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(learning_rate=0.0),
                                                       initial_scale=o["initial_scale"],
                                                       dynamic_growth_steps=o["growth_interval"])
        self.opt.build([self.var])
        self.apply = jax.jit(self.opt.stateless_apply)


def make(options):
    return Driver(options)


def step(d, finite):
    opt_values = [v.value for v in d.opt.variables]
    new_trainable, new_opt_values = d.apply(opt_values, [GRADS[finite]], [d.var.value])
    d.var.assign(new_trainable[0])
    for variable, value in zip(d.opt.variables, new_opt_values):
        variable.assign(value)


def read(d):
    scale = np.asarray(d.opt.dynamic_scale.value)
    assert scale.dtype == np.float32
    return {"scale": float(scale), "growth_counter": int(d.opt.step_counter.value),
            "optimizer_iterations": int(d.opt.iterations.value)}
