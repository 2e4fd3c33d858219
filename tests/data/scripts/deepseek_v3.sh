#!/bin/bash

# Pre-trains DeepSeek-V3 (671B) with Megatron-LM
# (modelled on the public DeepSeek-V3 recipe flags of Megatron-LM and
# Megatron-MoE-ModelZoo: MLA, 256 routed experts with sigmoid scores,
# aux-loss-free balancing plus a sequence-wise aux loss, group-limited
# routing, DeepEP, one MTP depth; trainsim's tests read it, nothing runs it)

export CUDA_DEVICE_MAX_CONNECTIONS=1

GPUS_PER_NODE=8
NNODES=${SLURM_NNODES:-"128"}
NODE_RANK=${RANK:-"0"}
MASTER_ADDR=${MASTER_ADDR:-"localhost"}
MASTER_PORT=${MASTER_PORT:-"6000"}

DATA_PATH=$1
TOKENIZER_MODEL=$2

DISTRIBUTED_ARGS=(
    --nproc_per_node $GPUS_PER_NODE
    --nnodes $NNODES
    --node_rank $NODE_RANK
    --master_addr $MASTER_ADDR
    --master_port $MASTER_PORT
)

MODEL_ARGS=(
    --use-mcore-models
    --disable-bias-linear
    --seq-length 4096
    --max-position-embeddings 4096
    --num-layers 61
    --hidden-size 7168
    --ffn-hidden-size 18432
    --num-attention-heads 128
    --kv-channels 128
    --init-method-std 0.006
    --attention-dropout 0.0
    --hidden-dropout 0.0
    --normalization RMSNorm
    --norm-epsilon 1e-6
    --position-embedding-type rope
    --rotary-base 10000
    --swiglu
    --untie-embeddings-and-output-weights
    --multi-latent-attention
    --q-lora-rank 1536
    --kv-lora-rank 512
    --qk-head-dim 128
    --qk-pos-emb-head-dim 64
    --v-head-dim 128
    --vocab-size 129280
    --mtp-num-layers 1
)

MOE_ARGS=(
    --num-experts 256
    --moe-layer-freq "([0]*3+[1]*58)"
    --moe-ffn-hidden-size 2048
    --moe-shared-expert-intermediate-size 2048
    --moe-router-topk 8
    --moe-router-num-groups 8
    --moe-router-group-topk 4
    --moe-router-score-function sigmoid
    --moe-router-enable-expert-bias
    --moe-router-bias-update-rate 1e-3
    --moe-router-topk-scaling-factor 2.5
    --moe-router-load-balancing-type seq_aux_loss
    --moe-aux-loss-coeff 1e-4
    --moe-router-dtype fp32
    --moe-grouped-gemm
    --moe-permute-fusion
    --moe-token-dispatcher-type flex
    --moe-enable-deepep
)

DATA_ARGS=(
    --tokenizer-type HuggingFaceTokenizer
    --tokenizer-model ${TOKENIZER_MODEL}
    --data-path $DATA_PATH
    --split 99,1,0
)

TRAINING_ARGS=(
    --micro-batch-size 1
    --global-batch-size 8192
    --lr 2.2e-4
    --min-lr 2.2e-5
    --lr-decay-style cosine
    --lr-warmup-iters 2000
    --train-iters 500000
    --weight-decay 0.1
    --adam-beta1 0.9
    --adam-beta2 0.95
    --clip-grad 1.0
    --bf16
    --recompute-granularity full
    --recompute-method uniform
    --recompute-num-layers 1
)

MODEL_PARALLEL_ARGS=(
    --tensor-model-parallel-size 1
    --pipeline-model-parallel-size 16
    --decoder-first-pipeline-num-layers 3
    --decoder-last-pipeline-num-layers 2
    --expert-model-parallel-size 64
    --expert-tensor-parallel-size 1
    --use-distributed-optimizer
    --overlap-grad-reduce
    --overlap-param-gather
)

LOGGING_ARGS=(
    --log-interval 1
    --moe-per-layer-logging
    --eval-interval 1000
    --eval-iters 10
)

torchrun ${DISTRIBUTED_ARGS[@]} pretrain_gpt.py \
    ${MODEL_ARGS[@]} \
    ${MOE_ARGS[@]} \
    ${DATA_ARGS[@]} \
    ${TRAINING_ARGS[@]} \
    ${MODEL_PARALLEL_ARGS[@]} \
    ${LOGGING_ARGS[@]}
