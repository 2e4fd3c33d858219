/* plan_collapse — one pass's steps folded into collapsed steps (plan_collapse.h). */
#include "sim/core/plan_collapse.h"

#include <stdlib.h>
#include <string.h>

#include "sim/util/grow.h"

static int push_seg(plan *pl, const plan_seg *g)
{
    if (pl->n_segs == pl->cap_segs &&
        grow_to((void **)&pl->segs, &pl->cap_segs, (size_t)pl->n_segs + 1, 256, sizeof *pl->segs))
        return TS_ENOMEM;
    pl->segs[pl->n_segs++] = *g;
    return TS_OK;
}

static int push_mem_ev(plan *pl, int64_t offset_ns, int64_t delta, bool batch)
{
    if (delta == 0)
        return TS_OK;
    if (pl->n_mem_evs == pl->cap_mem_evs &&
        grow_to((void **)&pl->mem_evs, &pl->cap_mem_evs, (size_t)pl->n_mem_evs + 1, 256, sizeof *pl->mem_evs))
        return TS_ENOMEM;
    pl->mem_evs[pl->n_mem_evs++] = (plan_mem_ev){offset_ns, delta, batch};
    return TS_OK;
}

/* Of the n segments' all-to-all time (cat PLAN_CAT_EP, off the compute
 * stream), the part during which a compute segment runs. */
static int64_t ep_hidden_ns(const plan_seg *g, uint32_t n)
{
    int64_t hidden = 0;
    for (uint32_t a = 0; a < n; a++) {
        if (g[a].stream == PLAN_STREAM_COMPUTE || g[a].cat != PLAN_CAT_EP)
            continue;
        int64_t a0 = g[a].offset_ns, a1 = a0 + g[a].dur_ns;
        for (uint32_t c = 0; c < n; c++) {
            if (g[c].stream != PLAN_STREAM_COMPUTE)
                continue;
            int64_t lo = g[c].offset_ns > a0 ? g[c].offset_ns : a0;
            int64_t hi = g[c].offset_ns + g[c].dur_ns < a1 ? g[c].offset_ns + g[c].dur_ns : a1;
            if (hi > lo)
                hidden += hi - lo;
        }
    }
    return hidden;
}

/* Replace steps [base, n_steps) of a pass (compute and TP steps with
 * relative deps, in program order) by collapsed steps: the ops' timeline is
 * computed once here (each step starts when its stream is free and its deps
 * have ended) and kept as segments. split: a new step after each step that
 * closes a gradient bucket (for the chunk's last backward); otherwise one
 * step. *out gets the new range. */
static int collapse(plan *pl, uint32_t base, const plan_step *orig, uint32_t n, const char *name, int cat, bool split,
                    plan_range *out)
{
    int64_t *end_rel = malloc(((size_t)n + 1) * sizeof *end_rel);
    if (!end_rel)
        return TS_ENOMEM;
    int rc = TS_OK;
    uint32_t first_step = pl->n_steps;
    uint32_t piece_first = 0;
    int64_t free_ns[PLAN_STREAMS] = {0};
    plan_step x = plan_step_init(name, PLAN_STREAM_COMPUTE, cat, orig[0].stage, 0);
    x.root = true;
    x.seg_first = pl->n_segs;
    x.mem_first = pl->n_mem_evs;
    int64_t compute_ns = 0, ep_ns = 0;
    (void)base;
    for (uint32_t i = 0; i < n && rc == TS_OK; i++) {
        const plan_step *o = &orig[i];
        int64_t start = free_ns[o->stream];
        for (int k = 0; k < 2; k++)
            if (o->dep[k] >= (int32_t)piece_first && end_rel[o->dep[k]] > start)
                start = end_rel[o->dep[k]];
        end_rel[i] = start + o->dur_ns;
        free_ns[o->stream] = end_rel[i];
        if (end_rel[i] > x.dur_ns)
            x.dur_ns = end_rel[i];
        plan_seg g = {o->name, o->stream, o->cat, start, o->dur_ns, o->flops, o->comm_bytes};
        if (o->stream == PLAN_STREAM_COMPUTE)
            compute_ns += o->dur_ns;
        else if (o->cat == PLAN_CAT_EP)
            ep_ns += o->dur_ns;
        x.flops += o->flops;
        x.alloc_bytes += o->alloc_bytes;
        x.free_bytes += o->free_bytes;
        x.batch_alloc_bytes += o->batch_alloc_bytes;
        x.batch_free_bytes += o->batch_free_bytes;
        if ((rc = push_seg(pl, &g)) || (rc = push_mem_ev(pl, start, o->alloc_bytes, false)) ||
            (rc = push_mem_ev(pl, start, o->batch_alloc_bytes, true)) ||
            (rc = push_mem_ev(pl, end_rel[i], -o->free_bytes, false)) ||
            (rc = push_mem_ev(pl, end_rel[i], -o->batch_free_bytes, true)))
            break;
        if (i + 1 == n || (split && o->dp_bucket >= 0)) {
            x.dp_bucket = split ? o->dp_bucket : -1;
            x.seg_n = pl->n_segs - x.seg_first;
            x.mem_n = pl->n_mem_evs - x.mem_first;
            x.tp_exposed_ns = x.dur_ns - compute_ns;
            /* the all-to-alls' time while no compute runs (whole unless
             * --moe-shared-expert-overlap runs the shared experts beside
             * them), bounded by the step's exposed time */
            ep_ns -= ep_hidden_ns(pl->segs + x.seg_first, x.seg_n);
            x.ep_exposed_ns = ep_ns < x.tp_exposed_ns ? ep_ns : x.tp_exposed_ns;
            /* memory changes in time order (stable insertion sort: few) */
            plan_mem_ev *ev = pl->mem_evs + x.mem_first;
            for (uint32_t a = 1; a < x.mem_n; a++) {
                plan_mem_ev t = ev[a];
                uint32_t b = a;
                while (b > 0 && ev[b - 1].offset_ns > t.offset_ns) {
                    ev[b] = ev[b - 1];
                    b--;
                }
                ev[b] = t;
            }
            uint32_t id;
            if ((rc = plan_push_step(pl, &x, &id)))
                break;
            /* next piece: a fresh timeline (every collective of this piece
             * ended within it) */
            piece_first = i + 1;
            memset(free_ns, 0, sizeof free_ns);
            compute_ns = ep_ns = 0;
            x = plan_step_init(name, PLAN_STREAM_COMPUTE, cat, orig[0].stage, 0);
            x.seg_first = pl->n_segs;
            x.mem_first = pl->n_mem_evs;
        }
    }
    free(end_rel);
    *out = (plan_range){first_step, pl->n_steps - first_step};
    return rc;
}

/* Collapse the pass just built (plan_collapse.h). */
int plan_collapse_pass(plan *pl, uint32_t base, int k, bool buckets, plan_stage *S)
{
    static const char *const names[PLAN_PASSES] = {"F", "B", "I", "W"};
    uint32_t n = pl->n_steps - base;
    if (n == 0) {
        S->pass[k] = (plan_range){base, 0};
        return TS_OK;
    }
    plan_step *orig = malloc(n * sizeof *orig);
    if (!orig)
        return TS_ENOMEM;
    memcpy(orig, pl->steps + base, n * sizeof *orig);
    pl->n_steps = base;
    int cat = k == PLAN_PASS_F ? PLAN_CAT_FWD : PLAN_CAT_BWD;
    int rc = collapse(pl, base, orig, n, names[k], cat, false, &S->pass[k]);
    if (rc == TS_OK && buckets && (k == PLAN_PASS_B || k == PLAN_PASS_W))
        rc = collapse(pl, base, orig, n, names[k], cat, true, &S->pass_final[k]);
    free(orig);
    return rc;
}
