"""DeepSpeed: deepspeed.runtime.fp16.loss_scaler.DynamicLossScaler, the scaler of its ZeRO optimizers,
driven by update_scale(overflow) once per step (the engine decides `overflow` from the gradients; the
rule is all in update_scale). Its scale is a Python float (float64) and its growth factor is fixed at 2.
It raises when a step overflows at the minimum scale (raise_error_at_min_scale, on by default). The
scaler logs through deepspeed.comm, so a one-process gloo group is started first."""

import importlib.metadata

import deepspeed.comm
from deepspeed.runtime.fp16.loss_scaler import DynamicLossScaler

PRESET = "deepspeed"
CAN = {"initial_scale", "growth_interval", "min_scale", "hysteresis", "consecutive_hysteresis", "at_min_scale"}


class AtMinimum(Exception):
    """DeepSpeed's refusal to step at the minimum scale (it raises a bare Exception)."""


# DeepSpeed 0.17.0 and earlier grow without bound: their log message fails on a float64 scale that
# reached infinity (OverflowError), which ends the case.
RAISES = (AtMinimum, OverflowError)
DEFAULTS = dict(initial_scale=65536.0, growth_interval=1000, min_scale=1.0, hysteresis=2, consecutive_hysteresis=False,
                at_min_scale="raise")


def header():
    return dict(library="deepspeed", version=importlib.metadata.version("deepspeed"), preset=PRESET,
                object="deepspeed.runtime.fp16.loss_scaler.DynamicLossScaler", scale_kept_as="float64",
                values={"scale": "cur_scale", "hysteresis_left": "cur_hysteresis", "iteration": "cur_iter",
                        "last_overflow": "last_overflow_iter"})


def make(options):
    if not deepspeed.comm.is_initialized():  # the scaler asks for its rank before it logs: one process
        deepspeed.comm.init_distributed(dist_backend="gloo", auto_mpi_discovery=False, verbose=False,
                                        init_method="tcp://127.0.0.1:29517", rank=0, world_size=1)
    o = dict(DEFAULTS, **options)
    return DynamicLossScaler(init_scale=o["initial_scale"], scale_window=o["growth_interval"],
                             min_scale=o["min_scale"], delayed_shift=o["hysteresis"],
                             consecutive_hysteresis=o["consecutive_hysteresis"],
                             raise_error_at_min_scale=o["at_min_scale"] == "raise")


def step(scaler, finite):
    try:
        scaler.update_scale(not finite)
    except Exception as e:
        if "already at minimum" in str(e):
            raise AtMinimum(str(e)) from e
        raise


def read(scaler):
    return {"scale": float(scaler.cur_scale), "hysteresis_left": scaler.cur_hysteresis, "iteration": scaler.cur_iter,
            "last_overflow": scaler.last_overflow_iter}
