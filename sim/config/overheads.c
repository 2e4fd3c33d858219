/* overheads — memory besides tensors, in closed form (see overheads.h). */
#include "sim/config/overheads.h"

#include <math.h>

#define MIB 1048576.0
#define GIB 1073741824.0

const char *overheads_comm_name(overheads_comm k)
{
    static const char *const names[OVERHEADS_COMM_KINDS] = {
        "TP", "PP", "DP", "embedding", "EDP", "CP", "EP all-to-all", "CP ring"};
    return k >= 0 && k < OVERHEADS_COMM_KINDS ? names[k] : "?";
}

void overheads_default(const gpu_spec *g, memory_overheads *out)
{
    if (g->calibrated_only) {
        *out = (memory_overheads){0};
        return;
    }
    out->cuda_context_gib = g->cuda_context_gib;
    out->cublas_workspace_mib = g->cublas_workspace_mib;
    out->nccl_channels = g->nccl_channels;
    out->nccl_buffer_mib = OVERHEADS_NCCL_BUFFER_MIB;
    out->allocator_fragmentation = OVERHEADS_ALLOCATOR_FRAGMENTATION;
}

int overheads_resolve(memory_overheads *o, const gpu_spec *g, ts_err *err)
{
    memory_overheads d;
    overheads_default(g, &d);
    if (o->cuda_context_gib < 0)
        o->cuda_context_gib = d.cuda_context_gib;
    if (o->nccl_buffer_mib < 0)
        o->nccl_buffer_mib = d.nccl_buffer_mib;
    if (o->nccl_channels < 0)
        o->nccl_channels = d.nccl_channels;
    if (o->cublas_workspace_mib < 0)
        o->cublas_workspace_mib = d.cublas_workspace_mib;
    if (o->allocator_fragmentation < 0)
        o->allocator_fragmentation = d.allocator_fragmentation;
    /* The flags check their own ranges; these catch a config built by hand. */
    if (!(o->cuda_context_gib <= 1024))
        return err_set(err, TS_EINVAL, "--cuda-context-gib %g is out of range (valid: 0..1024 GiB)",
                       o->cuda_context_gib);
    if (!(o->nccl_buffer_mib <= 65536))
        return err_set(err, TS_EINVAL, "--nccl-buffer-mib %g is out of range (valid: 0..65536 MiB)",
                       o->nccl_buffer_mib);
    if (o->nccl_channels > 64)
        return err_set(err, TS_EINVAL, "--nccl-channels %d is out of range (valid: 0..64, NCCL's maximum)",
                       o->nccl_channels);
    if (!(o->cublas_workspace_mib <= 65536))
        return err_set(err, TS_EINVAL, "--cublas-workspace-mib %g is out of range (valid: 0..65536 MiB)",
                       o->cublas_workspace_mib);
    if (!(o->allocator_fragmentation <= 10))
        return err_set(err, TS_EINVAL, "--allocator-fragmentation %g is out of range (valid: 0..10)",
                       o->allocator_fragmentation);
    return TS_OK;
}

unsigned overheads_comms(const overheads_layout *l, int rank)
{
    unsigned m = 0;
    int cp = l->cp > 1 ? l->cp : 1;
    if (l->tp > 1)
        m |= 1u << OVERHEADS_COMM_TP;
    if (l->pp > 1)
        m |= 1u << OVERHEADS_COMM_PP;
    if (l->dp * cp > 1)
        m |= 1u << OVERHEADS_COMM_DP;
    /* The tied embedding's gradients are all-reduced between the first and
     * the last stage when they sit on different ranks: ranks 0 and p-1,
     * except under ZB-V and DualPipeV, whose V placement puts both on rank 0. Untied,
     * Megatron-LM skips that all-reduce and NCCL (initialised lazily by
     * PyTorch) never builds the group's communicator. */
    if (l->tied && l->pp > 1 && !sched_kind_is_v(l->schedule) && (rank == 0 || rank == l->pp - 1))
        m |= 1u << OVERHEADS_COMM_EMB;
    if (l->edp > 1)
        m |= 1u << OVERHEADS_COMM_EDP;
    if (cp > 1)
        m |= 1u << (l->cp_all_gather ? OVERHEADS_COMM_CP : OVERHEADS_P2P_CP);
    if (l->ep > 1)
        m |= 1u << OVERHEADS_P2P_EP;
    return m;
}

int64_t overheads_cuda_context_bytes(const memory_overheads *o)
{
    return (int64_t)llround(o->cuda_context_gib * GIB);
}

int64_t overheads_nccl_bytes(const memory_overheads *o, unsigned comms)
{
    int n = 0;
    for (int k = 0; k < OVERHEADS_COMMS; k++)
        n += (comms >> k) & 1u;
    return (int64_t)n * o->nccl_channels * OVERHEADS_NCCL_PEERS * (int64_t)llround(o->nccl_buffer_mib * MIB);
}

int64_t overheads_cublas_bytes(const memory_overheads *o)
{
    return OVERHEADS_GEMM_STREAMS * (int64_t)llround(o->cublas_workspace_mib * MIB);
}

int64_t overheads_fragmentation_bytes(const memory_overheads *o, int64_t live_bytes)
{
    return live_bytes > 0 ? (int64_t)floor(o->allocator_fragmentation * (double)live_bytes) : 0;
}
