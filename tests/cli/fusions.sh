#!/usr/bin/env bash
# Megatron-LM's kernel-fusion flags and the per-iteration fixed costs through
# the command line (docs/cost-model.md#kernel-fusions-and-per-iteration-costs):
# each --no-...-fusion flag slows the iteration and never speeds it up, a flag
# with no effect in the configuration is said so, trainsim config names the
# fusions turned off, the report's optimizer line lists its parts, --clip-grad 0
# drops the norm, MoE refuses the flags it does not model. Ends "N passed, N failed".
set -u
T=${TRAINSIM:-build/trainsim}
. "$(dirname "$0")/lib.sh"

base=(simulate --model megatron-1.7b --fp16 --attention-backend unfused --csv -)
iter() { "$T" "$@" 2>/dev/null | awk -F, '$2 == "iteration_time" { print $3 }'; }
t0=$(iter "${base[@]}")
check "default run: an iteration time" test -n "$t0"
for f in --no-bias-gelu-fusion --no-bias-dropout-fusion --no-masked-softmax-fusion \
    --no-gradient-accumulation-fusion "--no-rope-fusion --position-embedding-type rope"; do
    # shellcheck disable=SC2086 # the rope case is two flags
    t1=$(iter "${base[@]}" $f)
    check "$f: slower than the default ($t1 > $t0 ns)" test "${t1:-0}" -gt "$t0"
done
t1=$(iter "${base[@]}" --cross-entropy-loss-fusion)
check "--cross-entropy-loss-fusion: not slower ($t1 <= $t0 ns)" test "${t1:-0}" -le "$t0"
t1=$(iter "${base[@]}" --no-bias-swiglu-fusion)
check "--no-bias-swiglu-fusion on a GeLU model: no change" test "${t1:-0}" -eq "$t0"
expect_output "no effect here: --no-bias-swiglu-fusion" "$T" "${base[@]}" --no-bias-swiglu-fusion
expect_output "no effect here: --no-masked-softmax-fusion (flash/fused attention" \
    "$T" simulate --model megatron-1.7b --bf16 --attention-backend flash --no-masked-softmax-fusion
expect_output "fusions:               bias-dropout-add off (the rest Megatron-LM's defaults)" \
    "$T" config --model megatron-1.7b --no-bias-dropout-fusion
expect_output "ignored (cannot change performance): --no-persist-layer-norm" "$T" "${base[@]}" --no-persist-layer-norm

out=$("$T" simulate --model megatron-1.7b --fp16 2>&1)
check_sh "report: the optimizer step's parts (fp16, dynamic loss scale: no NaN check)" \
    '[[ "$out" == *"optimizer step          zero-grad "*", unscale "*", grad norm "*", adam "* && "$out" != *"nan check"* ]]'
out=$("$T" simulate --model megatron-1.7b --bf16 2>&1)
check_sh "bf16: the gradient buckets' NaN check, no unscale" \
    '[[ "$out" == *"zero-grad "*", nan check "*", grad norm "* && "$out" != *unscale* ]]'
out=$("$T" simulate --model megatron-1.7b --bf16 --no-check-for-nan-in-loss-and-grad --log-num-zeros-in-grad 2>&1)
check_sh "--no-check-for-nan-in-loss-and-grad, --log-num-zeros-in-grad: no nan check, a zero count" \
    '[[ "$out" != *"nan check"* && "$out" == *"zero count "* ]]'
out=$("$T" simulate --model megatron-1.7b --bf16 --clip-grad 0 2>&1)
check_sh "--clip-grad 0: no grad norm, no unscale with bf16" \
    '[[ "$out" == *"optimizer step          zero-grad "* && "$out" != *"grad norm"* && "$out" != *unscale* ]]'
t1=$(iter simulate --model megatron-1.7b --bf16 --clip-grad 0 --csv -)
t2=$(iter simulate --model megatron-1.7b --bf16 --csv -)
check "--clip-grad 0 is faster ($t1 < $t2 ns)" test "${t1:-0}" -lt "${t2:-0}"

expect_error 2 "--no-gradient-accumulation-fusion" "$T" simulate --model mixtral-8x7b --no-gradient-accumulation-fusion
finish
