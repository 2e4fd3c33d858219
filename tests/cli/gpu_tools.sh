#!/usr/bin/env bash
# The GPU tools' behaviour where it can be checked without a GPU:
# experiments/gpu-calibrate.sh refuses to run (exit 2, a clear message) when no
# NVIDIA GPU answers, and cudacal (built with CUDA) answers bad input with a
# message and a non-zero exit and a device-less machine with exit 3.
# On a machine with a GPU the no-GPU cases are skipped (not counted).
# Ends "N passed, N failed".
set -u
BUILD=${BUILD:-build}
C="$BUILD/cudacal"
. "$(dirname "$0")/lib.sh"

have_gpu=0
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then have_gpu=1; fi

if [ $have_gpu = 0 ]; then
    expect_error 2 "no NVIDIA GPU answers" bash experiments/gpu-calibrate.sh "$(mktemp -d)"
fi

if [ -x "$C" ]; then
    out=$("$C" --help 2>&1); rc=$?
    missing=""
    for f in --out --gpu --repeats --hidden-size --num-attention-heads --ffn-hidden-size \
             --seq-length --micro-batch-size --tensor-model-parallel-size --fused-attention \
             --gemm-tflops --min-bytes --max-bytes; do
        grep -qF -- "$f" <<<"$out" || missing="$missing $f"
    done
    if [ $rc -eq 0 ] && [ -z "$missing" ] && grep -qF "unit: TFLOP/s" <<<"$out"; then ok
    else bad "cudacal --help: exit $rc, missing:$missing"; fi
    expect_error 1 "valid are sweep, layer, nccl" "$C" bogus --out /dev/null
    expect_error 1 "--out FILE is required" "$C" sweep
    expect_error 1 "--tensor-model-parallel-size" "$C" layer --out x --tensor-model-parallel-size 0
    expect_error 1 "--hidden-sise" "$C" layer --out x --hidden-sise 4
    if [ $have_gpu = 0 ]; then
        expect_error 3 "no CUDA device" "$C" sweep --out "$(mktemp -u)"
    fi
fi
finish
