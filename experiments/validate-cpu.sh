#!/usr/bin/env bash
# validate-cpu.sh — close the calibration loop on this machine.
#
#   1. build trainsim and trainexec;
#   2. calibrate: `trainexec --microbench` (2 ranks) -> `trainsim calibrate`;
#   3. run the executor on a GPT of ~17M parameters with p = 2 (1F1B and
#      interleaved, 4 and 8 micro-batches) and the simulator on the same
#      configurations with the calibration file;
#   4. print measured vs predicted iteration time, bubble time and peak memory
#      per rank (targets: 10%, 20%, 5%), and plot the two timelines of each
#      configuration on top of each other (gnuplot).
#
# Usage: experiments/validate-cpu.sh            (about 2-5 minutes on 2 cores)
#   env OUT=DIR (default experiments/validate-cpu/out-tmp), BUILD=DIR,
#   ITERS=N measured iterations (2), WARMUP=N (1),
#   REUSE_MICROBENCH=1 keeps an existing OUT/microbench.csv.
#
# Simulator device: `--gpu cpu --fp32`, a calibrated-only device: compute
# and link costs (p2p / all-reduce latency + bandwidth) come entirely from
# the calibration file this script writes; the memory model counts fp32
# weights, gradients, activations and Adam state as the executor holds them.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
OUT=${OUT:-experiments/validate-cpu/out-tmp}
ITERS=${ITERS:-2}
WARMUP=${WARMUP:-1}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OPENBLAS_NUM_THREADS=1
TRAINSIM=$BUILD/trainsim
TRAINEXEC=$BUILD/trainexec
mpirun=(mpirun --oversubscribe -np 2)

echo "== build"
make -j2 BUILD="$BUILD" "$TRAINSIM" "$TRAINEXEC" >/dev/null
mkdir -p "$OUT"

SIM_GPU=cpu
DTYPE=fp32
PREC=(--fp32)

echo "== calibrate (trainexec --microbench on 2 ranks, then trainsim calibrate)"
if [ "${REUSE_MICROBENCH:-0}" != 1 ] || [ ! -s "$OUT/microbench.csv" ]; then
    "${mpirun[@]}" "$TRAINEXEC" --microbench "$OUT/microbench.csv" | tail -n 1
fi
"$TRAINSIM" calibrate --microbench "$OUT/microbench.csv" --gpu CPU --dtype "$DTYPE" \
    --output "$OUT/calibration.csv" --comm-output "$OUT/comm.csv"

MODEL=(--num-layers 4 --hidden-size 512 --num-attention-heads 8 --seq-length 64
       --padded-vocab-size 4096)
CONFIGS=("1f1b 4" "1f1b 8" "interleaved 4" "interleaved 8")

for cfg in "${CONFIGS[@]}"; do
    read -r sched m <<<"$cfg"
    name="$sched-m$m"
    layout=(--gpus 2 -t 1 -p 2 --micro-batch-size 1 --global-batch-size "$m" --schedule "$sched"
            --recompute-granularity none --sequence-parallel=false)
    [ "$sched" = interleaved ] && layout+=(--num-layers-per-virtual-pipeline-stage 1)
    echo "== $name: executor ($WARMUP warm-up + $ITERS measured iterations)"
    "${mpirun[@]}" "$TRAINEXEC" "${MODEL[@]}" "${layout[@]}" --iterations "$ITERS" \
        --warmup "$WARMUP" --report-csv "$OUT/$name.exec.csv" --trace "$OUT/$name.exec.json" \
        --ops-csv "$OUT/$name.ops.csv" | grep -E '^iteration time'
    echo "== $name: simulator"
    "$TRAINSIM" simulate "${MODEL[@]}" "${layout[@]}" "${PREC[@]}" --gpu "$SIM_GPU" \
        --calibration "$OUT/calibration.csv" --csv "$OUT/$name.sim.csv" \
        --trace "$OUT/$name.sim.json" | grep -E '^iteration time'
done

# ---------------------------------------------------------------- table
pct() { awk -v a="$1" -v b="$2" 'BEGIN { if (b == 0) print "n/a"; else printf "%+.1f%%", 100 * (b - a) / a }'; }
within() { awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { d = (b - a) / a; if (d < 0) d = -d; print (d <= t ? "ok" : "off") }'; }
simval() { awk -F, -v s="$2" -v k="$3" '$1 == s && $2 == k { print $3 }' "$1"; }

table="$OUT/table.txt"
{
    echo "Measured (trainexec, fp32, this CPU) vs predicted (trainsim simulate --calibration)."
    echo "GPT: ${MODEL[*]}; p=2, t=d=1, b=1; times in ms (mean of $ITERS iterations), memory in MiB."
    echo "Bubble: measured = iteration - compute actions (F/B/I/W/REDUCE_GRAD/OPTIM), mean over ranks;"
    echo "        predicted = the simulator's idle time, mean over ranks."
    echo "Targets: iteration 10%, bubble 20%, memory 5% (simulator memory model: $DTYPE)."
    echo "cpu: CPU time the ranks got, % of the iteration (mean over ranks; pipeline waits sleep in"
    echo "     20 us polls, so a rank's idle time is not CPU time)."
    printf '%-15s %4s | %9s %9s %8s %3s | %8s %8s %8s %3s | %8s %8s %8s %3s | %8s %8s %8s %3s\n' \
        config cpu iter_meas iter_pred err ok bub_meas bub_pred err ok mem0_me mem0_pr err ok \
        mem1_me mem1_pr err ok
    for cfg in "${CONFIGS[@]}"; do
        read -r sched m <<<"$cfg"
        name="$sched-m$m"
        ex="$OUT/$name.exec.csv" sm="$OUT/$name.sim.csv"
        it_m=$(awk -F, 'NR == 2 { printf "%.3f", $6 / 1e6 }' "$ex")
        bub_m=$(awk -F, 'NR > 1 { s += $8; n++ } END { printf "%.3f", s / n / 1e6 }' "$ex")
        it_p=$(awk -v v="$(simval "$sm" iteration iteration_time)" 'BEGIN { printf "%.3f", v / 1e6 }')
        bub_p=$(awk -v v="$(simval "$sm" iteration bubble_time)" 'BEGIN { printf "%.3f", v / 1e6 }')
        cpu=$(awk -F, 'NR > 1 { s += $15 / $6; n++ } END { printf "%.0f%%", 100 * s / n }' "$ex")
        line=$(printf '%-15s %4s | %9s %9s %8s %3s | %8s %8s %8s %3s' "$name" "$cpu" "$it_m" "$it_p" \
            "$(pct "$it_m" "$it_p")" "$(within "$it_m" "$it_p" 0.10)" "$bub_m" "$bub_p" \
            "$(pct "$bub_m" "$bub_p")" "$(within "$bub_m" "$bub_p" 0.20)")
        for r in 0 1; do
            mm=$(awk -F, -v r="$r" 'NR > 1 && $1 == r { printf "%.2f", $9 / 1048576 }' "$ex")
            mp=$(awk -v v="$(simval "$sm" "rank $r" memory_peak)" 'BEGIN { printf "%.2f", v / 1048576 }')
            line+=$(printf ' | %8s %8s %8s %3s' "$mm" "$mp" "$(pct "$mm" "$mp")" \
                "$(within "$mm" "$mp" 0.05)")
        done
        echo "$line"
    done
} >"$table"
echo
cat "$table"

# ---------------------------------------------------------------- timelines
# One bar per compute action (measured, above each rank's line) and per
# compute task (predicted, below), coloured forward / backward / optimizer.
for cfg in "${CONFIGS[@]}"; do
    read -r sched m <<<"$cfg"
    name="$sched-m$m"
    awk -F, 'NR > 1 && $6 == "action" && ($7 == "F" || $7 == "B" || $7 == "I" || $7 == "W" || $7 == "OPTIM") {
                 c = ($7 == "F") ? 1 : ($7 == "OPTIM") ? 3 : 2
                 printf "%d %.6f %.6f %d\n", $1, $12 / 1e6, $13 / 1e6, c }' \
        "$OUT/$name.ops.csv" >"$OUT/$name.meas.dat"
    grep '"ph": "X"' "$OUT/$name.sim.json" | grep '"tid": 0,' |
        sed -E 's/.*"pid": ([0-9]+).*"cat": "([a-z]+)".*"ts": ([0-9.]+), "dur": ([0-9.]+).*/\1 \2 \3 \4/' |
        awk '{ c = ($2 == "forward") ? 1 : ($2 == "optimizer") ? 3 : 2
               printf "%d %.6f %.6f %d\n", $1, $3 / 1e3, ($3 + $4) / 1e3, c }' >"$OUT/$name.pred.dat"
    gnuplot <<EOF
set terminal pngcairo size 1400,420 font ",10"
set output "$OUT/$name.timeline.png"
set title "$name: measured (upper bar of each rank) vs predicted (lower bar), p = 2"
set xlabel "time (ms)"
set ytics ("rank 0" 0, "rank 1" 1)
set yrange [1.6:-0.6]
set key outside right
set style fill solid 0.8 noborder
set palette maxcolors 3
set palette defined (1 "#4477aa", 2 "#ee6677", 3 "#228833")
unset colorbox
plot "$OUT/$name.meas.dat" using ((\$2+\$3)/2):(\$1-0.17):((\$3-\$2)/2):(0.14):4 with boxxyerror lc palette title "measured", \
     "$OUT/$name.pred.dat" using ((\$2+\$3)/2):(\$1+0.17):((\$3-\$2)/2):(0.14):4 with boxxyerror lc palette title "predicted"
EOF
done
echo
echo "outputs in $OUT: table.txt, *.timeline.png (blue forward, red backward, green optimizer),"
echo "  *.exec.json / *.sim.json (Perfetto traces), calibration.csv, comm.csv"
