#!/usr/bin/env bash
# make plots: regenerate every experiment's output CSVs and plots (PNG + SVG).
# Each experiments/NAME/run.sh writes its outputs next to itself.
set -uo pipefail
cd "$(dirname "$0")"
failed=()
for d in */; do
    d=${d%/}
    [ -f "$d/run.sh" ] || continue
    start=$(date +%s)
    echo "== experiments/$d"
    if bash "$d/run.sh"; then
        echo "   done in $(( $(date +%s) - start )) s"
    else
        echo "   FAILED: experiments/$d/run.sh" >&2
        failed+=("$d")
    fi
done
if [ ${#failed[@]} -gt 0 ]; then
    echo "plots: failed: ${failed[*]}" >&2
    exit 1
fi
echo "plots: every experiment regenerated"
