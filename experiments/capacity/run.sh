#!/usr/bin/env bash
# Capacity planning: GPT-3 175B trained on 300B tokens (Brown et al. 2020)
# with global batch 1536, on 512..4096 A100, H100 and H200 GPUs. For each
# GPU kind and count, `trainsim search` finds the fastest layout that fits
# among interleaved 1F1B layouts with b = 1 (what the published GPT-3 runs
# use; the default space is about 10x larger and takes minutes per point);
# time to train = 300e9 / (1536 x 2048) iterations x its iteration time,
# GPU-hours = time x GPUs. The Pareto front keeps the points no other point
# beats on both time and GPU-hours. Writes capacity.csv, capacity.png/.svg
# (days and GPU-hours vs GPUs) and pareto.png/.svg (GPU-hours vs days).
source "$(dirname "$0")/../common.sh"
cd "$(dirname "$0")"
tokens=300e9 batch=1536 seq=2048
tmpd=$(mktemp -d)
trap 'rm -rf "$tmpd"' EXIT
echo "gpu,gpus,iteration_s,tflops_per_gpu,mfu,days,gpu_hours,tp,pp,dp,vp,micro_batch_size,schedule,sequence_parallel,recompute,distributed_optimizer" >"$tmpd/points.csv"
for gpu in A100-SXM4-80GB H100-SXM5-80GB H200-SXM-141GB; do
    for n in 512 1024 2048 4096; do
        "$TRAINSIM" search --model gpt3-175b --gpus $n --global-batch-size $batch --gpu $gpu \
            --micro-batch-sizes 1 --schedules interleaved --max-virtual-pipeline-stages 4 \
            --no-recompute-block --top 1 --quiet --out "$tmpd/s.csv" >/dev/null
        awk -F, -v gpu=$gpu -v n=$n -v T=$tokens -v B=$batch -v s=$seq '
            NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
            $col["rank"] == "1" {
                it = $col["iteration_s"]; days = T / (B * s) * it / 86400
                printf "%s,%d,%s,%s,%s,%.3f,%.0f,%s,%s,%s,%s,%s,%s,%s,%s,%s\n", gpu, n, it,
                       $col["tflops_per_gpu"], $col["mfu"], days, days * 24 * n, $col["tp"], $col["pp"],
                       $col["dp"], $col["vp"], $col["micro_batch_size"], $col["schedule"],
                       $col["sequence_parallel"], $col["recompute"], $col["distributed_optimizer"] }' \
            "$tmpd/s.csv" >>"$tmpd/points.csv"
    done
done
# Pareto front over (days, GPU-hours): by days, keep each point cheaper than every faster one.
{
    head -n 1 "$tmpd/points.csv" | sed 's/$/,pareto/'
    tail -n +2 "$tmpd/points.csv" | sort -t, -k6,6g -k7,7g |
        awk -F, 'BEGIN { best = -1 } { p = (best < 0 || $7 < best); if (p) best = $7; print $0 "," p }' |
        sort -t, -k1,1 -k2,2n
} >"$tmpd/capacity.csv"
mv "$tmpd/capacity.csv" capacity.csv
render capacity
render pareto
