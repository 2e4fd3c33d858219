#!/usr/bin/env bash
# Megatron-core's overlap and FSDP flags through trainsim simulate: help with
# units and defaults, Megatron-LM's preconditions refused with exit 2, and
# the direction of each effect on one run (the closed forms are pinned by
# tests/unit/test_overlap.c). Ends "N passed, N failed".
set -u
T=${TRAINSIM:-build/trainsim}
. "$(dirname "$0")/lib.sh"

A="--num-layers 8 --hidden-size 2048 --num-attention-heads 16 --seq-length 2048 --micro-batch-size 1
   --global-batch-size 16 -t 4 -p 1 --gpus 16 --bf16"
help=$($T simulate --help 2>&1)
for f in "--ddp-bucket-size INT" "--overlap-param-gather" "--tp-comm-overlap" "--use-torch-fsdp2" \
         "--use-megatron-fsdp" "--data-parallel-sharding-strategy"; do
    check_sh "help lists $f" 'grep -qF -- "$f" <<<"$help"'
done
check_sh "help: bucket size unit and default" 'grep -qF "unit: parameters; default: max(40M, 1M x d)" <<<"$help"'
check_sh "help: sharding default" 'grep -A3 -- "--data-parallel-sharding-strategy" <<<"$help" | grep -qF "optim_grads_params"'

# preconditions and bad values
# shellcheck disable=SC2086
expect_error 2 "--overlap-param-gather needs --use-distributed-optimizer and --overlap-grad-reduce" \
    $T simulate $A --sequence-parallel --overlap-param-gather
# shellcheck disable=SC2086
expect_error 2 "--tp-comm-overlap needs --sequence-parallel at t = 4" $T simulate $A --tp-comm-overlap
# shellcheck disable=SC2086
expect_error 2 "--ddp-bucket-size: 0 is out of range" $T simulate $A --ddp-bucket-size 0
# shellcheck disable=SC2086
expect_error 2 "--use-torch-fsdp2 and --use-megatron-fsdp exclude each other" \
    $T simulate $A --use-torch-fsdp2 --use-megatron-fsdp
# shellcheck disable=SC2086
expect_error 2 "--data-parallel-sharding-strategy" $T simulate $A --use-megatron-fsdp \
    --data-parallel-sharding-strategy zero3

# field NAME OUTPUT: the number after NAME (first match)
num() { grep -m1 -F -- "$1" <<<"$2" | sed -E "s/^[^0-9]*([0-9.]+).*/\1/"; }
# shellcheck disable=SC2086
base=$($T simulate $A --sequence-parallel --use-distributed-optimizer --overlap-grad-reduce 2>&1)
# shellcheck disable=SC2086
tpo=$($T simulate $A --sequence-parallel --use-distributed-optimizer --overlap-grad-reduce --tp-comm-overlap 2>&1)
# shellcheck disable=SC2086
opg=$($T simulate $A --sequence-parallel --use-distributed-optimizer --overlap-grad-reduce \
    --overlap-param-gather 2>&1)
# shellcheck disable=SC2086
fsdp=$($T simulate $A --sequence-parallel --use-torch-fsdp2 2>&1)
it() { num "iteration time" "$1"; }
lt() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a < b) }'; }
check_sh "--tp-comm-overlap shortens the iteration ($(it "$tpo") < $(it "$base") ms)" 'lt "$(it "$tpo")" "$(it "$base")"'
check_sh "--overlap-param-gather shortens the iteration ($(it "$opg") < $(it "$base") ms)" \
    'lt "$(it "$opg")" "$(it "$base")"'
check_sh "--use-torch-fsdp2 shards the weights ($(num "  weights" "$fsdp") < $(num "  weights" "$base") GiB)" \
    'lt "$(num "  weights" "$fsdp")" "$(num "  weights" "$base")"'
check_sh "--use-torch-fsdp2 shards the gradients" 'lt "$(num "  gradients" "$fsdp")" "$(num "  gradients" "$base")"'
finish
