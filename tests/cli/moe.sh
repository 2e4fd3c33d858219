#!/usr/bin/env bash
# Mixture-of-experts flags (sim/config/moe_flags.h): Megatron-core's layout
# and routing rules answered with exit 2 and a message naming the flags and
# what would be valid; what the simulator does not model refused naming the
# flag; MoE runs simulated (sim/core/plan_moe.h) and checked against each
# other and the closed forms.
# Ends "N passed, N failed".
set -u
T=${TRAINSIM:-build/trainsim}
. "$(dirname "$0")/lib.sh"

# Mixtral-8x7B's shape (Mistral AI's config.json) on 64 GPUs
M="--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --group-query-attention --num-query-groups 8
   --ffn-hidden-size 14336 --swiglu --seq-length 4096 --micro-batch-size 1 --gpus 64 --bf16 --gpu H100-SXM5-80GB"
moe() { expect_error 2 "$1" $T simulate $M --num-experts 8 "${@:2}"; }

moe "--num-experts 8 is not a multiple of --expert-model-parallel-size 3 (give a divisor of 8)" \
    --expert-model-parallel-size 3
moe "--expert-model-parallel-size 8 with --tensor-model-parallel-size 2 needs --sequence-parallel" \
    --expert-model-parallel-size 8 -t 2
moe "--gpus 64 is not a multiple of p x expert-tensor-parallel x expert-model-parallel = 1 x 3 x 8 = 24" \
    --expert-model-parallel-size 8 --expert-tensor-parallel-size 3
moe "--moe-router-topk 9 is more than --num-experts 8 (valid: 1 to 8)" --moe-router-topk 9
moe "--num-experts 8 is not a multiple of --moe-router-num-groups 3" --moe-router-num-groups 3 --moe-router-group-topk 1
moe "--moe-router-num-groups needs --moe-router-group-topk" --moe-router-num-groups 2
moe "--moe-router-group-topk 3 is more than --moe-router-num-groups 2" --moe-router-num-groups 2 \
    --moe-router-group-topk 3
moe "--moe-router-topk 8 is more than the 4 experts of --moe-router-group-topk 1 groups (valid: at most 4)" \
    --moe-router-num-groups 2 --moe-router-group-topk 1 --moe-router-topk 8
moe "--moe-expert-capacity-factor works only with --moe-token-dispatcher-type alltoall (given: allgather)" \
    --moe-expert-capacity-factor 1.25
moe "--moe-pad-expert-input-to-capacity needs --moe-expert-capacity-factor" --moe-pad-expert-input-to-capacity
moe "--moe-enable-deepep works only with --moe-token-dispatcher-type flex (given: alltoall)" --moe-enable-deepep \
    --moe-token-dispatcher-type alltoall
moe "--moe-layer-freq [1,0]*16: not modelled (valid: an integer N >= 1" --moe-layer-freq '[1,0]*16'
moe "--moe-layer-freq ([0]*3+[1]*28): the pattern has 31 layers, --num-layers is 32" --moe-layer-freq '([0]*3+[1]*28)'
moe "--moe-token-dispatcher-type: " --moe-token-dispatcher-type a2a
expect_error 2 "--expert-model-parallel-size 2 needs --num-experts" $T simulate $M --expert-model-parallel-size 2
expect_error 2 "--moe-router-topk needs --num-experts" $T simulate $M --moe-router-topk 2
expect_error 2 "--q-lora-rank needs --multi-latent-attention" $T simulate $M --q-lora-rank 1536
expect_error 2 "--multi-latent-attention: not modelled" $T simulate $M --multi-latent-attention
# valid layouts the simulator does not model: exit 2 naming the flag
A="--moe-token-dispatcher-type alltoall"
moe "--moe-token-dispatcher-type allgather: not modelled (the MoE block is simulated with the alltoall dispatcher" \
    --expert-model-parallel-size 8 -t 2 --sequence-parallel
moe "--moe-token-dispatcher-type flex --moe-enable-deepep: not modelled" --expert-model-parallel-size 4 \
    --moe-layer-freq '([0]*1+[1]*31)' --moe-token-dispatcher-type flex --moe-enable-deepep
moe "--expert-tensor-parallel-size 2: not modelled (expert tensor parallelism; its default is --tensor-model-parallel-size: give --expert-tensor-parallel-size 1)" \
    --expert-model-parallel-size 8 -t 2 --sequence-parallel $A
moe "--moe-router-num-groups 2: not modelled" --moe-router-num-groups 2 --moe-router-group-topk 1 $A
moe "--moe-expert-capacity-factor 0.5: not modelled below 1" --moe-expert-capacity-factor 0.5 $A
moe "--context-parallel-size 2 with --num-experts: not modelled together" --context-parallel-size 2 $A \
    --use-flash-attn
moe "--use-torch-fsdp2 with --num-experts: not modelled" --use-torch-fsdp2 $A
moe "--overlap-moe-expert-parallel-comm" --overlap-moe-expert-parallel-comm $A
moe "--moe-routing-skew" --moe-routing-skew -1 $A
expect_error 2 "--moe-routing-skew needs --num-experts" $T simulate $M --moe-routing-skew 0.5
expect_error 2 "--recompute-modules moe_act: not modelled without --num-experts" $T simulate $M \
    --recompute-granularity selective --recompute-modules moe_act
# help: every MoE flag with its default
h=$($T simulate --help 2>&1)
check_sh "help lists --num-experts and --expert-tensor-parallel-size with defaults" \
    '[[ "$h" == *"--num-experts"*"default: none (dense)"* && "$h" == *"--expert-tensor-parallel-size"*"default: t;"* ]]'
finish
