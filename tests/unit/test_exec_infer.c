/* Unit tests for exec/core/gpt_infer (one process, t = 1): decoding with the
 * KV cache gives, at every step, the logits of a forward over the whole
 * prefix without a cache, and the probabilities of the training forward
 * (gpt_forward) at the same position; the cache's size; refused inputs.
 *
 * Tolerance (LOGIT_TOL): both sides run the same fp32 operations in the same
 * order except the GEMMs, whose rows differ in count (1 new row vs the
 * whole prefix) so BLAS may block and sum them differently. Each GEMM sums
 * at most max(C, F) = 12 products, each rounded relatively by 2^-24
 * (6e-8); through 2 layers, LayerNorms (which rescale by 1/std ~ 50 for the
 * 0.02-scale embeddings) and the output layer the logits (|l| ~ 0.1) carry
 * an absolute difference of order 12 * 6e-8 * 50 * 0.1 ~ 4e-6 at worst.
 * Accepted: 2e-5 absolute per logit (measured: 7.5e-9; INFER_VERBOSE=1
 * prints it). The test also checks that the logits
 * of consecutive steps differ by far more than that (a cache that attended
 * to the wrong positions, or none, would be caught). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/core/backend.h"
#include "exec/core/comm.h"
#include "exec/core/gpt.h"
#include "exec/core/gpt_infer.h"
#include "exec/cpu/backend_cpu.h"

#define LOGIT_TOL 2e-5 /* see the header comment */

static const gpt_dims TINY = {.vocab = 11, .seq = 8, .hidden = 8, .heads = 2, .ffn = 12, .layers = 2, .batch = 2};
enum { PROMPT = 3, STEPS = 5, B = 2, V = 11, T = 8 };

typedef struct {
    backend *be;
    comm *cm;
    gpt_stage *st;
} env;

static void env_init(env *e)
{
    ts_err err;
    cr_assert_eq(backend_cpu_create(1, &e->be, &err), TS_OK);
    cr_assert_eq(comm_local_create(&e->cm, &err), TS_OK);
    cr_assert_eq(gpt_stage_create(&TINY, 0, TINY.layers, true, true, false, 42, e->be, e->cm, &e->st, &err), TS_OK,
                 "%s", err.msg);
}
static void env_free(env *e)
{
    gpt_stage_free(e->st);
    e->cm->destroy(e->cm);
    e->be->destroy(e->be);
}

/* Logits of each sequence's last token after a cache-free forward over
 * seq[b][0 .. len): a fresh cache, one step of len tokens. */
static void recompute(env *e, int seq[B][T], int len, float *logits)
{
    ts_err err;
    gpt_kv *kv;
    int tok[B * T];
    cr_assert_eq(gpt_kv_create(e->st, T, &kv, &err), TS_OK, "%s", err.msg);
    for (int b = 0; b < B; b++)
        for (int i = 0; i < len; i++)
            tok[b * len + i] = seq[b][i];
    cr_assert_eq(gpt_infer_step(e->st, kv, tok, len, logits, &err), TS_OK, "%s", err.msg);
    gpt_kv_free(e->st, kv);
}

static double max_abs_diff(const float *a, const float *b, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fmax(m, fabs((double)a[i] - b[i]));
    return m;
}

Test(exec_infer, decode_with_cache_matches_full_recompute_every_step)
{
    env e;
    ts_err err;
    env_init(&e);
    gpt_kv *kv;
    cr_assert_eq(gpt_kv_create(e.st, PROMPT, &kv, &err), TS_OK, "%s", err.msg);
    int seq[B][T] = {{0}}, tok[B * PROMPT], next[B];
    for (int b = 0; b < B; b++)
        for (int i = 0; i < PROMPT; i++)
            tok[b * PROMPT + i] = seq[b][i] = (3 * b + 5 * i + 1) % V;
    float lc[B * V], lr[B * V], prev[B * V];
    double worst = 0, least_change = INFINITY;
    cr_assert_eq(gpt_infer_step(e.st, kv, tok, PROMPT, lc, &err), TS_OK, "%s", err.msg);
    for (int s = 0; s <= STEPS; s++) {
        int len = PROMPT + s;
        cr_assert_eq(gpt_kv_len(kv), len);
        recompute(&e, seq, len, lr);
        double d = max_abs_diff(lc, lr, B * V);
        worst = fmax(worst, d);
        cr_assert_leq(d, LOGIT_TOL, "step %d: cached and recomputed logits differ by %g", s, d);
        if (s > 0)
            least_change = fmin(least_change, max_abs_diff(lc, prev, B * V));
        memcpy(prev, lc, sizeof prev);
        if (s == STEPS)
            break;
        gpt_argmax(lc, B, V, next);
        for (int b = 0; b < B; b++)
            seq[b][len] = next[b];
        cr_assert_eq(gpt_infer_step(e.st, kv, next, 1, lc, &err), TS_OK, "%s", err.msg);
    }
    /* the comparison can fail: the logits move between steps far more than the tolerance */
    cr_assert_gt(least_change, 20 * LOGIT_TOL, "logits change by only %g between steps", least_change);
    if (getenv("INFER_VERBOSE"))
        fprintf(stderr, "largest cached-vs-recomputed difference %.3g, smallest step-to-step change %.3g\n", worst,
                least_change);
    gpt_kv_free(e.st, kv);
    env_free(&e);
}

/* The training forward (gpt_forward over T positions, padded after the
 * prefix: causal attention makes position len-1 independent of the pad)
 * gives softmax(decode logits) at row b*T + len - 1. */
Test(exec_infer, decode_matches_training_forward_probabilities)
{
    env e;
    ts_err err;
    env_init(&e);
    gpt_kv *kv;
    gpt_acts *a;
    cr_assert_eq(gpt_kv_create(e.st, PROMPT, &kv, &err), TS_OK, "%s", err.msg);
    cr_assert_eq(gpt_acts_create(e.st, &a, &err), TS_OK, "%s", err.msg);
    int seq[B * T] = {0}, tgt[B * T] = {0}, tok[B * PROMPT], next[B];
    for (int b = 0; b < B; b++)
        for (int i = 0; i < PROMPT; i++)
            tok[b * PROMPT + i] = seq[b * T + i] = (7 * b + 2 * i + 4) % V;
    float lc[B * V], *probs = malloc(sizeof(float) * B * T * V);
    cr_assert(probs);
    cr_assert_eq(gpt_infer_step(e.st, kv, tok, PROMPT, lc, &err), TS_OK, "%s", err.msg);
    for (int s = 0;; s++) {
        int len = PROMPT + s;
        cr_assert_eq(gpt_forward(e.st, a, seq, tgt, NULL, NULL, NULL, &err), TS_OK, "%s", err.msg);
        cr_assert_eq(gpt_forward_probs(e.st, a, probs, &err), TS_OK, "%s", err.msg);
        for (int b = 0; b < B; b++) {
            const float *l = lc + b * V, *p = probs + ((size_t)b * T + len - 1) * V;
            double mx = -INFINITY, sum = 0;
            for (int v = 0; v < V; v++)
                mx = fmax(mx, l[v]);
            for (int v = 0; v < V; v++)
                sum += exp(l[v] - mx);
            for (int v = 0; v < V; v++) {
                double q = exp(l[v] - mx) / sum;
                /* a probability's error is its logit's times p (<= 1) */
                cr_assert_leq(fabs(q - p[v]), LOGIT_TOL, "step %d seq %d class %d: %g vs %g", s, b, v, q, p[v]);
            }
        }
        if (len == T)
            break;
        gpt_argmax(lc, B, V, next);
        for (int b = 0; b < B; b++)
            seq[b * T + len] = next[b];
        cr_assert_eq(gpt_infer_step(e.st, kv, next, 1, lc, &err), TS_OK, "%s", err.msg);
    }
    free(probs);
    gpt_acts_free(e.st, a);
    gpt_kv_free(e.st, kv);
    env_free(&e);
}

Test(exec_infer, cache_size_is_the_closed_form)
{
    env e;
    ts_err err;
    env_init(&e);
    gpt_kv *kv;
    cr_assert_eq(gpt_kv_create(e.st, 1, &kv, &err), TS_OK, "%s", err.msg);
    /* 2 (K, V) x L x heads x head_dim x 4 bytes per token, B x T tokens */
    cr_assert_eq(gpt_kv_bytes_per_token(&TINY), 2u * 2 * 2 * 4 * 4);
    cr_assert_eq(gpt_kv_bytes(kv), gpt_kv_bytes_per_token(&TINY) * B * T);
    cr_assert_eq(e.be->cur_bytes[XMEM_ACTS], gpt_kv_bytes(kv));
    /* attention reads the cache: 2 x B x C x 4 more bytes per cached position */
    double a1 = gpt_infer_op_bytes(e.st, "attn", 1, 4), a2 = gpt_infer_op_bytes(e.st, "attn", 1, 5);
    cr_assert_float_eq(a2 - a1, 2.0 * B * 8 * 4, 1e-9);
    /* the output layer reads V x C weights */
    cr_assert_geq(gpt_infer_op_bytes(e.st, "logits", 1, 4), 11.0 * 8 * 4);
    cr_assert_eq(gpt_infer_op_bytes(e.st, "tp_allreduce", 1, 4), 0.0);
    gpt_kv_free(e.st, kv);
    cr_assert_eq(e.be->cur_bytes[XMEM_ACTS], 0u);
    env_free(&e);
}

Test(exec_infer, refuses_what_it_cannot_run)
{
    env e;
    ts_err err;
    env_init(&e);
    gpt_kv *kv;
    cr_assert_eq(gpt_kv_create(e.st, 0, &kv, &err), TS_EINVAL);
    cr_assert_eq(gpt_kv_create(e.st, T + 1, &kv, &err), TS_EINVAL);
    cr_assert_eq(gpt_kv_create(e.st, 4, &kv, &err), TS_OK, "%s", err.msg);
    int tok[B * 4] = {0};
    cr_assert_eq(gpt_infer_step(e.st, kv, tok, 5, NULL, &err), TS_EINVAL); /* more than max_new */
    tok[1] = V;
    cr_assert_eq(gpt_infer_step(e.st, kv, tok, 4, NULL, &err), TS_EINVAL); /* token outside the vocabulary */
    cr_assert(strstr(err.msg, "vocabulary"), "%s", err.msg);
    tok[1] = 0;
    cr_assert_eq(gpt_infer_step(e.st, kv, tok, 4, NULL, &err), TS_OK, "%s", err.msg);
    cr_assert_eq(gpt_infer_step(e.st, kv, tok, 4, NULL, &err), TS_OK, "%s", err.msg);
    cr_assert_eq(gpt_infer_step(e.st, kv, tok, 1, NULL, &err), TS_EINVAL); /* past --seq-length */
    cr_assert(strstr(err.msg, "seq-length"), "%s", err.msg);
    gpt_kv_reset(kv);
    cr_assert_eq(gpt_kv_len(kv), 0);
    gpt_kv_free(e.st, kv);
    /* a pipeline stage without the embedding */
    gpt_stage *half;
    cr_assert_eq(gpt_stage_create(&TINY, 1, 1, false, true, false, 42, e.be, e.cm, &half, &err), TS_OK);
    cr_assert_eq(gpt_kv_create(half, 1, &kv, &err), TS_ENOTSUP);
    cr_assert(strstr(err.msg, "pipeline"), "%s", err.msg);
    gpt_stage_free(half);
    env_free(&e);
}
