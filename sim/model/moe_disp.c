/* moe_disp — the token dispatcher of a MoE block (moe_disp.h). */
#include "sim/model/moe_disp.h"

#include <math.h>
#include <string.h>

#include "sim/model/fp8.h"

int64_t moe_a2a_send_bytes(int64_t tokens, int topk, int64_t h, int dtype_bytes, int ep)
{
    if (ep <= 1)
        return 0;
    return tokens * topk * h * dtype_bytes / ep * (ep - 1) +
           tokens * topk * h * dtype_bytes % ep * (ep - 1) / ep; /* floor(X (ep-1) / ep) without overflow */
}

int64_t moe_disp_tokens(const layer_shape *L)
{
    return L->b * L->s / (L->sp && L->t > 1 ? L->t : 1);
}

void moe_disp_dims_of(const layer_shape *L, const moe_config *e, double lf, moe_disp_dims *D)
{
    memset(D, 0, sizeof *D);
    D->T = moe_disp_tokens(L);
    D->k = e->topk;
    D->h = L->h;
    D->E = e->num_experts;
    D->ep = e->ep > 0 ? e->ep : 1;
    D->etp = e->etp > 0 ? e->etp : 1;
    D->n = D->ep * D->etp;
    D->el = D->E / D->ep;
    D->dt = L->dtype_bytes;
    D->dispatcher = e->dispatcher;
    D->Ra = (int64_t)ceil((double)(D->T * D->k) * lf - 1e-9);
    D->R = D->etp * D->Ra;
    D->a2a = moe_a2a_send_bytes(D->T, e->topk, L->h, L->dtype_bytes, D->ep);
    D->mx_fwd = e->dispatch_fwd_mxfp8;
    D->mx_bwd = e->combine_bwd_mxfp8;
    D->row_f = D->mx_fwd ? fp8_mxfp8_bytes(1, D->h) : D->h * D->dt;
    D->row_b = D->mx_bwd ? fp8_mxfp8_bytes(1, D->h) : D->h * D->dt;
    D->a2a_f = moe_a2a_send_bytes(D->T, e->topk, D->row_f, 1, D->ep);
    D->a2a_b = moe_a2a_send_bytes(D->T, e->topk, D->row_b, 1, D->ep);
}

int64_t moe_ag_hidden_bytes(int64_t tokens, int64_t h, int dtype_bytes, int n)
{
    return tokens * n * h * dtype_bytes;
}

int64_t moe_ag_meta_bytes(int64_t tokens, int num_experts, int n)
{
    return tokens * n * num_experts * (1 + 4); /* bool routing map + fp32 probabilities */
}

int64_t moe_etp_bytes(int64_t ra, int64_t h, int dtype_bytes, int etp)
{
    return (int64_t)etp * ra * h * dtype_bytes;
}

/* A dispatcher collective over n consecutive ranks of the expert fold
 * (moe_disp.h); nothing for n <= 1. coll COMM_P2P is the all-to-all. */
static void disp_coll(layer_ops *o, const char *name, commcost_coll coll, int64_t bytes, int n)
{
    if (n <= 1)
        return;
    int i = layer_ops_push(o, name, LAYER_OP_COMM);
    layer_op *op = &o->op[i];
    op->coll = coll;
    op->a2a = true;
    op->bytes = bytes;
    op->group = n;
    if (coll != COMM_P2P) { /* the all-to-all's placement is the plan's (its EP group) */
        op->stride = 1;
        op->span = n;
    }
}

static bool allgather(const moe_disp_dims *D)
{
    return D->dispatcher == MOE_DISPATCH_ALLGATHER;
}

/* The all-to-all of bytes, marked as carrying MXFP8 rows when mx. */
static void disp_a2a(layer_ops *o, const char *name, int64_t bytes, int ep, bool mx)
{
    int n = o->n;
    disp_coll(o, name, COMM_P2P, bytes, ep);
    if (o->n > n)
        o->op[n].fp8 = mx;
}

/* The MXFP8 quantize before a side's first send of rows x h (moe_disp.h):
 * only when the side has a collective. */
static void disp_quant(const moe_disp_dims *D, layer_ops *o, const char *name, int64_t rows)
{
    bool sends = allgather(D) ? D->n > 1 : D->ep > 1 || D->etp > 1;
    if (sends)
        layer_ops_mem(o, name, fp8_mxfp8_quantize_bytes(rows, D->h, (int)D->dt));
}

static int64_t permute_bytes(const moe_disp_dims *D)
{
    return allgather(D) ? 2 * D->R * D->h * D->dt : (D->T + D->T * D->k) * D->h * D->dt;
}

static int64_t unpermute_bytes(const moe_disp_dims *D)
{
    if (allgather(D))
        return (D->R + (int64_t)D->n * D->T) * D->h * D->dt + D->R * 4;
    return (D->T * D->k + D->T) * D->h * D->dt + D->T * D->k * 4;
}

void moe_disp_fwd_in(const moe_disp_dims *D, layer_ops *o)
{
    const char *q = "moe.dispatch.mxfp8.cast";
    if (allgather(D)) {
        disp_coll(o, "moe.ag.probs", COMM_ALL_GATHER, moe_ag_meta_bytes(D->T, (int)D->E, D->n), D->n);
        if (D->mx_fwd)
            disp_quant(D, o, q, D->T);
        disp_coll(o, "moe.ag.dispatch", COMM_ALL_GATHER, moe_ag_hidden_bytes(D->T, D->row_f, 1, D->n), D->n);
        layer_ops_mem(o, "moe.permute", permute_bytes(D));
        return;
    }
    layer_ops_mem(o, "moe.permute", permute_bytes(D));
    if (D->mx_fwd)
        disp_quant(D, o, q, D->T * D->k);
    disp_a2a(o, "moe.a2a.dispatch", D->a2a_f, D->ep, D->mx_fwd);
    disp_coll(o, "moe.etp.ag", COMM_ALL_GATHER, moe_etp_bytes(D->Ra, D->row_f, 1, D->etp), D->etp);
}

void moe_disp_fwd_out(const moe_disp_dims *D, layer_ops *o)
{
    if (allgather(D)) {
        layer_ops_mem(o, "moe.unpermute", unpermute_bytes(D));
        disp_coll(o, "moe.rs.combine", COMM_REDUCE_SCATTER, moe_ag_hidden_bytes(D->T, D->h, (int)D->dt, D->n), D->n);
        return;
    }
    disp_coll(o, "moe.etp.rs", COMM_REDUCE_SCATTER, moe_etp_bytes(D->Ra, D->h, (int)D->dt, D->etp), D->etp);
    disp_a2a(o, "moe.a2a.combine", D->a2a, D->ep, false);
    layer_ops_mem(o, "moe.unpermute", unpermute_bytes(D));
}

void moe_disp_bwd_out(const moe_disp_dims *D, layer_ops *o)
{
    const char *q = "moe.combine.bwd.mxfp8.cast";
    if (allgather(D)) {
        if (D->mx_bwd)
            disp_quant(D, o, q, D->T);
        disp_coll(o, "moe.rs.combine.bwd", COMM_ALL_GATHER, moe_ag_hidden_bytes(D->T, D->row_b, 1, D->n), D->n);
        layer_ops_mem(o, "moe.unpermute.bwd", unpermute_bytes(D));
        return;
    }
    layer_ops_mem(o, "moe.unpermute.bwd", unpermute_bytes(D));
    if (D->mx_bwd)
        disp_quant(D, o, q, D->T * D->k);
    disp_a2a(o, "moe.a2a.combine.bwd", D->a2a_b, D->ep, D->mx_bwd);
    disp_coll(o, "moe.etp.rs.bwd", COMM_ALL_GATHER, moe_etp_bytes(D->Ra, D->row_b, 1, D->etp), D->etp);
}

void moe_disp_bwd_in(const moe_disp_dims *D, layer_ops *o)
{
    if (allgather(D)) {
        layer_ops_mem(o, "moe.permute.bwd", permute_bytes(D));
        disp_coll(o, "moe.ag.dispatch.bwd", COMM_REDUCE_SCATTER, moe_ag_hidden_bytes(D->T, D->h, (int)D->dt, D->n),
                  D->n);
        /* the probabilities' gradient (fp32); the routing map has none */
        disp_coll(o, "moe.ag.probs.bwd", COMM_REDUCE_SCATTER, D->T * D->n * D->E * 4, D->n);
        return;
    }
    disp_coll(o, "moe.etp.ag.bwd", COMM_REDUCE_SCATTER, moe_etp_bytes(D->Ra, D->h, (int)D->dt, D->etp), D->etp);
    disp_a2a(o, "moe.a2a.dispatch.bwd", D->a2a, D->ep, false);
    layer_ops_mem(o, "moe.permute.bwd", permute_bytes(D));
}

int64_t moe_disp_transient_bytes(const moe_disp_dims *D)
{
    if (allgather(D) && D->n > 1) {
        int64_t row = D->row_f > D->row_b ? D->row_f : D->row_b; /* the gathered tokens or gradients */
        return moe_ag_hidden_bytes(D->T, row, 1, D->n) + moe_ag_hidden_bytes(D->T, D->h, (int)D->dt, D->n) +
               moe_ag_meta_bytes(D->T, (int)D->E, D->n);
    }
    return !allgather(D) && D->etp > 1 ? D->R * D->h * D->dt : 0;
}
