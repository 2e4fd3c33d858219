#include "sim/model/dataload.h"

#include <string.h>
#include <strings.h>

/* Element bytes of the batch's tensors (get_batch_on_this_tp_rank's
 * torch.empty dtypes: int64 tokens, labels, position_ids; float32 loss_mask;
 * bool attention_mask). */
#define DATALOAD_INT64_BYTES 8
#define DATALOAD_FP32_BYTES  4
#define DATALOAD_BOOL_BYTES  1

/* get_batch_on_this_cp_rank's index: torch.tensor([cp_rank, 2 cp - cp_rank - 1]), int64. */
#define DATALOAD_CP_INDEX_BYTES (2 * DATALOAD_INT64_BYTES)

/* Host links, GB/s per direction (1e9 B/s), the datasheets' figures halved
 * where they quote both directions together:
 *   A100 SXM4: "PCIe Gen4: 64GB/s" (NVIDIA A100 Tensor Core GPU datasheet) = Gen4 x16, 32 per direction;
 *   H100 SXM5: "PCIe Gen5: 128GB/s" (NVIDIA H100 Tensor Core GPU datasheet) = Gen5 x16, 64;
 *   H200 SXM:  "PCIe Gen5: 128GB/s" (NVIDIA H200 Tensor Core GPU datasheet) = 64;
 *   B200:      PCIe Gen5 x16 (NVIDIA HGX B200 specifications: "PCIe Gen5: 128GB/s") = 64;
 *   GB200:     the Grace CPU's NVLink-C2C, "900GB/s" bidirectional (NVIDIA GB200 NVL72 datasheet) = 450.
 * These are line rates: pinned copies reach somewhat less (PCIe's packet
 * headers), so the figure is a lower bound on the copy time; a measured one
 * replaces the whole step with --data-loader-ns. */
static const struct {
    const char *prefix;
    double gbps;
} HOST_LINKS[] = {{"A100", 32.0}, {"H100", 64.0}, {"H200", 64.0}, {"B200", 64.0}, {"GB200", 450.0}};

int dataload_host_link_gbps(const gpu_spec *g, double mem_gbps, double *out, ts_err *err)
{
    *out = 0;
    if (g->calibrated_only) {
        if (!(mem_gbps > 0))
            return err_set(err, TS_EINVAL,
                           "data loader: the calibrated device %s has no memory rate (give "
                           "--data-loader-ns)",
                           g->name);
        *out = mem_gbps / 2;
        return TS_OK;
    }
    for (size_t i = 0; i < sizeof HOST_LINKS / sizeof *HOST_LINKS; i++)
        if (!strncasecmp(g->name, HOST_LINKS[i].prefix, strlen(HOST_LINKS[i].prefix))) {
            *out = HOST_LINKS[i].gbps;
            return TS_OK;
        }
    return err_set(err, TS_EINVAL,
                   "data loader: no host-link figure for GPU %s (known: A100, H100, H200, B200, GB200); give the "
                   "measured step with --data-loader-ns NS",
                   g->name);
}

int64_t dataload_tensor_bytes(dataload_tensor k, int b, int s)
{
    int64_t bs = (int64_t)b * s;
    switch (k) {
    case DATALOAD_TOKENS:
    case DATALOAD_LABELS:
    case DATALOAD_POSITION_IDS:
        return bs * DATALOAD_INT64_BYTES;
    case DATALOAD_LOSS_MASK:
        return bs * DATALOAD_FP32_BYTES;
    case DATALOAD_ATTN_MASK:
        return bs * s * DATALOAD_BOOL_BYTES;
    default:
        return 0;
    }
}

bool dataload_broadcast(dataload_tensor k, bool first, bool last, bool mtp)
{
    if (first && last) /* one pipeline stage: every tensor */
        return true;
    if (k == DATALOAD_ATTN_MASK)
        return first || last;
    if (k == DATALOAD_TOKENS || k == DATALOAD_POSITION_IDS)
        return first || (last && mtp);
    return last; /* labels, loss_mask */
}

/* A copy of bytes over the host link: one launch and the bytes at its rate. */
static int64_t copy_ns(const cost_model *cm, int64_t bytes, double gbps)
{
    return (int64_t)(cost_model_params(cm)->launch_ns + (double)bytes / gbps + 0.5);
}

int dataload_cost_of(const dataload_in *in, const cost_model *cm, const commcost_params *cc,
                     const commcost_group *tp_group, dataload_cost *out, ts_err *err)
{
    memset(out, 0, sizeof *out);
    if (!in->first && !in->last)
        return err_set(err, TS_EINVAL, "data loader: a middle pipeline stage loads no data");
    if (in->b < 1 || in->s < 1 || in->tp < 1 || in->cp < 1)
        return err_set(err, TS_EINVAL, "data loader: micro-batch %d, sequence %d, tp %d, cp %d (valid: each >= 1)",
                       in->b, in->s, in->tp, in->cp);
    if (!(in->host_gbps > 0))
        return err_set(err, TS_EINVAL, "data loader: host link %g GB/s (valid: > 0)", in->host_gbps);
    if (in->cp > 1 && in->s % (2 * in->cp))
        return err_set(err, TS_EINVAL, "data loader: sequence %d not divisible by 2 x cp = %d", in->s, 2 * in->cp);
    for (int k = 0; k < DATALOAD_TENSORS; k++) {
        if (k == DATALOAD_ATTN_MASK && !in->attn_mask)
            continue; /* None in the batch: get_batch_on_this_tp_rank copies and broadcasts nothing */
        int64_t x = dataload_tensor_bytes((dataload_tensor)k, in->b, in->s);
        out->h2d_bytes += x;
        if (k == DATALOAD_ATTN_MASK)
            out->mask_bytes = x;
        out->n_h2d++;
        out->h2d_ns += copy_ns(cm, x, in->host_gbps);
        if (in->tp > 1 && dataload_broadcast((dataload_tensor)k, in->first, in->last, in->mtp)) {
            out->bcast_bytes += x;
            out->n_bcast++;
            int64_t ag = x * in->tp / (in->tp - 1); /* the all-gather with a broadcast's per-rank traffic */
            out->bcast_ns += commcost_ns(cc, COMM_ALL_GATHER, ag, tp_group);
        }
        if (in->cp > 1) { /* the index to the GPU, then the rank's two chunks selected */
            out->n_h2d++;
            out->h2d_bytes += DATALOAD_CP_INDEX_BYTES;
            out->h2d_ns += copy_ns(cm, DATALOAD_CP_INDEX_BYTES, in->host_gbps);
            int64_t sel = 2 * (x / in->cp);
            out->slice_bytes += sel;
            out->n_slice++;
            out->slice_ns += cost_mem_ns(cm, sel);
        }
    }
    out->total_ns = out->h2d_ns + out->bcast_ns + out->slice_ns;
    return TS_OK;
}
