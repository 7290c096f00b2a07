#!/usr/bin/env bash
# Records the golden files of tests/golden/loss_scale from the libraries themselves, then replays them
# through mixprec and prints the conformance table. Run from the repository root after a build:
#
#   tests/conformance/run.sh [anchor ...]        # default: every anchor
#   tests/conformance/run.sh gradients           # the gradient oracle (gradient_oracle.py) alone
#
# Each group of anchors gets its own virtual environment (their pins conflict: cerebras-pytorch wants
# torch 2.4), made on first use under $MIXPREC_CONFORMANCE_VENVS (default ~/venvs/mixprec-conformance),
# outside the source tree, from the pinned tests/conformance/requirements/<group>.txt. About 17 GB
# installed in all; the build and scripts/test never need any of it.
set -euo pipefail
shopt -s inherit_errexit # a failure inside $(...) stops the script too

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
venvs=${MIXPREC_CONFORMANCE_VENVS:-$HOME/venvs/mixprec-conformance}
build=${MIXPREC_BUILD:-$root/build}
python=${MIXPREC_BASE_PYTHON:-python3}

group_of() {
    case $1 in
    torch | torch_optimizer | deepspeed | megatron | gradients) echo torch ;;
    keras | jmp) echo jax ;;
    tf_keras) echo tf ;;
    cerebras | cerebras_cbfloat16) echo cerebras ;;
    mindspore | mindspore_manager) echo mindspore ;;
    *) echo "unknown anchor '$1'" >&2; return 1 ;;
    esac
}

venv() { # the group's environment, made on first use and filled again when its pins change
    local dir=$venvs/$1
    [[ -x $dir/bin/python ]] || "$python" -m venv "$dir" >&2
    if ! cmp -s "$here/requirements/$1.txt" "$dir/requirements.txt"; then
        echo "== installing tests/conformance/requirements/$1.txt into $dir" >&2
        "$dir/bin/pip" install --quiet -r "$here/requirements/$1.txt" >&2
        cp "$here/requirements/$1.txt" "$dir/requirements.txt"
    fi
    echo "$dir/bin/python"
}

anchors=("$@")
[[ ${#anchors[@]} -gt 0 ]] ||
    anchors=(torch torch_optimizer deepspeed megatron jmp keras tf_keras cerebras cerebras_cbfloat16 mindspore
        mindspore_manager)

if [[ ! -x $build/tests/conformance/conformance_replay ]]; then
    echo "build mixprec first (cmake -S . -B build -G Ninja && cmake --build build), or set MIXPREC_BUILD" >&2
    exit 1
fi

cd "$root"
for anchor in "${anchors[@]}"; do
    group=$(group_of "$anchor")
    py=$(venv "$group")
    case $anchor in
    gradients)
        echo "== the gradient oracle"
        "$py" tests/conformance/gradient_oracle.py --build "$build/tests/conformance/conformance_gradients"
        exit ;;
    torch_optimizer)
        echo "== recording torch (optimizer steps)"
        "$py" tests/conformance/record_optimizer.py torch ;;
    *)
        echo "== recording $anchor"
        KERAS_BACKEND=jax TF_CPP_MIN_LOG_LEVEL=3 "$py" tests/conformance/record.py "$anchor" ;;
    esac
done

"$build/tests/conformance/conformance_replay" tests/golden/loss_scale
"$build/tests/conformance/conformance_replay_optimizer" tests/golden/loss_scale_optimizer
