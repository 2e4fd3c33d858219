/* backend_cuda_moe — the CUDA backend's MoE routing and dispatch ops
 * (backend.h's moe_*): kernels/moe.cu (cuk.h) on the compute stream, the
 * first failure kept as every other op's (backend_cuda_status). */
#include "exec/cuda/backend_cuda_impl.h"
#include "kernels/cuk.h"

static void cu_moe_topk(backend *be, int *idx, float *wts, const float *logits, size_t N, int E, int k,
                        bool force_balance)
{
    backend_cuda_note(be, cuk_f32_moe_topk(idx, wts, logits, N, E, k, force_balance, backend_cuda_stream(be)),
                      "moe_topk");
}

/* The kernel sorts the assignments in the backend's scratch; it reads and
 * writes each assignment's weight in one thread, so wkept may alias wts.
 * The layer's order scratch is not needed. */
static void cu_moe_keep(backend *be, int *keep, float *wkept, const int *idx, const float *wts, size_t nk, size_t cap,
                        int *order)
{
    (void)order;
    void *ws = cap > 0 && cap < nk ? backend_cuda_scratch(be, cuk_moe_scratch_bytes(nk)) : NULL;
    backend_cuda_note(be, cuk_f32_moe_capacity(keep, wkept, idx, wts, nk, cap, ws, backend_cuda_stream(be)),
                      "moe_keep");
}

static void cu_moe_counts(backend *be, int *counts, const int *idx, const int *keep, size_t nk, int E)
{
    backend_cuda_note(be, cuk_moe_counts(counts, idx, keep, nk, E, backend_cuda_stream(be)), "moe_counts");
}

/* E is not needed on the device: every idx is an expert < E by construction
 * (moe_topk's), and the kernel orders by idx alone. It sorts in the
 * backend's scratch. */
static void cu_moe_send_order(backend *be, int *send_slot, int *pos, const int *idx, const int *keep, size_t nk, int E)
{
    (void)E;
    void *ws = nk > 0 ? backend_cuda_scratch(be, cuk_moe_scratch_bytes(nk)) : NULL;
    backend_cuda_note(be, cuk_moe_send_order(send_slot, pos, idx, keep, nk, ws, backend_cuda_stream(be)),
                      "moe_send_order");
}

static void cu_moe_gather(backend *be, float *dst, const float *src, const int *rows, size_t nrows, int div, int C)
{
    backend_cuda_note(be, cuk_f32_moe_gather(dst, src, rows, nrows, div, C, backend_cuda_stream(be)), "moe_gather");
}

static void cu_moe_scatter(backend *be, float *dst, const float *src, const int *rows, size_t nrows, int C)
{
    backend_cuda_note(be, cuk_f32_moe_scatter(dst, src, rows, nrows, C, backend_cuda_stream(be)), "moe_scatter");
}

static void cu_moe_combine(backend *be, float *out, const float *y, const float *wts, const int *idx, const int *pos,
                           size_t N, int k, int C)
{
    backend_cuda_note(be, cuk_f32_moe_combine(out, y, wts, idx, pos, N, k, C, backend_cuda_stream(be)), "moe_combine");
}

static void cu_moe_combine_bwd(backend *be, float *dy, float *g, const float *dout, const float *y, const float *wts,
                               const int *send_slot, size_t nsend, int k, int C)
{
    backend_cuda_note(be, cuk_f32_moe_combine_bwd(dy, g, dout, y, wts, send_slot, nsend, k, C, backend_cuda_stream(be)),
                      "moe_combine_bwd");
}

static void cu_moe_router_bwd(backend *be, float *dlog, const float *logits, const int *idx, const int *keep,
                              const float *g, size_t N, int E, int k)
{
    backend_cuda_note(be, cuk_f32_moe_router_bwd(dlog, logits, idx, keep, g, N, E, k, backend_cuda_stream(be)),
                      "moe_router_bwd");
}

void backend_cuda_moe_fill(backend *be)
{
    be->moe_topk = cu_moe_topk;
    be->moe_keep = cu_moe_keep;
    be->moe_counts = cu_moe_counts;
    be->moe_send_order = cu_moe_send_order;
    be->moe_gather = cu_moe_gather;
    be->moe_scatter = cu_moe_scatter;
    be->moe_combine = cu_moe_combine;
    be->moe_combine_bwd = cu_moe_combine_bwd;
    be->moe_router_bwd = cu_moe_router_bwd;
}
