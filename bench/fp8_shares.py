#!/usr/bin/python3
"""What the FP8 casts of a run lost: per layer and tensor, the share of values that saturated, underflowed
(nonzero before the cast, zero after) and became subnormal, summed over the steps a log has telemetry for.

Reads the JSON-lines logs of `mixprec-train --precision mixed_float8 --telemetry [--telemetry-every N]
--log LOG` (their "<layer>/fp8_input", "<layer>/fp8_kernel" and "<layer>/fp8_output_grad" entries) and
prints one Markdown table with a row per log and tensor. Python 3 standard library only.

    /usr/bin/python3 bench/fp8_shares.py delayed.jsonl current.jsonl
"""

import json
import sys
from collections import Counter, defaultdict

FIELDS = ("count", "zeros", "underflow", "subnormal", "overflow")


def shares(path):
    """Summed counts of every FP8 cast in the log at `path`, by name, and the number of steps counted."""
    sums = defaultdict(Counter)
    steps = 0
    with open(path) as f:
        for line in f:
            record = json.loads(line)
            telemetry = record.get("telemetry")
            if not telemetry:
                continue
            steps += 1
            for name, stats in telemetry.items():
                if "/fp8_" in name:
                    for field in FIELDS:
                        sums[name][field] += stats[field]
    return sums, steps


def percent(part, whole):
    return f"{100.0 * part / whole:.4f}%" if whole else "–"


def main(paths):
    if not paths:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    print("| log | tensor | values | saturated | underflowed | of nonzero | subnormal |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for path in paths:
        sums, steps = shares(path)
        if not sums:
            print(f"{path}: no FP8 casts in its telemetry (run with --precision mixed_float8 --telemetry)",
                  file=sys.stderr)
            continue
        for name, c in sums.items():
            nonzero = c["count"] - c["zeros"]
            print(f"| {path} ({steps} steps) | `{name}` | {c['count']:,} | {percent(c['overflow'], c['count'])} | "
                  f"{percent(c['underflow'], c['count'])} | {percent(c['underflow'], nonzero)} | "
                  f"{percent(c['subnormal'], c['count'])} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
