#!/usr/bin/env bash
# trainsim set-up for Debian 12: install what is missing (apt), build, and run
# the built-in default prediction (GPT-3 175B on 1024 A100 80GB GPUs in DGX
# A100 nodes on an HDR InfiniBand fat tree).
#   ./install.sh              install, build, predict
#   ./install.sh --deps-only  install only (used by CI)
set -euo pipefail
cd "$(dirname "$0")"

deps_only=0
for a in "$@"; do
    case "$a" in
    --deps-only) deps_only=1 ;;
    -h|--help) sed -n '2,7p' "$0"; exit 0 ;;
    *) echo "install.sh: unknown option '$a' (valid: --deps-only, --help)" >&2; exit 2 ;;
    esac
done

# Build tools and the libraries the project uses (DEVELOPERS.md: dependencies);
# cppcheck, clang-tidy and clang-format for make lint and the code's format;
# clang (with libFuzzer) for make fuzz.
packages=(build-essential pkg-config libgsl-dev libcsv-dev libcriterion-dev libopenblas-dev graphviz
          libopenmpi-dev openmpi-bin gnuplot cppcheck clang-tidy clang-format clang)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "install.sh: installing ${missing[*]}"
    sudo=""
    if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
else
    echo "install.sh: all packages present"
fi
[ "$deps_only" -eq 1 ] && exit 0

make -j"$(nproc)"
echo
echo "install.sh: default prediction (build/trainsim simulate --help lists every flag)"
exec build/trainsim simulate
