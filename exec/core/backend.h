/* backend — where the executor's tensors live and how its ops run.
 *
 * A backend is a small vtable: memory (alloc/free/copy to and from the host),
 * one GEMM, and the GPT kernels of kern.h with the same arguments. The CPU
 * backend (exec/cpu/backend_cpu.h) runs GEMMs through CBLAS (OpenBLAS) and the kern_*
 * loops; the CUDA backend (exec/cuda/backend_cuda.h) fills the same table with cuBLAS
 * and kernels/ so that the model (gpt.h) and the runtime never change.
 *
 * Pointers given to or returned by the table are backend memory ("device"
 * pointers; host memory for the CPU backend). Kernels are asynchronous with
 * respect to the host where the backend allows it; sync() waits for all of
 * them (the runtime calls it before reading a clock).
 *
 * Memory accounting is backend-independent: be_alloc/be_free (below) count
 * bytes per category, current and peak, so each rank can report its peak by
 * category (weights, gradients, optimizer state, activations, buffers).
 *
 * Ownership: the backend object is created by its constructor and released
 * with its destroy(); every be_alloc'd pointer is freed with be_free by the
 * module that allocated it.
 */
#ifndef TRAINSIM_EXEC_BACKEND_H
#define TRAINSIM_EXEC_BACKEND_H

#include <stdbool.h>
#include <stddef.h>

#include "exec/core/cp_attn.h"
#include "sim/util/err.h"

typedef enum {
    XMEM_WEIGHTS = 0, /* parameters */
    XMEM_GRADS,       /* parameter gradients */
    XMEM_OPTIM,       /* Adam moments */
    XMEM_ACTS,        /* activations saved for the backward (per micro-batch) */
    XMEM_BUFFERS,     /* scratch, communication and pipeline buffers */
    XMEM_NCAT
} xmem_cat;

/* Name of a category ("weights", "gradients", "optimizer", "activations",
 * "buffers"). */
const char *xmem_cat_name(xmem_cat c);

typedef struct backend backend;

/* Freed blocks a backend keeps for reuse (be_free, be_alloc). */
#define BE_POOL_MAX 64

struct backend {
    const char *name; /* "cpu", "cuda" */
    void *ctx;        /* the implementation's state */

    /* ---- memory (raw; use be_alloc/be_free, which also count bytes) */
    /* n floats, zero-filled; NULL on failure. */
    float *(*alloc)(backend *be, size_t n);
    void (*free)(backend *be, float *p);
    void (*to_device)(backend *be, float *dst, const float *src_host, size_t n);
    void (*to_host)(backend *be, float *dst_host, const float *src, size_t n);
    /* int tensors (token ids): n ints, zero-filled; freed with free_int. */
    int *(*alloc_int)(backend *be, size_t n);
    void (*free_int)(backend *be, int *p);
    void (*int_to_device)(backend *be, int *dst, const int *src_host, size_t n);
    /* n ints to the host; waits for the ops that write src. */
    void (*int_to_host)(backend *be, int *dst_host, const int *src, size_t n);
    void (*zero)(backend *be, float *p, size_t n);
    void (*copy)(backend *be, float *dst, const float *src, size_t n);
    /* Wait for every op issued so far. */
    void (*sync)(backend *be);

    /* ---- GEMM, row-major: C[M,N] = alpha op(A)[M,K] op(B)[K,N] + beta C */
    void (*gemm)(backend *be, bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float *A, int lda,
                 const float *B, int ldb, float beta, float *C, int ldc);

    /* ---- kernels: same arguments and semantics as kern.h */
    void (*embed_fwd)(backend *be, float *out, const int *tokens, const float *wte, const float *wpe, size_t row0,
                      size_t n, int T, int C);
    void (*embed_bwd)(backend *be, float *dwte, float *dwpe, const float *dout, const int *tokens, size_t row0,
                      size_t n, int T, int C);
    void (*layernorm_fwd)(backend *be, float *out, float *mean, float *rstd, const float *inp, const float *w,
                          const float *b, size_t N, int C);
    void (*layernorm_bwd_input)(backend *be, float *dinp, const float *dout, const float *inp, const float *w,
                                const float *mean, const float *rstd, size_t N, int C);
    void (*layernorm_bwd_weight)(backend *be, float *dw, float *db, const float *dout, const float *inp,
                                 const float *mean, const float *rstd, size_t N, int C);
    void (*attention_fwd)(backend *be, float *out, float *att, const float *qkv, int B, int T, int NH, int hs);
    void (*attention_bwd)(backend *be, float *dqkv, float *datt, const float *dout, const float *qkv, const float *att,
                          int B, int T, int NH, int hs);
    void (*gelu_fwd)(backend *be, float *out, const float *inp, size_t n);
    void (*gelu_bwd)(backend *be, float *dinp, const float *inp, const float *dout, size_t n);
    void (*bias_fwd)(backend *be, float *out, const float *bias, size_t N, int OC);
    void (*bias_bwd)(backend *be, float *dbias, const float *dout, size_t N, int OC);
    void (*bias_residual_fwd)(backend *be, float *out, const float *a, const float *b, const float *bias, size_t N,
                              int OC);
    void (*add)(backend *be, float *y, const float *x, size_t n);
    void (*crossentropy_fwd)(backend *be, float *losses, float *probs, const float *logits, const int *targets,
                             size_t N, int V);
    void (*crossentropy_bwd)(backend *be, float *dlogits, const float *probs, const int *targets, size_t N, int V,
                             float scale);
    void (*adam)(backend *be, float *p, const float *g, float *m, float *v, size_t n, float lr, float b1, float b2,
                 float eps, float wd, int t);
    /* inference with a KV cache (kern.h's kern_embed_pos_fwd, kern_kv_append,
     * kern_attention_kv_fwd) */
    void (*embed_pos_fwd)(backend *be, float *out, const int *tokens, const float *wte, const float *wpe, int B, int n,
                          int pos0, int C);
    void (*kv_append)(backend *be, float *kc, float *vc, const float *qkv, int B, int n, int pos0, int Tmax, int NH,
                      int hs);
    void (*attention_kv_fwd)(backend *be, float *out, float *att, const float *qkv, const float *kc, const float *vc,
                             int B, int n, int pos0, int Tmax, int NH, int hs);

    /* Llama-architecture kernels (kern_llama.h's, same arguments). A
     * backend without them leaves them NULL; gpt_stage_create then refuses
     * a model that needs them. */
    void (*rmsnorm_fwd)(backend *be, float *out, float *rstd, const float *inp, const float *w, size_t N, int C);
    void (*rmsnorm_bwd_input)(backend *be, float *dinp, const float *dout, const float *inp, const float *w,
                              const float *rstd, size_t N, int C);
    void (*rmsnorm_bwd_weight)(backend *be, float *dw, const float *dout, const float *inp, const float *rstd, size_t N,
                               int C);
    /* QK norm (--qk-layernorm; kern_qknorm_*: mean NULL is RMSNorm). NULL in a
     * backend without it: gpt_stage_create then refuses the flag. */
    void (*qknorm_fwd)(backend *be, float *qkv, float *xin, float *mean, float *rstd, const float *qw, const float *qb,
                       const float *kw, const float *kb, size_t N, int NH, int NKV, int hs);
    void (*qknorm_bwd_weight)(backend *be, float *dqw, float *dqb, float *dkw, float *dkb, const float *dqkv,
                              const float *xin, const float *mean, const float *rstd, size_t N, int NH, int NKV,
                              int hs);
    void (*qknorm_bwd_input)(backend *be, float *dqkv, const float *xin, const float *mean, const float *rstd,
                             const float *qw, const float *kw, size_t N, int NH, int NKV, int hs);
    void (*swiglu_fwd)(backend *be, float *out, const float *inp, size_t N, int F);
    void (*swiglu_bwd)(backend *be, float *dinp, const float *inp, const float *dout, size_t N, int F);
    void (*rope_fwd)(backend *be, float *qkv, size_t N, int T, int NH, int NKV, int hs, float base);
    void (*rope_bwd)(backend *be, float *dqkv, size_t N, int T, int NH, int NKV, int hs, float base);
    /* rope of rows at positions pos0, pos0 + 1, ... (kern_rope_at_*: context parallelism) */
    void (*rope_at_fwd)(backend *be, float *qkv, size_t N, int pos0, int NH, int NKV, int hs, float base);
    void (*rope_at_bwd)(backend *be, float *dqkv, size_t N, int pos0, int NH, int NKV, int hs, float base);
    void (*attention_gqa_fwd)(backend *be, float *out, float *att, const float *qkv, int B, int T, int NH, int NKV,
                              int hs);
    void (*attention_gqa_bwd)(backend *be, float *dqkv, float *datt, const float *dout, const float *qkv,
                              const float *att, int B, int T, int NH, int NKV, int hs);

    /* Flash-style attention (--attention-backend flash, cp_attn.h's
     * recurrence: online softmax, only the log-sum-exp lse [B, NH, T/cp]
     * saved, the backward recomputing the scores), multi-head or
     * grouped-query (NKV key/value heads), over ring's context-parallel
     * ranks (size 1: one rank). Same arguments as cp_attn_fwd/bwd (ring_ws:
     * the ring's buffers, cp_attn_ring_floats); they return a status (the
     * ring's exchange can fail). NULL in a backend that has only the
     * unfused attention: gpt_stage_create then refuses the flag. */
    int (*attention_flash_fwd)(backend *be, const cp_ring *ring, float *out, float *lse, const float *qkv, int B, int T,
                               int NH, int NKV, int hs, float *ring_ws, ts_err *err);
    int (*attention_flash_bwd)(backend *be, const cp_ring *ring, float *dqkv, const float *dout, const float *out,
                               const float *lse, const float *qkv, int B, int T, int NH, int NKV, int hs,
                               float *ring_ws, ts_err *err);

    /* Mixture-of-experts routing and dispatch (exec/core/moe.h's layer runs
     * on them): the routing steps of exec/core/moe_route.h and the row ops
     * of exec/cpu/kern_moe.h, same arguments and semantics; the CUDA
     * backend's are kernels/moe.cu's (cuk.h). Assignment a = t k + j of N
     * tokens, nk = N k; idx, keep, send_slot, pos, rows are int tensors
     * (the layer checks that every count fits an int). moe_keep's wkept may
     * alias wts, and its order is scratch of nk ints (the CPU's sort; CUDA
     * sorts in its own). NULL in a
     * backend without them: moe_layer_create then refuses experts. */
    void (*moe_topk)(backend *be, int *idx, float *wts, const float *logits, size_t N, int E, int k,
                     bool force_balance);
    void (*moe_keep)(backend *be, int *keep, float *wkept, const int *idx, const float *wts, size_t nk, size_t cap,
                     int *order);
    void (*moe_counts)(backend *be, int *counts, const int *idx, const int *keep, size_t nk, int E);
    void (*moe_send_order)(backend *be, int *send_slot, int *pos, const int *idx, const int *keep, size_t nk, int E);
    void (*moe_gather)(backend *be, float *dst, const float *src, const int *rows, size_t nrows, int div, int C);
    void (*moe_scatter)(backend *be, float *dst, const float *src, const int *rows, size_t nrows, int C);
    void (*moe_combine)(backend *be, float *out, const float *y, const float *wts, const int *idx, const int *pos,
                        size_t N, int k, int C);
    void (*moe_combine_bwd)(backend *be, float *dy, float *g, const float *dout, const float *y, const float *wts,
                            const int *send_slot, size_t nsend, int k, int C);
    void (*moe_router_bwd)(backend *be, float *dlog, const float *logits, const int *idx, const int *keep,
                           const float *g, size_t N, int E, int k);

    /* Release the backend (not the tensors: their owners free them first). */
    void (*destroy)(backend *be);

    /* ---- blocks be_free keeps for be_alloc to hand out again (exact size, zeroed), so that
     * tensors freed and allocated every micro-batch (a layer's activations, the head's) cost
     * no device allocation or synchronising free in the steady state (PyTorch's caching
     * allocator). Not counted: the accounting below is of allocated bytes (its
     * memory_allocated, what trainsim predicts). be_pool_drain releases them. */
    float *pool_p[BE_POOL_MAX];
    size_t pool_n[BE_POOL_MAX];
    int pool_len;

    /* ---- accounting, maintained by be_alloc/be_free (bytes) */
    size_t cur_bytes[XMEM_NCAT];
    size_t peak_bytes[XMEM_NCAT]; /* peak of each category on its own */
    size_t cur_total_bytes;
    size_t peak_total_bytes;         /* peak of the sum */
    size_t at_peak_bytes[XMEM_NCAT]; /* each category's bytes when the sum peaked */
};

/* Allocate n floats (zeroed) counted under cat: a kept block of n floats
 * (zeroed on the backend's stream), else a new one. TS_ENOMEM with the
 * size and category in err on failure. The caller frees with
 * be_free(be, p, n, cat), which keeps the block while there is room. */
int be_alloc(backend *be, size_t n, xmem_cat cat, float **out, ts_err *err);
/* Allocate n ints (zeroed) counted under cat, from the same blocks as
 * be_alloc's (an int is a float's 4 bytes): int tensors that come and go
 * every micro-batch (a MoE layer's routing) then cost no device allocation
 * either. The caller frees with be_free_ints(be, p, n, cat). */
int be_alloc_ints(backend *be, size_t n, xmem_cat cat, int **out, ts_err *err);
void be_free_ints(backend *be, int *p, size_t n, xmem_cat cat);
/* Free p (n floats under cat, as allocated). NULL is allowed. */
void be_free(backend *be, float *p, size_t n, xmem_cat cat);
/* Release the blocks kept for reuse (the backends' destroy() calls it
 * first). */
void be_pool_drain(backend *be);
/* Reset the peaks to the current usage (start of a measured window). */
void be_reset_peaks(backend *be);
/* Count bytes of category cat that a module allocated itself (host memory
 * outside be_alloc: the MoE layer's on the CPU backend) as allocated
 * (alloc = true) or released, so that the current and peak figures include
 * them. Every count is undone by the same module. */
void be_count(backend *be, xmem_cat cat, size_t bytes, bool alloc);

#endif
