#!/usr/bin/env bash
# make plots: regenerate every plotted experiment's output CSVs and plots
# (PNG + SVG). An experiment is a folder experiments/NAME with a run.sh and
# at least one gnuplot file (*.gp); run.sh runs from the repository root and
# writes its outputs next to itself. Folders without a .gp file (tools such
# as cost-fit) are not plots and are skipped.
set -uo pipefail
cd "$(dirname "$0")/.."
failed=()
for d in experiments/*/; do
    d=${d%/}
    [ -f "$d/run.sh" ] || continue
    if ! ls "$d"/*.gp >/dev/null 2>&1; then
        echo "== $d: no plot (skipped)"
        continue
    fi
    start=$(date +%s)
    echo "== $d"
    if bash "$d/run.sh"; then
        echo "   done in $(($(date +%s) - start)) s"
    else
        echo "   FAILED: $d/run.sh" >&2
        failed+=("$d")
    fi
done
if [ ${#failed[@]} -gt 0 ]; then
    echo "plots: failed: ${failed[*]}" >&2
    exit 1
fi
echo "plots: every experiment regenerated"
