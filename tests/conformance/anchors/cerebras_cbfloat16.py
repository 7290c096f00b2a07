"""Cerebras with cbfloat16 as the half dtype (cstorch.amp.set_half_dtype("cbfloat16") before the scalers
are built), which changes GradScaler's defaults: the scale starts and is capped at 2^31 instead of 2^15.
Driven as anchors/cerebras.py. The header names the half dtype, and the replay takes the preset for it
(loss_scale_preset("cerebras", Dtype::cbfloat16)) instead of listing the defaults that differ."""

import cerebras.pytorch as cstorch

from anchors import cerebras

PRESET, CAN, make, step, read = cerebras.PRESET, cerebras.CAN, cerebras.make, cerebras.step, cerebras.read
cstorch.amp.set_half_dtype("cbfloat16")


def header():
    h = cerebras.header()
    h.pop("options", None)
    h["half_dtype"] = "cbfloat16"
    return h
