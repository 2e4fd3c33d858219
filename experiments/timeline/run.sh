#!/usr/bin/env bash
# An iteration's timeline as a per-rank Gantt chart, rendered from the
# Chrome/Perfetto trace `trainsim simulate --trace` writes: Megatron's
# 18.4B GPT on 64 A100 80GB, t = 8, p = 4, interleaved 1F1B with v = 2
# (5 layers per chunk), b = 1, B = 16 (8 micro-batches), no recomputation.
# Writes gantt.csv (rank, stream, start/end in ms, category, tasks merged)
# and timeline.png / .svg; the trace itself is not kept (large).
source "$(dirname "$0")/../common.sh"
cd "$(dirname "$0")"
"$TRAINSIM" simulate --model megatron-18.4b --gpus 64 --tensor-model-parallel-size 8 \
    --pipeline-model-parallel-size 4 --schedule interleaved --num-layers-per-virtual-pipeline-stage 5 \
    --micro-batch-size 1 --global-batch-size 16 --recompute-granularity none \
    --trace trace.json >/dev/null
# One "X" event per line: {"ph": "X", "pid": R, "tid": S, "name": "...", "cat": "C", "ts": US, "dur": US, ...}.
# Tasks back to back on one stream with the same category are merged into
# one bar when the gap between them is under 1 ms (about a pixel of the
# plot), which keeps gantt.csv and the SVG small.
awk '/"ph": "X"/ {
        match($0, /"pid": [0-9]+/); r = substr($0, RSTART + 7, RLENGTH - 7)
        match($0, /"tid": [0-9]+/); s = substr($0, RSTART + 7, RLENGTH - 7)
        match($0, /"cat": "[^"]*"/); c = substr($0, RSTART + 8, RLENGTH - 9)
        match($0, /"ts": [0-9.]+/); t = substr($0, RSTART + 6, RLENGTH - 6)
        match($0, /"dur": [0-9.]+/); d = substr($0, RSTART + 7, RLENGTH - 7)
        printf "%s,%s,%.6f,%.6f,%s\n", r, s, t / 1000, (t + d) / 1000, c }' trace.json |
    sort -t, -k1,1n -k2,2n -k3,3g |
    awk -F, 'BEGIN { print "rank,stream,start_ms,end_ms,category,tasks" }
        function flush() { if (n) printf "%s,%s,%.6f,%.6f,%s,%d\n", r, s, t0, t1, c, n }
        { if (n && $1 == r && $2 == s && $5 == c && $3 - t1 < 1.0) { t1 = $4; n++; next }
          flush(); r = $1; s = $2; t0 = $3; t1 = $4; c = $5; n = 1 }
        END { flush() }' >gantt.csv.tmp
[ "$(wc -l <gantt.csv.tmp)" -gt 10 ] || { echo "timeline: no events in trace.json" >&2; exit 1; }
mv gantt.csv.tmp gantt.csv
rm -f trace.json # large; gantt.csv keeps what the plot needs
render timeline
