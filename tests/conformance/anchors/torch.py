"""PyTorch: torch.amp.GradScaler("cpu") around torch.optim.SGD on one parameter. Each step gives the
parameter a finite gradient or an inf one (set directly: a backward pass would overflow at scales near the
float32 limit and change the sequence), then calls scaler.step(optimizer) (which unscales, checks and
steps or skips) and scaler.update(); `applied_steps` counts the optimizer steps that actually ran."""

import torch

PRESET = "pytorch"
CAN = {"initial_scale", "growth_interval", "growth_factor", "backoff_factor"}
DEFAULTS = dict(initial_scale=65536.0, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000)


def header():
    return dict(library="torch", version=torch.__version__.split("+")[0], preset=PRESET,
                object="torch.amp.GradScaler('cpu') with torch.optim.SGD", scale_kept_as="float32",
                values={"scale": "get_scale()", "growth_counter": "state_dict()['_growth_tracker']",
                        "applied_steps": "calls of optimizer.step() made by scaler.step()"})


def grad_scaler(options):
    """torch.amp.GradScaler("cpu") with the options given (mixprec's names), PyTorch's defaults otherwise."""
    o = dict(DEFAULTS, **options)
    return torch.amp.GradScaler("cpu", init_scale=o["initial_scale"], growth_factor=o["growth_factor"],
                                backoff_factor=o["backoff_factor"], growth_interval=o["growth_interval"])


class StepCounter:
    """Counts the calls of optimizer.step() that actually run (GradScaler.step skips it on an overflow)."""

    def __init__(self, optimizer):
        self.count = 0
        inner = optimizer.step

        def counted(*args, **kwargs):
            self.count += 1
            return inner(*args, **kwargs)

        optimizer.step = counted


class Driver:
    def __init__(self, options):
        self.param = torch.nn.Parameter(torch.zeros(2))
        self.optimizer = torch.optim.SGD([self.param], lr=0.0)
        self.steps = StepCounter(self.optimizer)
        self.scaler = grad_scaler(options)


def make(options):
    return Driver(options)


def step(d, finite):
    d.scaler.scale(torch.tensor(1.0))  # as a training loop scales its loss (and the scaler starts lazily)
    d.param.grad = torch.tensor([1.0, 2.0]) if finite else torch.tensor([1.0, float("inf")])
    d.scaler.step(d.optimizer)
    d.scaler.update()


def read(d):
    return {"scale": d.scaler.get_scale(), "growth_counter": int(d.scaler.state_dict()["_growth_tracker"]),
            "applied_steps": d.steps.count}
