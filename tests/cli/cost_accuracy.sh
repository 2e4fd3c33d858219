#!/usr/bin/env bash
# Accuracy of `trainsim simulate` on the calibration set, through the real
# command line: the three Megatron-LM rows (../shared/reference/
# megatron_calibration.csv, Narayanan et al. 2021 Table 1) simulated with the
# presets megatron-1.7b, -39.1b, -310.1b (micro-batch 1 and 2 chunks: see
# docs/cost-model.md) at fp16 with unfused attention (--attention-backend
# unfused: the softmax on stored scores Megatron-LM ran in 2021, not today's
# flash default), as the 2021 runs used, must come
# within 3% (the accuracy the cost model is held to) of the published TFLOP/s per GPU in Megatron's
# count, with the 2021 code's synchronous tensor-parallel backward all-reduce
# (--no-async-tensor-model-parallel-allreduce). The published figures are read from the reference file when it is
# there, else the copy below (same numbers) is used. Ends "N passed, N failed".
set -u
T=${TRAINSIM:-build/trainsim}
REF=../shared/reference/megatron_calibration.csv
TOL=0.03
. "$(dirname "$0")/lib.sh"

published() { # $1 params_billion -> achieved_tflops_per_gpu
    if [ -r "$REF" ]; then
        awk -F, -v p="$1" '!/^#/ && $1 == p { print $9 }' "$REF"
    else
        case $1 in 1.7) echo 137 ;; 39.1) echo 138 ;; 310.1) echo 155 ;; esac
    fi
}

for p in 1.7 39.1 310.1; do
    want=$(published "$p")
    out=$($T simulate --model "megatron-${p}b" --fp16 --attention-backend unfused --no-async-tensor-model-parallel-allreduce --csv - 2>&1)
    rc=$?
    got=$(awk -F, '$2 == "megatron_tflops_per_gpu" { print $3 }' <<<"$out")
    if [ $rc -ne 0 ] || [ -z "$got" ] || [ -z "$want" ]; then
        bad "megatron-${p}b: exit $rc, predicted '$got', published '$want': $(head -n 5 <<<"$out")"
        continue
    fi
    if awk -v g="$got" -v w="$want" -v t="$TOL" 'BEGIN { e = g / w - 1; exit !(e <= t && e >= -t) }'; then
        ok "$(printf 'megatron-%sb: %.1f TFLOP/s per GPU predicted, %s published' "$p" "$got" "$want")"
    else
        bad "megatron-${p}b: $got TFLOP/s per GPU predicted, $want published (tolerance 3%)"
    fi
done
finish
