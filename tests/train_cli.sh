#!/usr/bin/env bash
# mixprec-train's refusals: bad flags, impossible combinations, a missing dataset and unusable checkpoints
# each end with one clear message (checked for the words that matter) and a non-zero exit, never a crash. And
# the learning-rate schedule, weight-decay, clipping and accumulation flags in effect, on a tiny dataset.
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
expect 2 "--choices $work/missing/x.choices: no folder" -- --choices "$work/missing/x.choices"
expect 2 "no convolution route is called 'fast' (the choices: automatic, im2col, im2col_onednn, onednn, measured)" \
    -- --conv-route fast
expect 2 "no float32 GEMM library is called 'mkl' (the choices: automatic, openblas, onednn, measured)" -- --gemm mkl
expect 2 "NumPy has no bfloat16"               -- --export-weights "$work/w.npz" --export-dtype bfloat16
expect 2 "--batch-size"                        -- --batch-size -3
expect 2 "--precision"                         -- --precision float8
expect 2 "--no-such-flag"                      -- --no-such-flag
expect 2 "needs --checkpoint PATH"             -- --checkpoint-every 5
expect 2 "a fixed scale does not move"         -- --loss-scale 100 --growth-interval 5
expect 2 "'abc' is not dynamic, per_layer, none" -- --loss-scale abc
expect 2 "per_layer moves each layer's scale"  -- --loss-scale per_layer --growth-interval 5
expect 2 "per_layer scales are powers of two"  -- --loss-scale per_layer --initial-scale 1000
expect 2 "only --precision mixed_float8 has FP8" -- --fp8-recipe current
expect 2 "--fp8-recipe: bogus not in"           -- --precision mixed_float8 --fp8-recipe bogus
expect 2 "only --precision mixed_float8 scales" -- --fp8-gradient-scaling loss_scale
expect 2 "to the loss scale: add --loss-scale dynamic" -- --precision mixed_float8 --fp8-gradient-scaling loss_scale
expect 2 "only --precision mixed_float8 casts gradients" -- --precision mixed_mxfp8 --fp8-gradient-rounding stochastic
expect 2 "fp8-gradient-rounding"              -- --precision mixed_float8 --fp8-gradient-rounding up
expect 2 "'10' is not STEP:SCALE"             -- --min-scale-schedule 10
expect 2 "'5:x' is not STEP:SCALE"            -- --min-scale-schedule 1:2,5:x
expect 2 "'0:2' is not STEP:SCALE"            -- --min-scale-schedule 0:2
expect 2 "'5:4' does not come after"          -- --min-scale-schedule 5:2,5:4
expect 2 "unless asked: add --loss-scale dynamic" -- --precision mixed_bfloat16 --min-scale-schedule 1:2
expect 2 "none turns loss scaling off"        -- --loss-scale none --min-scale-schedule 1:2
expect 2 "min_scale_schedule[1].scale must not fall" -- --min-scale-schedule 1:1024,10:2
expect 2 "give --log PATH or --plot PATH"      -- --telemetry
expect 2 "--telemetry-every requires --telemetry" -- --telemetry-every 5 --log "$work/t.jsonl"
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
expect 2 "--lr-schedule: linear not in"        -- --lr-schedule linear
expect 2 "--warmup-steps: Value -1 not in range" -- --warmup-steps -1
expect 2 "applies to --lr-schedule exponential only" -- --decay-rate 0.5
expect 2 "--decay-rate: '1.5' is not a number in (0, 1]" -- --lr-schedule exponential --decay-rate 1.5
expect 2 "Adam has no weight decay: use --optimizer adamw" -- --weight-decay 0.01
expect 2 "--weight-decay: 'nan' is not a finite number >= 0" -- --optimizer adamw --weight-decay nan
expect 2 "--clip-value: '0' is not a finite number > 0" -- --clip-value 0
expect 2 "--clip-value: and --clip-norm both clip the gradients" -- --clip-value 1 --clip-norm 1
expect 2 "--learning-rate: 'nan' is not a finite number > 0" -- --learning-rate nan
expect 2 "--clip-norm: '1e40' is not a finite number > 0" -- --clip-norm 1e40
expect 2 "--accumulate-steps: Value 0 not in range" -- --accumulate-steps 0
MIXPREC_ISA=avx1024 expect 2 'MIXPREC_ISA="avx1024" names no instruction-set level; use one of portable' -- --max-steps 1

# The schedule, weight-decay, clipping and accumulation flags in effect, on 64 small examples written here (a
# few lines of Python, no NumPy): with --batch-size 8, an epoch is 8 steps. float32, so that no step is skipped
# and the schedule's position is the step number minus 1.
python=/usr/bin/python3
if [ -x "$python" ]; then
    "$python" - "$work" <<'PY'
import struct, sys
def save(path, descr, shape, data):  # a version 1.0 .npy file
    header = "{'descr': '%s', 'fortran_order': False, 'shape': %r, }" % (descr, shape)
    header += " " * ((-len(header) - 11) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + data)
n = 64
save(sys.argv[1] + "/x.npy", "|u1", (n, 28, 28), bytes((i * 37 + j * 11) % 256 for i in range(n) for j in range(784)))
save(sys.argv[1] + "/y.npy", "<i8", (n,), struct.pack("<%dq" % n, *(i % 10 for i in range(n))))
PY
    small=(--train-data "$work/x.npy" "$work/y.npy" --batch-size 8 --precision float32 --threads 1 --quiet)

    # lr_follows LOG STEPS FORMULA: LOG has STEPS steps, each with the learning_rate FORMULA gives for i, the
    # steps applied before it (a Python expression; float32 rounding allowed).
    lr_follows() {
        "$python" - "$@" <<'PY'
import json, math, sys
log, count, formula = sys.argv[1], int(sys.argv[2]), sys.argv[3]
steps = [json.loads(line) for line in open(log) if line.startswith('{"step"')]
assert len(steps) == count, "%d steps in %s, expected %d" % (len(steps), log, count)
for s in steps:
    i = s["step"] - 1
    want = eval(formula, {"math": math, "i": i})
    assert abs(s["learning_rate"] - want) <= 1e-6 * want + 1e-12, "step %d: lr %r, expected %r" % (s["step"], s["learning_rate"], want)
print("  %d steps follow %s: %s" % (len(steps), formula, " ".join("%.3g" % s["learning_rate"] for s in steps)))
PY
    }
    # schedule WORDS FORMULA STEPS -- ARGS...: a run with ARGS says WORDS and logs the learning rates of FORMULA.
    schedule() {
        local words="$1" formula="$2" count="$3"
        shift 4
        rm -f "$work/lr.jsonl" # a resumed run appends to its log
        expect 0 "$words" -- "${small[@]}" --learning-rate 0.01 --log "$work/lr.jsonl" "$@"
        lr_follows "$work/lr.jsonl" "$count" "$formula" || {
            echo "FAILED: the learning rates of mixprec-train $*"; failures=$((failures + 1)); }
    }
    # 2 epochs of 8 steps: a warmup of 4 from 0, then the cosine over the 12 steps left.
    schedule "cosine decay to 0 over 12 steps after 4 warmup steps" \
        "0.01 * i / 4 if i < 4 else 0.01 * 0.5 * (1 + math.cos(math.pi * (i - 4) / 12))" 16 -- \
        --lr-schedule cosine --warmup-steps 4 --epochs 2
    schedule "cosine decay to 0 over 10 steps" "0.01 * 0.5 * (1 + math.cos(math.pi * i / 10))" 10 -- \
        --lr-schedule cosine --epochs 2 --max-steps 10
    schedule "exponential decay ×0.5 per epoch of 8 steps after 3 warmup steps" \
        "0.01 * i / 3 if i < 3 else 0.01 * 0.5 ** ((i - 3) / 8)" 16 -- \
        --lr-schedule exponential --decay-rate 0.5 --warmup-steps 3 --epochs 2
    schedule "exponential decay ×0.9 per epoch of 8 steps" "0.01 * 0.9 ** (i / 8)" 12 -- \
        --lr-schedule exponential --epochs 2 --max-steps 12
    schedule "(lr 0.01, 5 warmup steps)" "0.01 * min(i / 5, 1)" 8 -- --warmup-steps 5 --epochs 1
    schedule "(lr 0.01)," "0.01" 8 -- --epochs 1
    # A resumed run follows the schedule from the optimizer's restored step count: the first run stops at
    # step 11, in the second epoch, and the second goes on from step 12 to the end of that epoch, step 16
    # (exponential's schedule does not depend on --max-steps).
    exp_args=(--lr-schedule exponential --decay-rate 0.5 --warmup-steps 3 --epochs 2 --checkpoint "$work/lr.ckpt")
    "$trainer" "${small[@]}" --learning-rate 0.01 "${exp_args[@]}" --max-steps 11 >/dev/null 2>&1 || {
        echo "FAILED: an 11-step run to make a checkpoint"; failures=$((failures + 1)); }
    schedule "Resuming $work/lr.ckpt at step 11" "0.01 * i / 3 if i < 3 else 0.01 * 0.5 ** ((i - 3) / 8)" 5 -- \
        "${exp_args[@]}" --resume "$work/lr.ckpt"
    # Cosine needs a step after the warmup; a warmup as long as the run is fine for the others, which just never
    # reach --learning-rate.
    expect 2 "16 warmup steps leave no step for --lr-schedule cosine to decay over: the run has 16 optimizer steps (--epochs 2 × 8 per epoch)" \
        -- "${small[@]}" --lr-schedule cosine --warmup-steps 16 --epochs 2
    expect 2 "the run has 5 optimizer steps (--max-steps)" \
        -- "${small[@]}" --lr-schedule cosine --warmup-steps 5 --max-steps 5
    schedule "(lr 0.01, 20 warmup steps)" "0.01 * i / 20" 8 -- --warmup-steps 20 --epochs 1
    # --accumulate-steps: the schedule counts optimizer steps of 2 batches (4 an epoch) and ends with the run.
    schedule "cosine decay to 0 over 12 steps), batch 8 × 2 accumulated, 3 epochs" \
        "0.01 * 0.5 * (1 + math.cos(math.pi * i / 12))" 12 -- --lr-schedule cosine --accumulate-steps 2 --epochs 3
    expect 0 "batch 8 × 2 accumulated" -- "${small[@]}" --accumulate-steps 2 --max-steps 4
    expect 0 "cosine decay to 0 over 3 steps), batch 8 × 3 accumulated" \
        -- "${small[@]}" --lr-schedule cosine --accumulate-steps 3 --epochs 1

    # digest WORDS -- ARGS...: a 3-step run with ARGS says WORDS; sets $digest to its weights_digest.
    digest() {
        local words="$1"
        shift 2
        expect 0 "$words" -- "${small[@]}" --max-steps 3 --log "$work/d.jsonl" "$@"
        digest="$(tail -n 1 "$work/d.jsonl" | sed -n 's/.*"weights_digest":"\([0-9a-f]*\)".*/\1/p')"
    }
    # differs NAME A B: the two digests differ (the flag changed the weights).
    differs() {
        if [ -n "$2" ] && [ "$2" != "$3" ]; then echo "ok: $1 changes the weights ($2 -> $3)"; else
            echo "FAILED: $1 left the weights at ${2:-no digest}"; failures=$((failures + 1)); fi
    }
    digest "sgd (lr 0.01), batch 8" -- --optimizer sgd; sgd="$digest"
    digest "sgd (lr 0.01), batch 8" -- --optimizer sgd
    [ -n "$sgd" ] && [ "$digest" = "$sgd" ] || {
        echo "FAILED: two equal runs ended with $sgd and $digest"; failures=$((failures + 1)); }
    digest "sgd (lr 0.01, L2 weight decay 0.5)" -- --optimizer sgd --weight-decay 0.5
    differs "--weight-decay 0.5 (sgd)" "$sgd" "$digest"
    digest "sgd (lr 0.01), clip value 0.0001, batch 8" -- --optimizer sgd --clip-value 1e-4
    differs "--clip-value 1e-4" "$sgd" "$digest"
    digest "adamw (lr 0.001, decoupled weight decay 0.004)" -- --optimizer adamw; adamw="$digest"
    digest "adamw (lr 0.001), batch 8" -- --optimizer adamw --weight-decay 0
    differs "--weight-decay 0 (adamw's default is 0.004)" "$adamw" "$digest"

    # --telemetry: every step record names every variable and layer with its counts, and counting changes
    # no bit of training.
    digest "sgd (lr 0.01), batch 8" -- --optimizer sgd --telemetry
    [ "$digest" = "$sgd" ] || { echo "FAILED: --telemetry changed the weights ($sgd -> $digest)"; failures=$((failures + 1)); }
    if "$python" - "$work/d.jsonl" <<'PY'; then echo "ok: --telemetry logs every variable and layer"; else failures=$((failures + 1)); fi
import json, sys
steps = [json.loads(line) for line in open(sys.argv[1]) if line.startswith('{"step"')]
assert len(steps) == 3, steps
names = ["dense/kernel", "dense/bias", "dense_1/kernel", "dense_1/bias", "dense_2/kernel", "dense_2/bias",
         "dense/output_grad", "dense/forward", "dense/backward", "loss/backward"]
for s in steps:
    t = s["telemetry"]
    for n in names:
        assert set(t[n]) >= {"count", "underflow", "subnormal", "overflow", "amax"}, (s["step"], n, t.get(n))
    assert t["dense/kernel"]["count"] == 784 * 512, t["dense/kernel"]
PY
    # Under mixed_float8 the middle layer's three FP8 casts report too.
    expect 0 "mixed_float8" -- "${small[@]/float32/mixed_float8}" --telemetry --max-steps 2 --log "$work/f.jsonl"
    if "$python" - "$work/f.jsonl" <<'PY'; then echo "ok: --telemetry logs the FP8 casts"; else failures=$((failures + 1)); fi
import json, sys
steps = [json.loads(line) for line in open(sys.argv[1]) if line.startswith('{"step"')]
assert len(steps) == 2, steps
for s in steps:
    t = s["telemetry"]
    counts = {n: t["dense_1/fp8_" + n]["count"] for n in ("input", "kernel", "output_grad")}
    assert counts == {"input": 8 * 512, "kernel": 512 * 512, "output_grad": 8 * 512}, counts
    assert "dense/fp8_input" not in t and "dense_2/fp8_input" not in t  # first and last stay bfloat16
PY
    # --loss-scale per_layer trains, in mixed_float16.
    expect 0 "loss scaling per layer (initial 32768)" -- "${small[@]/float32/mixed_float16}" --loss-scale per_layer \
        --max-steps 3
else
    echo "skipped: the schedule, weight-decay, clipping and accumulation runs (no $python)"
fi

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
    # 6 steps straight, and 3 then --resume for 3 more, end with the same weights: for mixed_float8 with
    # delayed scaling (the amax histories and scales travel in the checkpoint), and for mixed_mxfp8.
    # Also with stochastic rounding of the gradients (the step count that keys its streams travels too).
    for precision in mixed_float8 mixed_mxfp8 enhanced stochastic; do
        run=(--precision "$precision" --threads 1 --quiet)
        [ "$precision" = stochastic ] && run=(--precision mixed_float8 --fp8-gradient-rounding stochastic \
            --seed 3 --threads 1 --quiet)
        # e5m2 gradients placed by a dynamic loss scale with a rising floor (the update count travels too)
        [ "$precision" = enhanced ] && run=(--precision mixed_float8 --fp8-gradient-scaling loss_scale \
            --loss-scale dynamic --min-scale-schedule 1:1024,5:65536 --threads 1 --quiet)
        "$trainer" "${run[@]}" --max-steps 6 >"$work/$precision-straight" 2>&1 &&
            "$trainer" "${run[@]}" --max-steps 3 --checkpoint "$work/$precision.ckpt" >/dev/null 2>&1 &&
            "$trainer" "${run[@]}" --max-steps 6 --checkpoint "$work/$precision.ckpt" \
                --resume "$work/$precision.ckpt" >"$work/$precision-resumed" 2>&1 ||
            { echo "FAILED: the $precision runs"; failures=$((failures + 1)); }
        straight=$(sed -n 's/.*weights digest \([0-9a-f]*\).*/\1/p' "$work/$precision-straight")
        resumed=$(sed -n 's/.*weights digest \([0-9a-f]*\).*/\1/p' "$work/$precision-resumed")
        if [ -n "$straight" ] && [ "$straight" = "$resumed" ]; then
            echo "ok: $precision resumes exactly ($straight)"
        else
            echo "FAILED: $precision straight $straight, resumed $resumed"; failures=$((failures + 1))
        fi
    done
    expect 1 "mixed_float8" -- --precision mixed_mxfp8 --max-steps 4 --quiet --resume "$work/mixed_float8.ckpt"
    expect 1 "FP8 scaling (delayed recipe) differs" -- --precision mixed_float8 --max-steps 4 --quiet \
        --resume "$work/mixed_float8.ckpt" --fp8-recipe current
    expect 1 "rounded stochastically (seed 3)) differs" -- --precision mixed_float8 --max-steps 4 --quiet \
        --resume "$work/stochastic.ckpt" --seed 4 --fp8-gradient-rounding stochastic
    # The measured modes repeat and resume bit for bit once their choices are kept. A first run writes what
    # it measured to --choices; the file is then edited to routes the measurement would not all pick (so
    # that taking them shows in the bits), and runs that adopt it take them without timing: 6 steps
    # straight, and 3 steps then --resume without the file, from the checkpoint's choices, end alike.
    measured=(--model cnn --gemm measured --conv-route measured --threads 1)
    rm -f "$work/cnn.choices"
    expect 0 "Measured choices" -- "${measured[@]}" --max-steps 2 --quiet --choices "$work/cnn.choices"
    sed -i -E 's/^(conv2d .*)\t(im2col_onednn|onednn)$/\1\tim2col/; s/^(matmul .*)\tonednn$/\1\topenblas/' \
        "$work/cnn.choices"
    "$trainer" "${measured[@]}" --max-steps 6 --choices "$work/cnn.choices" >"$work/measured-straight" 2>&1 &&
        "$trainer" "${measured[@]}" --max-steps 3 --choices "$work/cnn.choices" --checkpoint "$work/measured.ckpt" \
            >/dev/null 2>&1 &&
        "$trainer" "${measured[@]}" --max-steps 6 --resume "$work/measured.ckpt" >"$work/measured-resumed" 2>&1 ||
        { echo "FAILED: the measured runs"; failures=$((failures + 1)); }
    straight=$(sed -n 's/.*weights digest \([0-9a-f]*\).*/\1/p' "$work/measured-straight")
    resumed=$(sed -n 's/.*weights digest \([0-9a-f]*\).*/\1/p' "$work/measured-resumed")
    timed=$(cat "$work/measured-straight" "$work/measured-resumed" | grep -c "best of")
    if [ -n "$straight" ] && [ "$straight" = "$resumed" ] && [ "$timed" -eq 0 ] &&
        grep -q "conv2d pooled forward x (128, 1, 28, 28) .*: im2col, adopted" "$work/measured-resumed"; then
        echo "ok: measured runs with kept choices repeat and resume exactly ($straight)"
    else
        echo "FAILED: measured runs with kept choices: straight $straight, resumed $resumed, $timed timed"
        failures=$((failures + 1))
    fi
    expect 1 "line 1: not a mixprec choices file" -- --choices "$work/garbage.ckpt" --max-steps 1 --quiet
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
