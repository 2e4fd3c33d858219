/* Unit tests for the settings trainsim search passes through to every
 * candidate (search_space.moe's router and dispatch settings, search_space.par's
 * non-layout settings): each candidate's configuration carries them while
 * its layout and the layout-bound settings stay the candidate's, and the
 * memory bound stays at most the simulated peak on every simulated
 * candidate with them (fp32 router; MXFP8 dispatch and combine on B200;
 * QK norms; the overlapped EP pairs). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "gpu_specs.h"
#include "search_fixture.h"
#include "sim/config/catalog.h"
#include "sim/config/topo.h"
#include "sim/search/search.h"
#include "sim/search/search_eval.h"

#define GPUS 16

/* The shared small MoE space (search_fixture.h) on 16 GPUs of kind g, t
 * and p up to 2, v = 2. */
static void pass_space(search_space *s, const gpu_spec *g, topo **t)
{
    search_fixture_small_moe(s, GPUS, g, t);
    s->max_pp = 2;
}

/* Evaluate the space; every simulated candidate's bound at most its peak;
 * returns how many were checked. */
static size_t bound_below_peak(const search_space *s)
{
    search_set *set = NULL;
    ts_err e;
    err_clear(&e);
    cr_assert_eq(search_enumerate(s, &set, &e), TS_OK, "%s", e.msg);
    search_eval_opts o = {.threads = 2, .nshards = 1};
    cr_assert_eq(search_evaluate(set, &o, &e), TS_OK, "%s", e.msg);
    size_t checked = 0;
    for (size_t i = 0; i < set->n; i++) {
        const search_cand *c = &set->cands[i];
        if (c->status != SEARCH_SIMULATED && c->status != SEARCH_REJ_MEMORY_SIM)
            continue;
        cr_assert_gt(c->mem_bound_bytes, 0);
        cr_assert_leq(c->mem_bound_bytes, c->r.peak_mem_bytes,
                      "candidate %zu (t %d p %d b %d ep %d): bound %.0f > peak %.0f", i, c->tp, c->pp, c->mbs, c->ep,
                      c->mem_bound_bytes, c->r.peak_mem_bytes);
        checked++;
    }
    search_set_free(set);
    return checked;
}

/* The fixed settings reach every candidate's configuration; the layout and
 * the settings that need a given layout (the overlaps, FSDP, a pipeline
 * layout string) are the candidate's, whatever the space's par holds. */
Test(search_pass, candidates_take_the_fixed_settings)
{
    search_space s;
    topo *t = NULL;
    gpu_spec h100 = {GPU_SPEC_H100};
    pass_space(&s, &h100, &t);
    s.moe.router_fp32 = true;
    s.moe.router_score = 1;
    s.moe.expert_bias = true;
    s.par.no_clip_grad = true;
    s.par.loss_scale = 1024;
    s.par.ddp_bucket_params = 1 << 20;
    s.par.tp = 7; /* layout fields: replaced */
    s.par.layout_given = true;
    s.par.tp_comm_overlap = s.par.overlap_moe_ep_comm = s.par.delay_wgrad = s.par.megatron_fsdp = true;
    search_set *set = NULL;
    ts_err e;
    err_clear(&e);
    cr_assert_eq(search_enumerate(&s, &set, &e), TS_OK, "%s", e.msg);
    size_t seen = 0;
    for (size_t i = 0; i < set->n; i++) {
        if (set->cands[i].status != SEARCH_PENDING)
            continue;
        config c;
        cr_assert_eq(search_cand_config(set, i, &c, &e), TS_OK, "candidate %zu: %s", i, e.msg);
        cr_assert(c.moe.router_fp32 && c.moe.router_score == 1 && c.moe.expert_bias, "candidate %zu", i);
        cr_assert(c.par.no_clip_grad && c.par.loss_scale == 1024 && c.par.ddp_bucket_params == 1 << 20);
        cr_assert_eq(c.par.tp, set->cands[i].tp);
        cr_assert(!c.par.layout_given && !c.par.tp_comm_overlap && !c.par.overlap_moe_ep_comm && !c.par.delay_wgrad &&
                      !c.par.megatron_fsdp,
                  "candidate %zu keeps a layout-bound setting", i);
        seen++;
    }
    cr_assert_gt(seen, 20, "only %zu pending", seen);
    search_set_free(set);
    topo_free(t);
}

/* fp32 router (its GEMM input kept in fp32) with sigmoid scores and the
 * expert bias: the bound stays below the simulated peak. */
Test(search_pass, bound_below_peak_with_fp32_router)
{
    search_space s;
    topo *t = NULL;
    gpu_spec h100 = {GPU_SPEC_H100};
    pass_space(&s, &h100, &t);
    s.moe.router_fp32 = true;
    s.moe.router_score = 1;
    s.moe.expert_bias = true;
    s.moe.z_loss_coeff = 1e-3;
    cr_assert_gt(bound_below_peak(&s), 50);
    topo_free(t);
}

/* MXFP8 dispatch and combine (their quantized copies and scales) under the
 * mxfp8 recipe on B200: the bound stays below the simulated peak. */
Test(search_pass, bound_below_peak_with_mxfp8_dispatch)
{
    search_space s;
    topo *t = NULL;
    gpu_spec b200;
    ts_err e;
    err_clear(&e);
    cr_assert_eq(catalog_gpu("B200-SXM-180GB", &b200, &e), TS_OK, "%s", e.msg);
    pass_space(&s, &b200, &t);
    s.model.fp8_format = FP8_FORMAT_E4M3;
    s.model.fp8_recipe = FP8_RECIPE_MXFP8;
    s.moe.dispatch_fwd_mxfp8 = true;
    s.moe.combine_bwd_mxfp8 = true;
    cr_assert_gt(bound_below_peak(&s), 50);
    topo_free(t);
}

/* The overlapped EP pairs (try_ep_overlap): tried only where ep_pair.h's
 * layout rules hold, each such candidate's configuration runs the overlap,
 * and the bound stays below the simulated peak on them. */
Test(search_pass, ep_overlap_candidates)
{
    search_space s;
    topo *t = NULL;
    gpu_spec h100 = {GPU_SPEC_H100};
    pass_space(&s, &h100, &t);
    s.try_ep_overlap = true;
    s.schedules = (1u << SCHED_1F1B) | (1u << SCHED_INTERLEAVED);
    search_set *set = NULL;
    ts_err e;
    err_clear(&e);
    cr_assert_eq(search_enumerate(&s, &set, &e), TS_OK, "%s", e.msg);
    size_t tried = 0;
    for (size_t i = 0; i < set->n; i++) {
        const search_cand *c = &set->cands[i];
        if (!c->ep_overlap)
            continue;
        tried++;
        cr_assert(c->ep > 1 && c->dispatcher != SEARCH_DISPATCH_ALLGATHER && c->recompute != RECOMPUTE_FULL,
                  "candidate %zu", i);
        cr_assert((c->schedule == SCHED_INTERLEAVED && c->vp > 1) || (c->schedule == SCHED_1F1B && c->pp == 1),
                  "candidate %zu: %s at p %d v %d", i, sched_kind_name((sched_kind)c->schedule), c->pp, c->vp);
        config cfg;
        if (search_cand_config(set, i, &cfg, &e) == TS_OK)
            cr_assert(cfg.par.overlap_moe_ep_comm, "candidate %zu", i);
    }
    cr_assert_gt(tried, 20, "only %zu overlapped candidates", tried);
    search_set_free(set);
    cr_assert_gt(bound_below_peak(&s), 50);
    topo_free(t);
}

/* The overlapped EP pairs with --delay-wgrad-compute (search_space.delay_wgrad):
 * set on the overlapped candidates only; on the interleaved schedule at p > 1
 * the bound counts the combined 1F1B's extra warm-up forward (never below
 * the same layout's without the overlap, above it somewhere) and stays below
 * the simulated peak. */
Test(search_pass, ep_overlap_delay_wgrad_and_combined_bound)
{
    search_space s;
    topo *t = NULL;
    gpu_spec h100 = {GPU_SPEC_H100};
    pass_space(&s, &h100, &t);
    s.try_ep_overlap = true;
    s.delay_wgrad = true;
    s.schedules = 1u << SCHED_INTERLEAVED;
    search_set *set = NULL;
    ts_err e;
    err_clear(&e);
    cr_assert_eq(search_enumerate(&s, &set, &e), TS_OK, "%s", e.msg);
    search_eval_opts o = {.threads = 2, .nshards = 1};
    cr_assert_eq(search_evaluate(set, &o, &e), TS_OK, "%s", e.msg);
    size_t configs = 0, pairs = 0, higher = 0, checked = 0;
    for (size_t i = 0; i < set->n; i++) {
        const search_cand *c = &set->cands[i];
        config cfg;
        if (search_cand_config(set, i, &cfg, &e) == TS_OK) {
            cr_assert_eq(cfg.par.delay_wgrad, c->ep_overlap != 0, "candidate %zu", i);
            configs += c->ep_overlap;
        }
        if (c->status == SEARCH_SIMULATED || c->status == SEARCH_REJ_MEMORY_SIM) {
            cr_assert_leq(c->mem_bound_bytes, c->r.peak_mem_bytes,
                          "candidate %zu (p %d v %d ep %d%s): bound %.0f > peak %.0f", i, c->pp, c->vp, c->ep,
                          c->ep_overlap ? " overlapped" : "", c->mem_bound_bytes, c->r.peak_mem_bytes);
            checked++;
        }
        /* the overlap is the innermost choice: the same layout without it comes just before */
        const search_cand *twin = i > 0 ? &set->cands[i - 1] : NULL;
        if (c->ep_overlap && c->pp > 1 && twin && !twin->ep_overlap && twin->mem_bound_bytes > 0 &&
            c->mem_bound_bytes > 0) {
            cr_assert_eq(twin->pp, c->pp);
            cr_assert_eq(twin->dispatcher, c->dispatcher);
            cr_assert_geq(c->mem_bound_bytes, twin->mem_bound_bytes, "candidate %zu", i);
            pairs++;
            higher += c->mem_bound_bytes > twin->mem_bound_bytes;
        }
    }
    cr_assert_gt(configs, 10, "only %zu overlapped configurations", configs);
    cr_assert_gt(pairs, 10, "only %zu overlapped pairs at p > 1", pairs);
    cr_assert_gt(higher, 0, "the combined 1F1B's warm-up forward raises no bound");
    cr_assert_gt(checked, 20, "only %zu simulated", checked);
    search_set_free(set);
    topo_free(t);
}

/* --qk-layernorm (the query and key norms and their saved inputs): the
 * bound stays below the simulated peak. */
Test(search_pass, bound_below_peak_with_qk_layernorm)
{
    search_space s;
    topo *t = NULL;
    gpu_spec h100 = {GPU_SPEC_H100};
    pass_space(&s, &h100, &t);
    s.model.qk_layernorm = true;
    cr_assert_gt(bound_below_peak(&s), 50);
    topo_free(t);
}
