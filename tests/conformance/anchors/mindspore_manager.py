"""MindSpore: the host rule, mindspore.DynamicLossScaleManager.update_loss_scale(overflow), called once per step
(what a host-side training loop calls; Model itself trains with the manager's update cell: see mindspore.py).
The scale is a Python number: an int while the defaults (init 2**24, factor 2) only grow it, a float
(float64) after a backoff or with a float initial scale or factor. update_loss_scale raises RuntimeError after
more than bad_step_max (1000) overflows in a row; the case then ends at that step. No patch.

One factor, as in the cell: growth ×scale_factor, backoff ×(1/scale_factor), never below 1. `accepts` leaves
out the cases whose backoff_factor is not 1/growth_factor, and those with an initial scale below 1 (which the
constructor refuses)."""

import mindspore as ms

from anchors.mindspore import ARGS, DEFAULTS

PRESET = "mindspore"
CAN = {"initial_scale", "growth_interval", "growth_factor"}


class TooManyOverflows(Exception):
    """The manager's refusal to go on after more than bad_step_max overflows in a row."""


RAISES = (TooManyOverflows,)


def accepts(case):
    o = case.options
    return (o.get("initial_scale", 1.0) >= 1.0 and
            ("backoff_factor" not in o or o["backoff_factor"] == 1 / o.get("growth_factor", DEFAULTS["growth_factor"])))


def header():
    return dict(library="mindspore", version=ms.__version__, preset=PRESET,
                object="mindspore.DynamicLossScaleManager.update_loss_scale (host rule)",
                scale_kept_as="float64", options=dict(DEFAULTS),
                values={"scale": "get_loss_scale()", "next_iteration": "cur_iter", "consecutive_overflows": "bad_step"})


def make(options):
    # Only the options the case sets: the manager's own defaults stand for the rest.
    return ms.DynamicLossScaleManager(**{ARGS[k]: v for k, v in options.items()})


def step(manager, finite):
    try:
        manager.update_loss_scale(not finite)
    except RuntimeError as e:
        if "Continuous overflow" in str(e):
            raise TooManyOverflows(" ".join(str(a) for a in e.args)) from e
        raise


def read(manager):
    return {"scale": float(manager.get_loss_scale()), "next_iteration": manager.cur_iter,
            "consecutive_overflows": manager.bad_step}
