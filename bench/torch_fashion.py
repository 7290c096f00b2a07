#!/usr/bin/env python3
"""PyTorch 2.x peer of mixprec's built-in Fashion-MNIST models, for throughput and memory comparisons.

Trains the same three models as mixprec's zoo (mlp, cnn, vit) on the same gzip IDX files, with
mixprec-train's defaults (Adam, learning rate 1e-3, batch 128, seed 1), in one of these modes:

    float32          eager, float32 throughout (peer of mixprec's float32)
    bf16             eager, forward pass under torch.autocast("cpu", dtype=torch.bfloat16), no loss scaling
                     (peer of mixed_bfloat16)
    fp16             eager, forward pass under torch.autocast("cpu", dtype=torch.float16), dynamic loss scaling
                     by torch.amp.GradScaler("cpu") at its defaults: initial scale 2^16, halved on an overflow
                     (the step is skipped), doubled after 2000 finite steps (peer of mixed_float16)
    MODE+compile     the same with the model wrapped in torch.compile(model, dynamic=False) (backend inductor,
                     default mode): its forward and backward graphs are compiled; the loss, the GradScaler
                     calls and the optimizer step stay eager

The weights stay float32 in every mode (autocast casts inside the ops), like mixprec's master weights. Each
configuration (model, mode, thread count) runs in a fresh interpreter with torch.set_num_threads(n),
torch.set_num_interop_threads(1) and OMP_NUM_THREADS = MKL_NUM_THREADS = n. One JSON object per
configuration goes to stdout, a table to stderr.

    py=$(bench/peers.sh)     # a virtual environment with the pinned PyTorch, outside the tree
    "$py" bench/torch_fashion.py --models mlp,cnn --steps 200 --warmup 20
    "$py" bench/torch_fashion.py --models vit --modes fp16,fp16+compile --threads 2 --epochs 1

What is measured:
- samples_per_second: training samples over the wall time of --steps steps timed after --warmup untimed ones
  (with --epochs: every step after the first --warmup, evaluation excluded). A step is: the batch's
  conversion from uint8 to float32 x / 255 (as mixprec does), zero_grad, forward, float32 cross-entropy,
  backward, optimizer step (through the GradScaler in fp16). Batches come from a new shuffle every epoch.
- compile_seconds (compile modes): wall time of the untimed steps during which something was compiled (the
  first step, and a forward + backward on the epoch's short last batch when the run will meet one), their
  own computation included. Inductor caches its output on disk, so a second run compiles faster. The
  warm-up has to cover compilation (compile modes need --warmup ≥ 1); compiled_while_timed counts
  compilation events during the timed steps (0 unless something recompiled, which is also reported).
- peak_rss_mib: this process's peak resident memory (getrusage ru_maxrss): data, model, PyTorch itself and,
  in compile modes, the compiler's own memory. Inductor's compile workers are other processes, not counted.
  peak_rss_after_import_mib is the same figure taken right after `import torch`: the library's share.
- skipped_steps and loss_scale (fp16): steps the GradScaler skipped for non-finite gradients, final scale.
- Context: torch version, the CPU capability PyTorch dispatches to, CPU model name and the flags avx2,
  avx512f, avx512_bf16, avx512_fp16, amx_bf16 from /proc/cpuinfo.

The models follow mixprec's definitions: Glorot-uniform kernels and zero biases (Keras's defaults, which
mixprec uses), GELU in its tanh form, LayerNorm epsilon 1e-6 in the transformer. With --epochs the test
accuracy is measured with the eager model (the same weights; evaluation is not timed).
"""

import argparse
import gzip
import json
import os
import resource
import struct
import subprocess
import sys
import time

MODELS = ("mlp", "cnn", "vit")
PRECISIONS = ("float32", "bf16", "fp16")
MODES = PRECISIONS + tuple(p + "+compile" for p in PRECISIONS)
CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16")
DEFAULT_DATA = "/usr/share/datasets/fashion-mnist"


def cpu_info(path="/proc/cpuinfo"):
    """{"cpu_model": the first "model name" (None if absent), "cpu_flags": {flag: present} for CPU_FLAGS}."""
    model, flags = None, None
    try:
        with open(path) as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and model is None:
                    model = value.strip()
                elif key.strip() == "flags" and flags is None:
                    flags = set(value.split())
    except OSError:
        pass
    return {"cpu_model": model, "cpu_flags": {f: f in (flags or ()) for f in CPU_FLAGS}}


# ---------------------------------------------------------------------------------------------- data

def read_idx(path, magic, item_bytes):
    """The payload of a gzip IDX file as a NumPy uint8 array of (count, item_bytes), read straight into
    place (no second copy, so that the peak RSS counts the data once, as mixprec's reader does)."""
    import numpy as np
    header_size = 16 if magic == 2051 else 8
    with gzip.open(path, "rb") as f:
        header = f.read(header_size)
        if len(header) < header_size or struct.unpack(">I", header[:4])[0] != magic:
            sys.exit(f"torch_fashion: {path} is not an IDX file with magic {magic}")
        count = struct.unpack(">I", header[4:8])[0]
        data = np.empty((count, item_bytes), dtype=np.uint8)
        if f.readinto(memoryview(data).cast("B")) != data.size or f.read(1):
            sys.exit(f"torch_fashion: {path} does not hold the {count} items its header promises")
    return data


def load_split(data_dir, prefix):
    """(images uint8 (n, 1, 28, 28), labels int64 (n,)) as torch tensors."""
    import torch
    images = read_idx(os.path.join(data_dir, f"{prefix}-images-idx3-ubyte.gz"), 2051, 784)
    labels = read_idx(os.path.join(data_dir, f"{prefix}-labels-idx1-ubyte.gz"), 2049, 1)
    x = torch.from_numpy(images).reshape(-1, 1, 28, 28)
    y = torch.from_numpy(labels.reshape(-1).astype("int64"))
    if x.shape[0] != y.shape[0]:
        sys.exit(f"torch_fashion: {x.shape[0]} images but {y.shape[0]} labels in {data_dir} ({prefix})")
    return x, y


# -------------------------------------------------------------------------------------------- models

def build_model(name):
    import torch
    from torch import nn

    class Patches(nn.Module):
        """(B, 1, 28, 28) → (B, 16, 49): 7×7 patches in row-major order, each flattened row-major."""

        def forward(self, x):
            b = x.shape[0]
            return x.reshape(b, 4, 7, 4, 7).permute(0, 1, 3, 2, 4).reshape(b, 16, 49)

    class Block(nn.Module):
        """Pre-norm encoder block: x + MHSA(LN(x)); x + MLP(LN(x)) with a GELU (tanh) hidden layer."""

        def __init__(self, width=64, heads=4, hidden=128, eps=1e-6):
            super().__init__()
            self.norm1 = nn.LayerNorm(width, eps=eps)
            self.attention = nn.MultiheadAttention(width, heads, batch_first=True)
            self.norm2 = nn.LayerNorm(width, eps=eps)
            self.mlp = nn.Sequential(nn.Linear(width, hidden), nn.GELU(approximate="tanh"), nn.Linear(hidden, width))

        def forward(self, x):
            h = self.norm1(x)
            x = x + self.attention(h, h, h, need_weights=False)[0]
            return x + self.mlp(self.norm2(x))

    class ViT(nn.Module):
        def __init__(self, width=64, eps=1e-6):
            super().__init__()
            self.patches = Patches()
            self.project = nn.Linear(49, width)
            self.position = nn.Parameter(torch.empty(16, width))
            nn.init.normal_(self.position, std=0.02)
            self.blocks = nn.Sequential(Block(width), Block(width))
            self.norm = nn.LayerNorm(width, eps=eps)
            self.head = nn.Linear(width, 10)

        def forward(self, x):
            x = self.project(self.patches(x)) + self.position
            x = self.norm(self.blocks(x))
            return self.head(x.mean(dim=1))

    if name == "mlp":
        model = nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                              nn.Linear(512, 10))
    elif name == "cnn":
        model = nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(32, 64, 3), nn.ReLU(),
                              nn.MaxPool2d(2), nn.Flatten(), nn.Linear(1600, 128), nn.ReLU(), nn.Linear(128, 10))
    elif name == "vit":
        model = ViT()
    else:
        raise ValueError(f"unknown model {name!r}; expected one of {', '.join(MODELS)}")
    for m in model.modules():  # Keras defaults, as mixprec
        if isinstance(m, (nn.Linear, nn.Conv2d)):
            nn.init.xavier_uniform_(m.weight)
            nn.init.zeros_(m.bias)
    return model


def make_optimizer(name, params, lr):
    import torch
    if name == "adam":
        return torch.optim.Adam(params, lr=lr)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr)
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=0.9)
    raise ValueError(f"unknown optimizer {name!r}")


# ------------------------------------------------------------------------------ one configuration

def run_one(args):
    """Trains one configuration in this process and returns its result as a dict."""
    import torch
    import torch.nn.functional as F

    rss_after_import = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)  # before any inter-op work starts
    torch.manual_seed(args.seed)
    precision, compiled = args.mode.removesuffix("+compile"), args.mode.endswith("+compile")
    amp_dtype = {"float32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    x_train, y_train = load_split(args.data, "train")
    model = build_model(args.model)
    net = torch.compile(model, dynamic=False) if compiled else model
    optimizer = make_optimizer(args.optimizer, model.parameters(), args.lr)
    scaler = torch.amp.GradScaler("cpu") if precision == "fp16" else None
    n, batch = x_train.shape[0], args.batch_size
    generator = torch.Generator().manual_seed(args.seed)

    def compile_events():
        """Events counted so far by Dynamo, AOTAutograd and Inductor; constant while nothing compiles."""
        if not compiled:
            return 0
        from torch._dynamo.utils import counters
        return sum(sum(c.values()) for c in counters.values())

    def batches():
        """Shuffled batches forever, a new permutation each epoch; yields (x, y)."""
        while True:
            order = torch.randperm(n, generator=generator)
            for start in range(0, n, batch):
                idx = order[start:start + batch]
                yield x_train[idx].float().div_(255.0), y_train[idx]

    def forward_loss(x, y):
        with torch.autocast("cpu", dtype=amp_dtype or torch.bfloat16, enabled=amp_dtype is not None):
            logits = net(x)
        return F.cross_entropy(logits.float(), y)

    def step(x, y):
        """One training step; True when it was applied (False: the GradScaler skipped it)."""
        optimizer.zero_grad(set_to_none=True)
        loss = forward_loss(x, y)
        if scaler is None:
            loss.backward()
            optimizer.step()
            return loss, True
        scale = scaler.get_scale()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        return loss, scaler.get_scale() >= scale

    model.train()
    steps_per_epoch = (n + batch - 1) // batch
    total = args.epochs * steps_per_epoch if args.epochs > 0 else args.warmup + args.steps
    compile_seconds = 0.0
    if compiled and n % batch and total >= steps_per_epoch:
        # The short last batch of an epoch compiles its own graphs (static shapes): do that now, untimed,
        # with a forward + backward whose gradients the first step's zero_grad drops (no optimizer step).
        t = time.perf_counter()
        forward_loss(x_train[:n % batch].float().div_(255.0), y_train[:n % batch]).backward()
        compile_seconds += time.perf_counter() - t
    timed_steps, timed_samples, skipped, start, last_loss = 0, 0, 0, None, float("nan")
    source = batches()
    for i in range(total):
        x, y = next(source)
        if i == args.warmup:
            events_before_timing = compile_events()
            start = time.perf_counter()
        if i < args.warmup:
            t, events = time.perf_counter(), compile_events()
        loss, applied = step(x, y)
        if i < args.warmup and compile_events() != events:
            compile_seconds += time.perf_counter() - t
        skipped += not applied
        if i >= args.warmup:
            timed_steps += 1
            timed_samples += x.shape[0]
        if i == total - 1:
            last_loss = float(loss)
    elapsed = time.perf_counter() - start if start is not None else 0.0
    compiled_while_timed = compile_events() - events_before_timing if start is not None else 0
    if compiled_while_timed:
        print(f"torch_fashion: {args.model} {args.mode}: {compiled_while_timed} compilation events during the "
              "timed steps (a recompile); its throughput includes compile time", file=sys.stderr)

    result = {
        "model": args.model, "mode": args.mode, "precision": precision, "compiled": compiled,
        "threads": args.threads, "interop_threads": torch.get_num_interop_threads(), "batch_size": batch,
        "optimizer": args.optimizer, "learning_rate": args.lr, "steps": total, "warmup_steps": args.warmup,
        "timed_steps": timed_steps, "seconds": elapsed,
        "samples_per_second": timed_samples / elapsed if elapsed > 0 else None,
        "compile_seconds": compile_seconds if compiled else None,
        "compiled_while_timed": compiled_while_timed if compiled else None,
        "skipped_steps": skipped, "loss_scale": scaler.get_scale() if scaler else None,
        "final_loss": last_loss, "torch_version": torch.__version__,
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(), **cpu_info(),
    }
    if args.epochs > 0:
        x_test, y_test = load_split(args.data, "t10k")
        correct = 0
        with torch.no_grad(), torch.autocast("cpu", dtype=amp_dtype or torch.bfloat16, enabled=amp_dtype is not None):
            for first in range(0, x_test.shape[0], 1000):
                logits = model(x_test[first:first + 1000].float().div_(255.0))
                correct += int((logits.argmax(dim=1) == y_test[first:first + 1000]).sum())
        result["epochs"] = args.epochs
        result["test_accuracy"] = correct / x_test.shape[0]
    result["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    result["peak_rss_after_import_mib"] = rss_after_import
    return result


# ----------------------------------------------------------------------------------------- driver

def child_command(args, model, mode, threads):
    return [sys.executable, os.path.abspath(__file__), "--one", "--models", model, "--modes", mode,
            "--threads", str(threads), "--batch-size", str(args.batch_size), "--optimizer", args.optimizer,
            "--lr", str(args.lr), "--steps", str(args.steps), "--warmup", str(args.warmup),
            "--epochs", str(args.epochs), "--seed", str(args.seed), "--data", args.data]


def run_configuration(args, model, mode, threads):
    """Runs one configuration in a fresh interpreter (threads fixed before torch starts its pools);
    its result, or None (with its stderr passed on) when it failed."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    proc = subprocess.run(child_command(args, model, mode, threads), env=env, capture_output=True, text=True)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        sys.stderr.write(proc.stderr)
        print(f"torch_fashion: {model} {mode} threads={threads} failed (exit status {proc.returncode})",
              file=sys.stderr)
        return None
    return json.loads(lines[-1])


def print_table(results):
    best = {}
    for r in results:
        key = (r["model"], r["mode"])
        if r["samples_per_second"] and r["samples_per_second"] > best.get(key, 0):
            best[key] = r["samples_per_second"]
    accuracy = any("test_accuracy" in r for r in results)
    header = f"{'model':<6}{'mode':<15}{'threads':>8}{'samples/s':>12}{'peak RSS MiB':>14}{'compile s':>11}"
    header += f"{'test acc':>10}" if accuracy else ""
    print(header, file=sys.stderr)
    for r in results:
        sps = r["samples_per_second"] or 0.0
        mark = " *" if sps == best.get((r["model"], r["mode"])) else ""
        compile_s = f"{r['compile_seconds']:>11.1f}" if r["compile_seconds"] is not None else f"{'':>11}"
        line = f"{r['model']:<6}{r['mode']:<15}{r['threads']:>8}{sps:>12.0f}{r['peak_rss_mib']:>14.0f}{compile_s}"
        if accuracy:
            line += f"{100 * r['test_accuracy']:>9.2f}%" if "test_accuracy" in r else f"{'':>10}"
        print(line + mark, file=sys.stderr)
    print("(* best thread count for the model and mode)", file=sys.stderr)


def parse_list(text, allowed, what):
    items = [t.strip() for t in text.split(",") if t.strip()]
    for t in items:
        if allowed is not None and t not in allowed:
            raise argparse.ArgumentTypeError(f"unknown {what} {t!r}; expected some of {', '.join(allowed)}")
    return items


def check_torch():
    """Exits with advice unless this interpreter has PyTorch ≥ 2 and NumPy (read from their metadata, without
    importing PyTorch, which takes seconds)."""
    from importlib import metadata
    advice = "make the peer's environment with bench/peers.sh and run this script with the python it prints"
    try:
        version = metadata.version("torch")
        metadata.version("numpy")
    except metadata.PackageNotFoundError as e:
        sys.exit(f"torch_fashion: {e.name} is missing in {sys.executable}; {advice}")
    if int(version.split(".")[0]) < 2:
        sys.exit(f"torch_fashion: PyTorch {version} in {sys.executable} has no float16 autocast, GradScaler or "
                 f"torch.compile on CPU; {advice}")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="mlp,cnn,vit", help="comma-separated: mlp, cnn, vit")
    p.add_argument("--modes", default="float32,bf16,fp16",
                   help="comma-separated: float32, bf16, fp16, each also with +compile (see above)")
    p.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--optimizer", choices=("adam", "adamw", "sgd"), default="adam")
    p.add_argument("--lr", type=float, default=None, help="default: 1e-3 for adam/adamw, 1e-2 for sgd")
    p.add_argument("--steps", type=int, default=200, help="timed steps (without --epochs)")
    p.add_argument("--warmup", type=int, default=20, help="untimed steps first (≥ 1 with torch.compile)")
    p.add_argument("--epochs", type=int, default=0, help="train this many epochs and measure test accuracy")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--data", default=DEFAULT_DATA, help="directory of the Fashion-MNIST gzip IDX files")
    p.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = __doc__.split("\n", 2)[2]
    args = p.parse_args()
    if args.lr is None:
        args.lr = 1e-2 if args.optimizer == "sgd" else 1e-3
    try:
        models = parse_list(args.models, MODELS, "model")
        modes = parse_list(args.modes, MODES, "mode")
        threads = [int(t) for t in parse_list(args.threads, None, "thread count")]
    except (argparse.ArgumentTypeError, ValueError) as e:
        p.error(str(e))
    if not models or not modes or not threads:
        p.error("--models, --modes and --threads each need at least one item")
    if args.batch_size < 1 or args.steps < 0 or args.warmup < 0 or args.epochs < 0 or min(threads) < 1:
        p.error("--batch-size and --threads must be ≥ 1; --steps, --warmup and --epochs ≥ 0")
    if args.epochs == 0 and args.steps == 0:
        p.error("nothing to measure: give --steps > 0 or --epochs > 0")
    if args.warmup < 1 and any(m.endswith("+compile") for m in modes):
        p.error("the +compile modes compile during the first step: give --warmup ≥ 1 so that it is not timed")

    check_torch()
    if args.one:
        args.model, args.mode, args.threads = models[0], modes[0], threads[0]
        print(json.dumps(run_one(args)), flush=True)
        return

    if not os.path.isdir(args.data):
        sys.exit(f"torch_fashion: {args.data} not found; install it with: sudo apt-get install "
                 "dataset-fashion-mnist, or pass --data DIR")
    results, failed = [], 0
    for model in models:
        for mode in modes:
            group = [r for r in (run_configuration(args, model, mode, t) for t in threads) if r is not None]
            failed += len(threads) - len(group)
            fastest = max(group, key=lambda r: r["samples_per_second"] or 0, default=None)
            for r in group:
                r["best"] = r is fastest
                print(json.dumps(r), flush=True)
            results += group
    print_table(results)
    if failed:
        sys.exit(f"torch_fashion: {failed} configuration(s) failed (see above)")


if __name__ == "__main__":
    main()
