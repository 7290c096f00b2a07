#!/usr/bin/env python3
"""Drive one anchor library's own loss scaler through every case of harness.cases() and write the golden
file tests/golden/loss_scale/<anchor>.jsonl. Run from the repository root, in a virtual environment that
has the anchor installed (tests/conformance/run.sh makes them):

    python tests/conformance/record.py torch
"""

import argparse
import importlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

ANCHORS = ["torch", "deepspeed", "megatron", "jmp", "keras", "tf_keras", "cerebras", "cerebras_cbfloat16", "mindspore",
           "mindspore_manager"]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("anchor", choices=ANCHORS)
    parser.add_argument("--out", help="golden file (default: %s/<anchor>.jsonl)" % harness.GOLDEN_DIR)
    args = parser.parse_args()
    anchor = importlib.import_module("anchors." + args.anchor)
    records, steps = [], 0
    for case in harness.cases(anchor.CAN):
        if not getattr(anchor, "accepts", lambda case: True)(case):  # options the anchor cannot express
            continue
        scaler = anchor.make(case.options)
        values = {}
        for i, finite in enumerate(case.finite):
            try:
                anchor.step(scaler, finite)
            except getattr(anchor, "RAISES", ()) as e:  # the library refuses to go on: the case ends with this step
                case.finite, case.raised = case.finite[:i + 1], str(e)
                break
            for name, v in anchor.read(scaler).items():
                values.setdefault(name, []).append(v)
        records.append((case, values))
        steps += len(case.finite)
    out = args.out or os.path.join(harness.GOLDEN_DIR, args.anchor + ".jsonl")
    harness.write_golden(out, anchor.header(), records)
    h = anchor.header()
    print("%s %s: %d cases, %d steps -> %s" % (h["library"], h["version"], len(records), steps, out))


if __name__ == "__main__":
    main()
