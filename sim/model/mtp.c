/* mtp — multi-token prediction's ops, memory, parameters and FLOPs (mtp.h). */
#include "sim/model/mtp.h"

#include "sim/model/flops.h"
#include "sim/model/mla.h"
#include "sim/model/moe.h"

/* Append the embedding's ops of pass to out (after out's own). */
static int add_embedding(const layer_shape *L, layer_pass pass, layer_ops *out, ts_err *err)
{
    layer_ops e;
    int rc = layer_embedding_ops(L, pass, &e, err);
    if (rc == TS_OK && (rc = layer_ops_append(out, &e, err)) != TS_OK)
        err_prefix(err, "mtp_ops: ");
    return rc;
}

int mtp_ops(const layer_shape *L, layer_pass pass, layer_ops *out, ts_err *err)
{
    int rc = layer_shape_check(L, err);
    if (rc != TS_OK)
        return rc;
    int64_t T = L->s * L->b, h = L->h, dt = L->dtype_bytes, t = L->t, S = T * h * dt;
    bool sp = L->sp && t > 1;
    int64_t E = (sp ? T / t : T) * h;
    out->n = 0;
    switch (pass) {
    case LAYER_PASS_F:
        if ((rc = add_embedding(L, pass, out, err)))
            return rc;
        layer_ops_mem(out, "mtp.enorm", 2 * E * dt);
        layer_ops_mem(out, "mtp.hnorm", 2 * E * dt);
        layer_ops_mem(out, "mtp.concat", 4 * E * dt);
        if (sp)
            layer_ops_comm(out, "mtp.eh.ag", COMM_ALL_GATHER, 2 * S, L->t);
        layer_ops_gemm(out, "mtp.eh_proj", T, h / t, 2 * h, 1);
        if (t > 1)
            layer_ops_comm(out, "mtp.eh.out.ag", COMM_ALL_GATHER, S, L->t);
        break;
    case LAYER_PASS_B:
    case LAYER_PASS_I: {
        int prev = out->n - 1, ag = -1;
        if (pass == LAYER_PASS_B && sp) {
            ag = layer_ops_comm(out, "mtp.eh.ag.in", COMM_ALL_GATHER, 2 * S, L->t);
            out->op[ag].dep[0] = prev;
        }
        int dg = layer_ops_gemm(out, "mtp.eh_proj.dgrad", T, 2 * h, h / t, 1), c = -1;
        out->op[dg].dep[0] = prev;
        out->op[dg].overlap = ag;
        if (t > 1) {
            c = layer_ops_comm(out, sp ? "mtp.eh.rs" : "mtp.eh.ar", sp ? COMM_REDUCE_SCATTER : COMM_ALL_REDUCE, 2 * S,
                               L->t);
            out->op[c].dep[0] = dg;
        }
        int last = dg;
        if (pass == LAYER_PASS_B) {
            last = layer_ops_gemm(out, "mtp.eh_proj.wgrad", h / t, 2 * h, T, 1);
            out->op[last].dep[0] = dg;
            out->op[last].dep[1] = ag;
            out->op[last].overlap = c;
        }
        int n1 = layer_ops_mem(out, "mtp.hnorm.bwd", 4 * E * dt);
        out->op[n1].dep[0] = last;
        out->op[n1].dep[1] = c;
        layer_ops_mem(out, "mtp.enorm.bwd", 4 * E * dt);
        if ((rc = add_embedding(L, pass, out, err)))
            return rc;
    } break;
    case LAYER_PASS_W: {
        int ag = -1;
        if (sp) {
            ag = layer_ops_comm(out, "mtp.eh.ag.in", COMM_ALL_GATHER, 2 * S, L->t);
            out->op[ag].dep[0] = -1;
        }
        int wg = layer_ops_gemm(out, "mtp.eh_proj.wgrad", h / t, 2 * h, T, 1);
        out->op[wg].dep[0] = -1;
        out->op[wg].dep[1] = ag;
        if ((rc = add_embedding(L, pass, out, err)))
            return rc;
    } break;
    case LAYER_PASS_R:
        break;
    default:
        return err_set(err, TS_EINVAL, "mtp_ops: unknown pass %d", (int)pass);
    }
    return TS_OK;
}

int64_t mtp_saved_bytes(const layer_shape *L, int64_t *free_i, int64_t *free_w)
{
    layer_saved_list sl;
    int64_t emb = 0;
    if (layer_embedding_saved(L, &sl, NULL) == TS_OK)
        emb = layer_saved_kept_bytes(&sl);
    int64_t T = L->s * L->b, E = (L->sp && L->t > 1 ? T / L->t : T) * L->h, dt = L->dtype_bytes;
    int64_t fi = emb + 2 * E * dt, fw = 2 * E * dt;
    if (free_i)
        *free_i = fi;
    if (free_w)
        *free_w = fw;
    return fi + fw;
}

int64_t mtp_depth_rank_params(const model_config *m, int t)
{
    int64_t h = m->hidden_size, nw = m->normalization == NORM_RMSNORM ? 1 : 2;
    return 2 * h * h / (t > 0 ? t : 1) + 3 * nw * h;
}

double mtp_model_flops_per_iter(const model_config *m, const moe_config *e, int depths, int64_t global_batch,
                                bool causal)
{
    if (depths <= 0)
        return 0;
    double s = m->seq_length, h = m->hidden_size;
    double layer = flops_layer_fwd_per_seq(m);
    if (causal)
        layer -= flops_attn_core_fwd_per_seq(m) - flops_attn_core_fwd_causal_per_seq(m);
    if (moe_layer_is_moe(e, m->num_layers - 1)) { /* the MoE block instead of the dense MLP */
        double fc1 = (m->swiglu ? 2.0 : 1.0) * m->ffn_hidden_size;
        layer += s * moe_block_fwd_flops_per_token(m, e) - (2.0 * s * h * fc1 + 2.0 * s * m->ffn_hidden_size * h);
    }
    if (e->mla && m->num_layers > 0) /* one layer's share of MLA's change */
        layer += mla_model_flops_delta(m, e, 1, causal) / (3.0 * m->num_layers);
    double per_depth = 2.0 * s * (2.0 * h) * h + layer + flops_logit_fwd_per_seq(m);
    return 3.0 * depths * per_depth * (double)global_batch;
}
