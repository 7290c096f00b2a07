#!/usr/bin/python3
"""PyTorch peer of mixprec's built-in Fashion-MNIST models, for throughput and memory comparisons.

Trains the same three models as mixprec's zoo (mlp, cnn, vit) on the same gzip IDX files, with the same
batch size and optimizer, in float32 or with bfloat16 autocast (PyTorch has no float16 training and no
loss scaling on CPU), at 1 and 2 threads. Each configuration runs in a fresh subprocess, so that its peak
RSS is its own. Prints one JSON object per configuration on stdout and a table on stderr.

    /usr/bin/python3 bench/torch_fashion.py --models mlp,cnn --steps 200 --warmup 20
    /usr/bin/python3 bench/torch_fashion.py --models vit --modes bf16 --threads 2 --epochs 1

Needs Debian's python3-torch (PyTorch 1.13) and python3-numpy; run it with /usr/bin/python3.

Throughput: training samples per second over --steps steps timed after --warmup untimed ones (with
--epochs, over every step of the epochs after the first --warmup, evaluation excluded). Pixels are kept
as uint8 and each batch is converted to float32 x / 255, as mixprec does.

The models follow mixprec's definitions: Glorot-uniform kernels and zero biases (Keras's defaults, which
mixprec uses), GELU in its tanh form, LayerNorm epsilon 1e-6 in the transformer.
"""

import argparse
import gzip
import importlib.util
import json
import os
import resource
import struct
import subprocess
import sys
import time

MODELS = ("mlp", "cnn", "vit")
MODES = ("float32", "bf16")
DEFAULT_DATA = "/usr/share/datasets/fashion-mnist"


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

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    x_train, y_train = load_split(args.data, "train")
    model = build_model(args.model)
    optimizer = make_optimizer(args.optimizer, model.parameters(), args.lr)
    autocast = args.mode == "bf16"
    n, batch = x_train.shape[0], args.batch_size
    generator = torch.Generator().manual_seed(args.seed)

    def batches():
        """Shuffled batches forever, a new permutation each epoch; yields (epoch, x, y)."""
        epoch = 0
        while True:
            order = torch.randperm(n, generator=generator)
            for start in range(0, n, batch):
                idx = order[start:start + batch]
                yield epoch, x_train[idx].float().div_(255.0), y_train[idx]
            epoch += 1

    def step(x, y):
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            logits = model(x)
        loss = F.cross_entropy(logits.float(), y)
        loss.backward()
        optimizer.step()
        return loss

    model.train()
    steps_per_epoch = (n + batch - 1) // batch
    total = args.epochs * steps_per_epoch if args.epochs > 0 else args.warmup + args.steps
    timed_steps, timed_samples, elapsed, last_loss = 0, 0, 0.0, float("nan")
    source = batches()
    for i in range(total):
        _, x, y = next(source)
        if i == args.warmup:
            start = time.perf_counter()
        loss = step(x, y)
        if i >= args.warmup:
            timed_steps += 1
            timed_samples += x.shape[0]
        if i == total - 1:
            last_loss = float(loss)
    if timed_steps > 0:
        elapsed = time.perf_counter() - start

    result = {
        "model": args.model, "mode": args.mode, "threads": args.threads, "batch_size": batch,
        "optimizer": args.optimizer, "learning_rate": args.lr, "steps": total, "timed_steps": timed_steps,
        "samples_per_second": timed_samples / elapsed if elapsed > 0 else None,
        "final_loss": last_loss, "torch_version": torch.__version__,
    }
    if args.epochs > 0:
        x_test, y_test = load_split(args.data, "t10k")
        # The models have no dropout or batch norm, so training mode computes the same function; it is kept
        # because PyTorch 1.13's fused attention (eval mode, no grad) fails under bfloat16 autocast.
        correct = 0
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            for start in range(0, x_test.shape[0], 1000):
                logits = model(x_test[start:start + 1000].float().div_(255.0))
                correct += int((logits.argmax(dim=1) == y_test[start:start + 1000]).sum())
        result["epochs"] = args.epochs
        result["test_accuracy"] = correct / x_test.shape[0]
    result["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    return result


# ----------------------------------------------------------------------------------------- driver

def child_command(args, model, mode, threads):
    return [sys.executable, os.path.abspath(__file__), "--one", "--models", model, "--modes", mode,
            "--threads", str(threads), "--batch-size", str(args.batch_size), "--optimizer", args.optimizer,
            "--lr", str(args.lr), "--steps", str(args.steps), "--warmup", str(args.warmup),
            "--epochs", str(args.epochs), "--seed", str(args.seed), "--data", args.data]


def run_configuration(args, model, mode, threads):
    """Runs one configuration in a fresh interpreter (threads fixed before torch starts its pools)."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    proc = subprocess.run(child_command(args, model, mode, threads), env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr)
        sys.exit(f"torch_fashion: {model} {mode} threads={threads} failed (exit status {proc.returncode})")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def print_table(results):
    best = {}
    for r in results:
        key = (r["model"], r["mode"])
        if r["samples_per_second"] and r["samples_per_second"] > best.get(key, 0):
            best[key] = r["samples_per_second"]
    accuracy = any("test_accuracy" in r for r in results)
    header = f"{'model':<6}{'mode':<9}{'threads':>8}{'samples/s':>12}{'peak RSS MiB':>14}"
    header += f"{'test acc':>10}" if accuracy else ""
    print(header, file=sys.stderr)
    for r in results:
        sps = r["samples_per_second"] or 0.0
        mark = " *" if sps == best.get((r["model"], r["mode"])) else ""
        line = f"{r['model']:<6}{r['mode']:<9}{r['threads']:>8}{sps:>12.0f}{r['peak_rss_mib']:>14.0f}"
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


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="mlp,cnn,vit", help="comma-separated: mlp, cnn, vit")
    p.add_argument("--modes", default="float32,bf16", help="comma-separated: float32, bf16 (bfloat16 autocast)")
    p.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--optimizer", choices=("adam", "adamw", "sgd"), default="adam")
    p.add_argument("--lr", type=float, default=None, help="default: 1e-3 for adam/adamw, 1e-2 for sgd")
    p.add_argument("--steps", type=int, default=200, help="timed steps (without --epochs)")
    p.add_argument("--warmup", type=int, default=20, help="untimed steps first")
    p.add_argument("--epochs", type=int, default=0, help="train this many epochs and measure test accuracy")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--data", default=DEFAULT_DATA, help="directory of the Fashion-MNIST gzip IDX files")
    p.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.lr is None:
        args.lr = 1e-2 if args.optimizer == "sgd" else 1e-3
    try:
        models = parse_list(args.models, MODELS, "model")
        modes = parse_list(args.modes, MODES, "mode")
        threads = [int(t) for t in parse_list(args.threads, None, "thread count")]
    except (argparse.ArgumentTypeError, ValueError) as e:
        p.error(str(e))
    if args.batch_size < 1 or args.steps < 0 or args.warmup < 0 or args.epochs < 0 or min(threads) < 1:
        p.error("--batch-size and --threads must be ≥ 1; --steps, --warmup and --epochs ≥ 0")
    if args.epochs == 0 and args.steps == 0:
        p.error("nothing to measure: give --steps > 0 or --epochs > 0")

    if args.one:
        if importlib.util.find_spec("torch") is None:
            sys.exit("torch_fashion: PyTorch is missing; install python3-torch and run with /usr/bin/python3")
        args.model, args.mode, args.threads = models[0], modes[0], threads[0]
        print(json.dumps(run_one(args)), flush=True)
        return

    if not os.path.isdir(args.data):
        sys.exit(f"torch_fashion: {args.data} not found; install it with: sudo apt-get install "
                 "dataset-fashion-mnist, or pass --data DIR")
    results = []
    for model in models:
        for mode in modes:
            group = [run_configuration(args, model, mode, t) for t in threads]
            fastest = max(group, key=lambda r: r["samples_per_second"] or 0)
            for r in group:
                r["best"] = r is fastest
                print(json.dumps(r), flush=True)
            results += group
    print_table(results)


if __name__ == "__main__":
    main()
