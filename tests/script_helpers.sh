# Shared by the ctest shell scripts (source it after setting `name`): a failure message and exit, the guard
# that skips a test when Fashion-MNIST is not installed, and a fresh work folder.

fail() {
    echo "$name: FAILED: $*" >&2
    exit 1
}

fashion_mnist_or_skip() { # exits 77 (skipped) without the dataset, or fails when MIXPREC_REQUIRE_DATA is set
    [ -e /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] && return 0
    [ -n "${MIXPREC_REQUIRE_DATA:-}" ] && fail "Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)"
    echo "$name: Fashion-MNIST is not installed; skipped"
    exit 77
}

fresh_dir() { # fresh_dir DIR [SUBDIR...]: DIR emptied, then DIR/SUBDIR... created
    rm -rf "$1"
    local dir="$1"
    shift
    mkdir -p "$dir" "${@/#/$dir/}" || fail "cannot create $dir"
}
