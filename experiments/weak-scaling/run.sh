#!/usr/bin/env bash
# Weak scaling: TFLOP/s per GPU vs GPU count for Megatron-LM's GPT family
# (1.7B on 32 GPUs to 1T on 3072; the presets' layouts) by `trainsim sweep`,
# with the three calibration rows' published figures for reference.
# Writes results.csv, scaling.csv, scaling.png / .svg.
source "$(dirname "$0")/../common.sh"
cd "$(dirname "$0")"
rm -f results.csv
"$TRAINSIM" sweep input.csv --out results.csv --threads 2 --quiet >/dev/null
awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; print "model,gpus,megatron_tflops_per_gpu,model_tflops_per_gpu,mfu,iteration_s,status"; next }
    { printf "%s,%s,%s,%s,%s,%s,%s\n", $col["model"], $col["gpus"], $col["megatron_tflops_per_gpu"],
             $col["model_tflops_per_gpu"], $col["mfu"], $col["iteration_s"], $col["status"] }' results.csv >scaling.csv.tmp
if grep -q ',error$' scaling.csv.tmp; then
    echo "weak-scaling: some rows failed (see results.csv, column error)" >&2
    exit 1
fi
mv scaling.csv.tmp scaling.csv
render scaling
