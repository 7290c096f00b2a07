#!/usr/bin/env bash
# mixprec-train on arrays of one's own: examples/arrays/make_arrays.py (NumPy) writes a small dataset of
# .npy files; two epochs on it (--train-data, --test-data) must reach 70% test accuracy (some of its
# images share a row with a neighbouring class: about 82% is the best possible), and the logits
# written by --predictions must be a (1000, 10) float32 array whose classes give that accuracy. Then the
# refusals: labels out of range, a count mismatch and images of the wrong size each end with one message.
#
#   tests/train_arrays.sh TRAINER WORKDIR
# Skipped (77) without Debian's python3-numpy.
name=train_arrays
source "$(dirname "${BASH_SOURCE[0]}")/script_helpers.sh"
trainer="$1"
work="$2"
python=/usr/bin/python3
"$python" -c 'import numpy' 2>/dev/null || { echo "$name: no NumPy (apt-get install python3-numpy); skipped"; exit 77; }
fresh_dir "$work"

"$python" "$(dirname "${BASH_SOURCE[0]}")/../examples/arrays/make_arrays.py" "$work" --train 3000 --test 1000 ||
    fail "make_arrays.py"
"$trainer" --train-data "$work/train_x.npy" "$work/train_y.npy" --test-data "$work/test_x.npy" "$work/test_y.npy" \
    --epochs 2 --quiet --threads 1 --predictions "$work/logits.npy" >"$work/out" 2>&1 || { cat "$work/out"; fail "training"; }
cat "$work/out"
"$python" - "$work" <<'PY' || fail "the predictions"
import sys
import numpy as np
logits = np.load(sys.argv[1] + "/logits.npy")
labels = np.load(sys.argv[1] + "/test_y.npy")
assert logits.shape == (1000, 10) and logits.dtype == np.float32, (logits.shape, logits.dtype)
accuracy = np.mean(logits.argmax(1) == labels)
print("accuracy from the written logits: %.4f" % accuracy)
assert accuracy >= 0.70, accuracy
PY

# expect WORDS -- ARGS...: the run exits with 1 and says WORDS.
expect() {
    local words="$1"
    shift 2
    "$trainer" "$@" --epochs 1 --quiet >"$work/out" 2>&1 && fail "mixprec-train $* succeeded"
    grep -qF -- "$words" "$work/out" || { cat "$work/out"; fail "mixprec-train $* did not say: $words"; }
    echo "ok: refused: $(head -n 1 "$work/out")"
}
"$python" -c "
import numpy as np
np.save('$work/bad_y.npy', np.full(3000, 10, dtype=np.int64))
np.save('$work/short_y.npy', np.zeros(10, dtype=np.uint8))
np.save('$work/small_x.npy', np.zeros((3000, 20, 20), dtype=np.uint8))"
expect "label 10" -- --train-data "$work/train_x.npy" "$work/bad_y.npy"
expect "3000" -- --train-data "$work/train_x.npy" "$work/short_y.npy"
expect "cannot be viewed as (1, 28, 28)" -- --train-data "$work/small_x.npy" "$work/train_y.npy"
echo "$name: passed"
