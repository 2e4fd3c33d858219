/* cp — closed forms of context parallelism (cp.h). */
#include "sim/model/cp.h"

static int64_t head_size(const layer_shape *L)
{
    return L->d > 0 ? L->d : L->h / L->a;
}

int64_t cp_kv_block_bytes(const layer_shape *L)
{
    return 2 * L->s * L->b * (L->g / L->t) * head_size(L) * L->dtype_bytes;
}

double cp_attn_flops(const layer_shape *L, bool bwd)
{
    int cp = L->cp > 1 ? L->cp : 1;
    double S = (double)L->s * cp;
    int64_t heads = L->a / L->t; /* heads of a tensor-parallel rank (t divides a) */
    double f = 2.0 * (double)L->s * S * (double)head_size(L) * (double)L->b * (double)heads;
    return bwd ? 2.5 * f : f;
}

int64_t cp_transient_bytes(const layer_shape *L, bool bwd)
{
    if (L->cp <= 1)
        return 0;
    int ca = L->cp_a2a > 0 ? L->cp_a2a : 1, cr = L->cp_ring > 0 ? L->cp_ring : 1;
    int64_t kv = cp_kv_block_bytes(L), d = head_size(L), T = L->s * L->b;
    int64_t bytes = 0;
    if (cr > 1 && !L->cp_gather)
        bytes += 2 * kv * (bwd ? 2 : 1);
    else if (cr > 1)
        bytes += (int64_t)cr * kv * (bwd ? 2 : 1);
    if (ca > 1) /* q,k,v and the output in the head-split layout */
        bytes += T * (2 * (L->a / L->t) + 2 * (L->g / L->t)) * d * L->dtype_bytes;
    return bytes;
}
