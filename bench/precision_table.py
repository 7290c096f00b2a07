#!/usr/bin/python3
"""mixprec's built-in models in every precision: test accuracy, throughput, peak memory and skipped steps.

Runs mixprec-train once per model and precision, with the same seed, epochs and batch size, and prints a
Markdown table (progress goes to stderr). The figures come from each run's JSON-lines log (its end line).

    /usr/bin/python3 bench/precision_table.py --trainer build/examples/mixprec-train --epochs 5
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile


def run(args, model, precision):
    with tempfile.TemporaryDirectory(prefix="precision-table-") as tmp:
        log_file = os.path.join(tmp, "log.jsonl")
        cmd = [args.trainer, "--model", model, "--precision", precision, "--epochs", str(args.epochs),
               "--batch-size", str(args.batch_size), "--seed", str(args.seed), "--log", log_file, "--quiet"]
        if args.threads:
            cmd += ["--threads", str(args.threads)]
        print("$ " + " ".join(cmd), file=sys.stderr, flush=True)
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if proc.returncode != 0:
            print(f"  failed (exit status {proc.returncode}): {proc.stderr.strip()[-500:]}", file=sys.stderr)
            return None
        with open(log_file) as f:
            lines = [json.loads(line) for line in f if line.strip()]
        end = lines[-1]
        print(f"  {end}", file=sys.stderr, flush=True)
        return end


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trainer", default="build/examples/mixprec-train")
    p.add_argument("--models", default="mlp,cnn,vit")
    p.add_argument("--precisions", default="float32,mixed_float16,mixed_bfloat16,mixed_cbfloat16")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=0, help="0: the trainer's default (every core)")
    args = p.parse_args()

    print("| model | precision | test accuracy | vs float32 | samples/s | peak RSS | skipped steps | final scale |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for model in args.models.split(","):
        reference = None
        for precision in args.precisions.split(","):
            end = run(args, model, precision)
            if end is None:
                print(f"| {model} | {precision} | failed | | | | | |", flush=True)
                continue
            accuracy = 100 * end["test_accuracy"]
            if precision == "float32":
                reference = accuracy
            delta = "" if reference is None or precision == "float32" else f"{accuracy - reference:+.2f}"
            print(f"| {model} | {precision} | {accuracy:.2f}% | {delta} | {end['samples_per_second']:,.0f} | "
                  f"{end['peak_rss_mib']:.0f} MiB | {end['skipped_steps']} | {end['loss_scale']:g} |", flush=True)


if __name__ == "__main__":
    main()
