#!/usr/bin/env python3
"""Drive one library's loss-scale optimizer through every case of optimizer_cases.cases() and write
tests/golden/loss_scale_optimizer/<anchor>.jsonl (format: optimizer_cases.py). Run from the repository
root in a virtual environment that has the library (tests/conformance/run.sh makes them):

    python tests/conformance/record_optimizer.py torch
"""

import argparse
import importlib
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import optimizer_cases  # noqa: E402
from optimizer_cases import hex32, hexes  # noqa: E402

ANCHORS = ["torch"]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("anchor", choices=ANCHORS)
    parser.add_argument("--out")
    args = parser.parse_args()
    anchor = importlib.import_module("anchors.%s_optimizer" % args.anchor)
    out = args.out or "tests/golden/loss_scale_optimizer/%s.jsonl" % args.anchor
    os.makedirs(os.path.dirname(out), exist_ok=True)
    steps = 0
    with open(out, "w") as f:
        f.write(json.dumps(dict(golden="loss_scale_optimizer", **anchor.header())) + "\n")
        for case in optimizer_cases.cases():
            f.write(json.dumps(dict(case=case.name, preset=anchor.PRESET, optimizer=case.optimizer,
                                    loss_scale=case.loss_scale, initial=[hexes(w) for w in case.initial])) + "\n")
            d = anchor.make(case)
            for i in range(len(case.unscaled)):
                grads = optimizer_cases.scaled_gradients(case, i, d.scale())
                applied = d.step(grads)
                r = d.record()
                line = dict(step=i + 1, micro_batches=[[hexes(g) for g in mb] for mb in grads], applied=applied,
                            iterations=r["iterations"], scale=hex32(r["scale"]),
                            growth_counter=r["growth_counter"], weights=[hexes(w) for w in r["weights"]],
                            slots={k: [hexes(w) for w in v] for k, v in r["slots"].items()})
                f.write(json.dumps(line) + "\n")
                steps += 1
    h = anchor.header()
    print("%s %s: %d cases, %d steps -> %s" % (h["library"], h["version"], len(optimizer_cases.cases()), steps, out))


if __name__ == "__main__":
    main()
