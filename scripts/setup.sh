# Sourced by scripts/demo and scripts/test: installs missing Debian packages and configures
# the meson build directory. Safe to run again: it does nothing when all is in place.

NABLA_PACKAGES=(build-essential meson ninja-build pkg-config libsleef-dev libcunit1-dev
                libjansson-dev zlib1g-dev libcsv-dev valgrind gnuplot-nox clang libclang-rt-14-dev fortunes
                libopenmpi-dev openmpi-bin python3-torch python3-sklearn ccache)

nabla_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

ensure_packages() {
    local missing=()
    for pkg in "$@"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" ||
            missing+=("$pkg")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    echo "nabla: installing ${missing[*]}"
    local sudo=()
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null || { echo "nabla: need root or sudo to install ${missing[*]}" >&2; return 1; }
        sudo=(sudo)
    fi
    export DEBIAN_FRONTEND=noninteractive
    "${sudo[@]}" apt-get update -qq
    "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

# The OpenBLAS kernel sets worth timing PyTorch with on this CPU, one a line: Debian's default
# detection, and the newest set the CPU has, forced (OPENBLAS_CORETYPE; the default misdetects
# some CPUs, and forcing a set the CPU lacks dies with "Illegal instruction").
openblas_coretypes() {
    echo default
    if grep -qw avx512f /proc/cpuinfo; then echo SkylakeX
    elif grep -qw avx2 /proc/cpuinfo; then echo Haswell; fi
}

# configure_build DIR [meson options...]: configure DIR once; when it exists, apply the options
# (so a directory made before an option was added gets it).
configure_build() {
    local dir=$1
    shift
    if [ ! -f "$nabla_root/$dir/build.ninja" ]; then
        meson setup "$nabla_root/$dir" "$nabla_root" "$@"
    elif [ $# -gt 0 ]; then
        meson configure "$nabla_root/$dir" "$@"
    fi
}

# ensure_build DIR [meson options...]: configure DIR, then build it.
ensure_build() {
    configure_build "$@"
    meson compile -C "$nabla_root/$1"
}

# ensure_build_targets DIR TARGET... -- [meson options...]: configure DIR, build only the targets.
ensure_build_targets() {
    local dir=$1 targets=()
    shift
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do targets+=("$1"); shift; done
    [ $# -gt 0 ] && shift
    configure_build "$dir" "$@"
    meson compile -C "$nabla_root/$dir" "${targets[@]}"
}

# ensure_test_build DIR SKIPPED_SUITES -- [meson options...]: configure DIR, then build only what
# its tests outside the space-separated suites need (meson introspect's test dependencies; no
# benchmarks or fuzzers), for `meson test --no-rebuild`.
ensure_test_build() {
    local dir=$1 skipped=$2
    shift 2
    [ "${1:-}" = "--" ] && shift
    configure_build "$dir" "$@"
    local targets
    mapfile -t targets < <(meson introspect "$nabla_root/$dir" --tests --targets |
        python3 -c '
import json, os, sys
info, skipped, build = json.load(sys.stdin), set(sys.argv[1].split()), sys.argv[2]
files = {t["id"]: t["filename"] for t in info["targets"]}
needed = set()
for test in info["tests"]:
    if not skipped & {s.split(":")[-1] for s in test["suite"]}:
        for dep in test["depends"]:
            needed.update(os.path.relpath(f, build) for f in files.get(dep, []))
print("\n".join(sorted(needed)))' "$skipped" "$nabla_root/$dir")
    ninja -C "$nabla_root/$dir" "${targets[@]}"
}
