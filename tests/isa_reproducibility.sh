#!/usr/bin/env bash
# What the README promises about weights_digest across instruction-set levels, checked with mixprec-train on
# Fashion-MNIST: at every level this CPU has (MIXPREC_ISA=portable, avx2, ...) and at native, a run with the
# same flags and --threads ends with the same digest among the levels on each side of avx512, in float32,
# mixed_float16 and mixed_cbfloat16 (mlp with an injected overflow; vit and cnn in mixed_float16). Below
# avx512, products take OpenBLAS's sgemm; from avx512 up, products of one matrix take oneDNN's sgemm and
# convolutions oneDNN's primitives, whose float32 kernels are the same at every level there. Below avx512,
# convolutions take oneDNN's avx2 primitives at avx2 and im2col on OpenBLAS at portable, so the cnn's digest
# is checked among the levels from avx512 up, and between avx2 and native where native is avx2.
# mixed_bfloat16 products run on oneDNN's bfloat16 matmul from avx512_bf16 up, so its digest is the same
# below avx512 and, apart, among the levels from avx512 up that lack avx512_bf16; so are mixed_float8's and
# mixed_mxfp8's, whose first and last layers multiply in bfloat16.
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
below=()
above=()
for level in $levels; do
    case "$level" in
    portable | avx2) below+=("$level") ;;
    *) above+=("$level") ;;
    esac
done
if [ ${#above[@]} -gt 0 ]; then above+=(native); else below+=(native); fi
# same_group RUN LEVELS...: RUN's digests agree among LEVELS (when there are two or more)
same_group() {
    local run="$1"
    shift
    [ $# -ge 2 ] && same "$run" "$@"
    return 0
}
for run in "mlp float32 24" "mlp mixed_float16 24" "mlp mixed_cbfloat16 24" "vit mixed_float16 8"; do
    same_group "$run" "${below[@]}"
    same_group "$run" "${above[@]}"
done
same_group "cnn mixed_float16 8" "${above[@]}"
at_avx2=() # the levels whose convolutions take oneDNN's avx2 primitives: avx2, and native when it is avx2
[[ " $levels " == *" avx2 "* ]] && at_avx2+=(avx2) && [ ${#above[@]} -eq 0 ] && at_avx2+=(native)
same_group "cnn mixed_float16 8" "${at_avx2[@]}"
without_bf16=() # the levels from avx512 up that multiply bfloat16 on sgemm
for level in "${above[@]}"; do
    case "$level" in
    avx512_bf16) ;;
    native) [[ " $levels " == *" avx512_bf16 "* ]] || without_bf16+=(native) ;;
    *) without_bf16+=("$level") ;;
    esac
done
for run in "mlp mixed_bfloat16 24" "mlp mixed_float8 24" "mlp mixed_mxfp8 24"; do
    same_group "$run" "${below[@]}"
    same_group "$run" "${without_bf16[@]}"
done
echo "isa_reproducibility: the same weights among the levels on each side of avx512"
