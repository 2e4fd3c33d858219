#!/usr/bin/env bash
# Fit of --moe-routing-skew's default (MOE_ROUTING_SKEW_DEFAULT,
# sim/config/moe_flags.h) to row (c) of
# ../shared/reference/h100_training_calibration.csv: Qwen3-235B-A22B on 256
# H100s, published 19.7 s per step. The row does not state its routing
# balance; the routing model's Zipf exponent is the one free parameter left,
# every other constant of the run being fitted elsewhere (the H100 GEMM
# constants to rows (a): h100.sh) or a datasheet's. Procedure:
#   bisection of the skew on [0, 1] (the step grows with the skew: more
#   skew never faster, tests/unit/test_moe.c) until the interval is below
#   1e-4, simulating the row's flags (docs/moe.md, tests/cli/moe.sh) with
#   `trainsim simulate --moe-routing-skew S`; the fitted skew is the
#   interval's midpoint rounded to 2 significant digits (finer digits would
#   fit the one row's noise, not the router).
# Prints each bisection step (skew, step in s), then
#   fit SKEW step S s (E% vs 19.7 s) causal-model-tflops-per-gpu F (E% vs 245)
# for the rounded skew.
# The preset sets --qk-layernorm (the row's Qwen3 has q and k norms): fitted
# with it, 0.18 (crossing at 0.1796); without it the fit was 0.2 (0.1963).
#   bash experiments/cost-fit/moe-skew.sh     (after `make`; ~1 s)
# TRAINSIM overrides the binary (default build/trainsim).
set -euo pipefail
cd "$(dirname "$0")/../.."
T=${TRAINSIM:-${BUILD:-build}/trainsim}
export LC_ALL=C
Q=(--model qwen3-235b-a22b --gpu H100-SXM5-80GB --num-virtual-stages-per-pipeline-rank 4
    --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split --use-distributed-optimizer
    --overlap-grad-reduce --overlap-param-gather --use-flash-attn --moe-grouped-gemm
    --moe-token-dispatcher-type flex --moe-enable-deepep --recompute-granularity selective
    --recompute-modules layernorm moe_act)
PUBLISHED_STEP_S=19.7
PUBLISHED_TFLOPS=245
GPUS=256
run() { # SKEW -> "step_ns causal_flops"
    "$T" simulate "${Q[@]}" --moe-routing-skew "$1" --csv - 2>/dev/null |
        awk -F, '$1 == "iteration" && $2 == "iteration_time" { t = $3 }
                 $1 == "iteration" && $2 == "model_flops_causal" { f = $3 }
                 END { if (t == "" || f == "") exit 1; print t, f }'
}
lo=0
hi=1
read -r step _ < <(run "$hi")
if ! awk -v s="$step" -v p="$PUBLISHED_STEP_S" 'BEGIN { exit !(s > p * 1e9) }'; then
    echo "moe-skew: skew $hi gives $step ns, not above the published $PUBLISHED_STEP_S s: nothing to bisect" >&2
    exit 1
fi
while awk -v a="$lo" -v b="$hi" 'BEGIN { exit !(b - a > 1e-4) }'; do
    mid=$(awk -v a="$lo" -v b="$hi" 'BEGIN { printf "%.6f", (a + b) / 2 }')
    read -r step _ < <(run "$mid")
    awk -v m="$mid" -v s="$step" 'BEGIN { printf "skew %s step %.3f s\n", m, s / 1e9 }'
    if awk -v s="$step" -v p="$PUBLISHED_STEP_S" 'BEGIN { exit !(s > p * 1e9) }'; then
        hi=$mid
    else
        lo=$mid
    fi
done
fit=$(awk -v a="$lo" -v b="$hi" 'BEGIN { printf "%.2g", (a + b) / 2 }')
read -r step flops < <(run "$fit")
awk -v k="$fit" -v s="$step" -v f="$flops" -v p="$PUBLISHED_STEP_S" -v pt="$PUBLISHED_TFLOPS" -v g="$GPUS" 'BEGIN {
    tf = f / (s * 1e-9) / g / 1e12
    printf "fit %s step %.3f s (%+.1f%% vs %s s) causal-model-tflops-per-gpu %.1f (%+.1f%% vs %s)\n",
        k, s / 1e9, 100 * (s / (p * 1e9) - 1), p, tf, 100 * (tf / pt - 1), pt }'
