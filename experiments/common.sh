# Shared by the experiments' run.sh scripts (sourced, not run).
#   TRAINSIM   the trainsim binary (default: $ROOT/$BUILD/trainsim)
#   render NAME   draws NAME.gp (which must not set a terminal) into NAME.png and NAME.svg
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD:-build}
TRAINSIM=${TRAINSIM:-$ROOT/$BUILD/trainsim}
if [ ! -x "$TRAINSIM" ]; then
    echo "experiments: $TRAINSIM not built (run make first)" >&2
    exit 1
fi
if ! command -v gnuplot >/dev/null; then
    echo "experiments: gnuplot not found (./install.sh installs it)" >&2
    exit 1
fi
export LC_ALL=C

render() { # NAME: NAME.gp -> NAME.png, NAME.svg (same size, same fonts)
    gnuplot -e "set terminal pngcairo size 960,560 font 'DejaVu Sans,11'; set output '$1.png'" "$1.gp"
    gnuplot -e "set terminal svg size 960,560 font 'DejaVu Sans,11' background '#ffffff'; set output '$1.svg'" "$1.gp"
}

# Value of metric METRIC in scope SCOPE of a report CSV (scope,metric,value,unit).
metric() { # FILE SCOPE METRIC
    awk -F, -v s="$2" -v m="$3" '$1 == s && $2 == m { print $3; exit }' "$1"
}
