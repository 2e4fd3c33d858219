#!/usr/bin/env bash
# make bench: the simulator's speed (figures, not assertions). Run from the
# repository root with BUILD set (make does both).
set -eu
BUILD=${BUILD:-build}
echo "== simulator speed (best of 5, one core)"
OPENBLAS_NUM_THREADS=1 "$BUILD"/tests/bench/bench_sim --reps 5
echo "== search speed: Megatron 530B on 5120 A100 80GB, B = 2520, whole space (target <= 10 s)"
OPENBLAS_NUM_THREADS=1 "$BUILD"/tests/bench/bench_search
echo "== search speed: DeepSeek-V3 on 2048 H100, B = 15360, whole space with the expert layouts (target <= 30 s on 2 cores),"
echo "   then its MoE shape without multi-latent attention"
OPENBLAS_NUM_THREADS=1 "$BUILD"/tests/bench/bench_search --case deepseek-v3 --threads 2
OPENBLAS_NUM_THREADS=1 "$BUILD"/tests/bench/bench_search --case deepseek-v3-shape --threads 2
echo "== network model speed: --full, every rank and flow (best of 2 runs, one core; BENCH_NET_ARGS=\"--quick\", \"--full-scale\" (8192 to 131072 GPUs, ~10 min) or \"--runs N\")"
OPENBLAS_NUM_THREADS=1 "$BUILD"/tests/bench/bench_net ${BENCH_NET_ARGS:-}
