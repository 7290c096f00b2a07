#!/usr/bin/env bash
# mixprec-train killed and resumed: runs a short mixed_float16 training once uninterrupted, then again under
# SIGKILL at random moments while it checkpoints every few steps, each time resuming with --resume from
# whatever checkpoint is on disk, until a run completes. The completed run must end with the uninterrupted
# run's weights_digest (and skipped-step count): resumption gives the same bits as never stopping.
#
#   tests/train_resume.sh TRAINER WORKDIR [KILLS=6]
# Exits 77 (skipped) when Fashion-MNIST is not installed, unless MIXPREC_REQUIRE_DATA is set.
set -uo pipefail

trainer="$1"
work="$2"
want="${3:-6}"
seed="${TRAIN_RESUME_SEED:-$(( $(date +%s) % 32768 ))}"
RANDOM="$seed"

name=train_resume
source "$(dirname "${BASH_SOURCE[0]}")/script_helpers.sh"
end_field() { # end_field LOG FIELD: a field of the log's last line (the end event)
    tail -n 1 "$1" | sed -n "s/.*\"$2\":\"\{0,1\}\([^,\"}]*\).*/\1/p"
}

fashion_mnist_or_skip

fresh_dir "$work"
# 1.5 epochs of 256-example batches, with two injected overflows (one before and one after most kills).
args=(--model mlp --precision mixed_float16 --batch-size 256 --epochs 2 --max-steps 350 --threads 1 --quiet
      --growth-interval 50 --inject-nonfinite 40,260)

start=$(date +%s%N)
"$trainer" "${args[@]}" --log "$work/reference.jsonl" >"$work/reference.out" 2>&1 || fail "the uninterrupted run failed"
run_ms=$(( ($(date +%s%N) - start) / 1000000 ))
reference="$(end_field "$work/reference.jsonl" weights_digest)"
reference_skipped="$(end_field "$work/reference.jsonl" skipped_steps)"
[ -n "$reference" ] || fail "the uninterrupted run's log has no weights_digest"
echo "uninterrupted: digest $reference, $reference_skipped skipped steps, ${run_ms} ms; seed $seed"

kills=0 attempts=0
while :; do
    attempts=$((attempts + 1))
    [ "$attempts" -le $((want * 10)) ] || fail "no completed run after $attempts attempts"
    resume=()
    [ -e "$work/run.ckpt" ] && resume=(--resume "$work/run.ckpt")
    "$trainer" "${args[@]}" --checkpoint "$work/run.ckpt" --checkpoint-every 7 "${resume[@]}" \
        --log "$work/run.jsonl" >"$work/run.out" 2>&1 &
    pid=$!
    if [ "$kills" -lt "$want" ]; then
        sleep "0.$(printf '%03d' $(( RANDOM % (run_ms < 999 ? run_ms : 999) + 1 )))"
        if kill -KILL "$pid" 2>/dev/null; then
            wait "$pid" 2>/dev/null
            kills=$((kills + 1))
            continue
        fi
    fi
    wait "$pid" || fail "a resumed run failed: $(tail -n 3 "$work/run.out")"
    break
done

digest="$(end_field "$work/run.jsonl" weights_digest)"
skipped="$(end_field "$work/run.jsonl" skipped_steps)"
echo "killed $kills times; the completed run: digest $digest, $skipped skipped steps"
[ "$kills" -ge 1 ] || fail "no kill landed before the run completed"
[ "$digest" = "$reference" ] || fail "digest $digest differs from the uninterrupted run's $reference"
[ "$skipped" = "$reference_skipped" ] || fail "$skipped skipped steps, the uninterrupted run had $reference_skipped"
echo "train_resume: passed"
