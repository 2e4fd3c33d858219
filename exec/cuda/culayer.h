/* culayer — one GPT transformer layer shard in bf16 on one GPU, forward and
 * backward, as Megatron-LM ran it (2021): pre-LN, fused QKV projection,
 * attention through two strided-batched GEMMs around the scaled causal
 * softmax and attention dropout (or, as an option, the fused flash-style
 * kernel), output projection with bias-dropout-add, LayerNorm, MLP h -> f ->
 * h with bias-GELU, bias-dropout-add. Tensor parallelism t is the shard's
 * shape (heads/t heads, f/t MLP columns); the tensor-parallel all-reduces
 * are NOT run (single-GPU timing: the layer's compute only).
 *
 * Precision: bf16 weights, activations and activation gradients; fp32 main
 * grads accumulated by the weight-gradient GEMMs (beta = 1) and the bias /
 * LayerNorm gradient kernels. Weights and inputs are filled with
 * cuk_fill_uniform_bf16 (values do not matter for timing; tests read them
 * back with culayer_read to compute the layer on the CPU).
 *
 * Ownership: culayer_create allocates every buffer on the current device;
 * culayer_free releases them. The cugemm handle and the stream are borrowed.
 */
#ifndef TRAINSIM_CULAYER_H
#define TRAINSIM_CULAYER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "exec/cuda/cugemm.h"
#include "sim/util/err.h"

typedef struct {
    int hidden;      /* h, --hidden-size */
    int heads;       /* --num-attention-heads (whole model) */
    int ffn;         /* f, --ffn-hidden-size (whole model) */
    int seq;         /* s, --seq-length */
    int micro_batch; /* b, --micro-batch-size */
    int tp;          /* t, --tensor-model-parallel-size */
    bool fused_attention;
    float attention_dropout; /* Megatron default 0.1 (unfused path only) */
    float hidden_dropout;    /* Megatron default 0.1 */
    float init_scale;        /* weights ~ U(-init_scale, init_scale); 0 = 0.02 */
} culayer_dims;

typedef struct culayer culayer;

/* TS_EINVAL naming the field when heads, hidden or ffn do not divide by t,
 * hidden by heads, or the fused kernel cannot take the head size; TS_ENOMEM
 * with the bytes asked for when the GPU is too small. */
int culayer_create(const culayer_dims *d, cugemm *g, cudaStream_t stream, culayer **out, ts_err *err);
void culayer_free(culayer *L);

/* Enqueue one forward (seed picks the dropout masks) / one backward (after a
 * forward; the output gradient is a fixed random tensor). */
int culayer_forward(culayer *L, uint64_t seed, ts_err *err);
int culayer_backward(culayer *L, ts_err *err);

/* Model FLOPs of one forward + backward of the shard (no recomputation),
 * Megatron's count: 72 b s h^2 / t (1 + s / (6 h)) for f = 4h; in general
 * 3 (2 b s (4 h^2 + 2 h f) + 4 b s^2 h) / t. */
double culayer_flops(const culayer_dims *d);

/* GPU bytes allocated by the layer. */
size_t culayer_bytes(const culayer *L);

/* Tensors a test can read back (weights [out, in] row-major as llm.c; main
 * grads fp32 of the same shapes; activations [b*s, h]). */
typedef enum {
    CULAYER_LN1_W = 0,
    CULAYER_LN1_B,
    CULAYER_QKV_W,
    CULAYER_QKV_B,
    CULAYER_PROJ_W,
    CULAYER_PROJ_B,
    CULAYER_LN2_W,
    CULAYER_LN2_B,
    CULAYER_FC1_W,
    CULAYER_FC1_B,
    CULAYER_FC2_W,
    CULAYER_FC2_B, /* then the same twelve as fp32 main grads: */
    CULAYER_GRAD0,
    CULAYER_X = CULAYER_GRAD0 + 12, /* the layer input */
    CULAYER_DOUT,                   /* the output gradient fed to the backward */
    CULAYER_OUT,                    /* the forward's output */
    CULAYER_DX,                     /* the backward's input gradient */
    CULAYER_NTENSORS
} culayer_tensor;

/* Copy tensor `which` (n elements, n as the tensor holds) to host floats,
 * synchronising the stream. TS_EINVAL for a wrong n (the right one is in the
 * message). */
int culayer_read(culayer *L, culayer_tensor which, float *host, size_t n, ts_err *err);

#endif
