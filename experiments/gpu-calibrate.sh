#!/usr/bin/env bash
# gpu-calibrate.sh — measure this machine's NVIDIA GPU(s) for the simulator.
#
#   experiments/gpu-calibrate.sh [OUTDIR]        (default OUTDIR: experiments/gpu-calibration)
#
# Env: BUILD (default build), GPU_KIND (the gpu column: a topologies/gpus.csv
# name such as H100-SXM5-80GB; default: nvidia-smi's name with '-' for spaces),
# REPEATS (timed runs per measurement, default 20), MPIRUN (default mpirun).
#
# Writes, for GPU kind K:
#   OUTDIR/calib-K.csv        bf16 GEMMs (GPT-3 layer shapes at t = 1..8, attention
#                             batches, squares), device copies, launch overhead:
#                             the calibration CSV of sim/model/calib.h (calib_read, calib_fit)
#   OUTDIR/layer-K.csv        one GPT-3 175B layer shard (h 12288, 96 heads, t = 8,
#                             seq 2048, micro-batch 1) forward + backward in bf16,
#                             unfused (cuBLAS batched-GEMM attention) and fused
#                             attention: achieved TFLOP/s against the measured bf16
#                             GEMM rate (goal >= 60%)
#   OUTDIR/exec-K-report.csv  trainexec --backend cuda on GPU 0: a small GPT (4 layers,
#   OUTDIR/exec-K-ops.csv     h 1024, 16 heads, seq 1024, 1f1b, 8 micro-batches) trained
#                             through the executor's CUDA backend: per-rank iteration
#                             time, bubble, peak memory, and per-action (--op-trace: per-op)
#                             spans; op spans are host times around a sync per op
#   OUTDIR/nccl-K.csv         with 2+ GPUs: NCCL all-reduce, all-gather,
#                             reduce-scatter, send/recv (bus bandwidth, checked results)
# Exits 2 with a message when no NVIDIA GPU answers, 3 when the build has no CUDA.
set -euo pipefail
BUILD=${BUILD:-build}
OUT=${1:-experiments/gpu-calibration}
REPEATS=${REPEATS:-20}
MPIRUN=${MPIRUN:-mpirun}

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "gpu-calibrate: no NVIDIA GPU answers 'nvidia-smi -L' on this machine: nothing was" >&2
    echo "measured. Run this script on a machine with one or more NVIDIA GPUs (A100, H100, H200)." >&2
    exit 2
fi
ngpu=$(nvidia-smi -L | grep -c '^GPU ' || true)
name=$(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 | head -n 1)
KIND=${GPU_KIND:-$(echo "$name" | tr ' ' '-')}
echo "gpu-calibrate: $ngpu GPU(s), device 0: $name -> kind '$KIND'"

if [ ! -x "$BUILD/cudacal" ]; then
    echo "gpu-calibrate: building $BUILD/cudacal"
    make -j"$(nproc)" BUILD="$BUILD" "$BUILD/cudacal" >/dev/null || true
fi
if [ ! -x "$BUILD/cudacal" ]; then
    echo "gpu-calibrate: $BUILD/cudacal could not be built: this build has no CUDA backend" >&2
    echo "(make's summary must show '✓ CUDA': nvcc, cuBLASLt, NCCL and MPI are needed)." >&2
    exit 3
fi
mkdir -p "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

echo "== 1/4 microbenchmark sweep (bf16 GEMMs, memory, launch) -> $OUT/calib-$KIND.csv"
"$BUILD/cudacal" sweep --gpu "$KIND" --repeats "$REPEATS" --out "$OUT/calib-$KIND.csv"
gemm_tflops=$(awk -F, 'NR > 1 && $2 == "gemm" && $10 + 0 > best { best = $10 + 0 } END { print best + 0 }' \
    "$OUT/calib-$KIND.csv")
echo "   best bf16 GEMM rate: $gemm_tflops TFLOP/s"

echo "== 2/4 one GPT-3 175B layer shard (t = 8) forward + backward -> $OUT/layer-$KIND.csv"
tmp_u=$(mktemp) tmp_f=$(mktemp)
trap 'rm -f "$tmp_u" "$tmp_f"' EXIT
"$BUILD/cudacal" layer --gpu "$KIND" --repeats "$REPEATS" --gemm-tflops "$gemm_tflops" --out "$tmp_u"
"$BUILD/cudacal" layer --gpu "$KIND" --repeats "$REPEATS" --gemm-tflops "$gemm_tflops" \
    --fused-attention --out "$tmp_f"
{ cat "$tmp_u"; tail -n +2 "$tmp_f"; } >"$OUT/layer-$KIND.csv.tmp" && mv "$OUT/layer-$KIND.csv.tmp" "$OUT/layer-$KIND.csv"

echo "== 3/4 the executor on the GPU (trainexec --backend cuda) -> $OUT/exec-$KIND-*.csv"
if [ -x "$BUILD/trainexec" ]; then
    "$MPIRUN" -np 1 "$BUILD/trainexec" --backend cuda --num-layers 4 --hidden-size 1024 \
        --num-attention-heads 16 --seq-length 1024 --padded-vocab-size 51200 \
        --micro-batch-size 1 --global-batch-size 8 --iterations 5 --warmup 2 --op-trace \
        --report-csv "$OUT/exec-$KIND-report.csv" --ops-csv "$OUT/exec-$KIND-ops.csv"
else
    echo "   skipped: $BUILD/trainexec was not built (needs MPI)"
fi

echo "== 4/4 NCCL collectives"
if [ "$ngpu" -ge 2 ]; then
    "$MPIRUN" -np "$ngpu" "$BUILD/cudacal" nccl --gpu "$KIND" --repeats "$REPEATS" \
        --out "$OUT/nccl-$KIND.csv"
else
    echo "   skipped: one GPU (collectives need 2+)"
fi
echo "gpu-calibrate: done: $OUT (calib-$KIND.csv follows sim/model/calib.h's schema)"
