/* moe — one mixture-of-experts MLP layer with expert parallelism, fp32.
 *
 * Layer (Megatron-core's MoE MLP without shared experts): router logits
 * X Wr^T [n, E] (no bias); routing by moe_route.h (top-k, softmax over the
 * k logits, capacity and token dropping, forced balance); each kept (token,
 * slot) row of X is dispatched to its expert, which computes
 * y = W2_e gelu(W1_e x) (W1_e [F, C], W2_e [C, F], no biases, GELU tanh as
 * kern.h), or with swiglu y = W2_e (silu(G_e x) * (U_e x)) (W1_e [2F, C]
 * holding the gate rows G_e then the up rows U_e, Megatron's layout for a
 * SwiGLU expert; the backend's swiglu kernels); the rows come back and are combined: out[n] = sum_j w_nj y_nj.
 * Backward: through the combine (dw), the experts (dW1, dW2, dx) and the
 * router's softmax (dWr, and dX += dlogits Wr).
 *
 * Auxiliary load-balancing loss (Megatron-core's switch_load_balancing_loss_
 * func, "aux_loss"), when aux_coeff > 0: with P = softmax over all E logits
 * and c_e the (token, slot) assignments of expert e before capacity,
 *   aux = coeff * E / (k n^2) * sum_e c_e * sum_n P[n, e]
 * for the n tokens routed together; moe_forward stores it in aux_loss and
 * moe_backward adds its gradient (through P only, c_e being counts), so the
 * loss differentiated is sum(dout . out) + aux_loss.
 *
 * Expert parallelism: the ep ranks of the exchange each route their own n
 * tokens (EP is folded into data parallelism, as Megatron-core does: the
 * expert layer's EP group is made of data-parallel replicas), and rank r
 * owns experts [r*E/ep, (r+1)*E/ep). Rows travel by two all-to-alls per
 * direction: per-expert counts, then the rows (the dispatch and its reverse,
 * the combine; the backward reuses both with gradients). The capacity is
 * per rank's n tokens, as Megatron's is per local batch. The router's
 * weights are replicated: their gradients must be summed over the EP group
 * by the caller; the expert weights are unique to their rank.
 *
 * Exchange: moe_xchg abstracts the all-to-all (exec/moe_mpi.h gives the MPI
 * one on host memory, exec/cuda/moe_nccl.h the NCCL one on device memory;
 * moe_xchg_local(be) the one-rank identity). Its ints are host arrays (the
 * per-expert counts, which size the rows), its rows backend memory.
 *
 * Backends: the layer runs on backend memory through the backend's GEMM,
 * activation and MoE ops (backend.h: routing, permutes, combine, router
 * backward), so one algorithm serves the CPU and the CUDA backends. The
 * counts come to the host once per forward (they size the exchange and the
 * per-expert GEMMs, as Megatron-core's .cpu() of the counts does); the
 * auxiliary loss is computed on the host from copies of the logits (a
 * scalar, O(n E)).
 *
 * Ownership: moe_layer_create allocates the layer (weights and gradients
 * by be_alloc, counted as weights and gradients), released by
 * moe_layer_free; moe_forward allocates the saved state *saved (backend
 * memory counted as activations, a few host arrays of per-rank counts),
 * released by moe_saved_free; the backward's temporaries are counted as
 * buffers. Inputs are borrowed; the backend must outlive the layer and its
 * saved states. The weight pointers of moe_layer are backend memory.
 */
#ifndef TRAINSIM_EXEC_MOE_H
#define TRAINSIM_EXEC_MOE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "exec/core/backend.h"
#include "exec/core/moe_route.h"
#include "sim/util/err.h"

typedef struct {
    int size, rank; /* ep, this rank */
    void *ud;
    /* recv[s*per + i] = what rank s sent as send[rank*per + i] */
    int (*ints)(void *ud, const int *send, int *recv, int per, ts_err *err);
    /* rows of `width` floats: send_rows[d] rows to rank d (consecutive in
     * send, by d), recv_rows[s] rows from rank s (consecutive by s) */
    int (*rows)(void *ud, const float *send, const int *send_rows, float *recv, const int *recv_rows, int width,
                ts_err *err);
} moe_xchg;

/* Expert data parallelism: the ranks holding the same experts (EDP =
 * data-parallel ranks / ep). The expert weight gradients are summed over
 * them by edp_sum (in place, n floats); edp_size 1 / edp_sum NULL: none. */
typedef struct {
    int edp_size;
    void *ud;
    int (*edp_sum)(void *ud, float *buf, size_t n, ts_err *err);
} moe_edp;

/* The one-rank exchange: the rows copied by be (backend memory), the
 * counts on the host. be is borrowed and must outlive the exchange. */
moe_xchg moe_xchg_local(backend *be);

typedef struct {
    moe_route_cfg rc;
    int C, F, ep, er, El; /* hidden, expert ffn, EP size and rank, local experts */
    bool swiglu;          /* SwiGLU experts (W1 [2F, C]); else GELU */
    int Fu;               /* rows of W1: 2F with swiglu, else F */
    backend *be;
    float *wr, *gwr; /* [E, C] router */
    float *w1, *gw1; /* [El, Fu, C] */
    float *w2, *gw2; /* [El, C, F] */
    /* auxiliary load-balancing loss (--moe-aux-loss-coeff; 0 = none) */
    double aux_coeff;
    double aux_loss;       /* of the last forward, this rank's tokens */
    double aux_grad_scale; /* the backward adds aux_grad_scale x d(aux_loss) (1 at creation; a model
                              whose loss is a mean over micro-batches sets 1 / micro-batches) */
    bool rerun;            /* set by the caller around a forward that recomputes one already run (the MoE layer
                   checkpointed): the statistics below and aux_loss are then left as they are */
    /* statistics of the last forward on this rank */
    int *tok_per_expert;  /* [El] rows each local expert received */
    size_t dropped;       /* assignments this rank's tokens lost to capacity */
    double expert_gemm_s; /* seconds in expert GEMMs (forward + backward), accumulated */
    int64_t *tok_accum;   /* [El] rows each local expert received, accumulated over forwards */
} moe_layer;

typedef struct moe_saved moe_saved;

/* Weights: every element from its index in the full (ep = 1) layer and seed
 * (uniform in [-a, a], a = 1/sqrt(fan-in)), so EP shards are slices of the
 * same layer. Checks rc against ep (moe_route_check). swiglu: SwiGLU
 * experts (the backend must have its swiglu kernels). */
int moe_layer_create(const moe_route_cfg *rc, int C, int F, bool swiglu, int ep, int er, uint64_t seed, backend *be,
                     moe_layer **out, ts_err *err);
/* Floats of the full (ep = 1) layer: router E*C, then W1 of every expert
 * (E*Fu*C), then W2 (E*C*F), the order moe_layer_create indexes. */
size_t moe_full_floats(const moe_route_cfg *rc, int C, int F, bool swiglu);
/* Write the local weights (grads = false) or gradients into full (a host
 * array of moe_full_floats) at their full-layer positions; the router only
 * if write_router. */
void moe_layer_export(const moe_layer *L, bool grads, bool write_router, float *full);
/* Sum the expert weight gradients over e's ranks (no-op without). */
int moe_layer_reduce_experts(moe_layer *L, const moe_edp *e, ts_err *err);
void moe_layer_free(moe_layer *L);

/* out[n, C] = layer(x[n, C]); collective over xc. */
int moe_forward(moe_layer *L, const moe_xchg *xc, const float *x, size_t n, float *out, moe_saved **saved, ts_err *err);
/* Gradients += those of sum(dout . out); dx[n, C] overwritten. Collective. */
int moe_backward(moe_layer *L, const moe_xchg *xc, moe_saved *s, const float *dout, float *dx, ts_err *err);
void moe_saved_free(moe_saved *s);

/* Plain SGD on every local weight, then zero the gradients (through host
 * copies: a test's optimizer). TS_ENOMEM when the copies cannot be made. */
int moe_layer_sgd(moe_layer *L, float lr, ts_err *err);

#endif
