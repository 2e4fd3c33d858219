#!/bin/bash
# A small GPT-3-style launch script in the form of Megatron-LM's examples,
# holding only flags that trainsim reads (tests/cli/mscript.sh): 2 nodes of
# 8 GPUs, t = 2, p = 4, d = 2.

export CUDA_DEVICE_MAX_CONNECTIONS=1

GPUS_PER_NODE=8
NUM_NODES=${NUM_NODES:-2}
MASTER_ADDR=${MASTER_ADDR:-localhost}
MASTER_PORT=6000
NODE_RANK=$SLURM_NODEID
WORLD_SIZE=$(($GPUS_PER_NODE*$NUM_NODES))

TP=2
PP=4
MICRO_BATCH=2
GLOBAL_BATCH=$(( 8 * MICRO_BATCH * WORLD_SIZE / (TP * PP) ))  # 32 sequences

DISTRIBUTED_ARGS=(
    --nproc_per_node $GPUS_PER_NODE
    --nnodes $NUM_NODES
    --node_rank $NODE_RANK
    --master_addr $MASTER_ADDR
    --master_port $MASTER_PORT
)

GPT_MODEL_ARGS=(
    --num-layers 24          # 4 stages of 6 layers
    --hidden-size 2048
    --num-attention-heads 16
    --seq-length 2048
    --padded-vocab-size 51200
)

TRAINING_ARGS=(
    --micro-batch-size $MICRO_BATCH
    --global-batch-size ${GLOBAL_BATCH}
    --bf16
)

MODEL_PARALLEL_ARGS=(
    --tensor-model-parallel-size "$TP"
    --pipeline-model-parallel-size $PP
    --sequence-parallel
    --use-distributed-optimizer
)

python -m torch.distributed.launch ${DISTRIBUTED_ARGS[@]} \
    pretrain_gpt.py \
    "${GPT_MODEL_ARGS[@]}" \
    ${TRAINING_ARGS[@]} \
    ${MODEL_PARALLEL_ARGS[@]} \
    --recompute-granularity selective 2>&1 | tee train.log
