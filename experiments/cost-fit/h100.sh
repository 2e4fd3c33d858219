#!/usr/bin/env bash
# Grid search of the H100 GEMM constants (sim/model/cost.c: H100_PEAK_FRAC,
# H100_FP8_PEAK_FRAC) against rows (a) and (b) of
# ../shared/reference/h100_training_calibration.csv, simulated end to end
# through `trainsim simulate` with the flags of tests/cli/h100_accuracy.sh and
# tests/cli/fp8.sh. Prints one line per grid point:
#   worst |error| of the three bf16 rows, the constants, the interleaving
#   (layers per chunk of the 70B and 314B rows), each row's error in %.
# Then the FP8 row's error for each FP8 fraction at the chosen bf16 one.
#   bash experiments/cost-fit/h100.sh     (after `make`; ~1 s per point)
# Each point recompiles sim/model/cost.c with the constants overridden (-D)
# and links build/trainsim's commands against it. The K-loop overhead is
# not searched: it is the A100 fit's per-tile time in H100 steps (cost.c).
set -euo pipefail
BUILD=${BUILD:-build}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
CFLAGS="-std=c11 -D_POSIX_C_SOURCE=200809L -O2 -I."
LIBS="-lgsl -lopenblas -lcsv -lm -lpthread"
build() { # PF KOVH FP8PF
    cc $CFLAGS -DH100_PEAK_FRAC="$1" -DH100_KLOOP_OVERHEAD_STEPS="$2" -DH100_OVERLAP_SLOWDOWN=0.4 \
        -DH100_FP8_PEAK_FRAC="$3" -c sim/model/cost.c -o "$tmp/cost.o"
    cc "$BUILD"/sim/cli/*.o "$tmp/cost.o" "$BUILD/libtrainsim.a" $LIBS -o "$tmp/trainsim"
}
C=(--micro-batch-size 1 --seq-length 4096 --max-position-embeddings 4096 --vocab-size 131072 --bf16
    --gpu H100-SXM5-80GB --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather
    --tp-comm-overlap --sequence-parallel)
tf() { TRAINSIM_DATA_DIR=topologies "$tmp/trainsim" simulate "$@" --csv - | awk -F, '$2 == "model_tflops_per_gpu" { print $3 }'; }
err() { awk -v g="$1" -v w="$2" 'BEGIN { printf "%.1f", 100 * (g / w - 1) }'; }
for pf in 0.55 0.56 0.565 0.57 0.58 0.59; do
    build "$pf" 1.16 0.66
    a=$(tf "${C[@]}" --num-layers 30 --hidden-size 4096 --num-attention-heads 32 --ffn-hidden-size 16384 --gpus 96 \
        -t 2 -p 1 --global-batch-size 192)
    for v in "21 6" "14 4" "7 3" "6 2" "6 1"; do
        set -- $v
        b=$(tf "${C[@]}" --num-layers 84 --hidden-size 8192 --num-attention-heads 64 --ffn-hidden-size 32768 \
            --gpus 768 -t 8 -p 2 --num-layers-per-virtual-pipeline-stage "$1" --global-batch-size 384)
        c=$(tf "${C[@]}" --num-layers 96 --hidden-size 16384 --num-attention-heads 128 --ffn-hidden-size 65536 \
            --gpus 3072 -t 8 -p 8 --num-layers-per-virtual-pipeline-stage "$2" --global-batch-size 1536)
        ea=$(err "$a" 465.9) eb=$(err "$b" 419.7) ec=$(err "$c" 474.4)
        awk -v a="$ea" -v b="$eb" -v c="$ec" -v k="pf $pf layers/chunk $1 $2" 'BEGIN {
            s = a < 0 ? -a : a; if ((b < 0 ? -b : b) > s) s = b < 0 ? -b : b; if ((c < 0 ? -c : c) > s) s = c < 0 ? -c : c
            printf "%.1f %s | 7.1B %s 70B %s 314B %s\n", s, k, a, b, c }'
    done
done | sort -g -r
R=(--model llama3-8b --gpu H100-SXM5-80GB --gpus 8 -t 1 -p 1 --micro-batch-size 1 --global-batch-size 128
    --recompute-granularity none --use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params
    --attention-dropout 0 --hidden-dropout 0 --fp8-format hybrid --fp8-recipe tensorwise)
for f in 0.565 0.60 0.62 0.64 0.66 0.68; do
    build 0.565 1.16 "$f"
    t=$(TRAINSIM_DATA_DIR=topologies "$tmp/trainsim" simulate "${R[@]}" --csv - | awk -F, '$2 == "tokens_per_s" { print $3 / 8 }')
    echo "fp8 pf $f | Llama 3 8B FP8 $(err "$t" 14451)% tokens/s per GPU"
done
