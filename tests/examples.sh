#!/usr/bin/env bash
# The example programs do what their header comments say.
#
#   tests/examples.sh regression  REGRESSION  WORKDIR
#     --write-demo writes x.npy and y.npy; 30 epochs on them reach a validation MAE below 0.24. The demo's
#     targets carry N(0, 0.1²) noise, whose own MAE is 0.1·√(2/π) = 0.080: no model gets below that, and
#     predicting the mean gives about 0.9 (y = sin(x0) + x1·x2 has a standard deviation of 1.2), so 3× the
#     noise floor means the MLP learned the function. Then bad input: missing --y, arrays of different
#     lengths and a file that is not an array each exit with code 2 and one message.
#   tests/examples.sh custom_loop CUSTOM_LOOP WORKDIR
#     4 epochs straight, and 2 epochs then --resume for 2 more, end with the same weights digest.
#   tests/examples.sh residual    RESIDUAL    WORKDIR
#     On the first 6,000 Fashion-MNIST examples (skipped without the dataset): 2 epochs straight, and 1 epoch
#     then --resume for 1 more, end with the same weights digest, and a test accuracy above 75% (10% is
#     chance; 79.5% was measured). --freeze-stem trains with the stem's 100,480 weights frozen.
#   tests/examples.sh per_layer_scaling PER_LAYER_SCALING WORKDIR
#     One epoch of each run (skipped without the dataset): all three above 80% test accuracy; with one loss
#     scale over 1% of dense_1's activation gradients underflow and over 20% are subnormal, and a scale per
#     layer cuts both at least tenfold and threefold (measured: 6.10% and 59.05% against 0.12% and 8.06%).
#     The counts are exact and training is the same at every instruction-set level, so these hold on any CPU.
#     --shift 15 (float16 activations would overflow) is refused with exit code 2.
name=examples
source "$(dirname "${BASH_SOURCE[0]}")/script_helpers.sh"
example="$1"
program="$2"
work="$3"
fresh_dir "$work"
cd "$work" || fail "cannot enter $work"

digest() { sed -n 's/.*weights digest \([0-9a-f]*\).*/\1/p' "$1"; }

# resumes_exactly TOTAL FIRST ARGS...: TOTAL epochs straight, and FIRST epochs then --resume up to TOTAL,
# end with the same weights digest.
resumes_exactly() {
    local total="$1" first="$2"
    shift 2
    "$program" "$@" --epochs "$total" --checkpoint straight.ckpt >straight 2>&1 || { cat straight; fail "$total epochs"; }
    "$program" "$@" --epochs "$first" --checkpoint split.ckpt >first 2>&1 || { cat first; fail "$first epochs"; }
    "$program" "$@" --epochs "$total" --checkpoint split.ckpt --resume split.ckpt >second 2>&1 ||
        { cat second; fail "--resume after $first epochs"; }
    tail -n 5 straight
    cat second
    [ -n "$(digest straight)" ] || fail "no digest printed"
    [ "$(digest straight)" = "$(digest second)" ] ||
        fail "$total epochs end with digest $(digest straight), $first + the rest resumed with $(digest second)"
}

case "$example" in
regression)
    "$program" --write-demo demo >out 2>&1 || { cat out; fail "--write-demo"; }
    [ -s demo/x.npy ] && [ -s demo/y.npy ] || fail "--write-demo wrote no arrays"
    "$program" --x demo/x.npy --y demo/y.npy --epochs 30 --csv log.csv >out 2>&1 || { cat out; fail "training"; }
    cat out
    [ "$(wc -l <log.csv)" -ge 2 ] || fail "--csv wrote no rows"
    mae=$(sed -n 's/^validation MSE [0-9.]*, MAE \([0-9.]*\).*/\1/p' out)
    [ -n "$mae" ] || fail "no validation MAE printed"
    awk -v mae="$mae" 'BEGIN { exit !(mae < 0.24) }' || fail "validation MAE $mae is not below 0.24"

    # refused WORDS -- ARGS...: the run exits with 2, and its message says WORDS.
    refused() {
        local words="$1"
        shift 2
        "$program" "$@" >out 2>&1
        local code=$?
        [ "$code" -eq 2 ] || { cat out; fail "regression $* exited with $code, not 2"; }
        grep -qF -- "$words" out || { cat out; fail "regression $* did not say: $words"; }
        echo "refused: $(head -n 1 out)"
    }
    # A .npy of 3 float32 values, written byte by byte: magic, version 1.0, header length 118, the header
    # padded to 128 bytes in all, then the data.
    { printf '\223NUMPY\001\000\166\000'
      printf "%-117s\n" "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }"
      printf '\000\000\200\077%.0s' 1 2 3; } >short_y.npy
    refused "--y" -- --x demo/x.npy
    refused "3 targets for the 2000 examples" -- --x demo/x.npy --y short_y.npy
    refused "log.csv" -- --x log.csv --y demo/y.npy
    ;;
custom_loop)
    resumes_exactly 4 2
    ;;
residual)
    fashion_mnist_or_skip
    common=(--train-examples 6000)
    resumes_exactly 2 1 "${common[@]}"
    accuracy=$(sed -n 's/^test loss [0-9.]*, accuracy \([0-9.]*\)%.*/\1/p' straight)
    [ -n "$accuracy" ] || fail "no test accuracy printed"
    awk -v a="$accuracy" 'BEGIN { exit !(a > 75) }' || fail "test accuracy $accuracy% is not above 75%"
    "$program" "${common[@]}" --epochs 1 --freeze-stem --checkpoint frozen.ckpt >frozen 2>&1 ||
        { cat frozen; fail "--freeze-stem"; }
    grep -q "Non-trainable params: 100,480" frozen || { cat frozen; fail "--freeze-stem froze no stem"; }
    ;;
per_layer_scaling)
    fashion_mnist_or_skip
    "$program" >out 2>&1 || { cat out; fail "training"; }
    cat out
    for mode in float32 global per_layer; do
        accuracy=$(sed -n "s/^$mode *test accuracy \([0-9.]*\)%.*/\1/p" out)
        [ -n "$accuracy" ] || fail "no test accuracy printed for $mode"
        awk -v a="$accuracy" 'BEGIN { exit !(a > 80) }' || fail "$mode: test accuracy $accuracy% is not above 80%"
    done
    # dense_1 x2^12 x2^-12 <global underflow>% <subnormal>% <per_layer underflow>% <subnormal>%
    read -r gu gs pu ps < <(awk '$1 == "dense_1" { gsub("%", ""); print $4, $5, $6, $7 }' out)
    [ -n "$ps" ] || fail "no telemetry row for dense_1"
    awk -v gu="$gu" -v gs="$gs" -v pu="$pu" -v ps="$ps" \
        'BEGIN { exit !(gu > 1 && gs > 20 && pu * 10 < gu && ps * 3 < gs) }' ||
        fail "dense_1's activation gradients: one scale loses $gu% (underflow) and $gs% (subnormal), per layer $pu% and $ps%"
    "$program" --shift 15 >refused 2>&1
    code=$?
    [ "$code" -eq 2 ] || { cat refused; fail "--shift 15 exited with $code, not 2"; }
    grep -q -- "--shift" refused || { cat refused; fail "--shift 15 did not name the flag"; }
    ;;
*) fail "unknown example '$example'" ;;
esac
echo "$name $example: passed"
