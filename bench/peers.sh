#!/usr/bin/env bash
# Makes (or updates) the virtual environment of the PyTorch peer that bench/compare_torch.py and
# bench/torch_fashion.py run against, and prints its python's path on stdout (everything else goes to stderr):
#
#   py=$(bench/peers.sh)
#   "$py" bench/torch_fashion.py --models mlp --modes fp16,fp16+compile
#
# The environment lives under $MIXPREC_BENCH_VENV (default ~/venvs/mixprec-bench), outside the source tree;
# it is made with Debian's Python (/usr/bin/python3 -m venv; python3-venv is installed with apt if missing)
# from the pins of bench/requirements-torch.txt, and filled again only when those pins change. About 5 GB
# installed (PyPI's torch wheel brings CUDA libraries); the build and scripts/test never need any of it.
set -euo pipefail
shopt -s inherit_errexit # a failure inside $(...) stops the script too

here=$(cd "$(dirname "$0")" && pwd)
venv=${MIXPREC_BENCH_VENV:-$HOME/venvs/mixprec-bench}
python=${MIXPREC_BASE_PYTHON:-/usr/bin/python3}
requirements=$here/requirements-torch.txt
# shellcheck source-path=SCRIPTDIR source=../scripts/common.sh
source "$here/../scripts/common.sh" # need_packages; sets $root

case ${1:-} in
-h | --help) sed -n '2,11p' "$0"; exit 0 ;;
"") ;;
*) echo "bench/peers.sh: takes no arguments (set MIXPREC_BENCH_VENV to choose the directory)" >&2; exit 2 ;;
esac

case $(realpath -m "$venv")/ in
"$(realpath "$root")"/*)
    echo "bench/peers.sh: $venv is inside the source tree; choose a MIXPREC_BENCH_VENV outside $root" >&2
    exit 1 ;;
esac

if [[ ! -x $venv/bin/python ]]; then
    if ! "$python" -c 'import ensurepip' 2>/dev/null; then # Debian ships venv's pip bootstrap apart
        need_packages python3-venv >&2
    fi
    echo "== making the virtual environment $venv" >&2
    mkdir -p "$(dirname "$venv")"
    "$python" -m venv "$venv" >&2
fi
if ! cmp -s "$requirements" "$venv/requirements-torch.txt"; then
    echo "== installing bench/requirements-torch.txt into $venv" >&2
    "$venv/bin/pip" install --quiet -r "$requirements" >&2
    cp "$requirements" "$venv/requirements-torch.txt"
fi
echo "$venv/bin/python"
