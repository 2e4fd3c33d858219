#!/usr/bin/env bash
# An iteration's timeline as a per-rank Gantt chart, rendered from the
# Chrome/Perfetto trace `trainsim simulate --trace` writes: Megatron's
# 18.4B GPT on 64 A100 80GB, t = 8, p = 4, interleaved 1F1B with v = 2
# (5 layers per chunk), b = 1, B = 16 (8 micro-batches). Writes trace.json,
# gantt.csv (rank, stream, start/end in ms, category), timeline.png / .svg.
source "$(dirname "$0")/../common.sh"
cd "$(dirname "$0")"
"$TRAINSIM" simulate --model megatron-18.4b --gpus 64 --tensor-model-parallel-size 8 \
    --pipeline-model-parallel-size 4 --schedule interleaved --num-layers-per-virtual-pipeline-stage 5 \
    --micro-batch-size 1 --global-batch-size 16 --recompute-granularity selective \
    --trace trace.json >/dev/null
# One "X" event per line: {"ph": "X", "pid": R, "tid": S, "name": "...", "cat": "C", "ts": US, "dur": US, ...}
awk 'BEGIN { print "rank,stream,start_ms,end_ms,category,name,mb" }
    /"ph": "X"/ {
        match($0, /"pid": [0-9]+/); r = substr($0, RSTART + 7, RLENGTH - 7)
        match($0, /"tid": [0-9]+/); s = substr($0, RSTART + 7, RLENGTH - 7)
        match($0, /"name": "[^"]*"/); n = substr($0, RSTART + 9, RLENGTH - 10)
        match($0, /"cat": "[^"]*"/); c = substr($0, RSTART + 8, RLENGTH - 9)
        match($0, /"ts": [0-9.]+/); t = substr($0, RSTART + 6, RLENGTH - 6)
        match($0, /"dur": [0-9.]+/); d = substr($0, RSTART + 7, RLENGTH - 7)
        match($0, /"mb": -?[0-9]+/); m = substr($0, RSTART + 6, RLENGTH - 6)
        printf "%s,%s,%.6f,%.6f,%s,%s,%s\n", r, s, t / 1000, (t + d) / 1000, c, n, m }' trace.json >gantt.csv.tmp
[ "$(wc -l <gantt.csv.tmp)" -gt 10 ] || { echo "timeline: no events in trace.json" >&2; exit 1; }
mv gantt.csv.tmp gantt.csv
rm -f trace.json # large; gantt.csv keeps what the plot needs
render timeline
