"""jmp: jmp.DynamicLossScale(loss_scale, counter, period, factor, min_loss_scale), a JAX pytree whose
adjust(grads_finite) returns the next state. Each step unscales a gradient array (finite, or holding an
inf) with the scale's own unscale, computes grads_finite = jmp.all_finite(grads) and replaces the state by
scale.adjust(grads_finite), eagerly (not under jax.jit: DynamicLossScale.tree_unflatten drops
min_loss_scale, so a jitted adjust would back off to the default floor of 1 whatever was asked).
The scale is a float32 array, the counter an int32 array.

jmp has a single `factor` (growth by `factor`, backoff by division by it) and its own floor: the golden
checks mixprec's keras preset with jmp's default floor, min_loss_scale = 1, in the header. A case is
recorded only if its factors, completed with the preset's (2 and 0.5), are reciprocal, so that the options
written in the golden describe the object driven."""

import importlib.metadata

import jax.numpy as jnp
import jmp
import numpy as np

PRESET = "keras"
CAN = {"initial_scale", "growth_interval", "growth_factor", "min_scale"}
DEFAULTS = dict(initial_scale=2.0**15, growth_interval=2000, growth_factor=2.0, backoff_factor=0.5, min_scale=1.0)
GRADS = {True: jnp.array([1.0, 2.0], jnp.float32), False: jnp.array([1.0, jnp.inf], jnp.float32)}


def _reciprocal(options):
    o = dict(DEFAULTS, **options)
    return o["backoff_factor"] == 1.0 / o["growth_factor"]


def accepts(case):
    return _reciprocal(case.options)


def header():
    return dict(library="jmp", version=importlib.metadata.version("jmp"), preset=PRESET,
                object="jmp.DynamicLossScale, eager adjust(jmp.all_finite(grads))", scale_kept_as="float32",
                values={"scale": "loss_scale", "growth_counter": "counter"},
                options={"min_scale": DEFAULTS["min_scale"]})


def make(options):
    assert _reciprocal(options), "jmp backs off by 1/factor: %r" % options
    o = dict(DEFAULTS, **options)
    return [jmp.DynamicLossScale(loss_scale=jnp.asarray(o["initial_scale"], jnp.float32),
                                 counter=jnp.zeros([], jnp.int32), period=o["growth_interval"],
                                 factor=o["growth_factor"],
                                 min_loss_scale=jnp.asarray(o["min_scale"], jnp.float32))]


def step(holder, finite):
    scale = holder[0]
    grads = scale.unscale(GRADS[finite])
    holder[0] = scale.adjust(jmp.all_finite(grads))


def read(holder):
    scale = np.asarray(holder[0].loss_scale)
    assert scale.dtype == np.float32
    return {"scale": float(scale), "growth_counter": int(holder[0].counter)}
