"""PyTorch's loss-scaled step: torch.amp.GradScaler("cpu") with torch.optim.SGD, Adam or AdamW
(single-tensor code path, foreach=False). Each micro-batch's scaled gradients are added into .grad as
backward passes would; then scaler.step(optimizer) unscales, checks and steps or skips, and
scaler.update() moves the scale. With clipping, scaler.unscale_(optimizer) and
torch.nn.utils.clip_grad_norm_ come first, as PyTorch's AMP recipe does it."""

import torch

from anchors.torch import StepCounter, grad_scaler

PRESET = "pytorch"


def header():
    return dict(library="torch", version=torch.__version__.split("+")[0],
                object="torch.amp.GradScaler('cpu') with torch.optim.SGD / Adam / AdamW (foreach=False)")


class Driver:
    def __init__(self, case):
        o = case.optimizer
        self.params = [torch.nn.Parameter(torch.tensor(w, dtype=torch.float32)) for w in case.initial]
        if o["kind"] == "sgd":
            self.opt = torch.optim.SGD(self.params, lr=o["learning_rate"], momentum=o.get("momentum", 0.0),
                                       nesterov=o.get("nesterov", False), weight_decay=o.get("weight_decay", 0.0),
                                       foreach=False)
        else:
            cls = torch.optim.Adam if o["kind"] == "adam" else torch.optim.AdamW
            extra = dict(weight_decay=o["weight_decay"]) if o["kind"] == "adamw" else {}
            self.opt = cls(self.params, lr=o["learning_rate"], betas=(o["beta1"], o["beta2"]), eps=o["epsilon"],
                           foreach=False, **extra)
        self.clip = o.get("clip_global_norm")
        self.steps = StepCounter(self.opt)
        self.scaler = grad_scaler(case.loss_scale)

    def scale(self):
        return self.scaler.get_scale()

    def step(self, micro_batches):
        self.scaler.scale(torch.tensor(1.0))
        for p in self.params:
            p.grad = None
        for mb in micro_batches:
            for p, g in zip(self.params, mb):
                g = torch.tensor(g, dtype=torch.float32)
                p.grad = g if p.grad is None else p.grad + g
        before = self.steps.count
        if self.clip is not None:  # PyTorch's recipe: unscale first, then clip, then step
            self.scaler.unscale_(self.opt)
            torch.nn.utils.clip_grad_norm_(self.params, self.clip, foreach=False)
        self.scaler.step(self.opt)
        self.scaler.update()
        return self.steps.count > before

    def record(self):
        slots = {}
        names = {"momentum_buffer": "momentum", "exp_avg": "m", "exp_avg_sq": "v"}
        for p in self.params:
            for key, name in names.items():
                t = self.opt.state.get(p, {}).get(key)
                if t is not None:
                    slots.setdefault(name, []).append(t.tolist())
        return dict(iterations=self.steps.count, scale=self.scaler.get_scale(),
                    growth_counter=int(self.scaler.state_dict()["_growth_tracker"]),
                    weights=[p.detach().tolist() for p in self.params], slots=slots)


def make(case):
    return Driver(case)
