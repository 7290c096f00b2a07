#!/usr/bin/env bash
# mixprec-train under mpirun with two ranks: every rank ends every step with the same state digest; an inf
# on rank 1 alone skips the step on both; checkpoints resume bit-exactly with the same number of ranks and
# continue with another (2 → 1 → 2); a rank killed mid-run ends the job within seconds, and the run resumes,
# across 2 → 1 → 2 ranks.
#
#   tests/train_mpi.sh TRAINER MPIEXEC WORKDIR
# Needs Fashion-MNIST; without it the test is skipped (unless MIXPREC_REQUIRE_DATA is set).
set -uo pipefail

trainer="$(realpath "$1")"
mpiexec="$2"
work="$3"
rm -rf "$work"
mkdir -p "$work" || exit 1
cd "$work" || exit 1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 # CI may run as root
failures=0

if [ ! -e /usr/share/datasets/fashion-mnist ] && [ -z "${MIXPREC_REQUIRE_DATA:-}" ]; then
    echo "Fashion-MNIST is not installed: skipped"
    exit 0
fi

fail() {
    echo "FAILED: $*"
    failures=$((failures + 1))
}

# run NP ARGS...: mixprec-train on NP ranks (output in out.NP), quiet; returns its status.
run() {
    local np="$1"
    shift
    "$mpiexec" --oversubscribe -np "$np" "$trainer" --quiet "$@" >"out.$np" 2>&1
}

# digests_equal LOG: every step record and the end record carry two equal rank digests.
digests_equal() {
    python3 - "$1" <<'EOF'
import json, sys
records = [json.loads(line) for line in open(sys.argv[1])]
digests = [r["rank_digests"] for r in records if "step" in r or r.get("event") == "end"]
sys.exit(0 if digests and all(len(d) == 2 and d[0] == d[1] for d in digests) else 1)
EOF
}

# weights LOG: the end record's weights digest.
weights() { python3 -c 'import json,sys; print([json.loads(l) for l in open(sys.argv[1])][-1]["weights_digest"])' "$1"; }

# 1. 60 steps on 2 ranks: equal digests after every step.
if run 2 --max-steps 60 --log d.jsonl && digests_equal d.jsonl && grep -q "equal" out.2; then
    echo "ok: 60 steps on 2 ranks, equal state digests after every step ($(grep 'State digests' out.2))"
else
    fail "60 steps on 2 ranks"; cat out.2
fi

# 2. An inf in rank 1's gradients at step 4 only: step 4 is skipped on both ranks, and they stay equal.
if run 2 --max-steps 8 --inject-nonfinite 4 --inject-nonfinite-rank 1 --log inf.jsonl && digests_equal inf.jsonl &&
    python3 -c '
import json, sys
steps = {r["step"]: r for r in map(json.loads, open("inf.jsonl")) if "step" in r}
sys.exit(0 if [s for s in steps if steps[s]["skipped"]] == [4] and steps[5]["loss_scale"] == steps[4]["loss_scale"] / 2 else 1)'
then
    echo "ok: an inf on rank 1 at step 4 skipped step 4 on both ranks and halved the scale"
else
    fail "inf on rank 1"; cat out.2
fi

# 3. Resumed with the same ranks: 3 + 3 steps end with the weights of 6 straight.
run 2 --max-steps 6 --log straight.jsonl || fail "6 straight steps"
run 2 --max-steps 3 --checkpoint a.ckpt --checkpoint-every 3 || fail "3 steps"
run 2 --max-steps 6 --resume a.ckpt --log resumed.jsonl || fail "resumed to 6"
if [ "$(weights straight.jsonl)" = "$(weights resumed.jsonl)" ]; then
    echo "ok: 3 + 3 steps on 2 ranks resume to the weights of 6 straight ($(weights resumed.jsonl))"
else
    fail "resume on 2 ranks: $(weights straight.jsonl) != $(weights resumed.jsonl)"
fi

# 4. 2 → 1 → 2 ranks: the checkpoint holds no rank count; the global order goes on.
run 2 --max-steps 4 --checkpoint b.ckpt --checkpoint-every 4 &&
    run 1 --max-steps 8 --resume b.ckpt --checkpoint b.ckpt --checkpoint-every 4 &&
    run 2 --max-steps 12 --resume b.ckpt --log b.jsonl && digests_equal b.jsonl &&
    grep -q "Finished after 12 steps" out.2
if [ $? -eq 0 ]; then
    echo "ok: 4 steps on 2 ranks, 4 on 1, 4 on 2 again"
else
    fail "2 -> 1 -> 2 ranks"; cat out.1 out.2
fi

# 5. Killed and resumed across 2 → 1 → 2 ranks: rank 1 of two killed once a checkpoint exists (mpirun ends the
# job within seconds), the run resumed on one rank and killed again once it has saved, then resumed on two
# ranks to the end.
# kill_after_save NP RANK: runs NP ranks (resuming k.ckpt if it exists) and SIGKILLs rank RANK once the
# checkpoint has been written anew; says how long the job took to end.
kill_after_save() {
    local np="$1" rank="$2" before="" resume=() victim="" pid
    [ -e k.ckpt ] && before=$(stat -c %Y.%s k.ckpt) && resume=(--resume k.ckpt) && sleep 1.1 # a new mtime
    "$mpiexec" --oversubscribe -np "$np" "$trainer" --quiet --epochs 50 --checkpoint k.ckpt --checkpoint-every 20 \
        "${resume[@]}" >out.kill 2>&1 &
    local job=$!
    for _ in $(seq 600); do
        [ -e k.ckpt ] && [ "$(stat -c %Y.%s k.ckpt)" != "$before" ] && break
        sleep 0.1
    done
    for pid in $(pgrep -f -- "--checkpoint k.ckpt"); do
        tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$rank" && victim=$pid
    done
    if [ -z "$victim" ] || [ "$(stat -c %Y.%s k.ckpt 2>/dev/null)" = "$before" ]; then
        fail "np $np: no new checkpoint or no rank $rank to kill"; kill -9 "$job" 2>/dev/null; return 1
    fi
    local start
    start=$(date +%s.%N)
    kill -9 "$victim"
    for _ in $(seq 300); do kill -0 "$job" 2>/dev/null || break; sleep 0.1; done
    local seconds
    seconds=$(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$start" "$(date +%s.%N)")
    if kill -0 "$job" 2>/dev/null; then
        fail "np $np: the job still runs 30 s after rank $rank was killed"; kill -9 "$job"; return 1
    elif wait "$job"; then
        fail "np $np: the job exited 0 after rank $rank was killed"; return 1
    fi
    echo "ok: $np ranks, rank $rank killed after a checkpoint; the job ended ${seconds} s later:" \
        "$(grep -m1 -i 'signal' out.kill)"
}
if kill_after_save 2 1 && kill_after_save 1 0; then
    if run 2 --epochs 50 --resume k.ckpt --max-steps 100 && grep -q "Finished after 100 steps" out.2; then
        echo "ok: resumed on 2 ranks from the last checkpoint to step 100"
    else
        fail "resume after the kills"; cat out.2
    fi
fi

# 6. Flags that need two ranks or an injection.
run 2 --max-steps 2 --inject-nonfinite 1 --inject-nonfinite-rank 2
if [ $? -eq 2 ] && grep -q "the run has 2 ranks" out.2; then echo "ok: --inject-nonfinite-rank 2 refused"; else
    fail "--inject-nonfinite-rank 2"; cat out.2; fi
run 2 --max-steps 2 --inject-nonfinite-rank 1
if [ $? -eq 2 ] && grep -q "needs --inject-nonfinite" out.2; then echo "ok: a rank without steps refused"; else
    fail "--inject-nonfinite-rank alone"; cat out.2; fi

[ "$failures" -eq 0 ] && echo "all passed" || echo "$failures failed"
exit $((failures > 0))
