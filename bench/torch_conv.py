#!/usr/bin/env python3
"""The cnn model's convolution passes in PyTorch 2.x, timed by the oneDNN inside it.

The peer of bench_roofline's libraries' ceiling (`ceiling/cnn`, which prints "ceiling of cnn: …" with the
fastest oneDNN 2.6 kernel of each pass): the same convolutions (batch 128, float32, 3×3, "valid", with
bias), each pass's time as the oneDNN that PyTorch carries measures it itself (ONEDNN_VERBOSE=1 prints the
time of every primitive it executes, the pass alone, without PyTorch's own work around it). Each layer runs
in a fresh interpreter per memory layout (torch's default NCHW, and channels_last), --runs forward +
backward steps; the best time of each pass over both layouts is kept, with the kernel and layout it came
from. The first layer's input is data, so it has no data pass (as in the model).

    py=$(bench/peers.sh)
    "$py" bench/torch_conv.py --threads 2 [--json OUT]

A table goes to stdout, one JSON object per pass to --json.
"""

import argparse
import json
import os
import subprocess
import sys

# (name, input channels, output channels, input height = width) of the cnn model's convolutions
LAYERS = [("conv2d 1→32 at 28×28", 1, 32, 28), ("conv2d 32→64 at 13×13", 32, 64, 13)]
PASSES = {"forward_training": "forward", "backward_weights": "weights", "backward_data": "input"}


def child(layer: int, layout: str, batch: int, runs: int, threads: int) -> None:
    import torch

    torch.set_num_threads(threads)
    torch.set_num_interop_threads(1)
    _, c, o, size = LAYERS[layer]
    fmt = torch.channels_last if layout == "channels_last" else torch.contiguous_format
    x = torch.randn(batch, c, size, size).to(memory_format=fmt).requires_grad_(layer > 0)
    w = torch.randn(o, c, 3, 3).to(memory_format=fmt).requires_grad_()
    b = torch.randn(o, requires_grad=True)
    for _ in range(runs):
        y = torch.nn.functional.conv2d(x, w, b)
        y.backward(torch.ones_like(y))


def flops(layer: int, batch: int) -> float:
    _, c, o, size = LAYERS[layer]
    out = size - 2
    return 2.0 * batch * o * out * out * c * 9


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2, help="torch.set_num_threads (default 2)")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--runs", type=int, default=60, help="forward + backward steps per layer and layout")
    parser.add_argument("--json", help="write one JSON object per pass to this file")
    parser.add_argument("--child", nargs=2, metavar=("LAYER", "LAYOUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.threads < 1 or args.batch < 1 or args.runs < 1:
        parser.error("--threads, --batch and --runs must be at least 1")
    if args.child:
        child(int(args.child[0]), args.child[1], args.batch, args.runs, args.threads)
        return 0

    env = dict(os.environ, ONEDNN_VERBOSE="1", OMP_NUM_THREADS=str(args.threads))
    best = {}  # (layer, pass) -> (ms, kernel, layout)
    version = None
    for layer in range(len(LAYERS)):
        for layout in ("nchw", "channels_last"):
            command = [sys.executable, __file__, "--child", str(layer), layout, "--batch", str(args.batch),
                       "--runs", str(args.runs), "--threads", str(args.threads)]
            run = subprocess.run(command, env=env, capture_output=True, text=True)
            if run.returncode != 0:
                sys.stderr.write(run.stderr)
                return 1
            for line in run.stdout.splitlines():
                f = line.split(",")
                if ",info,oneDNN v" in line and version is None:  # "onednn_verbose[,v1],info,oneDNN v3.x.y (…)"
                    version = line.split(",info,oneDNN ")[1].split()[0]
                if len(f) < 9 or f[3] != "exec" or f[5] != "convolution" or f[7] not in PASSES:
                    continue
                key, ms = (layer, PASSES[f[7]]), float(f[-1])
                if key not in best or ms < best[key][0]:
                    best[key] = (ms, f[6], layout)
    if not best:
        sys.stderr.write("no oneDNN convolution in the verbose log: is this PyTorch built with oneDNN?\n")
        return 1

    print(f"PyTorch's oneDNN {version or '(version not printed)'}, {args.threads} threads, batch {args.batch}, "
          f"best of {args.runs} runs per layout")
    print("| pass | ms | GFLOP/s | kernel | layout |\n|---|---:|---:|---|---|")
    rows = []
    for (layer, what), (ms, kernel, layout) in sorted(best.items()):
        gflops = flops(layer, args.batch) / ms * 1e-6
        print(f"| {LAYERS[layer][0]} {what} | {ms:.3f} | {gflops:.1f} | {kernel} | {layout} |")
        rows.append({"layer": LAYERS[layer][0], "pass": what, "ms": ms, "gflops": gflops, "kernel": kernel,
                     "layout": layout, "onednn": version, "threads": args.threads, "batch": args.batch})
    if args.json:
        with open(args.json, "w") as out:
            for row in rows:
                out.write(json.dumps(row, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
