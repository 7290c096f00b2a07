#!/usr/bin/python3
"""mixprec against PyTorch on Fashion-MNIST: training throughput and peak memory, in one invocation.

For each model and mixprec precision, runs the mixprec trainer and then its PyTorch peer (torch_fashion.py:
bfloat16 autocast for mixed_bfloat16, float32 for the others, since PyTorch has no float16 training on
CPU), interleaved and repeated, so that a burst of load elsewhere on the machine spreads over both sides.
Prints a Markdown table on stdout; progress and each run's figures go to stderr.

    /usr/bin/python3 bench/compare_torch.py --trainer build/examples/mixprec-train --repeats 3

Figures: mixprec's samples_per_second is the trainer's own (training throughput over its steps,
evaluation excluded); PyTorch's is measured over --steps steps after --warmup untimed ones, at each thread
count of --torch-threads, and the best thread count is reported. Each side is summarized over the repeats
by --statistic (median by default); peak RSS is the largest seen. With --epochs, both sides train that
many full epochs instead and the test accuracies are reported too.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TORCH_SCRIPT = os.path.join(HERE, "torch_fashion.py")
DEFAULT_DATA = "/usr/share/datasets/fashion-mnist"
PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16", "mixed_cbfloat16")
# PyTorch 1.13 has no float16 training on CPU: float16 and cbfloat16 runs are held against its float32 run.
PEER = {"float32": "float32", "mixed_float16": "float32", "mixed_bfloat16": "bf16", "mixed_cbfloat16": "float32"}
PEER_NAME = {"float32": "float32", "bf16": "bf16 autocast"}


def log(message):
    print(message, file=sys.stderr, flush=True)


def find_trainer(path):
    """The trainer as given, else relative to the repository root; exits with advice if absent."""
    for candidate in (path, os.path.join(os.path.dirname(HERE), path)):
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return os.path.abspath(candidate)
    sys.exit(f"compare_torch: no trainer at {path}; build it first "
             "(cmake --build build --target mixprec-train) or pass --trainer PATH")


def last_json_line(path):
    with open(path) as f:
        lines = [line for line in f if line.strip()]
    if not lines:
        raise ValueError(f"{path} is empty")
    return json.loads(lines[-1])


def run_mixprec(args, model, precision):
    """One trainer run; returns its final log object, or None when it fails."""
    with tempfile.TemporaryDirectory(prefix="compare-torch-") as tmp:
        log_file = os.path.join(tmp, "log.jsonl")
        max_steps = 0 if args.epochs else args.warmup + args.steps
        cmd = [args.trainer, "--model", model, "--precision", precision, "--batch-size", str(args.batch_size),
               "--max-steps", str(max_steps), "--threads", str(args.mixprec_threads), "--log", log_file,
               "--epochs", str(args.epochs or 1)]
        if args.data != DEFAULT_DATA:
            cmd += ["--data", args.data]
        proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if proc.returncode != 0:
            log(f"  mixprec {model} {precision} failed (exit status {proc.returncode}): {proc.stderr.strip()[-500:]}")
            return None
        try:
            end = last_json_line(log_file)
        except (OSError, ValueError) as e:
            log(f"  mixprec {model} {precision}: cannot read its log: {e}")
            return None
        if end.get("event") != "end":
            log(f"  mixprec {model} {precision}: the log's last line is not the end event: {end}")
            return None
        return end


def run_torch(args, model, mode):
    """torch_fashion.py for one model and mode at every thread count; a list of result dicts."""
    cmd = [args.python, TORCH_SCRIPT, "--models", model, "--modes", mode, "--threads", args.torch_threads,
           "--batch-size", str(args.batch_size), "--steps", str(args.steps), "--warmup", str(args.warmup),
           "--epochs", str(args.epochs), "--data", args.data]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        log(f"  torch {model} {mode} failed (exit status {proc.returncode}): {proc.stderr.strip()[-500:]}")
        return []
    return [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]


def summarize(values, statistic):
    values = [v for v in values if v is not None]
    if not values:
        return None
    return max(values) if statistic == "best" else statistics.median(values)


def fmt(value, pattern="{:,.0f}"):
    return "n/a" if value is None else pattern.format(value)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trainer", default="build/examples/mixprec-train", help="the mixprec-train binary")
    p.add_argument("--models", default="mlp,cnn,vit")
    p.add_argument("--precisions", default="float32,mixed_float16,mixed_bfloat16",
                   help="comma-separated mixprec precisions: " + ", ".join(PRECISIONS))
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--steps", type=int, default=200, help="timed steps (PyTorch; mixprec runs warmup + steps)")
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--epochs", type=int, default=0, help="train full epochs and report test accuracy too")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--statistic", choices=("median", "best"), default="median")
    p.add_argument("--mixprec-threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--torch-threads", default="1,2", help="thread counts tried for PyTorch (best reported)")
    p.add_argument("--python", default="/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable,
                   help="interpreter with PyTorch (Debian's python3-torch)")
    p.add_argument("--data", default=DEFAULT_DATA)
    p.add_argument("--json", help="also write every run's figures here")
    args = p.parse_args()
    models = [m for m in args.models.split(",") if m]
    precisions = [x for x in args.precisions.split(",") if x]
    bad = [x for x in precisions if x not in PRECISIONS]
    if bad:
        p.error(f"unknown precision {bad[0]!r}; expected some of {', '.join(PRECISIONS)}")
    if args.repeats < 1 or args.batch_size < 1 or args.steps < 1 or args.warmup < 0 or args.epochs < 0:
        p.error("--repeats, --batch-size and --steps must be ≥ 1; --warmup and --epochs ≥ 0")
    args.trainer = find_trainer(args.trainer)

    mixprec_runs = {}  # (model, precision) -> [end objects]
    torch_runs = {}    # (model, mode) -> [result dicts]
    for rep in range(args.repeats):
        for model in models:
            peers_done = set()
            for precision in precisions:
                log(f"[{rep + 1}/{args.repeats}] mixprec {model} {precision}")
                end = run_mixprec(args, model, precision)
                if end is not None:
                    mixprec_runs.setdefault((model, precision), []).append(end)
                    log(f"  {fmt(end.get('samples_per_second'))} samples/s, "
                        f"{fmt(end.get('peak_rss_mib'))} MiB, {end.get('skipped_steps')} skipped")
                mode = PEER[precision]
                if mode in peers_done:
                    continue
                peers_done.add(mode)
                log(f"[{rep + 1}/{args.repeats}] torch {model} {mode}")
                results = run_torch(args, model, mode)
                torch_runs.setdefault((model, mode), []).extend(results)
                for r in results:
                    log(f"  threads {r['threads']}: {fmt(r['samples_per_second'])} samples/s, "
                        f"{fmt(r['peak_rss_mib'])} MiB")

    if args.json:
        with open(args.json, "w") as f:
            json.dump({"mixprec": {f"{m} {x}": v for (m, x), v in mixprec_runs.items()},
                       "torch": {f"{m} {x}": v for (m, x), v in torch_runs.items()}}, f, indent=1)

    accuracy = args.epochs > 0
    print(f"Fashion-MNIST, batch {args.batch_size}, "
          + (f"{args.epochs} epoch(s)" if accuracy else f"{args.steps} timed steps after {args.warmup} warm-up")
          + f", {args.statistic} of {args.repeats} interleaved repeats; mixprec on {args.mixprec_threads} thread(s), "
          f"PyTorch at its best of {args.torch_threads} thread(s).\n")
    head = ["model", "mixprec precision", "mixprec samples/s", "PyTorch peer", "PyTorch samples/s", "ratio",
            "mixprec peak RSS (MiB)", "PyTorch peak RSS (MiB)"]
    if accuracy:
        head += ["mixprec test acc.", "PyTorch test acc."]
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join("---" if i < 2 or h == "PyTorch peer" else "---:" for i, h in enumerate(head)) + "|")
    for model in models:
        for precision in precisions:
            ours = mixprec_runs.get((model, precision), [])
            ours_sps = summarize([e.get("samples_per_second") for e in ours], args.statistic)
            ours_rss = summarize([e.get("peak_rss_mib") for e in ours], "best")
            mode = PEER[precision]
            theirs = torch_runs.get((model, mode), [])
            by_threads = {}
            for r in theirs:
                by_threads.setdefault(r["threads"], []).append(r)
            best_threads, best_sps = None, None
            for t, runs in sorted(by_threads.items()):
                s = summarize([r["samples_per_second"] for r in runs], args.statistic)
                if s is not None and (best_sps is None or s > best_sps):
                    best_threads, best_sps = t, s
            chosen = by_threads.get(best_threads, [])
            their_rss = summarize([r["peak_rss_mib"] for r in chosen], "best")
            peer = PEER_NAME[mode] + (f", {best_threads} thread{'s' if best_threads != 1 else ''}"
                                      if best_threads else "")
            ratio = ours_sps / best_sps if ours_sps and best_sps else None
            row = [model, precision, fmt(ours_sps), peer, fmt(best_sps), fmt(ratio, "{:.2f}×"), fmt(ours_rss),
                   fmt(their_rss)]
            if accuracy:
                row += [fmt(summarize([e.get("test_accuracy") for e in ours], args.statistic), "{:.2%}"),
                        fmt(summarize([r.get("test_accuracy") for r in chosen], args.statistic), "{:.2%}")]
            print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
