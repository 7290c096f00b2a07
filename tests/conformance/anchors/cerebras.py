"""Cerebras: cerebras.pytorch.amp.GradScaler(loss_scale="dynamic") on the CPU backend (cstorch.backend("CPU"))
around cerebras.pytorch.optim.SGD(lr=0) on one float32 parameter, half dtype left at its default (float16).
Each step is a training loop's: scaler.scale(loss) (a no-op off CSX), the parameter's .grad set to a finite
or an inf value, scaler.step(optimizer) (unscales the gradients, takes the global norm, decides isfinite,
steps the optimizer under its conditional-update guard, counts a skipped step) and scaler.update() (the
rule: GradScaler.update_scale, float32 tensors throughout).

One patch, for the CPU: GradScaler.step and update use amp's global handle (amp.disable_casts, the handle's
cache), which only the CSX backend creates (amp.init at run start). It is set to amp's own NoOpHandle
(what amp.init(enabled=False) builds), whose two methods used there do nothing; the rule is untouched.
Optimizers of earlier cases are taken out of the backend's optimizer registry, because step() unscales,
and takes the norm over, every registered optimizer."""

import importlib.metadata

import torch

import cerebras.pytorch as cstorch
from cerebras.pytorch.amp._amp_state import _amp_state
from cerebras.pytorch.amp.handle import NoOpHandle
from cerebras.pytorch.backend import current_backend_impl

PRESET = "cerebras"
CAN = {"initial_scale", "growth_interval", "overflow_tolerance", "min_scale", "max_scale"}
# The preset's values (amp/loss_scale_rules.cpp); header() lists the library's defaults that differ.
PRESET_DEFAULTS = dict(initial_scale=2.0**15, growth_interval=2000, overflow_tolerance=0.0, min_scale=2.0**-14,
                       max_scale=2.0**15)
ARGS = dict(initial_scale="init_scale", growth_interval="steps_per_increase", overflow_tolerance="overflow_tolerance",
            min_scale="min_loss_scale", max_scale="max_loss_scale")

BACKEND = cstorch.backend("CPU")
if not hasattr(_amp_state, "handle"):
    _amp_state.handle = NoOpHandle()


def _library_defaults():
    s = cstorch.amp.GradScaler(loss_scale="dynamic")
    return dict(initial_scale=float(s.get_scale()), growth_interval=s._steps_per_increase,
                overflow_tolerance=s._overflow_tolerance, min_scale=s._min_loss_scale, max_scale=s._max_loss_scale)


def header():
    differ = {k: v for k, v in _library_defaults().items() if v != PRESET_DEFAULTS[k]}
    h = dict(library="cerebras-pytorch", version=importlib.metadata.version("cerebras-pytorch"), preset=PRESET,
             object="cerebras.pytorch.amp.GradScaler(loss_scale='dynamic') with cerebras.pytorch.optim.SGD, "
                    "CPU backend, half dtype %s" % _amp_state.half_dtype_str,
             scale_kept_as="float32",
             values={"scale": "get_scale()", "unclamped_scale": "get_non_clamped_scale()",
                     "skipped_steps": "get_num_skipped_steps()", "growth_counter": "_steps_since_rescale",
                     "overflows_counted": "_overflows_since_rescale"})
    if differ:
        h["options"] = differ
    return h


class Driver:
    def __init__(self, options):
        impl = current_backend_impl()
        for old in list(impl.optimizer_registry):
            impl.unregister_optimizer(old)
        self.param = torch.nn.Parameter(torch.zeros(2))
        self.optimizer = cstorch.optim.SGD([self.param], lr=0.0)
        # Only the options the case sets: the library's own defaults stand for the rest.
        self.scaler = cstorch.amp.GradScaler(loss_scale="dynamic", **{ARGS[k]: v for k, v in options.items()})
        assert list(impl.optimizer_registry) == [self.optimizer]


def make(options):
    return Driver(options)


def step(d, finite):
    d.scaler.scale(torch.tensor(1.0))
    d.param.grad = torch.tensor([1.0, 2.0]) if finite else torch.tensor([1.0, float("inf")])
    d.scaler.step(d.optimizer)
    d.scaler.update()


def read(d):
    s = d.scaler
    assert s.get_scale().dtype == torch.float32
    return {"scale": float(s.get_scale()), "unclamped_scale": float(s.get_non_clamped_scale()),
            "skipped_steps": int(s.get_num_skipped_steps()), "growth_counter": int(s._steps_since_rescale),
            "overflows_counted": int(s._overflows_since_rescale)}
