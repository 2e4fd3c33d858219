#!/usr/bin/env bash
# Inference deployments on one 8-GPU node (A100 80GB and H100 SXM5): the
# Pareto front of output tokens/s per GPU against end-to-end latency found
# by `trainsim search --inference` for GPT-3 175B (the gpt3-175b preset),
# 40B and 20B (NeMo-Megatron's GPT-3 shapes: 48 layers, h 8192, 64 heads and
# 44 layers, h 6144, 48 heads; FFN 4h, sequence 2048, GPT-2 vocabulary),
# fp16 with weight-only int8/int4 and, on the H100, FP8. Workload: a static
# batch of 60 prompt tokens and 20 generated ones per sequence, batches
# 1..256, no latency limit. Writes pareto.csv (gpu, model and the search's
# columns for the deployments on the front), inference.png, inference.svg.
source "$(dirname "$0")/../common.sh"
cd "$(dirname "$0")"
tmpd=$(mktemp -d)
trap 'rm -rf "$tmpd"' EXIT
shape_40b=(--num-layers 48 --hidden-size 8192 --num-attention-heads 64 --seq-length 2048)
shape_20b=(--num-layers 44 --hidden-size 6144 --num-attention-heads 48 --seq-length 2048)
echo "gpu,model,tp,pp,precision,batch,ttft_ms,tpot_ms,latency_ms,throughput_per_gpu,memory_peak_gib,max_batch,meets_limits,pareto" >"$tmpd/pareto.csv"
for gpu in A100-SXM4-80GB H100-SXM5-80GB; do
    for model in 175b 40b 20b; do
        case $model in
        175b) m=(--model gpt3-175b) ;;
        40b) m=("${shape_40b[@]}") ;;
        20b) m=("${shape_20b[@]}") ;;
        esac
        "$TRAINSIM" search --inference "${m[@]}" --fp16 --gpu "$gpu" --gpus 8 --input-len 60 --output-len 20 \
            --batch-sizes 1,2,4,8,16,32,64,128,256 --out "$tmpd/$gpu-$model.csv" >/dev/null
        awk -F, -v g="$gpu" -v m="GPT-3 ${model^^}" 'NR > 1 && $12 == 1 { print g "," m "," $0 }' "$tmpd/$gpu-$model.csv" |
            sort -t, -k9,9g >>"$tmpd/pareto.csv"
    done
done
mv "$tmpd/pareto.csv" pareto.csv
render inference
