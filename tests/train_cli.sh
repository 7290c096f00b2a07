#!/usr/bin/env bash
# mixprec-train's refusals: bad flags, impossible combinations, a missing dataset and unusable checkpoints
# each end with one clear message (checked for the words that matter) and a non-zero exit, never a crash.
#
#   tests/train_cli.sh TRAINER WORKDIR
# The checkpoint cases need Fashion-MNIST; without it they are skipped (unless MIXPREC_REQUIRE_DATA is set).
set -uo pipefail

trainer="$1"
work="$2"
rm -rf "$work"
mkdir -p "$work" || exit 1
failures=0

# expect STATUS WORDS -- ARGS...: the run exits with STATUS and its output contains WORDS.
expect() {
    local status="$1" words="$2"
    shift 3
    "$trainer" "$@" >"$work/out" 2>&1
    local got=$?
    if [ "$got" -ne "$status" ] || ! grep -qF -- "$words" "$work/out" ||
        grep -qE "terminate called|Aborted|Segmentation|AddressSanitizer|runtime error" "$work/out"; then
        echo "FAILED: mixprec-train $* exited $got (expected $status) with:"
        sed 's/^/    /' "$work/out"
        failures=$((failures + 1))
    else
        echo "ok: $* -> $got: $(head -n 1 "$work/out")"
    fi
}

expect 2 "--model: foo not in"                 -- --model foo
expect 2 "--epochs: Value -1 not in range"     -- --epochs -1
expect 2 "0 trains nothing"                    -- --epochs 0 --checkpoint "$work/x.ckpt"
expect 2 "needs --export-weights PATH"         -- --export-dtype float16
expect 2 "--export-dtype: float64 not in"      -- --export-weights "$work/w.safetensors" --export-dtype float64
expect 2 "no file at $work/missing"            -- --initial-weights "$work/missing"
expect 2 "NumPy has no bfloat16"               -- --export-weights "$work/w.npz" --export-dtype bfloat16
expect 2 "--batch-size"                        -- --batch-size -3
expect 2 "--precision"                         -- --precision float8
expect 2 "--no-such-flag"                      -- --no-such-flag
expect 2 "needs --checkpoint PATH"             -- --checkpoint-every 5
expect 2 "a fixed scale does not move"         -- --loss-scale 100 --growth-interval 5
expect 2 "'abc' is not dynamic, none"          -- --loss-scale abc
expect 2 "none turns loss scaling off"         -- --loss-scale none --initial-scale 8
expect 2 "no checkpoint at $work/missing"      -- --resume "$work/missing"
expect 2 "should end in .png or .svg"          -- --plot "$work/x.jpg"
expect 2 "'x' is not a step number"            -- --inject-nonfinite 3,x
expect 2 "applies to --optimizer sgd only"     -- --momentum 0.5
expect 2 "is larger than --max-scale"          -- --min-scale 10 --max-scale 1
expect 2 "--growth-interval: Value 0"          -- --loss-scale-preset keras --growth-interval 0
expect 2 "the keras rule has no hysteresis"    -- --loss-scale-preset keras --hysteresis 3
expect 2 "the ascend rule has no max_scale"    -- --loss-scale-preset ascend --max-scale 1024
expect 1 "apt-get install dataset-fashion-mnist" -- --data "$work" --max-steps 1 --quiet
MIXPREC_ISA=avx1024 expect 2 'MIXPREC_ISA="avx1024" names no instruction-set level; use one of portable' -- --max-steps 1

if [ -e /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
    head -c 4096 /dev/urandom >"$work/garbage.ckpt"
    expect 1 "checkpoint" -- --resume "$work/garbage.ckpt" --max-steps 1 --quiet
    : >"$work/empty.ckpt"
    expect 1 "checkpoint" -- --resume "$work/empty.ckpt" --max-steps 1 --quiet
    "$trainer" --max-steps 2 --quiet --checkpoint "$work/mlp.ckpt" >/dev/null 2>&1 || {
        echo "FAILED: a 2-step run to make a checkpoint"; failures=$((failures + 1)); }
    expect 1 "conv2d/kernel" -- --model cnn --resume "$work/mlp.ckpt" --max-steps 3 --quiet
    expect 1 "adam" -- --optimizer sgd --resume "$work/mlp.ckpt" --max-steps 3 --quiet
    expect 1 "mixed_float16" -- --precision float32 --resume "$work/mlp.ckpt" --max-steps 3 --quiet
    expect 2 "both set the weights" -- --initial-weights "$work/mlp.ckpt" --resume "$work/mlp.ckpt"
    expect 1 "safetensors file" -- --initial-weights "$work/mlp.ckpt" --epochs 0 --quiet
    "$trainer" --max-steps 1 --quiet --export-weights "$work/mlp.safetensors" >/dev/null 2>&1 || {
        echo "FAILED: a 1-step run to export weights"; failures=$((failures + 1)); }
    expect 1 "no tensor 'conv2d/kernel'" -- --model cnn --initial-weights "$work/mlp.safetensors" --epochs 0
    expect 0 "Weights (bfloat16) written" -- --initial-weights "$work/mlp.safetensors" --epochs 0 --quiet \
        --export-weights "$work/mlp-bf16.safetensors" --export-dtype bfloat16
elif [ -n "${MIXPREC_REQUIRE_DATA:-}" ]; then
    echo "FAILED: Fashion-MNIST is not installed"
    failures=$((failures + 1))
fi

[ "$failures" -eq 0 ] && echo "train_cli: passed" || echo "train_cli: $failures FAILED"
[ "$failures" -eq 0 ]
