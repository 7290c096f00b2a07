"""MindSpore: mindspore.nn.DynamicLossScaleUpdateCell, the cell that Model(..., loss_scale_manager=
DynamicLossScaleManager(...)) trains with (the manager's get_update_cell()), run in PyNative mode on the CPU.
The cell comes from DynamicLossScaleManager(...).get_update_cell(); the scale is a float32 Parameter made as
nn.TrainOneStepWithLossScaleCell makes its scale_sense. Each step calls the cell with that Parameter and a
bool Tensor overflow flag, as TrainOneStepWithLossScaleCell.process_loss_scale does (its own overflow check
needs an Ascend or GPU device, so the flag is given directly). No patch.

MindSpore has one factor: the scale grows by scale_factor and backs off by 1/scale_factor, never below 1.
`accepts` leaves out the cases whose backoff_factor is not 1/growth_factor."""

import mindspore as ms
from mindspore import Parameter, Tensor
from mindspore.common import dtype as mstype

PRESET = "mindspore"
CAN = {"initial_scale", "growth_interval", "growth_factor"}
DEFAULTS = dict(initial_scale=2.0**24, growth_interval=2000, growth_factor=2.0)  # DynamicLossScaleManager's
ARGS = dict(initial_scale="init_loss_scale", growth_interval="scale_window", growth_factor="scale_factor")

ms.set_context(mode=ms.PYNATIVE_MODE)
ms.set_device("CPU")


def accepts(case):
    o = case.options
    return "backoff_factor" not in o or o["backoff_factor"] == 1 / o.get("growth_factor", DEFAULTS["growth_factor"])


def header():
    return dict(library="mindspore", version=ms.__version__, preset=PRESET,
                object="mindspore.nn.DynamicLossScaleUpdateCell from DynamicLossScaleManager.get_update_cell() "
                       "(PyNative mode, CPU)",
                scale_kept_as="float32", options=dict(DEFAULTS),
                values={"scale": "the float32 scale Parameter the cell updates",
                        "next_iteration": "cur_iter (Parameter 'current_iterator_step')",
                        "last_rescale_iteration": "last_overflow_iter (Parameter 'last_overflow_iterator_step', "
                                                  "set on an overflow and on a growth)"})


class Driver:
    def __init__(self, options):
        # Only the options the case sets: the manager's own defaults stand for the rest.
        manager = ms.DynamicLossScaleManager(**{ARGS[k]: v for k, v in options.items()})
        self.cell = manager.get_update_cell()
        self.scale = Parameter(Tensor(self.cell.get_loss_scale(), dtype=mstype.float32), name="scale_sense")


def make(options):
    return Driver(options)


def step(d, finite):
    d.cell(d.scale, Tensor(not finite, mstype.bool_))


def read(d):
    value = d.scale.asnumpy()
    assert value.dtype.name == "float32"
    return {"scale": float(value), "next_iteration": int(d.cell.cur_iter.asnumpy()),
            "last_rescale_iteration": int(d.cell.last_overflow_iter.asnumpy())}
