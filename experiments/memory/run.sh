#!/usr/bin/env bash
# Memory per pipeline stage, stacked by category, for no / selective / full
# recomputation with and without sequence parallelism: GPT-3 175B on 1024
# A100 80GB, t = 8, p = 16, b = 1, 1F1B (the layout of Korthikanti et al.
# 2022). Each variant's per-rank breakdown at its peak comes from
# `trainsim simulate --csv`; overheads_gib is the memory besides tensors
# (CUDA context, NCCL buffers, cuBLAS workspace, allocator fragmentation:
# docs/simulator.md#memory); data_batch_gib the data loader's batch tensors
# on the GPU (a fraction of a MiB here: not drawn). Writes memory.csv (long form), activations.csv
# (stage 0 activations and their reduction against no recomputation without
# sequence parallelism), memory.png, memory.svg. Unfused attention (s x s
# scores kept), as in Korthikanti et al.'s runs, set explicitly: the flash
# default keeps none and has no 5x to show.
source "$(dirname "$0")/../common.sh"
cd "$(dirname "$0")"
tmpd=$(mktemp -d)
trap 'rm -rf "$tmpd"' EXIT
variants="none:false selective:false full:false none:true selective:true full:true"
echo "variant,stage,weights_gib,gradients_gib,optimizer_gib,activations_gib,p2p_gib,overheads_gib,data_batch_gib,total_gib" >"$tmpd/memory.csv"
for v in $variants; do
    rc=${v%%:*} sp=${v##*:}
    name="$rc$([ "$sp" = true ] && echo '+SP' || true)"
    "$TRAINSIM" simulate --model gpt3-175b --gpus 1024 --tensor-model-parallel-size 8 \
        --pipeline-model-parallel-size 16 --schedule 1f1b --micro-batch-size 1 \
        --global-batch-size 1536 --recompute-granularity "$rc" --sequence-parallel="$sp" --attention-backend unfused \
        --csv "$tmpd/$name.csv" >/dev/null || [ $? -eq 3 ] # 3: does not fit (no recomputation), drawn too
    awk -F, -v name="$name" '
        $1 ~ /^rank / && $2 ~ /^memory_at_peak_/ {
            r = substr($1, 6); k = substr($2, 16); g[r, k] = $3 / 1073741824; if (r + 0 > n) n = r + 0 }
        END { for (r = 0; r <= n; r++) {
            o = g[r, "cuda-context"] + g[r, "nccl-buffers"] + g[r, "cublas-workspace"] + g[r, "allocator-fragmentation"]
            t = g[r, "weights"] + g[r, "gradients"] + g[r, "optimizer"] + g[r, "activations"] + g[r, "p2p-buffers"] + o \
                + g[r, "data-batch"]
            printf "%s,%d,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f\n", name, r, g[r, "weights"], g[r, "gradients"],
                   g[r, "optimizer"], g[r, "activations"], g[r, "p2p-buffers"], o, g[r, "data-batch"], t } }' \
        "$tmpd/$name.csv" >>"$tmpd/memory.csv"
done
awk -F, 'NR > 1 && $2 == 0 { a[$1] = $6; order[++n] = $1 }
    END { print "variant,stage0_activations_gib,reduction_vs_none"
          for (i = 1; i <= n; i++) printf "%s,%.3f,%.2f\n", order[i], a[order[i]], a["none"] / a[order[i]] }' \
    "$tmpd/memory.csv" >"$tmpd/activations.csv"
mv "$tmpd/memory.csv" memory.csv
mv "$tmpd/activations.csv" activations.csv
render memory
