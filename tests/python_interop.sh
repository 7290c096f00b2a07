#!/usr/bin/env bash
# Runs tests/interop/python_interop.py (mixprec's safetensors and NumPy files against the Python packages
# that read and write them) with the Python in $MIXPREC_PYTHON, python3 by default: skipped (77) when it
# lacks safetensors or NumPy, or when Fashion-MNIST is not installed.
#
#   MIXPREC_PYTHON=~/venvs/mixprec-oracle/bin/python tests/python_interop.sh TRAINER WORKDIR
name=python_interop
source "$(dirname "${BASH_SOURCE[0]}")/script_helpers.sh"
fashion_mnist_or_skip
python="${MIXPREC_PYTHON:-python3}"
command -v "$python" >/dev/null || { echo "$name: no $python; skipped"; exit 77; }
exec "$python" "$(dirname "${BASH_SOURCE[0]}")/interop/python_interop.py" "$1" "$2"
