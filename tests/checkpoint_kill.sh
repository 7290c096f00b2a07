#!/usr/bin/env bash
# Crash test of checkpoint files. Runs checkpoint_kill_worker (a training run that checkpoints after every
# step) once uninterrupted, then again under SIGKILL at random moments, resuming after each kill, until at
# least KILLS kills have landed. After every kill, the checkpoints on disk must load (worker --check) and
# must not have gone backwards; every run that reaches the end must print the uninterrupted run's digest.
#
#   tests/checkpoint_kill.sh WORKER WORKDIR [KILLS=24] [STEPS=300]
#   CHECKPOINT_KILL_SEED=n   repeats the kill times of an earlier run (the seed is printed)
set -uo pipefail

worker="$1"
work="$2"
want="${3:-24}"
steps="${4:-300}"
seed="${CHECKPOINT_KILL_SEED:-$(( $(date +%s) % 32768 ))}"
RANDOM="$seed"

name=checkpoint_kill
source "$(dirname "${BASH_SOURCE[0]}")/script_helpers.sh"
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }

fresh_dir "$work" reference run

start="$(now_ms)"
reference="$("$worker" --dir "$work/reference" --steps "$steps")" || fail "the uninterrupted run failed"
reference_ms=$(( $(now_ms) - start ))
echo "uninterrupted run: $reference (${reference_ms} ms); seed $seed"
digest="${reference%% step*}"

# A run shorter than a second is stretched (a pause after each step) so that kills spread over it rather
# than landing in process start-up; kills still land inside saves, which take most of a step's time.
slow_us=0
if [ "$reference_ms" -lt 1000 ]; then
    slow_us=$(( (1000 - reference_ms) * 1000 / steps ))
    reference_ms=1000
fi
# Kill delays are uniform in [1, max_ms]: on average about 2/KILLS of a run, so that a resumed run reaches
# the end about once while the kills are counted, and again after.
max_ms=$(( 2 * reference_ms / want + 20 ))

kills=0 inside_save=0 progressed=0 finished=0 attempts=0 last_step=-1 last_tmp=""
while [ "$kills" -lt "$want" ] || [ "$last_step" -ge 0 ] || [ "$finished" -eq 0 ]; do
    attempts=$((attempts + 1))
    [ "$attempts" -le $((want * 20)) ] || fail "no progress after $attempts attempts"
    "$worker" --dir "$work/run" --steps "$steps" --slow-us "$slow_us" >"$work/out" 2>"$work/err" &
    pid=$!
    if [ "$kills" -lt "$want" ]; then
        delay_ms=$(( 1 + RANDOM % max_ms ))
        sleep "$(printf '%d.%03d' $((delay_ms / 1000)) $((delay_ms % 1000)))"
        kill -KILL "$pid" 2>/dev/null
    fi
    wait "$pid" 2>/dev/null # (no "Killed" notice)
    status=$?
    if [ "$status" -eq 137 ]; then
        kills=$((kills + 1))
        # A temporary file this kill left (not one an earlier kill left that no save has reused since).
        tmp="$(stat -c '%i %.9Y %s' "$work/run/run.ckpt.tmp" 2>/dev/null)"
        [ -n "$tmp" ] && [ "$tmp" != "$last_tmp" ] && inside_save=$((inside_save + 1))
        last_tmp="$tmp"
        check="$("$worker" --dir "$work/run" --check 2>&1)" || fail "after kill $kills: $check"
        step="${check#step }"
        [ "$step" -ge "$last_step" ] || fail "after kill $kills: the checkpoint went back from step $last_step to $step"
        [ "$step" -gt "$last_step" ] && progressed=$((progressed + 1))
        last_step="$step"
    elif [ "$status" -eq 0 ]; then
        result="$(cat "$work/out")"
        [ "${result%% step*}" = "$digest" ] || fail "resumed run ended with '$result', uninterrupted '$reference'"
        finished=$((finished + 1))
        echo "resumed run $finished reached the end with the uninterrupted digest after $kills kills"
        rm -rf "$work/run" && mkdir -p "$work/run"
        last_step=-1
    else
        fail "the worker exited with status $status: $(cat "$work/err")"
    fi
done

echo "kills: $kills ($inside_save inside a save, leaving its temporary file; $progressed after progress);" \
     "resumed runs completed: $finished, each with digest ${digest#digest }"
[ "$finished" -ge 1 ] || fail "no resumed run reached the end"
rm -rf "$work"
