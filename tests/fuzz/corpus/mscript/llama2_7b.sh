#!/bin/bash
# Llama 2 7B in the form of Megatron-LM's example launch scripts (the
# Llama 2 arguments of its docs/llama_mistral.md): rotary embeddings, SwiGLU,
# RMSNorm, untied embeddings, no linear biases. trainsim's tests read it;
# nothing runs it.

export CUDA_DEVICE_MAX_CONNECTIONS=1

GPUS_PER_NODE=8
MASTER_ADDR=localhost
MASTER_PORT=6000
NNODES=4
NODE_RANK=0
WORLD_SIZE=$(($GPUS_PER_NODE*$NNODES))

CHECKPOINT_DIR=$1
TOKENIZER_MODEL=$2
DATA_PATH=$3

TP=2
PP=1

DISTRIBUTED_ARGS="--nproc_per_node $GPUS_PER_NODE --nnodes $NNODES --node_rank $NODE_RANK \
                  --master_addr $MASTER_ADDR --master_port $MASTER_PORT"

LLAMA_ARGS=(
    --num-layers 32
    --hidden-size 4096
    --num-attention-heads 32
    --ffn-hidden-size 11008
    --seq-length 4096
    --max-position-embeddings 4096
    --position-embedding-type rope
    --no-position-embedding
    --normalization RMSNorm
    --swiglu
    --untie-embeddings-and-output-weights
    --disable-bias-linear
    --attention-dropout 0.0
    --hidden-dropout 0.0
    --init-method-std 0.02
    --make-vocab-size-divisible-by 1
)

TRAINING_ARGS=(
    --micro-batch-size 1
    --global-batch-size 1024
    --train-iters 250000
    --lr 3.0e-4
    --min-lr 3.0e-5
    --lr-decay-style cosine
    --lr-warmup-iters 2000
    --weight-decay 0.1
    --adam-beta1 0.9
    --adam-beta2 0.95
    --clip-grad 1.0
    --bf16
    --use-flash-attn
)

PARALLEL_ARGS=(
    --tensor-model-parallel-size ${TP}
    --pipeline-model-parallel-size ${PP}
    --sequence-parallel
    --use-distributed-optimizer
)

DATA_ARGS=(
    --tokenizer-type Llama2Tokenizer
    --tokenizer-model ${TOKENIZER_MODEL}
    --data-path ${DATA_PATH}
    --split 949,50,1
)

python -m torch.distributed.launch $DISTRIBUTED_ARGS pretrain_gpt.py \
       "${LLAMA_ARGS[@]}" \
       "${TRAINING_ARGS[@]}" \
       "${PARALLEL_ARGS[@]}" \
       "${DATA_ARGS[@]}" \
       --save $CHECKPOINT_DIR \
       --load $CHECKPOINT_DIR \
       --log-interval 10 \
       --save-interval 5000 \
       --eval-interval 1000 \
       --eval-iters 10
