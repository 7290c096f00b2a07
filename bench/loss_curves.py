#!/usr/bin/env python3
"""Draws the training loss of several mixprec-train runs on one plot (gnuplot), e.g. one process against
two ranks:

    bench/loss_curves.py OUT.png "np=1" np1.jsonl "np=2" np2.jsonl [LABEL LOG ...]

Each LOG is a --log JSON-lines file; its step records give the loss, smoothed over 20 steps. Runs 2, 4, ...
are drawn dashed over runs 1, 3, ..., so that the pairs compared can be told apart where they coincide."""
import json
import pathlib
import subprocess
import sys
import tempfile

SMOOTH = 20


def losses(path):
    steps, values = [], []
    for line in open(path):
        record = json.loads(line)
        if "step" in record and record.get("loss") is not None:
            steps.append(record["step"])
            values.append(record["loss"])
    return steps, values


def main():
    if len(sys.argv) < 4 or len(sys.argv) % 2 != 0:
        sys.exit(__doc__)
    out = pathlib.Path(sys.argv[1])
    runs = list(zip(sys.argv[2::2], sys.argv[3::2]))
    with tempfile.TemporaryDirectory() as tmp:
        plots = []
        for i, (label, log) in enumerate(runs):
            steps, values = losses(log)
            data = pathlib.Path(tmp) / f"{i}.dat"
            with open(data, "w") as f:
                for k in range(len(steps)):
                    window = values[max(0, k - SMOOTH + 1) : k + 1]
                    f.write(f"{steps[k]} {values[k]} {sum(window) / len(window)}\n")
            # every other run dashed and thinner, so that curves that coincide both stay visible
            style = "lw 4" if i % 2 == 0 else "lw 1.5 dt 2 lc rgb 'black'"
            plots.append(f"'{data}' using 1:3 with lines {style} title '{label}'")
        terminal = "svg size 900,500" if out.suffix == ".svg" else "pngcairo size 900,500"
        script = "\n".join([
            f"set terminal {terminal}",
            f"set output '{out}'",
            "set xlabel 'step'",
            f"set ylabel 'training loss (mean of {SMOOTH} steps)'",
            "set key top right",
            "set grid",
            "plot " + ", ".join(plots),
        ])
        subprocess.run(["gnuplot"], input=script, text=True, check=True)
    print(f"Loss curves written to {out}")


if __name__ == "__main__":
    main()
