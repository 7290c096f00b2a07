# Shared by scripts/test and scripts/train (sourced, not run).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# What building mixprec needs, as Debian 12 packages. oneDNN's CMake package wants OpenCL.
build_packages=(g++ cmake ninja-build ccache xtensor-dev libxsimd-dev libcereal-dev libopenblas-dev libopenblas-openmp-dev
                libdnnl-dev ocl-icd-opencl-dev zlib1g-dev libcli11-dev libbenchmark-dev nlohmann-json3-dev
                libopenmpi-dev openmpi-bin)
# What training needs besides: the data, and gnuplot for --plot.
data_packages=(dataset-fashion-mnist gnuplot-nox)

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

# Installs the packages that are missing; quick when all are there already.
need_packages() {
    local missing=() p
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    echo "mixprec: installing ${missing[*]}"
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# configure_and_build DIR [cmake options...] [-- targets...]: a Ninja build in DIR, two jobs per core.
configure_and_build() {
    local dir="$1" options=() targets=()
    shift
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do options+=("$1"); shift; done
    [ $# -gt 0 ] && shift && targets=("$@")
    cmake -S "$root" -B "$dir" -G Ninja "${options[@]}" >/dev/null
    # Nothing to build: say nothing (Ninja's "no work to do." is not what a user asked for).
    if cmake --build "$dir" ${targets[@]+--target "${targets[@]}"} -- -n 2>/dev/null |
        grep -qx 'ninja: no work to do\.'; then
        return 0
    fi
    cmake --build "$dir" --parallel "$(nproc)" ${targets[@]+--target "${targets[@]}"}
}
