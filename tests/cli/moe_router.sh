#!/usr/bin/env bash
# MoE router flags (sim/config/moe_flags.h, moe_block_ops' router ops in
# sim/model/moe.h): Megatron-LM launch scripts as users write them (a
# DeepSeek-V3-style one, Mixtral's) simulate with their router options shown;
# each option never makes the run faster; what is not modelled is refused
# naming the flag. Ends "N passed, N failed".
set -u
T=${TRAINSIM:-build/trainsim}
. "$(dirname "$0")/lib.sh"
S="$(dirname "$0")/../data/scripts"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# --- DeepSeek-V3's recipe flags: MLA, sigmoid scores, expert bias, top-k scaling, group-limited
# routing, seq_aux_loss 1e-4, the fp32 router, DeepEP, one MTP depth
$T simulate --megatron-script $S/deepseek_v3.sh >"$tmp/ds.out" 2>"$tmp/ds.err"; rc=$?
check "deepseek_v3.sh: simulate exits 0" test $rc -eq 0
$T simulate --megatron-script $S/deepseek_v3.sh --csv "$tmp/ds.csv" >/dev/null 2>/dev/null
check "deepseek_v3.sh: the router options in the report" \
    grep -qF "router                  sigmoid scores, fp32 GEMM, seq_aux_loss 0.0001, expert bias, top-k scaled x2.5" "$tmp/ds.out"
check "deepseek_v3.sh: the expert bias's per-iteration all-reduce in the optimizer step" \
    grep -qE "^optimizer step .*expert-bias all-reduce [0-9.]+ us" "$tmp/ds.out"
check "deepseek_v3.sh csv: the expert bias's all-reduce" grep -q "^iteration,optimizer_expert_bias_allreduce,[1-9]" "$tmp/ds.csv"
check "deepseek_v3.sh: numerics-only flags named as ignored" \
    grep -q "^ignored (cannot change performance):.*--moe-router-bias-update-rate.*--moe-per-layer-logging" "$tmp/ds.err"
for r in "moe_router_fp32,1" "moe_router_sigmoid,1" "moe_router_expert_bias,1" "moe_load_balancing_type,1" \
         "moe_aux_loss_coeff,0.0001" "moe_topk_scaling_factor,2.5"; do
    check "deepseek_v3.sh csv: $r" grep -q "^iteration,$r," "$tmp/ds.csv"
done

# --- Mixtral 8x7B as Megatron-LM's example writes it (aux_loss 1e-2)
$T simulate --megatron-script $S/mixtral_8x7b.sh --gpus 32 >"$tmp/mx.out" 2>/dev/null; rc=$?
check "mixtral_8x7b.sh: simulate exits 0" test $rc -eq 0
check "mixtral_8x7b.sh: the router options in the report" \
    grep -qF "router                  softmax scores, run-dtype GEMM, aux_loss 0.01" "$tmp/mx.out"

# --- metamorphic: each option never faster than without it (csv iteration_time)
M="--num-layers 8 --hidden-size 4096 --num-attention-heads 32 --group-query-attention --num-query-groups 8
   --ffn-hidden-size 14336 --swiglu --seq-length 4096 --micro-batch-size 1 --global-batch-size 64 --gpus 16 --bf16
   --gpu H100-SXM5-80GB --num-experts 64 --moe-router-topk 6 --moe-ffn-hidden-size 2048 --expert-model-parallel-size 8
   --moe-token-dispatcher-type alltoall -t 2 --sequence-parallel --moe-router-force-load-balancing"
it() { $T simulate $M "$@" --csv - 2>/dev/null | awk -F, '$1 == "iteration" && $2 == "iteration_time" {print $3}'; }
base=$(it)
check "baseline simulates" test -n "$base"
for opt in "--moe-router-dtype fp32" "--moe-aux-loss-coeff 1e-2" \
           "--moe-aux-loss-coeff 1e-2 --moe-router-load-balancing-type seq_aux_loss" \
           "--moe-aux-loss-coeff 1e-2 --moe-router-load-balancing-type global_aux_loss" "--moe-z-loss-coeff 1e-3" \
           "--moe-router-score-function sigmoid --moe-router-enable-expert-bias"; do
    v=$(it $opt)
    check_sh "$opt: never faster than without ($v vs $base)" '[ -n "$v" ] && [ "$v" -gt "$base" ]'
done
v=$(it --moe-router-pre-softmax)
check_sh "--moe-router-pre-softmax: the same time (the order only)" '[ "$v" = "$base" ]'
v=$(it --moe-aux-loss-coeff 1e-2 --moe-router-load-balancing-type none)
check_sh "load balancing none: no loss computed whatever the coefficient" '[ "$v" = "$base" ]'

# --- refused, naming the flag and what is valid
expect_error 2 "--moe-router-load-balancing-type sinkhorn: not modelled" $T simulate $M \
    --moe-router-load-balancing-type sinkhorn
expect_error 2 "--moe-router-dtype fp64: not modelled" $T simulate $M --moe-router-dtype fp64
expect_error 2 "--moe-router-enable-expert-bias needs --moe-router-score-function sigmoid" $T simulate $M \
    --moe-router-enable-expert-bias
expect_error 2 "--moe-aux-loss-coeff needs --num-experts" $T simulate --model megatron-1.7b --moe-aux-loss-coeff 1e-2
expect_error 2 "--moe-shared-expert-overlap needs shared experts" $T simulate $M --moe-shared-expert-overlap
expect_error 2 "--moe-layer-recompute with --recompute-granularity full: Megatron-core refuses it" $T simulate $M \
    --moe-layer-recompute --recompute-granularity full
finish
