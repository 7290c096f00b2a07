#!/usr/bin/python3
"""mixprec against PyTorch 2.x on Fashion-MNIST: training throughput and peak memory, in one invocation.

For each model and mixprec precision, runs mixprec-train and its PyTorch peers (torch_fashion.py, under the
interpreter of bench/peers.sh's virtual environment), interleaved and repeated, so that a burst of load
elsewhere on the machine spreads over both sides (every second repeat runs PyTorch first). The peers:

    float32          PyTorch float32, eager and torch.compile'd
    mixed_float16    torch.autocast("cpu", dtype=torch.float16) + torch.amp.GradScaler("cpu") (dynamic loss
                     scaling, as mixprec's), eager and compiled
    mixed_bfloat16   torch.autocast("cpu", dtype=torch.bfloat16), eager and compiled
    mixed_cbfloat16  no peer: PyTorch has no cbfloat16 (mixprec's figures only)

    bench/peers.sh                    # once: makes the PyTorch venv, outside the tree
    /usr/bin/python3 bench/compare_torch.py --trainer build/examples/mixprec-train --repeats 3
    /usr/bin/python3 bench/compare_torch.py --load-core ...   # the same with one core kept busy

Figures: both sides are timed over the same --steps steps after --warmup untimed ones: PyTorch's from its
wall clock around them (the warm-up also holds torch.compile's compilation, whose time is reported separately
in the JSON), mixprec's from its log's per-step training time ("seconds": evaluation and logging excluded),
the trainer running --warmup + --steps steps. The trainer's own figure over every step, its first ones
(oneDNN's primitives made and JIT-compiled, buffers first touched) included, is kept in the JSON as
samples_per_second_all_steps. Same data, batch, seed and optimizer (mixprec-train's default: Adam, lr 1e-3).
Each side and thread count is summarized over the repeats by --statistic (median by default); PyTorch is
reported at its best thread count of --torch-threads (eager and compiled each at their own best, with one
inter-op thread), mixprec at its default (every core) or at its best of --mixprec-threads. Peak RSS is the
largest seen at the chosen thread count; PyTorch's is that of its eager run. With --epochs, both sides
train that many full epochs instead and the test accuracies are reported too.

Prints a header (PyTorch version, CPU and its flags, load, date, mixprec commit, threads) and a Markdown
table on stdout; progress and each run's figures go to stderr; --json OUT keeps every run's figures.
With --load-core, a busy loop (a Python process pinned to the last CPU) runs for the whole measurement and
the header says so; it is killed at the end, on Ctrl-C and on errors.
"""

import argparse
import contextlib
import datetime
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from torch_fashion import CPU_FLAGS, cpu_info  # standard library only; this script does not need PyTorch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TORCH_SCRIPT = os.path.join(HERE, "torch_fashion.py")
DEFAULT_DATA = "/usr/share/datasets/fashion-mnist"
FASHION_TRAIN = 60000  # training examples in Fashion-MNIST: the first epoch's full batches
DEFAULT_VENV = os.environ.get("MIXPREC_BENCH_VENV") or os.path.join(os.path.expanduser("~"), "venvs",
                                                                    "mixprec-bench")
PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16", "mixed_cbfloat16")
PEER = {"float32": "float32", "mixed_float16": "fp16", "mixed_bfloat16": "bf16", "mixed_cbfloat16": None}
PEER_NAME = {"float32": "float32", "fp16": "fp16 autocast + GradScaler", "bf16": "bf16 autocast"}
BUSY_LOOP = """import ctypes, os
try:
    ctypes.CDLL(None).prctl(1, 9)  # PR_SET_PDEATHSIG = SIGKILL: this loop dies with the script
except Exception:
    pass
os.sched_setaffinity(0, {%d})
while True:
    pass
"""


def log(message):
    print(message, file=sys.stderr, flush=True)


def find_trainer(path):
    """The trainer as given, else relative to the repository root; exits with advice if absent."""
    for candidate in (path, os.path.join(ROOT, path)):
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return os.path.abspath(candidate)
    sys.exit(f"compare_torch: no trainer at {path}; build it first "
             "(cmake --build build --target mixprec-train) or pass --trainer PATH")


def check_python(python):
    """The torch version PYTHON has (from its metadata: quick); exits with advice if it cannot be the peer."""
    advice = "make the PyTorch peer's environment with bench/peers.sh, or pass --python PATH"
    if not (os.path.isfile(python) and os.access(python, os.X_OK)):
        sys.exit(f"compare_torch: no Python at {python}; {advice}")
    probe = "from importlib.metadata import version; print(version('torch')); print(version('numpy'))"
    proc = subprocess.run([python, "-c", probe], capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"compare_torch: {python} lacks PyTorch or NumPy ({proc.stderr.strip().splitlines()[-1]}); {advice}")
    version = proc.stdout.split()[0]
    if int(version.split(".")[0]) < 2:
        sys.exit(f"compare_torch: {python} has PyTorch {version}, without float16 training or torch.compile on "
                 f"CPU; {advice}")
    return version


def git_commit():
    proc = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return proc.stdout.strip() if proc.returncode == 0 else "unknown"


@contextlib.contextmanager
def busy_core(enabled):
    """With `enabled`, a process spinning on the last CPU this script may use, until the block is left;
    yields that CPU's number (None when not enabled)."""
    if not enabled:
        yield None
        return
    cpu = max(os.sched_getaffinity(0))
    proc = subprocess.Popen([sys.executable, "-c", BUSY_LOOP % cpu])
    try:
        time.sleep(0.5)
        if proc.poll() is not None:
            sys.exit(f"compare_torch: the busy loop for --load-core exited at once (status {proc.returncode})")
        log(f"busy loop on CPU {cpu}: process {proc.pid}")
        yield cpu
    finally:
        proc.kill()
        proc.wait()


def json_lines(path):
    with open(path) as f:
        records = [json.loads(line) for line in f if line.strip()]
    if not records:
        raise ValueError(f"{path} is empty")
    return records


def timed_samples_per_second(records, warmup, steps, batch_size):
    """mixprec's samples/s over the steps after the first `warmup` (full batches of `batch_size`), from the
    log's per-step training time, or None when the log does not have them all."""
    seconds = [r.get("seconds") for r in records if "step" in r and r["step"] > warmup]
    if len(seconds) != steps or any(not isinstance(t, (int, float)) or t <= 0 for t in seconds):
        return None
    return steps * batch_size / sum(seconds)


def run_mixprec(args, model, precision, threads):
    """One trainer run; returns its final log object (plus "threads"), or None when it fails."""
    with tempfile.TemporaryDirectory(prefix="compare-torch-") as tmp:
        log_file = os.path.join(tmp, "log.jsonl")
        # Without --epochs, --max-steps stops the run; the epoch count is only a bound (the trainer's largest).
        cmd = [args.trainer, "--model", model, "--precision", precision, "--batch-size", str(args.batch_size),
               "--max-steps", str(0 if args.epochs else args.warmup + args.steps), "--log", log_file,
               "--epochs", str(args.epochs or 100000), "--quiet"]
        if threads:
            cmd += ["--threads", str(threads)]
        if args.data != DEFAULT_DATA:
            cmd += ["--data", args.data]
        proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        name = f"mixprec {model} {precision} threads={threads or 'default'}"
        if proc.returncode != 0:
            log(f"  {name} failed (exit status {proc.returncode}): {proc.stderr.strip()[-500:]}")
            return None
        try:
            records = json_lines(log_file)
        except (OSError, ValueError) as e:
            log(f"  {name}: cannot read its log: {e}")
            return None
        end = records[-1]
        if end.get("event") != "end":
            log(f"  {name}: the log's last line is not the end event: {end}")
            return None
        result = dict(end, model=model, precision=precision, threads=threads,
                      samples_per_second_all_steps=end.get("samples_per_second"))
        if not args.epochs:  # the steps PyTorch times: after the warm-up, in one epoch (full batches)
            if args.warmup + args.steps > FASHION_TRAIN // args.batch_size:
                log(f"  {name}: --warmup + --steps runs past the first epoch; its figure is over every step")
            else:
                timed = timed_samples_per_second(records, args.warmup, args.steps, args.batch_size)
                if timed is None:
                    log(f"  {name}: its log lacks the timed steps' times; its figure is over every step")
                result["samples_per_second"] = timed or result["samples_per_second"]
        return result


def run_torch(args, model, modes):
    """torch_fashion.py for one model, its modes and every thread count; a list of result dicts (those that
    succeeded: it runs the others to the end when one fails)."""
    cmd = [args.python, TORCH_SCRIPT, "--models", model, "--modes", ",".join(modes), "--threads",
           args.torch_threads, "--batch-size", str(args.batch_size), "--steps", str(args.steps), "--warmup",
           str(args.warmup), "--epochs", str(args.epochs), "--data", args.data]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        log(f"  torch {model} {','.join(modes)}: exit status {proc.returncode}: {proc.stderr.strip()[-800:]}")
    return [json.loads(line) for line in proc.stdout.splitlines() if line.strip().startswith("{")]


def summarize(values, statistic):
    values = [v for v in values if v is not None]
    if not values:
        return None
    return max(values) if statistic == "best" else statistics.median(values)


def best_threads(runs, statistic):
    """(thread count, summarized samples/s, that count's runs) for the fastest thread count of `runs`."""
    by_threads = {}
    for r in runs:
        by_threads.setdefault(r["threads"], []).append(r)
    best = (None, None, [])
    for t, group in sorted(by_threads.items()):
        sps = summarize([r.get("samples_per_second") for r in group], statistic)
        if sps is not None and (best[1] is None or sps > best[1]):
            best = (t, sps, group)
    return best


def fmt(value, pattern="{:,.0f}"):
    return "n/a" if value is None else pattern.format(value)


def parse_threads(text, minimum, what):
    try:
        counts = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        counts = []
    if not counts or min(counts) < minimum:
        raise SystemExit(f"compare_torch: {what} wants comma-separated integers ≥ {minimum}, not {text!r}")
    return counts


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__.split("\n", 2)[2],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trainer", default="build/examples/mixprec-train", help="the mixprec-train binary")
    p.add_argument("--models", default="mlp,cnn,vit")
    p.add_argument("--precisions", default="float32,mixed_float16,mixed_bfloat16,mixed_cbfloat16",
                   help="comma-separated mixprec precisions: " + ", ".join(PRECISIONS))
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--steps", type=int, default=200, help="timed steps (PyTorch; mixprec runs warmup + steps)")
    p.add_argument("--warmup", type=int, default=20, help="untimed steps first (PyTorch compiles in them)")
    p.add_argument("--epochs", type=int, default=0, help="train full epochs and report test accuracy too")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--statistic", choices=("median", "best"), default="median")
    p.add_argument("--mixprec-threads", default="0",
                   help="thread counts tried for mixprec, best reported (0: the trainer's default, every core)")
    p.add_argument("--torch-threads", default="1,2", help="thread counts tried for PyTorch (best reported)")
    p.add_argument("--python", default=os.path.join(DEFAULT_VENV, "bin", "python"),
                   help="interpreter with PyTorch 2.x (default: bench/peers.sh's venv, $MIXPREC_BENCH_VENV or "
                        "~/venvs/mixprec-bench)")
    p.add_argument("--load-core", action="store_true",
                   help="keep the last CPU busy with another process (a busy loop) during the whole measurement")
    p.add_argument("--data", default=DEFAULT_DATA)
    p.add_argument("--json", metavar="OUT", help="also write every run's figures here")
    args = p.parse_args()
    models = [m for m in args.models.split(",") if m]
    precisions = [x for x in args.precisions.split(",") if x]
    bad = [x for x in precisions if x not in PRECISIONS]
    if bad:
        p.error(f"unknown precision {bad[0]!r}; expected some of {', '.join(PRECISIONS)}")
    if not models or not precisions:
        p.error("--models and --precisions need at least one item each")
    if args.repeats < 1 or args.batch_size < 1 or args.steps < 1 or args.warmup < 1 or args.epochs < 0:
        p.error("--repeats, --batch-size, --steps and --warmup must be ≥ 1 (torch.compile compiles during the "
                "warm-up); --epochs ≥ 0")
    mixprec_threads = parse_threads(args.mixprec_threads, 0, "--mixprec-threads")
    parse_threads(args.torch_threads, 1, "--torch-threads")
    args.trainer = find_trainer(args.trainer)
    args.python = os.path.abspath(os.path.expanduser(args.python))
    torch_version = check_python(args.python)
    if not os.path.isdir(args.data):
        sys.exit(f"compare_torch: {args.data} not found; install it with: sudo apt-get install "
                 "dataset-fashion-mnist, or pass --data DIR")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # leave through the `finally`s: the busy loop ends

    started = datetime.datetime.now().astimezone()
    mixprec_runs, torch_runs = [], []
    with busy_core(args.load_core) as busy_cpu:
        for rep in range(args.repeats):
            for model in models:
                for precision in precisions:
                    mode = PEER[precision]
                    tasks = [("mixprec", t) for t in mixprec_threads]
                    if mode:
                        tasks.append(("torch", [mode, mode + "+compile"]))
                    for side, what in (tasks if rep % 2 == 0 else reversed(tasks)):
                        log(f"[{rep + 1}/{args.repeats}] {side} {model} "
                            + (f"{precision} threads={what or 'default'}" if side == "mixprec" else ",".join(what)))
                        if side == "mixprec":
                            end = run_mixprec(args, model, precision, what)
                            if end is not None:
                                mixprec_runs.append(dict(end, repeat=rep + 1))
                                log(f"  {fmt(end.get('samples_per_second'))} samples/s, "
                                    f"{fmt(end.get('peak_rss_mib'))} MiB, {end.get('skipped_steps')} skipped")
                            continue
                        for r in run_torch(args, model, what):
                            torch_runs.append(dict(r, repeat=rep + 1))
                            compile_note = (f", compiled in {r['compile_seconds']:.1f} s"
                                            if r.get("compile_seconds") is not None else "")
                            log(f"  {r['mode']} threads {r['threads']}: {fmt(r['samples_per_second'])} samples/s, "
                                f"{fmt(r['peak_rss_mib'])} MiB{compile_note}")
    finished = datetime.datetime.now().astimezone()

    cpu = cpu_info()
    versions = sorted({r["torch_version"] for r in torch_runs}) or [torch_version]
    flags = ", ".join(f"{f} {'yes' if cpu['cpu_flags'][f] else 'no'}" for f in CPU_FLAGS)
    mixprec_label = ("its default (every core)" if mixprec_threads == [0]
                     else f"its best of {args.mixprec_threads} thread(s) (0: every core)")
    load = (f"one core busy: CPU {busy_cpu} ran a busy loop in another process throughout" if args.load_core
            else "none added (other users of the machine not controlled)")
    meta = {"date": started.isoformat(timespec="seconds"), "finished": finished.isoformat(timespec="seconds"),
            "mixprec_commit": git_commit(), "trainer": args.trainer, "python": args.python,
            "torch_version": ", ".join(versions), "cpus": len(os.sched_getaffinity(0)), **cpu,
            "load_core": busy_cpu, "mixprec_threads": mixprec_threads, "torch_threads": args.torch_threads,
            "batch_size": args.batch_size, "steps": args.steps, "warmup": args.warmup, "epochs": args.epochs,
            "repeats": args.repeats, "statistic": args.statistic}

    accuracy = args.epochs > 0
    print(f"mixprec vs PyTorch on Fashion-MNIST{' — one core busy with another process' if args.load_core else ''}"
          "\n")
    print(f"- PyTorch {meta['torch_version']} ({args.python}), at its best of {args.torch_threads} thread(s), "
          f"1 inter-op thread; mixprec at {mixprec_label}")
    print(f"- CPU: {cpu['cpu_model'] or 'unknown'}, {meta['cpus']} CPUs; flags: {flags}")
    print(f"- Load: {load}")
    print(f"- Date: {meta['date']}; mixprec commit {meta['mixprec_commit']}")
    print(f"- Batch {args.batch_size}, "
          + (f"{args.epochs} epoch(s)" if accuracy
             else f"{args.steps} timed steps after {args.warmup} warm-up on both sides")
          + f", {args.statistic} of {args.repeats} interleaved repeats; ratios are mixprec's samples/s ÷ PyTorch's"
          " (above 1: mixprec faster), RSS ratio mixprec's peak ÷ PyTorch eager's; (N t): the winning thread count\n")
    head = ["model", "precision", "mixprec samples/s", "torch eager samples/s", "ratio vs eager",
            "torch compile samples/s", "ratio vs compile", "mixprec peak RSS MiB", "torch peak RSS MiB",
            "RSS ratio"]
    if accuracy:
        head += ["mixprec test acc.", "torch eager test acc.", "torch compile test acc."]
    print("| " + " | ".join(head) + " |")
    print("|---|---|" + "---:|" * (len(head) - 2))
    rows = []
    for model in models:
        for precision in precisions:
            mode = PEER[precision]
            m_threads, m_sps, m_runs = best_threads(
                [r for r in mixprec_runs if (r["model"], r["precision"]) == (model, precision)], args.statistic)
            e_threads, e_sps, e_runs = best_threads(
                [r for r in torch_runs if (r["model"], r["mode"]) == (model, mode)], args.statistic)
            c_threads, c_sps, c_runs = best_threads(
                [r for r in torch_runs if (r["model"], r["mode"]) == (model, f"{mode}+compile")], args.statistic)
            m_rss = summarize([r.get("peak_rss_mib") for r in m_runs], "best")
            e_rss = summarize([r.get("peak_rss_mib") for r in e_runs], "best")
            row = {"model": model, "precision": precision, "peer": PEER_NAME.get(mode),
                   "mixprec_threads": m_threads, "mixprec_samples_per_second": m_sps,
                   "torch_eager_threads": e_threads, "torch_eager_samples_per_second": e_sps,
                   "torch_compile_threads": c_threads, "torch_compile_samples_per_second": c_sps,
                   "mixprec_peak_rss_mib": m_rss, "torch_eager_peak_rss_mib": e_rss}
            rows.append(row)

            def speed(sps, threads):
                return fmt(sps) + (f" ({threads} t)" if sps is not None and threads is not None else "")

            def ratio(a, b):
                return fmt(a / b if a and b else None, "{:.2f}×")

            if mode is None:
                cells = ["no peer", "—", "no peer", "—", fmt(m_rss), "no peer", "—"]
            else:
                cells = [speed(e_sps, e_threads), ratio(m_sps, e_sps), speed(c_sps, c_threads), ratio(m_sps, c_sps),
                         fmt(m_rss), fmt(e_rss), ratio(m_rss, e_rss)]
            m_label = None if mixprec_threads == [0] else (m_threads or "all")
            line = [model, precision, speed(m_sps, m_label)] + cells
            if accuracy:
                acc = [summarize([r.get("test_accuracy") for r in runs], args.statistic)
                       for runs in (m_runs, e_runs, c_runs)]
                line += [fmt(acc[0], "{:.2%}")] + (["no peer"] * 2 if mode is None
                                                   else [fmt(a, "{:.2%}") for a in acc[1:]])
            print("| " + " | ".join(line) + " |", flush=True)

    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "summary": rows, "mixprec": mixprec_runs, "torch": torch_runs}, f, indent=1)
        log(f"every run's figures: {args.json}")


if __name__ == "__main__":
    main()
