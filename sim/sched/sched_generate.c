/* sched_generate — options checked, a generator's compute order, then the
 * transfers, gradient reductions and optimizer steps. */
#include "sim/sched/sched_generate.h"

#include <stdlib.h>

#include "sim/sched/sched_build.h"
#include "sim/sched/sched_comm.h"
#include "sim/sched/sched_gen.h"
#include "sim/sched/sched_gen_dual.h"
#include "sim/sched/sched_gen_zb.h"
#include "sim/sched/sched_validate.h"

/* Check o; TS_EINVAL naming the option and what would be valid. */
static int check_opts(const sched_opts *o, ts_err *err)
{
    if ((unsigned)o->kind >= SCHED_CUSTOM)
        return err_set(err, TS_EINVAL,
                       "schedule kind %d cannot be generated; valid: gpipe, 1f1b, "
                       "interleaved, zb-h1, zb-h2, zb-v, dualpipev, dualpipe",
                       (int)o->kind);
    const char *name = sched_kind_name(o->kind);
    if (o->p < 1 || o->p > SCHED_MAX_P)
        return err_set(err, TS_EINVAL, "pipeline size p = %d: must be in [1, %d]", o->p, SCHED_MAX_P);
    if (o->m < 1 || o->m > SCHED_MAX_M)
        return err_set(err, TS_EINVAL, "micro-batches m = %d: must be in [1, %d]", o->m, SCHED_MAX_M);
    if (o->kind == SCHED_INTERLEAVED) {
        if (o->v < 1 || o->v > SCHED_MAX_V)
            return err_set(err, TS_EINVAL, "interleaved: chunks per rank v = %d must be in [1, %d]", o->v, SCHED_MAX_V);
        int g = o->mb_group_size ? o->mb_group_size : o->p;
        /* Megatron-core (schedules.py, forward_backward_pipelining_with_interleaving)
         * raises the same error: group size must lie in [PP, M]. */
        if (o->v > 1 && (g < o->p || g > o->m))
            return err_set(err, TS_EINVAL,
                           "interleaved: micro-batch group size %d (microbatch_group_size_per_vp_stage%s) "
                           "must be in [p, m] = [%d, %d], as in Megatron-core; with v > 1 use m >= p "
                           "(m = %d, p = %d)",
                           g, o->mb_group_size ? "" : ", default p", o->p, o->m, o->m, o->p);
    } else if (sched_kind_is_v(o->kind)) {
        if (o->v != 2)
            return err_set(err, TS_EINVAL, "%s: chunks per rank v = %d; it runs exactly 2 (V shape)", name, o->v);
        /* dualpipev.py (DualPipeV.step) asserts num_chunks >= num_ranks * 2:
         * its main step runs m - 2p + r + 1 >= 1 times on every rank r. */
        if (o->kind == SCHED_DUALPIPEV && o->m < 2 * o->p)
            return err_set(err, TS_EINVAL,
                           "dualpipev: micro-batches m = %d with p = %d ranks; DualPipeV needs m >= 2p = %d (as "
                           "deepseek-ai/DualPipe's dualpipev.py)",
                           o->m, o->p, 2 * o->p);
    } else if (o->kind == SCHED_DUALPIPE) {
        /* dualpipe.py (DualPipe.step) asserts num_ranks % 2 == 0 and
         * num_chunks % 2 == 0 and num_chunks >= num_ranks * 2. */
        if (o->v != 2)
            return err_set(err, TS_EINVAL, "dualpipe: chunks per rank v = %d; it runs exactly 2 (one per model copy)",
                           o->v);
        if (o->p % 2 != 0 || o->m % 2 != 0 || o->m < 2 * o->p)
            return err_set(err, TS_EINVAL,
                           "dualpipe: p = %d ranks, m = %d micro-batches; DualPipe needs p even, m even and m >= 2p "
                           "(as deepseek-ai/DualPipe's dualpipe.py; e.g. p = %d, m = %d)",
                           o->p, o->m, o->p + o->p % 2,
                           2 * (o->p + o->p % 2) > o->m + o->m % 2 ? 2 * (o->p + o->p % 2) : o->m + o->m % 2);
        if (o->first_stage_layers || o->last_stage_layers || o->stage_layers || (o->num_layers % o->p))
            return err_set(err, TS_EINVAL,
                           "dualpipe: only an even split of the layers over the p = %d stages of each model copy "
                           "(--num-layers a multiple of %d, no first/last stage counts or layout); got %d layers",
                           o->p, o->p, o->num_layers);
    } else if (o->v != 1) {
        return err_set(err, TS_EINVAL,
                       "%s: chunks per rank v = %d; only interleaved (v >= 1), zb-v and dualpipev "
                       "(v = 2) have more than one chunk, use v = 1",
                       name, o->v);
    }
    if (o->kind != SCHED_INTERLEAVED && o->mb_group_size != 0)
        return err_set(err, TS_EINVAL, "%s: micro-batch group size is for interleaved only; leave it 0", name);
    if ((long long)o->p * o->v * o->m > 64LL * 1024 * 1024)
        return err_set(err, TS_EINVAL, "schedule too large: p*v*m = %lld micro-batch stages; at most %lld",
                       (long long)o->p * o->v * o->m, 64LL * 1024 * 1024);
    return TS_OK;
}

/* Insert REDUCE_GRAD of chunk c right after the last backward part of c
 * on each rank (after the SEND_B of its gradient, if any), and OPTIM at
 * the end. */
static int add_reduce_optim(sched *s, ts_err *err)
{
    int rc = TS_OK;
    size_t *last = malloc((size_t)s->v * sizeof *last);
    if (!last)
        return err_set(err, TS_ENOMEM, "schedule: out of memory");
    for (int r = 0; r < s->p && rc == TS_OK; r++) {
        sched_list l = {0};
        size_t n = s->n_actions[r];
        const sched_action *a = s->actions[r];
        for (int c = 0; c < s->v; c++)
            last[c] = n;
        for (size_t i = 0; i < n; i++)
            if (a[i].kind == ACT_B || a[i].kind == ACT_W)
                last[a[i].chunk] = i;
        for (size_t i = 0; i < n && rc == TS_OK; i++) {
            rc = sched_list_push(&l, a[i].kind, a[i].chunk, a[i].mb, a[i].peer, err);
            if (rc == TS_OK)
                l.a[l.n - 1].overlap = a[i].overlap;
            int c = a[i].kind == ACT_B || a[i].kind == ACT_W ? a[i].chunk : -1;
            if (c < 0 || last[c] != i || rc != TS_OK)
                continue;
            /* A whole B's gradient goes out first (a W sends nothing). */
            if (i + 1 < n && a[i + 1].kind == ACT_SEND_B && a[i + 1].chunk == c && a[i + 1].mb == a[i].mb) {
                i++;
                rc = sched_list_push(&l, a[i].kind, a[i].chunk, a[i].mb, a[i].peer, err);
            }
            if (rc == TS_OK)
                rc = sched_list_push(&l, ACT_REDUCE_GRAD, c, -1, -1, err);
        }
        if (rc == TS_OK)
            rc = sched_list_push(&l, ACT_OPTIM, -1, -1, -1, err);
        if (rc == TS_OK)
            sched_build_take(s, r, &l);
        sched_list_free(&l);
    }
    free(last);
    return rc;
}

/* DualPipe's stages: each copy splits num_layers (0 = p) evenly over its p
 * stages; copy 1's k-th stage is global stage p + k (on rank p-1-k), so
 * stages k and p + k hold the same layers [k*n, (k+1)*n). */
static int dual_layers(sched *s, int num_layers)
{
    int p = s->p, n = num_layers ? num_layers / p : 1;
    for (int k = 0; k < p; k++)
        s->stages[k] = s->stages[p + k] = (sched_stage){.first_layer = k * n, .num_layers = n};
    s->num_layers = n * p;
    return TS_OK;
}

int sched_generate(const sched_opts *o, sched **out, ts_err *err)
{
    static int (*const GEN[SCHED_CUSTOM])(const sched_opts *, sched_list *, ts_err *) = {
        sched_gen_gpipe, sched_gen_1f1b, sched_gen_interleaved, sched_gen_zb_h1,
        sched_gen_zb_h2, sched_gen_zb_v, sched_gen_dualpipev,   sched_gen_dualpipe,
    };
    *out = NULL;
    int rc = check_opts(o, err);
    if (rc != TS_OK)
        return rc;
    sched *s = NULL;
    sched_list *lists = NULL;
    bool dual = o->kind == SCHED_DUALPIPE;
    sched_placement pl = dual ? SCHED_PLACE_DUAL : sched_kind_is_v(o->kind) ? SCHED_PLACE_V : SCHED_PLACE_LOOP;
    rc = sched_build_alloc(o->kind, pl, o->p, dual ? o->m / 2 : o->m, o->v, &s, err);
    if (rc != TS_OK)
        return rc;
    rc = dual              ? dual_layers(s, o->num_layers)
         : o->stage_layers ? sched_build_layers_from(s, o->stage_layers, o->num_layers, err)
                           : sched_build_layers(s, o->num_layers, o->first_stage_layers, o->last_stage_layers, err);
    if (rc != TS_OK)
        goto fail;
    lists = calloc((size_t)o->p, sizeof *lists);
    if (!lists) {
        rc = err_set(err, TS_ENOMEM, "schedule: out of memory");
        goto fail;
    }
    rc = GEN[o->kind](o, lists, err);
    if (rc != TS_OK)
        goto fail;
    for (int r = 0; r < o->p; r++)
        sched_build_take(s, r, &lists[r]);
    int g = o->mb_group_size ? o->mb_group_size : o->p;
    if (o->kind == SCHED_INTERLEAVED && o->v > 1 && o->m % g != 0 && (rc = sched_validate(s, NULL, err)) != TS_OK) {
        /* Megatron-core accepts m not a multiple of the group size (the
         * last group is smaller), but for some (p, m, v) its warm-up then
         * waits on itself: say so instead of producing a hanging schedule. */
        err_prefix(err,
                   "interleaved p=%d m=%d v=%d: m is not a multiple of the micro-batch group "
                   "size %d and Megatron-core's order for it cannot run (use m a multiple of %d, "
                   "or another group size): ",
                   o->p, o->m, o->v, g, g);
        goto fail;
    }
    if (o->with_comm && (rc = sched_add_comm(s, err)) != TS_OK)
        goto fail;
    if (o->with_reduce_optim && (rc = add_reduce_optim(s, err)) != TS_OK)
        goto fail;
    free(lists);
    *out = s;
    return TS_OK;
fail:
    if (lists)
        for (int r = 0; r < o->p; r++)
            sched_list_free(&lists[r]);
    free(lists);
    sched_free(s);
    return rc;
}
