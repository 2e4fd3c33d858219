/* Unit tests of the MoE layers in exec/core/gpt on one process: which
 * layers are MoE (against the simulator's sim/model/moe.h rule), the flat
 * parameter layout without their dense MLP, the MoE parameter count, the
 * refusals, and the whole model's backward (flat parameters, routers,
 * experts) against central finite differences of the mean token loss plus
 * the auxiliary loss.
 *
 * Finite differences: routing is piecewise constant in the weights (a
 * top-k swap makes the difference jump), so the check runs with forced
 * balance: the experts a token uses are fixed (round robin), while the
 * routing weights (softmax of the chosen logits) and the auxiliary loss
 * (softmax over all logits) stay smooth functions of the router and the
 * input: every gradient term is exercised. Tolerance and step as
 * test_exec_gpt.c's (h = 1e-3; |g - fd| <= 2e-4 + 2e-2 |fd| per parameter;
 * the relative error of the whole vector below 1e-2): the aux term adds a
 * sum of O(1) double-precision softmax values, within the same rounding.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/core/backend.h"
#include "exec/core/comm.h"
#include "exec/core/data.h"
#include "exec/core/gpt.h"
#include "exec/core/moe.h"
#include "exec/cpu/backend_cpu.h"
#include "sim/model/moe.h"

/* 2 layers: layer 0 dense, layer 1 MoE (first dense 1, frequency 1). */
static const gpt_dims TINY_MOE = {.vocab = 11,
                                  .seq = 5,
                                  .hidden = 8,
                                  .heads = 2,
                                  .ffn = 12,
                                  .layers = 2,
                                  .batch = 2,
                                  .num_experts = 4,
                                  .moe_topk = 2,
                                  .moe_ffn = 6,
                                  .moe_layer_freq = 1,
                                  .moe_first_dense = 1,
                                  .moe_force_balance = true,
                                  .moe_aux_coeff = 0.1};

Test(exec_gpt_moe, moe_layers_follow_the_simulators_rule)
{
    int checked = 0, moe = 0;
    for (int E = 0; E <= 8; E += 8)
        for (int freq = 1; freq <= 4; freq++)
            for (int first = 0; first <= 3; first++)
                for (int l = 0; l < 16; l++) {
                    gpt_dims d = TINY_MOE;
                    d.num_experts = E;
                    d.moe_layer_freq = freq;
                    d.moe_first_dense = first;
                    moe_config e = {.num_experts = E, .layer_freq = freq, .first_dense_layers = first};
                    cr_assert_eq(gpt_layer_is_moe(&d, l), moe_layer_is_moe(&e, l),
                                 "E %d freq %d first dense %d layer %d", E, freq, first, l);
                    moe += gpt_layer_is_moe(&d, l);
                    checked++;
                }
    cr_assert_gt(moe, 0);
    cr_assert_lt(moe, checked);
}

Test(exec_gpt_moe, layout_drops_the_dense_mlp_of_moe_layers)
{
    gpt_dims dense = TINY_MOE;
    dense.num_experts = 0;
    /* a dense layer's MLP: FC1 96 + 12, FC2 96 + 8 (test_exec_gpt.c's TINY) */
    cr_assert_eq(gpt_num_params(&TINY_MOE), gpt_num_params(&dense) - (96u + 12 + 96 + 8));
    size_t n;
    cr_assert_eq(gpt_full_offset(&TINY_MOE, GP_FCW, 1, &n), gpt_full_offset(&TINY_MOE, GP_LN2B, 1, NULL) + 8);
    cr_assert_eq(n, 0u);
    cr_assert_eq(gpt_full_offset(&TINY_MOE, GP_LNFW, -1, NULL), gpt_full_offset(&dense, GP_LNFW, -1, NULL) - 212u);
    /* router 4 x 8, experts 4 x (6 x 8 + 8 x 6); SwiGLU: W1 twice as tall */
    cr_assert_eq(gpt_moe_num_params(&TINY_MOE), 32u + 4 * (48 + 48));
    gpt_dims sw = TINY_MOE;
    sw.swiglu = true;
    cr_assert_eq(gpt_moe_num_params(&sw), 32u + 4 * (96 + 48));
    cr_assert_eq(gpt_moe_num_params(&dense), 0u);
}

Test(exec_gpt_moe, unsupported_combinations_are_refused)
{
    ts_err err;
    gpt_dims d = TINY_MOE;
    d.recompute = GPT_RC_UNIFORM;
    cr_assert_eq(gpt_dims_check(&d, 1, false, &err), TS_ENOTSUP);
    cr_assert(strstr(err.msg, "--recompute-granularity full"), "%s", err.msg);
    d = TINY_MOE;
    d.dist_optim = true;
    cr_assert_eq(gpt_dims_check(&d, 1, false, &err), TS_ENOTSUP);
    cr_assert(strstr(err.msg, "--use-distributed-optimizer"), "%s", err.msg);
    d = TINY_MOE;
    cr_assert_eq(gpt_dims_check(&d, 2, false, &err), TS_ENOTSUP);
    cr_assert(strstr(err.msg, "--sequence-parallel"), "%s", err.msg);
    cr_assert_eq(gpt_dims_check(&d, 2, true, &err), TS_ENOTSUP); /* the aux loss with t > 1 */
    d.moe_aux_coeff = 0;
    cr_assert_eq(gpt_dims_check(&d, 2, true, &err), TS_OK, "%s", err.msg);
    d.moe_topk = 5;
    cr_assert_eq(gpt_dims_check(&d, 1, false, &err), TS_EINVAL);
    cr_assert(strstr(err.msg, "--moe-router-topk"), "%s", err.msg);
}

typedef struct {
    backend *be;
    comm *cm;
    int tok[64], tgt[64];
} env;

/* The MoE layers' host memory is in the backend's accounting: weights and
 * gradients (flat + MoE), Adam moments (flat + 2 x MoE), the saved state
 * of a forward as activations; everything released by the frees. */
Test(exec_gpt_moe, moe_memory_is_counted)
{
    env e;
    ts_err err;
    gpt_stage *st;
    const gpt_dims *d = &TINY_MOE;
    cr_assert_eq(backend_cpu_create(1, &e.be, &err), TS_OK);
    cr_assert_eq(comm_local_create(&e.cm, &err), TS_OK);
    data_microbatch(7, 0, 1, 0, d->batch, d->seq, d->vocab, e.tok, e.tgt);
    cr_assert_eq(gpt_stage_create(d, 0, d->layers, true, true, false, 42, e.be, e.cm, &st, &err), TS_OK, "%s", err.msg);
    size_t flat = gpt_num_params(d) * 4, moe = gpt_moe_num_params(d) * 4;
    cr_assert_eq(e.be->cur_bytes[XMEM_WEIGHTS], flat + moe);
    cr_assert_eq(e.be->cur_bytes[XMEM_GRADS], flat + moe);
    cr_assert_eq(e.be->cur_bytes[XMEM_OPTIM], 2 * (flat + moe));
    size_t acts0 = e.be->cur_bytes[XMEM_ACTS];
    gpt_acts *a;
    cr_assert_eq(gpt_acts_create(st, &a, &err), TS_OK);
    size_t acts1 = e.be->cur_bytes[XMEM_ACTS];
    cr_assert_eq(gpt_forward(st, a, e.tok, e.tgt, NULL, NULL, NULL, &err), TS_OK, "%s", err.msg);
    /* the routed rows: at least the input copies of N k assignments, C floats each */
    size_t N = (size_t)d->batch * d->seq;
    cr_assert_geq(e.be->cur_bytes[XMEM_ACTS] - acts1, N * d->moe_topk * d->hidden * 4);
    gpt_acts_free(st, a);
    cr_assert_eq(e.be->cur_bytes[XMEM_ACTS], acts0);
    gpt_stage_free(st);
    for (int c = 0; c < XMEM_NCAT; c++)
        cr_assert_eq(e.be->cur_bytes[c], 0u, "%s: %zu bytes still counted", xmem_cat_name(c), e.be->cur_bytes[c]);
    e.cm->destroy(e.cm);
    e.be->destroy(e.be);
}

/* Mean token loss plus the MoE layers' auxiliary losses. */
static double loss_of(gpt_stage *st, env *e, const gpt_dims *d)
{
    ts_err err;
    gpt_acts *a;
    double s;
    cr_assert_eq(gpt_acts_create(st, &a, &err), TS_OK, "%s", err.msg);
    cr_assert_eq(gpt_forward(st, a, e->tok, e->tgt, NULL, NULL, &s, &err), TS_OK, "%s", err.msg);
    gpt_acts_free(st, a);
    double aux = 0;
    for (int l = 0; l < d->layers; l++)
        if (gpt_stage_moe(st, l))
            aux += gpt_stage_moe(st, l)->aux_loss;
    return s / (d->batch * d->seq) + aux;
}

static void backward_matches_fd(const gpt_dims *d)
{
    env e;
    ts_err err;
    gpt_stage *st;
    cr_assert_eq(backend_cpu_create(1, &e.be, &err), TS_OK);
    cr_assert_eq(comm_local_create(&e.cm, &err), TS_OK);
    data_microbatch(7, 0, 1, 0, d->batch, d->seq, d->vocab, e.tok, e.tgt);
    cr_assert_eq(gpt_stage_create(d, 0, d->layers, true, true, false, 42, e.be, e.cm, &st, &err), TS_OK, "%s", err.msg);
    size_t N = (size_t)d->batch * d->seq;
    gpt_acts *a;
    cr_assert_eq(gpt_acts_create(st, &a, &err), TS_OK);
    cr_assert_eq(gpt_forward(st, a, e.tok, e.tgt, NULL, NULL, NULL, &err), TS_OK, "%s", err.msg);
    gpt_stage_zero_grads(st);
    cr_assert_eq(gpt_backward(st, a, NULL, 1.0f / N, NULL, &err), TS_OK, "%s", err.msg);
    gpt_acts_free(st, a);
    moe_layer *M = gpt_stage_moe(st, 1);
    cr_assert_not_null(M);
    cr_assert_null(gpt_stage_moe(st, 0));
    cr_assert_gt(M->aux_loss, 0.0);
    size_t nr = (size_t)d->num_experts * d->hidden, n1 = (size_t)d->num_experts * M->Fu * d->hidden,
           n2 = (size_t)d->num_experts * d->hidden * d->moe_ffn;
    struct {
        float *w, *g;
        size_t n;
    } P[4] = {{gpt_stage_params(st), gpt_stage_grads(st), gpt_stage_num_params(st)},
              {M->wr, M->gwr, nr},
              {M->w1, M->gw1, n1},
              {M->w2, M->gw2, n2}};
    const float h = 1e-3f;
    double maxerr = 0.0, num = 0.0, den = 0.0;
    int checked = 0;
    for (int t = 0; t < 4; t++)
        for (size_t i = 0; i < P[t].n; i++) {
            float p0 = P[t].w[i];
            P[t].w[i] = p0 + h;
            double lp = loss_of(st, &e, d);
            P[t].w[i] = p0 - h;
            double lm = loss_of(st, &e, d);
            P[t].w[i] = p0;
            double fd = (lp - lm) / (2.0 * h), g = P[t].g[i];
            maxerr = fmax(maxerr, fabs(g - fd));
            cr_assert(fabs(g - fd) <= 2e-4 + 2e-2 * fabs(fd), "tensor %d [%zu]: gradient %.6g, finite difference %.6g",
                      t, i, g, fd);
            num += (g - fd) * (g - fd);
            den += fd * fd;
            checked++;
        }
    if (getenv("FD_VERBOSE"))
        fprintf(stderr, "%d parameters: max |g - fd| %.3g, relative norm %.3g\n", checked, maxerr, sqrt(num / den));
    cr_assert(den > 0.0);
    cr_assert(sqrt(num / den) < 1e-2, "relative gradient error %.3g", sqrt(num / den));
    gpt_stage_free(st);
    e.cm->destroy(e.cm);
    e.be->destroy(e.be);
}

Test(exec_gpt_moe, whole_model_backward_matches_fd)
{
    backward_matches_fd(&TINY_MOE);
}

/* SwiGLU experts on Llama-architecture layers */
Test(exec_gpt_moe, llama_swiglu_experts_backward_matches_fd)
{
    gpt_dims d = TINY_MOE;
    d.hidden = 16;
    d.heads = 4;
    d.groups = 2;
    d.rmsnorm = d.swiglu = d.no_bias = d.rope = true;
    backward_matches_fd(&d);
}

/* The MoE layer checkpointed (recompute_moe): after the forward it keeps none of its routed
 * state (only its input, ln2's output, which the layer keeps anyway); the backward reruns
 * its forward and gives bitwise the gradients of the plain run, fused and split (I then W),
 * the statistics of the last forward untouched by the rerun. */
Test(exec_gpt_moe, recompute_moe_equals_plain)
{
    env e;
    ts_err err;
    gpt_dims dr = TINY_MOE;
    dr.recompute_moe = true;
    const gpt_dims *d = &TINY_MOE;
    cr_assert_eq(backend_cpu_create(1, &e.be, &err), TS_OK);
    cr_assert_eq(comm_local_create(&e.cm, &err), TS_OK);
    data_microbatch(7, 0, 1, 0, d->batch, d->seq, d->vocab, e.tok, e.tgt);
    size_t N = (size_t)d->batch * d->seq;
    gpt_stage *sp, *sr;
    cr_assert_eq(gpt_stage_create(d, 0, d->layers, true, true, false, 42, e.be, e.cm, &sp, &err), TS_OK, "%s", err.msg);
    cr_assert_eq(gpt_stage_create(&dr, 0, dr.layers, true, true, false, 42, e.be, e.cm, &sr, &err), TS_OK, "%s",
                 err.msg);
    size_t np = gpt_stage_num_params(sp), nm = gpt_moe_num_params(d);
    float *g0 = malloc(np * 4), *m0 = malloc(nm * 4), *g1 = malloc(np * 4), *m1 = malloc(nm * 4);
    cr_assert(g0 && m0 && g1 && m1);
    size_t kept[2] = {0};
    for (int split = 0; split < 2; split++)
        for (int run = 0; run < 2; run++) {
            gpt_stage *st = run ? sr : sp;
            gpt_acts *a;
            gpt_stage_zero_grads(st);
            cr_assert_eq(gpt_acts_create(st, &a, &err), TS_OK);
            size_t before = e.be->cur_bytes[XMEM_ACTS];
            cr_assert_eq(gpt_forward(st, a, e.tok, e.tgt, NULL, NULL, NULL, &err), TS_OK, "%s", err.msg);
            kept[run] = e.be->cur_bytes[XMEM_ACTS] - before;
            moe_layer *L = gpt_stage_moe(st, 1);
            size_t dropped = L->dropped;
            int64_t acc = L->tok_accum[0];
            if (split) {
                cr_assert_eq(gpt_backward_input(st, a, NULL, 1.0f / N, NULL, &err), TS_OK, "%s", err.msg);
                cr_assert_eq(gpt_backward_weight(st, a, &err), TS_OK, "%s", err.msg);
            } else {
                cr_assert_eq(gpt_backward(st, a, NULL, 1.0f / N, NULL, &err), TS_OK, "%s", err.msg);
            }
            cr_assert_eq(L->tok_accum[0], acc, "the rerun counts no tokens");
            cr_assert_eq(L->dropped, dropped);
            gpt_acts_free(st, a);
            memcpy(run ? g1 : g0, gpt_stage_grads(st), np * 4);
            moe_layer_export(L, true, true, run ? m1 : m0);
        }
    cr_assert_eq(memcmp(g0, g1, np * 4), 0, "flat gradients differ with the MoE layer recomputed");
    cr_assert_eq(memcmp(m0, m1, nm * 4), 0, "router / expert gradients differ with the MoE layer recomputed");
    /* the routed rows (at least the input copies of N k assignments) are not kept */
    cr_assert_geq(kept[0] - kept[1], N * d->moe_topk * d->hidden * 4, "kept %zu plain, %zu recomputed", kept[0],
                  kept[1]);
    free(g0);
    free(m0);
    free(g1);
    free(m1);
    gpt_stage_free(sp);
    gpt_stage_free(sr);
    e.cm->destroy(e.cm);
    e.be->destroy(e.be);
}
