#!/usr/bin/env python3
"""Markdown tables from the JSON output of the bench programs (Python 3 stdlib only).

    report.py bench_convert.json bench_matmul.json bench_layers.json bench_amp.json bench_roofline.json

Every repetition in the JSON is one sample. For each benchmark the table shows the median rate over its
repetitions and the best (highest) one; each is divided by the median / best rate of its peer of the same
size or shape from the same file: memcpy for conversions, cblas_sgemm for matmul.

Floors checked (on the ratio of medians):
  conversions (best SIMD path)       >= 0.9 x copy, in time for the same array (element rates)
  matmul float32, float16            >= 0.9 x sgemm
  matmul bfloat16 (automatic)        >= 1.5 x sgemm   where the CPU has AVX512-BF16, else >= 0.9 x
Rows without a floor (portable conversion path, bfloat16 with a forced backend) are for reference.

bench_roofline has no floor: its tables show the measured FMA roof per thread count, and each model's
training step (ms, GFLOP per step counted from the model's products, GFLOP/s) as a share of the float32
roof at the step's thread count (and, for mixed_bfloat16, of the bfloat16 roofs the CPU has: vdpbf16ps, and
AMX's tdpbf16ps where the process may use the tiles).
"""

import json
import statistics
import sys
from collections import defaultdict

CONVERT_FLOOR = 0.9
MATMUL_FLOOR = 0.9
BF16_FLOOR = 1.5


def base_name(run_name):
    """'narrow/float16/avx512/65536/min_time:0.100/repeats:7/real_time' -> ['narrow','float16','avx512','65536']"""
    return [p for p in run_name.split("/") if ":" not in p and p != "real_time"]


def load(path):
    with open(path) as f:
        doc = json.load(f)
    samples = defaultdict(list)
    for run in doc["benchmarks"]:
        if run.get("run_type", "iteration") != "iteration" or run.get("error_occurred"):
            continue
        samples[tuple(base_name(run.get("run_name", run["name"])))].append(run)
    return doc.get("context", {}), samples


def summary(runs, key):
    values = [r[key] for r in runs]
    return statistics.median(values), max(values)


def fmt_ratio(x):
    return f"{x:.3f}"


def verdict(ratio, floor):
    if floor is None:
        return "(reference)"
    return "ok" if ratio >= floor else f"**below {floor}x**"


def print_context(path, ctx):
    keys = ["date", "host_name", "num_cpus", "mhz_per_cpu", "load_avg", "library_build_type"]
    keys += sorted(k for k in ctx if k.startswith("mixprec_"))
    parts = [f"{k}={ctx[k]}" for k in keys if k in ctx]
    print(f"<!-- {path}: " + ", ".join(str(p) for p in parts) + " -->")


BYTES_PER_ELEMENT = {"float32": 4, "float16": 2, "bfloat16": 2, "cbfloat16": 2, "float8_e4m3": 1, "float8_e5m2": 1}


def convert_table(samples):
    """Floor on the time ratio: copying the float32 array vs converting it (element rates). The bytes
    ratio (read + written per second) is shown too; it caps widening near 0.75 wherever stores bound
    both, since a widen writes as much as the copy but reads less."""
    copies = {}
    for key, runs in samples.items():
        if key[0] == "copy":
            copies[int(key[2])] = summary(runs, "bytes_per_second")
    rows = []
    for key, runs in samples.items():
        if key[0] not in ("narrow", "narrow_stochastic", "widen", "unscale", "mx_round"):
            continue
        op, dtype, path, n = key[0], key[1], key[2], int(key[3])
        per_element = 8 if op == "mx_round" else 4 + BYTES_PER_ELEMENT[dtype]
        med, best = summary(runs, "bytes_per_second")
        cmed, cbest = copies.get(n, (float("nan"), float("nan")))
        rate, copy_rate = med / per_element, cmed / 8
        rows.append((n, op, dtype, path, rate, copy_rate, rate / copy_rate, (best / per_element) / (cbest / 8),
                     med, cmed, med / cmed))
    order = {"float16": 0, "bfloat16": 1, "cbfloat16": 2, "float8_e4m3": 3, "float8_e5m2": 4}
    rows.sort(key=lambda r: (-r[0], r[3] == "portable", order.get(r[2], 9), r[1]))

    print("| op | format | path | elements | Gelem/s | copy Gelem/s | time ratio | best time ratio | "
          "GB/s moved | copy GB/s | bytes ratio | floor 0.9x (time) |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    below = []
    for n, op, dtype, path, rate, crate, ratio, bratio, med, cmed, bytes_ratio in rows:
        floor = None if path == "portable" or op in ("mx_round", "narrow_stochastic") else CONVERT_FLOOR
        v = verdict(ratio, floor)
        if floor is not None and ratio < floor:
            below.append(f"{op} {dtype} ({path}, {n} elements): {ratio:.2f}x copy")
        print(f"| {op} | {dtype} | {path} | {n} | {rate / 1e9:.2f} | {crate / 1e9:.2f} | {fmt_ratio(ratio)} | "
              f"{fmt_ratio(bratio)} | {med / 1e9:.1f} | {cmed / 1e9:.1f} | {fmt_ratio(bytes_ratio)} | {v} |")
    return below


def optim_table(samples):
    """bench_optim: each update's time, the bytes it moves per second against memcpy's, and its time against
    the same update of ordinary state (no floor: the figures say what state near underflow costs)."""
    copy = next((summary(runs, "bytes_per_second")[0] for key, runs in samples.items() if key[0] == "copy"),
                float("nan"))
    rows = {(key[0], key[1]): runs for key, runs in samples.items() if key[0] in ("adam", "sgd_momentum")}
    print("| update | state | µs (median) | GB/s moved | copy GB/s | bytes ratio | time vs ordinary |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for op in ("adam", "sgd_momentum"):
        ordinary = summary(rows[(op, "ordinary")], "real_time")[0] if (op, "ordinary") in rows else float("nan")
        for state in ("ordinary", "dead_tenth", "dead_all"):
            if (op, state) not in rows:
                continue
            t = summary(rows[(op, state)], "real_time")[0]
            rate = summary(rows[(op, state)], "bytes_per_second")[0]
            print(f"| {op} | {state} | {t:.0f} | {rate / 1e9:.1f} | {copy / 1e9:.1f} | {fmt_ratio(rate / copy)} | "
                  f"{fmt_ratio(t / ordinary)} |")


def shape_key(shape):
    m, k, n = (int(x) for x in shape.split("x"))
    return (-(m * k * n),)


def matmul_table(samples, ctx):
    bf16_hw = ctx.get("mixprec_avx512_bf16", "no") == "yes"
    by_shape = defaultdict(dict)
    for key, runs in samples.items():
        if key[0] == "sgemm":
            variant, shape = "sgemm", key[2]
        elif key[0] == "matmul" and key[1] == "bfloat16":
            variant, shape = f"bfloat16/{key[2]}", key[3]
        elif key[0] == "matmul":
            variant, shape = key[1], key[2]
        else:
            continue
        by_shape[shape][variant] = summary(runs, "GFLOPS")

    variants = ["float32", "float16", "bfloat16/automatic", "bfloat16/sgemm", "bfloat16/onednn"]
    floors = {"float32": MATMUL_FLOOR, "float16": MATMUL_FLOOR,
              "bfloat16/automatic": BF16_FLOOR if bf16_hw else MATMUL_FLOOR}
    print("| shape MxKxN | matmul | GFLOP/s | sgemm GFLOP/s | ratio vs sgemm | best GFLOP/s | best sgemm | best ratio "
          "| floor |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---|")
    below = []
    shapes = sorted(by_shape, key=shape_key)
    for shape in shapes:
        peers = by_shape[shape]
        if "sgemm" not in peers:
            continue
        smed, sbest = peers["sgemm"]
        for v in variants:
            if v not in peers:
                continue
            med, best = peers[v]
            floor = floors.get(v)
            ratio = med / smed
            if floor is not None and ratio < floor:
                below.append(f"matmul {v} {shape}: {ratio:.2f}x sgemm (floor {floor}x)")
            print(f"| {shape} | {v} | {med:.1f} | {smed:.1f} | {fmt_ratio(ratio)} | {best:.1f} | {sbest:.1f} | "
                  f"{fmt_ratio(best / sbest)} | {verdict(ratio, floor)} |")

    if any("bfloat16/onednn" in by_shape[s] and "bfloat16/sgemm" in by_shape[s] for s in shapes):
        print()
        print("bfloat16, oneDNN backend against the sgemm backend (widen + OpenBLAS + narrow), same run:")
        print()
        print("| shape MxKxN | onednn GFLOP/s | sgemm-backend GFLOP/s | ratio | best ratio |")
        print("|---|---:|---:|---:|---:|")
        for shape in shapes:
            p = by_shape[shape]
            if "bfloat16/onednn" in p and "bfloat16/sgemm" in p:
                (om, ob), (sm, sb) = p["bfloat16/onednn"], p["bfloat16/sgemm"]
                print(f"| {shape} | {om:.1f} | {sm:.1f} | {fmt_ratio(om / sm)} | {fmt_ratio(ob / sb)} |")
    return below


LAYER_FLOOR = 1.25
STEP_FLOOR = 1.03


def step_table(samples):
    """A whole training step with the LossScaleOptimizer against the bare inner optimizer: the two
    separate benchmarks, and the paired one (both steps timed in every iteration; median of the per-pair
    ratios, then the median over repetitions), on which the floor is judged when it is present."""
    times = {k[1]: statistics.median(r["real_time"] for r in runs) for k, runs in samples.items() if k[0] == "step"}
    pairs = [r for k, runs in samples.items() if k[0] == "step_pair" for r in runs]
    if "adam" not in times or "loss_scale_adam" not in times:
        return []
    print("| step | measured | time (us) | bare Adam (us) | ratio | floor |")
    print("|---|---|---:|---:|---:|---|")
    name = "MLP 784-512-512-10, batch 128, mixed_float16, LossScaleOptimizer(Adam)"
    ratio = times["loss_scale_adam"] / times["adam"]
    judged = ratio
    verdict_separate = "(reference)" if pairs else ("ok" if ratio <= STEP_FLOOR else "**above**")
    print(f"| {name} | separately | {times['loss_scale_adam']:.0f} | {times['adam']:.0f} | {ratio:.3f} | "
          f"{verdict_separate} |")
    if pairs:
        judged = statistics.median(r["ratio"] for r in pairs)
        scaled = statistics.median(r["scaled_us"] for r in pairs)
        bare = statistics.median(r["bare_us"] for r in pairs)
        print(f"| {name} | in pairs | {scaled:.0f} | {bare:.0f} | {judged:.3f} | "
              f"{'ok' if judged <= STEP_FLOOR else '**above**'} |")
    return [] if judged <= STEP_FLOOR else [f"LossScaleOptimizer step overhead {judged:.3f}x (floor {STEP_FLOOR}x)"]


def layers_table(samples):
    """Forward + backward of a layer against the GEMMs it is made of: float32 and float16 against the
    sgemm peer, bfloat16 against the oneDNN peer (sgemm where that is absent). Lower is better."""
    peers = {(k[1], k[2]): statistics.median(r["real_time"] for r in runs) for k, runs in samples.items()
             if k[0] == "peer"}
    print("| layer | dtype | time (us) | peer | peer time (us) | ratio | floor |")
    print("|---|---|---:|---|---:|---:|---|")
    below = []
    for key, runs in sorted(samples.items()):
        if key[0] != "layer":
            continue
        layer, dtype = key[1], key[2]
        peer = "onednn" if dtype == "bfloat16" and (layer, "onednn") in peers else "sgemm"
        own = [name for (of, name) in peers if of == layer]
        if (layer, peer) not in peers and len(own) == 1:  # a layer with a peer of its own (a copy, the ops)
            peer = own[0]
        t = statistics.median(r["real_time"] for r in runs)
        p = peers.get((layer, peer), float("nan"))
        ratio = t / p
        ok = ratio <= LAYER_FLOOR
        if not ok:
            below.append(f"{layer} {dtype}: {ratio:.2f}x its GEMMs (floor {LAYER_FLOOR}x)")
        print(f"| {layer} | {dtype} | {t:.0f} | {peer} | {p:.0f} | {ratio:.3f} | {'ok' if ok else '**above**'} |")
    return below


TIME_UNIT_MS = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}
MODEL_ORDER = {"mlp": 0, "cnn": 1, "vit": 2}
PRECISION_ORDER = {"float32": 0, "mixed_float16": 1, "mixed_bfloat16": 2}


def roof_table(samples):
    """The roof benchmarks: median and best of their repetitions, and the figure measured at start (best of
    five 50 ms runs), which the training steps are divided by."""
    print("| roof | instructions | threads | GFLOP/s | best GFLOP/s | at start (used for shares) |")
    print("|---|---|---:|---:|---:|---:|")
    rows = sorted((k for k in samples if k[0] == "roof"), key=lambda k: (k[1], int(k[3])))
    for key in rows:
        runs = samples[key]
        med, best = summary(runs, "GFLOP/s")
        at_start = runs[0].get("at_start_GFLOP/s", float("nan"))
        print(f"| {key[1]} | {key[2]} | {key[3]} | {med:.1f} | {best:.1f} | {at_start:.1f} |")


def roofline_table(samples):
    """Each model's training step, and the libraries' ceiling of the float32 steps (their products alone, each on
    the fastest kernel found): median time and GFLOP/s over the repetitions, and the median GFLOP/s as a share
    of the roof measured at start at the same thread count, and of the roof measured around each repetition."""
    keys = sorted((k for k in samples if k[0] in ("train_step", "ceiling")),
                  key=lambda k: (MODEL_ORDER.get(k[1], 9), k[1], PRECISION_ORDER.get(k[2], 9), k[2], k[0] == "ceiling"))
    bf16 = any("bf16_roof_GFLOP/s" in r for k in keys for r in samples[k])
    amx = any("amx_roof_GFLOP/s" in r for k in keys for r in samples[k])
    head = ("| model | precision | threads | ms per step | GFLOP/step | GFLOP/s | roof GFLOP/s | share of roof | "
            "share of the roof around it |")
    rule = "|---|---|---:|---:|---:|---:|---:|---:|---:|"
    if bf16:
        head += " bf16 roof GFLOP/s | share of bf16 roof |"
        rule += "---:|---:|"
    if amx:
        head += " AMX roof GFLOP/s | share of AMX roof |"
        rule += "---:|---:|"
    print(head + " skipped steps |")
    print(rule + "---:|")
    flagged = []
    for key in keys:
        runs = samples[key]
        ms = statistics.median(r["real_time"] * TIME_UNIT_MS[r.get("time_unit", "ns")] for r in runs)
        gflops = statistics.median(r["GFLOP/s"] for r in runs)
        roof = runs[0].get("roof_GFLOP/s", float("nan"))
        around = statistics.median(r.get("roof_around_share", float("nan")) for r in runs)
        skipped = int(sum(r.get("skipped_steps", 0) for r in runs))
        precision = key[2] + (", libraries' ceiling" if key[0] == "ceiling" else "")
        per_step = runs[0].get("GFLOP/step", gflops * ms * 1e-3)
        line = (f"| {key[1]} | {precision} | {int(runs[0].get('threads', 0))} | {ms:.2f} | {per_step:.3f} | "
                f"{gflops:.1f} | {roof:.1f} | {gflops / roof:.3f} | {around:.3f} |")
        if bf16:
            broof = runs[0].get("bf16_roof_GFLOP/s")
            line += f" {broof:.1f} | {gflops / broof:.3f} |" if broof else " | |"
        if amx:
            aroof = runs[0].get("amx_roof_GFLOP/s")
            line += f" {aroof:.1f} | {gflops / aroof:.3f} |" if aroof else " | |"
        print(line + f" {skipped if skipped == 0 else f'**{skipped}**'} |")
        if skipped:
            flagged.append(f"{key[1]} {key[2]}: {skipped} skipped steps while timed (a skipped step does less work)")
    if flagged:
        print()
        for f in flagged:
            print(f"- {f}")


def main(paths):
    below = []
    for path in paths:
        ctx, samples = load(path)
        print_context(path, ctx)
        kinds = {k[0] for k in samples}
        if "adam" in kinds or "sgd_momentum" in kinds:
            print("\n### Optimizer updates (GB/s = 1e9 bytes read + written per second)\n")
            optim_table(samples)
        elif "copy" in kinds:
            print("\n### Conversions (GB/s = 1e9 bytes read + written per second)\n")
            below += convert_table(samples)
        if "step" in kinds or "step_pair" in kinds:
            print("\n### Loss scaling overhead on a whole training step (time ratio, lower is better)\n")
            below += step_table(samples)
        if "layer" in kinds:
            print("\n### Layers, forward + backward, against their GEMMs (time ratio, lower is better)\n")
            below += layers_table(samples)
        if "sgemm" in kinds:
            print("\n### Matmul (GFLOP/s = 2*M*N*K / time)\n")
            below += matmul_table(samples, ctx)
        if "roof" in kinds:
            print("\n### The CPU's FMA roof (GFLOP/s = 2 x multiply-adds per second)\n")
            roof_table(samples)
        if "train_step" in kinds or "ceiling" in kinds:
            print("\n### Training steps against the roof (batch 128; FLOPs of products and convolutions only)\n")
            roofline_table(samples)
        print()
    print("### Below floor (ratio of medians)\n")
    for b in below or ["none"]:
        print(f"- {b}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
