/* Unit tests for exec/core/gpt on one process (t = p = d = 1): the whole
 * model's backward against finite differences, the zero-bubble split
 * (input + weight gradient) against the fused backward, and a model cut
 * into two pipeline stages against the single stage.
 *
 * Finite-difference tolerance: the loss is the mean token cross-entropy
 * (~log V = 2.4) summed in double from fp32 per-token losses, each rounded
 * to ~2.4 * 6e-8 = 1.5e-7, so with h = 1e-3 the central difference carries
 * ~1.5e-7 / 2e-3 ~ 1e-4 of rounding noise at worst. h cannot be larger: the
 * embeddings (std 0.02) feed a LayerNorm whose input variance is ~4e-4, so
 * a 1e-2 step is not small there and the O(h^2) error reached 4e-3 (measured).
 * Accepted: |g - fd| <= 2e-4 + 2e-2 |fd| per parameter (every parameter is
 * checked; the largest deviation measured is 1.1e-4) and a relative error of
 * the whole gradient vector below 1e-2 (measured 5e-4). FD_VERBOSE=1 prints
 * both. A wrong term moves gradients by O(|g|), far above either bound.
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
#include "exec/cpu/backend_cpu.h"

static const gpt_dims TINY = {.vocab = 11, .seq = 5, .hidden = 8, .heads = 2, .ffn = 12, .layers = 2, .batch = 2};
/* Llama-architecture layers: RMSNorm, SwiGLU, no biases, grouped-query
 * attention (4 heads of 4 in 2 groups), rope; same tokens as TINY. */
static const gpt_dims LLAMA = {.vocab = 11,
                               .seq = 5,
                               .hidden = 16,
                               .heads = 4,
                               .ffn = 12,
                               .layers = 2,
                               .batch = 2,
                               .groups = 2,
                               .rmsnorm = true,
                               .swiglu = true,
                               .no_bias = true,
                               .rope = true};

typedef struct {
    backend *be;
    comm *cm;
    int tok[64], tgt[64];
} env;

static void env_init(env *e, const gpt_dims *d)
{
    ts_err err;
    cr_assert_eq(backend_cpu_create(1, &e->be, &err), TS_OK);
    cr_assert_eq(comm_local_create(&e->cm, &err), TS_OK);
    data_microbatch(7, 0, 1, 0, d->batch, d->seq, d->vocab, e->tok, e->tgt);
}
static void env_free(env *e)
{
    e->cm->destroy(e->cm);
    e->be->destroy(e->be);
}

static double loss_of(gpt_stage *st, env *e)
{
    ts_err err;
    gpt_acts *a;
    double s;
    cr_assert_eq(gpt_acts_create(st, &a, &err), TS_OK, "%s", err.msg);
    cr_assert_eq(gpt_forward(st, a, e->tok, e->tgt, NULL, NULL, &s, &err), TS_OK, "%s", err.msg);
    gpt_acts_free(st, a);
    return s / (TINY.batch * TINY.seq);
}

Test(exec_gpt, parameter_count_and_layout)
{
    /* 2 layers: wte 88 + wpe 40 + 2 * (16 + 192 + 24 + 64 + 8 + 16 + 96 + 12 + 96 + 8) + 16 + 88 */
    cr_assert_eq(gpt_num_params(&TINY), 88u + 40 + 2 * 532 + 16 + 88);
    size_t n;
    cr_assert_eq(gpt_full_offset(&TINY, GP_LN1W, 1, &n), 88u + 40 + 532);
    cr_assert_eq(n, 8u);
    cr_assert_eq(gpt_full_offset(&TINY, GP_WOUT, -1, &n), 88u + 40 + 2 * 532 + 16);
}

static void backward_matches_fd(const gpt_dims *d)
{
    env e;
    ts_err err;
    gpt_stage *st;
    env_init(&e, d);
    cr_assert_eq(gpt_stage_create(d, 0, d->layers, true, true, false, 42, e.be, e.cm, &st, &err), TS_OK, "%s", err.msg);
    size_t np = gpt_stage_num_params(st);
    cr_assert_eq(np, gpt_num_params(d));
    size_t N = (size_t)d->batch * d->seq;
    gpt_acts *a;
    cr_assert_eq(gpt_acts_create(st, &a, &err), TS_OK);
    cr_assert_eq(gpt_forward(st, a, e.tok, e.tgt, NULL, NULL, NULL, &err), TS_OK, "%s", err.msg);
    gpt_stage_zero_grads(st);
    cr_assert_eq(gpt_backward(st, a, NULL, 1.0f / N, NULL, &err), TS_OK, "%s", err.msg);
    gpt_acts_free(st, a);

    float *p = gpt_stage_params(st), *g = gpt_stage_grads(st);
    const float h = 1e-3f;
    double maxerr = 0.0;
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < np; i++) {
        float p0 = p[i];
        p[i] = p0 + h;
        double lp = loss_of(st, &e);
        p[i] = p0 - h;
        double lm = loss_of(st, &e);
        p[i] = p0;
        double fd = (lp - lm) / (2.0 * h);
        if (fabs(g[i] - fd) > maxerr)
            maxerr = fabs(g[i] - fd);
        cr_assert(fabs(g[i] - fd) <= 2e-4 + 2e-2 * fabs(fd), "parameter %zu: gradient %.6g, finite difference %.6g", i,
                  g[i], fd);
        num += (g[i] - fd) * (g[i] - fd);
        den += fd * fd;
    }
    if (getenv("FD_VERBOSE"))
        fprintf(stderr, "max |g - fd| %.3g, relative norm %.3g\n", maxerr, sqrt(num / den));
    cr_assert(den > 0.0);
    cr_assert(sqrt(num / den) < 1e-2, "relative gradient error %.3g", sqrt(num / den));
    gpt_stage_free(st);
    env_free(&e);
}
Test(exec_gpt, whole_model_backward_matches_fd)
{
    backward_matches_fd(&TINY);
}
Test(exec_gpt, llama_backward_matches_fd)
{
    backward_matches_fd(&LLAMA);
}
/* the output layer tied to the word embedding: no wout parameters, the embedding's gradient
 * gets both uses */
Test(exec_gpt, tied_backward_matches_fd)
{
    gpt_dims d = TINY, l = LLAMA;
    d.tie_embed = l.tie_embed = true;
    cr_assert_eq(gpt_num_params(&d), gpt_num_params(&TINY) - 88u);
    backward_matches_fd(&d);
    backward_matches_fd(&l);
}
Test(exec_gpt, tied_last_stage_holds_a_copy)
{
    gpt_dims d = TINY;
    d.tie_embed = true;
    env e;
    ts_err err;
    env_init(&e, &d);
    gpt_stage *s0, *s1, *one;
    cr_assert_eq(gpt_stage_create(&d, 0, 1, true, false, false, 5, e.be, e.cm, &s0, &err), TS_OK);
    cr_assert_eq(gpt_stage_create(&d, 1, 1, false, true, false, 5, e.be, e.cm, &s1, &err), TS_OK);
    cr_assert_eq(gpt_stage_create(&d, 0, 2, true, true, false, 5, e.be, e.cm, &one, &err), TS_OK);
    size_t n0, n1, n2;
    float *g0 = gpt_stage_tied_grad(s0, &n0), *g1 = gpt_stage_tied_grad(s1, &n1);
    cr_assert(g0 && g1 && n0 == 88 && n1 == 88);
    cr_assert_null(gpt_stage_tied_grad(one, &n2), "one stage: nothing to sum");
    /* the copy starts equal to the embedding and is not exported */
    int nt;
    const gpt_tensor *tt = gpt_stage_tensors(s1, &nt);
    cr_assert(tt[nt - 1].copy);
    const float *w0 = gpt_stage_params(s0), *w1 = gpt_stage_params(s1) + tt[nt - 1].offset;
    for (int i = 0; i < 88; i++)
        cr_assert_eq(w0[i], w1[i]);
    gpt_stage_free(s0);
    gpt_stage_free(s1);
    gpt_stage_free(one);
    env_free(&e);
}

static void split_equals_fused(const gpt_dims *d)
{
    env e;
    ts_err err;
    gpt_stage *st;
    env_init(&e, d);
    cr_assert_eq(gpt_stage_create(d, 0, d->layers, true, true, false, 42, e.be, e.cm, &st, &err), TS_OK);
    size_t np = gpt_stage_num_params(st), N = (size_t)d->batch * d->seq;
    float *g1 = malloc(np * 4);
    gpt_acts *a;
    gpt_stage_zero_grads(st);
    cr_assert_eq(gpt_acts_create(st, &a, &err), TS_OK);
    cr_assert_eq(gpt_forward(st, a, e.tok, e.tgt, NULL, NULL, NULL, &err), TS_OK);
    cr_assert_eq(gpt_backward(st, a, NULL, 1.0f / N, NULL, &err), TS_OK);
    gpt_acts_free(st, a);
    memcpy(g1, gpt_stage_grads(st), np * 4);

    gpt_stage_zero_grads(st);
    cr_assert_eq(gpt_acts_create(st, &a, &err), TS_OK);
    cr_assert_eq(gpt_forward(st, a, e.tok, e.tgt, NULL, NULL, NULL, &err), TS_OK);
    cr_assert_eq(gpt_backward_weight(st, a, &err), TS_ESTATE, "W before I must be refused");
    cr_assert_eq(gpt_backward_input(st, a, NULL, 1.0f / N, NULL, &err), TS_OK, "%s", err.msg);
    /* I alone leaves the linear layers' and embeddings' weight gradients untouched (W's); the
     * norms' it takes (a zero-bubble W keeps only the linear layers' inputs and output gradients) */
    int nt;
    const gpt_tensor *tt = gpt_stage_tensors(st, &nt);
    size_t norm_nonzero = 0;
    for (int k = 0; k < nt; k++) {
        gpt_pkind kd = tt[k].kind;
        bool norm = kd == GP_LN1W || kd == GP_LN1B || kd == GP_LN2W || kd == GP_LN2B || kd == GP_LNFW ||
                    kd == GP_LNFB || kd == GP_QLNW || kd == GP_QLNB || kd == GP_KLNW || kd == GP_KLNB;
        for (size_t i = tt[k].offset; i < tt[k].offset + tt[k].n; i++) {
            if (!norm)
                cr_assert_eq(gpt_stage_grads(st)[i], 0.0f, "tensor %d (kind %d) after I", k, (int)kd);
            else
                norm_nonzero += gpt_stage_grads(st)[i] != 0.0f;
        }
    }
    cr_assert_gt(norm_nonzero, 0u, "I takes the norms' weight gradients");
    cr_assert_eq(gpt_backward_weight(st, a, &err), TS_OK, "%s", err.msg);
    gpt_acts_free(st, a);
    /* same operations in the same order per tensor: bitwise equal */
    cr_assert_eq(memcmp(g1, gpt_stage_grads(st), np * 4), 0);
    cr_assert_eq(e.be->cur_bytes[XMEM_ACTS], 0u, "activations leaked");
    free(g1);
    gpt_stage_free(st);
    env_free(&e);
}
Test(exec_gpt, split_backward_equals_fused)
{
    split_equals_fused(&TINY);
}
Test(exec_gpt, llama_split_backward_equals_fused)
{
    split_equals_fused(&LLAMA);
}

static void two_stages(const gpt_dims *base)
{
    gpt_dims d = *base;
    d.layers = 3;
    env e;
    ts_err err;
    env_init(&e, &d);
    size_t N = (size_t)d.batch * d.seq, np = gpt_num_params(&d);
    gpt_stage *one, *s0, *s1;
    cr_assert_eq(gpt_stage_create(&d, 0, 3, true, true, false, 5, e.be, e.cm, &one, &err), TS_OK);
    cr_assert_eq(gpt_stage_create(&d, 0, 1, true, false, false, 5, e.be, e.cm, &s0, &err), TS_OK);
    cr_assert_eq(gpt_stage_create(&d, 1, 2, false, true, false, 5, e.be, e.cm, &s1, &err), TS_OK);
    gpt_acts *a, *a0, *a1;
    double l1, l2;
    cr_assert_eq(gpt_acts_create(one, &a, &err), TS_OK);
    cr_assert_eq(gpt_forward(one, a, e.tok, e.tgt, NULL, NULL, &l1, &err), TS_OK);
    cr_assert_eq(gpt_backward(one, a, NULL, 1.0f / N, NULL, &err), TS_OK);

    size_t io = gpt_stage_io_floats(s0);
    float *y = calloc(io, 4), *dy = calloc(io, 4);
    cr_assert_eq(gpt_acts_create(s0, &a0, &err), TS_OK);
    cr_assert_eq(gpt_acts_create(s1, &a1, &err), TS_OK);
    cr_assert_eq(gpt_forward(s0, a0, e.tok, NULL, NULL, y, NULL, &err), TS_OK, "%s", err.msg);
    cr_assert_eq(gpt_forward(s1, a1, NULL, e.tgt, y, NULL, &l2, &err), TS_OK, "%s", err.msg);
    cr_assert_eq(l1, l2);
    cr_assert_eq(gpt_backward_input(s1, a1, NULL, 1.0f / N, dy, &err), TS_OK, "%s", err.msg);
    cr_assert_eq(gpt_backward_weight(s1, a1, &err), TS_OK);
    cr_assert_eq(gpt_backward(s0, a0, dy, 0.0f, NULL, &err), TS_OK, "%s", err.msg);

    float *full1 = calloc(np, 4), *full2 = calloc(np, 4);
    cr_assert_eq(gpt_stage_export(one, true, true, full1, &err), TS_OK);
    cr_assert_eq(gpt_stage_export(s0, true, true, full2, &err), TS_OK);
    cr_assert_eq(gpt_stage_export(s1, true, true, full2, &err), TS_OK);
    cr_assert_eq(memcmp(full1, full2, np * 4), 0, "gradients differ between 1 and 2 stages");
    cr_assert_eq(gpt_stage_export(one, false, true, full1, &err), TS_OK);
    cr_assert_eq(gpt_stage_export(s0, false, true, full2, &err), TS_OK);
    cr_assert_eq(gpt_stage_export(s1, false, true, full2, &err), TS_OK);
    cr_assert_eq(memcmp(full1, full2, np * 4), 0, "initial weights differ between 1 and 2 stages");
    gpt_acts_free(one, a);
    gpt_acts_free(s0, a0);
    gpt_acts_free(s1, a1);
    gpt_stage_free(one);
    gpt_stage_free(s0);
    gpt_stage_free(s1);
    free(y);
    free(dy);
    free(full1);
    free(full2);
    env_free(&e);
}
Test(exec_gpt, two_stages_equal_one)
{
    two_stages(&TINY);
}
Test(exec_gpt, llama_two_stages_equal_one)
{
    two_stages(&LLAMA);
}

Test(exec_gpt, llama_parameter_count_and_layout)
{
    /* no wpe, no biases, RMSNorm weights only; per layer ln1w 16 + qkv (16 + 2*8) x 16 = 512 + proj 256 +
     * ln2w 16 + fc1 (2*12) x 16 = 384 + fc2 16 x 12 = 192 */
    cr_assert_eq(gpt_num_params(&LLAMA), 176u + 2 * 1376 + 16 + 176);
    size_t n;
    cr_assert_eq(gpt_full_offset(&LLAMA, GP_WPE, -1, &n), 176u);
    cr_assert_eq(n, 0u);
    cr_assert_eq(gpt_full_offset(&LLAMA, GP_FCW, 1, &n), 176u + 1376 + 16 + 512 + 256 + 16);
    cr_assert_eq(n, 384u);
    cr_assert_eq(gpt_full_offset(&LLAMA, GP_QKVB, 0, &n), 176u + 16 + 512);
    cr_assert_eq(n, 0u);
    env e;
    ts_err err;
    gpt_stage *st;
    env_init(&e, &LLAMA);
    cr_assert_eq(gpt_stage_create(&LLAMA, 0, 2, true, true, false, 1, e.be, e.cm, &st, &err), TS_OK, "%s", err.msg);
    int nt;
    const gpt_tensor *tt = gpt_stage_tensors(st, &nt);
    cr_assert_eq(nt, 1 + 2 * 6 + 2, "absent tensors are not listed");
    for (int i = 0; i < nt; i++)
        cr_assert(tt[i].n > 0);
    gpt_stage_free(st);
    env_free(&e);
}

Test(exec_gpt, llama_bad_dims_are_refused)
{
    env e;
    ts_err err;
    gpt_stage *st;
    env_init(&e, &LLAMA);
    gpt_dims d = LLAMA;
    d.groups = 3;
    cr_assert_eq(gpt_stage_create(&d, 0, 1, true, true, false, 1, e.be, e.cm, &st, &err), TS_EINVAL);
    cr_assert(strstr(err.msg, "--num-query-groups 3") != NULL, "%s", err.msg);
    d = LLAMA;
    d.hidden = 12; /* head size 3 */
    cr_assert_eq(gpt_stage_create(&d, 0, 1, true, true, false, 1, e.be, e.cm, &st, &err), TS_EINVAL);
    cr_assert(strstr(err.msg, "even") != NULL, "%s", err.msg);
    /* a backend without the kernels is refused with the flag named */
    backend nok = *e.be;
    nok.swiglu_fwd = NULL;
    cr_assert_eq(gpt_stage_create(&LLAMA, 0, 1, true, true, false, 1, &nok, e.cm, &st, &err), TS_ENOTSUP);
    cr_assert(strstr(err.msg, "--swiglu") != NULL, "%s", err.msg);
    env_free(&e);
}

Test(exec_gpt, bad_dims_are_refused)
{
    env e;
    ts_err err;
    gpt_stage *st;
    env_init(&e, &TINY);
    gpt_dims d = TINY;
    d.hidden = 9;
    cr_assert_eq(gpt_stage_create(&d, 0, 1, true, true, false, 1, e.be, e.cm, &st, &err), TS_EINVAL);
    cr_assert(strstr(err.msg, "--num-attention-heads") != NULL, "%s", err.msg);
    cr_assert_eq(gpt_stage_create(&TINY, 1, 5, true, true, false, 1, e.be, e.cm, &st, &err), TS_EINVAL);
    env_free(&e);
}

/* Full recomputation reruns the same operations on the same inputs: the
 * loss and gradients are bitwise those without it (fused and split
 * backward), and a micro-batch keeps fewer activations. */
static void recompute_equals_plain(const gpt_dims *base, int method, int layers, bool attn)
{
    gpt_dims d = *base, r = *base;
    d.layers = r.layers = 3;
    r.recompute = method;
    r.recompute_layers = layers;
    r.recompute_attn = attn;
    env e;
    ts_err err;
    env_init(&e, &d);
    size_t N = (size_t)d.batch * d.seq, np = gpt_num_params(&d);
    gpt_stage *plain, *rc;
    cr_assert_eq(gpt_stage_create(&d, 0, 3, true, true, false, 3, e.be, e.cm, &plain, &err), TS_OK, "%s", err.msg);
    cr_assert_eq(gpt_stage_create(&r, 0, 3, true, true, false, 3, e.be, e.cm, &rc, &err), TS_OK, "%s", err.msg);
    for (int split = 0; split < 2; split++) {
        double l1, l2;
        gpt_acts *a1, *a2;
        gpt_stage_zero_grads(plain);
        gpt_stage_zero_grads(rc);
        /* what a micro-batch keeps after its forward */
        size_t before = e.be->cur_bytes[XMEM_ACTS];
        cr_assert_eq(gpt_acts_create(plain, &a1, &err), TS_OK);
        cr_assert_eq(gpt_forward(plain, a1, e.tok, e.tgt, NULL, NULL, &l1, &err), TS_OK);
        size_t plain_acts = e.be->cur_bytes[XMEM_ACTS] - before;
        cr_assert_eq(gpt_acts_create(rc, &a2, &err), TS_OK);
        cr_assert_eq(gpt_forward(rc, a2, e.tok, e.tgt, NULL, NULL, &l2, &err), TS_OK, "%s", err.msg);
        size_t rc_acts = e.be->cur_bytes[XMEM_ACTS] - before - plain_acts;
        cr_assert_lt(rc_acts, plain_acts, "recomputation keeps %zu bytes of activations, none %zu", rc_acts,
                     plain_acts);
        /* two forwards of the recomputed stage in a row: the second must not disturb the first's checkpoints */
        gpt_acts *a3;
        cr_assert_eq(gpt_acts_create(rc, &a3, &err), TS_OK);
        cr_assert_eq(gpt_forward(rc, a3, e.tgt, e.tok, NULL, NULL, NULL, &err), TS_OK, "%s", err.msg);
        cr_assert_eq(l1, l2);
        if (split) {
            cr_assert_eq(gpt_backward_input(plain, a1, NULL, 1.0f / N, NULL, &err), TS_OK);
            cr_assert_eq(gpt_backward_input(rc, a2, NULL, 1.0f / N, NULL, &err), TS_OK, "%s", err.msg);
            /* another micro-batch's forward between I and W */
            cr_assert_eq(gpt_forward(rc, a3, e.tok, e.tgt, NULL, NULL, NULL, &err), TS_OK);
            cr_assert_eq(gpt_backward_weight(plain, a1, &err), TS_OK);
            cr_assert_eq(gpt_backward_weight(rc, a2, &err), TS_OK, "%s", err.msg);
        } else {
            cr_assert_eq(gpt_backward(plain, a1, NULL, 1.0f / N, NULL, &err), TS_OK);
            cr_assert_eq(gpt_backward(rc, a2, NULL, 1.0f / N, NULL, &err), TS_OK, "%s", err.msg);
        }
        cr_assert_eq(memcmp(gpt_stage_grads(plain), gpt_stage_grads(rc), np * 4), 0,
                     "gradients differ with recomputation (method %d, %d layers, split %d)", method, layers, split);
        gpt_acts_free(plain, a1);
        gpt_acts_free(rc, a2);
        gpt_acts_free(rc, a3);
        cr_assert_eq(e.be->cur_bytes[XMEM_ACTS], before, "activations leaked");
    }
    gpt_stage_free(plain);
    gpt_stage_free(rc);
    env_free(&e);
}
Test(exec_gpt, recompute_uniform_equals_plain)
{
    recompute_equals_plain(&TINY, GPT_RC_UNIFORM, 1, false);
    recompute_equals_plain(&TINY, GPT_RC_UNIFORM, 2, false);
    recompute_equals_plain(&LLAMA, GPT_RC_UNIFORM, 3, false);
}
Test(exec_gpt, recompute_block_equals_plain)
{
    recompute_equals_plain(&TINY, GPT_RC_BLOCK, 2, false);
    recompute_equals_plain(&LLAMA, GPT_RC_BLOCK, 0, false);
}
/* selective recomputation of the attention core (Megatron's core_attn), alone and under full */
Test(exec_gpt, recompute_attention_scores_equals_plain)
{
    recompute_equals_plain(&TINY, GPT_RC_NONE, 0, true);
    recompute_equals_plain(&LLAMA, GPT_RC_NONE, 0, true);
    recompute_equals_plain(&LLAMA, GPT_RC_UNIFORM, 2, true);
}

/* Flash attention (the log-sum-exp saved, the scores recomputed in the
 * backward): the backward against finite differences (same tolerances),
 * selective recomputation bitwise equal to keeping the log-sum-exp, and
 * its memory: a micro-batch keeps exactly L x B x NH x (T^2 - T) fewer
 * floats than with the unfused attention (the scores [B, NH, T, T] replaced
 * by the log-sum-exp [B, NH, T]), and the stage no score-gradient scratch
 * [B, NH, T, T]. */
Test(exec_gpt, flash_backward_matches_fd)
{
    gpt_dims d = TINY, l = LLAMA;
    d.flash = l.flash = true;
    backward_matches_fd(&d);
    backward_matches_fd(&l);
}
Test(exec_gpt, flash_recompute_equals_plain)
{
    gpt_dims d = TINY, l = LLAMA;
    d.flash = l.flash = true;
    recompute_equals_plain(&d, GPT_RC_NONE, 0, true);
    recompute_equals_plain(&l, GPT_RC_UNIFORM, 2, true);
    recompute_equals_plain(&d, GPT_RC_UNIFORM, 1, false);
}
Test(exec_gpt, flash_saves_the_log_sum_exp_only)
{
    env e;
    ts_err err;
    gpt_dims u = TINY, f = TINY;
    f.flash = true;
    env_init(&e, &u);
    gpt_stage *su, *sf;
    size_t b0 = e.be->cur_bytes[XMEM_BUFFERS];
    cr_assert_eq(gpt_stage_create(&u, 0, u.layers, true, true, false, 3, e.be, e.cm, &su, &err), TS_OK, "%s", err.msg);
    size_t bu = e.be->cur_bytes[XMEM_BUFFERS] - b0;
    cr_assert_eq(gpt_stage_create(&f, 0, f.layers, true, true, false, 3, e.be, e.cm, &sf, &err), TS_OK, "%s", err.msg);
    size_t bf = e.be->cur_bytes[XMEM_BUFFERS] - b0 - bu;
    size_t BH = (size_t)TINY.batch * TINY.heads, T = TINY.seq;
    cr_assert_eq(bu - bf, BH * T * T * 4, "buffers: unfused %zu, flash %zu bytes", bu, bf);
    size_t a0 = e.be->cur_bytes[XMEM_ACTS];
    gpt_acts *au, *af;
    double lu, lf;
    cr_assert_eq(gpt_acts_create(su, &au, &err), TS_OK);
    cr_assert_eq(gpt_forward(su, au, e.tok, e.tgt, NULL, NULL, &lu, &err), TS_OK);
    size_t nu = e.be->cur_bytes[XMEM_ACTS] - a0;
    cr_assert_eq(gpt_acts_create(sf, &af, &err), TS_OK);
    cr_assert_eq(gpt_forward(sf, af, e.tok, e.tgt, NULL, NULL, &lf, &err), TS_OK, "%s", err.msg);
    size_t nf = e.be->cur_bytes[XMEM_ACTS] - a0 - nu;
    cr_assert_eq(nu - nf, (size_t)TINY.layers * BH * (T * T - T) * 4, "activations: unfused %zu, flash %zu bytes", nu,
                 nf);
    /* same loss to rounding (the softmax summed in another order) */
    cr_assert(fabs(lu - lf) <= 1e-5 * fabs(lu), "loss unfused %.9g, flash %.9g", lu, lf);
    gpt_acts_free(su, au);
    gpt_acts_free(sf, af);
    gpt_stage_free(su);
    gpt_stage_free(sf);
    env_free(&e);
}

/* The backend keeps freed blocks for reuse: the same size comes back (no new
 * allocation), zeroed, and only allocated bytes are counted. */
Test(exec_gpt, freed_blocks_come_back_zeroed)
{
    env e;
    ts_err err;
    env_init(&e, &TINY);
    float *p, *q, *r;
    cr_assert_eq(be_alloc(e.be, 100, XMEM_ACTS, &p, &err), TS_OK);
    for (int i = 0; i < 100; i++)
        p[i] = 1.0f;
    be_free(e.be, p, 100, XMEM_ACTS);
    cr_assert_eq(e.be->cur_bytes[XMEM_ACTS], 0u, "a kept block is not counted");
    cr_assert_eq(be_alloc(e.be, 50, XMEM_ACTS, &r, &err), TS_OK);
    cr_assert_neq(r, p, "another size is a new block");
    cr_assert_eq(be_alloc(e.be, 100, XMEM_ACTS, &q, &err), TS_OK);
    cr_assert_eq(q, p, "the kept block of the same size comes back");
    for (int i = 0; i < 100; i++)
        cr_assert_eq(q[i], 0.0f, "zeroed");
    cr_assert_eq(e.be->cur_bytes[XMEM_ACTS], 600u);
    be_free(e.be, q, 100, XMEM_ACTS);
    be_free(e.be, r, 50, XMEM_ACTS);
    env_free(&e); /* destroy() releases the kept blocks (ASan checks) */
}

/* --qk-layernorm: the model's norm over each query and key head, before rope */
Test(exec_gpt, qk_norm_parameters)
{
    gpt_dims d = TINY, l = LLAMA;
    d.qk_norm = l.qk_norm = true;
    /* LayerNorm: q and k weight and bias of hs = 4 each per layer; RMSNorm (hs = 4): weights only */
    cr_assert_eq(gpt_num_params(&d), gpt_num_params(&TINY) + 2u * 16);
    cr_assert_eq(gpt_num_params(&l), gpt_num_params(&LLAMA) + 2u * 8);
    size_t n;
    cr_assert_eq(gpt_full_offset(&l, GP_KLNW, 1, &n), 176u + 1384 + 16 + 512 + 4);
    cr_assert_eq(n, 4u);
    cr_assert_eq(gpt_full_offset(&l, GP_QLNB, 0, &n), 176u + 16 + 512 + 4);
    cr_assert_eq(n, 0u);
}
Test(exec_gpt, qk_norm_backward_matches_fd)
{
    gpt_dims d = TINY, l = LLAMA;
    d.qk_norm = l.qk_norm = true;
    backward_matches_fd(&d);
    backward_matches_fd(&l);
}
Test(exec_gpt, qk_norm_split_stages_recompute)
{
    gpt_dims d = TINY, l = LLAMA;
    d.qk_norm = l.qk_norm = true;
    split_equals_fused(&d);
    split_equals_fused(&l);
    two_stages(&l);
    recompute_equals_plain(&d, GPT_RC_UNIFORM, 2, false);
    recompute_equals_plain(&l, GPT_RC_BLOCK, 0, true);
}
/* a backend without the q/k norm kernels refuses the flag at stage creation */
Test(exec_gpt, qk_norm_needs_the_kernels)
{
    gpt_dims l = LLAMA;
    l.qk_norm = true;
    env e;
    ts_err err;
    gpt_stage *st = NULL;
    env_init(&e, &l);
    e.be->qknorm_fwd = NULL;
    cr_assert_eq(gpt_stage_create(&l, 0, 2, true, true, false, 1, e.be, e.cm, &st, &err), TS_ENOTSUP);
    cr_assert(strstr(err.msg, "--qk-layernorm") != NULL, "%s", err.msg);
    env_free(&e);
}
