#!/usr/bin/env python3
"""What data-parallel training over several hosts should give, from a latency-bandwidth model.

    bench/dp_scaling.py --model mlp:669706:15562 --model cnn:PARAMS:SAMPLES_PER_S ...

Each --model is NAME:TRAINABLE_PARAMETERS:SAMPLES_PER_SECOND, the last measured on one host (mixprec-train's
summary). The gradients are summed with a ring all-reduce, whose time for B bytes over N hosts is

    T_ar(N, B) = 2 (N - 1) alpha + 2 (N - 1) / N * B / beta

(alpha: one message's latency, beta: a link's bandwidth). mixprec-train keeps the global batch (strong
scaling) and does not overlap the reduction with the backward pass, so a step on N hosts takes

    T(N) = T(1) / N + T_ar(N, B),        speedup T(1) / T(N).

Prints, per network, model and transport (float32: 4 bytes per parameter; compute: 2, the 16-bit formats),
the bytes each host sends into the all-reduce per step and the predicted speedup for 2 ... 64 hosts.
"""
import argparse

NETWORKS = {  # name: (alpha seconds, beta bytes per second)
    "10 GbE (TCP)": (25e-6, 1.25e9),
    "100 Gb/s InfiniBand": (2e-6, 12.5e9),
}
HOSTS = [2, 4, 8, 16, 32, 64]
BATCH = 128


def ring_allreduce(n, nbytes, alpha, beta):
    return 2 * (n - 1) * alpha + 2 * (n - 1) / n * nbytes / beta


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", action="append", required=True, help="NAME:PARAMETERS:SAMPLES_PER_SECOND")
    parser.add_argument("--batch", type=int, default=BATCH, help="the global batch (default 128)")
    args = parser.parse_args()
    models = []
    for spec in args.model:
        name, params, rate = spec.split(":")
        models.append((name, int(params), float(rate)))

    print("| model | transport | bytes per step | one host: step |", " | ".join(f"{n} hosts" for n in HOSTS), "|")
    print("|---|---|---:|---:|" + "---:|" * len(HOSTS))
    for network, (alpha, beta) in NETWORKS.items():
        print(f"| **{network}** (α = {alpha * 1e6:g} µs, β = {beta / 1e9:g} GB/s) |", " |" * (len(HOSTS) + 3))
        for name, params, rate in models:
            step = args.batch / rate
            for transport, width in (("float32", 4), ("compute (16-bit)", 2)):
                nbytes = params * width
                cells = []
                for n in HOSTS:
                    t = step / n + ring_allreduce(n, nbytes, alpha, beta)
                    cells.append(f"{step / t:.1f}×")
                print(f"| {name} | {transport} | {nbytes / 2**20:.2f} MiB | {step * 1e3:.2f} ms |", " | ".join(cells), "|")


if __name__ == "__main__":
    main()
