#!/usr/bin/env bash
# The calibration set, predicted vs published: Megatron-LM's weak-scaling
# rows on A100s (published.csv) simulated by `trainsim sweep input.csv`.
# Writes results.csv (the sweep's output), comparison.csv, table.md and
# calibration.png / .svg (bars: published vs predicted TFLOP/s per GPU,
# Megatron's FLOP count).
source "$(dirname "$0")/../common.sh"
cd "$(dirname "$0")"
rm -f results.csv
"$TRAINSIM" sweep input.csv --out results.csv --threads 2 --quiet >/dev/null
awk -F, '
    FNR == 1 { file++ }
    file == 1 && $1 !~ /^#/ && $1 != "model" { pub[$1] = $7; g[$1] = $3; t[$1] = $4; p[$1] = $5; b[$1] = $6; order[++n] = $1 }
    file == 2 && FNR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
    file == 2 { pred[$col["model"]] = $col["megatron_tflops_per_gpu"]; st[$col["model"]] = $col["status"] }
    END {
        print "model,gpus,tp,pp,global_batch_size,published_tflops_per_gpu,predicted_tflops_per_gpu,error_pct"
        for (i = 1; i <= n; i++) { m = order[i]
            if (st[m] != "ok") { print "calibration: " m " failed in the sweep" > "/dev/stderr"; exit 1 }
            printf "%s,%d,%d,%d,%d,%.1f,%.1f,%+.1f\n", m, g[m], t[m], p[m], b[m], pub[m], pred[m], 100 * (pred[m] - pub[m]) / pub[m] } }' \
    published.csv results.csv >comparison.csv.tmp
mv comparison.csv.tmp comparison.csv
awk -F, 'NR == 1 { print "| model | GPUs | t | p | B | published TFLOP/s/GPU | predicted | error |"; print "|---|---|---|---|---|---|---|---|"; next }
    { printf "| %s | %s | %s | %s | %s | %s | %s | %s%% |\n", $1, $2, $3, $4, $5, $6, $7, $8 }' comparison.csv >table.md
render calibration
