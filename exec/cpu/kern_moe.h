/* kern_moe — the row operations of a mixture-of-experts layer as plain C
 * loops (fp32): the permutes of the dispatch, the weighted combine, its
 * backward and the router's softmax backward. With exec/core/moe_route.h's
 * routing steps they are the CPU backend's MoE ops (backend.h), and the
 * reference that kernels/moe.cu's device twins are tested against.
 *
 * Assignment a = t k + j is token t's slot j (k slots per token); pos[a]
 * is a's row in the send order (-1: dropped), send_slot[p] the assignment
 * of sent row p (moe_route_send_order). Rows are C floats wide. Every sum
 * runs in a fixed order, stated per function, so that a twin computing in
 * the same order gives the same bits. No function allocates; every pointer
 * is caller-owned.
 */
#ifndef TRAINSIM_EXEC_KERN_MOE_H
#define TRAINSIM_EXEC_KERN_MOE_H

#include <stddef.h>

/* dst[r] = src[rows[r] / div] for r < nrows (div k turns send slots into
 * tokens; 1 a plain gather). */
void kern_moe_gather(float *dst, const float *src, const int *rows, size_t nrows, int div, int C);
/* dst[rows[r]] = src[r] for r < nrows (rows distinct). */
void kern_moe_scatter(float *dst, const float *src, const int *rows, size_t nrows, int C);
/* out[t] = sum over t's kept slots, in ascending expert order, of
 * wts[a] y[pos[a]] (wts NULL: weight 1) for t < N; out [N, C] overwritten.
 * A token's k experts are distinct. */
void kern_moe_combine(float *out, const float *y, const float *wts, const int *idx, const int *pos, size_t N, int k,
                      int C);
/* Per sent row p (a = send_slot[p], t = a / k): g[a] = dout[t] . y[p]
 * (columns in order), dy[p] = wts[a] dout[t]. g of dropped slots is not
 * written. */
void kern_moe_combine_bwd(float *dy, float *g, const float *dout, const float *y, const float *wts,
                          const int *send_slot, size_t nsend, int k, int C);
/* The router's backward through w_j = keep_j softmax_j(chosen logits), in
 * double: dlog [N, E] overwritten, 0 off the token's chosen experts; g [N k]
 * is the gradient of the loss with respect to each kept weight. */
void kern_moe_router_bwd(float *dlog, const float *logits, const int *idx, const int *keep, const float *g, size_t N,
                         int E, int k);

#endif
