#!/usr/bin/env bash
# Multi-latent attention, multi-token prediction and group-limited routing
# (sim/model/mla.h, mtp.h, moe.h's moe_deepep_remote_nodes_grouped) in
# `trainsim simulate`: the deepseek-v3 preset simulates; MTP adds its
# depth's parameters to the last stage; group limits shorten DeepEP's
# dispatch and leave the alltoall dispatcher's as it is; what is not
# modelled is refused naming the flag.
# Ends "N passed, N failed".
set -u
T=${TRAINSIM:-build/trainsim}
. "$(dirname "$0")/lib.sh"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# csv NAME FLAGS...: simulate into $tmp/NAME.csv (exit 0 or 3: fits or not), fail loudly otherwise
csv() {
    local n=$1; shift
    $T simulate "$@" --csv "$tmp/$n.csv" >"$tmp/$n.txt" 2>"$tmp/$n.err"; local rc=$?
    if [ $rc -ne 0 ] && [ $rc -ne 3 ]; then bad "$n: exit $rc: $(head -c 300 "$tmp/$n.err")"; fi
}
val() { awk -F, -v s="$2" -v m="$3" '$1 == s && $2 == m { print $3 }' "$tmp/$1.csv"; }

D="--model deepseek-v3 --gpu H100-SXM5-80GB"
# ---- the preset simulates (it does not fit 80 GB at its layout: exit 3, the figures still printed)
$T simulate $D >"$tmp/ds.txt" 2>&1; rc=$?
check_sh "deepseek-v3 simulates (exit $rc: 3 = does not fit)" '[ $rc -eq 3 ] && grep -q "^iteration time" "$tmp/ds.txt"'
check_sh "deepseek-v3: 58 of 61 layers MoE, ep 64" 'grep -q "256 experts, top-8, 58 of 61 layers MoE; ep 64" "$tmp/ds.txt"'
csv ds $D
# weights per rank (bf16, t 1): rank 0 the word embedding 129280 x 7168, three dense layers (MLA 187107328, two
# RMSNorms, SwiGLU MLP 3 x 7168 x 18432) and one MoE layer's share (409157632: below); rank 1 four MoE layers
check_sh "deepseek-v3: rank 0 holds 3086286848 bf16 parameters, rank 1 1636630528" \
    '[ "$(val ds "rank 0" memory_at_peak_weights)" = $((3086286848 * 2)) ] &&
     [ "$(val ds "rank 1" memory_at_peak_weights)" = $((1636630528 * 2)) ]'
csv mtp $D --mtp-num-layers 1
# the last stage (rank 15, t = 1) gains one MoE layer's rank share (MLA 187107328, 2 RMSNorms 2 x 7168, router
# 7168 x 256, shared expert 3 x 7168 x 2048, 256 / 64 = 4 experts of 3 x 7168 x 2048), eh_proj 2 x 7168^2,
# 3 RMSNorms and the word embedding's copy 129280 x 7168: 1438618624 parameters, bf16 weights
w0=$(val ds "rank 15" memory_at_peak_weights); w1=$(val mtp "rank 15" memory_at_peak_weights)
check_sh "--mtp-num-layers 1: the last stage holds 1438618624 more bf16 parameters ($w1 - $w0)" \
    '[ $((w1 - w0)) -eq $((1438618624 * 2)) ]'
check_sh "--mtp-num-layers 1: the first stage's weights unchanged" \
    '[ "$(val ds "rank 0" memory_at_peak_weights)" = "$(val mtp "rank 0" memory_at_peak_weights)" ]'
f0=$(val ds iteration model_flops); f1=$(val mtp iteration model_flops)
# (one MoE layer, eh_proj and a logit layer of 129280 columns: between one and three layers' mean share)
check_sh "--mtp-num-layers 1 adds between one and three layers' share of the model FLOPs ($f0 -> $f1)" \
    'awk -v a="$f0" -v b="$f1" "BEGIN { exit !(b - a > a / 61 && b - a < 3 * a / 61) }"'
# ---- group-limited routing (the preset: 8 groups, 4 per token): DeepEP sends fewer RDMA copies than with
# every group allowed (group top-k 8 = no limit); the alltoall dispatcher's volume is the same
E="--moe-token-dispatcher-type flex --moe-enable-deepep --moe-router-force-load-balancing"
csv g4 $D $E
csv g8 $D $E --moe-router-num-groups 8 --moe-router-group-topk 8
a4=$(val g4 iteration exposed_ep); a8=$(val g8 iteration exposed_ep)
check_sh "DeepEP: 4 of 8 groups expose less all-to-all time than all 8 ($a4 < $a8 ns)" '[ "$a4" -lt "$a8" ]'
check_sh "the report gives DeepSeek-V3's remote nodes per token: 7 x 4/8 x (1 - C(96,8)/C(128,8)) = 3.175, 4.633 unlimited" \
    'grep -q "^group-limited routing   4 of 8 expert groups per token: 3.175 remote nodes per token (4.633 without the limit)" "$tmp/g4.txt" &&
     [ "$(val g4 iteration moe_remote_nodes | cut -c1-5)" = 3.175 ]'
check_sh "the report names MLA and the MTP depth" \
    'grep -q "^attention               multi-latent (q_lora 1536, kv_lora 512)" "$tmp/mtp.txt" &&
     grep -q "^multi-token prediction  1 depth on the last stage" "$tmp/mtp.txt" && [ "$(val mtp iteration mtp_num_layers)" = 1 ]'
csv t4 $D --moe-router-force-load-balancing
csv t8 $D --moe-router-force-load-balancing --moe-router-num-groups 8 --moe-router-group-topk 8
check_sh "alltoall: group limits leave the dispatch time as it is" \
    '[ "$(val t4 iteration exposed_ep)" = "$(val t8 iteration exposed_ep)" ]'
# ---- MLA's own recompute module drops q, k, v: less activation memory on the first stage
csv rc0 $D --recompute-modules core_attn
csv rc1 $D --recompute-modules core_attn mla_up_proj
m0=$(val rc0 "rank 0" memory_at_peak_activations); m1=$(val rc1 "rank 0" memory_at_peak_activations)
check_sh "--recompute-modules mla_up_proj lowers the activations ($m1 < $m0 bytes)" '[ "$m1" -lt "$m0" ]'
# ---- refusals, exit 2 naming the flag
G="--hidden-size 1024 --num-attention-heads 16 --seq-length 1024 --micro-batch-size 1 --bf16 --gpu H100-SXM5-80GB"
G4="$G --num-layers 4 --gpus 8"
expect_error 2 "MLA has no grouped-query attention" $T simulate $G4 --group-query-attention --num-query-groups 4 \
    --multi-latent-attention
expect_error 2 "--recompute-modules mla_up_proj: not modelled" $T simulate $G4 --recompute-granularity selective \
    --recompute-modules mla_up_proj
expect_error 2 "--mtp-num-layers with --use-torch-fsdp2: not modelled together" $T simulate $G4 --mtp-num-layers 1 \
    --use-torch-fsdp2
expect_error 2 "--multi-latent-attention with --context-parallel-size 2: not modelled" $T simulate $G4 \
    --multi-latent-attention --context-parallel-size 2 --use-flash-attn
expect_error 2 "--moe-router-num-groups 6 with DeepEP over 4 nodes: not modelled" $T simulate $G --num-layers 2 \
    --gpus 32 --num-experts 96 --expert-model-parallel-size 32 --moe-router-num-groups 6 --moe-router-group-topk 2 \
    --moe-token-dispatcher-type flex --moe-enable-deepep --moe-ffn-hidden-size 512 --global-batch-size 32
# trainsim infer and trainexec do not run MLA or MTP layers: refused, not run as the dense GPT
expect_error 2 "--multi-latent-attention: not modelled for inference" $T infer $G4 --multi-latent-attention
# (trainexec under mpirun, as tests/cli/trainexec.sh runs it; not built without MPI: not checked)
if [ -x "${TRAINEXEC:-}" ] && command -v mpirun >/dev/null; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    expect_error 2 "--mtp-num-layers: the executor's layers have no multi-latent attention or multi-token prediction" \
        timeout 120 mpirun --oversubscribe -np 1 "$TRAINEXEC" --num-layers 2 --hidden-size 64 --num-attention-heads 4 \
        --seq-length 16 --padded-vocab-size 128 --micro-batch-size 1 --global-batch-size 2 --mtp-num-layers 1
fi
# a dense model with MLA and MTP simulates
expect_output "iteration time" $T simulate $G4 --multi-latent-attention --q-lora-rank 256 --kv-lora-rank 128 \
    --mtp-num-layers 2 -p 2
finish
