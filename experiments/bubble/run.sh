#!/usr/bin/env bash
# Bubble fraction vs number of micro-batches for the six schedules, from
# `trainsim schedule` timing (uniform op times T_F = T_B = T_W, p = 8,
# v = 2 for interleaved and ZB-V), next to the closed forms of
# ../shared/reference/formulas.md. Writes bubble.csv, bubble.png, bubble.svg.
source "$(dirname "$0")/../common.sh"
cd "$(dirname "$0")"
p=8
tmp=bubble.csv.tmp
echo "schedule,p,v,m,bubble_fraction,closed_form" >"$tmp"
for k in gpipe 1f1b interleaved zb-h1 zb-h2 zb-v; do
    v=1
    case $k in interleaved | zb-v) v=2 ;; esac
    for m in 8 16 24 32 48 64 96 128; do
        rate=$("$TRAINSIM" schedule --schedule "$k" -p $p -m $m -v $v \
            --time-f 1 --time-b 1 --time-w 1 --no-timeline | awk '/bubble rate/ { print $3 }')
        [ -n "$rate" ] || { echo "bubble: no bubble rate for $k m=$m" >&2; exit 1; }
        # closed forms (T_F = T_B = T_W = 1): idle / (idle + 3m)
        closed=$(awk -v k="$k" -v p=$p -v m=$m -v v=$v 'BEGIN {
            if (k == "gpipe" || k == "1f1b") idle = (p - 1) * 3
            else if (k == "interleaved") idle = (p - 1) * 3 / v
            else if (k == "zb-h1") idle = (p - 1) * 1
            else if (k == "zb-h2") idle = 0
            else idle = -1
            if (idle < 0) print ""; else printf "%.6f\n", idle / (idle + 3 * m) }')
        echo "$k,$p,$v,$m,$rate,$closed" >>"$tmp"
    done
done
mv "$tmp" bubble.csv
render bubble
