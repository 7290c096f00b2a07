#!/usr/bin/env bash
# What the README promises about weights_digest across instruction-set levels, checked with mixprec-train on
# Fashion-MNIST: at every level this CPU has (MIXPREC_ISA=portable, avx2, ...) and at native, a run with the
# same flags and --threads ends with the same digest in float32, mixed_float16 and mixed_cbfloat16 (mlp with
# an injected overflow; vit in mixed_float16). Convolutions take im2col on OpenBLAS below avx512 and oneDNN's
# primitives from avx512 up, so the cnn's digest (mixed_float16) is the same among the levels on each side of
# avx512. mixed_bfloat16 products run on sgemm below avx512_bf16 and on oneDNN from there up, so its digest
# is the same among the levels below avx512_bf16; so are mixed_float8's and mixed_mxfp8's, whose first and
# last layers multiply in bfloat16.
#
#   tests/isa_reproducibility.sh TRAINER ISA_LEVELS WORKDIR
# Exits 77 (skipped) when Fashion-MNIST is not installed, unless MIXPREC_REQUIRE_DATA is set.
set -uo pipefail

trainer="$1"
levels_program="$2"
work="$3"

name=isa_reproducibility
source "$(dirname "${BASH_SOURCE[0]}")/script_helpers.sh"
fashion_mnist_or_skip
fresh_dir "$work"
levels="$("$levels_program")" || fail "$levels_program failed"

# digest LEVEL MODEL PRECISION STEPS: the weights_digest of a short run at that level ("native": unset).
digest() {
    local level="$1" model="$2" precision="$3" steps="$4" log="$work/$1-$2-$3.jsonl"
    local env=(env -u MIXPREC_ISA)
    [ "$level" != native ] && env=(env MIXPREC_ISA="$level")
    "${env[@]}" "$trainer" --model "$model" --precision "$precision" --max-steps "$steps" --threads 2 --quiet \
        --growth-interval 8 --inject-nonfinite 5 --log "$log" >"$work/out" 2>&1 ||
        fail "MIXPREC_ISA=$level $model $precision: $(tail -n 3 "$work/out")"
    tail -n 1 "$log" | sed -n 's/.*"weights_digest":"\([0-9a-f]*\)".*/\1/p'
}

# same RUN LEVELS...: the digest of RUN ("model precision steps") at each level; fails unless all agree.
same() {
    local run="$1" first="" level d
    shift
    for level in "$@"; do
        # shellcheck disable=SC2086
        d="$(digest "$level" $run)"
        [ -n "$d" ] || fail "MIXPREC_ISA=$level $run: no digest in the log"
        echo "  $run at $level: $d"
        [ -z "$first" ] && first="$d"
        [ "$d" = "$first" ] || fail "$run: digest $d at $level, $first at $1"
    done
}

echo "levels: $levels (and native)"
for run in "mlp float32 24" "mlp mixed_float16 24" "mlp mixed_cbfloat16 24" "vit mixed_float16 8"; do
    # shellcheck disable=SC2086
    same "$run" $levels native
done
im2col=()
primitives=()
for level in $levels; do
    case "$level" in
    portable | avx2) im2col+=("$level") ;;
    *) primitives+=("$level") ;;
    esac
done
if [ ${#primitives[@]} -gt 0 ]; then primitives+=(native); else im2col+=(native); fi
same "cnn mixed_float16 8" "${im2col[@]}"
[ ${#primitives[@]} -gt 0 ] && same "cnn mixed_float16 8" "${primitives[@]}"
below=()
for level in $levels; do [ "$level" != avx512_bf16 ] && below+=("$level"); done
same "mlp mixed_bfloat16 24" "${below[@]}"
same "mlp mixed_float8 24" "${below[@]}"
same "mlp mixed_mxfp8 24" "${below[@]}"
echo "isa_reproducibility: the same weights at every level"
