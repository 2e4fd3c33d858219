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
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

# expect CMD... ; uses $want_rc and $want_msg
expect() {
    local out rc
    out=$("$@" 2>&1 >/dev/null); rc=$?
    if [ "$rc" -ne "$want_rc" ]; then bad "$*: exit $rc, want $want_rc ($out)"; return; fi
    if ! grep -qF -- "$want_msg" <<<"$out"; then bad "$*: no '$want_msg' in: $out"; return; fi
    ok
}

have_gpu=0
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then have_gpu=1; fi

if [ $have_gpu = 0 ]; then
    want_rc=2 want_msg="no NVIDIA GPU answers" expect bash experiments/gpu-calibrate.sh "$(mktemp -d)"
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
    want_rc=1 want_msg="valid are sweep, layer, nccl" expect "$C" bogus --out /dev/null
    want_rc=1 want_msg="--out FILE is required" expect "$C" sweep
    want_rc=1 want_msg="--tensor-model-parallel-size" expect "$C" layer --out x --tensor-model-parallel-size 0
    want_rc=1 want_msg="--hidden-sise" expect "$C" layer --out x --hidden-sise 4
    if [ $have_gpu = 0 ]; then
        want_rc=3 want_msg="no CUDA device" expect "$C" sweep --out "$(mktemp -u)"
    fi
fi
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
