"""Megatron: megatron.core.optimizer.grad_scaler.DynamicGradScaler, driven by update(found_inf) once per
step (Megatron's optimizer finds the infs; the rule is all in update). The scaler puts its float32
tensors on 'cuda'; with no GPU here, torch.tensor is wrapped while the scaler is built so that they go
to the CPU instead (float32 multiplications and max give the same bits on either)."""

import contextlib
import importlib.metadata

import torch
from megatron.core.optimizer.grad_scaler import DynamicGradScaler

PRESET = "megatron"
CAN = {"initial_scale", "growth_interval", "growth_factor", "backoff_factor", "min_scale", "hysteresis"}
DEFAULTS = dict(initial_scale=4294967296.0, growth_interval=1000, growth_factor=2.0, backoff_factor=0.5,
                min_scale=1.0, hysteresis=2)


def header():
    return dict(library="megatron-core", version=importlib.metadata.version("megatron-core"), preset=PRESET,
                object="megatron.core.optimizer.grad_scaler.DynamicGradScaler (tensors on the CPU)",
                scale_kept_as="float32",
                values={"scale": "scale.item()", "growth_counter": "_growth_tracker",
                        "hysteresis_left": "_hysteresis_tracker"})


@contextlib.contextmanager
def _tensors_on_cpu():
    original = torch.tensor

    def on_cpu(*args, **kwargs):
        kwargs["device"] = "cpu"
        return original(*args, **kwargs)

    torch.tensor = on_cpu
    try:
        yield
    finally:
        torch.tensor = original


def make(options):
    o = dict(DEFAULTS, **options)
    with _tensors_on_cpu():
        return DynamicGradScaler(initial_scale=o["initial_scale"], min_scale=o["min_scale"],
                                 growth_factor=o["growth_factor"], backoff_factor=o["backoff_factor"],
                                 growth_interval=o["growth_interval"], hysteresis=o["hysteresis"])


def step(scaler, finite):
    scaler.update(not finite)


def read(scaler):
    return {"scale": scaler.scale.item(), "growth_counter": scaler._growth_tracker,
            "hysteresis_left": scaler._hysteresis_tracker}
